"""Budgets the process spends: requests to kube-apiserver, and request threads parked waiting for a node lock.

`RequestBudget` is the client-side limit of ``--kube-qps`` / ``--kube-burst`` (as client-go's): a token bucket
shared by every thread that talks to the API: ``burst`` requests may go at once, then one per ``1/qps`` seconds.
A caller over budget reserves its slot under the lock and sleeps outside it, so a waiting thread never blocks
the others' bookkeeping, and the waits queue up in arrival order.

`WaitSlots` bounds how many ``/bind`` calls may wait for a node lock at once: each waiter holds one of the few
gunicorn threads, and ``/filter`` and ``/webhook`` must keep some.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class RequestBudget:
    """Token bucket: `take` before each API request; it sleeps when the budget is spent."""

    def __init__(self, *, qps: float, burst: int = 0, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if qps <= 0:
            raise ValueError("qps must be greater than zero")
        self._qps = qps
        self._burst = float(burst if burst > 0 else max(1, math.ceil(qps)))
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self._burst
        self._last = monotonic()

    def take(self, max_wait_seconds: float | None = None) -> float | None:
        """Spend one request; returns the seconds slept waiting for it (0 within the burst).

        With ``max_wait_seconds`` (the time left before a request's deadline) a wait that would be longer is
        not taken: nothing is spent and the answer is None, so a request that could not be sent in time
        neither sleeps past its deadline nor pushes back the requests queued after it.
        """
        with self._lock:
            now = self._monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            wait_seconds = (1 - self._tokens) / self._qps if self._tokens < 1 else 0.0
            if max_wait_seconds is not None and wait_seconds > max_wait_seconds:
                return None
            self._tokens -= 1
        if wait_seconds > 0:
            self._sleep(wait_seconds)
        return wait_seconds


class WaitSlots:
    """At most ``size`` holders at once; `try_take` never blocks (a caller without a slot does not wait)."""

    def __init__(self, size: int) -> None:
        self._slots = threading.BoundedSemaphore(size) if size > 0 else None

    def try_take(self) -> bool:
        """Take a slot if one is free; True when taken (then `give_back` it)."""
        return self._slots is not None and self._slots.acquire(blocking=False)

    def give_back(self) -> None:
        """Return a slot taken with `try_take`."""
        if self._slots is not None:
            self._slots.release()
