"""Events yield to a burst: held while they are recorded at a burst's rate, sent in order once it is over.

Covers: events recorded faster than ``BUSY_EVENTS_PER_SECOND`` are not written while the burst goes on (but for
those sent before the rate showed a burst), then all of them are, in the order recorded, each with the time it was
recorded; a steady trickle (below the rate) is written at once; no event waits longer than ``MAX_DEFER_SECONDS``
however long the burst; ``flush`` sends held events at once. Against the in-process API server, through the
runtime's own recorder and client.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from hami_web.extender import events as events_module
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import NAMESPACE, events_for


def _record(runtime: Runtime, pod: str, index: int) -> None:
    runtime.events.record(namespace=NAMESPACE, name=pod, uid=f"uid-{pod}", reason="FilteringSucceed",
                          message=f"placement {index}")


def _wait_for(apiserver: LocalCluster, pod: str, count: int, timeout_seconds: float) -> list[dict]:
    deadline = time.monotonic() + timeout_seconds
    while True:
        found = events_for(apiserver, pod)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_burst_of_events_is_held_then_written_in_order_with_its_recording_times(
        runtime: Runtime, apiserver: LocalCluster) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    burst = events_module.BUSY_EVENTS_PER_SECOND * 3
    for index in range(burst):
        _record(runtime, "burst", index)
    recorded_by = datetime.now(UTC)
    assert runtime.events.busy()

    time.sleep(0.5)  # still within the burst's second: only what went out before the rate showed a burst
    assert len(events_for(apiserver, "burst")) < events_module.BUSY_EVENTS_PER_SECOND

    written = _wait_for(apiserver, "burst", burst, timeout_seconds=5.0)  # the burst is over about 1 s after it began
    assert [event["message"] for event in written] == [f"placement {index}" for index in range(burst)]
    stamps = {datetime.strptime(event["firstTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
              for event in written}
    assert all(before <= at <= recorded_by for at in stamps)  # when recorded, not when written (a second later)
    assert not runtime.events.busy()


def test_a_steady_trickle_is_written_at_once(runtime: Runtime, apiserver: LocalCluster) -> None:
    for index in range(5):
        _record(runtime, "trickle", index)
        time.sleep(0.1)
        assert not runtime.events.busy()
    assert len(_wait_for(apiserver, "trickle", 5, timeout_seconds=0.5)) == 5


def test_no_event_waits_longer_than_the_bound_however_long_the_burst(
        runtime: Runtime, apiserver: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_module, "MAX_DEFER_SECONDS", 0.3)
    ends = time.monotonic() + 2.0
    index = 0
    while time.monotonic() < ends:  # a batch of 25 every 0.25 s for 2 s: busy throughout
        for _ in range(25):
            _record(runtime, "long", index)
            index += 1
        time.sleep(0.25)
    assert runtime.events.busy()
    assert events_for(apiserver, "long")  # the first ones went out while the burst still ran
    assert len(_wait_for(apiserver, "long", index, timeout_seconds=10.0)) == index


def test_flush_sends_held_events_at_once(runtime: Runtime, apiserver: LocalCluster) -> None:
    burst = events_module.BUSY_EVENTS_PER_SECOND * 2
    for index in range(burst):
        _record(runtime, "flushed", index)
    assert runtime.events.busy()
    started = time.monotonic()
    runtime.events.flush()
    assert time.monotonic() - started < 1.0
    assert len(events_for(apiserver, "flushed")) == burst
