"""Cambricon MLUs (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/cambricon/device.go``).

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
from typing import Any

from hami_web.core.families import config
from hami_web.core.families.capacity import CapacityInventory
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec
from hami_web.core.nodelocks import LockRule

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


def mlu_inventory(*, cores_resource: str, memory_resource: str) -> CapacityInventory:
    """MLU cards from ``status.capacity`` (V vcores, M vmemory units) and the node's ``Model`` label: ⌈V/100⌉ cards;
    card i: id ``<node>-cambricon-mlu-<i>``, index i, 100 shares, M × 256 × 100 ÷ V MiB (integer division, so an odd V
    gives every card the same share), 100 cores, type the ``Model`` label when it names an MLU (``MLU370-X4``), else
    ``MLU``. V absent or 0: no MLU."""
    return CapacityInventory(family=CW, resource=cores_resource, id_infix=ID_INFIX, device_type=CW,
                             memory_resource=memory_resource, memory_factor=MEMORY_FACTOR,
                             units_per_device=CORES_PER_CARD, count=CORES_PER_CARD, cores=CORES_PER_CARD,
                             type_label=MODEL_LABEL)


def mlu_type(node: Mapping[str, Any]) -> str:
    """The node's ``Model`` label when it names an MLU (case-insensitively), else ``MLU`` (model unknown)."""
    return _MODEL.model(node)


def card_index(uuid: str) -> int | None:
    """The index an MLU id names (``node-a-cambricon-mlu-7`` → 7), None for an id of another form."""
    return _MODEL.device_index(uuid)


_MODEL = mlu_inventory(cores_resource=DEFAULT_RESOURCES.cores, memory_resource=DEFAULT_RESOURCES.memory)


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
    inventory = mlu_inventory(cores_resource=resources.cores, memory_resource=resources.memory)
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
        inventory=inventory,
        types=inventory.types,
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
