"""Enflame DRS: GCUs hard-partitioned by profiles (docs/device-families.md#device-families; HAMi v2.10
``pkg/device/enflame/device.go``).

The DRS device plugin publishes ``enflame.com/gcu-drs-capacity``: the GCUs (index, minor, capacity in slices) and
the profiles every GCU can be carved into, named ``<slices>g.<memory>gb`` (``1g.12gb`` … ``6g.72gb``) with the id
the plugin knows them by. A container takes one partition of one GCU: it names the slice count
(``enflame.com/drs-gcu``: exactly a profile of that size) or memory and cores (``gcu-memory``, ``gcu-core``: the
smallest profile holding both), and books the profile's slices, memory and cores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_web.core.devices import AnnotationError, Device, json_kind
from hami_web.core.limits import MAX_DEVICE_INDEX, MAX_DEVICE_MEMORY_MIB, MAX_DEVICE_SHARES, quote, uuid_problem

CW = "Enflame"
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
class DrsProfile:
    """One way to carve a GCU: its name, the device plugin's id for it, slices, memory (GB) and the cores it
    stands for (its share of the largest profile, rounded up: HAMi ``collectDRSProfiles``)."""

    name: str
    profile_id: str
    slices: int
    memory_gb: int
    cores: int

    @property
    def memory_mib(self) -> int:
        """What the profile books of a GCU's memory."""
        return self.memory_gb * 1024


@dataclass(frozen=True, slots=True)
class DrsGcu:
    """One GCU of the capacity annotation: the device (capacity = slices) and its minor number."""

    device: Device
    minor: str


@dataclass(frozen=True, slots=True)
class DrsNode:
    """What ``enflame.com/gcu-drs-capacity`` says of a node: its GCUs and the profiles, smallest first."""

    gcus: tuple[DrsGcu, ...]
    profiles: tuple[DrsProfile, ...]


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
    largest_gb = max(profile.memory_gb for profile in profiles)
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
        gcus.append(DrsGcu(device=Device(uuid=uuid, index=index, count=capacity, memory_mib=largest_gb * 1024,
                                         cores=CORES_PER_GCU, type=CW, family=CW), minor=minor))
    return DrsNode(gcus=tuple(gcus), profiles=profiles)


def _refuse(literal: str) -> object:
    raise ValueError(f"{literal} is not a JSON value")


def _profiles(value: object) -> tuple[DrsProfile, ...]:
    if not isinstance(value, dict):
        return ()
    sized = [(name, profile_id, *parse_profile_name(name)) for name, profile_id in value.items()
             if isinstance(profile_id, str)]
    max_slices = max((slices for _, _, slices, _ in sized), default=0)
    usable = [(name, profile_id, slices, memory) for name, profile_id, slices, memory in sized
              if slices > 0 and 0 < memory <= MAX_DEVICE_MEMORY_MIB // 1024]
    if max_slices <= 0:
        return ()
    profiles = (DrsProfile(name=name, profile_id=profile_id, slices=slices, memory_gb=memory,
                           cores=math.ceil(slices * CORES_PER_GCU / max_slices))
                for name, profile_id, slices, memory in usable)
    return tuple(sorted(profiles, key=lambda p: (p.slices, p.memory_gb, p.name)))


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


@dataclass(frozen=True, slots=True)
class DrsAsk:
    """What a container asks: ``slices`` (the drs-gcu count, exactly a profile's size) or memory and cores (0 =
    not given; memory in GB, or in MiB when more than twice the largest profile's GB, as HAMi guesses)."""

    slices: int = 0
    memory: int = 0
    cores: int = 0


def select_profile(profiles: Sequence[DrsProfile], ask: DrsAsk) -> DrsProfile | None:
    """The profile a container gets (HAMi ``selectProfileByRequest``): for a slice count the first profile of that
    many slices; for memory/cores the smallest (by slices, then memory) holding both; None when none does."""
    if not profiles:
        return None
    if ask.slices:
        return next((p for p in profiles if p.slices == ask.slices), None)
    memory_gb = _memory_gb(ask.memory, profiles[-1].memory_gb)
    return next((p for p in profiles
                 if (memory_gb <= 0 or p.memory_gb >= memory_gb) and (ask.cores <= 0 or p.cores >= ask.cores)),
                None)


def _memory_gb(memory: int, largest_gb: int) -> int:
    """HAMi ``normalizeMemoryRequestToGB``: a value over twice the largest profile's GB is MiB, rounded up to GB."""
    if memory <= 0:
        return 0
    if largest_gb > 0 and memory > 2 * largest_gb:
        return math.ceil(memory / 1024)
    return memory


def drs_admission_refusal(*, slices: int | None, memory: int | None, cores: int | None,
                          names: Mapping[str, str]) -> str:
    """Why the webhook refuses a container's DRS ask (HAMi ``MutateAdmission``), "" when it does not: a slice count
    must be above 0; without one, memory above 0 and cores in (0, 100]. ``names`` maps count/memory/cores to the
    resource names in the message."""
    if slices is not None:
        return f"{names['count']} must be greater than 0" if slices <= 0 else ""
    if memory is not None and memory <= 0:
        return f"{names['memory']} must be greater than 0"
    if cores is not None and not 0 < cores <= 100:
        return f"{names['cores']} must be in range (0,100]"
    return ""


@dataclass(frozen=True, slots=True)
class DrsGrant:
    """One container's partition: the container's name, the GCU's index and minor, and the profile."""

    container: str
    index: int
    minor: str
    profile: DrsProfile


def drs_annotations(grants: Sequence[DrsGrant], *, assigned_time_ns: int) -> dict[str, str]:
    """The pod annotations the DRS device plugin reads (HAMi ``PatchAnnotations``): ``gcu-assigned`` false, the
    time, the first partition's GCU index (as ``gcu-assigned-index`` and ``-id``), minor and slice count, and
    ``assigned-containers``: per container its slices and profile, not yet allocated."""
    if not grants:
        return {}
    first = grants[0]
    containers = {grant.container: {"allocated": False, "request": grant.profile.slices,
                                    "profileID": grant.profile.profile_id, "profileName": grant.profile.name}
                  for grant in grants}
    return {ASSIGNED_KEY: "false", ASSIGNED_TIME_KEY: str(assigned_time_ns),
            ASSIGNED_INDEX_KEY: str(first.index), ASSIGNED_ID_KEY: str(first.index),
            ASSIGNED_MINOR_KEY: first.minor, REQUEST_SIZE_KEY: str(first.profile.slices),
            ASSIGNED_CONTAINERS_KEY: json.dumps(containers, separators=(",", ":"))}
