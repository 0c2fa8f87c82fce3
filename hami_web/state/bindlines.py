"""Which nodes are busy binding, and the binds that wait in this process for a node's HAMi lock, in line.

Why a line: under binpack with ``--binpack-lock-queue`` the filter sends more than one pod to a node whose lock is held
(`core.busynodes`, ``depth``), and their binds wait here instead of being refused and backed off by kube-scheduler for
a second or more. Were they all to try the lock when the watch shows it released, one would win and the others be
refused; in line, only the first tries, and the next only once the watch has shown the first's lock come and go.
Waiting costs no API call: a waiter sleeps on its node's condition, woken when the cache applies a change of that
node (`ClusterCache.apply_node_events`) or a bind leaves the line. Whose turn it is is judged by the cluster cache,
under its lock (`ClusterCache.lock_turn`); the line only keeps the order and the wake-ups.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from hami_web.core.busynodes import FamilyLock, LockedNode, busy_nodes
from hami_web.core.names import NODE_LOCK
from hami_web.core.nodelocks import SeenNode
from hami_web.state.claims import Claims
from hami_web.state.planning import ASSUMPTION_GRACE_SECONDS
from hami_web.state.store import CacheStore


class BindLines:
    """Per node, the pods whose binds wait for its lock, in arrival order, and a version bumped on every change."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._lines: dict[str, list[str]] = {}
        self._versions: dict[str, int] = {}
        self._conditions: dict[str, threading.Condition] = {}
        self._waiting = 0

    def join(self, node: str, uid: str) -> tuple[bool, int]:
        """Put ``uid`` at the end of ``node``'s line unless it is in it; whether it is first, and the node's version
        (for `wait`)."""
        with self._mutex:
            line = self._lines.setdefault(node, [])
            if uid not in line:
                line.append(uid)
                self._waiting += 1
            return line[0] == uid, self._versions.get(node, 0)

    def leave(self, node: str, uid: str) -> None:
        """Take ``uid`` out of ``node``'s line (its bind ended) and wake the others."""
        with self._mutex:
            line = self._lines.get(node)
            if line is None or uid not in line:
                return
            line.remove(uid)
            self._waiting -= 1
            if line:
                self._bump_locked(node)
            else:  # nobody waits on the node any more (every waiter is in its line)
                del self._lines[node]
                self._versions.pop(node, None)
                self._conditions.pop(node, None)

    def changed(self, nodes: Iterable[str]) -> None:
        """The cache applied a change of these nodes: wake their waiters to look again."""
        with self._mutex:
            for node in nodes:
                if node in self._lines:
                    self._bump_locked(node)

    def wait(self, node: str, version: int, timeout: float) -> None:
        """Sleep until ``node`` changes after ``version`` (from `join`), at most ``timeout`` seconds."""
        with self._mutex:
            if self._versions.get(node, 0) != version or timeout <= 0:
                return
            condition = self._conditions.get(node)
            if condition is None:
                condition = self._conditions[node] = threading.Condition(self._mutex)
            condition.wait(timeout)

    def waiting(self) -> int:
        """How many binds are in a line, on every node."""
        return self._waiting

    def _bump_locked(self, node: str) -> None:
        self._versions[node] = self._versions.get(node, 0) + 1
        condition = self._conditions.get(node)
        if condition is not None:
            condition.notify_all()


def lock_turn_locked(store: CacheStore, claims: Claims, lines: BindLines, node: str, uid: str, namespace: str,
                     name: str) -> tuple[bool, SeenNode | None, int]:
    """Whether the bind of pod ``uid`` (``namespace/name``) may try ``node``'s lock now, the node as last seen, and the
    line's version to `BindLines.wait` on otherwise; puts the pod in the node's line. Under the cache's lock.

    Its turn: it is first in line, the watch shows no lock of another pod that is not done with it, and no pod we bound
    there has a lock the watch has not shown yet (`Claims.lock_due_on`): trying then would be refused.
    """
    first, version = lines.join(node, uid)
    seen = store.seen_node_locked(node)
    if not first or seen is None:
        return first and seen is None, seen, version
    lock = store.node_locks.get(node)  # the seen lock, parsed when the watch brought it
    held = lock is not None and not seen.owner_done and not lock.owned_by(namespace, name)
    return not held and not claims.lock_due_on(node, seen.resource_version, besides=uid), seen, version


def busy_nodes_locked(store: CacheStore, claims: Claims, uid: str, namespace: str, name: str, *,
                      lock_keys: frozenset[str] | None, depth: int, now: float, lock_timeout_seconds: float,
                      line_seconds: float) -> frozenset[str]:
    """`core.busynodes.busy_nodes` at ``depth`` from what the cache knows, leaving out what belongs to the pod being
    placed (``uid``, ``namespace/name``); only the locks in ``lock_keys`` (those its bind would take; None: all) make
    a node busy for it. Under the cache's lock.

    A lock is live by the rules `/bind` applies (`core.nodelocks.stale_reason`), with the owner's bind-phase as the
    watch showed it; an owner without a booking in the cache for `ASSUMPTION_GRACE_SECONDS` after it took the lock
    counts as gone (its bind failed or it was deleted). A placement counts for as long as its assumption is fresh
    (kube-scheduler binds at once, so an older one is a bind that never came), and so does a pod we bound whose lock
    the watch has not shown yet.
    """
    family_locks = [FamilyLock(node, store.catalog.lock_rule(key), value)
                    for node, others in store.other_locks.items() for key, value in others
                    if lock_keys is None or key in lock_keys]
    locked = []
    for node, lock in store.node_locks.items() if lock_keys is None or NODE_LOCK in lock_keys else ():
        if lock.owned_by(namespace, name):
            continue
        held = store.lock_owner_locked(lock)
        phase = held.usage.bind_phase if held is not None and store.lock_owner_done_locked(held) else ""
        locked.append(LockedNode(node, lock, owner_known=held is not None, owner_phase=phase))
    placements = [(usage.node, held.assumed_at) for placed_uid, usage in claims.placed.items()
                  if placed_uid != uid and (held := store.held.get(placed_uid)) is not None]
    placements.extend(claims.due_locks(store.seen_version_locked, since=now - ASSUMPTION_GRACE_SECONDS))
    return busy_nodes(locked, placements, now=now, lock_timeout_seconds=lock_timeout_seconds,
                      grace_seconds=ASSUMPTION_GRACE_SECONDS, family_locks=family_locks, depth=depth,
                      line_seconds=line_seconds)

