"""The dashboard on namespace quotas (docs/quotas.md#namespace-quotas), from the running server's memory.

Covers: the overview's JSON twin and page list each namespace under a device quota with its use against its limit
(bookings placed by the server counted, its unlimited resources shown with their use, a namespace without
quota not listed); the pending page's explanation of
a pod refused by its namespace's quota names the limit, the use and the pod's booking, and ``ResourceQuotaNotFit``
is the grouped cause of its last filter.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources

import pytest

from hami_web.core import names
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from tests.dashboard.conftest import ui_get
from tests.integration.helpers import SYNC_TIMEOUT_SECONDS, Scheduler, gpu_limits, gpu_pod, release_lock, wait_for

TEAM = "team-q"


@pytest.fixture(scope="module")
def served() -> Iterator[Runtime]:
    with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load_file(str(resources.files("hami_web").joinpath("examples/cluster.yaml")))
        apiserver.load([{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": TEAM},
                         "spec": {"hard": {"limits.nvidia.com/gpumem": "5000"}}}])
        runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0), kube=Kube.for_url(apiserver.url))
        runtime.start()
        try:
            assert runtime.cache.wait_synced(SYNC_TIMEOUT_SECONDS)
            wait_for(lambda: runtime.cache.namespace_quota(TEAM).limits, what="quota")
            scheduler = Scheduler(runtime.app.test_client(), apiserver)
            nodes = [node["metadata"]["name"] for node in apiserver.list("nodes")]
            apiserver.load([gpu_pod("first", gpu_limits(memory_mib=4000, cores=10), namespace=TEAM),
                            gpu_pod("second", gpu_limits(memory_mib=2000, cores=10), namespace=TEAM)])
            node = scheduler.schedule("first", nodes, TEAM)
            release_lock(runtime.kube, "first", node, namespace=TEAM)
            refused = scheduler.filter("second", nodes, TEAM)
            assert not refused["NodeNames"], refused
            yield runtime
        finally:
            runtime.stop()


def test_the_overview_lists_each_namespace_under_quota(served: Runtime) -> None:
    quotas = ui_get(served, "/ui/api/overview")["quotas"]
    assert quotas == [{"namespace": TEAM, "resource": "nvidia.com/gpucores", "limit": None, "used": 10,
                       "limit_mib": None},
                      {"namespace": TEAM, "resource": "nvidia.com/gpumem", "limit": 5000, "used": 4000,
                       "limit_mib": 5000}]
    page = ui_get(served, "/ui/")
    assert 'id="namespace-quotas"' in page and f'data-namespace="{TEAM}"' in page and "80%" in page


def test_the_pending_page_says_the_pod_waits_on_its_quota(served: Runtime) -> None:
    pods = {pod["pod"]: pod for pod in ui_get(served, "/ui/api/pending")["pods"]}
    second = pods[f"{TEAM}/second"]
    causes = {group["cause"]: group["nodes"] for group in second["last_filter"]["groups"]}
    # The NVIDIA nodes refuse it for the quota (the other families' nodes have no NVIDIA GPU at all).
    assert causes[names.RESOURCE_QUOTA_NOT_FIT] == max(count for cause, count in causes.items()
                                                       if cause != names.NODE_INSUFFICIENT_DEVICE)
    assert "nvidia.com/gpumem: limit 5000, used 4000, request 2000" in second["now"]["quota"]
    assert "device quota" in second["now"]["message"]
