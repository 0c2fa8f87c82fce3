"""Fixtures of the dashboard tests: the demo cluster in the in-process API server, scheduled by a real runtime.

The demo's pods go through ``/filter`` and ``/bind`` as kube-scheduler would send them, so the decision log,
the pending pod (``ml/too-big``) and the bookings the pages show are the server's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import pytest
import yaml

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from tests.integration.helpers import DSMLU_LOCK, SYNC_TIMEOUT_SECONDS, Scheduler, busy_nodes, release_lock, wait_for

PENDING_POD = "ml/too-big"


def ui_get(runtime: Runtime, path: str) -> Any:
    """GET a dashboard path of the running server: the JSON of ``/ui/api/…``, else the page's text."""
    response = runtime.app.test_client().get(path)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json() if path.startswith("/ui/api") else response.get_data(as_text=True)


@dataclass(slots=True)
class DemoCluster:
    """The API server, the running runtime, and what each demo pod's filter answered."""

    apiserver: LocalCluster
    runtime: Runtime
    outcomes: dict[str, str]


def _demo_pods() -> list[dict[str, Any]]:
    text = resources.files("hami_web").joinpath("examples/pods.yaml").read_text()
    return [pod for pod in yaml.safe_load_all(text) if pod]


def play_demo(apiserver: LocalCluster, runtime: Runtime) -> dict[str, str]:
    """Create each demo pod and filter (then bind) it on every node; returns ``pod → node or error``."""
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    nodes = [node["metadata"]["name"] for node in apiserver.list("nodes")]
    outcomes = {}
    for pod in _demo_pods():
        namespace = pod["metadata"].get("namespace", "default")
        name = pod["metadata"]["name"]
        apiserver.load([pod])
        if pod["spec"].get("nodeName"):
            continue  # already bound: kube-scheduler never filters it
        answer = scheduler.filter(name, nodes, namespace)
        chosen = answer.get("NodeNames") or []
        if answer["Error"] or len(chosen) != 1:
            outcomes[f"{namespace}/{name}"] = answer["Error"] or "unschedulable"
            continue
        bound = scheduler.bind(name, chosen[0], namespace)
        release_lock(runtime.kube, name, chosen[0], namespace=namespace)  # as the device plugin does
        if DSMLU_LOCK in (apiserver.get("nodes", chosen[0])["metadata"].get("annotations") or {}):
            runtime.kube.patch_node(chosen[0], {"metadata": {"annotations": {DSMLU_LOCK: None}}})  # Cambricon's plugin
        # The next pod is filtered on the cluster as the device plugins left it, as kube-scheduler's next cycle sees
        # it: under load the locks' removal may still be on its way through the watch, and a node busy binding is
        # tried last, so a later pod would land elsewhere (full-suite runs placed the MIG pods otherwise).
        wait_for(lambda: not busy_nodes(runtime.cache), timeout_seconds=10.0, what="the cache to see every lock gone")
        outcomes[f"{namespace}/{name}"] = bound["Error"] or chosen[0]
    return outcomes


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoCluster]:
    """The demo cluster with every demo pod played, shared by a module's tests (the pages only read)."""
    with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load_file(str(resources.files("hami_web").joinpath("examples/cluster.yaml")))
        # As the demo runs it: with --enable-ascend.
        runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0, enable_ascend=True),
                                kube=Kube.for_url(apiserver.url))
        runtime.start()
        try:
            assert runtime.cache.wait_synced(SYNC_TIMEOUT_SECONDS), "runtime did not complete its first sync"
            yield DemoCluster(apiserver=apiserver, runtime=runtime, outcomes=play_demo(apiserver, runtime))
        finally:
            runtime.stop()
