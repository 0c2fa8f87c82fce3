"""Devices carved into partitions of fixed profiles (docs/device-families.md#device-families, partitioned devices).

A partitioned device is not shared by arbitrary memory and cores: the device plugin creates one partition of a
named profile (``3g.36gb``: 3 of the device's slices, 36 GB, its share of the compute) per container, so the scheduler
maps what a container asks to a profile and books the profile, not the ask. Enflame's DRS GCUs work so, and NVIDIA's
dynamic MIG is the same idea with placements on top (`hami_web.core.mig`). One capability object says how a family
partitions (`Partitioning`); the devices carry the profiles they offer (`Device.partitions`), the request the ask
(`PartitionAsk`), and the fit books the chosen profile's memory and cores and as many of the device's shares as the
profile has slices (`PartitionProfile.slices`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionProfile:
    """One way to carve a device: its name, the id the device plugin knows it by, the slices (shares of the device) it
    takes, and the memory and cores it books."""

    name: str
    profile_id: str
    slices: int
    memory_mib: int
    cores: int


@dataclass(frozen=True, slots=True)
class DevicePartitions:
    """What a partitioned device offers (every profile, smallest first) and the device plugin's handle for it (the
    GCU's minor number)."""

    profiles: tuple[PartitionProfile, ...]
    handle: str = ""


def _as_given(memory: int, profiles: Sequence[PartitionProfile]) -> int:
    return memory


@dataclass(frozen=True, slots=True)
class Partitioning:
    """How a family maps a container's ask to a profile, and reads back what a booked partition took.

    - ``memory_mib(memory, profiles)``: the ask's memory value (in the resource's unit) as MiB for these profiles
      (Enflame guesses GB or MiB from the largest profile);
    - ``shares_of(annotations, container)``: the slices a booked partition of a container took, read back from the
      pod's annotations after a restart (None: unknown, one slice is counted, as HAMi v2.10 counts it).
    """

    memory_mib: Callable[[int, Sequence[PartitionProfile]], int] = _as_given
    shares_of: Callable[[Mapping[str, str], str], int | None] | None = None

    def pick(self, profiles: Sequence[PartitionProfile], ask: PartitionAsk) -> PartitionProfile | None:
        """The profile a container gets: for a slice count the first profile of exactly that many slices; else the
        smallest (profiles come smallest first) holding both the memory and the cores asked (0 = not asked); None
        when none does."""
        if ask.slices > 0:
            return next((profile for profile in profiles if profile.slices == ask.slices), None)
        memory = self.memory_mib(ask.memory, profiles) if ask.memory > 0 else 0
        return next((profile for profile in profiles
                     if profile.memory_mib >= memory and profile.cores >= ask.cores), None)


@dataclass(frozen=True, slots=True)
class PartitionAsk:
    """What one container asks of a partitioned family (``partitioning``): a slice count (0 = none), else memory (in
    the memory resource's unit, 0 = none) and cores (0 = none)."""

    partitioning: Partitioning
    slices: int = 0
    memory: int = 0
    cores: int = 0

    def profile(self, offered: DevicePartitions | None) -> PartitionProfile | None:
        """The profile this ask gets of what a device offers (None: the device offers none that fits)."""
        return self.partitioning.pick(offered.profiles, self) if offered is not None else None
