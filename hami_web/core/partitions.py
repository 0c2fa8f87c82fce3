"""Devices carved into partitions of fixed profiles (docs/device-families.md#device-families, partitioned devices;
docs/mig.md#dynamic-mig).

A partitioned device is not shared by arbitrary memory and cores: its device plugin creates one partition of a named
profile (``3g.36gb``: 3 of the device's slices, 36 GB, its share of the compute) per grant, so the scheduler maps what
a container asks to a profile and books the profile, not the ask. The family's spec holds how it partitions, one
`Partitioning` object, and the fit, the node's view, the bind's re-check and the read-back after a restart ask that
object, never the family's name or a device mode. Two kinds implement it:

- profiles chosen by the ask before any device is judged, every device offering the same (Enflame's DRS GCUs:
  `SliceProfiles` below): the container books the profile's memory and cores and as many of the device's shares as
  the profile has slices;
- profiles placed on a device's memory slices, chosen per device with a free placement, a device giving one container
  several (NVIDIA's dynamic MIG: `hami_web.core.migpartitioning.MIG`): each grant carries its placed partition
  (`PlacedPartition`: profile and `SliceRange`), which the bind writes as a reservation and a restart reads back
  (`restore`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hami_web.core.devices import Device
    from hami_web.core.grants import PodGrants
    from hami_web.core.requests import ContainerRequest
    from hami_web.core.usage import DeviceUsage



@dataclass(frozen=True, slots=True)
class SliceRange:
    """Where a placed partition sits on its device: the slices ``[start, start + size)`` (MIG: a GPU's memory
    slices)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        """The first slice after the range."""
        return self.start + self.size

    def overlaps(self, other: SliceRange) -> bool:
        """Whether the two ranges share a slice."""
        return self.start < other.end and other.start < self.end

    def describe(self) -> str:
        """``start+size``, e.g. ``4+2`` (slices 4 and 5)."""
        return f"{self.start}+{self.size}"


@dataclass(frozen=True, slots=True)
class PlacedPartition:
    """One partition booked on a device carved per grant (`Partitioning.place`): its profile and slices, the pod holding
    it (``namespace/name``, empty for a placement not yet written) and, once the device plugin has created it, its
    runtime identity (``uuid`` and ``ids``; MIG: the migUUID and the GPU and compute instance ids)."""

    profile: str
    placement: SliceRange
    pod: str = ""
    uuid: str = ""
    ids: tuple[int, int] | None = None


# The partitions of a pod's reservations that no device entry took, per device UUID (they occupy their slices too).
Unclaimed = dict[str, tuple[PlacedPartition, ...]]


def partitioned(devices: Sequence[Device], groups: Mapping[str, tuple[int, int]],
                partitioning: Mapping[str, Partitioning]) -> tuple[frozenset[int], tuple[tuple[int, str], ...]]:
    """What the families' partitionings say of a node's ``devices`` (each family's at its ``groups`` span), asked once
    per inventory rather than in every fit: the positions of the devices carved per grant, and of those never placed
    on with the reason (`Partitioning.refusal`: a pre-2.10 geometry MIG GPU)."""
    carved: set[int] = set()
    refused: list[tuple[int, str]] = []
    for family, partitions in partitioning.items():
        first, end = groups.get(family, (0, 0))
        for position in range(first, end):
            if partitions.carves(devices[position]):
                carved.add(position)
            elif reason := partitions.refusal(devices[position]):
                refused.append((position, reason))
    return frozenset(carved), tuple(sorted(refused))


@dataclass(frozen=True, slots=True)
class PartitionFault:
    """A device the read-back made unallocatable (its partitions cannot be trusted): which one, why, and the pods
    whose annotations caused it."""

    uuid: str
    reason: str
    pods: tuple[str, ...]

    def describe(self) -> str:
        """``GPU <uuid>: <reason> (pods a/b, c/d)``."""
        return f"GPU {self.uuid}: {self.reason} (pods {', '.join(self.pods) or '?'})"


@dataclass(frozen=True, slots=True)
class Restored:
    """A family's grants read back from a pod with what its partitions took (`Partitioning.restore`): the grants, the
    reserved partitions no grant took, and why the partitions' annotation could not be read ("" when it could)."""

    grants: PodGrants
    unclaimed: Unclaimed
    problem: str = ""


class Partitioning(Protocol):
    """How a family carves its devices into partitions of profiles: the seam every partitioned family goes through.

    - ``asks_profiles``: a container asks a profile (a slice count, or memory and cores mapped to one) instead of memory
      and cores of a device (`hami_web.core.requests` reads it as a `PartitionAsk`);
    - ``reservations_key``: the pod annotation the booked partitions' placements are written to ("" = none);
    - ``infeasible``: the reason a device carved per grant fails when no partition for the ask has a free placement.
    """

    @property
    def asks_profiles(self) -> bool: ...

    @property
    def reservations_key(self) -> str: ...

    @property
    def infeasible(self) -> str: ...

    def ask(self, request: ContainerRequest, devices: Sequence[Device]) -> ContainerRequest | None:
        """The container's ask as it books on the family's ``devices`` of one node (unchanged when the profile is
        chosen per device), None when they offer no profile for it."""
        ...

    def carves(self, device: Device) -> bool:
        """Whether ``device`` is carved per grant: its grants are placed partitions (`place`), several for one
        container, and its occupancy is what they occupy."""
        ...

    def refusal(self, device: Device) -> str:
        """Why ``device`` is never placed on ("" when it may be): checked after health, cordon, type and UUID."""
        ...

    def may_repeat(self, devices: Sequence[Device], modes: str | None) -> bool:
        """Whether one container may ask more devices than ``devices`` are, given the pod's mode selection (None: any):
        one device carved per grant may give it several."""
        ...

    def place(self, device: Device, occupied: Sequence[SliceRange],
              memory_mib: int) -> tuple[int, int, PlacedPartition] | None:
        """The partition an ask of ``memory_mib`` gets on a carved ``device`` beside ``occupied``: the memory and
        cores it books and the partition placed; None when none has a free placement (``infeasible``)."""
        ...

    def restore(self, grants: PodGrants, annotations: Mapping[str, str], containers: Sequence[str],
                owner: str) -> Restored:
        """The family's ``grants`` read back from a pod (``owner``, ``namespace/name``; its ``annotations`` and
        container names, init containers first) with what each partition took."""
        ...

    def faults(self, devices: Sequence[Device], usage: Sequence[tuple[tuple[PlacedPartition, ...], tuple[str, ...]]],
               elsewhere: Mapping[str, tuple[PlacedPartition, ...]]) -> tuple[PartitionFault, ...]:
        """The node's devices the read-back makes unallocatable: ``usage[i]`` is ``devices[i]``'s placed partitions and
        the pods holding a grant on it without one, ``elsewhere`` the partitions reserved on devices the node lacks."""
        ...

    def conflict(self, device: Device, theirs: DeviceUsage, ours: DeviceUsage) -> str:
        """Why ``ours`` no longer fits beside ``theirs`` on a carved ``device`` ("" when it does), for the bind's
        re-check (`hami_web.core.verify`)."""
        ...


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
class SliceProfiles:
    """`Partitioning` by profiles of slice counts that every device of a node offers alike (Enflame DRS, HAMi v2.10
    ``pkg/device/enflame/device.go``): the ask picks the profile before any device is judged, and the profile then
    books like any ask (its memory, its cores, its slices as the device's shares).

    - ``memory_mib(memory, profiles)``: the ask's memory value (in the resource's unit) as MiB for these profiles
      (Enflame guesses GB or MiB from the largest profile);
    - ``shares_of(annotations, container)``: the slices a booked partition of a container took, read back from the
      pod's annotations after a restart (None: unknown, one slice is counted, as HAMi v2.10 counts it).
    """

    memory_mib: Callable[[int, Sequence[PartitionProfile]], int] = _as_given
    shares_of: Callable[[Mapping[str, str], str], int | None] | None = None

    @property
    def asks_profiles(self) -> bool:
        """A container asks a profile."""
        return True

    @property
    def reservations_key(self) -> str:
        """No placement is written: a partition's slices are in the device plugin's own annotation."""
        return ""

    @property
    def infeasible(self) -> str:
        """Never given: no device is carved per grant."""
        return ""

    def pick(self, profiles: Sequence[PartitionProfile], ask: PartitionAsk) -> PartitionProfile | None:
        """The profile a container gets: for a slice count the first profile of exactly that many slices; else the
        smallest (profiles come smallest first) holding both the memory and the cores asked (0 = not asked); None
        when none does."""
        if ask.slices > 0:
            return next((profile for profile in profiles if profile.slices == ask.slices), None)
        memory = self.memory_mib(ask.memory, profiles) if ask.memory > 0 else 0
        return next((profile for profile in profiles
                     if profile.memory_mib >= memory and profile.cores >= ask.cores), None)

    def ask(self, request: ContainerRequest, devices: Sequence[Device]) -> ContainerRequest | None:
        """The ask as it books the profile the devices offer for it (they all offer the same: HAMi's
        ``collectDRSProfiles``), None when none fits; a request without a profile ask as it is."""
        if request.partition is None:
            return request
        profile = request.partition.profile(devices[0].partitions) if devices else None
        return request.with_profile(profile) if profile is not None else None

    def carves(self, device: Device) -> bool:
        """No device is carved per grant."""
        return False

    def refusal(self, device: Device) -> str:
        """Every device may be placed on."""
        return ""

    def may_repeat(self, devices: Sequence[Device], modes: str | None) -> bool:
        """One partition a container."""
        return False

    def place(self, device: Device, occupied: Sequence[SliceRange],
              memory_mib: int) -> tuple[int, int, PlacedPartition] | None:
        """Never asked: no device is carved per grant."""
        return None

    def restore(self, grants: PodGrants, annotations: Mapping[str, str], containers: Sequence[str],
                owner: str) -> Restored:
        """The grants with the shares each partition took (``shares_of``); one where it does not say."""
        read = self.shares_of
        if read is None:
            return Restored(grants, {})
        restored = []
        for name, entry in zip(containers, grants, strict=False):
            shares = read(annotations, name) if entry else None
            restored.append(tuple(replace(grant, shares=shares) for grant in entry) if shares else entry)
        return Restored((*restored, *grants[len(restored):]), {})

    def faults(self, devices: Sequence[Device], usage: Sequence[tuple[tuple[PlacedPartition, ...], tuple[str, ...]]],
               elsewhere: Mapping[str, tuple[PlacedPartition, ...]]) -> tuple[PartitionFault, ...]:
        """None: the read-back cannot double-carve a device booked by shares."""
        return ()

    def conflict(self, device: Device, theirs: DeviceUsage, ours: DeviceUsage) -> str:
        """Never asked: no device is carved per grant."""
        return ""


@dataclass(frozen=True, slots=True)
class PartitionAsk:
    """What one container asks of a family that asks profiles (``partitioning``): a slice count (0 = none), else memory
    (in the memory resource's unit, 0 = none) and cores (0 = none)."""

    partitioning: SliceProfiles
    slices: int = 0
    memory: int = 0
    cores: int = 0

    def profile(self, offered: DevicePartitions | None) -> PartitionProfile | None:
        """The profile this ask gets of what a device offers (None: the device offers none that fits)."""
        return self.partitioning.pick(offered.profiles, self) if offered is not None else None
