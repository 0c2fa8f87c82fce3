"""Metax sGPU inventory, requests, admission and booking annotations (docs/device-families.md#device-families; HAMi
v2.10 ``pkg/device/metax/sdevice.go`` and ``protocol.go``).

Metax's sGPU device plugin does not write HAMi's DeviceInfo register: it publishes its own list
(``metax-tech.com/node-gpu-devices``: uuid, totalDevCount, totalCompute, totalVRam, numa, healthy, qosPolicy,
linkZone, …) and reads its own allocation JSON (``metax-tech.com/gpu-devices-allocated``). Memory is asked in GiB
unless the quantity has a unit. The webhook checks a pod's app class and QoS annotations and writes the default
QoS, ``best-effort``; the QoS and app-class rules of the filter are in `hami_web.core.families.metax_qos`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hami_web.core.devices import (
    NO_NETWORK,
    AnnotationError,
    Device,
    go_field_bool,
    go_field_int,
    go_field_string,
    json_kind,
    load_go_json,
)
from hami_web.core.families import config
from hami_web.core.families.capacity import node_annotation
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.metax_qos import (
    APP_CLASS_KEY,
    OFFLINE,
    ONLINE,
    QOS_POLICY_KEY,
    QosSharing,
)
from hami_web.core.families.spec import FamilySpec
from hami_web.core.limits import (
    MAX_DEVICE_CORES,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_SHARES,
    MAX_NUMA_NODE,
    MAX_QUANTITY,
    quote,
    uuid_problem,
)
from hami_web.core.quantities import QuantityError, parse_quantity

CW = "Metax-SGPU"
INVENTORY_KEY = "metax-tech.com/node-gpu-devices"
ALLOCATED_KEY = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME_KEY = "metax-tech.com/predicate-time"
USE_UUID_KEY = "metax-tech.com/use-gpuuuid"
NOUSE_UUID_KEY = "metax-tech.com/nouse-gpuuuid"

BEST_EFFORT = "best-effort"
FIXED_SHARE = "fixed-share"
BURST_SHARE = "burst-share"
QOS_POLICIES = (BEST_EFFORT, FIXED_SHARE, BURST_SHARE)
APP_CLASSES = (ONLINE, OFFLINE)

# A bare vmemory quantity is GiB (HAMi ``MemoryFactor``).
MEMORY_FACTOR = 1024
_INT32_MAXIMUM = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class SgpuCard:
    """One Metax card as its device plugin lists it: the device, and what the QoS and MetaLink rules read."""

    device: Device
    qos_policy: str = ""
    link_zone: int = 0
    model: str = ""


def decode_sgpu_devices(text: str) -> tuple[SgpuCard, ...]:
    """The cards of ``metax-tech.com/node-gpu-devices`` (HAMi ``getMetaxSDevices`` and
    ``convertMetaxSDeviceToHAMIDevice``): card i of the list gets index i, ``totalDevCount`` shares,
    ``totalVRam`` MiB and ``totalCompute`` cores; ``healthy`` absent means unhealthy, as Go's ``omitempty`` bool
    reads. `AnnotationError` names what is unreadable; an empty list is an error too ("no sdevice found")."""
    document = load_go_json(text)
    if not isinstance(document, list):
        raise AnnotationError(f"{INVENTORY_KEY} must be a list of devices, got {json_kind(document)}")
    if not document:
        raise AnnotationError(f"{INVENTORY_KEY} lists no sdevice")
    cards: list[SgpuCard] = []
    seen: set[str] = set()
    for position, entry in enumerate(document):
        where = f"sdevice {position}"
        if not isinstance(entry, dict):
            raise AnnotationError(f"{where}: expected an object, got {json_kind(entry)}")
        uuid = go_field_string(entry, "uuid", where).strip()
        if problem := uuid_problem(uuid):
            raise AnnotationError(f"{where}: uuid {quote(uuid)} {problem}")
        if uuid in seen:
            raise AnnotationError(f"{where}: uuid {quote(uuid)} is listed twice")
        seen.add(uuid)
        device = Device(
            uuid=uuid, index=position,
            count=go_field_int(entry, "totaldevcount", where, maximum=MAX_DEVICE_SHARES),
            memory_mib=go_field_int(entry, "totalvram", where, maximum=MAX_DEVICE_MEMORY_MIB),
            cores=go_field_int(entry, "totalcompute", where, maximum=MAX_DEVICE_CORES),
            type=CW, numa=go_field_int(entry, "numa", where, maximum=MAX_NUMA_NODE),
            healthy=go_field_bool(entry, "healthy", where), family=CW)
        cards.append(SgpuCard(device=device, qos_policy=go_field_string(entry, "qospolicy", where),
                              link_zone=go_field_int(entry, "linkzone", where, maximum=_INT32_MAXIMUM),
                              model=go_field_string(entry, "model", where)))
    return tuple(cards)


def sgpu_memory_mib(value: object, *, container: str, resource: str) -> int:
    """A vmemory quantity in MiB (HAMi ``GenerateResourceRequests``): with a unit (``4Gi``, ``512Mi``) its bytes ÷
    2²⁰; bare (``4``) GiB. `QuantityError` for what is not a whole, non-negative quantity within 2³¹−1 MiB."""
    where = f"container {container}: {resource}"
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or len(text) > 32:
        raise QuantityError(f"{where}: {quote(value)} is not a quantity")
    try:
        number = parse_quantity(text)
    except (ValueError, TypeError, ArithmeticError):
        raise QuantityError(f"{where}: {quote(value)} is not a quantity") from None
    if not number.is_finite() or number < 0 or number.adjusted() > 30:
        raise QuantityError(f"{where}: {quote(value)} is not a memory size within {MAX_QUANTITY} MiB")
    has_unit = any(c.isalpha() for c in text)
    mib = int(number) // (1 << 20) if has_unit else int(number) * MEMORY_FACTOR
    if mib > MAX_QUANTITY or (not has_unit and number != number.to_integral_value()):
        raise QuantityError(f"{where}: {quote(value)} is not a memory size within {MAX_QUANTITY} MiB")
    return mib


@dataclass(frozen=True, slots=True)
class SgpuAdmission:
    """The webhook's answer for a pod asking sGPUs: annotations to add (the default QoS) or a refusal."""

    annotations: Mapping[str, str]
    refusal: str = ""


def sgpu_admission(pod_annotations: Mapping[str, str], counts: Sequence[int]) -> SgpuAdmission:
    """HAMi ``MutateAdmission`` for a pod whose containers ask ``counts`` sGPUs: an app class must be ``online`` or
    ``offline`` and then each container asks one device; a pod that is not ``online`` gets ``best-effort`` when
    it names no QoS, and must name one of `QOS_POLICIES` otherwise."""
    app_class = pod_annotations.get(APP_CLASS_KEY)
    if app_class is not None:
        if app_class not in APP_CLASSES:
            return SgpuAdmission({}, f"{APP_CLASS_KEY} must be set one of [{ONLINE}, {OFFLINE}]")
        if any(count != 1 for count in counts):
            return SgpuAdmission({}, "app-class pod must request single device")
    if app_class == ONLINE:
        return SgpuAdmission({})
    qos = pod_annotations.get(QOS_POLICY_KEY)
    if qos is None:
        return SgpuAdmission({QOS_POLICY_KEY: BEST_EFFORT})
    if qos not in QOS_POLICIES:
        return SgpuAdmission({}, f"{QOS_POLICY_KEY} must be set one of [{', '.join(QOS_POLICIES)}]")
    return SgpuAdmission({})


def allocated_annotation(grants: Sequence[Sequence[tuple[str, int, int]]]) -> str:
    """``metax-tech.com/gpu-devices-allocated``: per container the list of ``{"uuid", "compute", "vRam"}`` of its
    cards (compute and vRam left out when 0, as Go's ``omitempty``), from ``(uuid, cores, memory_mib)`` grants
    (HAMi ``convertHAMIPodDeviceToMetaxPodDevice``)."""
    return json.dumps([[{"uuid": uuid, **({"compute": cores} if cores else {}),
                         **({"vRam": memory} if memory else {})} for uuid, cores, memory in container]
                       for container in grants], separators=(",", ":"))


TO_ALLOCATE_KEY = "hami.io/metax-sgpu-devices-to-allocate"
HAMI_ALLOCATED_KEY = "hami.io/metax-sgpu-devices-allocated"


@dataclass(frozen=True, slots=True)
class SgpuInventory:
    """The cards of a node's ``metax-tech.com/node-gpu-devices`` (None without it): each with the QoS its device plugin
    reports (``Device.sharing``) and its MetaLink zone as its network (none for zone 0)."""

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The node's sGPU cards; `AnnotationError` naming what of the annotation is unreadable."""
        text = node_annotation(node, INVENTORY_KEY)
        if text is None:
            return None
        return tuple(replace(card.device, sharing=card.qos_policy,
                             network=card.link_zone if card.link_zone > 0 else NO_NETWORK)
                     for card in decode_sgpu_devices(text))


def metax_allocated(grants: Sequence[Sequence[Any]]) -> dict[str, str]:
    """``metax-tech.com/gpu-devices-allocated`` from the family's grants (`hami_web.core.grants.DeviceGrant`)."""
    if not any(grants):
        return {}
    return {ALLOCATED_KEY: allocated_annotation([[(grant.uuid, grant.cores, grant.memory_mib) for grant in container]
                                                 for container in grants])}


def admission_rule(annotations: Mapping[str, str], counts: Sequence[int]) -> tuple[Mapping[str, str], str]:
    """`sgpu_admission` as the webhook's pod rule: the default QoS to write, or HAMi's refusal."""
    answer = sgpu_admission(annotations, counts)
    return answer.annotations, answer.refusal


def read_memory(value: object, container: str, resource: str) -> int:
    """A vmemory quantity in MiB (`sgpu_memory_mib`: GiB unless it has a unit)."""
    return sgpu_memory_mib(value, container=container, resource=resource)


@dataclass(frozen=True, slots=True)
class SgpuConfig:
    """The ``metax`` section's sGPU keys: the three resource names and ``sgpuTopologyAware``."""

    names: ResourceNames = field(default_factory=lambda: ResourceNames(
        count="metax-tech.com/sgpu", memory="metax-tech.com/vmemory", memory_percentage="",
        cores="metax-tech.com/vcore", priority=""))
    topology_aware: bool = False


DEFAULT_CONFIG = SgpuConfig()
_KEYS = (("count", "resourceVCountName"), ("memory", "resourceVMemoryName"), ("cores", "resourceVCoreName"))


def sgpu_family(sgpu: SgpuConfig = DEFAULT_CONFIG) -> Family:
    """Metax sGPU: cards from the device plugin's own list, shared under one QoS a card (`QosSharing`), memory in
    GiB, default 100 cores, HAMi's node lock, no handshake; the bind writes ``hami.io/metax-sgpu-devices-*``,
    ``metax-tech.com/gpu-devices-allocated`` and ``metax-tech.com/predicate-time`` (ns)."""
    return Family(
        cw=CW, kind="metax", label="Metax sGPU", resources=sgpu.names, register_key="", handshake_key="",
        to_allocate_key=TO_ALLOCATE_KEY, allocated_key=HAMI_ALLOCATED_KEY, default_cores=100,
        memory_factor=MEMORY_FACTOR,
        use_uuid_key=USE_UUID_KEY, nouse_uuid_key=NOUSE_UUID_KEY, inventory=SgpuInventory(),
        booking_extras=metax_allocated, predicate_ns_key=PREDICATE_TIME_KEY,
        sharing=QosSharing(topology_default=sgpu.topology_aware),
        read_memory=read_memory, admission=AdmissionRules(pod_rule=admission_rule))


def read_sgpu(value: object, where: str) -> SgpuConfig:
    """The ``metax`` section's sGPU names and ``sgpuTopologyAware``, each else the chart's."""
    section = config.section_map(value, where)
    names = replace(DEFAULT_CONFIG.names, **{field: config.resource(section, key, where)
                                            or getattr(DEFAULT_CONFIG.names, field) for field, key in _KEYS})
    aware = config.boolean(section, "sgpuTopologyAware", where)
    return SgpuConfig(names=names, topology_aware=bool(aware))


def publish_sgpu(sgpu: SgpuConfig) -> object | None:
    """The section back: what differs from the chart's (None when nothing does)."""
    return config.names_document((*((key, value) for field, key in _KEYS
                                     if (value := getattr(sgpu.names, field)) != getattr(DEFAULT_CONFIG.names, field)),
                                  ("sgpuTopologyAware", True if sgpu.topology_aware else None)))


SPEC = FamilySpec(name="metax-sgpu", label="Metax sGPU", section="metax", default=DEFAULT_CONFIG, read=read_sgpu,
                  publish=publish_sgpu, build=lambda sgpu: (sgpu_family(sgpu),))
