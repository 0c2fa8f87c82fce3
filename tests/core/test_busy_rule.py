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

from hami_web.core.busynodes import FamilyLock, LockedNode, PendingPlacement, busy_nodes, line_depth
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


LINE = 5.0  # --binpack-lock-queue's wait
LIVE = LockedNode("n1", lock(1), owner_known=True)
DEPTH_CASES = [  # depth, locked nodes, placements, family locks, busy
    (1, [LIVE], [], [], {"n1"}),  # depth 1: any bind under way, as the table above
    (1, [], [("n1", NOW)], [], {"n1"}),
    (3, [LIVE], [], [], set()),
    (3, [LIVE], [("n1", NOW)], [], set()),  # the lock and one placement: two under way
    (3, [LIVE], [("n1", NOW), ("n1", NOW - 2)], [], {"n1"}),  # three: the depth
    (3, [], [("n1", NOW)] * 3, [], {"n1"}),  # placements alone count as well
    (3, [], [("n1", NOW)] * 2 + [("n1", NOW - GRACE - 1)], [], set()),  # a stale placement is no bind under way
    (3, [LIVE], [("n2", NOW)] * 2, [], set()),  # counted per node
    (3, [LockedNode("n1", lock(LINE + 0.5), owner_known=True)], [], [], set()),  # within the second a lock's time has
    (3, [LockedNode("n1", lock(LINE + 1.5), owner_known=True)], [], [], {"n1"}),  # held past the line's wait: busy
    (3, [LockedNode("n1", lock(LINE + 1.5), owner_known=True, owner_phase="success")], [], [], set()),  # done: stale
    (3, [LockedNode("n1", LockValue(taken_at=None, namespace="ns", pod="p"), owner_known=True)], [], [], set()),
    (3, [LockedNode("n1", lock(GRACE - 1))], [], [], {"n1"}),  # another scheduler's lock, older than the wait
    (6, [], [], [FamilyLock("n3", BARE, format_time(NOW - 1))], {"n3"}),  # a family lock: no line, busy at once
]


@pytest.mark.parametrize(("depth", "locked", "placements", "family", "busy"), DEPTH_CASES)
def test_binpacks_line_keeps_a_node_free_until_depth_binds_are_under_way(
        depth: int, locked: list[LockedNode], placements: list[PendingPlacement], family: list[FamilyLock],
        busy: set[str]) -> None:
    """``--binpack-lock-queue``: the binds after a lock's holder wait in line for it in the process, so the node stays
    a candidate until ``depth`` binds are under way; a lock held past the line's wait makes its node busy at once (a
    lock's time is written in whole seconds, so the age gets a second's allowance). An unreadable lock time is stale,
    as in the table above."""
    assert busy_nodes(locked, placements, now=NOW, lock_timeout_seconds=TIMEOUT, grace_seconds=GRACE,
                      family_locks=family, depth=depth, line_seconds=LINE) == busy


@pytest.mark.parametrize(("max_depth", "line_seconds", "hold_seconds", "depth"), [
    (6, 10.0, 0.6, 6),  # holds of an allocation at pace: the whole depth gets the lock within the wait
    (6, 10.0, 1.0, 6),
    (6, 10.0, 2.0, 5),  # a loaded cluster: 1 + 10 / 2.5
    (6, 10.0, 8.0, 2),
    (6, 10.0, 20.0, 1),  # holds longer than the wait: no line, the node is busy as without it
    (6, 0.0, 0.6, 1),  # the line off
    (3, 10.0, 0.1, 3),  # at most the option's depth
    (6, 2.0, 1.0, 2),
    (6, 5.0, 0.0, 6),  # no hold seen yet that took any time: still bounded
])
def test_the_lines_depth_is_what_gets_the_lock_within_the_wait(max_depth: int, line_seconds: float,
                                                                hold_seconds: float, depth: int) -> None:
    """A bind in line waits for each hold before it and each hand-over (a hold stretched by a quarter)."""
    assert line_depth(max_depth, line_seconds, hold_seconds) == depth
