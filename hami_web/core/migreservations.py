"""The MIG reservation annotation (``hami.io/vgpu-mig-allocations``) and how a node's MIG occupancy is rebuilt
from it (docs/mig.md#dynamic-mig, docs/wire-formats.md#mig-reservations).

The pod device annotation says which GPU a container holds and how much, not where on the GPU its MIG instance
sits; that is this JSON list, one object per instance, written with the booking. The device plugin realises
exactly the placement written and adds the instance's runtime identity (``migUUID``, ``gpuInstanceID``,
``computeInstanceID``).

Rebuilding occupancy must never double-carve a GPU, so it fails closed: whatever cannot be trusted makes the GPU
unallocatable instead of free. The pod reader attaches reservations to device entries (`attach_reservations`);
a device entry left without one, or a reservation left without a matching MIG GPU, is judged against the node's
inventory when the node's view is built (`mig_faults`), because only the inventory says which GPU is in ``mig``
mode. Decoding follows HAMi v2.10.0 pkg/device/nvidia/mig_allocations.go (``DecodeMigAllocations``) and
pkg/scheduler/scheduler.go (``getNodesUsage``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hami_web.core.devices import _UINT32_MAXIMUM, AnnotationError, Device, _go_number, _json_kind, _load_json
from hami_web.core.limits import MAX_UUID_CHARS, quote
from hami_web.core.mig import MIG_MODE
from hami_web.core.partitions import PartitionFault, PlacedPartition, SliceRange

if TYPE_CHECKING:
    from hami_web.core.grants import PodGrants

# A Go ``int`` (containerIndex, deviceIndex) on the 64-bit platforms HAMi runs on.
_INT64_MAXIMUM = (1 << 63) - 1
# Reservations one pod may carry: far above any real pod, low enough that a hostile annotation stays cheap.
MAX_RESERVATIONS = 1_024
MAX_PROFILE_CHARS = 64

# Why a GPU fails closed (the reason of its fault, in the log, the metric and ``kubectl hami inspect``).
UNRESERVED_ENTRY = "device entry without a MIG reservation"
RESERVATION_ON_NON_MIG = "MIG reservation on a GPU not in mig mode"
RESERVATION_ELSEWHERE = "MIG reservation for a GPU not on the node"


@dataclass(frozen=True, slots=True)
class MigReservation:
    """One object of the reservation annotation: which container entry and position it belongs to, on which GPU,
    and the instance (profile, placement, runtime identity if created)."""

    container_index: int
    device_index: int
    gpu_uuid: str
    instance: PlacedPartition


def decode_reservations(text: str) -> tuple[MigReservation, ...]:
    """Decode the annotation as Go decodes ``[]MigAllocation`` (keys case-insensitive, ``null`` = zero value) and
    validate it as HAMi does: not a list, an entry without ``gpuUUID`` or ``profile``, a placement of size 0, a
    negative index, a partial runtime identity or a duplicate (containerIndex, deviceIndex) is an `AnnotationError`."""
    if not text.strip():
        return ()
    document = _load_json(text, pairs=True)
    if not isinstance(document, list):
        raise AnnotationError(f"MIG reservations must be a list, got {_json_kind(document)}")
    if len(document) > MAX_RESERVATIONS:
        raise AnnotationError(f"{len(document)} MIG reservations (at most {MAX_RESERVATIONS})")
    reservations: list[MigReservation] = []
    seen: set[tuple[int, int]] = set()
    for position, entry in enumerate(document):
        where = f"MIG reservation {position}"
        reservation = _decode_one(entry if entry is not None else {}, where)
        key = (reservation.container_index, reservation.device_index)
        if key in seen:
            raise AnnotationError(f"{where}: a second reservation for container {key[0]} device {key[1]}")
        seen.add(key)
        reservations.append(reservation)
    return tuple(reservations)


def _decode_one(entry: object, where: str) -> MigReservation:
    if not isinstance(entry, dict):
        raise AnnotationError(f"{where}: expected an object, got {_json_kind(entry)}")
    strings = {}
    for key in ("gpuuuid", "profile", "miguuid"):
        value = entry.get(key, "")
        if not isinstance(value, str):
            raise AnnotationError(f"{where}: field {quote(key)} is {_json_kind(value)}, not a string")
        strings[key] = value
    indexes = {key: _go_number(entry.get(key, 0), key, where, unsigned=False, maximum=_INT64_MAXIMUM)
               for key in ("containerindex", "deviceindex")}
    placement = entry.get("placement", {})
    if not isinstance(placement, dict):
        raise AnnotationError(f"{where}: field 'placement' is {_json_kind(placement)}, not an object")
    start, size = (_go_number(placement.get(key, 0), key, f"{where} placement", unsigned=True,
                              maximum=_UINT32_MAXIMUM) for key in ("start", "size"))
    runtime = {key: _go_number(entry[key], key, where, unsigned=True, maximum=_UINT32_MAXIMUM)
               if key in entry else None for key in ("gpuinstanceid", "computeinstanceid")}
    if min(indexes.values()) < 0:
        raise AnnotationError(f"{where}: containerIndex and deviceIndex must not be negative")
    if not strings["gpuuuid"] or not strings["profile"] or size == 0:
        raise AnnotationError(f"{where}: incomplete (needs gpuUUID, profile and a placement of size > 0)")
    if len(strings["gpuuuid"]) > MAX_UUID_CHARS or len(strings["profile"]) > MAX_PROFILE_CHARS \
            or len(strings["miguuid"]) > MAX_UUID_CHARS:
        raise AnnotationError(f"{where}: gpuUUID, profile or migUUID is too long")
    gpu_instance, compute_instance = runtime["gpuinstanceid"], runtime["computeinstanceid"]
    identity = sum((bool(strings["miguuid"]), gpu_instance is not None, compute_instance is not None))
    if identity not in (0, 3):
        raise AnnotationError(f"{where}: partial runtime identity (migUUID, gpuInstanceID and computeInstanceID "
                              f"come all together or not at all)")
    ids = (gpu_instance, compute_instance) if gpu_instance is not None and compute_instance is not None else None
    return MigReservation(
        container_index=indexes["containerindex"], device_index=indexes["deviceindex"], gpu_uuid=strings["gpuuuid"],
        instance=PlacedPartition(profile=strings["profile"], placement=SliceRange(start=start, size=size),
                                 uuid=strings["miguuid"], ids=ids))


def attach_reservations(grants: PodGrants, reservations: Sequence[MigReservation],
                        owner: str) -> tuple[PodGrants, dict[str, tuple[PlacedPartition, ...]]]:
    """Each device entry with the first unused reservation for its GPU (entries in order, as HAMi matches them),
    the instances named after ``owner``; and per GPU the reservations no entry took (they occupy their placement
    too)."""
    pending: dict[str, list[PlacedPartition]] = {}
    for reservation in reservations:
        pending.setdefault(reservation.gpu_uuid, []).append(replace(reservation.instance, pod=owner))
    if not pending:
        return grants, {}
    attached = tuple(tuple(replace(grant, placed=pending[grant.uuid].pop(0)) if pending.get(grant.uuid) else grant
                           for grant in container) for container in grants)
    return attached, {uuid: tuple(left) for uuid, left in pending.items() if left}


def mig_faults(devices: Sequence[Device], usage: Sequence[tuple[tuple[PlacedPartition, ...], tuple[str, ...]]],
               elsewhere: Mapping[str, tuple[PlacedPartition, ...]]) -> tuple[PartitionFault, ...]:
    """The GPUs the rebuild makes unallocatable (docs/mig.md#dynamic-mig, failing closed).

    ``usage[i]`` is ``devices[i]``'s instances and the pods holding a device entry on it without a reservation;
    ``elsewhere`` the instances reserved on GPUs the node does not list. A dynamic MIG GPU (``migProfiles``) with an
    entry lacking a reservation, any other GPU with a reservation (HAMi fails only ``hami-core`` ones), and, for a
    reservation on a GPU not on the node, every MIG GPU of the node.
    """
    faults: list[PartitionFault] = []
    for device, (instances, unreserved) in zip(devices, usage, strict=True):
        if device.mode == MIG_MODE:
            if unreserved and device.mig_profiles:
                faults.append(PartitionFault(device.uuid, UNRESERVED_ENTRY, tuple(sorted(set(unreserved)))))
        elif instances:
            faults.append(PartitionFault(device.uuid, RESERVATION_ON_NON_MIG,
                                   tuple(sorted({instance.pod for instance in instances}))))
    if elsewhere:
        pods = tuple(sorted({instance.pod for instances in elsewhere.values() for instance in instances}))
        faulted = {fault.uuid for fault in faults}
        faults.extend(PartitionFault(device.uuid, f"{RESERVATION_ELSEWHERE} ({', '.join(sorted(elsewhere))})", pods)
                      for device in devices if device.mode == MIG_MODE and device.uuid not in faulted)
    return tuple(faults)
