"""The cluster cache: node inventories and GPU usage, the only place in hami-web with a lock.

Usage is kept per pod UID and folded into per-node totals incrementally, so a filter never recomputes usage
from every pod. A filter's decision and the booking of its result happen under one lock acquisition
(`place`), which is what guarantees that two concurrent filters never promise the same GPU capacity.

Sync work (watch events, list pages, resyncs) must not stall filters, so it is applied in three steps: read
what it touches under the lock (a few dict lookups), compute the new per-node totals and `NodeView`s outside
it, then swap them in under the lock — but only if nothing it read has changed meanwhile (every held entry,
node state and per-node total is replaced, never mutated, so an identity check tells). A batch that lost a
race is planned again; after a few lost races it is applied under the lock in one go, which is correct and
merely slower. The longest hold per kind of work is recorded for ``hami_web_cache_lock_hold_seconds``.

Filter-time assumptions (pods we placed whose annotations the API has not echoed back yet) are usage like any
other; a later observation of the pod confirms or replaces them. A full list only overrides an assumption
made more than `ASSUMPTION_GRACE_SECONDS` before the list started: the assumption is booked *before* the pod
patch is sent, so a list that starts a moment after the booking may still miss the patch. Between lists the
resync drops an assumption once the pod stream has been current for that long after it without showing it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.grants import encode_pod_devices
from hami_web.core.options import PodOptions
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NO_USAGE, DeviceUsage, NodeView, build_node_view, pod_booking
from hami_web.state.nodes import NodeRecord, NodeState, device_plugin_gone, handshake_due, node_state
from hami_web.state.pods import PodRecord, PodUsage

log = logging.getLogger(__name__)

Clock = Callable[[], float]
NodeTotals = Mapping[str, DeviceUsage]

# How long after booking a placement a full list may still not show the pod patch: longer than the patch can
# take (the adapter's request timeout is 10 s). A failed patch drops its booking itself, so this only delays
# forgetting an assumption whose annotations were removed by someone else.
ASSUMPTION_GRACE_SECONDS = 30.0
# Changes applied per lock acquisition when a list is reconciled: keeps every swap well under a millisecond.
CHUNK_SIZE = 100
# Plans that lost a race with a filter before the batch is applied under the lock instead.
COMMIT_ATTEMPTS = 3
LOCK_HOLD_BUCKETS_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

ChangeKind = Literal["event", "deleted", "listed", "expire"]


@dataclass(frozen=True, slots=True)
class _Held:
    """A pod's usage plus where we learned it: the API, or our own filter (``assumed_at`` set).

    For an assumption, ``api_usage`` is what the API last showed for the pod (it replaces the assumption
    when the assumption expires).
    """

    usage: PodUsage
    assumed_at: float | None = None
    api_usage: PodUsage | None = None


@dataclass(frozen=True, slots=True)
class _PodChange:
    """One thing learned about a pod: a watch event, a list's verdict, or an assumption's expiry."""

    uid: str
    kind: ChangeKind
    record: PodRecord | None = None


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


@dataclass(slots=True)
class _Plan:
    """A batch's outcome computed outside the lock, and what it read (to detect a race at commit)."""

    held_before: dict[str, _Held | None]
    nodes_before: dict[str, tuple[NodeState | None, NodeTotals | None]]
    held_after: dict[str, _Held | None] = field(default_factory=dict)
    totals_after: dict[str, NodeTotals | None] = field(default_factory=dict)
    views_after: dict[str, NodeView | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    fixed: set[str] = field(default_factory=set)


class ClusterCache:
    """Thread-safe inventory and usage of every GPU node, fed by lists and watches (see `state.sync`)."""

    def __init__(self, *, count_resource: str = "nvidia.com/gpu", clock: Clock = time.time) -> None:
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self.count_resource = count_resource
        self._clock = clock
        self._nodes: dict[str, NodeState] = {}
        self._views: dict[str, NodeView] = {}
        self._broken_nodes: dict[str, str] = {}
        self._held: dict[str, _Held] = {}
        self._assumed: set[str] = set()
        self._node_usage: dict[str, NodeTotals] = {}
        self._pods_current_at = 0.0
        self.stats = CacheStats()
        self.lock_holds: dict[str, LockHolds] = {}

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

    def replace_nodes(self, records: Iterable[NodeRecord]) -> list[str]:
        """Reconcile every node with a full list; returns the names whose handshake we should answer."""
        listed = {record.name: record for record in records}
        with self._locked("nodes"):
            current = dict(self._nodes)
        now = self._clock()
        changes: list[tuple[str, NodeState | None]] = [(name, None) for name in current if name not in listed]
        for name, record in listed.items():
            previous = current.get(name)
            if previous is None or previous.record != record:
                changes.append((name, node_state(record, now=now)))
        for start in range(0, len(changes), CHUNK_SIZE):
            self._commit_nodes(changes[start:start + CHUNK_SIZE])
        return [name for name, record in listed.items() if handshake_due(record)]

    def apply_node_events(self, events: Sequence[tuple[str, NodeRecord]]) -> None:
        """Apply watch events (``ADDED``, ``MODIFIED``, ``DELETED``) for nodes, as one batch."""
        now = self._clock()
        self._commit_nodes([(record.name, None if kind == "DELETED" else node_state(record, now=now))
                            for kind, record in events])

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
                views[name] = _node_view(state, totals, previous, view)
            with self._locked("nodes"):
                if all(self._nodes.get(name) is b[0] and self._node_usage.get(name) is b[1]
                       for name, b in before.items()):
                    self._swap_nodes_locked(latest, views)
                    return
                self.stats.lost_races += 1
        with self._locked("nodes"):
            views = {name: _node_view(state, self._node_usage.get(name), self._nodes.get(name),
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

    def replace_pods(self, records: Iterable[PodRecord], *, listed_at: float) -> None:
        """Reconcile all API-derived usage with a full pod list started at ``listed_at`` (clock seconds).

        Only differences are applied, in chunks, so a list that changes nothing costs one snapshot of the
        held pods and no view rebuild.
        """
        observed: dict[str, PodRecord] = {}
        errors: dict[str, str] = {}
        for record in records:
            if record.error:
                errors[record.uid] = record.error
                observed[record.uid] = record
            elif record.usage is not None:
                observed[record.uid] = record
        with self._locked("pods"):
            held_now = list(self._held.items())
        changes = [_PodChange(uid, "listed") for uid, held in held_now if uid not in observed]
        held_map = dict(held_now)
        for uid, record in observed.items():
            held = held_map.get(uid)
            if record.error or held is None or held.assumed_at is not None or not _same_usage(held.usage, record.usage):
                changes.append(_PodChange(uid, "listed", record))
        for chunk in _chunks_by_node(changes, held_map):
            self._commit_pods(chunk, listed_at=listed_at)
        with self._locked("pods"):
            self.stats.broken_pods = errors
        self.note_pods_current(listed_at)

    def apply_pod_events(self, events: Sequence[tuple[str, PodRecord]]) -> None:
        """Apply watch events for pods as one batch: a deleted or finished pod frees its GPUs at once."""
        self._commit_pods([_PodChange(record.uid, "deleted" if kind == "DELETED" else "event", record)
                           for kind, record in events], listed_at=None)

    def _commit_pods(self, changes: Sequence[_PodChange], *, listed_at: float | None) -> None:
        if not changes:
            return
        for _ in range(COMMIT_ATTEMPTS):
            with self._locked("pods"):
                held_before = {change.uid: self._held.get(change.uid) for change in changes}
                nodes = _touched_nodes(changes, held_before)
                nodes_before = {node: (self._nodes.get(node), self._node_usage.get(node)) for node in nodes}
            plan = _plan_pods(changes, held_before, nodes_before, listed_at=listed_at)
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
                            for node in _touched_nodes(changes, held_before)}
            self._swap_pods_locked(_plan_pods(changes, held_before, nodes_before, listed_at=listed_at))

    def _swap_pods_locked(self, plan: _Plan) -> None:
        for uid, held in plan.held_after.items():
            if held is None:
                self._held.pop(uid, None)
                self._assumed.discard(uid)
            else:
                self._held[uid] = held
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

    def resync(self) -> list[str]:
        """Re-judge the local state without the API; returns the nodes whose handshake we should answer.

        A node whose ``Requesting_`` handshake just passed its deadline (and whose kubelet reports no GPUs)
        loses its GPUs; an assumption the pod stream has not confirmed within the grace period is dropped
        (falling back to what the API last showed for the pod).
        """
        now = self._clock()
        with self._locked("resync"):
            nodes = list(self._nodes.values())
            assumed = [(uid, self._held[uid]) for uid in self._assumed]
            current_at = self._pods_current_at
        changed = [(state.name, node_state(state.record, now=now)) for state in nodes
                   if state.record is not None and state.record.register is not None and not state.plugin_gone
                   and device_plugin_gone(state.record, now=now)]
        self._commit_nodes(changed)
        expired = [_PodChange(uid, "expire") for uid, held in assumed
                   if held.assumed_at is not None and held.assumed_at + ASSUMPTION_GRACE_SECONDS < current_at]
        self._commit_pods(expired, listed_at=None)
        return [state.name for state in nodes if state.handshake_due]

    # -- scheduling -------------------------------------------------------------------------------

    def place(self, *, uid: str, namespace: str, name: str, request: PodRequest, options: PodOptions,
              candidates: Sequence[str], container_names: Sequence[str] = ()) -> Placement | NoPlacement:
        """Forget the pod's earlier usage, choose a node, and book the result — atomically."""
        with self._locked("filter"):
            self._release_locked(uid)
            result = choose_node(request, options, candidates, self._views, self._broken_nodes)
            if isinstance(result, Placement):
                booking = pod_booking(result.grants, init_count=request.init_count)
                usage = PodUsage(uid=uid, namespace=namespace, name=name, node=result.node, grants=result.grants,
                                 booking=booking, devices_text=encode_pod_devices(result.grants),
                                 container_names=tuple(container_names))
                self._held[uid] = _Held(usage=usage, assumed_at=self._clock())
                self._assumed.add(uid)
                self._add_usage_locked(usage.node, usage.booking, sign=1)
            return result

    def forget(self, uid: str) -> PodUsage | None:
        """Drop whatever the pod holds (its placement was abandoned); returns what it held."""
        with self._locked("filter"):
            return self._release_locked(uid)

    def _release_locked(self, uid: str) -> PodUsage | None:
        held = self._held.pop(uid, None)
        self._assumed.discard(uid)
        if held is None:
            return None
        self._add_usage_locked(held.usage.node, held.usage.booking, sign=-1)
        return held.usage

    def _add_usage_locked(self, node: str, booking: NodeTotals, *, sign: int) -> None:
        totals = _add_booking(self._node_usage.get(node), booking, sign=sign)
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


# -- planning outside the lock --------------------------------------------------------------------------


def _chunks_by_node(changes: list[_PodChange], held: Mapping[str, _Held]) -> Iterator[list[_PodChange]]:
    """``changes`` in chunks of about `CHUNK_SIZE` that keep each node's pods together.

    A list arrives sorted by namespace and name, which scatters a node's pods over the whole list; chunked in
    that order, a node's view would be rebuilt once per chunk holding one of its pods (8 times per node here).
    """

    def node_of(change: _PodChange) -> str:
        if change.record is not None and change.record.usage is not None:
            return change.record.usage.node
        previous = held.get(change.uid)
        return previous.usage.node if previous is not None else ""

    chunk: list[_PodChange] = []
    last_node = None
    for change in sorted(changes, key=node_of):
        node = node_of(change)
        if len(chunk) >= CHUNK_SIZE and node != last_node:
            yield chunk
            chunk = []
        chunk.append(change)
        last_node = node
    if chunk:
        yield chunk


def _same_usage(held: PodUsage, observed: PodUsage | None) -> bool:
    return observed is not None and held.node == observed.node and held.devices_text == observed.devices_text \
        and held.booking == observed.booking and held.container_names == observed.container_names


def _node_view(state: NodeState | None, totals: NodeTotals | None, previous: NodeState | None,
               view: NodeView | None) -> NodeView | None:
    """The view a node gets with ``state``; the existing one when its inventory did not change."""
    if state is None or state.inventory is None:
        return None
    if view is not None and previous is not None and previous.inventory == state.inventory:
        return view
    return build_node_view(state.inventory, totals or {})


def _touched_nodes(changes: Sequence[_PodChange], held_before: Mapping[str, _Held | None]) -> set[str]:
    nodes = {change.record.usage.node for change in changes
             if change.record is not None and change.record.usage is not None}
    nodes.update(held.usage.node for held in held_before.values() if held is not None)
    return nodes


def _assumed_since(held: _Held, listed_at: float) -> bool:
    """Whether ``held`` is an assumption whose pod patch a list started at ``listed_at`` may not show."""
    return held.assumed_at is not None and held.assumed_at + ASSUMPTION_GRACE_SECONDS >= listed_at


def _next_held(change: _PodChange, held: _Held | None, *, listed_at: float | None) -> _Held | None:
    """What a pod holds after ``change`` (SPEC.md §4 usage, with the assumption rules above)."""
    record = change.record
    if change.kind == "deleted":
        return None
    if change.kind == "expire":
        if held is None or held.assumed_at is None:
            return held
        return None if held.api_usage is None else _Held(usage=held.api_usage)
    if record is not None and record.error:
        return None  # the old usage of a pod whose annotation became unreadable is no longer trustworthy
    usage = record.usage if record is not None else None
    if held is not None and held.assumed_at is not None:
        keep = _assumed_since(held, listed_at) if listed_at is not None else not (record and record.finished)
        if usage is None:
            return _Held(held.usage, held.assumed_at, None) if keep else None
        if held.usage.devices_text != usage.devices_text and (keep or listed_at is None):
            return _Held(held.usage, held.assumed_at, usage)  # our placement may be newer than what the API showed
    if usage is None:
        return None
    if held is not None and held.assumed_at is None and _same_usage(held.usage, usage):
        return held  # e.g. a status update of a running pod: nothing to rebuild
    return _Held(usage=usage)


def _plan_pods(changes: Sequence[_PodChange], held_before: dict[str, _Held | None],
               nodes_before: dict[str, tuple[NodeState | None, NodeTotals | None]], *,
               listed_at: float | None) -> _Plan:
    plan = _Plan(held_before=held_before, nodes_before=nodes_before)
    current = dict(held_before)
    for change in changes:
        held = current[change.uid]
        record = change.record
        if record is not None and record.error:
            plan.errors[change.uid] = record.error
            plan.fixed.discard(change.uid)
        elif change.kind in ("event", "deleted"):
            plan.fixed.add(change.uid)
            plan.errors.pop(change.uid, None)
        current[change.uid] = _next_held(change, held, listed_at=listed_at)
    deltas: dict[str, list[tuple[NodeTotals, int]]] = {}
    for uid, before in held_before.items():
        after = current[uid]
        if after is before:
            continue
        plan.held_after[uid] = after
        if before is not None and after is not None and before.usage is after.usage:
            continue  # only the bookkeeping of an assumption changed, not the usage
        if before is not None:
            deltas.setdefault(before.usage.node, []).append((before.usage.booking, -1))
        if after is not None:
            deltas.setdefault(after.usage.node, []).append((after.usage.booking, 1))
    for node, node_deltas in deltas.items():
        state, totals = nodes_before[node]
        for booking, sign in node_deltas:
            totals = _add_booking(totals, booking, sign=sign)
        plan.totals_after[node] = totals
        if state is not None and state.inventory is not None:
            plan.views_after[node] = build_node_view(state.inventory, totals or {})
    return plan


def _add_booking(totals: NodeTotals | None, booking: NodeTotals, *, sign: int) -> dict[str, DeviceUsage]:
    """A new per-GPU totals map with ``booking`` added (sign 1) or removed (sign -1); never mutates ``totals``."""
    updated = dict(totals or {})
    for uuid, amount in booking.items():
        current = updated.get(uuid, NO_USAGE)
        value = current + amount if sign > 0 else current - amount
        if value == NO_USAGE:
            updated.pop(uuid, None)
        else:
            updated[uuid] = value
    return updated
