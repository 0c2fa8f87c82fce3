"""A watch that stays connected but delivers nothing cannot freeze the cache (docs/observability.md#silent-watches).

Covers: a pod watch held silent by the API server (the in-process server's ``silent`` fault, as a proxy that stops
forwarding) is closed after ``--watch-silence-bound`` and re-opened from the last resourceVersion received, so a
deletion made during the silence and one made after it both reach the cache within the bound, without a list, and
the re-open is logged at INFO with its reason; a watch silent twice in a row is followed by a list; a re-opened
watch whose version has expired (410) is followed by a list that repairs the cache; ``/readyz`` holds while an
accepted watch is open however long it is silent, never flaps on a quiet cluster while silent watches are closed and
re-opened, and fails once no watch has been accepted (and nothing heard) for the bound; the seconds since the last
event or bookmark are a gauge per resource on ``/metrics``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from prometheus_client import generate_latest

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.metrics import Metrics
from hami_web.state.sync import ClusterSync

from .helpers import FakeClock, SyncOn, delete_pod, gpu_limits, gpu_node, gpu_pod, gpus, wait_for

BOUND_SECONDS = 1.0
# Slack on top of the bound for the re-open request and the event's way into the cache on a loaded machine.
SLACK_SECONDS = 2.0
POD_LIST = "/api/v1/pods"


def _running_pod(name: str, gpu: str) -> dict[str, Any]:
    return gpu_pod(name, gpu_limits(1, memory_mib=1000), annotations={
        names.POD_ASSIGNED_NODE: "node1", names.POD_DEVICES_ALLOCATED: f"{gpu},NVIDIA,1000,0:;"})


def _cluster_objects() -> list[dict[str, Any]]:
    return [gpu_node("node1", gpus("node1", 2)), _running_pod("pod1", "node1-gpu0"),
            _running_pod("pod2", "node1-gpu1")]


def _held(sync: ClusterSync) -> set[str]:
    return {usage.name for usage in sync._cache.pod_usages()}


def _watches(apiserver: LocalCluster) -> int:
    return sum(query.get("watch") == "true" for query in apiserver.requests("GET", POD_LIST))


@pytest.fixture
def bounded_sync(sync_on: SyncOn) -> SyncOn:
    """``bounded_sync(apiserver, **options)``: `sync_on` whose watches are bounded by `BOUND_SECONDS`."""
    def make(apiserver: LocalCluster, **options: Any) -> ClusterSync:
        options.setdefault("watch_silence_bound_seconds", BOUND_SECONDS)
        options.setdefault("streaming_lists", False)  # the faults below are aimed at the watch after a list
        return sync_on(apiserver, **options)

    return make


def test_changes_during_and_after_a_silent_watch_reach_the_cache_within_the_bound(
        bounded_sync: SyncOn, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hami_web.state.reflector")
    with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load(_cluster_objects())
        # The first pod watch (the one after the list) is held open and silent for far longer than the bound.
        apiserver.inject_failure("GET", "pods", mode="silent", seconds=60, watch=True)
        sync = bounded_sync(apiserver)
        assert _held(sync) == {"pod1", "pod2"}
        wait_for(lambda: _watches(apiserver) >= 1, what="the silent pod watch to open")

        delete_pod(apiserver, "pod1")  # during the silence
        deleted_at = time.monotonic()
        wait_for(lambda: "pod1" not in _held(sync), timeout_seconds=BOUND_SECONDS + SLACK_SECONDS,
                 what="the deletion made during the silence")
        assert time.monotonic() - deleted_at <= BOUND_SECONDS + SLACK_SECONDS

        delete_pod(apiserver, "pod2")  # after it, on the re-opened watch
        wait_for(lambda: not _held(sync), timeout_seconds=BOUND_SECONDS + SLACK_SECONDS,
                 what="the deletion made after the silence")

        assert sync.pods.reopens == 1
        assert sync.pods.lists == 1  # the re-opened watch replayed what the silence hid: no list needed
        assert _watches(apiserver) == 2
        reopened = [record.getMessage() for record in caplog.records if "re-opening the watch" in record.getMessage()]
        assert len(reopened) == 1 and reopened[0].startswith("pods: re-opening the watch from resourceVersion ")
        assert "nothing received for 1s" in reopened[0]


def test_a_watch_silent_twice_in_a_row_is_followed_by_a_list(bounded_sync: SyncOn,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hami_web.state.reflector")
    with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load(_cluster_objects())
        apiserver.inject_failure("GET", "pods", mode="silent", seconds=60, count=2, watch=True)
        sync = bounded_sync(apiserver)
        delete_pod(apiserver, "pod1")

        wait_for(lambda: sync.pods.lists == 2, timeout_seconds=2 * BOUND_SECONDS + SLACK_SECONDS,
                 what="a list after the second silence")
        assert "pod1" not in _held(sync)
        assert sync.pods.reopens == 2 and sync.pods.errors == 0  # silence is not an API error
        assert any(record.getMessage() == "pods: listing (watch silent 2 times in a row)" for record in caplog.records)


def test_a_reopened_watch_whose_version_expired_is_followed_by_a_list(bounded_sync: SyncOn,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hami_web.state.reflector")
    with LocalCluster(history_size=5, bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load(_cluster_objects())
        apiserver.inject_failure("GET", "pods", mode="silent", seconds=60, watch=True)
        sync = bounded_sync(apiserver)
        wait_for(lambda: _watches(apiserver) >= 1, what="the silent pod watch to open")
        delete_pod(apiserver, "pod1")
        apiserver.load([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{i}"}} for i in range(10)])

        wait_for(lambda: sync.pods.lists == 2, timeout_seconds=BOUND_SECONDS + SLACK_SECONDS,
                 what="the list after the re-opened watch got 410")
        assert "pod1" not in _held(sync)
        assert sync.pods.reopens == 1
        assert any(record.getMessage().startswith("pods: listing (watch from resourceVersion ")
                   and "expired" in record.getMessage() for record in caplog.records)


def test_an_open_watch_is_heard_however_long_it_is_silent_and_the_gauge_says_how_long(bounded_sync: SyncOn) -> None:
    clock = FakeClock()
    with LocalCluster(bookmark_interval_seconds=3600) as apiserver:  # no bookmark unless a test asks for one
        apiserver.load(_cluster_objects())
        sync = bounded_sync(apiserver, clock=clock, watch_silence_bound_seconds=90.0)
        wait_for(lambda: all(status.watching for status in sync.statuses()), what="every watch to be open")
        assert sync.readiness() == (True, "cluster cache is in sync")

        clock.advance(91)  # nothing changes: kube-apiserver sends nothing, the watches stay open and accepted
        assert sync.readiness() == (True, "cluster cache is in sync")
        scrape = generate_latest(Metrics(sync._cache, sync).registry).decode()
        assert 'hami_web_watch_silence_seconds{resource="pods"} 91.0' in scrape
        assert 'hami_web_watch_reopens_total{resource="pods"} 0.0' in scrape


def test_readiness_never_flaps_on_a_quiet_cluster_while_silent_watches_are_reopened(bounded_sync: SyncOn) -> None:
    with LocalCluster(bookmark_interval_seconds=3600) as apiserver:  # nothing changes, no bookmark is sent
        apiserver.load(_cluster_objects())
        sync = bounded_sync(apiserver)
        wait_for(lambda: all(status.watching for status in sync.statuses()), what="every watch to be open")
        answers = set()
        until = time.monotonic() + 5 * BOUND_SECONDS
        while time.monotonic() < until:
            answers.add(sync.readiness())
            time.sleep(0.02)
        assert answers == {(True, "cluster cache is in sync")}
        assert sync.pods.reopens >= 2 and sync.nodes.reopens >= 2  # the silent watches were closed and re-opened


def test_readiness_fails_once_no_watch_is_accepted_for_the_bound(bounded_sync: SyncOn) -> None:
    with LocalCluster(bookmark_interval_seconds=3600) as apiserver:
        apiserver.load(_cluster_objects())
        sync = bounded_sync(apiserver)
        wait_for(lambda: all(status.watching for status in sync.statuses()), what="every watch to be open")
        apiserver.inject_failure("GET", "pods", status=503, count=10_000)  # re-opens and lists refused from now
        reason = wait_for(lambda: (lambda answer: answer[1] if not answer[0] else None)(sync.readiness()),
                          timeout_seconds=2 * BOUND_SECONDS + SLACK_SECONDS + 3,
                          what="readiness to fail once the silent pod watch is closed and never accepted again")
        assert reason.startswith("pods: nothing heard from the API for ")
        assert "(no event, bookmark or watch accepted; bound 1s)" in reason
