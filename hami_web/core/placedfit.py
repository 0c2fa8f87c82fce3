"""The fit of one container on a node whose family carves some devices per grant (docs/mig.md#dynamic-mig): placed
partitions, several of one device for one container, each booking its profile's memory and cores.

`hami_web.core.fit` sends a container here when its family's partitioning (`hami_web.core.partitions.Partitioning`)
carves one of the devices that passed the checks; everything about the profiles and placements is the partitioning's
(NVIDIA's dynamic MIG: `hami_web.core.migpartitioning`). The rules follow HAMi v2.10.0 pkg/device/nvidia/device.go
(``selectMigCandidate``: a MIG GPU without an instance for the ask fails ``CardMigTopologyInfeasible``) and
pkg/scheduler/mig_allocation_test.go (``TestFitInDevices*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hami_web.core import names
from hami_web.core.checks import check_device
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import PodOptions
from hami_web.core.ordering import WorkingUsage, policy_order, topology_aware, topology_pick
from hami_web.core.partitions import Partitioning, PlacedPartition, SliceRange
from hami_web.core.quota import QuotaTally
from hami_web.core.requests import ContainerRequest

# Working occupancy per device position (the placements booked, this pod's picks included), kept beside a
# `WorkingUsage` on nodes with devices carved per grant.
WorkingPlacements = list[tuple[SliceRange, ...]]


@dataclass(slots=True)
class _Fill:
    """A tentative fill of one container: scratch rows and occupancy per position it touched, the picks in order, and
    why a device stopped taking more."""

    rows: dict[int, Sequence[int]]
    placements: dict[int, tuple[SliceRange, ...]]
    picks: list[tuple[int, int, int, PlacedPartition | None]]  # position, memory MiB, cores, placed partition
    stopped: dict[str, int]


@dataclass(frozen=True, slots=True)
class PlacedNode:
    """What the placed fit reads of the node: its partitioning of the family, inventory, the family's first position
    and devices, and the working usage and occupancy of every device."""

    partitioning: Partitioning
    inventory: NodeInventory
    first: int
    devices: Sequence[Device]
    work: WorkingUsage
    occupied: WorkingPlacements


def _fill(node: PlacedNode, order: Sequence[int], request: ContainerRequest, booked: Sequence[int],
          options: PodOptions, *, once: bool = False) -> _Fill:
    """Take devices in ``order`` until the request's count of picks: an ordinary device once, a carved one again and
    again while it passes the checks (counting this container's earlier picks) and has a free placement (several
    partitions of one device), unless ``once``. Works on scratch copies; `fit_placed` commits a complete fill."""
    fill = _Fill(rows={}, placements={}, picks=[], stopped={})
    partitioning, count = node.partitioning, request.count
    for position in order:
        device = node.devices[position]
        index = node.first + position
        row = node.work[index]
        taken = node.occupied[index]
        repeat = False
        while len(fill.picks) < count:
            if repeat:
                reason = check_device(device, row, request, booked[position], options, node.inventory.cordoned)
                if reason:
                    fill.stopped[reason] = fill.stopped.get(reason, 0) + 1
                    break
            partition: PlacedPartition | None = None
            if index in node.inventory.carved:
                placed = partitioning.place(device, taken, booked[position])
                if placed is None:
                    fill.stopped[partitioning.infeasible] = fill.stopped.get(partitioning.infeasible, 0) + 1
                    break
                memory_mib, cores, partition = placed
                taken = (*taken, partition.placement)
            else:
                memory_mib, cores = booked[position], request.cores
            row = (row[0] + 1, row[1] + memory_mib, row[2] + cores)
            fill.picks.append((position, memory_mib, cores, partition))
            if partition is None or once:
                break
            repeat = True
        fill.rows[index] = row
        fill.placements[index] = taken
        if len(fill.picks) == count:
            break
    return fill


def fit_placed(node: PlacedNode, request: ContainerRequest, booked: Sequence[int], passing: list[int],
               reasons: dict[str, int], options: PodOptions) -> tuple[DeviceGrant, ...] | None:
    """`hami_web.core.fit.fit_container` for a container some of whose passing devices are carved per grant; None
    when it does not fit, ``reasons`` then counting why.

    A carved device without a partition for the ask fails the partitioning's ``infeasible``. The candidates are
    taken in the policy's order (topology-aware: its pick of distinct GPUs when there are enough, then the rest); NUMA
    binding tries one NUMA node's devices at a time. Each pick books the partition's memory and cores and carries the
    placed partition, written at bind as the partitioning's reservation annotation.
    """
    partitioning, devices, first = node.partitioning, node.devices, node.first
    family_work = node.work[first:first + len(devices)]
    candidates: list[int] = []
    for position in passing:
        if first + position in node.inventory.carved and partitioning.place(
                devices[position], node.occupied[first + position], booked[position]) is None:
            reasons[partitioning.infeasible] = reasons.get(partitioning.infeasible, 0) + 1
        else:
            candidates.append(position)
    ordered = policy_order(candidates, devices, family_work, request, options)
    distinct = topology_aware(request, node.inventory, options) and len(candidates) >= request.count
    if distinct:  # topology-aware: its pick of distinct GPUs, one instance each
        ordered = topology_pick(candidates, devices, node.inventory, request.count)
    fill = _fill(node, ordered, request, booked, options, once=distinct)
    if options.selection(request.family).numa_bind and len(fill.picks) == request.count:
        for numa in sorted({devices[position].numa for position in ordered}):
            grouped = _fill(node, [position for position in ordered if devices[position].numa == numa], request,
                            booked, options, once=distinct)
            if len(grouped.picks) == request.count:
                fill = grouped
                break
        else:
            reasons[names.NUMA_NOT_FIT] = len(candidates)
            return None
    if len(fill.picks) < request.count:
        for reason, failed in fill.stopped.items():
            reasons[reason] = reasons.get(reason, 0) + failed
        if fill.picks:
            reasons[names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(fill.picks)
        return None
    for index, row in fill.rows.items():
        node.work[index] = row
        node.occupied[index] = fill.placements[index]
    return tuple(DeviceGrant(uuid=devices[position].uuid, memory_mib=memory_mib, cores=cores, vendor=request.family,
                             placed=partition)
                 for position, memory_mib, cores, partition in fill.picks)


def placed_within_quota(grants: tuple[DeviceGrant, ...], quota: QuotaTally, request: ContainerRequest,
                        reasons: dict[str, int]) -> bool:
    """Whether the container's placed partitions stay within the quota, counted together after they are chosen (each
    books its profile's memory and cores, docs/quotas.md#namespace-quotas); if so they are added to ``quota``, else
    ``ResourceQuotaNotFit`` counts them all."""
    trial = QuotaTally(quota.quota)
    trial.copy_from(quota)
    for grant in grants:
        if not trial.fits(grant.uuid, grant.memory_mib, grant.cores, request.init):
            reasons[names.RESOURCE_QUOTA_NOT_FIT] = reasons.get(names.RESOURCE_QUOTA_NOT_FIT, 0) + len(grants)
            return False
        trial.add(grant.uuid, grant.memory_mib, grant.cores, request.init)
    quota.copy_from(trial)
    return True
