"""The cluster cache's store: what the API showed of GPU nodes and pods, the per-node totals and views, one lock.

`state.cache.ClusterCache` builds its decisions on this store; the store holds the data and the one way it
changes: a batch (list page, watch events, resync) is read under the lock (a few dict lookups), planned outside it
(`state.planning`: new holdings, per-node totals and `NodeView`s), then swapped in under the lock only if nothing it
read has changed meanwhile (every entry is replaced, never mutated, so an identity check tells). A batch that lost a
race is planned again; after `COMMIT_ATTEMPTS` lost races it is applied under the lock in one go, which is correct
and merely slower. Every hold of the lock is timed by kind of work (`state.lockstats`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hami_web.core.families import DeviceCatalog
from hami_web.core.nodelocks import LockValue, SeenNode, parse_lock
from hami_web.core.usage import NodeView, build_node_view
from hami_web.state.lockstats import LockHolds, NodeLockHolds, TimedLock
from hami_web.state.nodes import NodeRecord, NodeState, node_state
from hami_web.state.planning import (
    Held,
    NodeTotals,
    Plan,
    PodChange,
    add_booking,
    node_view,
    plan_pods,
    touched_nodes,
)
from hami_web.state.pods import PodUsage
from hami_web.state.quotaledger import QuotaLedger

log = logging.getLogger(__name__)

# Plans that lost a race with a filter before the batch is applied under the lock instead.
COMMIT_ATTEMPTS = 3
# How long after its owner shows bind-phase=success a node lock still makes its node busy (see
# `CacheStore.lock_owner_done_locked`): HAMi's device plugin removes the lock right after that write.
LOCK_RELEASE_GRACE_SECONDS = 2.0


@dataclass(slots=True)
class CacheStats:
    """Counters the metrics endpoint reads; plain ints updated under the cache lock."""

    pod_annotation_errors: int = 0
    node_annotation_errors: int = 0
    broken_pods: dict[str, str] = field(default_factory=dict)
    lost_races: int = 0


class CacheStore:
    """The data of the cluster cache under its lock, and the optimistic commit of batches (see the module)."""

    def __init__(self, *, catalog: DeviceCatalog, clock: Callable[[], float]) -> None:
        self._timed_lock = TimedLock()
        self.catalog = catalog
        self.clock = clock
        self.nodes: dict[str, NodeState] = {}
        self.views: dict[str, NodeView] = {}
        self.broken: dict[str, str] = {}
        self.held: dict[str, Held] = {}
        # The held pods by node, and how many have each priority (`_index_locked`): a preemption's snapshot copies
        # only its candidates' pods, and looks no further when none is below the preemptor's.
        self.held_on: dict[str, dict[str, Held]] = {}
        self.priorities: dict[int, int] = {}
        self.assumed: set[str] = set()
        self.node_usage: dict[str, NodeTotals] = {}
        self.pods_current_at = 0.0
        # What the watch last showed of each GPU node's resourceVersion and lock (a bind takes a free lock with one
        # conditional write), the nodes whose lock is set, and the pod of each namespace/name (whose lock it is).
        self.seen_nodes: dict[str, SeenNode] = {}
        self.node_locks: dict[str, LockValue] = {}
        self.node_lock_holds = NodeLockHolds()
        # The families' own locks set on each node (key, value), e.g. Cambricon's: live ones make a node busy too.
        self.other_locks: dict[str, tuple[tuple[str, str], ...]] = {}
        self.uid_by_name: dict[tuple[str, str], str] = {}
        # When the watch first showed each held pod at bind-phase=success (see `_lock_owner_done_locked`).
        self.succeeded_at: dict[str, float] = {}
        self.stats = CacheStats()
        # Namespace quotas (docs/quotas.md#namespace-quotas): the effective limits and what each namespace's held pods
        # book, counted wherever `_held` changes, under the lock, so that a filter's quota check and its booking
        # are one step.
        self.quota_ledger = QuotaLedger(catalog)

    def locked(self, work: str) -> contextlib.AbstractContextManager[None]:
        return self._timed_lock.held(work)

    def lock_hold_snapshot(self) -> dict[str, LockHolds]:
        """A copy of the lock-hold statistics per kind of work (``filter``, ``pods``, ``nodes``, ``resync``…)."""
        return self._timed_lock.snapshot()

    def note_seen_locked(self, records: Iterable[tuple[str, NodeRecord | None]]) -> None:
        """Remember each GPU node's resourceVersion and lock as the API showed them (None: the node is gone)."""
        now = self.clock()
        for name, record in records:
            self.node_lock_holds.observe(name, record.lock if record is not None and record.has_devices else "", now)
            if record is None or not record.has_devices:
                self.seen_nodes.pop(name, None)
                self.node_locks.pop(name, None)
                self.other_locks.pop(name, None)
                continue
            self.seen_nodes[name] = SeenNode(resource_version=record.resource_version, lock=record.lock,
                                             other_locks=record.other_locks)
            if record.other_locks:
                self.other_locks[name] = record.other_locks
            else:
                self.other_locks.pop(name, None)
            if record.lock:
                self.node_locks[name] = parse_lock(record.lock)
            else:
                self.node_locks.pop(name, None)

    def seen_node_locked(self, name: str) -> SeenNode | None:
        """The GPU node's resourceVersion and lock as the watch last showed them, the lock's owner marked done when
        the watch showed it so (None when unknown)."""
        seen = self.seen_nodes.get(name)
        lock = self.node_locks.get(name)
        if seen is None or lock is None or not lock.pod:
            return seen
        held = self.lock_owner_locked(lock)
        if held is None or not self.lock_owner_done_locked(held):
            return seen
        return replace(seen, owner_done=True)

    def seen_version_locked(self, node: str) -> str | None:
        """The node's resourceVersion as the node stream last showed it (None: not a GPU node of the cache)."""
        seen = self.seen_nodes.get(node)
        return seen.resource_version if seen is not None else None

    def judge_node(self, record: NodeRecord, now: float) -> NodeState:
        # The previous state is read without the lock: any earlier state of the node will do, since it is reused
        # only when this record changes nothing its inventory is read from.
        try:
            return node_state(record, now=now, catalog=self.catalog, previous=self.nodes.get(record.name))
        except Exception as error:  # one bad object must not stop the loop that reads all the others
            log.exception("node %s: unexpected error reading its GPU inventory", record.name)
            return NodeState(name=record.name, inventory=None, error=f"unreadable node: {type(error).__name__}",
                             record=record)

    def commit_nodes(self, changes: Sequence[tuple[str, NodeState | None]]) -> None:
        if not changes:
            return
        latest = dict(changes)  # the last change of a node in the batch wins
        for _ in range(COMMIT_ATTEMPTS):
            with self.locked("nodes"):
                before = {name: (self.nodes.get(name), self.node_usage.get(name), self.views.get(name))
                          for name in latest}
            views: dict[str, NodeView | None] = {}
            for name, state in latest.items():
                previous, totals, view = before[name]
                views[name] = node_view(state, totals, previous, view)
            with self.locked("nodes"):
                if all(self.nodes.get(name) is b[0] and self.node_usage.get(name) is b[1]
                       for name, b in before.items()):
                    self._swap_nodes_locked(latest, views)
                    return
                self.stats.lost_races += 1
        with self.locked("nodes"):
            views = {name: node_view(state, self.node_usage.get(name), self.nodes.get(name),
                                     self.views.get(name)) for name, state in latest.items()}
            self._swap_nodes_locked(latest, views)

    def _swap_nodes_locked(self, states: Mapping[str, NodeState | None], views: Mapping[str, NodeView | None]) -> None:
        for name, state in states.items():
            previous = self.nodes.get(name)
            if state is None:
                self.nodes.pop(name, None)
                self.broken.pop(name, None)
            else:
                self.nodes[name] = state
                if state.error and (previous is None or previous.error != state.error):
                    self.stats.node_annotation_errors += 1
                    log.warning("node %s: cannot read GPU annotations: %s", name, state.error)
                if state.inventory is None and state.error:
                    self.broken[name] = state.error
                else:
                    self.broken.pop(name, None)
            view = views.get(name)
            if view is None:
                self.views.pop(name, None)
            else:
                self.views[name] = view

    def commit_pods(self, changes: Sequence[PodChange], *, listed_at: float | None) -> None:
        if not changes:
            return
        for _ in range(COMMIT_ATTEMPTS):
            with self.locked("pods"):
                held_before = {change.uid: self.held.get(change.uid) for change in changes}
                nodes = touched_nodes(changes, held_before)
                nodes_before = {node: (self.nodes.get(node), self.node_usage.get(node)) for node in nodes}
            plan = plan_pods(changes, held_before, nodes_before, listed_at=listed_at)
            with self.locked("pods"):
                if all(self.held.get(uid) is plan.held_before[uid] for uid in plan.held_before) and all(
                        self.nodes.get(node) is state and self.node_usage.get(node) is totals
                        for node, (state, totals) in plan.nodes_before.items()):
                    self._swap_pods_locked(plan)
                    return
                self.stats.lost_races += 1
        with self.locked("pods"):
            held_before = {change.uid: self.held.get(change.uid) for change in changes}
            nodes_before = {node: (self.nodes.get(node), self.node_usage.get(node))
                            for node in touched_nodes(changes, held_before)}
            self._swap_pods_locked(plan_pods(changes, held_before, nodes_before, listed_at=listed_at))

    def _swap_pods_locked(self, plan: Plan) -> None:
        now = self.clock()
        for uid, held in plan.held_after.items():
            self.quota_ledger.count(uid, held.usage if held is not None else None)
            self._index_locked(uid, self.held.get(uid), held)
            if held is None:
                self._unindex_locked(uid, self.held.pop(uid, None))
                self.assumed.discard(uid)
            else:
                if held.usage.bind_phase == "success" and uid not in self.succeeded_at:
                    self.succeeded_at[uid] = now
                self.held[uid] = held
                self.uid_by_name[(held.usage.namespace, held.usage.name)] = uid
                if held.assumed_at is None:
                    self.assumed.discard(uid)
                else:
                    self.assumed.add(uid)
        for node, totals in plan.totals_after.items():
            if totals:
                self.node_usage[node] = totals
            else:
                self.node_usage.pop(node, None)
            view = plan.views_after.get(node)
            if view is not None:
                self.views[node] = view
        for uid in plan.fixed:
            self.stats.broken_pods.pop(uid, None)
        for uid, message in plan.errors.items():
            if self.stats.broken_pods.get(uid) != message:
                self.stats.pod_annotation_errors += 1
                log.warning("%s; its GPU usage is unknown and not counted", message)
            self.stats.broken_pods[uid] = message

    def hold_locked(self, uid: str, usage: PodUsage, *, assumed_at: float | None,
                    api_usage: PodUsage | None = None) -> None:
        self.release_locked(uid)
        self.held[uid] = Held(usage=usage, assumed_at=assumed_at, api_usage=api_usage)
        self._index_locked(uid, None, self.held[uid])
        self.uid_by_name[(usage.namespace, usage.name)] = uid
        if assumed_at is not None:
            self.assumed.add(uid)
        self._add_usage_locked(usage.node, usage.booking, sign=1)
        self.quota_ledger.count(uid, usage)

    def release_locked(self, uid: str) -> PodUsage | None:
        held = self.held.pop(uid, None)
        self.assumed.discard(uid)
        self._unindex_locked(uid, held)
        if held is None:
            return None
        self._index_locked(uid, held, None)
        self._add_usage_locked(held.usage.node, held.usage.booking, sign=-1)
        self.quota_ledger.count(uid, None)
        return held.usage

    def _index_locked(self, uid: str, before: Held | None, after: Held | None) -> None:
        """Keep `held_on` and `priorities` in step when pod ``uid``'s holding changes from ``before`` to ``after``."""
        if before is not None:
            left = self.priorities[before.usage.priority] - 1
            if left:
                self.priorities[before.usage.priority] = left
            else:
                del self.priorities[before.usage.priority]
            on_node = self.held_on[before.usage.node]
            del on_node[uid]
            if not on_node:
                del self.held_on[before.usage.node]
        if after is not None:
            self.priorities[after.usage.priority] = self.priorities.get(after.usage.priority, 0) + 1
            self.held_on.setdefault(after.usage.node, {})[uid] = after

    def lock_owner_done_locked(self, held: Held) -> bool:
        """Whether the lock owner ``held`` is done: bind-phase failed, or success for `LOCK_RELEASE_GRACE_SECONDS`.

        HAMi's device plugin marks the pod ``success`` and then removes the lock, two writes a moment apart. A node
        in between still counts as busy for that moment: a bind sent there now would find the lock gone by the time
        it writes, and its write preconditioned on the watch's version would meet a newer node (one more round trip).
        A lock left behind longer (a plugin that failed to remove it) is stale, as for `/bind`.
        """
        phase = held.usage.bind_phase
        if phase == "failed":
            return True
        if phase != "success":
            return False
        succeeded_at = self.succeeded_at.get(held.usage.uid)
        return succeeded_at is None or self.clock() - succeeded_at > LOCK_RELEASE_GRACE_SECONDS

    def lock_owner_locked(self, lock: LockValue) -> Held | None:
        """What the cache holds for the pod a node lock names (None: unknown, or an owner-less lock)."""
        owner_uid = self.uid_by_name.get((lock.namespace, lock.pod)) if lock.pod else None
        return self.held.get(owner_uid) if owner_uid is not None else None

    def _unindex_locked(self, uid: str, held: Held | None) -> None:
        self.succeeded_at.pop(uid, None)
        if held is not None:
            key = (held.usage.namespace, held.usage.name)
            if self.uid_by_name.get(key) == uid:
                del self.uid_by_name[key]

    def _add_usage_locked(self, node: str, booking: NodeTotals, *, sign: int) -> None:
        totals = add_booking(self.node_usage.get(node), booking, sign=sign)
        if totals:
            self.node_usage[node] = totals
        else:
            self.node_usage.pop(node, None)
        state = self.nodes.get(node)
        if state is not None and state.inventory is not None:
            self.views[node] = build_node_view(state.inventory, totals)

    def node_view(self, name: str, *, holding: PodUsage | None = None) -> NodeView | None:
        """One GPU node's current view (immutable), or None when the node is not a GPU node we know.

        With ``holding``, also None unless the cache holds exactly that usage for its pod: the view and the check are
        read under one lock, so the view's totals are known to include it (the bind's check from the cache)."""
        with self.locked("read"):
            if holding is not None:
                held = self.held.get(holding.uid)
                if held is None or held.usage != holding:
                    return None
            return self.views.get(name)

    def held_by(self, uid: str) -> PodUsage | None:
        """What a pod holds according to the cache, if anything."""
        with self.locked("read"):
            held = self.held.get(uid)
            return held.usage if held else None

    # -- read-only views (metrics, tests, demo) ------------------------------------------------------

    def node_views(self) -> dict[str, NodeView]:
        """A consistent snapshot of every GPU node's view (views are immutable)."""
        with self.locked("read"):
            return dict(self.views)

    def broken_nodes(self) -> dict[str, str]:
        """Nodes whose register annotation does not parse, with the error."""
        with self.locked("read"):
            return dict(self.broken)

    def pod_usages(self) -> list[PodUsage]:
        """Every pod's usage (API-confirmed and assumed)."""
        with self.locked("read"):
            held = list(self.held.values())  # one C-level copy under the lock; unpacked outside it
        return [entry.usage for entry in held]

    def read_consistent(self) -> tuple[dict[str, NodeView], dict[str, str], list[PodUsage]]:
        """Views, broken nodes and pod usages taken under one lock acquisition, so they agree (dashboard)."""
        with self.locked("read"):
            views, broken, held = dict(self.views), dict(self.broken), list(self.held.values())
        return views, broken, [entry.usage for entry in held]
