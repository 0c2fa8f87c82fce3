"""The cache kept in step as an informer does (docs/performance.md#scale): list once in pages, then watch.

Covers: the first sync lists pods and nodes in pages of one snapshot; a page that fails mid-list keeps the
previous state and the next list applies the new one; a watch that ends resumes from the resourceVersion of its
last bookmark without a list even after the history moved on; a watch whose version expired (410) is followed by
a list that repairs what the watch missed, and so are three failed watch requests in a row; the periodic resync
makes no list or watch request yet takes GPUs from a node whose device plugin missed its handshake deadline and
answers a handshake the device plugin reset; an assumption the API never shows is dropped by the resync once the
pod stream has been current for the grace period; ``--relist-interval`` lists again; the lock-hold bound: while
thousands of pods are listed, relisted and changed, a probe thread never waits long for the cache lock, and the
longest hold of sync work stays far below what a whole-list apply would take; a deleted pod frees its GPUs among
thousands.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import Placement
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.kube import Kube, KubeError
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.cache import ASSUMPTION_GRACE_SECONDS, ClusterCache
from hami_web.state.sync import ClusterSync

from .helpers import (
    FakeClock,
    RuntimeFactory,
    Scheduler,
    SyncOn,
    annotations_of,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    observe_node,
    observe_pod,
    usage_by_gpu,
    wait_for,
)

SyncFactory = Callable[..., ClusterSync]
POD_LIST = "/api/v1/pods"
NODE_LIST = "/api/v1/nodes"


def running_pod(name: str, node: str, gpu: str, *, memory_mib: int = 1000) -> dict[str, Any]:
    """A pod placed earlier (by us or HAMi): its device annotations hold ``memory_mib`` on ``gpu``."""
    return gpu_pod(name, gpu_limits(1, memory_mib=memory_mib), annotations={
        names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: f"{gpu},NVIDIA,{memory_mib},0:;"})


@pytest.fixture
def apiserver() -> Iterator[LocalCluster]:
    """An API server without streaming lists: these tests are about lists in pages and the watch after them (the
    runtime falls back to pages; tests/state covers streaming lists)."""
    with LocalCluster(bookmark_interval_seconds=0.1, watch_list="refuse") as cluster:
        yield cluster


@pytest.fixture
def make_sync(apiserver: LocalCluster, sync_on: SyncOn) -> SyncFactory:
    """A `ClusterSync` on its own cache and client, listing in pages: ``make_sync(page_size=…, …)``."""
    return functools.partial(sync_on, apiserver, streaming_lists=False)


def _lists(apiserver: LocalCluster, path: str) -> list[dict[str, str]]:
    return [query for query in apiserver.requests("GET", path) if query.get("watch") not in ("true", "True", "1")]


def _watching(sync: ClusterSync) -> None:
    wait_for(lambda: all(status.watching for status in sync.statuses()),
             what="every watch (nodes, pods, resourcequotas and, while preemption is on, poddisruptionbudgets) to be "
                  "open")


def _held(sync: ClusterSync) -> dict[str, str]:
    return {usage.name: usage.devices_text for usage in sync._cache.pod_usages()}


# -- lists --------------------------------------------------------------------------------------------


def test_the_first_sync_lists_in_pages_of_one_snapshot(apiserver: LocalCluster, make_sync: SyncFactory) -> None:
    apiserver.load([gpu_node(f"node{i}", gpus(f"node{i}", 1)) for i in range(5)])
    apiserver.load([running_pod(f"pod{i}", f"node{i % 5}", f"node{i % 5}-gpu0") for i in range(7)])

    sync = make_sync(page_size=3)

    pod_lists = _lists(apiserver, POD_LIST)
    assert [query.get("limit") for query in pod_lists] == ["3", "3", "3"]
    assert ["continue" in query for query in pod_lists] == [False, True, True]
    assert [query.get("limit") for query in _lists(apiserver, NODE_LIST)] == ["3", "3"]
    assert len(_held(sync)) == 7
    assert len(sync._cache.node_views()) == 5


def test_a_page_that_fails_mid_list_keeps_the_previous_state(apiserver: LocalCluster,
                                                             make_sync: SyncFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 2))])
    apiserver.load([running_pod(f"pod{i}", "node1", "node1-gpu0") for i in range(4)])
    sync = make_sync(start=False, page_size=2)
    sync.sync_now()
    before = _held(sync)
    delete_pod(apiserver, "pod0")
    apiserver.load([running_pod("pod9", "node1", "node1-gpu1")])
    apiserver.inject_failure("GET", "pods", status=500, skip=1)

    with pytest.raises(KubeError):
        sync.sync_now()

    assert _held(sync) == before
    sync.sync_now()
    assert set(_held(sync)) == {"pod1", "pod2", "pod3", "pod9"}


def test_a_failed_page_in_the_loop_is_counted_and_the_list_retried(apiserver: LocalCluster,
                                                                   make_sync: SyncFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1))])
    apiserver.load([running_pod(f"pod{i}", "node1", "node1-gpu0") for i in range(4)])
    apiserver.inject_failure("GET", "pods", status=500, skip=1)

    sync = make_sync(page_size=2)

    assert sync.pods.errors == 1 and len(_held(sync)) == 4
    assert [("continue" in query) for query in _lists(apiserver, POD_LIST)] == [False, True, False, True]


# -- watches ------------------------------------------------------------------------------------------


def test_a_watch_resumes_from_its_last_bookmark_without_a_list() -> None:
    # History of 20 changes, bookmarks every 0.1 s: by the time the watch ends (1-2 s), the version of the
    # list is long gone; only the bookmarks' versions let the watch resume without a list.
    with LocalCluster(history_size=20, bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load([gpu_node("node1", gpus("node1", 1)), running_pod("pod1", "node1", "node1-gpu0")])
        kube = Kube.for_url(apiserver.url)
        sync = ClusterSync(ClusterCache(), kube, watch_timeout_seconds=1.0)
        sync.start()
        try:
            assert sync._cache.wait_synced(5)
            _watching(sync)
            for batch in range(4):  # 40 changes the pod watch does not see; bookmarks carry their versions
                apiserver.load([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{batch}-{i}"}}
                                for i in range(10)])
                wait_for(lambda: sync.pods.resource_version == str(apiserver.resource_version),
                         what="a bookmark with the newest version")
            wait_for(lambda: len(apiserver.requests("GET", POD_LIST)) >= 3, timeout_seconds=6,
                     what="the pod watch to end and resume")
            assert sync.pods.lists == 1 and sync.pods.errors == 0
            delete_pod(apiserver, "pod1")
            wait_for(lambda: not _held(sync), what="the resumed watch to report the deletion")
        finally:
            sync.stop()
            kube.close()


def test_a_watch_answered_410_is_followed_by_a_list_that_repairs_the_cache() -> None:
    # No bookmarks: the watch cannot learn newer versions while nothing it watches changes.
    with LocalCluster(history_size=5, bookmark_interval_seconds=3600) as apiserver:
        apiserver.load([gpu_node("node1", gpus("node1", 1)), running_pod("pod1", "node1", "node1-gpu0")])
        kube = Kube.for_url(apiserver.url)
        sync = ClusterSync(ClusterCache(), kube, watch_timeout_seconds=1.0)
        sync.start()
        try:
            assert sync._cache.wait_synced(5)
            _watching(sync)
            apiserver.load([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{i}"}}
                            for i in range(10)])
            wait_for(lambda: sync.pods.lists >= 2, timeout_seconds=6, what="the relist after 410 Gone")
            assert sync.pods.errors == 0  # an expired watch is routine, not a failure
            delete_pod(apiserver, "pod1")
            wait_for(lambda: not _held(sync), what="the new watch to report the deletion")
        finally:
            sync.stop()
            kube.close()


def test_a_watch_that_keeps_failing_is_followed_by_a_list(apiserver: LocalCluster, make_sync: SyncFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1)), running_pod("pod1", "node1", "node1-gpu0")])
    sync = make_sync(watch_timeout_seconds=1.0, refresh_interval_seconds=0.1)  # backoff capped at 0.1 s
    _watching(sync)
    apiserver.inject_failure("GET", "pods", status=500, count=3, watch=True)  # the next three watch requests

    wait_for(lambda: sync.pods.lists >= 2, timeout_seconds=6, what="a list after three failed watches")
    assert sync.pods.errors == 3
    watches = [query.get("watch") == "true" for query in apiserver.requests("GET", POD_LIST)]
    second_list = watches.index(False, 1)
    assert watches[second_list - 3:second_list] == [True, True, True]  # the three that failed


def test_the_relist_interval_lists_again(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1))])
    runtime = make_runtime(relist_interval_seconds=0.5)
    wait_for(lambda: runtime.sync.pods.lists >= 3 and runtime.sync.nodes.lists >= 3, timeout_seconds=6,
             what="two relists")


# -- resync -------------------------------------------------------------------------------------------


def test_the_resync_takes_gpus_from_a_node_past_its_handshake_deadline_without_api_calls(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    clock = FakeClock()
    requested = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(clock.now - 30))
    apiserver.load([gpu_node("node1", gpus("node1", 1), handshake=f"Requesting_{requested}", allocatable_gpus=0),
                    gpu_pod("pod1")])
    runtime = make_runtime(clock=clock, refresh_interval_seconds=0.05)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert runtime.cache.node_views()["node1"].inventory.devices  # 30 s: the plugin may still answer
    _watching(runtime.sync)
    requests_before = len(apiserver.request_log)

    clock.advance(31)
    resyncs = runtime.sync.resyncs
    wait_for(lambda: runtime.sync.resyncs >= resyncs + 3, what="three resyncs")

    # No request of the sync (the settings ConfigMap is published once at start, on its own thread, maybe late).
    assert [request for request in apiserver.request_log[requests_before:] if "/configmaps" not in request[1]] == []
    assert runtime.cache.node_views()["node1"].inventory.devices == ()
    assert scheduler.filter("pod1", ["node1"])["FailedNodes"]["node1"].endswith("NodeInsufficientDevice")


def test_the_resync_answers_a_handshake_the_device_plugin_reported(apiserver: LocalCluster,
                                                                   make_runtime: RuntimeFactory, kube: Kube) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1))])
    runtime = make_runtime(refresh_interval_seconds=0.1)
    kube.patch_node("node1", {"metadata": {"annotations": {names.NODE_HANDSHAKE: "Reported_2025-03-04 05:00:00"}}})

    wait_for(lambda: annotations_of(apiserver, "nodes", "node1")[names.NODE_HANDSHAKE].startswith("Requesting_"),
             what="the resync to answer the handshake")
    assert len(_lists(apiserver, NODE_LIST)) == 1 and runtime.sync.nodes.lists == 1


def test_the_resync_drops_an_assumption_the_api_never_shows(apiserver: LocalCluster,
                                                            make_runtime: RuntimeFactory, kube: Kube) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1")])
    clock = FakeClock()
    runtime = make_runtime(clock=clock)
    pod = apiserver.get("pods", "pod1")
    # A filter booked pod1 and its pod patch never reached the API server.
    placed = runtime.cache.place(uid=pod["metadata"]["uid"], namespace="default", name="pod1",
                                 request=pod_request(pod, RequestDefaults()),
                                 options=pod_options({}, node_policy="binpack", gpu_policy="spread"),
                                 candidates=["node1"])
    assert isinstance(placed, Placement)

    runtime.sync.resync()
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}  # too recent to give up on
    clock.advance(ASSUMPTION_GRACE_SECONDS + 1)

    def dropped() -> bool:
        runtime.sync.resync()
        return usage_by_gpu(runtime) == {}

    wait_for(dropped, what="a bookmark after the grace period and a resync")
    assert len(_lists(apiserver, POD_LIST)) == 1


def test_a_bind_that_loses_to_another_binder_keeps_the_booking_the_watch_showed() -> None:
    """Regression (two-server test, one run in three): our bind re-books its placement without reading the pod;
    when the watch had already shown the pod bound by another server, abandoning ours must restore that booking,
    not leave the GPU looking free until an event that may never come."""
    cache = ClusterCache()
    observe_node(cache, "ADDED", gpu_node("node1", gpus("node1", 2, count=4)))
    pod = gpu_pod("pod1", gpu_limits(1, memory_mib=1000))
    pod["metadata"].update(uid="uid-1", resourceVersion="5")
    placed = cache.place(uid="uid-1", namespace="default", name="pod1", request=pod_request(pod, RequestDefaults()),
                         options=pod_options({}, node_policy="binpack", gpu_policy="spread"), candidates=["node1"],
                         resource_version="5")
    assert isinstance(placed, Placement)
    ours = cache.placed("uid-1")
    assert ours is not None
    theirs = "node1-gpu1,NVIDIA,1000,0:;" if "gpu0" in ours.devices_text else "node1-gpu0,NVIDIA,1000,0:;"
    bound = running_pod("pod1", "node1", theirs.split(",")[0])
    bound["metadata"].update(uid="uid-1", resourceVersion="9")
    bound["metadata"]["annotations"][names.POD_BIND_PHASE] = "success"
    bound["spec"]["nodeName"] = "node1"
    observe_pod(cache, "MODIFIED", bound)  # the other server's booking and Binding, as the watch shows them
    assert cache.held_by("uid-1").devices_text == theirs  # type: ignore[union-attr]

    cache.reassume(ours)  # our bind starts and books its placement again
    assert cache.held_by("uid-1").devices_text == ours.devices_text  # type: ignore[union-attr]
    cache.forget("uid-1")  # our booking write was refused: the pod is bound elsewhere
    held = cache.held_by("uid-1")
    assert held is not None and held.devices_text == theirs


# -- many pods ----------------------------------------------------------------------------------------


NODES, GPUS_PER_NODE, PODS = 250, 8, 3000


def _cluster_of_thousands(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node(f"node{n}", gpus(f"node{n}", GPUS_PER_NODE)) for n in range(NODES)])
    apiserver.load([running_pod(f"pod{i}", f"node{i % NODES}", f"node{i % NODES}-gpu{(i // NODES) % GPUS_PER_NODE}")
                    for i in range(PODS)])


def test_sync_work_never_holds_the_cache_lock_long_with_thousands_of_pods(apiserver: LocalCluster,
                                                                          make_runtime: RuntimeFactory) -> None:
    _cluster_of_thousands(apiserver)
    runtime = make_runtime(start=False)
    cache = runtime.cache
    longest_wait = [0.0]
    probing = threading.Event()

    def probe() -> None:  # stands in for /filter: how long until it gets the lock
        while not probing.is_set():
            started = time.perf_counter()
            cache.held_by("nobody")
            longest_wait[0] = max(longest_wait[0], time.perf_counter() - started)
            time.sleep(0.0005)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        runtime.sync.sync_now()  # first list: 3,000 pods on 250 nodes
        for i in range(0, PODS, 2):  # half the pods move to another GPU; a relist applies it
            runtime.kube.patch_pod("default", f"pod{i}", {"metadata": {"annotations": {
                names.POD_DEVICES_ALLOCATED: f"node{i % NODES}-gpu7,NVIDIA,500,0:;"}}})
        runtime.sync.sync_now()
    finally:
        probing.set()
        prober.join()

    assert len(cache.pod_usages()) == PODS
    holds = cache.lock_hold_snapshot()
    longest_sync_hold = max(holds[work].max_seconds for work in ("pods", "nodes", "resync"))
    # Generous bounds (a shared 2-core machine): applying 3,000 pods under the lock took ~0.3 s before.
    assert longest_sync_hold < 0.05, holds
    assert longest_wait[0] < 0.25
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_cache_lock_hold_max_seconds{work="pods"}' in metrics
    assert 'hami_web_cache_lock_hold_seconds_bucket{le="+Inf",work="pods"}' in metrics


def test_a_deleted_pod_frees_its_gpu_among_thousands(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    _cluster_of_thousands(apiserver)
    runtime = make_runtime()
    assert usage_by_gpu(runtime)["node0-gpu0"] == (2, 2000, 0)  # pod0 and pod2000

    delete_pod(apiserver, "pod0")

    wait_for(lambda: usage_by_gpu(runtime)["node0-gpu0"] == (1, 1000, 0), what="pod0's deletion to free its share")
    assert len(runtime.cache.pod_usages()) == PODS - 1


def test_runtime_lists_pods_in_pages(apiserver: LocalCluster, runtime: Runtime) -> None:
    assert [query.get("limit") for query in _lists(apiserver, POD_LIST)] == ["250"]
