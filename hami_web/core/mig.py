"""Dynamic MIG (docs/mig.md#dynamic-mig): the profiles a GPU offers, where an instance may sit, and which one a
request gets.

Since v2.10 HAMi's NVIDIA device plugin carves MIG instances on demand: a GPU registered in ``mig`` mode lists
``migProfiles`` (name, memory, cores, slice count and the placements NVML allows), the scheduler picks a profile
and a placement, and the device plugin creates exactly that instance. A placement is a range of memory slices
``[start, start + size)`` (the seam's `hami_web.core.partitions.SliceRange`; an instance booked is a
`PlacedPartition`); two instances may not share a slice, so the choice is a small interval-packing
problem. The rules follow HAMi v2.10.0 pkg/device/nvidia/mig_topology.go and device.go (``selectMigCandidate``):
the smallest profile whose memory covers the request and that still has a free placement; ``1g.*`` and ``3g.*``
take the highest free start (they leave the low slices to the larger profiles, as NVIDIA's balanced geometry
does), every other profile the lowest.

Only MIG's value types and pure functions live here (MIG's partitioning itself is `core.migpartitioning`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hami_web.core.limits import MAX_DEVICE_MEMORY_MIB, MAX_TASK_CORES
from hami_web.core.partitions import PlacedPartition, SliceRange

# The device mode of a GPU the device plugin splits into MIG instances (``mode`` of the register annotation).
MIG_MODE = "mig"
# Profiles whose instances prefer the highest free start (HAMi's ``preferHighMigPlacement``).
HIGH_START_PREFIXES = ("1g.", "3g.")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile a GPU offers (``migProfiles`` of the register annotation): ``memory_mib`` and ``cores``
    are what an instance of it books, ``placements`` where NVML allows one."""

    name: str
    memory_mib: int
    cores: int
    slice_count: int
    placements: tuple[SliceRange, ...]

    @property
    def usable(self) -> bool:
        """Whether an instance of this profile can be booked and written: a name (the reservation needs one), memory
        and cores a pod device entry accepts, and a placement of at least one slice."""
        return bool(self.name) and 0 < self.memory_mib <= MAX_DEVICE_MEMORY_MIB \
            and 0 <= self.cores <= MAX_TASK_CORES and any(p.size > 0 for p in self.placements)


@functools.lru_cache(maxsize=256)
def candidate_profiles(profiles: tuple[MigProfile, ...]) -> tuple[MigProfile, ...]:
    """The profiles in the order a request tries them: memory, then slice count, ascending (stable), each name
    once (the first wins, as HAMi's ``findMigProfile`` does), unusable ones left out."""
    seen: set[str] = set()
    kept: list[MigProfile] = []
    for profile in profiles:
        if profile.name in seen or not profile.usable:
            continue
        seen.add(profile.name)
        kept.append(profile)
    return tuple(sorted(kept, key=lambda profile: (profile.memory_mib, profile.slice_count)))


def ordered_placements(profile: MigProfile) -> tuple[SliceRange, ...]:
    """The profile's placements in the order they are tried: highest start first for ``1g.*`` and ``3g.*``, lowest
    first otherwise (stable); empty ones left out."""
    placements = [placement for placement in profile.placements if placement.size > 0]
    high = profile.name.startswith(HIGH_START_PREFIXES)
    return tuple(sorted(placements, key=lambda placement: -placement.start if high else placement.start))


def free_placement(profile: MigProfile, occupied: Iterable[SliceRange]) -> SliceRange | None:
    """The first placement of ``profile`` (in `ordered_placements` order) that overlaps nothing ``occupied``."""
    taken = tuple(occupied)
    for candidate in ordered_placements(profile):
        if not any(candidate.overlaps(existing) for existing in taken):
            return candidate
    return None


def choose_instance(profiles: Sequence[MigProfile], occupied: Iterable[SliceRange],
                    memory_mib: int) -> tuple[MigProfile, SliceRange] | None:
    """The smallest profile of ``profiles`` (already in `candidate_profiles` order) with at least ``memory_mib`` and
    a free placement, with that placement; None when no profile fits (``CardMigTopologyInfeasible``)."""
    taken = tuple(occupied)
    for profile in profiles:
        if profile.memory_mib < memory_mib:
            continue
        placement = free_placement(profile, taken)
        if placement is not None:
            return profile, placement
    return None


def free_placements(profiles: Sequence[MigProfile],
                    occupied: Iterable[SliceRange]) -> tuple[tuple[MigProfile, tuple[SliceRange, ...]], ...]:
    """Per profile, every placement that is free now (what ``kubectl hami inspect`` lists)."""
    taken = tuple(occupied)
    return tuple((profile, tuple(p for p in ordered_placements(profile)
                                 if not any(p.overlaps(existing) for existing in taken)))
                 for profile in profiles)


def instances_that_fit(profile: MigProfile, occupied: Iterable[SliceRange]) -> int:
    """How many more instances of ``profile`` fit beside ``occupied``, placed one after another as the fit places
    them (``kubectl hami capacity``)."""
    taken = list(occupied)
    count = 0
    while (placement := free_placement(profile, taken)) is not None:
        taken.append(placement)
        count += 1
    return count


def legacy_parent(uuid: str) -> str:
    """The GPU a pre-2.10 geometry entry ``GPU-x[1-0]`` sits on (``GPU-x``); "" for an ordinary UUID."""
    if not uuid.endswith("]"):
        return ""
    opening = uuid.rfind("[")
    return uuid[:opening] if opening > 0 else ""


def encode_reservations(grants: Sequence[Sequence[Any]]) -> str:
    """The reservation annotation for one family's grants (`core.grants.DeviceGrant`, one entry per container, init
    containers first): one object per grant that is a MIG instance, "" when none is
    (docs/wire-formats.md#mig-reservations). ``deviceIndex`` is the grant's position in its entry."""
    objects = [{"containerIndex": container_index, "deviceIndex": device_index, "gpuUUID": grant.uuid,
                "profile": grant.placed.profile,
                "placement": {"start": grant.placed.placement.start, "size": grant.placed.placement.size}}
               for container_index, container in enumerate(grants)
               for device_index, grant in enumerate(container) if grant.placed is not None]
    return json.dumps(objects, separators=(",", ":")) if objects else ""


@dataclass(frozen=True, slots=True)
class MigLayout:
    """A dynamic MIG GPU as operators see it: its slices, the instances on them (by start) and, per profile, the
    placements still free (``kubectl hami inspect``, the dashboard)."""

    slices: int
    instances: tuple[PlacedPartition, ...]
    free: tuple[tuple[str, tuple[SliceRange, ...]], ...]


def mig_layout(profiles: tuple[MigProfile, ...], instances: Iterable[PlacedPartition]) -> MigLayout:
    """The layout of a GPU offering ``profiles`` with ``instances`` booked."""
    booked = tuple(sorted(instances, key=lambda instance: (instance.placement.start, instance.placement.size)))
    usable = candidate_profiles(profiles)
    slices = max((placement.end for profile in usable for placement in profile.placements), default=0)
    slices = max([slices, *(instance.placement.end for instance in booked)])
    free = tuple((profile.name, tuple(sorted(placements, key=lambda placement: placement.start)))
                 for profile, placements in free_placements(usable, [i.placement for i in booked]))
    return MigLayout(slices=slices, instances=booked, free=free)
