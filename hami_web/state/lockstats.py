"""How long the cache lock is held, by kind of work: what ``hami_web_cache_lock_hold_seconds`` reports.

A filter waits for the cache lock whenever sync work holds it, so the longest hold by kind of work (``filter``,
``pods``, ``nodes``, ``resync``, ``read``) is the figure that tells whether sync can stall scheduling. Kept apart
from the cache's decisions: `TimedLock` is the lock itself plus its statistics.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

LOCK_HOLD_BUCKETS_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass(slots=True)
class LockHolds:
    """How long the cache lock was held, by kind of work: a histogram and the longest hold."""

    count: int = 0
    total_seconds: float = 0.0
    max_seconds: float = 0.0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * len(LOCK_HOLD_BUCKETS_SECONDS))
    max_cpu_seconds: float = 0.0

    def observe(self, seconds: float, cpu_seconds: float) -> None:
        """Record one hold: wall time (what a waiting filter sees) and the holder's own CPU time.

        The two differ when the holder is preempted while holding the lock, by the OS on a busy machine or
        by another thread's long GIL-holding call; the CPU time is the work done under the lock.
        """
        self.count += 1
        self.total_seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        self.max_cpu_seconds = max(self.max_cpu_seconds, cpu_seconds)
        for position, bound in enumerate(LOCK_HOLD_BUCKETS_SECONDS):
            if seconds <= bound:
                self.bucket_counts[position] += 1
                break


class TimedLock:
    """A lock whose every hold is timed under the name of the work done (`held`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: dict[str, LockHolds] = {}

    @contextlib.contextmanager
    def held(self, work: str) -> Iterator[None]:
        """Hold the lock for ``work``; the hold's wall and CPU time are recorded when it ends."""
        with self._lock:
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                yield
            finally:
                holds = self.holds.get(work)
                if holds is None:
                    holds = self.holds[work] = LockHolds()
                holds.observe(time.perf_counter() - started, time.thread_time() - started_cpu)

    def snapshot(self) -> dict[str, LockHolds]:
        """A copy of the statistics per kind of work."""
        with self._lock:
            return {work: LockHolds(h.count, h.total_seconds, h.max_seconds, list(h.bucket_counts),
                                    h.max_cpu_seconds) for work, h in self.holds.items()}


# The weight of the latest node-lock hold in `NodeLockHolds.mean_seconds`, of its distance from the mean in
# `NodeLockHolds.deviation_seconds`, and the mean before any hold was seen (TCP's round-trip estimate, RFC 6298).
HOLD_WEIGHT = 0.2
DEVIATION_WEIGHT = 0.25
FIRST_HOLD_SECONDS = 1.0
# The estimate is the mean plus this many mean deviations: a line is sized for the slow holds, not the typical one.
DEVIATIONS = 2.0
# A hold longer than this is a stuck or foreign lock, not the pace of allocation: it does not move the estimate.
LONGEST_HOLD_SECONDS = 30.0


class NodeLockHolds:
    """How long HAMi node locks stay held, as the node watch shows them: binpack's line sends no more pods to a locked
    node than can get the lock within the line's wait (`core.busynodes.line_depth`), and the time from a bind's lock
    to the device plugin's release is the cluster's, not ours to know in advance.

    The estimate is a moving mean plus twice the moving mean deviation, as TCP estimates its retransmission timeout:
    where device plugins release in a steady 0.5 s it is about the mean, but where holds swing (0.8 s typical, 2 s one
    in ten, on a loaded cluster) a line sized by the mean would let its last binds wait past the line's time, to be
    refused.
    """

    def __init__(self) -> None:
        self.mean_seconds = FIRST_HOLD_SECONDS
        self.deviation_seconds = 0.0
        self._taken: dict[str, tuple[str, float]] = {}  # node -> (the lock as seen, when it was first seen)

    @property
    def estimate(self) -> float:
        """The hold to size a line by: the mean plus `DEVIATIONS` mean deviations."""
        return self.mean_seconds + DEVIATIONS * self.deviation_seconds

    def observe(self, node: str, lock: str, now: float) -> None:
        """The watch shows ``node`` with ``lock`` ("" when none) at ``now``."""
        taken = self._taken.get(node)
        if taken is not None and taken[0] == lock:
            return
        if taken is not None:
            held = now - taken[1]
            if 0.0 <= held <= LONGEST_HOLD_SECONDS:
                error = held - self.mean_seconds
                self.mean_seconds += HOLD_WEIGHT * error
                self.deviation_seconds += DEVIATION_WEIGHT * (abs(error) - self.deviation_seconds)
        if lock:
            self._taken[node] = (lock, now)
        else:
            self._taken.pop(node, None)
