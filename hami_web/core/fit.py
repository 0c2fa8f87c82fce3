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
from itertools import combinations

from hami_web.core import names
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.families import NETWORK_GROUPS
from hami_web.core.grants import DeviceGrant, PodGrants, merge_grants
from hami_web.core.groups import GROUP_SCORE_WEIGHT, group_share, pick_in_groups
from hami_web.core.options import BINPACK, DEFAULT_WEIGHTS, SPREAD, DeviceSelection, PodOptions, ScoringWeights
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView

EXCLUSIVE_CORES = 100
# What one device offers a soft-split (Ascend hami-core) container, whatever its registered cores.
SOFT_SPLIT_CORES = 100
MIG_MODE = "mig"
INVALID_REGISTER = "InvalidRegisterAnnotation"

# Working usage per GPU position: (tasks, memory MiB, cores). Booking replaces an entry with a new tuple, so a
# working copy is one list of references and a node that fails allocates nothing more.
WorkingUsage = list[Sequence[int]]


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
    earns by keeping containers inside one network group (``group_score``, README.md#ascend-npus)."""

    grants: PodGrants
    group_score: float = 0.0


def _failure(reasons: dict[str, int], total: int) -> FitFailure:
    return FitFailure(reasons=tuple(sorted(reasons.items())), total=total)


def core_capacity(device: Device, inventory: NodeInventory) -> int:
    """The cores a device can give out: its own, or 100 on a node that allows its family's soft split (HAMi-core
    shares an Ascend NPU's compute in percent, whatever its registered AI cores)."""
    return max(device.cores, SOFT_SPLIT_CORES) if device.family in inventory.soft_split else device.cores


def check_device(device: Device, used: Sequence[int], request: ContainerRequest, booked_memory_mib: int,
                 options: PodOptions, cordoned: frozenset[str]) -> str:
    """The first check ``device`` fails for ``request`` given its working usage, or ``""`` when it fits."""
    return device_reasons((device,), [used], request, [booked_memory_mib], options, cordoned)[0]


def mig_reason(device: Device) -> str:
    """Why a MIG-mode device takes no slice: dynamic MIG (``migProfiles``) is carved by the device plugin on
    demand and needs a MIG placement, which hami-web does not choose yet; a MIG device without profiles is a
    pre-2.10 geometry that is never allocatable (README.md#device-families). "" for every other device."""
    if device.mode != MIG_MODE:
        return ""
    return names.CARD_MIG_MODE_UNSUPPORTED if device.mig_profiles else names.CARD_MIG_LEGACY_GEOMETRY


def device_reasons(devices: Sequence[Device], work: Sequence[Sequence[int]], request: ContainerRequest,
                   booked: Sequence[int], options: PodOptions, cordoned: frozenset[str],
                   selection: DeviceSelection | None = None) -> list[str]:
    """For each device, the first check it fails (``""`` when it fits), in the order of
    docs/scheduling-rules.md#checks-for-one-device.

    ``selection`` is the pod's selection of the request's family (looked up in ``options`` when None). One loop
    per node rather than one call per device: at thousands of nodes the per-call overhead is a large share of a
    filter that has to explain every device of every node.
    """
    wanted_cores = request.cores
    exclusive = wanted_cores == EXCLUSIVE_CORES
    mutex = options.gpu.mutex
    if selection is None:
        selection = options.selection(request.family)
    type_allowed, uuid_allowed = selection.type_allowed, selection.uuid_allowed
    modes = selection.modes
    type_verdicts: dict[str, bool] = {}
    selects_uuids = selection.selects_uuids
    reasons: list[str] = []
    for device, (tasks, memory_mib, cores), booked_memory_mib in zip(devices, work, booked, strict=True):
        type_ok = type_verdicts.get(device.type)
        if type_ok is None:
            type_ok = type_verdicts[device.type] = type_allowed(device.type)
        if not device.healthy:
            reason = names.CARD_NOT_HEALTH
        elif device.uuid in cordoned:
            reason = names.CARD_CORDONED
        elif not type_ok or (modes is not None and not selection.mode_allowed(device.mode)):
            reason = names.CARD_TYPE_MISMATCH
        elif selects_uuids and not uuid_allowed(device.uuid):
            reason = names.CARD_UUID_MISMATCH
        elif device.mode == MIG_MODE:
            reason = mig_reason(device)
        elif tasks >= device.count:
            reason = names.CARD_TIME_SLICING_EXHAUSTED
        elif mutex and tasks > 0:
            reason = names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT  # mutex: only GPUs nobody uses
        elif device.memory_mib - memory_mib < booked_memory_mib:
            reason = names.CARD_INSUFFICIENT_MEMORY
        elif device.cores - cores < wanted_cores:
            reason = names.CARD_INSUFFICIENT_CORE
        elif exclusive and device.cores == EXCLUSIVE_CORES and tasks > 0:
            reason = names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        elif wanted_cores == 0 and device.cores != 0 and cores >= device.cores:
            reason = names.CARD_COMPUTE_UNITS_EXHAUSTED
        else:
            reason = ""
        reasons.append(reason)
    return reasons


def device_score(device: Device, used: Sequence[int], request: ContainerRequest,
                 weights: ScoringWeights = DEFAULT_WEIGHTS) -> float:
    """``10 × (a·(1+used)/count + b·(cores+usedcores)/totalcore + c·(mem+usedmem)/totalmem)`` for this request,
    with ``a, b, c`` the pod's slot, core and memory weights (1, 1, 1 unless ``hami.io/device-scoring-weights``)."""
    tasks, memory_mib, cores = used
    score = weights.slot * (1 + tasks) / device.count if device.count else 0.0
    if device.cores:
        score += weights.core * (request.cores + cores) / device.cores
    if device.memory_mib:
        score += weights.memory * (request.booked_memory_mib(device.memory_mib) + memory_mib) / device.memory_mib
    return 10 * score


def _policy_order(positions: list[int], devices: Sequence[Device], work: WorkingUsage,
                  request: ContainerRequest, options: PodOptions) -> list[int]:
    """``positions`` sorted by the policy's keys in the order written, then device index, then UUID."""
    sort_keys = options.gpu.sort_keys
    weights = options.scoring_weights
    scored = BINPACK in sort_keys or SPREAD in sort_keys

    def order(p: int) -> tuple[float | int | str, ...]:
        device = devices[p]
        score = device_score(device, work[p], request, weights) if scored else 0.0
        parts: list[float | int | str] = [-score if key == BINPACK else score if key == SPREAD else device.numa
                                          for key in sort_keys]
        return (*parts, device.index, device.uuid)

    return sorted(positions, key=order)


def _pair_score(inventory: NodeInventory, first: str, second: str) -> int:
    return inventory.pair_scores.get(first, {}).get(second, 0)


def _topology_pick(positions: list[int], devices: Sequence[Device], inventory: NodeInventory,
                   count: int) -> list[int]:
    """HAMi's topology-aware choice; candidates visited from the highest GPU index down, first best wins."""
    ordered = sorted(positions, key=lambda p: (-devices[p].index, devices[p].uuid))
    if len(ordered) == count:
        return ordered
    uuids = {p: devices[p].uuid for p in ordered}
    if count == 1:
        # One GPU: the one with the weakest links to the others, keeping well-linked groups free.
        def links(p: int) -> int:
            return sum(_pair_score(inventory, uuids[p], uuids[q]) for q in ordered if q != p)

        best = ordered[0]
        best_links = links(best)
        for p in ordered[1:]:
            if (candidate := links(p)) < best_links:
                best, best_links = p, candidate
        return [best]
    best_group: tuple[int, ...] = ()
    best_total = -1
    for group in combinations(ordered, count):
        total = sum(_pair_score(inventory, uuids[a], uuids[b]) for a, b in combinations(group, 2))
        if total > best_total:
            best_group, best_total = group, total
    return list(best_group)


def fit_container(request: ContainerRequest, inventory: NodeInventory, work: WorkingUsage,
                  options: PodOptions) -> tuple[DeviceGrant, ...] | FitFailure:
    """Pick devices of the request's family for one container on ``work`` and book them there, or say why not.

    The families without pair scores (``inventory.topology``) read topology-aware as spread
    (README.md#decisions, device families).
    """
    first, end = inventory.groups.get(request.family, (0, 0))
    whole = first == 0 and end == len(inventory.devices)
    devices = inventory.devices if whole else inventory.devices[first:end]
    family_work: WorkingUsage = work if whole else work[first:end]
    total = len(devices)
    if request.count > total:
        return FitFailure(reasons=((names.NODE_INSUFFICIENT_DEVICE, request.count),), total=total)
    selection = options.selection(request.family)
    if selection.soft_split:
        offered = _soft_split_devices(devices, request.family, inventory)
        if offered is None:
            return FitFailure(reasons=((names.MODE_NOT_FIT, total),), total=total)
        devices = offered
    reasons: dict[str, int] = {}
    passing: list[int] = []
    if request.memory_mib > 0:
        booked = [request.memory_mib] * total
    else:
        booked = [request.booked_memory_mib(device.memory_mib) for device in devices]
    for position, reason in enumerate(device_reasons(devices, family_work, request, booked, options,
                                                     inventory.cordoned, selection)):
        if reason:
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            passing.append(position)
    pool = passing
    if selection.numa_bind:
        groups: dict[int, list[int]] = {}
        for position in passing:
            groups.setdefault(devices[position].numa, []).append(position)
        pool = next((groups[numa] for numa in sorted(groups) if len(groups[numa]) >= request.count), [])
        if not pool and len(passing) >= request.count:
            reasons[names.NUMA_NOT_FIT] = len(passing)
            return _failure(reasons, total)
    if len(pool) < request.count:
        if passing:
            reasons[names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(passing)
        return _failure(reasons, total)
    grouping = inventory.grouping.get(request.family) if inventory.grouping else None
    topology = options.gpu.topology_aware and (inventory.topology is None or request.family in inventory.topology)
    if grouping:
        chosen = pick_in_groups(grouping, _policy_order(pool, devices, family_work, request, options), devices,
                                request.count)
        if len(chosen) < request.count:
            reasons[names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(passing)
            return _failure(reasons, total)
    elif topology and options.gpu.spec_topology:
        chosen = _topology_pick(pool, devices, inventory, request.count)
    elif topology:
        # In a chain topology-aware only filters: it picks the GPUs, the sort keys order them.
        chosen = _policy_order(_topology_pick(pool, devices, inventory, request.count), devices, family_work,
                               request, options)
    else:
        chosen = _policy_order(pool, devices, family_work, request, options)[:request.count]
    grants = []
    for position in chosen:
        tasks, memory_mib, cores = work[first + position]
        work[first + position] = (tasks + 1, memory_mib + booked[position], cores + request.cores)
        grants.append(DeviceGrant(uuid=devices[position].uuid, memory_mib=booked[position], cores=request.cores,
                                  vendor=request.family, soft_split=selection.soft_split))
    return tuple(grants)


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
    return [device for device, reason in zip(devices, reasons, strict=True) if not reason]


def fit_pod(request: PodRequest, view: NodeView, options: PodOptions) -> PodFit | FitFailure:
    """Fit every container of the pod on ``view`` (docs/scheduling-rules.md#init-containers): each init container alone
    on the node's usage, the regular containers one after another on one working copy; each family in turn
    (README.md#device-families), the first family that fails being the node's reason."""
    base = view.usage_rows
    shared: WorkingUsage = list(base)
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
        for container in containers:
            if container.count == 0:
                grants.append(())
                continue
            work: WorkingUsage = list(base) if container.init else shared
            result = fit_container(container, inventory, work, options)
            if isinstance(result, FitFailure):
                return _named(result, family, len(blocks), inventory)
            grants.append(result)
        if inventory.grouping.get(family) == NETWORK_GROUPS:
            group_score += _group_score(grants, inventory)
        parts.append(tuple(grants))
    if len(parts) == 1:
        return PodFit(grants=parts[0], group_score=group_score)
    return PodFit(grants=merge_grants(parts, len(parts[0]) if parts else 0), group_score=group_score)


def _group_score(grants: Sequence[Sequence[DeviceGrant]], inventory: NodeInventory) -> float:
    """``10 × Σ containers (devices in the container's largest network group / its devices)`` (HAMi's ``ScoreNode``
    for Ascend 910 chips)."""
    network = {device.uuid: device.network for device in inventory.devices}
    return GROUP_SCORE_WEIGHT * sum(group_share([network[grant.uuid] for grant in container])
                                    for container in grants if container)


def _named(failure: FitFailure, family: str, families_asked: int, inventory: NodeInventory) -> FitFailure:
    """The failure naming ``family`` when it must (docs/scheduling-rules.md#filter-reasons): the pod asks for several
    families, the node carries several (or a broken one), or the node has none of the family's devices (``DCU: 1/0
    NodeInsufficient…``); otherwise HAMi's reason as it is."""
    if families_asked > 1 or len(inventory.groups) + len(inventory.broken) > 1 or family not in inventory.groups:
        return replace(failure, family=family)
    return failure


def group_score_bound(request: PodRequest, view: NodeView) -> float:
    """The most `PodFit.group_score` a placement of ``request`` on ``view`` can earn, from the view's aggregates: each
    grouped container keeps at most as many devices in one group as that group has usable devices with the memory it
    asks (README.md#ascend-npus)."""
    bound = 0.0
    stats = view.family_stats
    for container in request.containers:
        if not (container.count and container.grouped):
            continue
        family = stats.get(container.family)
        if family is None or not family.group_free_memory:
            continue  # no network groups on this node: no term
        wanted = container.memory_mib
        most = max(sum(1 for free in group if free >= wanted) for group in family.group_free_memory)
        bound += GROUP_SCORE_WEIGHT * min(container.count, most) / container.count
    return bound


def may_fit(request: PodRequest, view: NodeView, options: PodOptions) -> bool:
    """Cheap necessary condition for `fit_pod` from the node's aggregates (False = certainly no fit)."""
    stats = view.family_stats
    for container in request.containers:
        if container.count == 0:
            continue
        family = stats.get(container.family)
        if family is None:
            return False
        if not any(options.selection(container.family).type_allowed(device_type)
                   for device_type in family.device_types):
            return False
        if container.count > family.usable_devices:
            return False
        if container.cores > family.max_free_cores and not options.selection(container.family).soft_split:
            return False  # a soft-split device offers 100 cores whatever it registered
        if options.gpu.mutex and container.count > family.idle_devices:
            return False
        if container.memory_mib > family.max_free_memory_mib:
            return False
    return True
