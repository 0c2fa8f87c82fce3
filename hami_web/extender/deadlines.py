"""How long ``/filter`` and ``/bind`` may take: kube-scheduler drops an answer after its 30 s ``httpTimeout``.

A request's API calls share one deadline (``--extender-deadline``, or ``--node-lock-retry-timeout`` for a gang
member's bind that waits for a lock; both at most 27 s, checked at start-up). What a request does after its
deadline — reading back a write that got no answer, releasing our lock, marking a failed bind — gets
`after_deadline_seconds` more, at most 3 s, so the answer always arrives in time.
"""

from __future__ import annotations

# The most the work after a request's deadline may add to it.
MAX_AFTER_DEADLINE_SECONDS = 3.0


def after_deadline_seconds(deadline_seconds: float) -> float:
    """The budget after a deadline of ``deadline_seconds``: a third of it, at most 3 s."""
    return min(deadline_seconds / 3, MAX_AFTER_DEADLINE_SECONDS)
