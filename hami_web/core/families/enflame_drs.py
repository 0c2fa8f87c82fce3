"""Enflame DRS: GCUs hard-partitioned by profiles (docs/device-families.md#device-families; HAMi v2.10
``pkg/device/enflame/device.go``).

The DRS device plugin publishes ``enflame.com/gcu-drs-capacity``: the GCUs (index, minor, capacity in slices) and
the profiles every GCU can be carved into, named ``<slices>g.<memory>gb`` (``1g.12gb`` … ``6g.72gb``) with the id
the plugin knows them by. A container takes one partition of one GCU: it names the slice count
(``enflame.com/drs-gcu``: exactly a profile of that size) or memory and cores (``gcu-memory``, ``gcu-core``: the
smallest profile holding both), and books the profile's slices, memory and cores: the family's
`hami_web.core.partitions.SliceProfiles`. No node lock (the bind takes hami-web's own), no handshake; the bind writes
only ``hami.io/enflame-vgpu-devices-allocated`` and the plugin's ``enflame.com/gcu-assigned*``,
``gcu-request-size`` and ``assigned-containers``, from which a restart reads back each partition's slices.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_web.core.devices import AnnotationError, Device, json_kind
from hami_web.core.families import config
from hami_web.core.families.capacity import node_annotation, node_name
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec
from hami_web.core.limits import MAX_DEVICE_INDEX, MAX_DEVICE_MEMORY_MIB, MAX_DEVICE_SHARES, quote, uuid_problem
from hami_web.core.partitions import DevicePartitions, PartitionProfile, SliceProfiles

CW = "Enflame"
KIND = "enflame"
CAPACITY_KEY = "enflame.com/gcu-drs-capacity"
ALLOCATED_KEY = "hami.io/enflame-vgpu-devices-allocated"
USE_UUID_KEY = "enflame.com/use-gpuuuid"
NOUSE_UUID_KEY = "enflame.com/nouse-gpuuuid"
REQUEST_SIZE_KEY = "enflame.com/gcu-request-size"
ASSIGNED_ID_KEY = "enflame.com/gcu-assigned-id"
ASSIGNED_KEY = "enflame.com/gcu-assigned"
ASSIGNED_INDEX_KEY = "enflame.com/gcu-assigned-index"
ASSIGNED_MINOR_KEY = "enflame.com/gcu-assigned-minor"
ASSIGNED_TIME_KEY = "enflame.com/gcu-assigned-time"
ASSIGNED_CONTAINERS_KEY = "assigned-containers"
ID_INFIX = "-enflame-drs-"
CORES_PER_GCU = 100


@dataclass(frozen=True, slots=True)
class DrsGcu:
    """One GCU of the capacity annotation: the device (capacity = slices, offering the node's profiles) and its minor
    number."""

    device: Device
    minor: str


@dataclass(frozen=True, slots=True)
class DrsNode:
    """What ``enflame.com/gcu-drs-capacity`` says of a node: its GCUs and the profiles, smallest first."""

    gcus: tuple[DrsGcu, ...]
    profiles: tuple[PartitionProfile, ...]


def parse_profile_name(name: str) -> tuple[int, int]:
    """``<n>g.<N>gb`` → (slices, memory GB), case and spaces ignored; (0, 0) when the slices are unreadable and
    (slices, 0) when the memory is (HAMi ``parseProfile``)."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    slices, memory = parts[0].strip().removesuffix("g"), parts[1].strip().removesuffix("gb")
    if not _is_int(slices):
        return 0, 0
    return int(slices), int(memory) if _is_int(memory) else 0


def _is_int(text: str) -> bool:
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit() and len(digits) <= 9


def decode_drs_capacity(text: str, node_name: str) -> DrsNode:
    """The GCUs and profiles of the annotation (HAMi ``GetNodeDevices``): GCU ``index`` (else its position) names it
    ``<node>-enflame-drs-<index>``; its ``capacity`` (number or numeric string) is its slices; every GCU gets the
    largest profile's memory and 100 cores. `AnnotationError` names what is unreadable: no valid profile, a
    capacity that is not a positive number, no GCU."""
    try:
        document = json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError) as error:
        raise AnnotationError(f"{CAPACITY_KEY}: invalid JSON: {str(error)[:80]}") from None
    if not isinstance(document, dict):
        raise AnnotationError(f"{CAPACITY_KEY} must be an object, got {json_kind(document)}")
    profiles = _profiles(document.get("profiles"))
    if not profiles:
        raise AnnotationError(f"{CAPACITY_KEY}: no valid drs profiles (names like 1g.12gb)")
    largest_mib = max(profile.memory_mib for profile in profiles)
    entries = document.get("devices") or []
    if not isinstance(entries, list) or not entries:
        raise AnnotationError(f"{CAPACITY_KEY}: no drs devices listed")
    gcus = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise AnnotationError(f"{CAPACITY_KEY} device {position}: expected an object, got {json_kind(entry)}")
        index = _string_int(entry.get("index"))
        index = position if index is None or not 0 <= index <= MAX_DEVICE_INDEX else index
        capacity = _capacity(entry.get("capacity"))
        if capacity is None:
            raise AnnotationError(f"{CAPACITY_KEY} device {position}: capacity {quote(entry.get('capacity'))} is not "
                                  f"a number of slices in 1..{MAX_DEVICE_SHARES}")
        minor = entry.get("minor")
        minor = minor.strip() if isinstance(minor, str) and minor.strip() else str(index)
        uuid = f"{node_name}{ID_INFIX}{index}"
        if problem := uuid_problem(uuid):
            raise AnnotationError(f"GCU id {quote(uuid)} {problem}")
        gcus.append(DrsGcu(device=Device(uuid=uuid, index=index, count=capacity, memory_mib=largest_mib,
                                         cores=CORES_PER_GCU, type=CW, family=CW,
                                         partitions=DevicePartitions(profiles, handle=minor)), minor=minor))
    return DrsNode(gcus=tuple(gcus), profiles=profiles)


def _refuse(literal: str) -> object:
    raise ValueError(f"{literal} is not a JSON value")


def _profiles(value: object) -> tuple[PartitionProfile, ...]:
    if not isinstance(value, dict):
        return ()
    sized = [(name, profile_id, *parse_profile_name(name)) for name, profile_id in value.items()
             if isinstance(profile_id, str)]
    max_slices = max((slices for _, _, slices, _ in sized), default=0)
    usable = [(name, profile_id, slices, memory) for name, profile_id, slices, memory in sized
              if slices > 0 and 0 < memory <= MAX_DEVICE_MEMORY_MIB // 1024]
    if max_slices <= 0:
        return ()
    profiles = (PartitionProfile(name=name, profile_id=profile_id, slices=slices, memory_mib=memory * 1024,
                                 cores=math.ceil(slices * CORES_PER_GCU / max_slices))
                for name, profile_id, slices, memory in usable)
    return tuple(sorted(profiles, key=lambda p: (p.slices, p.memory_mib, p.name)))


def _string_int(value: object) -> int | None:
    if isinstance(value, str) and _is_int(value.strip()):
        return int(value.strip())
    return None


def _capacity(value: object) -> int | None:
    """A GCU's slices: a JSON number (truncated, as Go's float conversion) or a numeric string, 1..the share limit."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        number = int(value)
    elif isinstance(value, str) and _is_int(value.strip()):
        number = int(value.strip())
    else:
        return None
    return number if 0 < number <= MAX_DEVICE_SHARES else None


def memory_mib(memory: int, profiles: Sequence[PartitionProfile]) -> int:
    """A memory ask as MiB (HAMi ``normalizeMemoryRequestToGB``): GB, unless it is over twice the largest profile's GB,
    then MiB rounded up to whole GB."""
    largest_gb = max((profile.memory_mib // 1024 for profile in profiles), default=0)
    if largest_gb > 0 and memory > 2 * largest_gb:
        return math.ceil(memory / 1024) * 1024
    return memory * 1024


def shares_of(annotations: Mapping[str, str], container: str) -> int | None:
    """The slices a container's partition took, from ``assigned-containers`` (its ``request``), None when unreadable."""
    try:
        document = json.loads(annotations.get(ASSIGNED_CONTAINERS_KEY) or "null")
    except (ValueError, RecursionError):
        return None
    entry = document.get(container) if isinstance(document, dict) else None
    slices = entry.get("request") if isinstance(entry, dict) else None
    return slices if isinstance(slices, int) and not isinstance(slices, bool) and 0 < slices <= MAX_DEVICE_SHARES \
        else None


PARTITIONING = SliceProfiles(memory_mib=memory_mib, shares_of=shares_of)


def drs_annotations(grants: Sequence[Sequence[Any]], containers: Sequence[str],
                    assigned_time_ns: int) -> dict[str, str]:
    """The pod annotations the DRS device plugin reads (HAMi ``PatchAnnotations``), from the family's grants (one entry
    per container, `hami_web.core.grants.DeviceGrant`) and the pod's container names: ``gcu-assigned`` false, the time,
    the first partition's GCU index (as ``gcu-assigned-index`` and ``-id``), minor and slice count, and
    ``assigned-containers``: per container its slices and profile, not yet allocated."""
    containers_info: dict[str, dict[str, object]] = {}
    annotations: dict[str, str] = {}
    for position, entry in enumerate(grants):
        if not entry:
            continue
        chosen = entry[0]
        profile = chosen.partition
        slices = max(chosen.shares, 1)
        name = containers[position] if position < len(containers) else f"container-{position}"
        containers_info[name] = {"allocated": False, "request": slices,
                                 **({"profileID": profile.profile_id, "profileName": profile.name} if profile else {})}
        index = gcu_index(chosen.uuid)
        if index is not None:
            annotations.setdefault(ASSIGNED_INDEX_KEY, str(index))
            annotations.setdefault(ASSIGNED_ID_KEY, str(index))
        if chosen.handle:
            annotations.setdefault(ASSIGNED_MINOR_KEY, chosen.handle)
        annotations.setdefault(REQUEST_SIZE_KEY, str(slices))
    if not containers_info:
        return {}
    return {ASSIGNED_KEY: "false", ASSIGNED_TIME_KEY: str(assigned_time_ns), **annotations,
            ASSIGNED_CONTAINERS_KEY: json.dumps(containers_info, separators=(",", ":"))}


def gcu_index(uuid: str) -> int | None:
    """The index a DRS GCU's id names (``node-a-enflame-drs-3`` → 3), None for an id of another form."""
    _, infix, index = uuid.rpartition(ID_INFIX)
    return int(index) if infix and index.isdigit() and len(index) <= len(str(MAX_DEVICE_INDEX)) else None


@dataclass(frozen=True, slots=True)
class DrsCapacity:
    """The DRS GCUs of a node, read from its ``enflame.com/gcu-drs-capacity`` annotation (None without it)."""

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The node's GCUs; `AnnotationError` naming what of the annotation is unreadable."""
        text = node_annotation(node, CAPACITY_KEY)
        if text is None:
            return None
        return tuple(gcu.device for gcu in decode_drs_capacity(text, node_name(node)).gcus)


DEFAULT_RESOURCES = ResourceNames(count="enflame.com/drs-gcu", memory="enflame.com/gcu-memory", memory_percentage="",
                                  cores="enflame.com/gcu-core", priority="")
_KEYS = (("count", "resourceNameDRSGCU"), ("memory", "resourceNameGCUMemory"), ("cores", "resourceNameGCUCore"))


def drs_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """Enflame DRS: GCUs read from the capacity annotation, one partition a container, no lock, no handshake; only
    ``hami.io/enflame-vgpu-devices-allocated`` and the device plugin's own annotations are written."""
    return Family(
        cw=CW, kind=KIND, label="Enflame DRS", resources=resources, register_key="", handshake_key="",
        to_allocate_key="", allocated_key=ALLOCATED_KEY, lock=None, use_uuid_key=USE_UUID_KEY,
        nouse_uuid_key=NOUSE_UUID_KEY, inventory=DrsCapacity(), partitioning=PARTITIONING, bind_extras=drs_annotations,
        admission=AdmissionRules(any_resource_routes=True))


def read_drs(value: object, where: str) -> ResourceNames:
    """The ``enflame`` section's DRS names (``resourceNameDRSGCU``, else the legacy ``resourceNameVGCU``, memory and
    cores), each else the chart's, as HAMi ``InitEnflameDevice``."""
    section = config.section_map(value, where)
    count = config.resource(section, "resourceNameDRSGCU", where) or config.resource(section, "resourceNameVGCU", where)
    return replace(DEFAULT_RESOURCES, count=count or DEFAULT_RESOURCES.count,
                   memory=config.resource(section, "resourceNameGCUMemory", where) or DEFAULT_RESOURCES.memory,
                   cores=config.resource(section, "resourceNameGCUCore", where) or DEFAULT_RESOURCES.cores)


def publish_drs(names: ResourceNames) -> object | None:
    """The section back: the DRS names that differ from the chart's (None when none does)."""
    return config.names_document(tuple((key, value) for field, key in _KEYS
                                       if (value := getattr(names, field)) != getattr(DEFAULT_RESOURCES, field)))


SPEC = FamilySpec(name="enflame-drs", label="Enflame DRS", section="enflame", default=DEFAULT_RESOURCES,
                  read=read_drs, publish=publish_drs, build=lambda names: (drs_family(names),))
