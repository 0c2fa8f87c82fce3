"""The busy-node rule as a pure function (`core.busynodes`, docs/compatibility.md#filter-and-placement): a table of
locks and placements.

Covers: a fresh lock with a known owner still binding is busy, one whose owner is done (success or failed) is not;
a lock past the timeout is not; an unknown owner is live within the grace and gone after it; an owner-less lock is
judged by its age alone; a placement is busy within the grace and not after it, nor once it is no longer assumed;
nodes without either are never busy; a family's own lock (bare time, no owner) is live until its rule's timeout and
never when unreadable.
"""

from __future__ import annotations

import pytest

from hami_web.core.busynodes import FamilyLock, LockedNode, PendingPlacement, busy_nodes
from hami_web.core.nodelocks import LockRule, LockValue, format_time

NOW = 1_800_000_000.0
TIMEOUT = 300.0
GRACE = 30.0
BARE = LockRule(key="vendor.example/lock", names_owner=False, stale_after_seconds=120.0)


def lock(age: float, owner: str = "ns/pod") -> LockValue:
    namespace, _, pod = owner.partition("/")
    return LockValue(taken_at=NOW - age, namespace=namespace, pod=pod)


CASES = [  # locked nodes, placements, busy (family locks: see the next table)
    ([LockedNode("n1", lock(5), owner_known=True)], [], {"n1"}),
    ([LockedNode("n1", lock(5), owner_known=True, owner_phase="success")], [], set()),
    ([LockedNode("n1", lock(5), owner_known=True, owner_phase="failed")], [], set()),
    ([LockedNode("n1", lock(TIMEOUT + 1), owner_known=True)], [], set()),
    ([LockedNode("n1", lock(GRACE - 1))], [], {"n1"}),
    ([LockedNode("n1", lock(GRACE + 1))], [], set()),
    ([LockedNode("n1", lock(GRACE + 1, owner=""))], [], {"n1"}),
    ([LockedNode("n1", lock(TIMEOUT + 1, owner=""))], [], set()),
    ([LockedNode("n1", LockValue(taken_at=None, namespace="ns", pod="p"), owner_known=True)], [], set()),
    ([], [("n2", NOW - 1)], {"n2"}),
    ([], [("n2", NOW - GRACE - 1)], set()),
    ([], [("n2", None)], set()),
    ([LockedNode("n1", lock(5), owner_known=True)], [("n2", NOW)], {"n1", "n2"}),
    ([], [], set()),
]


@pytest.mark.parametrize(("locked", "placements", "busy"), CASES)
def test_busy_nodes(locked: list[LockedNode], placements: list[PendingPlacement], busy: set[str]) -> None:
    assert busy_nodes(locked, placements, now=NOW, lock_timeout_seconds=TIMEOUT, grace_seconds=GRACE) == busy


FAMILY_CASES = [  # a family lock's value, busy
    (format_time(NOW - 5), True),
    (format_time(NOW - 119), True),
    (format_time(NOW - 121), False),  # past the rule's own timeout, not --node-lock-timeout's 300 s
    ("yesterday-ish", False),
]


@pytest.mark.parametrize(("value", "busy"), FAMILY_CASES)
def test_a_family_lock_makes_its_node_busy_while_live(value: str, busy: bool) -> None:
    result = busy_nodes([], [], now=NOW, lock_timeout_seconds=TIMEOUT, grace_seconds=GRACE,
                        family_locks=[FamilyLock("n3", BARE, value)])
    assert result == ({"n3"} if busy else set())
