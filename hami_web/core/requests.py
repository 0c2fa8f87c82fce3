"""What a pod asks for (docs/scheduling-rules.md#what-a-pod-asks-for): per family and container, how many devices and
how much memory and compute.

Quantities arrive in Kubernetes' canonical form (``3k``), so they go through `parse_whole_quantity`;
a malformed value is an error naming the container and resource rather than a silent "no GPU", which
would send the pod to a node where it cannot run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami_web.core.devices import Device
from hami_web.core.families import (
    DEFAULT_CATALOG,
    NVIDIA,
    DeviceCatalog,
    Family,
    ResourceNames,
    with_nvidia,
)
from hami_web.core.families.family import CoreBooking, NodeScore, SharingRule
from hami_web.core.groups import BusyTerm
from hami_web.core.limits import MAX_DEVICE_MEMORY_MIB, MAX_GPUS_PER_CONTAINER, MAX_QUANTITY
from hami_web.core.partitions import PartitionAsk, PartitionProfile, SliceProfiles
from hami_web.core.quantities import QuantityError, parse_whole_quantity

MAX_CORES = 100
FULL_CARD_PERCENT = 100
GROUP_WEIGHT = 10  # HAMi's weight of Ascend's network groups, the grouping most grouped containers have


class RequestError(ValueError):
    """The pod's resources cannot be read; the message names the container and resource."""


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """One container's ask of one device family. ``memory_mib`` > 0 wins over ``memory_percent``."""

    name: str
    init: bool
    count: int
    memory_mib: int = 0
    memory_percent: int = FULL_CARD_PERCENT
    cores: int = 0
    family: str = NVIDIA
    grouped: bool = False  # the family keeps multi-device containers in network groups (a node-score term)
    one_card: bool = False  # the pod's later containers may only use its earlier ones' card (`Family.one_card_per_pod`)
    # The most a grouped container adds to the node score (`hami_web.core.groups.Grouping.weight`).
    group_weight: int = GROUP_WEIGHT
    one_size: bool = False  # a device holds slices of one size only (the family's `SliceSizes`)
    # The group term may lower the total under spread (`hami_web.core.groups.Grouping.spread_gain`).
    spread_gain: bool = True
    # The part of the group term that depends on the node's busy devices (`hami_web.core.groups.Grouping.busy_term`).
    busy_term: BusyTerm | None = None
    # How each device books the cores asked (`Family.core_booking`: AMD's compute units, AWS Neuron's core bitmask);
    # None: ``cores`` as they are.
    core_booking: CoreBooking | None = None
    grant_type: Callable[[Device], str] | None = None  # a grant's type field (`DeviceTypes.grant_type`); None: the cw
    # A partitioned family's ask (`hami_web.core.partitions`): the fit maps it to a node's profile (``profile``), whose
    # memory and cores it then books, with the profile's slices as the device's shares taken.
    partition: PartitionAsk | None = None
    profile: PartitionProfile | None = None
    sharing: str = ""  # the pod's class under its family's sharing rule (`SharingRule.ask`), "" without one
    sharing_rule: SharingRule | None = None

    @property
    def shares(self) -> int:
        """How many of a device's shares (``count``) one grant of this container takes: its profile's slices, else 1."""
        return self.profile.slices if self.profile is not None else 1

    @property
    def node_dependent_term(self) -> bool:
        """Whether this container's group term may differ from node to node: several devices of a grouped family, or
        one scored by a sharing rule (Metax sGPU's online pods, by the card's pods) or by the node's busy devices
        (Kunlunxin's bubbles); one device otherwise earns the same term on every node."""
        return self.grouped and (self.count > 1 or self.sharing_rule is not None or self.busy_term is not None)

    def with_profile(self, profile: PartitionProfile) -> ContainerRequest:
        """This ask as it books ``profile``: the profile's memory and cores."""
        return replace(self, memory_mib=profile.memory_mib, memory_percent=0, cores=profile.cores, profile=profile)

    def booked_memory_mib(self, total_memory_mib: int) -> int:
        """Memory this container books on a device of ``total_memory_mib``."""
        if self.memory_mib > 0:
            return self.memory_mib
        return total_memory_mib * self.memory_percent // 100


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What a pod asks of each device family (several families, each fitted in turn:
    docs/device-families.md#device-families).

    ``containers`` holds one block per family the pod asks for, families in common-word order; each block has
    one entry per container of the pod in annotation order (init containers first), ``count`` 0 where the
    container does not use that family. A pod of one family is one block: the shape the fit has always had.
    """

    containers: tuple[ContainerRequest, ...]
    # The asked families' own node-score terms, each with how many of its devices the pod asks (`NodeScore`).
    node_terms: tuple[tuple[NodeScore, int], ...] = ()
    # Derived once: the fit reads it on every node it tries.
    _blocks: tuple[tuple[str, tuple[ContainerRequest, ...]], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        blocks: list[tuple[str, tuple[ContainerRequest, ...]]] = []
        start = 0
        for position in range(1, len(self.containers) + 1):
            if position == len(self.containers) or self.containers[position].family != self.containers[start].family:
                blocks.append((self.containers[start].family, self.containers[start:position]))
                start = position
        object.__setattr__(self, "_blocks", tuple(blocks))

    @property
    def asks_for_gpu(self) -> bool:
        """True when at least one container wants a device of any family."""
        return any(c.count > 0 for c in self.containers)

    @property
    def largest_count(self) -> int:
        """The most devices one container asks (0 when none asks any): a node with fewer usable cannot fit it."""
        return max((c.count for c in self.containers), default=0)

    def blocks(self) -> tuple[tuple[str, tuple[ContainerRequest, ...]], ...]:
        """``(family, one ask per container)`` for each family the request covers, in order."""
        return self._blocks

    @property
    def group_scored(self) -> bool:
        """Whether a placement's group term may differ from node to node, so that nodes are ranked by score plus term
        (`group_score_reach` may be 0: Metax sGPU's online pods earn at most 0)."""
        return any(c.node_dependent_term for c in self.containers)

    @property
    def group_score_reach(self) -> int:
        """The most the containers whose group term differs from node to node (`ContainerRequest.node_dependent_term`)
        can add to the node score (docs/device-families.md#ascend-npus); the others earn the same term on every node, so
        they bound nothing."""
        return sum(c.group_weight for c in self.containers if c.node_dependent_term)

    @property
    def spread_gain_reach(self) -> int:
        """The most the group terms can lower a node's total under spread: `group_score_reach` of the containers
        whose grouping can (`ContainerRequest.spread_gain`)."""
        return sum(c.group_weight for c in self.containers if c.count > 1 and c.grouped and c.spread_gain)

    @property
    def families(self) -> tuple[str, ...]:
        """The families asked for (a container count > 0), in fit order."""
        return tuple(dict.fromkeys(c.family for c in self.containers if c.count > 0))

    @property
    def container_names(self) -> tuple[str, ...]:
        """The pod's container names, init containers first."""
        blocks = self.blocks()
        return tuple(c.name for c in blocks[0][1]) if blocks else ()

    @property
    def init_count(self) -> int:
        """How many leading entries of each block are init containers."""
        blocks = self.blocks()
        return sum(1 for c in blocks[0][1] if c.init) if blocks else 0


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    """The enabled families, with what fills in what a container leaves out.

    ``catalog`` is HAMi's default families unless given; its NVIDIA family takes its names and defaults from
    ``resources``, ``default_mem_mib`` and ``default_cores`` (``--resource-*``, ``--default-mem``, ``--default-cores``).
    A server builds this from its own catalog with `RequestDefaults.of`.
    """

    resources: ResourceNames = field(default_factory=ResourceNames)
    default_mem_mib: int = 0
    default_cores: int = 0
    catalog: DeviceCatalog = field(default=DEFAULT_CATALOG)

    @classmethod
    def of(cls, catalog: DeviceCatalog) -> RequestDefaults:
        """The defaults of a server's catalog (NVIDIA's settings read back from its family)."""
        nvidia = catalog.get(NVIDIA)
        if nvidia is None:
            return cls(catalog=catalog)
        return cls(resources=nvidia.resources, default_mem_mib=nvidia.default_memory_mib,
                   default_cores=nvidia.default_cores, catalog=catalog)

    def __post_init__(self) -> None:
        nvidia = self.catalog.get(NVIDIA)
        if nvidia is not None and (nvidia.resources, nvidia.default_memory_mib, nvidia.default_cores) != (
                self.resources, self.default_mem_mib, self.default_cores):
            family = replace(nvidia, resources=self.resources, default_memory_mib=self.default_mem_mib,
                             default_cores=self.default_cores)
            object.__setattr__(self, "catalog", with_nvidia(self.catalog, family))

    @property
    def nvidia(self) -> Family:
        """The NVIDIA family (the one `container_request` reads)."""
        return self.catalog[NVIDIA]


def quantity_maximum(family: Family, resource: str) -> int:
    """The largest value accepted for ``family``'s ``resource``: a count of devices or MiB a device could hold, else
    `MAX_QUANTITY`. A partitioned family's count is a profile's slices, not devices (Enflame DRS's ``drs-gcu``), read up
    to `MAX_QUANTITY` as HAMi v2.10 reads it (an int32): a count no profile has is the filter's ``ModeNotFit``."""
    names = family.resources
    slices = family.partitioning is not None and family.partitioning.asks_profiles
    count_maximum = MAX_QUANTITY if slices else MAX_GPUS_PER_CONTAINER
    return {names.count: count_maximum,
            names.memory: MAX_DEVICE_MEMORY_MIB // max(family.memory_factor, 1)}.get(resource, MAX_QUANTITY)


def _resource_value(resources: Mapping[str, Any], name: str) -> Any:
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise RequestError(f"resources.{section} is not a map")
        if name in values:
            return values[name]
    return None


def asked_gpu_count(container: Mapping[str, Any], *, count_resource: str) -> int:
    """How many devices one container asks for (limits over requests), bounded; `RequestError` when unreadable."""
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
    """One container's NVIDIA ask (`family_request` for the NVIDIA family of ``defaults``)."""
    return family_request(container, init=init, family=defaults.nvidia)


def _read_resource(resources: Mapping[str, Any], name: str, family: Family, resource: str) -> int | None:
    """One resource of a container (limits over requests), None when absent; memory through the family's
    ``read_memory`` when it has one; `RequestError` naming the container and resource when unreadable."""
    if not resource:
        return None
    try:
        raw = _resource_value(resources, resource)
    except RequestError as error:
        raise RequestError(f"container {name}: {error}") from None
    if raw is None:
        return None
    names = family.resources
    try:
        if resource == names.memory and family.read_memory is not None:
            return family.read_memory(raw, name, resource)
        return parse_whole_quantity(raw, container=name, resource=resource,
                                    maximum=quantity_maximum(family, resource))
    except QuantityError as error:
        raise RequestError(str(error)) from None


def family_request(container: Mapping[str, Any], *, init: bool, family: Family) -> ContainerRequest:
    """Read one container's ask of ``family``: limits over requests per resource, then the family's defaults,
    memory in MiB (× the family's memory factor) and the cores clamp."""
    name = str(container.get("name") or "<unnamed>")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"container {name}: resources is not a map")
    names = family.resources
    factor = family.memory_factor
    read = functools.partial(_read_resource, resources, name, family)
    if family.partitioning is not None and family.partitioning.asks_profiles:
        return _partition_request(name, init, family, read)
    count = read(names.count) or 0
    if family.core_booking is not None:
        return _booked_cores_request(family, family.core_booking, name, init, count, read)
    if count == 0:
        return ContainerRequest(name=name, init=init, count=0, family=family.cw)
    grouped = family.grouping is not None and family.grouping.scored
    weight = family.grouping.weight if grouped and family.grouping is not None else GROUP_WEIGHT
    gain = family.grouping.spread_gain if grouped and family.grouping is not None else True
    busy = family.grouping.busy_term if grouped and family.grouping is not None else None
    if family.count_only:
        return ContainerRequest(name=name, init=init, count=count, memory_percent=0, family=family.cw,
                                grouped=grouped, one_card=family.one_card_per_pod, group_weight=weight,
                                spread_gain=gain, busy_term=busy)
    memory_mib = (read(names.memory) or 0) * (factor if family.read_memory is None else 1)
    if family.slices is not None:
        memory_mib, slice_cores = family.slices.ask(memory_mib)
        return ContainerRequest(name=name, init=init, count=count, memory_mib=memory_mib, cores=slice_cores,
                                family=family.cw, grouped=grouped, one_size=True, group_weight=weight,
                                spread_gain=gain, busy_term=busy)
    memory_percent = read(names.memory_percentage) or 0
    if memory_percent > FULL_CARD_PERCENT:
        raise RequestError(f"container {name}: {names.memory_percentage} {memory_percent} is over 100")
    if memory_mib == 0 and memory_percent == 0:
        if family.default_memory_mib:
            memory_mib = family.default_memory_mib
        else:
            memory_percent = FULL_CARD_PERCENT
    cores = read(names.cores)
    cores = family.default_cores if cores is None else cores
    if family.divides_ask:  # HAMi's Mthreads: the ask is for all the container's devices together
        memory_mib, cores = memory_mib // count, cores // count
    return ContainerRequest(name=name, init=init, count=count, memory_mib=memory_mib,
                            memory_percent=memory_percent or FULL_CARD_PERCENT, cores=min(cores, MAX_CORES),
                            family=family.cw, grouped=grouped, one_card=family.one_card_per_pod,
                            group_weight=weight, spread_gain=gain, busy_term=busy, grant_type=family.types.grant_type)


def _booked_cores_request(family: Family, booking: CoreBooking, name: str, init: bool, count: int,
                          read: Callable[[str], int | None]) -> ContainerRequest:
    """A container's ask of a family whose devices book cores their own way (`Family.core_booking`): the booking
    turns the count and cores given into devices and cores per device; memory in MiB × the family's factor, none or
    0 the whole device."""
    names = family.resources
    try:
        count, cores = booking.ask(count, read(names.cores) if names.cores else None, names)
    except ValueError as error:
        raise RequestError(f"container {name}: {error}") from None
    if count == 0:
        return ContainerRequest(name=name, init=init, count=0, family=family.cw)
    memory_mib = (read(names.memory) or 0) * family.memory_factor if names.memory else 0
    return ContainerRequest(name=name, init=init, count=count, memory_mib=memory_mib, cores=cores, family=family.cw,
                            core_booking=booking, grant_type=family.types.grant_type)


def _partition_request(name: str, init: bool, family: Family, read: Callable[[str], int | None]) -> ContainerRequest:
    """A partitioned family's ask (HAMi's Enflame DRS ``GenerateResourceRequests``): one device, asked by a slice count
    above 0, else by memory and cores (either present, even 0); no such resource: no ask."""
    assert isinstance(family.partitioning, SliceProfiles)
    names = family.resources
    slices = read(names.count)
    memory, cores = read(names.memory), read(names.cores)
    if not slices and memory is None and cores is None:
        return ContainerRequest(name=name, init=init, count=0, family=family.cw)
    ask = PartitionAsk(family.partitioning, slices=slices or 0, memory=0 if slices else memory or 0,
                       cores=0 if slices else cores or 0)
    return ContainerRequest(name=name, init=init, count=1, memory_percent=0, family=family.cw, partition=ask)


def _shared(block: list[ContainerRequest], rule: SharingRule, pod: Mapping[str, Any]) -> list[ContainerRequest]:
    """A family's asks with the pod's class under the family's sharing rule; no cores booked where the class books
    none (Metax sGPU's online pods)."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    ask = rule.ask(annotations if isinstance(annotations, Mapping) else {})
    books = rule.books_cores(ask)
    shared = [replace(request, sharing=ask, sharing_rule=rule, cores=request.cores if books else 0) if request.count
              else request for request in block]
    return [replace(request, grouped=True, group_weight=reach) if (reach := rule.reach(ask, request.cores,
                                                                                        request.count)) is not None
            else request for request in shared]


def family_asks_devices(container: Mapping[str, Any], family: Family) -> int:
    """How many devices one container asks of ``family`` (a partitioned family's ask is one device; a family booking
    cores its own way asks as many as its cores make: AWS Neuron's core asks); `RequestError` when unreadable."""
    if (family.partitioning is None or not family.partitioning.asks_profiles) and family.core_booking is None:
        return asked_gpu_count(container, count_resource=family.resources.count)
    return family_request(container, init=False, family=family).count


def pod_request(pod: Mapping[str, Any], defaults: RequestDefaults) -> PodRequest:
    """Every container's ask of every enabled family, init containers first, in spec order; `RequestError`
    when unreadable. Only the families some container asks for get a block."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise RequestError("pod has no spec")
    listed_containers: list[tuple[Mapping[str, Any], bool]] = []
    for key, init in (("initContainers", True), ("containers", False)):
        listed = spec.get(key) or []
        if not isinstance(listed, list):
            raise RequestError(f"spec.{key} is not a list")
        for position, container in enumerate(listed):
            if not isinstance(container, Mapping):
                raise RequestError(f"spec.{key}[{position}] is not an object")
            listed_containers.append((container, init))
    asks: list[ContainerRequest] = []
    terms: list[tuple[NodeScore, int]] = []
    for family in defaults.catalog:
        block = [family_request(container, init=init, family=family) for container, init in listed_containers]
        if family.sharing is not None and any(ask.count for ask in block):
            block = _shared(block, family.sharing, pod)
        if any(ask.count for ask in block):
            asks.extend(block)
            if family.node_score is not None:
                terms.append((family.node_score, sum(ask.count for ask in block)))  # init containers too, as HAMi
    return PodRequest(containers=tuple(asks), node_terms=tuple(terms))
