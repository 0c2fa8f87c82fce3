"""Devices read from a node's capacity, for the families whose device plugin registers no annotation
(docs/device-families.md#device-families): Cambricon MLU, Enflame GCU, Metax GPU and others of HAMi v2.10
(``GetNodeDevices`` reading ``n.Status.Capacity``).

One object, parameterised (`CapacityInventory`): which resource counts the devices and how many units make one
device, the memory of each (fixed, or the memory resource shared out), the device ids ``<node><infix><i>``, the type
(fixed, or a node label that names the model), the shares and cores of each. There is no handshake: the devices change
with the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families.devicetypes import COMMON_WORD, DeviceTypes
from hami_web.core.limits import MAX_DEVICE_INDEX, MAX_DEVICE_MEMORY_MIB, MAX_QUANTITY, quote, uuid_problem
from hami_web.core.quantities import QuantityError, parse_whole_quantity


@dataclass(frozen=True, slots=True)
class CapacityInventory:
    """⌈capacity[``resource``] ÷ ``units_per_device``⌉ devices of family ``family``; device i: id
    ``<node><id_infix><i>``, index i, ``count`` shares, ``cores`` cores, NUMA 0, healthy.

    Memory: ``memory_mib`` each, or, with ``memory_resource``, capacity[memory_resource] × ``memory_factor`` ×
    ``units_per_device`` ÷ capacity[resource] MiB (every device the same share). Type: ``device_type``, or the node's
    ``type_label`` when that label names the family (contains ``device_type``, case-insensitively). Capacity absent or
    0: no device.
    """

    family: str
    resource: str
    id_infix: str
    device_type: str
    memory_mib: int = 0
    memory_resource: str = ""
    memory_factor: int = 1
    units_per_device: int = 1
    count: int = 1
    cores: int = 100
    type_label: str = ""

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The node's devices of the family, None when it has none; `AnnotationError` for an unreadable capacity."""
        status = node.get("status")
        capacity = status.get("capacity") if isinstance(status, Mapping) else None
        if not isinstance(capacity, Mapping):
            return None
        units = _capacity(capacity, self.resource, self.units_per_device * (MAX_DEVICE_INDEX + 1))
        if not units:
            return None
        memory = self.memory_mib
        if self.memory_resource:
            total = _capacity(capacity, self.memory_resource, MAX_DEVICE_MEMORY_MIB)
            memory = total * self.memory_factor * self.units_per_device // units
            if memory > MAX_DEVICE_MEMORY_MIB:
                raise AnnotationError(f"status.capacity: {total} {self.memory_resource} over {units} "
                                      f"{self.resource} is {memory} MiB a device, over the limit of "
                                      f"{MAX_DEVICE_MEMORY_MIB}")
        name = node_name(node)
        first_id = f"{name}{self.id_infix}0"
        if problem := uuid_problem(first_id):
            raise AnnotationError(f"{self.family} id {quote(first_id)} {problem}")
        device_type = self.model(node)
        return tuple(Device(uuid=f"{name}{self.id_infix}{index}", index=index, count=self.count, memory_mib=memory,
                            cores=self.cores, type=device_type, numa=0, healthy=True, family=self.family)
                     for index in range(-(-units // self.units_per_device)))

    def model(self, node: Mapping[str, Any]) -> str:
        """The node's ``type_label`` when it names the family (``MLU370-X4``), else ``device_type``."""
        if not self.type_label:
            return self.device_type
        metadata = node.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        model = labels.get(self.type_label) if isinstance(labels, Mapping) else None
        if isinstance(model, str) and self.device_type.upper() in model.upper():
            return model.strip()
        return self.device_type

    @property
    def types(self) -> DeviceTypes:
        """How the family's types match: the common word, and with a ``type_label`` ``device_type`` is a card whose
        model the node does not name, which a pod's type selection cannot judge (HAMi v2.10 reads no such selection
        for Cambricon, so it lets the card pass)."""
        return DeviceTypes(unknown=self.device_type) if self.type_label else COMMON_WORD

    def device_index(self, uuid: str) -> int | None:
        """The index an id of this inventory names (``node-a-cambricon-mlu-7`` → 7), None for an id of another form."""
        _, infix, index = uuid.rpartition(self.id_infix)
        return int(index) if infix and index.isdigit() and len(index) <= len(str(MAX_DEVICE_INDEX)) else None


@dataclass(frozen=True, slots=True)
class CapacityHealth:
    """A register family's health read from the node's capacity instead of a handshake (HAMi v2.10's AMD
    ``CheckHealth``): its device plugin is gone while capacity[``resource``] is 0, absent or unreadable."""

    resource: str

    def gone(self, node: Mapping[str, Any]) -> bool:
        """Whether ``node`` has none of ``resource`` in its capacity."""
        try:
            return capacity_of(node, self.resource, MAX_QUANTITY) <= 0
        except AnnotationError:
            return True


def capacity_of(node: Mapping[str, Any], resource: str, maximum: int) -> int:
    """``status.capacity[resource]`` of ``node`` as a whole number in 0..``maximum`` (0 when absent);
    `AnnotationError` naming the resource when it is not one."""
    status = node.get("status")
    capacity = status.get("capacity") if isinstance(status, Mapping) else None
    return _capacity(capacity, resource, maximum) if isinstance(capacity, Mapping) else 0


def _capacity(capacity: Mapping[str, Any], resource: str, maximum: int) -> int:
    value = capacity.get(resource)
    if value is None:
        return 0
    try:
        return parse_whole_quantity(value, container="-", resource=resource, maximum=maximum)
    except QuantityError:
        raise AnnotationError(f"status.capacity[{resource}]: {quote(value)} is not a whole number in "
                              f"0..{maximum}") from None


def node_name(node: Mapping[str, Any]) -> str:
    """``metadata.name`` ("" when missing)."""
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def node_annotation(node: Mapping[str, Any], key: str) -> str | None:
    """The node's annotation ``key`` (None when absent), for a family whose device plugin lists its devices in its own
    annotation; `AnnotationError` when it is not a string."""
    metadata = node.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(key) if isinstance(annotations, Mapping) else None
    if text is not None and not isinstance(text, str):
        raise AnnotationError(f"{key} is not a string")
    return text
