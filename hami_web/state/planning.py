"""Planning a batch of pod changes outside the cache lock: new holdings, per-node totals and views.

Pure functions over immutable values (`Held`, `PodChange`, `state.nodes.NodeState`), so `ClusterCache` can
compute a whole batch without the lock and only swap the result in under it. The rules for
which observation wins over a filter-time assumption live here (`next_held`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hami_web.core.usage import NO_USAGE, DeviceUsage, NodeView, build_node_view
from hami_web.state.nodes import NodeState
from hami_web.state.pods import PodRecord, PodUsage

NodeTotals = Mapping[str, DeviceUsage]

log = logging.getLogger(__name__)

# How long after booking a placement a full list may still not show the pod patch: no shorter than the filter's
# API calls can take (18 s with the default --extender-deadline, 30 s at most: 27 s and a 3 s read-back). A
# failed patch drops its booking itself; a patch without an answer keeps it, and this is how long it stays
# unless a list or watch shows the pod.
ASSUMPTION_GRACE_SECONDS = 30.0
# Changes applied per lock acquisition when a list is reconciled: keeps every swap well under a millisecond.
CHUNK_SIZE = 100

ChangeKind = Literal["event", "deleted", "listed", "expire"]


@dataclass(frozen=True, slots=True)
class Held:
    """A pod's usage plus where we learned it: the API, or our own filter (``assumed_at`` set).

    For an assumption, ``api_usage`` is what the API last showed for the pod (it replaces the assumption
    when the assumption expires).
    """

    usage: PodUsage
    assumed_at: float | None = None
    api_usage: PodUsage | None = None


@dataclass(frozen=True, slots=True)
class PodChange:
    """One thing learned about a pod: a watch event, a list's verdict, or an assumption's expiry.

    ``absent``: a list that did not show the pod at all (not merely without a booking).
    """

    uid: str
    kind: ChangeKind
    record: PodRecord | None = None
    absent: bool = False


@dataclass(slots=True)
class Plan:
    """A batch's outcome computed outside the lock, and what it read (to detect a race at commit)."""

    held_before: dict[str, Held | None]
    nodes_before: dict[str, tuple[NodeState | None, NodeTotals | None]]
    held_after: dict[str, Held | None] = field(default_factory=dict)
    totals_after: dict[str, NodeTotals | None] = field(default_factory=dict)
    views_after: dict[str, NodeView | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    fixed: set[str] = field(default_factory=set)


def chunks_by_node(changes: list[PodChange], held: Mapping[str, Held]) -> Iterator[list[PodChange]]:
    """``changes`` in chunks of about `CHUNK_SIZE` that keep each node's pods together.

    A list arrives sorted by namespace and name, which scatters a node's pods over the whole list; chunked in
    that order, a node's view would be rebuilt once per chunk holding one of its pods (8 times per node here).
    """

    def node_of(change: PodChange) -> str:
        if change.record is not None and change.record.usage is not None:
            return change.record.usage.node
        previous = held.get(change.uid)
        return previous.usage.node if previous is not None else ""

    chunk: list[PodChange] = []
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


def same_usage(held: PodUsage, observed: PodUsage | None) -> bool:
    return observed is not None and held.node == observed.node and held.devices_text == observed.devices_text \
        and held.booking == observed.booking and held.container_names == observed.container_names


def node_view(state: NodeState | None, totals: NodeTotals | None, previous: NodeState | None,
               view: NodeView | None) -> NodeView | None:
    """The view a node gets with ``state``; the existing one when its inventory did not change."""
    if state is None or state.inventory is None:
        return None
    if view is not None and previous is not None and previous.inventory == state.inventory:
        return view
    built = build_node_view(state.inventory, totals or {})
    if built.partition_faults:  # a new or changed inventory: every fault is news
        _log_partition_faults(state.inventory.name, built, None)
    return built


def touched_nodes(changes: Sequence[PodChange], held_before: Mapping[str, Held | None]) -> set[str]:
    nodes = {change.record.usage.node for change in changes
             if change.record is not None and change.record.usage is not None}
    nodes.update(held.usage.node for held in held_before.values() if held is not None)
    return nodes


def _assumed_since(held: Held, listed_at: float, *, listed: bool) -> bool:
    """Whether ``held`` is an assumption whose pod patch a list started at ``listed_at`` may not show.

    A pod we placed existed before its assumption was made, so a list started after that which does not
    show the pod at all (``listed`` False) proves it deleted: the grace is for a patch, not the pod. With
    the filter writing nothing, this is how a pod deleted between filter and bind while the watch was
    down frees its GPUs at the next list rather than ASSUMPTION_GRACE_SECONDS later.
    """
    if held.assumed_at is None:
        return False
    if not listed and held.assumed_at < listed_at:
        return False
    return held.assumed_at + ASSUMPTION_GRACE_SECONDS >= listed_at


def _next_held(change: PodChange, held: Held | None, *, listed_at: float | None) -> Held | None:
    """What a pod holds after ``change`` (docs/wire-formats.md#pod-device-annotation, with the assumption rules
    above)."""
    record = change.record
    if change.kind == "deleted":
        return None
    if change.kind == "expire":
        if held is None or held.assumed_at is None:
            return held
        return None if held.api_usage is None else Held(usage=held.api_usage)
    if record is not None and record.error:
        return None  # the old usage of a pod whose annotation became unreadable is no longer trustworthy
    usage = record.usage if record is not None else None
    # A bound pod never takes a placement of ours any more (we write our booking before our Binding, so a bound
    # pod showing other devices, or none, was bound by someone else): what the API shows is final.
    if held is not None and held.assumed_at is not None and not (record is not None and record.bound):
        keep = _assumed_since(held, listed_at, listed=not change.absent) if listed_at is not None \
            else not (record and record.finished)
        if usage is None:
            return Held(held.usage, held.assumed_at, None) if keep else None
        if held.usage.devices_text != usage.devices_text and (keep or listed_at is None):
            return Held(held.usage, held.assumed_at, usage)  # our placement may be newer than what the API showed
    if usage is None:
        return None
    if held is not None and held.assumed_at is None and same_usage(held.usage, usage) \
            and held.usage.bind_phase == usage.bind_phase and held.usage.terminating == usage.terminating:
        return held  # e.g. a status update of a running pod: nothing to rebuild
    return Held(usage=usage)


def plan_pods(changes: Sequence[PodChange], held_before: dict[str, Held | None],
               nodes_before: dict[str, tuple[NodeState | None, NodeTotals | None]], *,
               listed_at: float | None) -> Plan:
    plan = Plan(held_before=held_before, nodes_before=nodes_before)
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
        if before is not None and after is not None and (before.usage is after.usage
                                                         or same_usage(before.usage, after.usage)):
            continue  # only the bookkeeping (an assumption's, the bind-phase) changed, not the usage
        if before is not None:
            deltas.setdefault(before.usage.node, []).append((before.usage.booking, -1))
        if after is not None:
            deltas.setdefault(after.usage.node, []).append((after.usage.booking, 1))
    for node, node_deltas in deltas.items():
        state, totals = nodes_before[node]
        for booking, sign in node_deltas:
            totals = add_booking(totals, booking, sign=sign)
        plan.totals_after[node] = totals
        if state is not None and state.inventory is not None:
            plan.views_after[node] = view = build_node_view(state.inventory, totals or {})
            if view.partition_faults:
                _log_partition_faults(node, view, plan.held_after.values())
    return plan


def _log_partition_faults(node: str, view: NodeView, changed: Iterable[Held | None] | None) -> None:
    """Log the devices whose partitions fail closed (`hami_web.core.partitions.Partitioning.faults`; MIG's,
    docs/mig.md#dynamic-mig), one line per device, naming the pods: those of the pods
    ``changed`` in this batch, or all of them (``None``: the node's inventory is new)."""
    pods = None if changed is None else {f"{held.usage.namespace}/{held.usage.name}" for held in changed
                                         if held is not None}
    for fault in view.partition_faults:
        if pods is None or pods.intersection(fault.pods):
            log.error("node %s: %s; the GPU takes no pod until the pods' annotations are fixed or the pods end",
                      node, fault.describe())


def add_booking(totals: NodeTotals | None, booking: NodeTotals, *, sign: int) -> dict[str, DeviceUsage]:
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
