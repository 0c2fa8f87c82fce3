"""The nearest miss: of the nodes a pod does not fit, the one that comes closest, and what it lacks.

"No node fits" is only actionable with a number: "node-17 GPU 3 has 6000 MiB free, the pod asks 8000 MiB"
tells an operator what to free or what to ask for instead. Which check a GPU fails is decided by
`device_reasons` (the filter's own checks); this module only measures how far the GPU is from passing that
check and ranks nodes by it. Misses that freeing capacity cannot fix (type, UUID, health, cordon, too few
GPUs) are not near misses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami_web.core import names
from hami_web.core.checks import EXCLUSIVE_CORES, device_reasons, refused
from hami_web.core.devices import Device
from hami_web.core.options import PodOptions
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView

# Checks a GPU fails only because of what is booked on it now: freeing capacity would make it pass.
CAPACITY_REASONS = frozenset({
    names.CARD_TIME_SLICING_EXHAUSTED, names.CARD_INSUFFICIENT_MEMORY, names.CARD_INSUFFICIENT_CORE,
    names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT, names.CARD_COMPUTE_UNITS_EXHAUSTED,
})


@dataclass(frozen=True, slots=True)
class GpuShortfall:
    """What one GPU lacks for one container: ``free`` of its ``total`` ``unit`` where ``asked`` is needed.

    ``gap`` is the shortfall as a fraction of the GPU (what ranks near misses).
    """

    index: int
    uuid: str
    reason: str
    free: int
    total: int
    asked: int
    unit: str
    gap: float

    def describe(self) -> str:
        """``GPU 3 has 6000 MiB free, the pod asks 8000 MiB`` and the like."""
        if self.reason == names.CARD_TIME_SLICING_EXHAUSTED:
            return f"GPU {self.index} has no task slot free ({self.total} of {self.total} in use)"
        if self.reason == names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT:
            return f"GPU {self.index} already runs a task, the pod asks for the whole card"
        if self.reason == names.CARD_COMPUTE_UNITS_EXHAUSTED:
            return f"GPU {self.index} has all its cores booked (the pod asks 0% cores, i.e. a share of them)"
        if self.unit == "%":
            return f"GPU {self.index} has {self.free}% of its {self.total}% cores free, the pod asks {self.asked}%"
        return f"GPU {self.index} has {self.free} of {self.total} MiB free, the pod asks {self.asked} MiB"


@dataclass(frozen=True, slots=True)
class NearMiss:
    """The closest node: for its first container that cannot fit, how many GPUs pass and what the rest lack."""

    node: str
    container: str
    asked_gpus: int
    fitting_gpus: int
    shortfalls: tuple[GpuShortfall, ...]

    @property
    def gap(self) -> float:
        """Sum of the shortfalls' gaps (lower is closer)."""
        return sum(shortfall.gap for shortfall in self.shortfalls)

    def describe(self) -> str:
        """One line an operator can act on."""
        lacks = "; ".join(shortfall.describe() for shortfall in self.shortfalls)
        if self.asked_gpus == 1:
            return f"{self.node}: {lacks}"
        return (f"{self.node} (container {self.container} needs {self.asked_gpus} GPUs, {self.fitting_gpus} "
                f"of them fit now): {lacks}")


def _shortfall(device: Device, used: tuple[int, int, int], request: ContainerRequest, booked_mib: int,
               reason: str) -> GpuShortfall:
    tasks, memory_mib, cores = used
    if reason == names.CARD_INSUFFICIENT_MEMORY:
        free, total, asked, unit = device.memory_mib - memory_mib, device.memory_mib, booked_mib, "MiB"
        gap = (asked - free) / max(device.memory_mib, 1)
    elif reason == names.CARD_INSUFFICIENT_CORE:
        free, total, asked, unit = device.cores - cores, device.cores, request.cores, "%"
        gap = (asked - free) / max(device.cores, 1)
    elif reason == names.CARD_TIME_SLICING_EXHAUSTED:
        free, total, asked, unit = device.count - tasks, device.count, 1, "tasks"
        gap = 1 / max(device.count, 1)
    elif reason == names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT:
        free, total, asked, unit = device.cores - cores, device.cores, EXCLUSIVE_CORES, "%"
        gap = tasks / max(device.count, 1)
    else:  # CardComputeUnitsExhausted: any freed core would do
        free, total, asked, unit = 0, device.cores, 0, "%"
        gap = 1 / max(device.cores, 1)
    return GpuShortfall(index=device.index, uuid=device.uuid, reason=reason, free=free, total=total, asked=asked,
                        unit=unit, gap=gap)


def _could_fit_empty(device: Device, request: ContainerRequest, booked_mib: int) -> bool:
    """Whether the GPU would take the container once nothing else is booked on it (else no booking is to blame)."""
    return device.count > 0 and booked_mib <= device.memory_mib and request.cores <= device.cores


def node_near_miss(request: PodRequest, view: NodeView, options: PodOptions) -> NearMiss | None:
    """How close ``view`` comes for the first GPU container that cannot fit on it alone, or None.

    None when every container fits alone (the refusal is about NUMA or containers together) or when freeing
    capacity would not be enough.
    """
    devices = view.inventory.devices
    for container in request.containers:
        if container.count == 0:
            continue
        if container.count > len(devices):
            return None
        booked = [container.booked_memory_mib(device.memory_mib) for device in devices]
        reasons = refused(device_reasons(devices, view.usage_rows, container, booked, options, view.inventory.cordoned),
                          view.inventory)
        fitting = sum(1 for reason in reasons if not reason)
        if fitting >= container.count:
            continue
        soft = sorted((_shortfall(devices[p], view.usage_rows[p], container, booked[p], reason)
                       for p, reason in enumerate(reasons)
                       if reason in CAPACITY_REASONS and _could_fit_empty(devices[p], container, booked[p])),
                      key=lambda shortfall: (shortfall.gap, shortfall.index))
        missing = container.count - fitting
        if len(soft) < missing:
            return None
        return NearMiss(node=view.name, container=container.name, asked_gpus=container.count,
                        fitting_gpus=fitting, shortfalls=tuple(soft[:missing]))
    return None


def nearest_miss(request: PodRequest, views: Iterable[NodeView], options: PodOptions) -> NearMiss | None:
    """The node closest to fitting: fewest GPUs short, then smallest total gap, then name."""
    best: NearMiss | None = None
    for view in views:
        miss = node_near_miss(request, view, options)
        if miss is None:
            continue
        if best is None or (len(miss.shortfalls), miss.gap, miss.node) < (len(best.shortfalls), best.gap, best.node):
            best = miss
    return best
