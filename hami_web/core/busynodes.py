"""Which GPU nodes are busy binding now: the filter tries them after the others
(docs/compatibility.md#filter-and-placement).

A node is busy while a live owner holds its HAMi node lock (live by the rules `/bind` applies,
`core.nodelocks.stale_reason`), while a family's own lock on it is live (readable and younger than its rule's
timeout: such locks name no owner, `core.nodelocks.bare_lock_live`), or while a placement of ours there awaits its
bind (kube-scheduler binds at once, so a placement older than the grace is a bind that never came). Pure: the
caller (the cluster cache) says what it knows of each lock's owner and which locks concern the pod it places.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami_web.core.nodelocks import LockRule, LockValue, Owner, bare_lock_live, stale_reason


@dataclass(frozen=True, slots=True)
class LockedNode:
    """A node whose lock is set, and what is known of the lock's owner pod.

    ``owner_known``: the owner's booking is known (the pod exists); ``owner_phase``: its bind-phase once it is done
    with the lock (``success`` past the release grace, or ``failed``), else "".
    """

    node: str
    lock: LockValue
    owner_known: bool = False
    owner_phase: str = ""


@dataclass(frozen=True, slots=True)
class FamilyLock:
    """A family's own lock set on a node (Cambricon's): its rule and the annotation's value."""

    node: str
    rule: LockRule
    value: str


# A lock's time is written in whole seconds (RFC 3339, as HAMi writes it): its age may read up to this much too old.
LOCK_TIME_RESOLUTION = 1.0

# A bind in line waits for the holds before it and for each hand-over (the watch showing the release, the next lock's
# write): a hold's time is stretched by this much to size the line.
HANDOVER_FACTOR = 1.25


def line_depth(max_depth: int, line_seconds: float, hold_seconds: float) -> int:
    """How many binds may be under way on one node under binpack (`busy_nodes`' ``depth``): as many as get the lock
    within the line's wait when each holds it ``hold_seconds`` (the average the watch shows), at most ``max_depth``
    (``--binpack-lock-queue-depth``), at least the lock's holder. On a loaded cluster the holds grow and the line
    shortens, so that binds do not wait in line only to be refused."""
    if line_seconds <= 0:
        return 1
    return max(1, min(max_depth, 1 + int(line_seconds / max(hold_seconds * HANDOVER_FACTOR, 1e-3))))


# A placement of ours not yet bound: its node and when it was assumed (None: no longer an assumption). A plain
# tuple: one is made per placement on every filter.
PendingPlacement = tuple[str, float | None]


def busy_nodes(locked: Iterable[LockedNode], placements: Iterable[PendingPlacement], *, now: float,
               lock_timeout_seconds: float, grace_seconds: float,
               family_locks: Iterable[FamilyLock] = (), depth: int = 1,
               line_seconds: float = 0.0) -> frozenset[str]:
    """The nodes busy binding: a live family lock, or ``depth`` binds under way there (a live HAMi lock, each
    placement assumed within ``grace_seconds``).

    ``depth`` above 1 is binpack's in-process line (``--binpack-lock-queue``): the binds after the lock's holder wait
    for it in the process, first come first served, instead of being refused, so the node keeps taking pods until
    ``depth`` are under way; but a lock held longer than the line's wait (``line_seconds``) makes its node busy at
    once: its owner is stuck, or another scheduler's, and the binds behind it would only wait to be refused.

    A lock whose owner is unknown for longer than ``grace_seconds`` after it was taken counts as ownerless-gone (the
    owner's bind failed or it was deleted); one with no owner named is judged by its age alone.
    """
    busy = {entry.node for entry in family_locks
            if bare_lock_live(entry.rule, entry.value, now=now, default_timeout_seconds=lock_timeout_seconds)}
    under_way: dict[str, int] = {}
    for entry in locked:
        lock, owner = entry.lock, Owner.UNKNOWN
        if entry.owner_known:
            owner = Owner.PRESENT
        elif lock.pod and lock.taken_at is not None and now - lock.taken_at > grace_seconds:
            owner = Owner.GONE
        if not stale_reason(lock, now=now, timeout_seconds=lock_timeout_seconds, owner=owner,
                            owner_bind_phase=entry.owner_phase):
            if depth > 1 and (lock.taken_at is None or now - lock.taken_at > line_seconds + LOCK_TIME_RESOLUTION):
                busy.add(entry.node)
            else:
                under_way[entry.node] = under_way.get(entry.node, 0) + 1
    fresh_since = now - grace_seconds
    for node, assumed_at in placements:
        if assumed_at is not None and assumed_at >= fresh_since:
            under_way[node] = under_way.get(node, 0) + 1
    busy.update(node for node, count in under_way.items() if count >= depth)
    return frozenset(busy)
