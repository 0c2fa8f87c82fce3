"""Fitting a pod's containers onto one node's devices (docs/scheduling-rules.md#checks-for-one-device).

Every device is run through the checks in a fixed order and the first failing check is that device's reason, so
a refusal tells the operator how many devices failed for which cause (``1/2 CardInsufficientCore, …``).
Containers book cumulatively on a private working copy of the node's usage; the shared state is never
touched here. One loop serves every family: a pod's ask of each family is fitted on that family's devices only,
families in common-word order, and the node fits only if all do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from hami_web.core import capabilities, names
from hami_web.core.checks import SOFT_SPLIT_CORES, device_reasons, refused
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.grants import DeviceGrant, PodGrants, merge_grants
from hami_web.core.options import PodOptions
from hami_web.core.ordering import WorkingUsage, choose_positions, policy_order
from hami_web.core.placedfit import PlacedNode, WorkingPlacements, fit_placed, placed_within_quota
from hami_web.core.quota import PodQuota, QuotaTally
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView

INVALID_REGISTER = "InvalidRegisterAnnotation"


@dataclass(frozen=True, slots=True)
class FitFailure:
    """Why a node cannot take a pod: per reason, how many of its ``total`` devices failed for it.

    ``message`` replaces the counts when the family could not be judged at all (its inventory does not parse).
    """

    reasons: tuple[tuple[str, int], ...]
    total: int
    message: str = ""
    family: str = ""  # set when the pod or the node has several families: the summary then names it

    def summary(self) -> str:
        """``"<n>/<total> <Reason>"`` per reason, sorted by reason name, joined with ``", "``; prefixed with
        ``"<family>: "`` when the failure must say which family it is about."""
        text = self.message or ", ".join(f"{count}/{self.total} {reason}" for reason, count in sorted(self.reasons))
        return f"{self.family}: {text}" if self.family else text


@dataclass(frozen=True, slots=True)
class PodFit:
    """The GPUs each container (init containers first) gets on one node, and the node-score term this placement
    earns by keeping containers inside one network group (``group_score``, docs/device-families.md#ascend-npus)."""

    grants: PodGrants
    group_score: float = 0.0


def _failure(reasons: dict[str, int], total: int) -> FitFailure:
    return FitFailure(reasons=tuple(sorted(reasons.items())), total=total)


def fit_container(request: ContainerRequest, inventory: NodeInventory, work: WorkingUsage, options: PodOptions,
                  occupied: WorkingPlacements | None = None, quota: QuotaTally | None = None,
                  pinned: frozenset[str] | None = None,
                  held: Sequence[tuple[str, ...]] | None = None) -> tuple[DeviceGrant, ...] | FitFailure:
    """Pick devices of the request's family for one container on ``work`` and book them there, or say why not.

    The families without pair scores (``inventory.topology``) read topology-aware as spread
    (docs/compatibility.md#device-families). A family that partitions its devices (``inventory.partitioning``) has
    its ask mapped first (`hami_web.core.partitions.Partitioning.ask`). ``occupied`` is the node's working occupancy of
    placed partitions, which `fit_pod` passes when the node has devices carved per grant (None: it has none); a
    container whose candidates include one is fitted by `hami_web.core.placedfit.fit_placed`. ``quota``: the pod's
    tally against its namespace's limits, which the picks are added to (docs/quotas.md#namespace-quotas). ``pinned``:
    the cards the pod's earlier containers hold, for a family that keeps a pod on one card (`_one_card`). ``held``:
    what each device's grants hold under the request's sharing rule (its node's usage ``tags``), for a request that
    has one (`hami_web.core.capabilities.sharing_reasons`).
    """
    partitioning = inventory.partitioning.get(request.family)
    if partitioning is not None:  # a partitioned family books the profile the node offers for the ask
        first, end = inventory.groups.get(request.family, (0, 0))
        profiled = partitioning.ask(request, inventory.devices[first:end])
        if profiled is None:  # HAMi's Enflame DRS: no profile for the ask, the node counts one ModeNotFit
            return FitFailure(reasons=((names.MODE_NOT_FIT, 1),), total=end - first)
        request = profiled
    return _fit_devices(request, inventory, work, options, occupied, quota, pinned, held)


def _fit_devices(request: ContainerRequest, inventory: NodeInventory, work: WorkingUsage, options: PodOptions,
                 occupied: WorkingPlacements | None, quota: QuotaTally | None,
                 pinned: frozenset[str] | None,
                 held: Sequence[tuple[str, ...]] | None) -> tuple[DeviceGrant, ...] | FitFailure:
    """`fit_container` once the ask is what it books."""
    first, end = inventory.groups.get(request.family, (0, 0))
    whole = first == 0 and end == len(inventory.devices)
    devices = inventory.devices if whole else inventory.devices[first:end]
    family_work: WorkingUsage = work if whole else work[first:end]
    total = len(devices)
    selection = options.selection(request.family)
    partitioning = inventory.partitioning.get(request.family)
    if request.count > total and (partitioning is None or not partitioning.may_repeat(devices, selection.modes)):
        return FitFailure(reasons=((names.NODE_INSUFFICIENT_DEVICE, request.count),), total=total)
    if selection.soft_split:
        offered = _soft_split_devices(devices, request.family, inventory)
        if offered is None:
            return FitFailure(reasons=((names.MODE_NOT_FIT, total),), total=total)
        devices = offered
    reasons: dict[str, int] = {}
    passing: list[int] = []
    booked = _booked(request, devices)
    largest = max(booked, default=0)
    # A room that covers the largest ask of every device the container may take needs no check per device.
    per_device = None if quota is None or (request.core_booking is None and quota.covers(largest, request.cores)) \
        else quota
    checked = device_reasons(devices, family_work, request, booked, options, inventory.cordoned, selection, per_device)
    checked = capabilities.sharing_reasons(refused(checked, inventory, first), request, devices, family_work, held,
                                           first)
    for position, reason in enumerate(checked):
        if reason:
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            passing.append(position)
    if pinned is not None:
        passing = _one_card(passing, devices, pinned, reasons)
    if options.gpu.mutex and (grouping := inventory.grouping.get(request.family)) is not None:
        passing = _group_mutex(passing, grouping.mutex_conflicts(devices, [row[0] for row in family_work]), reasons)
    if occupied is not None and partitioning is not None and any(first + position in inventory.carved
                                                                 for position in passing):
        placed = fit_placed(PlacedNode(partitioning, inventory, first, devices, work, occupied), request, booked,
                            passing, reasons, options)
        within = placed is not None and (quota is None or placed_within_quota(placed, quota, request, reasons))
        return placed if placed is not None and within else _failure(reasons, total)
    pool = _numa_pool(passing, devices, request) if selection.numa_bind else passing
    if not pool and selection.numa_bind and len(passing) >= request.count:
        reasons[names.NUMA_NOT_FIT] = len(passing)
        return _failure(reasons, total)
    chosen = capabilities.sharing_pick(choose_positions(pool, devices, family_work, inventory, request, options)
                                       if len(pool) >= request.count else [], pool, request, devices, held, first)
    if len(chosen) < request.count:
        if passing:
            reasons[names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(passing)
        return _failure(reasons, total)
    if quota is not None and request.count > 1 and (request.core_booking is not None or not quota.covers(
            largest * request.count, request.cores * request.count)):
        chosen = _within_quota(chosen, pool, devices, family_work, request, options, booked, quota, reasons,
                               regroup=inventory.grouping.get(request.family) is None)
        if len(chosen) < request.count:
            if chosen:
                reasons[names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(chosen)
            return _failure(reasons, total)
    return _book(chosen, devices, first, work, booked, request, selection.soft_split, quota)


def _one_card(passing: list[int], devices: Sequence[Device], pinned: frozenset[str],
              reasons: dict[str, int]) -> list[int]:
    """HAMi's ``customFilterRule`` (Metax GPU, Mthreads): a device passes only when every card the pod's earlier
    containers hold is this one; the others fail ``CardNotFoundCustomFilterRule``."""
    kept = [position for position in passing if pinned <= {devices[position].uuid}]
    if len(kept) < len(passing):
        reasons[names.CARD_NOT_FOUND_CUSTOM_FILTER_RULE] = len(passing) - len(kept)
    return kept


def _group_mutex(passing: list[int], conflicts: set[int], reasons: dict[str, int]) -> list[int]:
    """A ``mutex`` pod's devices without the grouping's conflicts (Vastai: a die of a card in use), which fail
    ``ExclusiveDeviceAllocateConflict``."""
    kept = [position for position in passing if position not in conflicts]
    if len(kept) < len(passing):
        reasons[names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] = \
            reasons.get(names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, 0) + len(passing) - len(kept)
    return kept


def _booked(request: ContainerRequest, devices: Sequence[Device]) -> list[int]:
    """The memory the container books on each device: its MiB ask, or its share of each device's memory."""
    if request.memory_mib > 0:
        return [request.memory_mib] * len(devices)
    return [request.booked_memory_mib(device.memory_mib) for device in devices]


def _numa_pool(passing: list[int], devices: Sequence[Device], request: ContainerRequest) -> list[int]:
    """The passing positions of the lowest NUMA node that holds the whole request (numa-bind), or none."""
    groups: dict[int, list[int]] = {}
    for position in passing:
        groups.setdefault(devices[position].numa, []).append(position)
    return next((groups[numa] for numa in sorted(groups) if len(groups[numa]) >= request.count), [])


def _book(chosen: list[int], devices: Sequence[Device], first: int, work: WorkingUsage, booked: Sequence[int],
          request: ContainerRequest, soft_split: bool, quota: QuotaTally | None) -> tuple[DeviceGrant, ...]:
    """Book the chosen devices on the working copy (and the quota tally) and say what the container got."""
    grants = []
    grant_type = request.grant_type
    for position in chosen:
        device = devices[position]
        tasks, memory_mib, cores = work[first + position]
        units = _cores_on(request, device, cores)
        work[first + position] = (tasks + request.shares, memory_mib + booked[position], cores + units)
        written = grant_type(device) if grant_type else ""
        own = request.core_booking is not None
        grants.append(DeviceGrant(uuid=device.uuid, memory_mib=booked[position], cores=units, vendor=request.family,
                                  soft_split=soft_split, type=written if written != request.family else "",
                                  shares=request.shares, partition=request.profile,
                                  handle=capabilities.device_handle(device), tags=capabilities.grant_tags(request),
                                  asked_cores=request.cores if own else 0, device_cores=device.cores if own else 0))
        if quota is not None:
            quota.add(device.uuid, booked[position], units, request.init)
    return tuple(grants)


def _within_quota(chosen: list[int], pool: list[int], devices: Sequence[Device], work: WorkingUsage,
                  request: ContainerRequest, options: PodOptions, booked: Sequence[int], quota: QuotaTally,
                  reasons: dict[str, int], *, regroup: bool) -> list[int]:
    """``chosen`` when all its devices together stay within the quota; else the devices HAMi would take: the pool in
    the policy's order, each judged on the picks before it, those that would pass the limit counted as
    ``ResourceQuotaNotFit`` (docs/quotas.md#namespace-quotas). A choice made by network groups (``regroup`` False) is
    not re-picked device by device: it stands or fails whole."""
    trial = QuotaTally(quota.quota)
    trial.copy_from(quota)
    if all(_try_add(trial, devices[p].uuid, booked[p], _cores_on(request, devices[p], work[p][2]), request.init)
           for p in chosen):
        return chosen
    if not regroup:
        reasons[names.RESOURCE_QUOTA_NOT_FIT] = reasons.get(names.RESOURCE_QUOTA_NOT_FIT, 0) + len(chosen)
        return []
    trial.copy_from(quota)
    picked: list[int] = []
    for position in policy_order(pool, devices, work, request, options):
        if len(picked) == request.count:
            break
        if _try_add(trial, devices[position].uuid, booked[position],
                    _cores_on(request, devices[position], work[position][2]), request.init):
            picked.append(position)
        else:
            reasons[names.RESOURCE_QUOTA_NOT_FIT] = reasons.get(names.RESOURCE_QUOTA_NOT_FIT, 0) + 1
    return picked


def _try_add(tally: QuotaTally, uuid: str, memory_mib: int, cores: int, init: bool) -> bool:
    if not tally.fits(uuid, memory_mib, cores, init):
        return False
    tally.add(uuid, memory_mib, cores, init)
    return True


def _cores_on(request: ContainerRequest, device: Device, used: int) -> int:
    """The cores a grant of ``request`` books on ``device`` whose working usage books ``used``: the ask, or what the
    family's own booking makes of it (AMD's compute units, AWS Neuron's core bitmask), which the checks passed on the
    same usage."""
    booking = request.core_booking
    return request.cores if booking is None else booking.book(device, used, request.cores) or 0


def _soft_split_devices(devices: Sequence[Device], family: str,
                        inventory: NodeInventory) -> tuple[Device, ...] | None:
    """The devices as a soft-split (Ascend hami-core) container sees them, each offering 100 cores; None when the node
    does not allow the family's soft split (``ModeNotFit``)."""
    if family not in inventory.soft_split:
        return None
    return tuple(replace(device, cores=SOFT_SPLIT_CORES) for device in devices)


def passing_devices(request: ContainerRequest, view: NodeView, options: PodOptions) -> list[Device]:
    """The devices of the request's family on ``view`` that pass every check for it alone (for ``explain``: what a
    group rule had to choose from); none when the node refuses the family's mode."""
    first, end = view.inventory.groups.get(request.family, (0, 0))
    devices = view.inventory.devices[first:end]
    selection = options.selection(request.family)
    if selection.soft_split:
        offered = _soft_split_devices(devices, request.family, view.inventory)
        if offered is None:
            return []
        devices = offered
    booked = [request.memory_mib or request.booked_memory_mib(device.memory_mib) for device in devices]
    reasons = device_reasons(devices, view.usage_rows[first:end], request, booked, options, view.inventory.cordoned,
                             selection)
    reasons = refused(reasons, view.inventory, first)
    return [device for device, reason in zip(devices, reasons, strict=True) if not reason]


def fit_pod(request: PodRequest, view: NodeView, options: PodOptions,
            quota: PodQuota | None = None) -> PodFit | FitFailure:
    """Fit every container of the pod on ``view`` (docs/scheduling-rules.md#init-containers): each init container alone
    on the node's usage, the regular containers one after another on one working copy; each family in turn
    (docs/device-families.md#device-families), the first family that fails being the node's reason. ``quota``: what the
    namespace's limits leave the pod's families (docs/quotas.md#namespace-quotas), None when none is limited."""
    base = view.usage_rows
    shared: WorkingUsage = list(base)
    # The node's occupancy of placed partitions, only where a device is carved per grant (docs/mig.md#dynamic-mig).
    # Unlike memory and cores it is never given back between init containers and containers: an instance may outlive
    # its container, so no two of the pod's instances share a slice.
    placements = [used.occupied for used in view.usage] if view.carved else None
    held = [used.tags for used in view.usage] if any(c.sharing_rule for c in request.containers) else None
    blocks = request.blocks()
    inventory = view.inventory
    broken = inventory.broken
    parts: list[tuple[tuple[DeviceGrant, ...], ...]] = []
    group_score = 0.0
    for family, containers in blocks:
        if broken and family in broken and any(container.count for container in containers):
            return _named(FitFailure(reasons=(), total=0, message=f"{INVALID_REGISTER}: {broken[family]}"),
                          family, len(blocks), inventory)
        grants: list[tuple[DeviceGrant, ...]] = []
        family_quota = quota.get(family) if quota is not None else None
        tally = QuotaTally(family_quota) if family_quota is not None else None
        for container in containers:
            if container.count == 0:
                grants.append(())
                continue
            work: WorkingUsage = list(base) if container.init else shared
            pinned = frozenset(grant.uuid for earlier, asked in zip(grants, containers, strict=False) if not asked.init
                               for grant in earlier) if container.one_card and not container.init else None
            result = fit_container(container, inventory, work, options, placements, tally, pinned or None,
                                   held if container.sharing_rule is not None else None)
            if isinstance(result, FitFailure):
                return _named(result, family, len(blocks), inventory)
            grants.append(result)
        group_score += capabilities.sharing_score(containers, grants, inventory, base, held)
        if (grouping := inventory.grouping.get(family)) is not None and grouping.scored:
            by_uuid = {device.uuid: device for device in inventory.devices}
            group_score += grouping.score([[by_uuid[grant.uuid] for grant in container] for container in grants],
                                          options.node_policy, capabilities.busy_devices(inventory, base, family))
        parts.append(tuple(grants))
    if len(parts) == 1:
        return PodFit(grants=parts[0], group_score=group_score)
    return PodFit(grants=merge_grants(parts, len(parts[0]) if parts else 0), group_score=group_score)


def _named(failure: FitFailure, family: str, families_asked: int, inventory: NodeInventory) -> FitFailure:
    """The failure naming ``family`` when it must (docs/scheduling-rules.md#filter-reasons): the pod asks for several
    families, the node carries several (or a broken one), or the node has none of the family's devices (``DCU: 1/0
    NodeInsufficient…``); otherwise HAMi's reason as it is."""
    if families_asked > 1 or len(inventory.groups) + len(inventory.broken) > 1 or family not in inventory.groups:
        return replace(failure, family=family)
    return failure


def may_fit(request: PodRequest, view: NodeView, options: PodOptions) -> bool:
    """Cheap necessary condition for `fit_pod` from the node's aggregates (False = certainly no fit)."""
    stats = view.family_stats
    for container in request.containers:
        if container.count == 0:
            continue
        family = stats.get(container.family)
        if family is None:
            return False
        # The cheap counts first: under binpack the filter meets the full nodes first, one after another.
        # A device carved per grant may give one container several partitions (docs/mig.md#dynamic-mig).
        wanted = min(container.count, 1) if view.carved else container.count
        if wanted > family.usable_devices:
            return False
        selection = options.selection(container.family)
        if not any(map(selection.type_allowed, family.device_types)):
            return False
        if container.cores > family.max_free_cores and not selection.soft_split \
                and container.core_booking is None:
            # A soft-split device offers 100 cores whatever it registered; a family's own core booking (compute
            # units, a core bitmask) counts in other units than the ask.
            return False
        if options.gpu.mutex and wanted > family.idle_devices:
            return False
        if container.memory_mib > family.max_free_memory_mib:
            return False
    return True
