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


# A placement of ours not yet bound: its node and when it was assumed (None: no longer an assumption). A plain
# tuple: one is made per placement on every filter.
PendingPlacement = tuple[str, float | None]


def busy_nodes(locked: Iterable[LockedNode], placements: Iterable[PendingPlacement], *, now: float,
               lock_timeout_seconds: float, grace_seconds: float,
               family_locks: Iterable[FamilyLock] = ()) -> frozenset[str]:
    """The nodes busy binding: a live HAMi lock or family lock, or a placement assumed within ``grace_seconds``.

    A lock whose owner is unknown for longer than ``grace_seconds`` after it was taken counts as ownerless-gone
    (the owner's bind failed or it was deleted); one with no owner named is judged by its age alone.
    """
    busy = {entry.node for entry in family_locks
            if bare_lock_live(entry.rule, entry.value, now=now, default_timeout_seconds=lock_timeout_seconds)}
    for entry in locked:
        lock, owner = entry.lock, Owner.UNKNOWN
        if entry.owner_known:
            owner = Owner.PRESENT
        elif lock.pod and lock.taken_at is not None and now - lock.taken_at > grace_seconds:
            owner = Owner.GONE
        if not stale_reason(lock, now=now, timeout_seconds=lock_timeout_seconds, owner=owner,
                            owner_bind_phase=entry.owner_phase):
            busy.add(entry.node)
    fresh_since = now - grace_seconds
    for node, assumed_at in placements:
        if assumed_at is not None and assumed_at >= fresh_since:
            busy.add(node)
    return frozenset(busy)
