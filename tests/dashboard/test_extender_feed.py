"""How the extender feeds the dashboard's decision log, on a small cluster of its own.

Covers: a filter answered in the full-``Nodes`` form (``nodeCacheCapable: false``) is logged with its node and
GPUs; a refused pod shows on the pending page until a later filter places it; a failed bind is logged as an
error with its message; a malformed filter body is logged as an error and does not break the log.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hami_web.core import names
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from tests.integration.helpers import (
    SYNC_TIMEOUT_SECONDS,
    Scheduler,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    wait_for,
)

Cluster = tuple[LocalCluster, Runtime, Scheduler]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load([gpu_node("node-a", gpus("node-a", 2, memory_mib=8000))])
        runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0), kube=Kube.for_url(apiserver.url))
        runtime.start()
        try:
            assert runtime.cache.wait_synced(SYNC_TIMEOUT_SECONDS)
            yield apiserver, runtime, Scheduler(runtime.app.test_client(), apiserver)
        finally:
            runtime.stop()


def test_a_filter_with_full_node_objects_is_logged_with_node_and_gpus(cluster: Cluster) -> None:
    apiserver, runtime, scheduler = cluster
    apiserver.load([gpu_pod("p1", gpu_limits(memory_mib=3000))])
    answer = scheduler.post("/filter", {"Pod": scheduler.pod("p1"), "Nodes": {"items": apiserver.list("nodes")}})
    assert [node["metadata"]["name"] for node in answer["Nodes"]["items"]] == ["node-a"]
    [decision] = runtime.decisions.decisions()
    assert (decision.kind, decision.pod, decision.result, decision.node) == ("filter", "default/p1", "placed", "node-a")
    assert "3000MiB" in decision.gpus
    # The booking is the server's alone until /bind: the dashboard (which reads the cache) counts it, the API not yet.
    assert decision.message == "booked in this server's memory; the API shows it once bound"
    assert [usage.name for usage in runtime.cache.pod_usages()] == ["p1"]
    assert names.POD_DEVICES_ALLOCATED not in (scheduler.pod("p1")["metadata"].get("annotations") or {})


def test_a_refused_pod_is_pending_until_a_later_filter_places_it(cluster: Cluster) -> None:
    apiserver, runtime, scheduler = cluster
    apiserver.load([gpu_pod("big", gpu_limits(memory_mib=6000)), gpu_pod("hog", gpu_limits(2, memory_mib=5000))])
    scheduler.schedule("hog", ["node-a"])
    assert scheduler.filter("big", ["node-a"])["FailedNodes"]
    client = runtime.app.test_client()
    assert [pod["pod"] for pod in client.get("/ui/api/pending").get_json()["pods"]] == ["default/big"]
    delete_pod(apiserver, "hog")
    wait_for(lambda: not runtime.cache.pod_usages(), what="the hog's GPUs freed by the watch")
    assert scheduler.filter("big", ["node-a"])["NodeNames"] == ["node-a"]
    assert client.get("/ui/api/pending").get_json()["pods"] == []


def test_a_failed_bind_is_logged_as_an_error_with_its_message(cluster: Cluster) -> None:
    apiserver, runtime, scheduler = cluster
    apiserver.load([gpu_pod("p1", gpu_limits(memory_mib=1000))])
    scheduler.filter("p1", ["node-a"])
    answer = scheduler.bind("p1", "node-b")
    assert answer["Error"]
    decision = runtime.decisions.decisions()[0]
    assert (decision.kind, decision.result, decision.message) == ("bind", "error", answer["Error"])


def test_a_malformed_filter_body_is_logged_as_an_error(cluster: Cluster) -> None:
    _, runtime, scheduler = cluster
    answer = scheduler.post("/filter", ["not", "an", "object"])
    assert answer["Error"]
    decision = runtime.decisions.decisions()[0]
    assert (decision.pod, decision.result) == ("default/?", "error")
