"""AWS Neuron devices (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/awsneuron/device.go``).

The inventory is the node's capacity (`NeuronCapacity`): ``aws.amazon.com/neuron`` devices ``<node>-AWSNeuron-<i>``,
each with ``aws.amazon.com/neuroncore`` ÷ devices NeuronCores, registered as a core bitmask (two cores: 3) with one
task slot a core and no memory; the node's ``node.kubernetes.io/instance-type`` says how ranges start. A container asks
devices (``aws.amazon.com/neuron``, limits or requests) or NeuronCores (``aws.amazon.com/neuroncore``: 1 or 2 take
one device, a larger even count that many whole devices of two), booked as a bitmask of the cores taken
(`NeuronCores`). Several devices are a contiguous range of idle ones (`ContiguousRanges`): any start on an ``inf*``
instance type, else an aligned start and a count of 1, 4, 8 or 16. The webhook routes a container with either
resource and refuses a count of 0 or less, and a core count that is not 1 or a multiple of 2. No lock (the bind takes
hami-web's own), no handshake; the bind writes only ``hami.io/aws-neuron-devices-allocated`` and what the device
plugin reads (`NeuronIds`): ``AWS_NEURON_IDS`` (device indices, or core indices for a core ask, with
``NEURON_RESOURCE_TYPE``), ``NEURON_ALLOCATED`` ``false``, ``NEURON_ALLOC_TIME`` (nanoseconds) and
``aws.amazon.com/predicate-node``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families import config
from hami_web.core.families.capacity import capacity_of, node_name
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec
from hami_web.core.groups import BusyTerm
from hami_web.core.limits import MAX_DEVICE_CORES, MAX_DEVICE_INDEX, quote, uuid_problem

CW = "AWSNeuron"
KIND = "awsneuron"
ID_INFIX = f"-{CW}-"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# HAMi's maxCoresPerNeuronDevice: a core ask is split into devices of at most two cores.
ADDRESSABLE_CORES = 2
RING_WORDS = ("inf", "Inf")  # instance types whose devices form a ring: a range may start anywhere
ALIGNED_COUNTS = (1, 4, 8, 16)
AWS_NEURON_IDS = "AWS_NEURON_IDS"
NEURON_RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
NEURON_ALLOCATED = "NEURON_ALLOCATED"
DEFAULT_RESOURCES = ResourceNames(count="aws.amazon.com/neuron", memory="", memory_percentage="",
                                  cores="aws.amazon.com/neuroncore", priority="")


@dataclass(frozen=True, slots=True)
class NeuronCapacity:
    """HAMi's ``GetNodeDevices``: capacity[``resource``] devices, each of capacity[``cores``] ÷ devices cores (a
    bitmask, one task slot a core), no memory, the node's instance type kept as the device's ``instance_type``. None
    when the node has no device; `AnnotationError` for an unreadable capacity or more cores a device than a mask can
    hold."""

    resource: str
    cores: str

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The node's Neuron devices, None when it has none."""
        count = capacity_of(node, self.resource, MAX_DEVICE_INDEX + 1)
        if not count:
            return None
        per_device = capacity_of(node, self.cores, (MAX_DEVICE_INDEX + 1) * MAX_DEVICE_CORES) // count
        mask = (1 << per_device) - 1
        if mask > MAX_DEVICE_CORES:
            raise AnnotationError(f"status.capacity: {per_device} {self.cores} a device is more than a core mask "
                                  f"holds here (at most {MAX_DEVICE_CORES.bit_length() - 1})")
        name = node_name(node)
        if problem := uuid_problem(f"{name}{ID_INFIX}0"):
            raise AnnotationError(f"{CW} id {quote(name + ID_INFIX + '0')} {problem}")
        metadata = node.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        instance_type = labels.get(INSTANCE_TYPE) if isinstance(labels, Mapping) else None
        kind = instance_type if isinstance(instance_type, str) else ""
        return tuple(Device(uuid=f"{name}{ID_INFIX}{index}", index=index, count=per_device, memory_mib=0, cores=mask,
                            type=CW, numa=0, healthy=True, family=CW, instance_type=kind) for index in range(count))


@dataclass(frozen=True, slots=True)
class NeuronCores:
    """A device's cores as a bitmask: a whole-device ask (cores 0) takes every core of an idle device, a core ask the
    lowest free cores; grants are disjoint masks, so their sum is the mask of the cores in use."""

    unit = "core bitmasks (a whole device of 2 cores counts 3, its second core alone 2)"

    def ask(self, count: int, cores: int | None, resources: ResourceNames) -> tuple[int, int]:
        """HAMi's ``GenerateResourceRequests`` and ``splitCoreRequest``: a count is whole devices (cores 0); else a
        core count of 1 or 2 is one device, a larger even one that many devices of two cores."""
        if count > 0:
            return count, 0
        if cores is None:
            return 0, 0
        if cores <= 0:
            raise ValueError(f"{resources.cores} must be greater than 0")
        if cores <= ADDRESSABLE_CORES:
            return 1, cores
        if cores % ADDRESSABLE_CORES:
            raise ValueError(f"{resources.cores} must be 1 or a multiple of {ADDRESSABLE_CORES}, got {cores}")
        return cores // ADDRESSABLE_CORES, ADDRESSABLE_CORES

    def book(self, device: Device, used: int, cores: int) -> int | None:
        """The mask a grant of ``cores`` (0: the whole device) takes beside ``used``, None when too few are free."""
        free = device.cores & ~used
        if cores == 0:
            return device.cores if device.cores and free == device.cores else None
        taken = 0
        while free and cores:
            lowest = free & -free
            taken, free, cores = taken | lowest, free ^ lowest, cores - 1
        return taken if not cores else None

    def overbooked(self, device: Device, theirs: int, ours: int) -> bool:
        """A core taken twice, or a core the device does not have."""
        return bool(theirs & ours) or (theirs | ours) & ~device.cores != 0 or theirs + ours > device.cores


@dataclass(frozen=True, slots=True)
class ContiguousRanges:
    """HAMi's ``graphSelect`` for a container of several devices: the first range of consecutive indices all of whose
    devices passed, from any start on an ``inf*`` instance type (the devices form a ring), else from a start that is
    a multiple of the count, which must be 1, 4, 8 or 16. One device: the first in the policy's order."""

    scored: bool = False
    weight: int = 0
    spread_gain: bool = False
    busy_term: BusyTerm | None = None

    def applies(self, devices: Sequence[Device]) -> bool:
        """Always: the range is the device index's."""
        return True

    def pick(self, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
        """The positions of the first free range, [] when there is none."""
        if count == 1:
            return list(ordered[:1])
        by_index = {devices[position].index: position for position in ordered}
        return [by_index[index] for index in first_range(set(by_index), count, ring=_ring(devices))]

    def describe(self, passing: Sequence[Device], count: int) -> str:
        """Why the passing devices hold no range, "" when they do."""
        if count <= 1 or not passing:
            return ""
        free = {device.index for device in passing}
        ring = _ring(passing)
        if first_range(free, count, ring=ring):
            return ""
        if not ring and count not in ALIGNED_COUNTS:
            return f"{count} devices is no range on {passing[0].instance_type or 'this instance type'} (1, 4, 8 or 16)"
        starts = "any start" if ring else f"a start that is a multiple of {count}"
        return f"no {count} consecutive free devices from {starts} (free: {', '.join(map(str, sorted(free)))})"

    def label(self, device: Device) -> str:
        """The instance type."""
        return device.instance_type or "no instance type"

    def group_of(self, device: Device) -> object:
        """The instance type (one group a node)."""
        return device.instance_type

    def score(self, containers: Sequence[Sequence[Device]], policy: str, busy: Sequence[Device]) -> float:
        """No term."""
        return 0.0

    def mutex_conflicts(self, devices: Sequence[Device], tasks: Sequence[int]) -> set[int]:
        """None beyond the used devices."""
        return set()


def _ring(devices: Sequence[Device]) -> bool:
    """Whether the node's instance type (its first device's, as HAMi reads it) is an ``inf*`` one."""
    return bool(devices) and any(word in devices[0].instance_type for word in RING_WORDS)


def first_range(free: set[int], count: int, *, ring: bool) -> list[int]:
    """The indices of the first range of ``count`` free devices (``graphSelect``), [] when none."""
    if not ring and count not in ALIGNED_COUNTS:
        return []
    last = max(free, default=-1)
    for start in range(0, last + 1, 1 if ring else count):
        if all(index in free for index in range(start, start + count)):
            return list(range(start, start + count))
    return []


def device_index(uuid: str) -> int | None:
    """The index a device id names (``node-a-AWSNeuron-3`` → 3), None for an id of another form."""
    _, infix, index = uuid.rpartition(ID_INFIX)
    return int(index) if infix and index.isdigit() and len(index) <= len(str(MAX_DEVICE_INDEX)) else None


@dataclass(frozen=True, slots=True)
class NeuronIds:
    """HAMi's ``PatchAnnotations``: ``AWS_NEURON_IDS``, every container's ids in turn: the device indices of a
    container asking devices, the core indices (cores a device × index + core) of one asking cores, which also sets
    ``NEURON_RESOURCE_TYPE`` to the core resource; ``NEURON_ALLOCATED`` ``false``. Nothing without a device."""

    cores_resource: str

    def __call__(self, grants: Sequence[Sequence[Any]]) -> dict[str, str]:
        ids: list[int] = []
        by_cores = False
        for container in grants:
            for grant in container:
                index = device_index(grant.uuid)
                if index is None:
                    continue
                if not grant.asked_cores:
                    ids.append(index)
                    continue
                by_cores = True
                per_device = grant.device_cores.bit_length()
                ids.extend(per_device * index + core for core in range(per_device) if grant.cores >> core & 1)
        if not ids:
            return {}
        written = {AWS_NEURON_IDS: ",".join(map(str, ids)), NEURON_ALLOCATED: "false"}
        if by_cores:
            written[NEURON_RESOURCE_TYPE] = self.cores_resource
        return written


NEURON_CORES = NeuronCores()
CONTIGUOUS_RANGES = ContiguousRanges()


def neuron_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The AWS Neuron family with the given names (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="AWS Neuron", resources=resources,
        register_key="", handshake_key="",
        to_allocate_key="",
        allocated_key="hami.io/aws-neuron-devices-allocated",
        lock=None,
        use_uuid_key="aws.amazon.com/use-neuron-uuid",
        nouse_uuid_key="aws.amazon.com/nouse-neuron-uuid",
        inventory=NeuronCapacity(resource=resources.count, cores=resources.cores),
        admission=AdmissionRules(count_in_requests=True, positive_count=True, route_without_count=True),
        core_booking=NEURON_CORES,
        grouping=CONTIGUOUS_RANGES,
        booking_extras=NeuronIds(resources.cores),
        predicate_node_key="aws.amazon.com/predicate-node",
        predicate_ns_key="NEURON_ALLOC_TIME",
    )


def read_neuron(value: object, where: str) -> ResourceNames:
    """The ``awsneuron`` section: ``resourceCountName`` and ``resourceCoreName``."""
    return config.resource_names(config.section_map(value, where), where, DEFAULT_RESOURCES)


SPEC = FamilySpec(name=KIND, label="AWS Neuron", section="awsneuron", default=DEFAULT_RESOURCES, read=read_neuron,
                  publish=lambda names: config.names_document(config.changed_names(names, DEFAULT_RESOURCES)),
                  build=lambda names: (neuron_family(names),))
