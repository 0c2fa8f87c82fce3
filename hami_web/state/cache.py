"""The cluster cache: node inventories and GPU usage, the only place in hami-web with a lock.

Usage is kept per pod UID and folded into per-node totals incrementally, so a filter never recomputes usage
from every pod. A filter's decision and the booking of its result happen under one lock acquisition
(`place`), which is what guarantees that two concurrent filters never promise the same GPU capacity.

Sync work (watch events, list pages, resyncs) must not stall filters, so it is applied in three steps: read
what it touches under the lock (a few dict lookups), compute the new per-node totals and `NodeView`s outside
it (`state.planning`), then swap them in under the lock — but only if nothing it read has changed meanwhile
(every held entry, node state and per-node total is replaced, never mutated, so an identity check tells). A
batch that lost a race is planned again; after a few lost races it is applied under the lock in one go,
which is correct and merely slower. The longest hold per kind of work is recorded for
``hami_web_cache_lock_hold_seconds``.

Filter-time assumptions (pods we placed whose booking the API does not show yet: the filter decides in memory
and `/bind` writes the booking) are usage like any other; a later observation of the pod confirms or replaces
them. A full list only overrides an assumption made more than `ASSUMPTION_GRACE_SECONDS` before the list
started: the assumption is booked (again, by `reassume` at bind) *before* the pod patch is sent, so a list that
starts a moment after the booking may still miss the patch; a list that does not show the pod at all drops it
at once (the pod was deleted). Between lists the resync drops an assumption once the pod stream has been
current for that long after it without showing it. What the API showed a pod holding while our different
assumption stood (a booking another binder wrote) is kept with the assumption (`Held.api_usage`, the
"shadowed" booking) and restored when ours is abandoned or expires.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.grants import encode_pod_devices
from hami_web.core.names import NODE_LOCK
from hami_web.core.nodelocks import LockValue, Owner, SeenNode, bare_lock_live, parse_lock, stale_reason
from hami_web.core.options import PodOptions
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView, build_node_view, pod_booking
from hami_web.state.nodes import NodeRecord, NodeState, device_plugin_gone, handshake_due, node_record, node_state
from hami_web.state.planning import (
    ASSUMPTION_GRACE_SECONDS,
    CHUNK_SIZE,
    Held,
    NodeTotals,
    Plan,
    PodChange,
    add_booking,
    chunks_by_node,
    node_view,
    plan_pods,
    same_usage,
    touched_nodes,
)
from hami_web.state.pods import PodRecord, PodUsage, booked_at, pod_record, standing_booking

__all__ = ["ASSUMPTION_GRACE_SECONDS", "AlreadyBooked", "CacheStats", "ClusterCache", "LockHolds"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# Plans that lost a race with a filter before the batch is applied under the lock instead.
COMMIT_ATTEMPTS = 3
# How long after its owner shows bind-phase=success a node lock still makes its node busy (see
# `ClusterCache._lock_owner_done_locked`): HAMi's device plugin removes the lock right after that write.
LOCK_RELEASE_GRACE_SECONDS = 2.0
LOCK_HOLD_BUCKETS_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class AlreadyBooked(Exception):
    """The pod's booking is already written in the API (by a binder of this or another replica)."""


@dataclass(slots=True)
class CacheStats:
    """Counters the metrics endpoint reads; plain ints updated under the cache lock."""

    pod_annotation_errors: int = 0
    node_annotation_errors: int = 0
    broken_pods: dict[str, str] = field(default_factory=dict)
    lost_races: int = 0


@dataclass(slots=True)
class LockHolds:
    """How long the cache lock was held, by kind of work: a histogram and the longest hold."""

    count: int = 0
    total_seconds: float = 0.0
    max_seconds: float = 0.0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * len(LOCK_HOLD_BUCKETS_SECONDS))
    max_cpu_seconds: float = 0.0

    def observe(self, seconds: float, cpu_seconds: float) -> None:
        """Record one hold: wall time (what a waiting filter sees) and the holder's own CPU time.

        The two differ when the holder is preempted while holding the lock, by the OS on a busy machine or
        by another thread's long GIL-holding call; the CPU time is the work done under the lock.
        """
        self.count += 1
        self.total_seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        self.max_cpu_seconds = max(self.max_cpu_seconds, cpu_seconds)
        for position, bound in enumerate(LOCK_HOLD_BUCKETS_SECONDS):
            if seconds <= bound:
                self.bucket_counts[position] += 1
                break


class ClusterCache:
    """Thread-safe inventory and usage of every GPU node, fed by lists and watches (see `state.sync`)."""

    def __init__(self, *, catalog: DeviceCatalog = DEFAULT_CATALOG, clock: Clock = time.time,
                 busy_nodes_last: bool = True, node_lock_timeout_seconds: float = 300.0) -> None:
        """``busy_nodes_last``: a filter tries nodes busy binding after the others (see `busy_nodes`);
        ``node_lock_timeout_seconds`` is ``--node-lock-timeout``, after which a node lock no longer makes it busy.
        """
        self._lock = threading.Lock()
        self._busy_nodes_last = busy_nodes_last
        self._node_lock_timeout_seconds = node_lock_timeout_seconds
        self._synced = threading.Event()
        self.catalog = catalog
        self._clock = clock
        self._nodes: dict[str, NodeState] = {}
        self._views: dict[str, NodeView] = {}
        self._broken_nodes: dict[str, str] = {}
        self._held: dict[str, Held] = {}
        self._assumed: set[str] = set()
        self._node_usage: dict[str, NodeTotals] = {}
        self._pods_current_at = 0.0
        # Pods this process placed and has not seen bound, deleted or abandoned, with their placement.
        # `/bind` binds only these, so nobody can use our RBAC to bind a pod we never chose a node for, and it
        # writes the booking it finds here (the filter writes nothing to the API).
        self._placed: dict[str, PodUsage] = {}
        # What the watch last showed of each GPU node's resourceVersion and lock (a bind takes a free lock with one
        # conditional write), the nodes whose lock is set, and the pod of each namespace/name (whose lock it is).
        self._seen_nodes: dict[str, SeenNode] = {}
        self._node_locks: dict[str, LockValue] = {}
        # The families' own locks set on each node (key, value), e.g. Cambricon's: live ones make a node busy too.
        self._other_locks: dict[str, tuple[tuple[str, str], ...]] = {}
        self._uid_by_name: dict[tuple[str, str], str] = {}
        # When the watch first showed each held pod at bind-phase=success (see `_lock_owner_done_locked`).
        self._succeeded_at: dict[str, float] = {}
        # Bookings this process wrote (or may have written) and abandoned, voided or not, by uid: the pod may be
        # placed again over them (see `standing_booking`), even while the watch still shows one voided (its echo came
        # after the bind gave up); dropped once the pod is bound, deleted or finished.
        self._abandoned: dict[str, str] = {}
        self.stats = CacheStats()
        self.lock_holds: dict[str, LockHolds] = {}
        # Told the UIDs of pods that no longer wait for a node (deleted, finished or bound), outside the lock:
        # the dashboard's pending page drops them within a watch event instead of after its 15 minutes.
        self._settled_listeners: list[Callable[[Sequence[str]], None]] = []

    @contextlib.contextmanager
    def _locked(self, work: str) -> Iterator[None]:
        with self._lock:
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                yield
            finally:
                holds = self.lock_holds.get(work)
                if holds is None:
                    holds = self.lock_holds[work] = LockHolds()
                holds.observe(time.perf_counter() - started, time.thread_time() - started_cpu)

    def lock_hold_snapshot(self) -> dict[str, LockHolds]:
        """A copy of the lock-hold statistics per kind of work (``filter``, ``pods``, ``nodes``, ``resync``…)."""
        with self._lock:
            return {work: LockHolds(h.count, h.total_seconds, h.max_seconds, list(h.bucket_counts),
                                    h.max_cpu_seconds) for work, h in self.lock_holds.items()}

    # -- readiness --------------------------------------------------------------------------------

    def mark_synced(self) -> None:
        """Called once both nodes and pods have been listed; releases waiting filters."""
        self._synced.set()

    def wait_synced(self, timeout_seconds: float) -> bool:
        """Block until the first full sync, at most ``timeout_seconds``; True when synced."""
        return self._synced.wait(timeout_seconds)

    @property
    def synced(self) -> bool:
        """Whether the first full sync has completed."""
        return self._synced.is_set()

    def note_pods_current(self, at: float) -> None:
        """The pod stream delivered everything up to about ``at`` (an event, a bookmark, a finished list)."""
        self._pods_current_at = max(self._pods_current_at, at)

    # -- nodes ------------------------------------------------------------------------------------

    def replace_nodes(self, records: Iterable[NodeRecord]) -> list[tuple[str, tuple[str, ...]]]:
        """Reconcile every node with a full list; returns the nodes whose handshakes we should answer, with the
        handshake keys of each."""
        listed = {record.name: record for record in records}
        with self._locked("nodes"):
            current = dict(self._nodes)
            self._note_seen_locked([(name, None) for name in self._seen_nodes if name not in listed])
            self._note_seen_locked([(name, record) for name, record in listed.items()])
        now = self._clock()
        changes: list[tuple[str, NodeState | None]] = [(name, None) for name in current if name not in listed]
        for name, record in listed.items():
            previous = current.get(name)
            if previous is None or previous.record != record:
                changes.append((name, self._judge_node(record, now)))
        for start in range(0, len(changes), CHUNK_SIZE):
            self._commit_nodes(changes[start:start + CHUNK_SIZE])
        return [(name, due) for name, record in listed.items() if (due := handshake_due(record))]

    def apply_node_events(self, events: Sequence[tuple[str, NodeRecord]]) -> None:
        """Apply watch events (``ADDED``, ``MODIFIED``, ``DELETED``) for nodes, as one batch."""
        now = self._clock()
        with self._locked("nodes"):
            self._note_seen_locked([(record.name, None if kind == "DELETED" else record) for kind, record in events])
        self._commit_nodes([(record.name, None if kind == "DELETED" else self._judge_node(record, now))
                            for kind, record in events])

    def observe_node(self, event_type: str, node: Mapping[str, Any]) -> None:
        """Apply one watch event for a node object (reads it first; see `apply_node_events`)."""
        self.apply_node_events([(event_type, node_record(node, catalog=self.catalog))])

    def _note_seen_locked(self, records: Iterable[tuple[str, NodeRecord | None]]) -> None:
        """Remember each GPU node's resourceVersion and lock as the API showed them (None: the node is gone)."""
        for name, record in records:
            if record is None or not record.has_devices:
                self._seen_nodes.pop(name, None)
                self._node_locks.pop(name, None)
                self._other_locks.pop(name, None)
                continue
            self._seen_nodes[name] = SeenNode(resource_version=record.resource_version, lock=record.lock,
                                              other_locks=record.other_locks)
            if record.other_locks:
                self._other_locks[name] = record.other_locks
            else:
                self._other_locks.pop(name, None)
            if record.lock:
                self._node_locks[name] = parse_lock(record.lock)
            else:
                self._node_locks.pop(name, None)

    def seen_node(self, name: str) -> SeenNode | None:
        """The GPU node's resourceVersion and lock as the watch last showed them (None when unknown)."""
        with self._locked("read"):
            seen = self._seen_nodes.get(name)
            lock = self._node_locks.get(name)
            if seen is None or lock is None or not lock.pod:
                return seen
            held = self._lock_owner_locked(lock)
            if held is None or not self._lock_owner_done_locked(held):
                return seen
            return replace(seen, owner_done=True)

    def _judge_node(self, record: NodeRecord, now: float) -> NodeState:
        try:
            return node_state(record, now=now, catalog=self.catalog)
        except Exception as error:  # one bad object must not stop the loop that reads all the others
            log.exception("node %s: unexpected error reading its GPU inventory", record.name)
            return NodeState(name=record.name, inventory=None, error=f"unreadable node: {type(error).__name__}",
                             record=record)

    def _commit_nodes(self, changes: Sequence[tuple[str, NodeState | None]]) -> None:
        if not changes:
            return
        latest = dict(changes)  # the last change of a node in the batch wins
        for _ in range(COMMIT_ATTEMPTS):
            with self._locked("nodes"):
                before = {name: (self._nodes.get(name), self._node_usage.get(name), self._views.get(name))
                          for name in latest}
            views: dict[str, NodeView | None] = {}
            for name, state in latest.items():
                previous, totals, view = before[name]
                views[name] = node_view(state, totals, previous, view)
            with self._locked("nodes"):
                if all(self._nodes.get(name) is b[0] and self._node_usage.get(name) is b[1]
                       for name, b in before.items()):
                    self._swap_nodes_locked(latest, views)
                    return
                self.stats.lost_races += 1
        with self._locked("nodes"):
            views = {name: node_view(state, self._node_usage.get(name), self._nodes.get(name),
                                      self._views.get(name)) for name, state in latest.items()}
            self._swap_nodes_locked(latest, views)

    def _swap_nodes_locked(self, states: Mapping[str, NodeState | None], views: Mapping[str, NodeView | None]) -> None:
        for name, state in states.items():
            previous = self._nodes.get(name)
            if state is None:
                self._nodes.pop(name, None)
                self._broken_nodes.pop(name, None)
            else:
                self._nodes[name] = state
                if state.error and (previous is None or previous.error != state.error):
                    self.stats.node_annotation_errors += 1
                    log.warning("node %s: cannot read GPU annotations: %s", name, state.error)
                if state.inventory is None and state.error:
                    self._broken_nodes[name] = state.error
                else:
                    self._broken_nodes.pop(name, None)
            view = views.get(name)
            if view is None:
                self._views.pop(name, None)
            else:
                self._views[name] = view

    # -- pods -------------------------------------------------------------------------------------

    def replace_pods(self, records: Iterable[PodRecord], *, listed_at: float, listed: Iterable[str] | None = None,
                     ended: Iterable[str] = ()) -> None:
        """Reconcile all API-derived usage with a full pod list started at ``listed_at`` (clock seconds).

        ``records`` need only cover the pods that hold GPUs or cannot be read; ``listed`` is the UID of every pod
        the list showed (default: those of ``records``) and ``ended`` those that are Succeeded or Failed. An
        assumption for a pod the list does not show at all is dropped at once: the pod existed before we placed
        it, so a list started after that proves it deleted (the grace is for an unseen patch, not an absent pod).
        Only differences are applied, in chunks, so a list that changes nothing costs one snapshot of the held
        pods and no view rebuild.
        """
        observed: dict[str, PodRecord] = {}
        errors: dict[str, str] = {}
        seen: set[str] = set()
        for record in records:
            seen.add(record.uid)
            if record.error:
                errors[record.uid] = record.error
                observed[record.uid] = record
            elif record.usage is not None:
                observed[record.uid] = record
        if listed is not None:
            seen.update(listed)
        alive = seen.difference(ended)
        with self._locked("pods"):
            held_now = list(self._held.items())
        changes = [PodChange(uid, "listed", absent=uid not in seen) for uid, held in held_now if uid not in observed]
        held_map = dict(held_now)
        for uid, record in observed.items():
            held = held_map.get(uid)
            if record.error or held is None or held.assumed_at is not None or not same_usage(held.usage, record.usage):
                changes.append(PodChange(uid, "listed", record))
        for chunk in chunks_by_node(changes, held_map):
            self._commit_pods(chunk, listed_at=listed_at)
        with self._locked("pods"):
            self.stats.broken_pods = errors
            for uid in [uid for uid in self._placed if uid not in alive and uid not in self._held]:
                del self._placed[uid]
            for uid in [uid for uid in self._abandoned if uid not in alive]:
                del self._abandoned[uid]
        self.note_pods_current(listed_at)

    def apply_pod_events(self, events: Sequence[tuple[str, PodRecord]]) -> None:
        """Apply watch events for pods as one batch: a deleted or finished pod frees its GPUs at once."""
        self._commit_pods([PodChange(record.uid, "deleted" if kind == "DELETED" else "event", record)
                           for kind, record in events], listed_at=None)
        gone = [record.uid for kind, record in events if kind == "DELETED" or record.finished]
        bound = [record.uid for _, record in events if record.bound]
        if gone or (bound and self._abandoned):
            with self._locked("pods"):
                for uid in gone:
                    self._placed.pop(uid, None)
                    self._abandoned.pop(uid, None)
                for uid in bound:
                    self._abandoned.pop(uid, None)
        settled = [*gone, *bound]
        if settled:
            for listener in self._settled_listeners:
                listener(settled)

    def on_pods_settled(self, listener: Callable[[Sequence[str]], None]) -> None:
        """Call ``listener`` with the UIDs of pods a watch showed deleted, finished or bound (not under the lock)."""
        self._settled_listeners.append(listener)

    def observe_pod(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Apply one watch event for a pod object (reads it first; see `apply_pod_events`)."""
        self.apply_pod_events([(event_type, pod_record(pod, catalog=self.catalog))])

    def _commit_pods(self, changes: Sequence[PodChange], *, listed_at: float | None) -> None:
        if not changes:
            return
        for _ in range(COMMIT_ATTEMPTS):
            with self._locked("pods"):
                held_before = {change.uid: self._held.get(change.uid) for change in changes}
                nodes = touched_nodes(changes, held_before)
                nodes_before = {node: (self._nodes.get(node), self._node_usage.get(node)) for node in nodes}
            plan = plan_pods(changes, held_before, nodes_before, listed_at=listed_at)
            with self._locked("pods"):
                if all(self._held.get(uid) is plan.held_before[uid] for uid in plan.held_before) and all(
                        self._nodes.get(node) is state and self._node_usage.get(node) is totals
                        for node, (state, totals) in plan.nodes_before.items()):
                    self._swap_pods_locked(plan)
                    return
                self.stats.lost_races += 1
        with self._locked("pods"):
            held_before = {change.uid: self._held.get(change.uid) for change in changes}
            nodes_before = {node: (self._nodes.get(node), self._node_usage.get(node))
                            for node in touched_nodes(changes, held_before)}
            self._swap_pods_locked(plan_pods(changes, held_before, nodes_before, listed_at=listed_at))

    def _swap_pods_locked(self, plan: Plan) -> None:
        now = self._clock()
        for uid, held in plan.held_after.items():
            if held is None:
                self._unindex_locked(uid, self._held.pop(uid, None))
                self._assumed.discard(uid)
            else:
                if held.usage.bind_phase == "success" and uid not in self._succeeded_at:
                    self._succeeded_at[uid] = now
                self._held[uid] = held
                self._uid_by_name[(held.usage.namespace, held.usage.name)] = uid
                if held.assumed_at is None:
                    self._assumed.discard(uid)
                else:
                    self._assumed.add(uid)
        for node, totals in plan.totals_after.items():
            if totals:
                self._node_usage[node] = totals
            else:
                self._node_usage.pop(node, None)
            view = plan.views_after.get(node)
            if view is not None:
                self._views[node] = view
        for uid in plan.fixed:
            self.stats.broken_pods.pop(uid, None)
        for uid, message in plan.errors.items():
            if self.stats.broken_pods.get(uid) != message:
                self.stats.pod_annotation_errors += 1
                log.warning("%s; its GPU usage is unknown and not counted", message)
            self.stats.broken_pods[uid] = message

    # -- resync -----------------------------------------------------------------------------------

    def resync(self) -> list[tuple[str, tuple[str, ...]]]:
        """Re-judge the local state without the API; returns the nodes whose handshakes we should answer (with
        the handshake keys of each).

        A node whose ``Requesting_`` handshake just passed its deadline (and whose kubelet reports no GPUs)
        loses its GPUs; an assumption the pod stream has not confirmed within the grace period is dropped
        (falling back to what the API last showed for the pod).
        """
        now = self._clock()
        with self._locked("resync"):
            nodes = list(self._nodes.values())
            assumed = [(uid, self._held[uid]) for uid in self._assumed]
            current_at = self._pods_current_at
        changed = [(state.name, self._judge_node(state.record, now)) for state in nodes
                   if state.record is not None and state.record.has_devices
                   and device_plugin_gone(state.record, now=now) != state.plugin_gone]
        self._commit_nodes(changed)
        expired = [PodChange(uid, "expire") for uid, held in assumed
                   if held.assumed_at is not None and held.assumed_at + ASSUMPTION_GRACE_SECONDS < current_at]
        self._commit_pods(expired, listed_at=None)
        return [(state.name, state.handshake_due) for state in nodes if state.handshake_due]

    # -- scheduling -------------------------------------------------------------------------------

    def place(self, *, uid: str, namespace: str, name: str, request: PodRequest, options: PodOptions,
              candidates: Sequence[str], container_names: Sequence[str] = (),
              resource_version: str = "", replaces: str = "") -> Placement | NoPlacement:
        """Forget the pod's earlier assumption, choose a node, and book the result — atomically.

        Nodes busy binding (`busy_nodes`) are tried after the others unless the cache was made with
        ``busy_nodes_last=False``. ``resource_version`` is the pod's as kube-scheduler sent it: `/bind` writes the
        booking with it as a precondition instead of reading the pod first. Raises `AlreadyBooked` when the API
        shows the pod holding GPUs already (another binder wrote its booking: kube-scheduler's informer has not
        seen the pod bound yet): a second placement would book it twice — unless it is the booking ``replaces`` (the
        devices of a booking `standing_booking` says may be overwritten) or one this process abandoned.
        """
        with self._locked("filter"):
            held = self._held.get(uid)
            if held is not None and held.assumed_at is None and held.usage.devices_text not in (
                    self._abandoned.get(uid), replaces or None):
                raise AlreadyBooked(f"pod {namespace}/{name} already holds GPUs on node {held.usage.node} "
                                    f"({held.usage.devices_text}); it is not placed again")
            shadowed = held.api_usage if held is not None else None
            self._release_locked(uid)
            busy = self._busy_nodes_locked(uid, namespace, name, self._lock_keys(request)) \
                if self._busy_nodes_last else frozenset()
            result = choose_node(request, options, candidates, self._views, self._broken_nodes, busy=busy)
            if isinstance(result, Placement):
                booking = pod_booking(result.grants, init_count=request.init_count, owner=f"{namespace}/{name}")
                usage = PodUsage(uid=uid, namespace=namespace, name=name, node=result.node, grants=result.grants,
                                 booking=booking, devices_text=encode_pod_devices(result.grants),
                                 container_names=tuple(container_names), init_count=request.init_count,
                                 resource_version=resource_version)
                self._hold_locked(uid, usage, assumed_at=self._clock(), api_usage=shadowed)
                self._placed[uid] = usage
            else:
                self._placed.pop(uid, None)
                if shadowed is not None:  # the API showed the pod holding this meanwhile: that is the truth now
                    self._hold_locked(uid, shadowed, assumed_at=None)
            return result

    def busy_nodes(self) -> frozenset[str]:
        """The GPU nodes busy binding now: a live owner holds their lock, or a placement of ours awaits its bind."""
        with self._locked("read"):
            return self._busy_nodes_locked("", "", "")

    def _lock_keys(self, request: PodRequest) -> frozenset[str] | None:
        """The node locks a bind of ``request`` would take (None: every lock counts, for a pod asking no family)."""
        rules = self.catalog.locks_for(request.families)
        return frozenset(rule.key for rule in rules) if rules else None

    def _busy_nodes_locked(self, uid: str, namespace: str, name: str,
                           lock_keys: frozenset[str] | None = None) -> frozenset[str]:
        """`busy_nodes`, leaving out what belongs to the pod being placed (``uid``, ``namespace/name``); only the locks
        in ``lock_keys`` (those its bind would take; None: all) make a node busy for it.

        A lock is live by the rules `/bind` applies (`core.nodelocks.stale_reason`), with the owner's bind-phase
        as the watch showed it; an owner without a booking in the cache for `ASSUMPTION_GRACE_SECONDS` after it
        took the lock counts as gone (its bind failed or it was deleted). A placement counts for as long as its
        assumption is fresh (kube-scheduler binds at once, so an older one is a bind that never came).
        """
        now = self._clock()
        busy: set[str] = set()
        timeout = self._node_lock_timeout_seconds
        for node, others in self._other_locks.items():
            if any((lock_keys is None or key in lock_keys)
                   and bare_lock_live(self.catalog.lock_rule(key), value, now=now, default_timeout_seconds=timeout)
                   for key, value in others):
                busy.add(node)
        for node, lock in self._node_locks.items() if lock_keys is None or NODE_LOCK in lock_keys else ():
            if lock.owned_by(namespace, name):
                continue
            owner, phase = Owner.UNKNOWN, ""
            held = self._lock_owner_locked(lock)
            if held is not None:
                owner = Owner.PRESENT
                phase = held.usage.bind_phase if self._lock_owner_done_locked(held) else ""
            elif lock.pod and lock.taken_at is not None and now - lock.taken_at > ASSUMPTION_GRACE_SECONDS:
                owner = Owner.GONE
            if not stale_reason(lock, now=now, timeout_seconds=self._node_lock_timeout_seconds, owner=owner,
                                owner_bind_phase=phase):
                busy.add(node)
        for placed_uid, usage in self._placed.items():
            held = self._held.get(placed_uid)
            if placed_uid != uid and held is not None and held.assumed_at is not None \
                    and now - held.assumed_at <= ASSUMPTION_GRACE_SECONDS:
                busy.add(usage.node)
        return frozenset(busy)

    def forget(self, uid: str, *, keep_booking: bool = False) -> PodUsage | None:
        """Drop the pod's placement and our assumption of its booking (abandoned); returns what was dropped.

        What the API has shown the pod to hold (a booking another scheduler wrote, or ours once the watch echoed
        it) stays until the API shows otherwise: dropping it here could lose it for good, if the event that brought
        it was the pod's last. ``keep_booking``: drop only the placement; what the pod holds stays booked, as an
        assumption from now (its booking may stand in the API), until a list or the watch shows the truth.
        """
        with self._locked("filter"):
            placed = self._placed.pop(uid, None)
            held = self._held.get(uid)
            if not keep_booking:
                if placed is not None:  # voided: its echo, if the watch brings it late, is ours, not another binder's
                    self._abandoned[uid] = placed.devices_text
                if held is not None and held.assumed_at is None:
                    return None
                shadowed = held.api_usage if held is not None else None
                dropped = self._release_locked(uid)
                if shadowed is not None:  # the API showed the pod holding this meanwhile: that is the truth now
                    self._hold_locked(uid, shadowed, assumed_at=None)
                return dropped
            usage = held.usage if held is not None else placed
            if usage is not None:
                self._hold_locked(uid, usage, assumed_at=self._clock())
                self._abandoned[uid] = usage.devices_text
            return None

    def placed(self, uid: str) -> PodUsage | None:
        """The placement this process last chose for the pod ``uid`` and has not seen bound."""
        with self._locked("read"):
            return self._placed.get(uid)

    def reassume(self, usage: PodUsage) -> None:
        """Book ``usage`` as a fresh assumption: its booking is about to be written to the API (at bind).

        Restarts the grace period in which a list that does not show the pod yet leaves the booking alone, and
        books it again if a list dropped it while kube-scheduler had not bound the pod yet. What the API showed the
        pod holding is kept beside the assumption (restored if ours is abandoned): since the bind writes without
        reading the pod first, the watch may already have shown another binder's booking, and a pod's last event
        (bound, ``bind-phase=success``) may never come again.
        """
        with self._locked("filter"):
            held = self._held.get(usage.uid)
            if held is None:
                shadowed = None
            elif held.assumed_at is not None:
                shadowed = held.api_usage
            else:
                shadowed = held.usage
            self._hold_locked(usage.uid, usage, assumed_at=self._clock(), api_usage=shadowed)

    def node_view(self, name: str) -> NodeView | None:
        """One GPU node's current view (immutable), or None when the node is not a GPU node we know."""
        with self._locked("read"):
            return self._views.get(name)

    def mark_bound(self, uid: str) -> None:
        """The pod's Binding exists: it can never be bound again, so it stops being bindable."""
        with self._locked("filter"):
            self._placed.pop(uid, None)
            self._abandoned.pop(uid, None)

    def standing_booking(self, pod: Mapping[str, Any]) -> tuple[PodUsage | None, bool]:
        """The live booking ``pod`` (as kube-scheduler sent it, or as just read) carries, if any, and whether a
        placement of ours may overwrite it.

        `/bind` writes on top of that version of the pod, so placing a pod that carries another binder's booking (a
        second replica that booked it and is about to bind it) would overwrite that booking under its feet. A booking
        this process wrote and abandoned without voiding it (`forget` with ``keep_booking``) may be overwritten, and so
        may one written longer than ``--node-lock-timeout`` ago on a pod still unbound: its binder's lock has expired,
        so its bind is over.
        """
        standing = standing_booking(pod, catalog=self.catalog)
        if standing is None:
            return None, True
        written_at = booked_at(pod)
        if written_at is not None and self._clock() - written_at > self._node_lock_timeout_seconds:
            return standing, True
        with self._locked("read"):
            return standing, self._abandoned.get(standing.uid) == standing.devices_text

    def _hold_locked(self, uid: str, usage: PodUsage, *, assumed_at: float | None,
                     api_usage: PodUsage | None = None) -> None:
        self._release_locked(uid)
        self._held[uid] = Held(usage=usage, assumed_at=assumed_at, api_usage=api_usage)
        self._uid_by_name[(usage.namespace, usage.name)] = uid
        if assumed_at is not None:
            self._assumed.add(uid)
        self._add_usage_locked(usage.node, usage.booking, sign=1)

    def _release_locked(self, uid: str) -> PodUsage | None:
        held = self._held.pop(uid, None)
        self._assumed.discard(uid)
        self._unindex_locked(uid, held)
        if held is None:
            return None
        self._add_usage_locked(held.usage.node, held.usage.booking, sign=-1)
        return held.usage

    def _lock_owner_done_locked(self, held: Held) -> bool:
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
        succeeded_at = self._succeeded_at.get(held.usage.uid)
        return succeeded_at is None or self._clock() - succeeded_at > LOCK_RELEASE_GRACE_SECONDS

    def _lock_owner_locked(self, lock: LockValue) -> Held | None:
        """What the cache holds for the pod a node lock names (None: unknown, or an owner-less lock)."""
        owner_uid = self._uid_by_name.get((lock.namespace, lock.pod)) if lock.pod else None
        return self._held.get(owner_uid) if owner_uid is not None else None

    def _unindex_locked(self, uid: str, held: Held | None) -> None:
        self._succeeded_at.pop(uid, None)
        if held is not None:
            key = (held.usage.namespace, held.usage.name)
            if self._uid_by_name.get(key) == uid:
                del self._uid_by_name[key]

    def _add_usage_locked(self, node: str, booking: NodeTotals, *, sign: int) -> None:
        totals = add_booking(self._node_usage.get(node), booking, sign=sign)
        if totals:
            self._node_usage[node] = totals
        else:
            self._node_usage.pop(node, None)
        state = self._nodes.get(node)
        if state is not None and state.inventory is not None:
            self._views[node] = build_node_view(state.inventory, totals)

    def held_by(self, uid: str) -> PodUsage | None:
        """What a pod holds according to the cache, if anything."""
        with self._locked("read"):
            held = self._held.get(uid)
            return held.usage if held else None

    # -- read-only views (metrics, tests, demo) ------------------------------------------------------

    def node_views(self) -> dict[str, NodeView]:
        """A consistent snapshot of every GPU node's view (views are immutable)."""
        with self._locked("read"):
            return dict(self._views)

    def broken_nodes(self) -> dict[str, str]:
        """Nodes whose register annotation does not parse, with the error."""
        with self._locked("read"):
            return dict(self._broken_nodes)

    def pod_usages(self) -> list[PodUsage]:
        """Every pod's usage (API-confirmed and assumed)."""
        with self._locked("read"):
            held = list(self._held.values())  # one C-level copy under the lock; unpacked outside it
        return [entry.usage for entry in held]

    def read_consistent(self) -> tuple[dict[str, NodeView], dict[str, str], list[PodUsage]]:
        """Views, broken nodes and pod usages taken under one lock acquisition, so they agree (dashboard)."""
        with self._locked("read"):
            views, broken, held = dict(self._views), dict(self._broken_nodes), list(self._held.values())
        return views, broken, [entry.usage for entry in held]
