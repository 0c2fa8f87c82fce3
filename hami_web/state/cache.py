"""The cluster cache: node inventories and GPU usage, the only place in hami-web with a lock.

Usage is kept per pod UID and folded into per-node totals incrementally, so a filter never recomputes usage
from every pod. A filter's decision and the booking of its result happen under one lock acquisition
(`place`), which is what guarantees that two concurrent filters never promise the same GPU capacity.

By concern: the data and the way sync work changes it without stalling filters (planned outside the lock, swapped
in under it) are `state.store`; the claim lifecycle of a pod we placed (placed → assumed → shown → bound |
abandoned | voided, with its table of states) is `state.claims`; the busy-node rule is `core.busynodes`; the
lock's hold statistics are `state.lockstats`. This module keeps the decisions: what a list, an event or a resync
means for the store, and the placement, booking and release of GPUs.

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

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from hami_web.core.busynodes import line_depth
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.grants import encode_pod_devices
from hami_web.core.nodelocks import SeenNode
from hami_web.core.options import BINPACK, PodOptions
from hami_web.core.preemption import DisruptionBudget, NodeVictims, Preemptor
from hami_web.core.quota import NamespaceQuota, QuotaObject
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView, pod_booking
from hami_web.state.bindlines import BindLines, busy_nodes_locked, lock_turn_locked
from hami_web.state.claims import Claims
from hami_web.state.holds import Holds, HoldState, PreemptionDecision
from hami_web.state.lockstats import LOCK_HOLD_BUCKETS_SECONDS, LockHolds
from hami_web.state.nodes import NodeRecord, NodeState, device_plugin_gone, handshake_due
from hami_web.state.planning import (
    ASSUMPTION_GRACE_SECONDS,
    CHUNK_SIZE,
    PodChange,
    chunks_by_node,
    same_usage,
)
from hami_web.state.pods import PodRecord, PodUsage, booked_at, standing_booking
from hami_web.state.quotaledger import QuotaObjects
from hami_web.state.store import LOCK_RELEASE_GRACE_SECONDS, CacheStats, CacheStore

__all__ = ["ASSUMPTION_GRACE_SECONDS", "LOCK_HOLD_BUCKETS_SECONDS", "LOCK_RELEASE_GRACE_SECONDS", "AlreadyBooked",
           "CacheStats", "ClusterCache", "LockHolds"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class AlreadyBooked(Exception):
    """The pod's booking is already written in the API (by a binder of this or another replica)."""


class ClusterCache:
    """Thread-safe inventory and usage of every GPU node, fed by lists and watches (see `state.sync`).

    It owns its store (`state.store.CacheStore`) and shows each consumer one face (`state.faces`): the reflectors
    the feed, the filter and the bind the placements, the quota and budget reflectors their sinks, preemption its
    decisions, the metrics, the tools and the dashboard the reads. It satisfies them all; a consumer is typed by the
    one it uses. Preemption's holds and PodDisruptionBudgets are a part it composes (`state.holds.Holds`), over the
    same store and lock.
    """

    def __init__(self, *, catalog: DeviceCatalog = DEFAULT_CATALOG, clock: Clock = time.time,
                 busy_nodes_last: bool = True, node_lock_timeout_seconds: float = 300.0,
                 lock_queue_depth: int = 1, lock_queue_slots: int = 0, lock_queue_seconds: float = 0.0) -> None:
        """``busy_nodes_last``: a filter tries nodes busy binding after the others (see `busy_nodes`); after
        ``node_lock_timeout_seconds`` (``--node-lock-timeout``) a node lock no longer makes it busy; under binpack
        a node is busy with ``lock_queue_depth`` binds under way (``--binpack-lock-queue``: the later ones wait in line,
        `state.bindlines`, at most ``lock_queue_seconds``) while fewer than ``lock_queue_slots`` binds wait, else with
        one."""
        self._store = CacheStore(catalog=catalog, clock=clock)
        self._holds = Holds(self._store)
        self.catalog = catalog
        self.stats: CacheStats = self._store.stats
        self._clock = clock
        self._busy_nodes_last = busy_nodes_last
        self._node_lock_timeout_seconds = node_lock_timeout_seconds
        self._queue_depth, self._queue_slots = lock_queue_depth, lock_queue_slots
        self._queue_seconds = lock_queue_seconds
        self._lines = BindLines()
        self._synced = threading.Event()
        # Pods this process placed and has not seen bound, deleted or abandoned, and the bookings it gave up
        # (`state.claims`: the lifecycle and its table of states). `/bind` writes the placement it finds there.
        self._claims = Claims()
        # Told the UIDs of pods that no longer wait for a node (deleted, finished or bound), outside the lock:
        # the dashboard's pending page drops them within a watch event instead of after its 15 minutes.
        self._settled_listeners: list[Callable[[Sequence[str]], None]] = []
        # The ResourceQuota objects, touched by their sync thread alone; their limits go to `_quota_ledger`.
        self._quota_objects = QuotaObjects()

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
        self._store.pods_current_at = max(self._store.pods_current_at, at)

    # -- reads (the store's, under its lock) ------------------------------------------------------

    def node_view(self, name: str, *, holding: PodUsage | None = None) -> NodeView | None:
        """See `CacheStore.node_view`."""
        return self._store.node_view(name, holding=holding)

    def held_by(self, uid: str) -> PodUsage | None:
        """See `CacheStore.held_by`."""
        return self._store.held_by(uid)

    def node_views(self) -> dict[str, NodeView]:
        """See `CacheStore.node_views`."""
        return self._store.node_views()

    def broken_nodes(self) -> dict[str, str]:
        """See `CacheStore.broken_nodes`."""
        return self._store.broken_nodes()

    def pod_usages(self) -> list[PodUsage]:
        """See `CacheStore.pod_usages`."""
        return self._store.pod_usages()

    def read_consistent(self) -> tuple[dict[str, NodeView], dict[str, str], list[PodUsage]]:
        """See `CacheStore.read_consistent`."""
        return self._store.read_consistent()

    def lock_hold_snapshot(self) -> dict[str, LockHolds]:
        """See `CacheStore.lock_hold_snapshot`."""
        return self._store.lock_hold_snapshot()

    # -- nodes ------------------------------------------------------------------------------------

    def replace_nodes(self, records: Iterable[NodeRecord]) -> list[tuple[str, tuple[str, ...]]]:
        """Reconcile every node with a full list; returns the nodes whose handshakes we should answer, with the
        handshake keys of each."""
        listed = {record.name: record for record in records}
        with self._store.locked("nodes"):
            current = dict(self._store.nodes)
            self._store.note_seen_locked([(name, None) for name in self._store.seen_nodes if name not in listed])
            self._store.note_seen_locked([(name, record) for name, record in listed.items()])
        now = self._clock()
        changes: list[tuple[str, NodeState | None]] = [(name, None) for name in current if name not in listed]
        for name, record in listed.items():
            previous = current.get(name)
            if previous is None or previous.record != record:
                changes.append((name, self._store.judge_node(record, now)))
        for start in range(0, len(changes), CHUNK_SIZE):
            self._store.commit_nodes(changes[start:start + CHUNK_SIZE])
        return [(name, due) for name, record in listed.items() if (due := handshake_due(record))]

    def apply_node_events(self, events: Sequence[tuple[str, NodeRecord]]) -> None:
        """Apply watch events (``ADDED``, ``MODIFIED``, ``DELETED``) for nodes, as one batch."""
        now = self._clock()
        with self._store.locked("nodes"):
            self._store.note_seen_locked([(record.name, None if kind == "DELETED" else record)
                                          for kind, record in events])
        self._lines.changed(record.name for _, record in events)
        self._store.commit_nodes([(record.name, None if kind == "DELETED" else self._store.judge_node(record, now))
                                  for kind, record in events])

    def seen_node(self, name: str) -> SeenNode | None:
        """The GPU node's resourceVersion and lock as the watch last showed them (None when unknown)."""
        with self._store.locked("read"):
            return self._store.seen_node_locked(name)

    def lock_turn(self, node: str, uid: str, namespace: str, name: str) -> tuple[bool, SeenNode | None, int]:
        """Whether the pod's bind may try the node's lock now (`state.bindlines.lock_turn_locked`)."""
        with self._store.locked("read"):
            return lock_turn_locked(self._store, self._claims, self._lines, node, uid, namespace, name)

    def await_lock_turn(self, node: str, version: int, timeout: float) -> None:
        """Sleep until the node changes or a bind leaves its line, at most ``timeout`` seconds."""
        self._lines.wait(node, version, timeout)

    def leave_line(self, node: str, uid: str) -> None:
        """The pod's bind ended: the next in the node's line may go."""
        self._lines.leave(node, uid)

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
        with self._store.locked("pods"):
            held_now = list(self._store.held.items())
        changes = [PodChange(uid, "listed", absent=uid not in seen) for uid, held in held_now if uid not in observed]
        held_map = dict(held_now)
        for uid, record in observed.items():
            held = held_map.get(uid)
            if record.error or held is None or held.assumed_at is not None or not same_usage(held.usage, record.usage) \
                    or (record.usage is not None and held.usage.terminating != record.usage.terminating):
                changes.append(PodChange(uid, "listed", record))
        for chunk in chunks_by_node(changes, held_map):
            self._store.commit_pods(chunk, listed_at=listed_at)
        with self._store.locked("pods"):
            self.stats.broken_pods = errors
            self._claims.keep_only(alive, self._store.held)
        self.note_pods_current(listed_at)

    def apply_pod_events(self, events: Sequence[tuple[str, PodRecord]]) -> None:
        """Apply watch events for pods as one batch: a deleted or finished pod frees its GPUs at once."""
        self._store.commit_pods([PodChange(record.uid, "deleted" if kind == "DELETED" else "event", record)
                                 for kind, record in events], listed_at=None)
        gone = [record.uid for kind, record in events if kind == "DELETED" or record.finished]
        bound = [record.uid for _, record in events if record.bound]
        if gone or (bound and (self._claims.abandoned or self._holds.standing)):
            with self._store.locked("pods"):
                self._claims.settle(gone, bound)
                if self._holds.standing:
                    self._holds.release_locked(gone, "the pod is gone")
                    self._holds.release_locked(bound, "the pod is bound")
        settled = [*gone, *bound]
        if settled:
            for listener in self._settled_listeners:
                listener(settled)

    def on_pods_settled(self, listener: Callable[[Sequence[str]], None]) -> None:
        """Call ``listener`` with the UIDs of pods a watch showed deleted, finished or bound (not under the lock)."""
        self._settled_listeners.append(listener)

    # -- resync -----------------------------------------------------------------------------------

    def resync(self) -> list[tuple[str, tuple[str, ...]]]:
        """Re-judge the local state without the API; returns the nodes whose handshakes we should answer (with
        the handshake keys of each).

        A node whose ``Requesting_`` handshake just passed its deadline (and whose kubelet reports no GPUs)
        loses its GPUs; an assumption the pod stream has not confirmed within the grace period is dropped
        (falling back to what the API last showed for the pod).
        """
        now = self._clock()
        with self._store.locked("resync"):
            self._holds.expire_locked(now)
            nodes = list(self._store.nodes.values())
            assumed = [(uid, self._store.held[uid]) for uid in self._store.assumed]
            current_at = self._store.pods_current_at
        changed = [(state.name, self._store.judge_node(state.record, now)) for state in nodes
                   if state.record is not None and state.record.has_devices
                   and device_plugin_gone(state.record, now=now) != state.plugin_gone]
        self._store.commit_nodes(changed)
        expired = [PodChange(uid, "expire") for uid, held in assumed
                   if held.assumed_at is not None and held.assumed_at + ASSUMPTION_GRACE_SECONDS < current_at]
        self._store.commit_pods(expired, listed_at=None)
        return [(state.name, state.handshake_due) for state in nodes if state.handshake_due]

    # -- scheduling -------------------------------------------------------------------------------

    def place(self, *, uid: str, namespace: str, name: str, request: PodRequest, options: PodOptions,
              candidates: Sequence[str], container_names: Sequence[str] = (),
              resource_version: str = "", replaces: str = "", priority: int = 0,
              leftover_keys: frozenset[str] = frozenset()) -> Placement | NoPlacement:
        """Forget the pod's earlier assumption, choose a node, and book the result — atomically.

        Nodes busy binding (`busy_nodes`) are tried after the others unless the cache was made with
        ``busy_nodes_last=False``. ``resource_version`` is the pod's as kube-scheduler sent it: `/bind` writes the
        booking with it as a precondition instead of reading the pod first; ``leftover_keys`` the annotations of an
        earlier booking the pod carries (`PodUsage.leftover_keys`). Raises `AlreadyBooked` when the API
        shows the pod holding GPUs already (another binder wrote its booking: kube-scheduler's informer has not
        seen the pod bound yet): a second placement would book it twice — unless it is the booking ``replaces`` (the
        devices of a booking `standing_booking` says may be overwritten) or one this process abandoned.

        ``priority`` is the pod's: the devices held for preemptors of the same or higher priority are not offered to
        it, and a pod with a hold of its own tries the hold's node first (`state.holds`).
        """
        with self._store.locked("filter"):
            held = self._store.held.get(uid)
            if held is not None and held.assumed_at is None and held.usage.devices_text != (replaces or None) \
                    and not self._claims.ours_abandoned(uid, held.usage.devices_text):
                raise AlreadyBooked(f"pod {namespace}/{name} already holds devices on node {held.usage.node} "
                                    f"({held.usage.devices_text}); it is not placed again")
            shadowed = held.api_usage if held is not None else None
            self._store.release_locked(uid)
            depth = line_depth(self._queue_depth, self._queue_seconds, self._store.node_lock_holds.estimate) \
                if options.node_policy == BINPACK and self._lines.waiting() < self._queue_slots else 1
            busy = self._busy_nodes_locked(uid, namespace, name, self._lock_keys(request), depth=depth) \
                if self._busy_nodes_last else frozenset()
            quota = self._store.quota_ledger.pod_quota(namespace, request)
            views: Mapping[str, NodeView] = self._store.views
            result: Placement | NoPlacement | None = None
            if self._holds.standing:  # preemption's holds (state.holds): only then is there anything to look at
                views = self._holds.views_for_locked(uid, priority)
                own = self._holds.standing.get(uid)
                if own is not None and own.node in candidates:
                    result = choose_node(request, options, [own.node], views, self._store.broken, quota=quota)
            if not isinstance(result, Placement):
                result = choose_node(request, options, candidates, views, self._store.broken, busy=busy, quota=quota)
            if isinstance(result, Placement):
                if uid in self._holds.standing:
                    self._holds.release_locked([uid], f"the pod is placed on node {result.node}")
                booking = pod_booking(result.grants, init_count=request.init_count, owner=f"{namespace}/{name}")
                usage = PodUsage(uid=uid, namespace=namespace, name=name, node=result.node, grants=result.grants,
                                 booking=booking, devices_text=encode_pod_devices(result.grants),
                                 container_names=tuple(container_names), init_count=request.init_count,
                                 resource_version=resource_version, priority=priority,
                                 leftover_keys=leftover_keys)
                self._store.hold_locked(uid, usage, assumed_at=self._clock(), api_usage=shadowed)
                self._claims.place(uid, usage)
            else:
                self._claims.unplace(uid)
                if shadowed is not None:  # the API showed the pod holding this meanwhile: that is the truth now
                    self._store.hold_locked(uid, shadowed, assumed_at=None)
            return result

    # -- namespace quotas -----------------------------------------------------------------------------

    def replace_quotas(self, objects: Iterable[QuotaObject]) -> None:
        """Reconcile the ResourceQuota objects with a full list (their limits worked out outside the lock)."""
        limits = self._quota_objects.replace(objects)
        with self._store.locked("quotas"):
            self._store.quota_ledger.set_limits(limits)

    def apply_quota_events(self, events: Sequence[tuple[str, QuotaObject]]) -> None:
        """Apply watch events (``ADDED``, ``MODIFIED``, ``DELETED``) for ResourceQuota objects."""
        limits = self._quota_objects.apply(events)
        with self._store.locked("quotas"):
            self._store.quota_ledger.set_limits(limits)

    def namespace_quota(self, namespace: str) -> NamespaceQuota:
        """The namespace's device limits and what its pods book now (bookings not yet bound included)."""
        with self._store.locked("read"):
            return self._store.quota_ledger.namespace(namespace)

    def quota_usage(self) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """Every namespace's device limits and use, taken together (metrics, dashboard)."""
        with self._store.locked("read"):
            return self._store.quota_ledger.copy()

    # -- preemption (the part `state.holds.Holds`) ----------------------------------------------------

    def preempt(self, preemptor: Preemptor, candidates: Sequence[str], *, nominated: str = "") -> PreemptionDecision:
        """See `Holds.preempt`."""
        return self._holds.preempt(preemptor, candidates, nominated=nominated)

    def extend_victims(self, preemptor: Preemptor, node: str, proposed: Collection[str]) -> NodeVictims | str:
        """See `Holds.extend_victims`."""
        return self._holds.extend_victims(preemptor, node, proposed)

    def drop_hold(self, uid: str, why: str) -> None:
        """See `Holds.drop`."""
        self._holds.drop(uid, why)

    def holds(self) -> list[HoldState]:
        """See `Holds.states`."""
        return self._holds.states()

    def replace_budgets(self, budgets: Iterable[DisruptionBudget]) -> None:
        """See `Holds.replace_budgets`."""
        self._holds.replace_budgets(budgets)

    def apply_budget_events(self, events: Sequence[tuple[str, DisruptionBudget]]) -> None:
        """See `Holds.apply_budget_events`."""
        self._holds.apply_budget_events(events)

    # -- busy nodes -----------------------------------------------------------------------------------

    def _lock_keys(self, request: PodRequest) -> frozenset[str] | None:
        """The node locks a bind of ``request`` would take (None: every lock counts, for a pod asking no family)."""
        rules = self.catalog.locks_for(request.families)
        return frozenset(rule.key for rule in rules) if rules else None

    def _busy_nodes_locked(self, uid: str, namespace: str, name: str, lock_keys: frozenset[str] | None = None,
                           depth: int = 1) -> frozenset[str]:
        """`state.bindlines.busy_nodes_locked` for the pod being placed."""
        return busy_nodes_locked(self._store, self._claims, uid, namespace, name, lock_keys=lock_keys, depth=depth,
                                 now=self._clock(), lock_timeout_seconds=self._node_lock_timeout_seconds,
                                 line_seconds=self._queue_seconds)

    def forget(self, uid: str, *, keep_booking: bool = False) -> PodUsage | None:
        """Drop the pod's placement and our assumption of its booking (abandoned); returns what was dropped.

        What the API has shown the pod to hold (a booking another scheduler wrote, or ours once the watch echoed
        it) stays until the API shows otherwise: dropping it here could lose it for good, if the event that brought
        it was the pod's last. ``keep_booking``: drop only the placement; what the pod holds stays booked, as an
        assumption from now (its booking may stand in the API), until a list or the watch shows the truth.
        """
        with self._store.locked("filter"):
            placed = self._claims.unplace(uid)
            held = self._store.held.get(uid)
            if not keep_booking:
                if placed is not None:  # voided: its echo, if the watch brings it late, is ours, not another binder's
                    self._claims.abandon(uid, placed.devices_text)
                if held is not None and held.assumed_at is None:
                    return None
                shadowed = held.api_usage if held is not None else None
                dropped = self._store.release_locked(uid)
                if shadowed is not None:  # the API showed the pod holding this meanwhile: that is the truth now
                    self._store.hold_locked(uid, shadowed, assumed_at=None)
                return dropped
            usage = held.usage if held is not None else placed
            if usage is not None:
                self._store.hold_locked(uid, usage, assumed_at=self._clock())
                self._claims.abandon(uid, usage.devices_text)
            return None

    def placed(self, uid: str) -> PodUsage | None:
        """The placement this process last chose for the pod ``uid`` and has not seen bound."""
        with self._store.locked("read"):
            return self._claims.placed.get(uid)

    def reassume(self, usage: PodUsage) -> None:
        """Book ``usage`` as a fresh assumption: its booking is about to be written to the API (at bind).

        Restarts the grace period in which a list that does not show the pod yet leaves the booking alone, and
        books it again if a list dropped it while kube-scheduler had not bound the pod yet. What the API showed the
        pod holding is kept beside the assumption (restored if ours is abandoned): since the bind writes without
        reading the pod first, the watch may already have shown another binder's booking, and a pod's last event
        (bound, ``bind-phase=success``) may never come again.
        """
        with self._store.locked("filter"):
            held = self._store.held.get(usage.uid)
            if held is None:
                shadowed = None
            elif held.assumed_at is not None:
                shadowed = held.api_usage
            else:
                shadowed = held.usage
            self._store.hold_locked(usage.uid, usage, assumed_at=self._clock(), api_usage=shadowed)

    def mark_bound(self, uid: str, *, locked_at: str = "") -> None:
        """The pod's Binding exists: it can never be bound again, so it stops being bindable. Its node stays busy until
        the node stream shows a version newer than ``locked_at``, the one our lock write was preconditioned on
        (`Claims.due_locks`): the Binding follows the lock by milliseconds, often before the watch brings the lock."""
        with self._store.locked("filter"):
            self._claims.bound(uid, locked_at=locked_at, now=self._clock())

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
        with self._store.locked("read"):
            return standing, self._claims.ours_abandoned(standing.uid, standing.devices_text)
