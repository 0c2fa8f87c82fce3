"""GPU usage: what a pod holds on each GPU, and a node's inventory joined with its usage (`NodeView`).

A `NodeView` is immutable and carries the aggregates the filter needs to rank and pre-screen nodes
(node score, usable GPUs, largest free memory and cores), computed once when the node's usage changes, not
on every filter: at thousands of nodes, recomputing usage per request is what makes a scheduler slow.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami_web.core.devices import NodeInventory
from hami_web.core.grants import PodGrants
from hami_web.core.mig import legacy_parent
from hami_web.core.partitions import PartitionFault, PlacedPartition, SliceRange


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """What is booked on one device: tasks sharing it, memory (MiB) and cores (percent).

    For a device carved per grant (`hami_web.core.partitions`; NVIDIA's dynamic MIG, docs/mig.md#dynamic-mig) also the
    partitions placed on it (``placed``, each naming its pod), the pods holding a device entry on it without a
    reservation (``unreserved``, one name per entry: on a MIG GPU that fails it closed) and how many pre-2.10 geometry
    entries (``GPU-x[1-0]``) count on it (``legacy_entries``). They add and subtract like the numbers, so per-node
    totals stay incremental.
    """

    tasks: int = 0
    memory_mib: int = 0
    cores: int = 0
    placed: tuple[PlacedPartition, ...] = ()
    # Who, not how much: left out of comparisons, so a booking equals another that holds the same.
    unreserved: tuple[str, ...] = field(default=(), compare=False)
    legacy_entries: int = 0
    # What the grants on the card hold under their family's sharing rule (`hami_web.core.families.family.SharingRule`:
    # Metax sGPU's QoS and app classes), one entry per grant, sorted.
    tags: tuple[str, ...] = ()

    def __add__(self, other: DeviceUsage) -> DeviceUsage:
        return DeviceUsage(self.tasks + other.tasks, self.memory_mib + other.memory_mib, self.cores + other.cores,
                           self.placed + other.placed, self.unreserved + other.unreserved,
                           self.legacy_entries + other.legacy_entries,
                           tuple(sorted(self.tags + other.tags)) if other.tags else self.tags)

    def __sub__(self, other: DeviceUsage) -> DeviceUsage:
        return DeviceUsage(self.tasks - other.tasks, self.memory_mib - other.memory_mib, self.cores - other.cores,
                           _without(self.placed, other.placed), _without(self.unreserved, other.unreserved),
                           self.legacy_entries - other.legacy_entries, _without(self.tags, other.tags))

    @property
    def occupied(self) -> tuple[SliceRange, ...]:
        """The slices the placed partitions occupy."""
        return tuple(partition.placement for partition in self.placed)


def _without(items: tuple[Any, ...], removed: tuple[Any, ...]) -> tuple[Any, ...]:
    """``items`` with one occurrence of each of ``removed`` taken out (a multiset difference)."""
    if not removed:
        return items
    left = list(items)
    for item in removed:
        if item in left:
            left.remove(item)
    return tuple(left)


NO_USAGE = DeviceUsage()


def pod_booking(grants: PodGrants, *, init_count: int, init_finished: bool = False, owner: str = "",
                unclaimed: Mapping[str, tuple[PlacedPartition, ...]] | None = None) -> dict[str, DeviceUsage]:
    """Per GPU UUID, what a pod (``owner``, ``namespace/name``) holds (docs/scheduling-rules.md#init-containers).

    Init containers run one at a time before the others and release what they held, so a GPU carries the
    larger of the peak init container and the sum of the regular containers; once the init containers have
    finished only the regular containers count. The placed side (`hami_web.core.partitions`, docs/mig.md#dynamic-mig):
    every counted grant's placed partition, or its entry as unreserved, plus ``unclaimed`` reservations no entry took;
    a pre-2.10 geometry entry counts on its parent GPU.
    """
    init_peak: dict[str, tuple[int, int, int]] = {}
    regular: dict[str, tuple[int, int, int]] = {}
    placed = _PlacedSide(owner)
    if not init_finished:
        for container in grants[:init_count]:
            for grant in container:
                uuid = placed.note(grant.uuid, grant.placed)
                shares, memory_mib, cores = init_peak.get(uuid, (0, 0, 0))
                init_peak[uuid] = (max(shares, grant.shares), max(memory_mib, grant.memory_mib),
                                   max(cores, grant.cores))
    tags: dict[str, list[str]] = {}
    for container in grants[init_count:]:
        for grant in container:
            uuid = placed.note(grant.uuid, grant.placed)
            tasks, memory_mib, cores = regular.get(uuid, (0, 0, 0))
            regular[uuid] = (tasks + grant.shares, memory_mib + grant.memory_mib, cores + grant.cores)
            tags.setdefault(uuid, []).extend(grant.tags)
    for uuid, partitions in (unclaimed or {}).items():
        placed.partitions.setdefault(uuid, []).extend(partitions)
    booking: dict[str, DeviceUsage] = {}
    for uuid in init_peak.keys() | regular.keys() | placed.partitions.keys():
        peak_shares, peak_memory, peak_cores = init_peak.get(uuid, (0, 0, 0))
        tasks, memory_mib, cores = regular.get(uuid, (0, 0, 0))
        booking[uuid] = DeviceUsage(max(peak_shares, tasks), max(peak_memory, memory_mib),
                                    max(peak_cores, cores), tuple(placed.partitions.get(uuid, ())),
                                    tuple(placed.unreserved.get(uuid, ())), placed.legacy.get(uuid, 0),
                                    tuple(sorted(tags.get(uuid, ()))))
    return booking


class _PlacedSide:
    """The placed partitions of one pod's booking (MIG instances) while `pod_booking` reads its grants."""

    __slots__ = ("legacy", "owner", "partitions", "unreserved")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.partitions: dict[str, list[PlacedPartition]] = {}
        self.unreserved: dict[str, list[str]] = {}
        self.legacy: dict[str, int] = {}

    def note(self, uuid: str, partition: PlacedPartition | None) -> str:
        """The device a grant counts on, noting its placed partition, or its entry as unreserved, or a geometry
        entry."""
        if uuid.endswith("]") and (parent := legacy_parent(uuid)):
            self.legacy[parent] = self.legacy.get(parent, 0) + 1
            return parent
        if partition is None:
            self.unreserved.setdefault(uuid, []).append(self.owner)
        else:
            self.partitions.setdefault(uuid, []).append(
                partition if partition.pod == self.owner else replace(partition, pod=self.owner))
        return uuid


@dataclass(frozen=True, slots=True)
class FamilyStats:
    """One family's aggregates on a node: what `may_fit` needs to rule the node out without a fit."""

    usable_devices: int = 0
    idle_devices: int = 0
    max_free_memory_mib: int = 0
    max_free_cores: int = 0
    device_types: frozenset[str] = frozenset()
    # Families kept in network groups (Ascend HCCS): per group, the free memory of each usable device, largest first.
    # An upper bound of the node-score term a placement can earn here, without a fit
    # (docs/device-families.md#ascend-npus).
    group_free_memory: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node's GPUs with their usage (``usage[i]`` belongs to ``inventory.devices[i]``) and aggregates.

    ``usage_rows`` is the same usage as plain ``(tasks, memory MiB, cores)`` tuples, the form the fit works on.
    """

    inventory: NodeInventory
    usage: tuple[DeviceUsage, ...]
    usage_rows: tuple[tuple[int, int, int], ...]
    score: float
    usable_devices: int
    max_free_memory_mib: int
    max_free_cores: int
    device_types: frozenset[str]
    idle_devices: int = 0  # usable GPUs no task uses: what a mutex container may take
    # Some device is carved per grant by its family's partitioning (`NodeInventory.carved`: dynamic MIG GPUs,
    # docs/mig.md#dynamic-mig).
    carved: bool = False
    partition_faults: tuple[PartitionFault, ...] = ()  # devices the partitions' read-back made unallocatable, and why
    family_stats: Mapping[str, FamilyStats] = field(default_factory=dict)
    # The node's shape for each family whose group term depends on its busy devices (`busy_key`), "" for none: the
    # ranking bounds that term by it, one judgement per distinct key (`hami_web.core.groups.BusyTerm`).
    busy_key: str = ""
    # The inventory's node-score annotation set (`NodeInventory.annotations`), one attribute away: a pod whose families
    # score nodes by it (Metax GPU's topology) has every node's read on each decision.
    score_annotations: str = ""
    # The most devices one container may ask and still pass `fit.may_fit`'s count check here: the usable devices, or any
    # number while one is usable where devices are carved per grant (one device gives a container several partitions).
    # The ranking skips a node of fewer than the pod's largest ask at C level, without a look at it.
    container_devices: int = 0
    # What an ask's fit gave on this exact state: the placement (a `fit.PodFit`) or the failure's summary. The view
    # is immutable and replaced when its usage changes, so entries never go stale; a pod kube-scheduler keeps retrying
    # costs one fit per node, and a search that fits many nodes (a group term, Kunlunxin's bubbles) refits only the
    # nodes whose usage changed since the last identical ask.
    fits: dict[object, object] = field(default_factory=dict, compare=False, repr=False)
    # The most network-group term an ask can earn here (`fit.group_score_bound`), remembered per ask as the failures.
    group_bounds: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The node's name."""
        return self.inventory.name


ANY_COUNT = sys.maxsize  # `NodeView.container_devices` of a node whose devices are carved per grant


def node_score(inventory: NodeInventory, usage: tuple[DeviceUsage, ...]) -> float:
    """``10 × (Σused/Σcount + Σusedcores/Σtotalcore + Σusedmem/Σtotalmem)`` over healthy, uncordoned GPUs."""
    used = count = used_cores = total_cores = used_mem = total_mem = 0
    for device, booked in zip(inventory.devices, usage, strict=True):
        if not device.healthy or device.uuid in inventory.cordoned:
            continue
        used += booked.tasks
        count += device.count
        used_cores += booked.cores
        total_cores += device.cores
        used_mem += booked.memory_mib
        total_mem += device.memory_mib
    if count == 0 or total_cores == 0 or total_mem == 0:
        return 0.0
    return 10 * (used / count + used_cores / total_cores + used_mem / total_mem)


def build_node_view(inventory: NodeInventory, usage_by_uuid: Mapping[str, DeviceUsage]) -> NodeView:
    """Join inventory and usage (usage of UUIDs the node no longer has is ignored) and compute aggregates.

    A device whose partitions' read-back cannot be trusted (`hami_web.core.partitions.Partitioning.faults`: the MIG
    reservations, `core.migreservations.mig_faults`) is unhealthy in the view's inventory, so every reader (fit, score,
    metrics, tools) sees it unallocatable; ``partition_faults`` says why.
    """
    usage = tuple(usage_by_uuid.get(device.uuid, NO_USAGE) for device in inventory.devices)
    faults: tuple[PartitionFault, ...] = ()
    carved = bool(inventory.carved)
    if carved or any(used.placed for used in usage):
        faults = _partition_faults(inventory, usage, usage_by_uuid)
        if faults:
            faulted = {fault.uuid for fault in faults}
            inventory = replace(inventory, devices=tuple(replace(device, healthy=False) if device.uuid in faulted
                                                         else device for device in inventory.devices))
    family_stats = {family: _family_stats(inventory, usage, first, end)
                    for family, (first, end) in inventory.groups.items()}
    usable = sum(stats.usable_devices for stats in family_stats.values())
    idle = sum(stats.idle_devices for stats in family_stats.values())
    max_free_memory = max((stats.max_free_memory_mib for stats in family_stats.values()), default=0)
    max_free_cores = max((stats.max_free_cores for stats in family_stats.values()), default=0)
    return NodeView(
        inventory=inventory,
        usage=usage,
        usage_rows=tuple((u.tasks, u.memory_mib, u.cores) for u in usage),
        score=node_score(inventory, usage),
        usable_devices=usable,
        max_free_memory_mib=max_free_memory,
        max_free_cores=max_free_cores,
        device_types=frozenset(device.type for device in inventory.devices),
        idle_devices=idle,
        family_stats=family_stats,
        carved=carved,
        partition_faults=faults,
        busy_key=busy_key(inventory, usage),
        score_annotations=inventory.annotations,
        container_devices=(ANY_COUNT if usable else 0) if carved else usable,
    )


def busy_key(inventory: NodeInventory, usage: tuple[DeviceUsage, ...]) -> str:
    """``family:key`` for each family whose grouping has a busy term (`hami_web.core.groups.BusyTerm.node_key`),
    joined by ``;`` and interned (nodes of one shape share the text, its hash computed once), "" for none."""
    keys = []
    for family, (first, end) in inventory.groups.items():
        grouping = inventory.grouping.get(family)
        term = grouping.busy_term if grouping is not None else None
        if term is not None:
            rows = [(used.tasks, used.memory_mib, used.cores) for used in usage[first:end]]
            keys.append(f"{family}:{term.node_key(inventory.devices[first:end], rows, inventory.cordoned)}")
    return sys.intern(";".join(keys)) if keys else ""


def busy_keys(text: str) -> dict[str, int]:
    """A view's `busy_key` read back: each family's key."""
    return {family: int(key) for family, _, key in (part.rpartition(":") for part in text.split(";") if part)}


def trial_view(view: NodeView, usage: tuple[DeviceUsage, ...]) -> NodeView:
    """``view`` with ``usage`` in place of its own, for a what-if fit that is never stored (preemption's dry run, which
    fits a node once per pod it takes off or puts back): only what `core.fit.fit_pod` reads is replaced, the aggregates
    (score, family stats) are the old ones. A node with devices carved per grant (dynamic MIG GPUs) is rebuilt whole:
    its faults depend on usage.
    """
    if view.carved or any(used.placed for used in view.usage):
        return build_node_view(view.inventory, {device.uuid: used for device, used in
                                                zip(view.inventory.devices, usage, strict=True)})
    return NodeView(inventory=view.inventory, usage=usage,
                    usage_rows=tuple((used.tasks, used.memory_mib, used.cores) for used in usage), score=view.score,
                    usable_devices=view.usable_devices, max_free_memory_mib=view.max_free_memory_mib,
                    max_free_cores=view.max_free_cores, device_types=view.device_types,
                    idle_devices=view.idle_devices, family_stats=view.family_stats, busy_key=view.busy_key,
                    score_annotations=view.score_annotations, container_devices=view.container_devices)


def _partition_faults(inventory: NodeInventory, usage: tuple[DeviceUsage, ...],
                      usage_by_uuid: Mapping[str, DeviceUsage]) -> tuple[PartitionFault, ...]:
    """What each family's partitioning says cannot be trusted, judging its own family's devices and those of families
    that partition nothing (a partition reserved on such a device is a fault too), each device once, in node order."""
    known = {device.uuid for device in inventory.devices}
    elsewhere = {uuid: used.placed for uuid, used in usage_by_uuid.items() if used.placed and uuid not in known}
    shared = [position for family, (first, end) in inventory.groups.items() if family not in inventory.partitioning
              for position in range(first, end)]
    faults: dict[str, PartitionFault] = {}
    for family, partitioning in inventory.partitioning.items():
        first, end = inventory.groups.get(family, (0, 0))
        judged = sorted([*range(first, end), *shared])
        for fault in partitioning.faults([inventory.devices[p] for p in judged],
                                         [(usage[p].placed, usage[p].unreserved) for p in judged], elsewhere):
            faults.setdefault(fault.uuid, fault)
    return tuple(faults.values())


def _family_stats(inventory: NodeInventory, usage: tuple[DeviceUsage, ...], first: int, end: int) -> FamilyStats:
    usable = idle = max_free_memory = max_free_cores = 0
    grouping = inventory.grouping.get(inventory.devices[first].family) if end > first else None
    grouped = grouping is not None and grouping.scored
    groups: dict[object, list[int]] = {}
    for position in range(first, end):
        device, booked = inventory.devices[position], usage[position]
        if not device.healthy or device.uuid in inventory.cordoned or booked.tasks >= device.count:
            continue
        usable += 1
        idle += booked.tasks == 0
        max_free_memory = max(max_free_memory, device.memory_mib - booked.memory_mib)
        max_free_cores = max(max_free_cores, device.cores - booked.cores)
        if grouped:
            groups.setdefault(grouping.group_of(device) if grouping else None, []).append(
                device.memory_mib - booked.memory_mib)
    return FamilyStats(usable_devices=usable, idle_devices=idle, max_free_memory_mib=max_free_memory,
                       max_free_cores=max_free_cores,
                       device_types=frozenset(device.type for device in inventory.devices[first:end]),
                       group_free_memory=tuple(tuple(sorted(free, reverse=True)) for free in groups.values()))


def sum_bookings(bookings: Iterable[Mapping[str, DeviceUsage]]) -> dict[str, DeviceUsage]:
    """Per GPU UUID, the total of several pods' bookings."""
    totals: dict[str, DeviceUsage] = {}
    for booking in bookings:
        for uuid, held in booking.items():
            totals[uuid] = totals.get(uuid, NO_USAGE) + held
    return totals


def with_booking(view: NodeView, booking: Mapping[str, DeviceUsage]) -> NodeView:
    """``view`` after one more pod's ``booking`` is added to its usage (what-if planning, one pod at a time)."""
    usage = {device.uuid: used for device, used in zip(view.inventory.devices, view.usage, strict=True)}
    return build_node_view(view.inventory, sum_bookings((usage, booking)))
