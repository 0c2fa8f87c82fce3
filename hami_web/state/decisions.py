"""The recent filter and bind decisions and each pending pod's last refusal, bounded, for the dashboard.

The dashboard shows what the extender decided and why a pod waits; the extender knows both at the moment it
answers and nothing else keeps them. Memory stays bounded however busy the cluster is: a ring of the last
decisions and, for pods that did not fit, their last refusal, the oldest forgotten first. A refusal not
repeated for `PENDING_FORGET_SECONDS` is forgotten too: kube-scheduler retries an unschedulable pod at least
every five minutes, so a pod it stopped filtering was deleted or scheduled elsewhere.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DECISION_CAPACITY = 500
PENDING_CAPACITY = 1000
PENDING_FORGET_SECONDS = 15 * 60.0

FILTER = "filter"
BIND = "bind"


@dataclass(frozen=True, slots=True)
class Decision:
    """One answer of ``/filter`` or ``/bind``: for which pod, where, with which GPUs, how fast, and how it went.

    ``result`` is ``placed``, ``unschedulable``, ``passthrough`` or ``error`` for a filter, ``bound`` or
    ``error`` for a bind.
    """

    at: float
    kind: str
    pod: str
    node: str
    gpus: str
    result: str
    latency_seconds: float
    message: str = ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pod's last filter that found no node: the per-node reasons, and the pod as kube-scheduler sent it."""

    uid: str
    pod: str
    first_at: float
    last_at: float
    attempts: int
    reasons: Mapping[str, str]
    pod_object: Mapping[str, Any]


class DecisionLog:
    """Thread-safe bounded memory of decisions and refusals (filter and bind run on several threads)."""

    def __init__(self, *, capacity: int = DECISION_CAPACITY, pending_capacity: int = PENDING_CAPACITY,
                 forget_after_seconds: float = PENDING_FORGET_SECONDS, clock: Callable[[], float] = time.time
                 ) -> None:
        self._lock = threading.Lock()
        self._decisions: deque[Decision] = deque(maxlen=capacity)
        self._refusals: OrderedDict[str, Refusal] = OrderedDict()
        self._pending_capacity = pending_capacity
        self._forget_after_seconds = forget_after_seconds
        self._clock = clock

    def now(self) -> float:
        """The log's clock (what ``Decision.at`` is measured on)."""
        return self._clock()

    def record(self, decision: Decision) -> None:
        """Remember one decision, forgetting the oldest beyond the capacity."""
        with self._lock:
            self._decisions.append(decision)

    def record_refusal(self, *, uid: str, pod: str, reasons: Mapping[str, str], pod_object: Mapping[str, Any]
                       ) -> None:
        """Remember that ``pod`` fit no node now; its first refusal time survives the repeats."""
        now = self._clock()
        with self._lock:
            previous = self._refusals.pop(uid, None)
            first_at, attempts = (previous.first_at, previous.attempts + 1) if previous else (now, 1)
            self._refusals[uid] = Refusal(uid=uid, pod=pod, first_at=first_at, last_at=now, attempts=attempts,
                                          reasons=dict(reasons), pod_object=pod_object)
            while len(self._refusals) > self._pending_capacity:
                self._refusals.popitem(last=False)

    def forget_refusal(self, uid: str) -> None:
        """The pod was placed (or bound): it no longer waits."""
        with self._lock:
            self._refusals.pop(uid, None)

    def forget_refusals(self, uids: Sequence[str]) -> None:
        """These pods were deleted, finished or bound (the cache's watch says so): they no longer wait."""
        with self._lock:
            for uid in uids:
                self._refusals.pop(uid, None)

    def decisions(self) -> list[Decision]:
        """The remembered decisions, newest first."""
        with self._lock:
            return list(reversed(self._decisions))

    def refusals(self) -> list[Refusal]:
        """The pods whose last filter found no node, most recently refused first; stale ones are dropped."""
        cutoff = self._clock() - self._forget_after_seconds
        with self._lock:
            for uid in [uid for uid, refusal in self._refusals.items() if refusal.last_at < cutoff]:
                del self._refusals[uid]
            return sorted(self._refusals.values(), key=lambda refusal: -refusal.last_at)
