"""How long ``/filter`` and ``/bind`` may take: kube-scheduler drops an answer after its 30 s ``httpTimeout``.

A request's API calls share one deadline (``--extender-deadline``, or ``--node-lock-retry-timeout`` for a gang
member's bind that waits for a lock; both at most 27 s, checked at start-up). What a request does after its
deadline — reading back a write that got no answer, releasing our lock, marking a failed bind — gets
`after_deadline_seconds` more, at most 3 s, so the answer always arrives in time.
"""

from __future__ import annotations

import contextlib
import time

from hami_web.kube import deadline

# The most the work after a request's deadline may add to it.
MAX_AFTER_DEADLINE_SECONDS = 3.0


def after_deadline_seconds(deadline_seconds: float) -> float:
    """The budget after a deadline of ``deadline_seconds``: a third of it, at most 3 s."""
    return min(deadline_seconds / 3, MAX_AFTER_DEADLINE_SECONDS)


class BindDeadline:
    """The deadline one bind's API calls run under; a gang member that waits for a lock replaces it, and the work
    after a failed Binding runs under the cleanup budget."""

    def __init__(self, scope: contextlib.ExitStack, seconds: float) -> None:
        self._scope = scope
        self._started = time.monotonic()
        self.seconds = seconds
        scope.enter_context(deadline(seconds))

    def replace(self, seconds: float) -> None:
        """From now on the deadline is ``seconds`` after the bind's start (for every call until the answer)."""
        self.seconds = seconds
        self._scope.enter_context(deadline(seconds - (time.monotonic() - self._started)))

    def enter_cleanup(self) -> float:
        """From now on the calls run in the budget after the deadline (the deadline itself may be spent); that
        budget in seconds."""
        cleanup = after_deadline_seconds(self.seconds)
        self._scope.enter_context(deadline(cleanup))
        return cleanup
