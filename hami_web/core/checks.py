"""The checks one device goes through for one container, in a fixed order
(docs/scheduling-rules.md#checks-for-one-device).

Kept apart from the fit loop (`hami_web.core.fit`) because the bind's verification, the metrics, the operator
tools and the near-miss explanations judge single devices with exactly these rules: one place, so a refusal the
tools explain is the refusal the filter gave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hami_web.core import names
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.options import DEFAULT_WEIGHTS, DeviceSelection, PodOptions, ScoringWeights
from hami_web.core.quota import QuotaTally
from hami_web.core.requests import ContainerRequest

EXCLUSIVE_CORES = 100
# What one device offers a soft-split (Ascend hami-core) container, whatever its registered cores.
SOFT_SPLIT_CORES = 100


def core_capacity(device: Device, inventory: NodeInventory) -> int:
    """The cores a device can give out: its own, or 100 on a node that allows its family's soft split (HAMi-core
    shares an Ascend NPU's compute in percent, whatever its registered AI cores)."""
    return max(device.cores, SOFT_SPLIT_CORES) if device.family in inventory.soft_split else device.cores


def check_device(device: Device, used: Sequence[int], request: ContainerRequest, booked_memory_mib: int,
                 options: PodOptions, cordoned: frozenset[str]) -> str:
    """The first check ``device`` fails for ``request`` given its working usage, or ``""`` when it fits."""
    return device_reasons((device,), [used], request, [booked_memory_mib], options, cordoned)[0]


# The checks a device fails before its partitioning's refusal (`refused`), in docs/scheduling-rules.md's order.
_BEFORE_REFUSAL = frozenset({names.CARD_NOT_HEALTH, names.CARD_CORDONED, names.CARD_TYPE_MISMATCH,
                             names.CARD_UUID_MISMATCH})


def refused(reasons: list[str], inventory: NodeInventory, first: int = 0) -> list[str]:
    """``reasons`` (of the node's devices from position ``first`` on) with the refusal of each device its family's
    partitioning never places on (`NodeInventory.refused`: a pre-2.10 geometry MIG GPU, docs/mig.md#dynamic-mig) in
    place of every check after health, cordon, type and UUID; as they are on a node without such devices."""
    for position, reason in inventory.refused:  # none on almost every node
        at = position - first
        if 0 <= at < len(reasons) and reasons[at] not in _BEFORE_REFUSAL:
            reasons[at] = reason
    return reasons


class _Verdicts(dict[str, bool]):
    """The pod's type selection judged once per device type of a node: a missing type is judged and kept."""

    def __init__(self, judge: Callable[[str], bool]) -> None:
        super().__init__()
        self._judge = judge

    def __missing__(self, device_type: str) -> bool:
        verdict = self[device_type] = self._judge(device_type)
        return verdict


def device_reasons(devices: Sequence[Device], work: Sequence[Sequence[int]], request: ContainerRequest,
                   booked: Sequence[int], options: PodOptions, cordoned: frozenset[str],
                   selection: DeviceSelection | None = None, quota: QuotaTally | None = None) -> list[str]:
    """For each device, the first check it fails (``""`` when it fits), in the order of
    docs/scheduling-rules.md#checks-for-one-device.

    ``selection`` is the pod's selection of the request's family (looked up in ``options`` when None). ``quota`` is
    the pod's tally against its namespace's limits (docs/quotas.md#namespace-quotas), None when the family is not
    limited: a device is judged on the pod's picks so far plus itself, before the memory check. One loop
    per node rather than one call per device: at thousands of nodes the per-call overhead is a large share of a
    filter that has to explain every device of every node.
    """
    wanted_cores = request.cores
    exclusive = wanted_cores == EXCLUSIVE_CORES
    mutex = options.gpu.mutex
    one_size = request.one_size
    selection = selection or options.selection(request.family)
    type_allowed, uuid_allowed = selection.type_allowed, selection.uuid_allowed
    modes = selection.modes
    type_verdicts = _Verdicts(type_allowed)
    selects_uuids = selection.selects_uuids
    booking = request.core_booking
    short = False  # the family's own core booking finds too few free cores on the device
    reasons: list[str] = []
    for device, (tasks, memory_mib, cores), booked_memory_mib in zip(devices, work, booked, strict=True):
        if booking is not None:
            units = booking.book(device, cores, request.cores)
            short, wanted_cores = units is None, units or 0
        if not device.healthy:
            reason = names.CARD_NOT_HEALTH
        elif device.uuid in cordoned:
            reason = names.CARD_CORDONED
        elif not type_verdicts[device.type] or (modes is not None and not selection.mode_allowed(device.mode)):
            reason = names.CARD_TYPE_MISMATCH
        elif selects_uuids and not uuid_allowed(device.uuid):
            reason = names.CARD_UUID_MISMATCH
        elif tasks >= device.count:
            reason = names.CARD_TIME_SLICING_EXHAUSTED
        elif tasks and (mutex or one_size) and (shared := _shared_device_problem(tasks, memory_mib,
                                                                                  booked_memory_mib, mutex)):
            reason = shared
        elif quota is not None and not quota.fits(device.uuid, booked_memory_mib, wanted_cores, request.init):
            reason = names.RESOURCE_QUOTA_NOT_FIT
        elif device.memory_mib - memory_mib < booked_memory_mib:
            reason = names.CARD_INSUFFICIENT_MEMORY
        elif short or device.cores - cores < wanted_cores:
            reason = names.CARD_INSUFFICIENT_CORE
        elif exclusive and device.cores == EXCLUSIVE_CORES and tasks > 0:
            reason = names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        elif wanted_cores == 0 and device.cores != 0 and cores >= device.cores:
            reason = names.CARD_COMPUTE_UNITS_EXHAUSTED
        else:
            reason = ""
        reasons.append(reason)
    return reasons


def _shared_device_problem(tasks: int, memory_mib: int, booked_memory_mib: int, mutex: bool) -> str:
    """Why a device already in use cannot take one more task: the mutex policy takes only devices nobody uses; a
    device of slices (`hami_web.core.families.family.SliceSizes`) holds one slice size (its tasks' average is the ask,
    HAMi's ``FitVXPU``)."""
    if mutex:
        return names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if memory_mib // tasks != booked_memory_mib:
        return names.CARD_SLICE_SIZE_MISMATCH
    return ""


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
