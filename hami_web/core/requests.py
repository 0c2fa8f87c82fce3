"""What a pod asks for (SPEC.md §3): per container, how many GPUs and how much memory and compute on each.

Quantities arrive in Kubernetes' canonical form (``3k``), so they go through `parse_whole_quantity`;
a malformed value is an error naming the container and resource rather than a silent "no GPU", which
would send the pod to a node where it cannot run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.limits import MAX_DEVICE_MEMORY_MIB, MAX_GPUS_PER_CONTAINER, MAX_QUANTITY
from hami_web.core.quantities import QuantityError, parse_whole_quantity
from hami_web.settings import ResourceNames

MAX_CORES = 100
FULL_CARD_PERCENT = 100


class RequestError(ValueError):
    """The pod's resources cannot be read; the message names the container and resource."""


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's GPU ask. ``memory_mib`` > 0 wins over ``memory_percent``."""

    name: str
    init: bool
    count: int
    memory_mib: int = 0
    memory_percent: int = FULL_CARD_PERCENT
    cores: int = 0

    def booked_memory_mib(self, total_memory_mib: int) -> int:
        """Memory this container books on a GPU of ``total_memory_mib``."""
        if self.memory_mib > 0:
            return self.memory_mib
        return total_memory_mib * self.memory_percent // 100


@dataclass(frozen=True, slots=True)
class PodRequest:
    """All containers of a pod in annotation order (init containers first), GPU or not."""

    containers: tuple[ContainerRequest, ...]

    @property
    def asks_for_gpu(self) -> bool:
        """True when at least one container wants a GPU."""
        return any(c.count > 0 for c in self.containers)

    @property
    def init_count(self) -> int:
        """How many leading entries are init containers."""
        return sum(1 for c in self.containers if c.init)


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    """The flags that fill in what a container leaves out (``--default-mem``, ``--default-cores``)."""

    resources: ResourceNames = field(default_factory=ResourceNames)
    default_mem_mib: int = 0
    default_cores: int = 0


def quantity_maximum(names: ResourceNames, resource: str) -> int:
    """The largest value accepted for ``resource``: a count or MiB a GPU could hold, else `MAX_QUANTITY`."""
    return {names.count: MAX_GPUS_PER_CONTAINER, names.memory: MAX_DEVICE_MEMORY_MIB}.get(resource, MAX_QUANTITY)


def _resource_value(resources: Mapping[str, Any], name: str) -> Any:
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise RequestError(f"resources.{section} is not a map")
        if name in values:
            return values[name]
    return None


def asked_gpu_count(container: Mapping[str, Any], *, count_resource: str) -> int:
    """How many GPUs one container asks for (limits over requests), bounded; `RequestError` when unreadable."""
    name = str(container.get("name") or "<unnamed>")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"container {name}: resources is not a map")
    try:
        raw = _resource_value(resources, count_resource)
    except RequestError as error:
        raise RequestError(f"container {name}: {error}") from None
    if raw is None:
        return 0
    try:
        return parse_whole_quantity(raw, container=name, resource=count_resource, maximum=MAX_GPUS_PER_CONTAINER)
    except QuantityError as error:
        raise RequestError(str(error)) from None


def container_request(container: Mapping[str, Any], *, init: bool, defaults: RequestDefaults) -> ContainerRequest:
    """Read one container's ask: limits over requests per resource, then defaults and the cores clamp."""
    name = str(container.get("name") or "<unnamed>")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"container {name}: resources is not a map")
    names = defaults.resources

    def read(resource: str) -> int | None:
        try:
            raw = _resource_value(resources, resource)
        except RequestError as error:
            raise RequestError(f"container {name}: {error}") from None
        if raw is None:
            return None
        try:
            return parse_whole_quantity(raw, container=name, resource=resource,
                                        maximum=quantity_maximum(names, resource))
        except QuantityError as error:
            raise RequestError(str(error)) from None

    count = read(names.count) or 0
    if count == 0:
        return ContainerRequest(name=name, init=init, count=0)
    memory_mib = read(names.memory) or 0
    memory_percent = read(names.memory_percentage) or 0
    if memory_percent > FULL_CARD_PERCENT:
        raise RequestError(f"container {name}: {names.memory_percentage} {memory_percent} is over 100")
    if memory_mib == 0 and memory_percent == 0:
        if defaults.default_mem_mib:
            memory_mib = defaults.default_mem_mib
        else:
            memory_percent = FULL_CARD_PERCENT
    cores = read(names.cores)
    cores = defaults.default_cores if cores is None else cores
    return ContainerRequest(name=name, init=init, count=count, memory_mib=memory_mib,
                            memory_percent=memory_percent or FULL_CARD_PERCENT, cores=min(cores, MAX_CORES))


def pod_request(pod: Mapping[str, Any], defaults: RequestDefaults) -> PodRequest:
    """Every container's ask, init containers first, in spec order; `RequestError` when unreadable."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise RequestError("pod has no spec")
    containers: list[ContainerRequest] = []
    for key, init in (("initContainers", True), ("containers", False)):
        listed = spec.get(key) or []
        if not isinstance(listed, list):
            raise RequestError(f"spec.{key} is not a list")
        for position, container in enumerate(listed):
            if not isinstance(container, Mapping):
                raise RequestError(f"spec.{key}[{position}] is not an object")
            containers.append(container_request(container, init=init, defaults=defaults))
    return PodRequest(containers=tuple(containers))
