"""Which devices a pod's containers were given, and HAMi's pod annotation encoding of it.

Each family's ``…-devices-allocated`` (``hami.io/vgpu-devices-allocated`` for NVIDIA) is positional: one
``;``-terminated entry per container (init containers first), each device ``UUID,<CW>,<mem MiB>,<cores>:``.
In memory a pod's grants of every family sit together per container (`DeviceGrant.vendor` is the family's
common word); `family_grants` splits them back per family for the wire. The device plugin maps entries to
containers by position, so an empty container must still produce its (empty) entry, and decoding is strict:
a pod whose annotation is garbage has unknown usage and is reported, not silently counted as zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hami_web.core.devices import AnnotationError
from hami_web.core.families import DeviceCatalog
from hami_web.core.limits import MAX_DEVICE_CORES, MAX_DEVICE_MEMORY_MIB, MAX_NUMBER_CHARS, MAX_UUID_CHARS, quote
from hami_web.core.names import VENDOR
from hami_web.core.nodelocks import LockRule
from hami_web.core.partitions import PartitionProfile, PlacedPartition

_MIN_FIELDS = 4


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """One device given to one container, with the memory (MiB) and cores (percent) booked on it, and the partition
    placed on it when its family's partitioning carves it per grant (`hami_web.core.partitions`; NVIDIA's dynamic MIG
    instances, docs/mig.md#dynamic-mig)."""

    uuid: str
    memory_mib: int
    cores: int
    vendor: str = VENDOR
    # Booked in the family's soft split (Ascend hami-core): only the bind's runtime annotation says so; HAMi's device
    # annotation has no field for it, so a grant read back from a pod does not know it and compares equal.
    soft_split: bool = field(default=False, compare=False)
    placed: PlacedPartition | None = None
    # The annotation's type field when it is not the family's common word (HAMi's AMD writes the product type).
    type: str = ""
    # Of a partitioned device (`hami_web.core.partitions`): the device's shares the partition takes (its slices) and
    # its profile. The device annotation carries neither: a grant read back gets its shares from the family's own
    # annotation (`Partitioning.shares_of`) and compares equal without them.
    shares: int = field(default=1, compare=False)
    partition: PartitionProfile | None = field(default=None, compare=False)
    handle: str = field(default="", compare=False)  # the partitioned device's handle (`DevicePartitions.handle`)
    # What the grant holds under its family's sharing rule (Metax sGPU's QoS, app class), from the pod's annotations.
    tags: tuple[str, ...] = field(default=(), compare=False)
    # For a family booking cores its own way (`hami_web.core.families.family.CoreBooking`), known only to the server
    # that placed it, as ``soft_split``: the cores the container asked per device (AWS Neuron: 0 = whole devices by
    # count) and the cores the device has, which its ``booking_extras`` read (Neuron's core ids).
    asked_cores: int = field(default=0, compare=False)
    device_cores: int = field(default=0, compare=False)


ContainerGrants = tuple[DeviceGrant, ...]
PodGrants = tuple[ContainerGrants, ...]


def encode_pod_devices(grants: Sequence[Sequence[DeviceGrant]]) -> str:
    """Encode per-container grants (init containers first) as the pod device annotation."""
    return "".join(
        "".join(f"{g.uuid},{g.type or g.vendor},{g.memory_mib},{g.cores}:" for g in container) + ";"
        for container in grants
    )


def describe_grants(grants: Sequence[Sequence[DeviceGrant]]) -> str:
    """Human-readable grants for logs, events and the demo: ``uuid(3000MiB,20%),…`` per container, ``;`` between; a MIG
    instance as ``uuid(2g.10gb@0+2,9984MiB,29%)``."""
    return ";".join(",".join(f"{g.uuid}({_placed_text(g)}{g.memory_mib}MiB,{g.cores}%)" for g in container)
                    for container in grants)


def _placed_text(grant: DeviceGrant) -> str:
    placed = grant.placed
    return f"{placed.profile}@{placed.placement.describe()}," if placed is not None else ""


def decode_pod_devices(text: str, family: str = "") -> PodGrants:
    """Decode the pod device annotation; raise `AnnotationError` naming the container and device on error.

    With ``family`` (the common word of the family whose key holds ``text``) every grant is that family's, and a type
    field other than the word is kept as the grant's ``type`` (AMD's product type); without, the type field is the
    family."""
    if not text:
        return ()
    entries = text.split(";")
    if entries[-1].strip():
        raise AnnotationError(f"container {len(entries) - 1}: entry does not end with ';'")
    containers: list[ContainerGrants] = []
    for container_position, entry in enumerate(entries[:-1]):
        grants: list[DeviceGrant] = []
        for device_position, item in enumerate(entry.split(":")):
            if not item.strip():
                continue
            where = f"container {container_position} device {device_position}"
            fields = item.split(",")
            if len(fields) < _MIN_FIELDS:
                raise AnnotationError(f"{where}: expected UUID,vendor,memory,cores, got {item.strip()!r}")
            uuid = fields[0].strip()
            if not uuid:
                raise AnnotationError(f"{where}: empty UUID")
            if len(uuid) > MAX_UUID_CHARS:
                raise AnnotationError(f"{where}: UUID is longer than {MAX_UUID_CHARS} characters")
            memory_mib = _bounded_int(fields[2], "memory", MAX_DEVICE_MEMORY_MIB, where, item)
            # Cores as booked: a percentage, or a family's own units (AMD's compute units, a Neuron core bitmask).
            cores = _bounded_int(fields[3], "cores", MAX_DEVICE_CORES, where, item)
            written = fields[1].strip()
            grants.append(DeviceGrant(uuid=uuid, memory_mib=memory_mib, cores=cores, vendor=family or written,
                                      type=written if family and written != family else ""))
        containers.append(tuple(grants))
    return tuple(containers)


def _bounded_int(text: str, what: str, maximum: int, where: str, item: str) -> int:
    """One number of a device entry, in ``0..maximum``: a GPU cannot give a task more than it has."""
    stripped = text.strip()
    if len(stripped) > MAX_NUMBER_CHARS:
        raise AnnotationError(f"{where}: {what} is longer than {MAX_NUMBER_CHARS} characters")
    try:
        value = int(stripped)
    except ValueError:
        raise AnnotationError(f"{where}: memory and cores must be integers in {quote(item.strip())}") from None
    if value < 0:
        raise AnnotationError(f"{where}: negative memory or cores in {quote(item.strip())}")
    if value > maximum:
        raise AnnotationError(f"{where}: {what} {value} is over the limit of {maximum}")
    return value


def family_grants(grants: Sequence[Sequence[DeviceGrant]], family: str) -> PodGrants:
    """The grants of one family, one entry per container (empty where the container holds none of it)."""
    return tuple(tuple(grant for grant in container if grant.vendor == family) for container in grants)


def families_of(grants: Sequence[Sequence[DeviceGrant]]) -> tuple[str, ...]:
    """The families (common words) the grants hold devices of, in first-seen order."""
    return tuple(dict.fromkeys(grant.vendor for container in grants for grant in container))


def merge_grants(parts: Sequence[PodGrants], containers: int) -> PodGrants:
    """Several families' grants of one pod as one entry per container, the families in the order given."""
    merged: list[list[DeviceGrant]] = [[] for _ in range(max([containers, *(len(part) for part in parts)]))]
    for part in parts:
        for position, container in enumerate(part):
            merged[position].extend(container)
    return tuple(tuple(container) for container in merged)


PREDICATE_TIME = "predicate-time"


def bind_annotations(grants: Sequence[Sequence[DeviceGrant]], catalog: DeviceCatalog, *,
                     now_seconds: int, node: str = "", now_ns: int | None = None,
                     containers: Sequence[str] = ()) -> dict[str, str]:
    """Everything a bind writes for the families of ``grants``: `booking_annotations`; ``predicate-time`` (the
    bind's Unix seconds, no prefix) when a family's device plugin reads it (Ascend's,
    docs/device-families.md#ascend-npus); a family's ``predicate_node_key`` (the node) and ``predicate_ns_key`` (the
    bind's time in nanoseconds: ``now_ns``, else ``now_seconds`` in nanoseconds), as HAMi's Mthreads and AWS Neuron
    ``PatchAnnotations`` write them; a family's ``bind_extras`` from its grants, the pod's ``containers`` (names, init
    containers first) and that time."""
    annotations = booking_annotations(grants, catalog)
    ns = now_seconds * 10**9 if now_ns is None else now_ns
    for cw in families_of(grants):
        family = catalog[cw]
        if family.bind_extras is not None:
            annotations.update(family.bind_extras(family_grants(grants, cw), containers, ns))
        if family.predicate_time:
            annotations[PREDICATE_TIME] = str(now_seconds)
        if family.predicate_node_key:
            annotations[family.predicate_node_key] = node
        if family.predicate_ns_key:
            annotations[family.predicate_ns_key] = str(ns)
    return annotations


def booking_annotations(grants: Sequence[Sequence[DeviceGrant]], catalog: DeviceCatalog) -> dict[str, str]:
    """The pod annotations a booking writes for each family it uses: ``…-devices-to-allocate`` and
    ``…-devices-allocated``, the same value, one entry per container (docs/wire-formats.md#pod-device-annotation). A
    grant of a family the catalog does not know is an error of the caller, not something to write under a guessed
    key. A family whose device plugin reads more (Cambricon's ``CAMBRICON_DSMLU_PROFILE``, NVIDIA's MIG reservations:
    docs/wire-formats.md#mig-reservations) adds its ``booking_extras``."""
    annotations: dict[str, str] = {}
    for cw in families_of(grants):
        family = catalog[cw]
        own = family_grants(grants, cw)
        text = encode_pod_devices(own)
        if family.to_allocate_key:
            annotations[family.to_allocate_key] = text
        annotations[family.allocated_key] = text
        if family.booking_extras is not None:
            annotations.update(family.booking_extras(own))
    return annotations


def cleared_annotations(grants: Sequence[Sequence[DeviceGrant]], catalog: DeviceCatalog) -> dict[str, None]:
    """The annotations of an earlier booking that this one removes (JSON merge patch ``null``): every family's MIG
    reservations it does not write (docs/mig.md#dynamic-mig). A pod booked again after a failed bind would otherwise
    keep reservations of GPUs it no longer holds, which fails the MIG GPUs of its new node closed."""
    written = booking_annotations(grants, catalog)
    keys = (family.partitioning.reservations_key for family in catalog if family.partitioning is not None)
    return {key: None for key in keys if key and key not in written}


def booking_locks(grants: Sequence[Sequence[DeviceGrant]], catalog: DeviceCatalog) -> tuple[LockRule, ...]:
    """The node locks a bind of these grants takes: those of exactly the families the pod holds devices of, each
    once, in the one order every binder uses (docs/device-families.md#device-families, node locks)."""
    return catalog.locks_for(families_of(grants))
