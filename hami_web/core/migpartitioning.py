"""NVIDIA's dynamic MIG as the partitioning capability (`hami_web.core.partitions.Partitioning`;
docs/mig.md#dynamic-mig): the NVIDIA family's spec holds `MIG`, and the fit, the node's view, the bind's re-check and
the read-back ask it instead of testing a device's mode.

A GPU registered in ``mig`` mode with ``migProfiles`` is carved per grant: an ask gets the smallest profile whose
memory covers it with a free placement (`hami_web.core.mig.choose_instance`, HAMi v2.10.0
pkg/device/nvidia/mig_topology.go and device.go ``selectMigCandidate``), books that profile's memory and cores, and one
container may take several instances of one GPU. A ``mig`` GPU without profiles is a pre-2.10 geometry GPU, never
placed on. The instances are written as ``hami.io/vgpu-mig-allocations`` and read back fail-closed
(`hami_web.core.migreservations`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hami_web.core import names
from hami_web.core.devices import AnnotationError, Device
from hami_web.core.mig import MIG_MODE, candidate_profiles, choose_instance
from hami_web.core.migreservations import attach_reservations, decode_reservations, mig_faults
from hami_web.core.partitions import PartitionFault, PlacedPartition, Restored, SliceRange

if TYPE_CHECKING:
    from hami_web.core.grants import PodGrants
    from hami_web.core.requests import ContainerRequest
    from hami_web.core.usage import DeviceUsage


@dataclass(frozen=True, slots=True)
class MigPartitioning:
    """Dynamic MIG: profiles placed on a GPU's memory slices, chosen per GPU (`hami_web.core.partitions`)."""

    reservations_key: str = names.POD_MIG_RESERVATIONS

    @property
    def asks_profiles(self) -> bool:
        """A container asks memory and cores; the profile is chosen per GPU."""
        return False

    @property
    def infeasible(self) -> str:
        """HAMi's reason for a MIG GPU without an instance for the ask."""
        return names.CARD_MIG_TOPOLOGY_INFEASIBLE

    def ask(self, request: ContainerRequest, devices: Sequence[Device]) -> ContainerRequest | None:
        """The ask as it is: each MIG GPU picks its own profile."""
        return request

    def carves(self, device: Device) -> bool:
        """Mode ``mig`` with profiles: the device plugin carves the GPU on demand."""
        return device.mode == MIG_MODE and bool(device.mig_profiles)

    def refusal(self, device: Device) -> str:
        """A pre-2.10 geometry GPU (mode ``mig``, no profiles) is never placed on (docs/mig.md#dynamic-mig)."""
        return names.CARD_MIG_LEGACY_GEOMETRY if device.mode == MIG_MODE and not device.mig_profiles else ""

    def may_repeat(self, devices: Sequence[Device], modes: str | None) -> bool:
        """Several instances of one GPU for one container: the node has a MIG GPU and the pod's vgpu-mode, if set,
        allows ``mig``."""
        return (modes is None or MIG_MODE in modes) and any(device.mode == MIG_MODE for device in devices)

    def place(self, device: Device, occupied: Sequence[SliceRange],
              memory_mib: int) -> tuple[int, int, PlacedPartition] | None:
        """The smallest usable profile covering ``memory_mib`` with a free placement beside ``occupied``, booking the
        profile's memory and cores; None = ``CardMigTopologyInfeasible``."""
        pick = choose_instance(candidate_profiles(device.mig_profiles), occupied, memory_mib)
        if pick is None:
            return None
        profile, placement = pick
        return profile.memory_mib, profile.cores, PlacedPartition(profile=profile.name, placement=placement)

    def restore(self, grants: PodGrants, annotations: Mapping[str, str], containers: Sequence[str],
                owner: str) -> Restored:
        """The grants with their reservations attached, and the reservations no entry took. An unreadable
        annotation leaves the entries without one, which fails their MIG GPUs closed when the node's view is built."""
        text = annotations.get(self.reservations_key)
        if not text:
            return Restored(grants, {})
        try:
            reservations = decode_reservations(text)
        except AnnotationError as error:
            return Restored(grants, {}, f"{self.reservations_key} does not parse, so its MIG GPUs fail closed: "
                                        f"{error}")
        attached, unclaimed = attach_reservations(grants, reservations, owner)
        return Restored(attached, unclaimed)

    def faults(self, devices: Sequence[Device], usage: Sequence[tuple[tuple[PlacedPartition, ...], tuple[str, ...]]],
               elsewhere: Mapping[str, tuple[PlacedPartition, ...]]) -> tuple[PartitionFault, ...]:
        """`hami_web.core.migreservations.mig_faults`."""
        return mig_faults(devices, usage, elsewhere)

    def conflict(self, device: Device, theirs: DeviceUsage, ours: DeviceUsage) -> str:
        """On a dynamic MIG GPU the invariant is the hardware's: task slots, and no two instances on one memory slice
        (the profiles' memory and cores may add up to more than the card reports, so they are not summed)."""
        if theirs.tasks + ours.tasks > device.count:
            return names.CARD_TIME_SLICING_EXHAUSTED
        if theirs.unreserved:
            return names.CARD_NOT_HEALTH  # a device entry without a reservation: where it sits is unknown
        if any(mine.overlaps(other) for mine in ours.occupied for other in theirs.occupied):
            return names.CARD_MIG_TOPOLOGY_INFEASIBLE
        return ""


MIG = MigPartitioning()
