"""`state.bindlines.BindLines`: the order of binds waiting for a node's lock, and their wake-ups.

Covers: the first to join a node's line is first, later ones are not, joining twice keeps the place; lines are per
node; leaving lets the next be first and wakes the node's waiters at once; a change of the node wakes them, a change of
another node does not (they sleep until their timeout); a wait after a change it has not seen returns at once;
``waiting`` counts every bind in a line and an emptied line is forgotten. `NodeLockHolds`: a lock seen taken and then
released (or replaced) moves the mean and the mean deviation by its hold; a lock seen again unchanged, one longer than a
stuck lock's bound and a node that never showed a lock do not; steady holds keep the line's depth, swinging ones
shorten it.
"""

from __future__ import annotations

import threading
import time

import pytest

from hami_web.core.busynodes import HANDOVER_FACTOR, line_depth
from hami_web.state.bindlines import BindLines
from hami_web.state.lockstats import DEVIATION_WEIGHT, DEVIATIONS, FIRST_HOLD_SECONDS, HOLD_WEIGHT, NodeLockHolds


def _waiter(lines: BindLines, node: str, version: int, timeout: float) -> tuple[threading.Thread, list[float]]:
    """A thread that waits on ``node`` and records how long it slept."""
    slept: list[float] = []

    def wait() -> None:
        started = time.monotonic()
        lines.wait(node, version, timeout)
        slept.append(time.monotonic() - started)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.05)  # let it sleep
    return thread, slept


def test_the_first_to_join_is_first_and_keeps_its_place() -> None:
    lines = BindLines()
    assert lines.join("n1", "a")[0] is True
    assert lines.join("n1", "b")[0] is False
    assert lines.join("n1", "a")[0] is True  # joining again keeps the place
    assert lines.join("n2", "c")[0] is True  # another node, another line
    assert lines.waiting() == 3


def test_leaving_makes_the_next_first_and_an_empty_line_is_forgotten() -> None:
    lines = BindLines()
    lines.join("n1", "a")
    lines.join("n1", "b")
    lines.leave("n1", "a")
    assert lines.join("n1", "b")[0] is True
    lines.leave("n1", "b")
    lines.leave("n1", "b")  # twice: nothing
    lines.leave("n9", "x")  # never joined: nothing
    assert lines.waiting() == 0
    assert lines.join("n1", "c") == (True, 0)


def test_leaving_wakes_the_nodes_waiters_at_once() -> None:
    lines = BindLines()
    lines.join("n1", "a")
    _first, version = lines.join("n1", "b")
    thread, slept = _waiter(lines, "n1", version, timeout=5.0)
    lines.leave("n1", "a")
    thread.join(2)
    assert slept and slept[0] < 1.0


def test_a_change_wakes_the_nodes_waiters_only() -> None:
    lines = BindLines()
    _first, version1 = lines.join("n1", "a")
    _first, version2 = lines.join("n2", "b")
    thread1, slept1 = _waiter(lines, "n1", version1, timeout=5.0)
    thread2, slept2 = _waiter(lines, "n2", version2, timeout=0.5)
    lines.changed(["n1", "n3"])  # n3 has no line: nothing to wake
    thread1.join(2)
    thread2.join(2)
    assert slept1 and slept1[0] < 1.0
    assert slept2 and slept2[0] >= 0.45  # n2 slept until its timeout


def test_a_wait_after_an_unseen_change_returns_at_once() -> None:
    lines = BindLines()
    _first, version = lines.join("n1", "a")
    lines.join("n1", "b")
    lines.changed(["n1"])
    started = time.monotonic()
    lines.wait("n1", version, 5.0)
    assert time.monotonic() - started < 0.5
    started = time.monotonic()
    lines.wait("n1", version + 1, 0.0)  # no time left: no sleep
    assert time.monotonic() - started < 0.5


def test_the_hold_average_moves_with_each_lock_seen_taken_and_released() -> None:
    holds = NodeLockHolds()
    assert holds.estimate == FIRST_HOLD_SECONDS
    holds.observe("n1", "", 0.0)  # no lock: nothing
    holds.observe("n1", "t1,ns,a", 10.0)
    holds.observe("n1", "t1,ns,a", 10.2)  # the same lock again (another write to the node): still held
    holds.observe("n1", "", 10.5)  # released after 0.5 s
    mean = FIRST_HOLD_SECONDS + HOLD_WEIGHT * (0.5 - FIRST_HOLD_SECONDS)
    deviation = DEVIATION_WEIGHT * 0.5
    assert holds.mean_seconds == pytest.approx(mean) and holds.deviation_seconds == pytest.approx(deviation)
    assert holds.estimate == pytest.approx(mean + DEVIATIONS * deviation)
    holds.observe("n1", "t2,ns,b", 11.0)
    holds.observe("n1", "t3,ns,c", 11.5)  # replaced: b held it 0.5 s, c holds it from now
    deviation += DEVIATION_WEIGHT * (abs(0.5 - mean) - deviation)
    mean += HOLD_WEIGHT * (0.5 - mean)
    assert holds.mean_seconds == pytest.approx(mean) and holds.deviation_seconds == pytest.approx(deviation)
    steady = holds.estimate
    holds.observe("n1", "", 11.5 + 100.0)  # a stuck lock: not the pace of allocation
    assert holds.estimate == steady


def _settle(holds: NodeLockHolds, durations: list[float]) -> None:
    clock = 0.0
    for number, held in enumerate(durations):
        holds.observe("n1", f"t{number},ns,p{number}", clock)
        clock += held
        holds.observe("n1", "", clock)
        clock += 0.01


def test_steady_holds_size_the_line_by_their_mean_and_swinging_holds_by_the_slow_ones() -> None:
    """Device plugins that release in a steady 0.5 s keep binpack's line at its full depth (7 within 10 s); holds of
    0.8 s that take 2 s one time in five (a loaded cluster, as the 1,000-node burst showed) shorten it, so that the
    last bind in line still gets the lock within the wait: sized by the mean alone it stayed at 7, and binds that waited
    behind the slow holds were refused at 10 s."""
    steady, swinging = NodeLockHolds(), NodeLockHolds()
    _settle(steady, [0.5, 0.52, 0.51, 0.5, 0.53] * 20)
    _settle(swinging, [0.8, 0.8, 0.8, 0.8, 2.0] * 20)
    assert steady.estimate < 0.6
    assert line_depth(7, 10.0, steady.estimate) == 7
    assert 1.0 < swinging.mean_seconds < 1.2 and swinging.estimate > 1.5
    assert line_depth(7, 10.0, swinging.mean_seconds) == 7  # the mean alone: the whole depth
    depth = line_depth(7, 10.0, swinging.estimate)
    assert depth <= 5
    assert (depth - 1) * 2.0 * HANDOVER_FACTOR <= 10.0  # even if every hold before the last bind is a slow one
