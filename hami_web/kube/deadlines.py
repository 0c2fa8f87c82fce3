"""The deadline and the call count that the API calls of one request share, carried in context variables.

A request to hami-web (a ``/bind``, a ``/filter``) makes several API calls in a row, through layers that should
not pass a budget down by hand; so the budget rides in the context of the thread, and the transport reads it
before each call.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass

# The monotonic time by which the API calls of the current request must be answered (None: no deadline).
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("hami_web_kube_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float, *, within_current: bool = False) -> Iterator[None]:
    """Make every API call inside this block share one deadline ``seconds`` from now.

    The client's own timeout is per socket read, so a slow server (or one dripping its answer a byte at a
    time) could hold a call far longer. Under a deadline each call runs on a helper thread the caller stops
    waiting for at the deadline, and a response body still arriving then is cut off. A nested block sets a
    new deadline (a cleanup after a failure gets its own small budget), or with ``within_current`` one that
    never ends later than the enclosing block's (one step of that budget).
    """
    end = time.monotonic() + seconds
    current = _deadline.get()
    if within_current and current is not None:
        end = min(end, current)
    token = _deadline.set(end)
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_left_seconds() -> float | None:
    """Seconds left before the current deadline (may be negative), or None outside `deadline`."""
    end = _deadline.get()
    return None if end is None else end - time.monotonic()


def current_deadline() -> float | None:
    """The monotonic time by which the current request's API calls must be answered, or None outside `deadline`."""
    return _deadline.get()


@dataclass(slots=True)
class CallCount:
    """API requests sent inside a `counting_calls` block (a bind's round trips, for its metric)."""

    calls: int = 0


_call_count: contextvars.ContextVar[CallCount | None] = contextvars.ContextVar("hami_web_kube_calls", default=None)


@contextlib.contextmanager
def counting_calls() -> Iterator[CallCount]:
    """Count every API request this thread sends inside the block (requests refused before sending do not count).

    A bind's latency is mostly its round trips to kube-apiserver in a row, so their number per bind is the figure
    to watch (``hami_web_bind_api_calls``).
    """
    count = CallCount()
    token = _call_count.set(count)
    try:
        yield count
    finally:
        _call_count.reset(token)


def count_call() -> None:
    """Note one request sent, in the enclosing `counting_calls` block if there is one."""
    count = _call_count.get()
    if count is not None:
        count.calls += 1
