"""Cambricon MLUs (README.md#device-families; HAMi v2.10 ``pkg/device/cambricon/device.go``).

The family that differs in kind. Its device plugin registers no annotation: the kubelet's capacity of the vcore and
vmemory resources is the inventory, one card per 100 vcores, each with an equal share of the memory (in units of
256 MiB), ids ``<node>-cambricon-mlu-<i>``. There is no handshake, so a node never loses its MLUs for want of one. The
card type is the node's ``Model`` label when it names an MLU (``MLU370-X4``), else plain ``MLU``: with the model
unknown, a pod's ``cambricon.com/use-mlutype`` / ``nouse-mlutype`` cannot be judged and refuses the card (HAMi v2.10
ignores both annotations). Cores default to 100 (a whole card), memory to the whole card. The device plugin reads
``CAMBRICON_DSMLU_PROFILE`` (index, cores and memory units of the pod's first MLU) and its own node lock,
``cambricon.com/dsmlu.lock``, a bare time stale after two minutes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families import config
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec
from hami_web.core.limits import MAX_DEVICE_INDEX, MAX_DEVICE_MEMORY_MIB, quote, uuid_problem
from hami_web.core.nodelocks import LockRule
from hami_web.core.quantities import QuantityError, parse_whole_quantity

CW = "MLU"
KIND = "cambricon"
MEMORY_FACTOR = 256
CORES_PER_CARD = 100
MODEL_LABEL = "Model"
ID_INFIX = "-cambricon-mlu-"
DSMLU_LOCK = LockRule(key="cambricon.com/dsmlu.lock", names_owner=False, stale_after_seconds=120.0)
DSMLU_PROFILE = "CAMBRICON_DSMLU_PROFILE"
DSMLU_ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
DEFAULT_RESOURCES = ResourceNames(count="cambricon.com/vmlu", memory="cambricon.com/mlu.smlu.vmemory",
                                  memory_percentage="", cores="cambricon.com/mlu.smlu.vcore", priority="")
# More vcores than this would mean more cards than any device index allows.
MAX_VCORES = CORES_PER_CARD * (MAX_DEVICE_INDEX + 1)


@dataclass(frozen=True, slots=True)
class CapacityInventory:
    """MLU cards derived from ``status.capacity`` (V vcores, M vmemory units) and the node's ``Model`` label.

    ⌈V/100⌉ cards; card i: id ``<node>-cambricon-mlu-<i>``, index i, 100 shares, M × 256 × 100 ÷ V MiB (integer
    division, so an odd V gives every card the same share), 100 cores, NUMA 0, healthy. V absent or 0: no MLU.
    """

    cores_resource: str
    memory_resource: str

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The node's MLU cards, None when it has no vcores; `AnnotationError` for an unreadable capacity."""
        status = node.get("status")
        capacity = status.get("capacity") if isinstance(status, Mapping) else None
        if not isinstance(capacity, Mapping):
            return None
        vcores = _capacity(capacity, self.cores_resource, MAX_VCORES)
        if not vcores:
            return None
        memory = _capacity(capacity, self.memory_resource, MAX_DEVICE_MEMORY_MIB)
        card_memory_mib = memory * MEMORY_FACTOR * CORES_PER_CARD // vcores
        if card_memory_mib > MAX_DEVICE_MEMORY_MIB:
            raise AnnotationError(f"status.capacity: {memory} {self.memory_resource} over {vcores} "
                                  f"{self.cores_resource} is {card_memory_mib} MiB a card, over the limit of "
                                  f"{MAX_DEVICE_MEMORY_MIB}")
        name = _node_name(node)
        card_type = mlu_type(node)
        cards = -(-vcores // CORES_PER_CARD)
        first_id = f"{name}{ID_INFIX}0"
        if problem := uuid_problem(first_id):
            raise AnnotationError(f"MLU id {quote(first_id)} {problem}")
        return tuple(Device(uuid=f"{name}{ID_INFIX}{index}", index=index, count=CORES_PER_CARD,
                            memory_mib=card_memory_mib, cores=CORES_PER_CARD, type=card_type, numa=0, healthy=True,
                            family=CW) for index in range(cards))


def _capacity(capacity: Mapping[str, Any], resource: str, maximum: int) -> int:
    value = capacity.get(resource)
    if value is None:
        return 0
    try:
        return parse_whole_quantity(value, container="-", resource=resource, maximum=maximum)
    except QuantityError:
        raise AnnotationError(f"status.capacity[{resource}]: {quote(value)} is not a whole number in "
                              f"0..{maximum}") from None


def _node_name(node: Mapping[str, Any]) -> str:
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def mlu_type(node: Mapping[str, Any]) -> str:
    """The node's ``Model`` label when it names an MLU (case-insensitively), else ``MLU`` (model unknown)."""
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    model = labels.get(MODEL_LABEL) if isinstance(labels, Mapping) else None
    if isinstance(model, str) and CW in model.upper():
        return model.strip()
    return CW


def card_index(uuid: str) -> int | None:
    """The index an MLU id names (``node-a-cambricon-mlu-7`` → 7), None for an id of another form."""
    _, infix, index = uuid.rpartition(ID_INFIX)
    return int(index) if infix and index.isdigit() and len(index) <= len(str(MAX_DEVICE_INDEX)) else None


def dsmlu_annotations(grants: Sequence[Sequence[Any]]) -> dict[str, str]:
    """``CAMBRICON_DSMLU_ASSIGNED=false`` and ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<MiB/256>`` of the first MLU of
    the first container holding one (HAMi v2.10 ``PatchAnnotations``); nothing for a pod without MLUs."""
    first = next((container[0] for container in grants if container), None)
    if first is None:
        return {}
    index = card_index(first.uuid)
    annotations = {DSMLU_ASSIGNED: "false"}
    if index is not None:
        annotations[DSMLU_PROFILE] = f"{index}_{first.cores}_{first.memory_mib // MEMORY_FACTOR}"
    return annotations


def cambricon_family(*, resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The Cambricon MLU family with the given names (HAMi's chart values when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Cambricon MLU", resources=resources,
        register_key="",
        handshake_key="",
        to_allocate_key="hami.io/cambricon-mlu-devices-to-allocate",
        allocated_key="hami.io/cambricon-mlu-devices-allocated",
        lock=DSMLU_LOCK,
        memory_factor=MEMORY_FACTOR,
        default_cores=CORES_PER_CARD,
        use_type_key="cambricon.com/use-mlutype",
        nouse_type_key="cambricon.com/nouse-mlutype",
        use_uuid_key="cambricon.com/use-gpuuuid",
        nouse_uuid_key="cambricon.com/nouse-gpuuuid",
        admission=AdmissionRules(),
        inventory=CapacityInventory(cores_resource=resources.cores, memory_resource=resources.memory),
        unknown_type=CW,
        booking_extras=dsmlu_annotations,
    )


def read_cambricon(value: object, where: str) -> ResourceNames:
    """The ``cambricon`` section: names only (the memory factor is fixed at 256 MiB)."""
    return config.resource_names(config.section_map(value, where), where, DEFAULT_RESOURCES)


def publish_cambricon(resources: ResourceNames) -> object | None:
    """The section back (the names that differ from the chart's; None when none does)."""
    return config.names_document(config.changed_names(resources, DEFAULT_RESOURCES))


SPEC = FamilySpec(name=KIND, label="Cambricon MLU", section="cambricon", default=DEFAULT_RESOURCES,
                  read=read_cambricon, publish=publish_cambricon,
                  build=lambda resources: (cambricon_family(resources=resources),))
