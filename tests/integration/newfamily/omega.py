"""A made-up *partitioned* family, Omega OPUs: the one module `test_new_partitioned_family` adds (with one line of the
registry), proving the partitioning seam (`hami_web.core.partitions.Partitioning`) is all a family carved into placed
partitions needs.

An OPU has four quarters; its device plugin carves, per grant, a partition of a profile (``1q``, ``2q``, ``4q``: that
many quarters, their memory and cores) at a free, aligned start, and one container may take several partitions of one
OPU. Everything about it is here: its resources, its register annotation (HAMi's ``DeviceInfo`` JSON, read by the
common codec), its device annotation, the annotation its device plugin reads the placements from (written with the
booking, read back after a restart), its reason when no partition is free, and its spec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.families import config
from hami_web.core.families.family import Family, ResourceNames
from hami_web.core.families.spec import FamilySpec
from hami_web.core.partitions import PartitionFault, PlacedPartition, Restored, SliceRange

if TYPE_CHECKING:
    from hami_web.core.grants import PodGrants
    from hami_web.core.requests import ContainerRequest
    from hami_web.core.usage import DeviceUsage

CW = "Omega"
REGISTER_KEY = "hami.io/node-omega-register"
ALLOCATED_KEY = "hami.io/omega-devices-allocated"
PARTITIONS_KEY = "omega.example.com/partitions"
NO_FREE_QUARTER = "OpuQuartersInfeasible"
QUARTERS = 4
PROFILES = (("1q", 1, 8192, 10), ("2q", 2, 16384, 20), ("4q", 4, 32768, 40))  # name, quarters, MiB, cores
DEFAULT_RESOURCES = ResourceNames(count="omega.example.com/opu", memory="omega.example.com/opu-mem",
                                  memory_percentage="", cores="", priority="")


@dataclass(frozen=True, slots=True)
class OpuQuarters:
    """The family's partitioning: the smallest profile holding the ask at the lowest free aligned start."""

    reservations_key: str = PARTITIONS_KEY

    @property
    def asks_profiles(self) -> bool:
        return False

    @property
    def infeasible(self) -> str:
        return NO_FREE_QUARTER

    def ask(self, request: ContainerRequest, devices: Sequence[Device]) -> ContainerRequest | None:
        return request

    def carves(self, device: Device) -> bool:
        return device.family == CW

    def refusal(self, device: Device) -> str:
        return ""

    def may_repeat(self, devices: Sequence[Device], modes: str | None) -> bool:
        return any(map(self.carves, devices))

    def place(self, device: Device, occupied: Sequence[SliceRange],
              memory_mib: int) -> tuple[int, int, PlacedPartition] | None:
        for name, quarters, profile_mib, cores in PROFILES:
            if profile_mib < memory_mib:
                continue
            for start in range(0, QUARTERS, quarters):
                placement = SliceRange(start, quarters)
                if not any(placement.overlaps(taken) for taken in occupied):
                    return profile_mib, cores, PlacedPartition(profile=name, placement=placement)
        return None

    def restore(self, grants: PodGrants, annotations: Mapping[str, str], containers: Sequence[str],
                owner: str) -> Restored:
        """Each grant with the next partition written for its OPU (``{uuid: [[profile, start, size], …]}``)."""
        written = json.loads(annotations.get(PARTITIONS_KEY) or "{}")
        left = {uuid: [PlacedPartition(profile, SliceRange(start, size), pod=owner) for profile, start, size in entries]
                for uuid, entries in written.items()}
        restored = tuple(tuple(replace(grant, placed=left[grant.uuid].pop(0)) if left.get(grant.uuid) else grant
                               for grant in entry) for entry in grants)
        return Restored(restored, {uuid: tuple(instances) for uuid, instances in left.items() if instances})

    def faults(self, devices: Sequence[Device], usage: Sequence[tuple[tuple[PlacedPartition, ...], tuple[str, ...]]],
               elsewhere: Mapping[str, tuple[PlacedPartition, ...]]) -> tuple[PartitionFault, ...]:
        return ()

    def conflict(self, device: Device, theirs: DeviceUsage, ours: DeviceUsage) -> str:
        if theirs.tasks + ours.tasks > device.count:
            return names.CARD_TIME_SLICING_EXHAUSTED
        if any(mine.overlaps(other) for mine in ours.occupied for other in theirs.occupied):
            return NO_FREE_QUARTER
        return ""


def partitions_written(grants: Sequence[Sequence[Any]]) -> dict[str, str]:
    """The booking's partitions as the device plugin reads them, per OPU in grant order."""
    written: dict[str, list[list[object]]] = {}
    for entry in grants:
        for grant in entry:
            if grant.placed is not None:
                placement = grant.placed.placement
                written.setdefault(grant.uuid, []).append([grant.placed.profile, placement.start, placement.size])
    return {PARTITIONS_KEY: json.dumps(written, separators=(",", ":"))} if written else {}


def omega_family(resources: ResourceNames) -> Family:
    """OPUs carved into quarters per grant."""
    return Family(cw=CW, kind="omega", label="Omega OPU", resources=resources, register_key=REGISTER_KEY,
                  handshake_key="", to_allocate_key="", allocated_key=ALLOCATED_KEY, lock=None,
                  partitioning=OpuQuarters(), booking_extras=partitions_written)


SPEC = FamilySpec(name="omega", label="Omega OPU", section="omega", default=DEFAULT_RESOURCES,
                  read=lambda value, where: config.resource_names(config.section_map(value, where), where,
                                                                  DEFAULT_RESOURCES),
                  publish=lambda resources: config.names_document(config.changed_names(resources, DEFAULT_RESOURCES)),
                  build=lambda resources: (omega_family(resources),))
