"""Readiness (docs/observability.md#probes) and the device-plugin handshake (docs/wire-formats.md#handshake).

Covers: ``/readyz`` 503 before the first sync and 200 after, 503 again when the API has been unreachable for
over 3 refresh periods (fake clock), counted from the moment an open watch broke, 200 while a quiet watch is
healthy; a filter that arrives before the first
sync waits for it (bounded) and is answered once the sync completes, or answers ``Error`` when it does not come
in time, while a pod asking for no GPU passes at once; the handshake: a node whose ``hami.io/node-handshake`` is
missing or ``Reported_…`` gets ``Requesting_<YYYY-MM-DD HH:MM:SS>`` (UTC) written; a node ``Requesting_`` for
over 60 s whose kubelet reports no ``nvidia.com/gpu`` (0 or absent), or ``Deleted_…``, gets no pods (reason
NodeInsufficientDevice), in either time layout; a recent ``Requesting_`` or one with GPUs allocatable keeps its
GPUs.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from hami_web.core import names
from hami_web.extender.filtering import Filter
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings

from .helpers import (
    FakeClock,
    RuntimeFactory,
    Scheduler,
    annotations_of,
    container,
    gpu_node,
    gpu_pod,
    gpus,
    wait_for,
)

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()


def _readyz(runtime: Runtime) -> tuple[int, dict]:
    response = runtime.app.test_client().get("/readyz")
    return response.status_code, response.get_json()


# -- readiness ---------------------------------------------------------------------------------------------


def test_readyz_is_503_before_the_first_sync_and_200_after(apiserver: LocalCluster,
                                                           make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1")])
    runtime = make_runtime(start=False)
    status, body = _readyz(runtime)
    assert status == 503 and "first sync" in body["reason"]

    runtime.start()
    assert runtime.cache.wait_synced(5)
    assert _readyz(runtime)[0] == 200
    assert runtime.app.test_client().get("/healthz").status_code == 200


def test_readyz_turns_503_when_the_api_is_unreachable_for_three_refresh_periods(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    clock = FakeClock()
    runtime = make_runtime(clock=clock, refresh_interval_seconds=10.0)
    clock.advance(100)
    # A quiet but healthy watch is in step at its next bookmark (100 s without one is beyond the silence bound).
    wait_for(lambda: _readyz(runtime)[0] == 200, what="readiness at the next bookmark")
    apiserver.stop()
    wait_for(lambda: runtime.sync.pods.last_error and runtime.sync.nodes.last_error, timeout_seconds=5,
             what="the watches to fail")
    clock.advance(29)
    assert _readyz(runtime)[0] == 200
    clock.advance(2)
    status, body = _readyz(runtime)
    assert status == 503 and "last in step with the API 31s ago (last error: " in body["reason"]


def test_readiness_counts_the_three_refresh_periods_from_the_moment_an_open_watch_broke() -> None:
    # No bookmark comes (an hour apart): the watches' last event is the list, 60 s before the API goes away.
    clock = FakeClock()
    with LocalCluster(bookmark_interval_seconds=3600) as cluster:
        runtime = build_runtime(Settings.of(refresh_interval_seconds=10.0), kube=Kube.for_url(cluster.url), clock=clock)
        runtime.start()
        try:
            assert runtime.cache.wait_synced(30)
            wait_for(lambda: all(status.watching for status in runtime.sync.statuses()), what="every watch open")
            clock.advance(60)
            assert _readyz(runtime)[0] == 200  # quiet, within the silence bound: in step
            for resource in ("pods", "nodes"):  # a re-open that races the stop is refused, not accepted
                cluster.inject_failure("GET", resource, status=503, count=1000, watch=True)
            cluster.stop()
            wait_for(lambda: runtime.sync.pods.last_error and runtime.sync.nodes.last_error, what="the watches to fail")
            clock.advance(29)
            assert _readyz(runtime)[0] == 200  # 29 s since the break, not 89 s since the last event
            clock.advance(2)
            status, body = _readyz(runtime)
            assert status == 503 and "last in step with the API 31s ago" in body["reason"]
        finally:
            runtime.stop()


def _short_wait(runtime: Runtime, seconds: float) -> None:
    """Give the runtime's filter a shorter first-sync wait than the production 10 s."""
    runtime.extender.filterer = Filter(policy=runtime.settings.policy, cache=runtime.cache, events=runtime.events,
                                       metrics=runtime.metrics, sync_wait_seconds=seconds,
                                       deadline_seconds=runtime.settings.binding.extender_deadline_seconds)


def test_a_filter_before_the_first_sync_waits_for_it(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1")])
    runtime = make_runtime(start=False)
    _short_wait(runtime, 5.0)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    timer = threading.Timer(0.2, runtime.start)
    timer.start()
    try:
        answer = scheduler.filter("pod1", ["node1"])
    finally:
        timer.join()
    assert answer["Error"] == "" and answer["NodeNames"] == ["node1"]


def test_a_filter_before_the_first_sync_gives_up_with_an_error(apiserver: LocalCluster,
                                                                make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1"), gpu_pod("web", containers=[container("web")])])
    runtime = make_runtime(start=False)
    _short_wait(runtime, 0.2)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    answer = scheduler.filter("pod1", ["node1"])

    assert "first sync" in answer["Error"] and not answer.get("NodeNames")
    assert scheduler.filter("web", ["node1"])["NodeNames"] == ["node1"]
    assert names.POD_ASSIGNED_NODE not in scheduler.pod("pod1")["metadata"]["annotations"]
    assert runtime.cache.placed(scheduler.pod("pod1")["metadata"]["uid"]) is None


# -- handshake ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("handshake", [None, "Reported_2025-03-04 05:00:00", "Reported 2025.03.04 05:00:00"])
def test_a_missing_or_reported_handshake_is_answered_with_requesting(apiserver: LocalCluster,
                                                                     make_runtime: RuntimeFactory,
                                                                     handshake: str | None) -> None:
    apiserver.load([gpu_node("node1", handshake=handshake)])
    make_runtime(clock=FakeClock(NOW))
    # Written right after the first node list; the cache may report synced a moment earlier.
    wait_for(lambda: annotations_of(apiserver, "nodes", "node1").get(names.NODE_HANDSHAKE)
             == "Requesting_2025-03-04 05:06:07", what="the handshake to be written")


def test_the_handshakes_a_list_shows_due_do_not_hold_up_the_first_sync(apiserver: LocalCluster,
                                                                       make_runtime: RuntimeFactory) -> None:
    """After a restart every node's plugin has reported: answering them one patch per node on the list's thread
    held up readiness by tens of seconds at 5,000 nodes (docs/performance.md#scale). They are answered once the
    first sync is complete, on the resync's thread, long before its 300 s interval."""
    apiserver.load([gpu_node(f"node{i}", handshake="Reported_2025-03-04 05:00:00") for i in range(3)])
    apiserver.inject_failure("PATCH", "nodes", mode="delay", seconds=5.0, count=3)  # a slow API server
    started = time.monotonic()
    make_runtime(clock=FakeClock(NOW))  # returns once synced: 15 s and more when the list wrote them
    assert time.monotonic() - started < 5.0
    assert all(annotations_of(apiserver, "nodes", f"node{i}")[names.NODE_HANDSHAKE].startswith("Reported")
               for i in range(3))
    wait_for(lambda: all(annotations_of(apiserver, "nodes", f"node{i}")[names.NODE_HANDSHAKE]
                         == "Requesting_2025-03-04 05:06:07" for i in range(3)), timeout_seconds=30,
             what="the resync to answer every handshake")


def test_a_requesting_or_deleted_handshake_is_left_alone(apiserver: LocalCluster,
                                                         make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", handshake="Requesting_2025-03-04 05:06:00"),
                    gpu_node("node2", handshake="Deleted_2025-03-04 05:06:00")])
    runtime = make_runtime(clock=FakeClock(NOW))
    runtime.sync.sync_now()  # its resync answers the due handshakes before it returns
    assert annotations_of(apiserver, "nodes", "node1")[names.NODE_HANDSHAKE] == "Requesting_2025-03-04 05:06:00"
    assert annotations_of(apiserver, "nodes", "node2")[names.NODE_HANDSHAKE] == "Deleted_2025-03-04 05:06:00"


@pytest.mark.parametrize(("handshake", "allocatable", "usable"), [
    ("Requesting_2025-03-04 05:05:00", 0, False),          # 67 s old, kubelet reports no GPUs
    ("Requesting_2025.03.04 05:05:00", 0, False),          # the older layout
    ("Requesting_2025-03-04 05:05:00", None, False),       # nvidia.com/gpu absent
    ("Deleted_2025-03-04 05:06:00", 4, False),
    ("Requesting_2025-03-04 05:05:30", 0, True),           # 37 s: the plugin may still answer
    ("Requesting_2025-03-04 05:05:00", 4, True),           # the kubelet still has GPUs
    ("Requesting_2025.03.04 05:05:00", 4, True),
])
def test_a_node_whose_device_plugin_is_gone_gets_no_pods(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                                         handshake: str, allocatable: int | None,
                                                         usable: bool) -> None:
    node = gpu_node("node1", gpus("node1", 4), handshake=handshake, allocatable_gpus=allocatable)
    if allocatable is None:
        del node["status"]["allocatable"]["nvidia.com/gpu"]
    apiserver.load([node, gpu_pod("pod1")])
    runtime = make_runtime(clock=FakeClock(NOW))
    answer = Scheduler(runtime.app.test_client(), apiserver).filter("pod1", ["node1"])
    if usable:
        assert answer["NodeNames"] == ["node1"]
    else:
        assert not answer["NodeNames"]
        assert answer["FailedNodes"]["node1"].endswith(" NodeInsufficientDevice")
