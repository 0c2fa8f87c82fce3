"""How a node object from the API turns into a device inventory (docs/wire-formats.md#node-register-annotation,
docs/wire-formats.md#handshake).

The handshake is HAMi's liveness protocol with the device plugin: we write ``Requesting_<time>``, the plugin
answers ``Reported_<time>`` when it re-registers. A node that stays ``Requesting`` for over a minute while
the kubelet reports no GPUs has lost its device plugin, so its stale register annotation must not attract
pods. A family whose inventory is not an annotation (Cambricon's, read from the node's capacity by its
``Family.inventory`` hook) has no handshake: its devices are read when the node is, and change with the node.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from hami_web.core import names
from hami_web.core.devices import (
    AnnotationError,
    Device,
    NodeInventory,
    decode_cordon,
    decode_pair_scores,
    decode_register,
)
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.groups import Grouping
from hami_web.core.quantities import QuantityError, parse_whole_quantity

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_SECONDS = 60.0
_HANDSHAKE_LAYOUTS = ("%Y-%m-%d %H:%M:%S", "%Y.%m.%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class FamilyRecord:
    """One family's annotations on a node: its register text, its handshake, and the kubelet's count of it.

    ``devices`` is set instead of ``register`` for a family whose inventory is not an annotation (its
    ``Family.inventory`` read it from the node at once); such a family has no handshake.
    """

    family: str
    register: str
    handshake_key: str = ""
    handshake: str = ""
    requested_at: float | None = None
    allocatable: int = 0
    devices: tuple[Device, ...] | None = None
    soft_split: bool = False  # the node allows the family's soft split (Ascend ``hami-vnpu-core``)
    # The family's health is the node's capacity of its count resource (HAMi's AMD ``CheckHealth``) and that is 0,
    # absent or unreadable: its device plugin is gone.
    capacity_gone: bool = False


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the cache keeps of a Node object: each family's annotations as text, the GPU topology annotations.

    Never the whole object: a node's status (images, conditions) is most of its size and none of it matters
    here. Handshake times are parsed once, so a resync can re-judge every node with arithmetic alone.
    """

    name: str
    families: tuple[FamilyRecord, ...] = ()
    pair_scores: str = ""
    cordon: str = ""
    error: str = ""
    # Change on every bind (the lock) or every write (the version); they do not change the inventory, so two
    # records that differ only in them are equal and a node is not re-judged for them (see `ClusterCache`).
    lock: str = field(default="", compare=False)
    resource_version: str = field(default="", compare=False)
    # The families' own node locks that are set (key, value): Cambricon's, beside HAMi's ``lock``.
    other_locks: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The annotations the families' node scores read (key, value), e.g. Metax's topology losses.
    score_annotations: tuple[tuple[str, str], ...] = ()

    @property
    def has_devices(self) -> bool:
        """Whether some family's device plugin registered devices here (a device node)."""
        return bool(self.families)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the scheduler sees it.

    ``inventory`` is None for a node without devices (no register annotation) or whose every register annotation
    is unreadable; it lacks a family whose device plugin is gone (``plugin_gone`` names them); ``error`` says which
    annotations do not parse; ``handshake_due`` lists the handshake keys we should write ``Requesting_…`` to.
    """

    name: str
    inventory: NodeInventory | None
    error: str = ""
    handshake_due: tuple[str, ...] = ()
    plugin_gone: tuple[str, ...] = ()
    record: NodeRecord | None = None


def handshake_value(now: float) -> str:
    """The value we write to ask the device plugin to report again."""
    return "Requesting_" + datetime.fromtimestamp(now, tz=UTC).strftime(_HANDSHAKE_LAYOUTS[0])


def _parse_handshake_time(text: str) -> float | None:
    for layout in _HANDSHAKE_LAYOUTS:
        try:
            return datetime.strptime(text.strip(), layout).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def _allocatable(node: Mapping[str, Any], resource: str, section: str = "allocatable") -> int:
    """The node's ``status.<section>`` of ``resource``, 0 when absent or unreadable."""
    value = ((node.get("status") or {}).get(section) or {}).get(resource)
    if value is None:
        return 0
    try:
        return parse_whole_quantity(value, container="-", resource=resource)
    except QuantityError:
        return 0


def node_name(node: Mapping[str, Any]) -> str:
    """``metadata.name`` of a node object, "" when missing or not a string."""
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def node_record(node: Mapping[str, Any], *, catalog: DeviceCatalog = DEFAULT_CATALOG) -> NodeRecord:
    """Keep only what scheduling needs from a Node object; ``error`` says why its annotations are unreadable.

    One bad object must not stop the loop that reads all the others, so even an unexpected error is caught.
    """
    try:
        return _node_record(node, catalog)
    except Exception as error:
        name = node_name(node)
        log.exception("node %s: unexpected error reading its device inventory", name)
        return NodeRecord(name=name, error=f"unreadable node: {type(error).__name__}")


def _node_record(node: Mapping[str, Any], catalog: DeviceCatalog) -> NodeRecord:
    name = node_name(node)
    metadata = node.get("metadata")
    if not isinstance(metadata, Mapping):
        return NodeRecord(name=name)
    annotations = metadata.get("annotations")
    if annotations is None:
        annotations = {}  # a family whose inventory is the node's capacity needs no annotation
    if not isinstance(annotations, Mapping):
        return NodeRecord(name=name, error="metadata.annotations is not a map")
    families: list[FamilyRecord] = []
    errors: list[str] = []
    for family in catalog:
        if family.inventory is not None:
            try:
                devices = family.inventory.devices(node)
            except AnnotationError as error:  # its message names the resource or label it read
                errors.append(f"{family.cw}: {error}")
                continue
            if devices is not None:
                families.append(FamilyRecord(family=family.cw, register="", devices=devices,
                                             allocatable=_allocatable(node, family.resources.count)))
            continue
        register = annotations.get(family.register_key)
        if register is None:
            continue
        if not isinstance(register, str):
            errors.append(f"{family.register_key} is not a string")
            continue
        handshake = str(annotations.get(family.handshake_key) or "")
        requested_at = (_parse_handshake_time(handshake[len("Requesting_"):])
                        if handshake.startswith("Requesting_") else None)
        families.append(FamilyRecord(family=family.cw, register=register, handshake_key=family.handshake_key,
                                     handshake=handshake, requested_at=requested_at,
                                     allocatable=_allocatable(node, family.resources.count),
                                     soft_split=family.soft_split_allowed(annotations),
                                     capacity_gone=family.health is not None and family.health.gone(node)))
    if errors and not families:
        return NodeRecord(name=name, error="; ".join(errors))
    return NodeRecord(name=name, families=tuple(families),
                      pair_scores=str(annotations.get(names.NODE_PAIR_SCORES) or ""),
                      cordon=str(annotations.get(names.NODE_DEVICE_CORDON) or ""), error="; ".join(errors),
                      lock=str(annotations.get(names.NODE_LOCK) or ""),
                      resource_version=str(metadata.get("resourceVersion") or ""),
                      other_locks=tuple((key, str(annotations[key])) for key in catalog.lock_keys()
                                        if key != names.NODE_LOCK and annotations.get(key)),
                      score_annotations=tuple((key, str(annotations[key])) for key in catalog.score_keys()
                                              if annotations.get(key) is not None))


def family_plugin_gone(record: FamilyRecord, *, now: float) -> bool:
    """``Deleted_…``, or ``Requesting_`` for over a minute while the kubelet reports none of the family's devices, or
    (a family whose health is its capacity) no capacity of its count resource."""
    if record.handshake.startswith("Deleted") or record.capacity_gone:
        return True
    if record.requested_at is not None and now - record.requested_at > HANDSHAKE_TIMEOUT_SECONDS:
        return record.allocatable == 0
    return False


def device_plugin_gone(record: NodeRecord, *, now: float) -> tuple[str, ...]:
    """The families of the node whose device plugin is gone (`family_plugin_gone`)."""
    return tuple(family.family for family in record.families if family_plugin_gone(family, now=now))


def handshake_due(record: NodeRecord) -> tuple[str, ...]:
    """The handshake keys we should write (a family's handshake missing or ``Reported…``)."""
    return tuple(family.handshake_key for family in record.families
                 if family.handshake_key and (not family.handshake or family.handshake.startswith("Reported")))


def _groupings(devices: list[Device], catalog: DeviceCatalog) -> dict[str, Grouping]:
    """How each family's multi-device containers are picked on this node: the family's ``grouping`` where it applies
    to the node's devices of the family (HCCS groups only when every device reports its group, as HAMi's
    ``hasNetworkID``)."""
    present = {device.family for device in devices}
    groupings: dict[str, Grouping] = {}
    for family in catalog:
        if family.grouping is None or family.cw not in present:
            continue
        if not family.grouping.applies([device for device in devices if device.family == family.cw]):
            continue
        groupings[family.cw] = family.grouping
    return groupings


def _family_inventory(record: FamilyRecord) -> tuple[object, ...]:
    """What of a family's record its devices are read from (not its handshake, whose effect is `family_plugin_gone`)."""
    return record.family, record.register, record.devices, record.soft_split, record.capacity_gone


def same_inventory_source(first: NodeRecord, second: NodeRecord) -> bool:
    """Whether two records of a node are read into the same inventory once the same families' plugins are gone: they
    differ at most in the lock, the resourceVersion and the handshakes (each bind's lock and release, and each
    handshake's request and answer, are node writes that change none of the devices)."""
    return (first.name == second.name and first.error == second.error and first.pair_scores == second.pair_scores
            and first.cordon == second.cordon and first.score_annotations == second.score_annotations
            and len(first.families) == len(second.families)
            and all(_family_inventory(a) == _family_inventory(b) for a, b in zip(first.families, second.families,
                                                                                 strict=True)))


def node_state(record: NodeRecord, *, now: float, catalog: DeviceCatalog = DEFAULT_CATALOG,
               previous: NodeState | None = None) -> NodeState:
    """Read a node's inventory of every family, the health of each device plugin, and which handshakes are due.

    A family whose register annotation does not parse is left out of the inventory and named in ``broken`` (and
    ``error``); the node's other families stay usable. Only when no family is readable is the node unusable.

    ``previous`` is the node's state before this record: when the record changes nothing its inventory is read from
    (`same_inventory_source`) and the same plugins are gone, its inventory is kept instead of decoding the register
    annotations again (most node events of a burst are a lock, a release or a handshake).
    """
    name = record.name
    if not record.families:
        return NodeState(name=name, inventory=None, error=record.error, record=record)
    due = handshake_due(record)
    gone = device_plugin_gone(record, now=now)
    if (previous is not None and previous.record is not None and previous.plugin_gone == gone
            and same_inventory_source(previous.record, record)):
        return replace(previous, handshake_due=due, record=record)
    devices: list[Device] = []
    broken: dict[str, str] = {}
    errors = [record.error] if record.error else []
    for family_record in record.families:
        if family_record.family in gone:
            continue
        if family_record.devices is not None:
            devices.extend(family_record.devices)
            continue
        family = catalog.get(family_record.family)
        key = family.register_key if family is not None else family_record.family
        try:
            decoded = decode_register(family_record.register, family=family_record.family)
            devices.extend(map(family.amend, decoded) if family is not None and family.amend else decoded)
        except AnnotationError as error:
            broken[family_record.family] = f"{key}: {error}"
            errors.append(f"{key}: {error}")
    uuids = [device.uuid for device in devices]
    if len(set(uuids)) != len(uuids):
        duplicate = next(uuid for uuid in uuids if uuids.count(uuid) > 1)
        message = f"device {duplicate} is registered by two families"
        return NodeState(name=name, inventory=None, error=message, handshake_due=due, plugin_gone=gone,
                         record=record)
    if broken and not devices and len(broken) + len(gone) == len(record.families):
        return NodeState(name=name, inventory=None, error="; ".join(errors), handshake_due=due, plugin_gone=gone,
                         record=record)
    try:
        pair_scores = decode_pair_scores(record.pair_scores)
    except AnnotationError as error:
        # Topology scores only refine a choice; a broken score annotation must not take the node away.
        pair_scores = {}
        errors.append(f"{names.NODE_PAIR_SCORES}: {error}")
    cordon_families = frozenset(family.cw for family in catalog if family.cordon)
    cordoned = decode_cordon(record.cordon)
    if cordoned:  # hami.io/device-cordon is NVIDIA's: it never takes another family's device away
        cordoned -= {device.uuid for device in devices if device.family not in cordon_families}
    inventory = NodeInventory(name=name, devices=tuple(devices), pair_scores=pair_scores, cordoned=cordoned,
                              broken=broken, topology=frozenset(family.cw for family in catalog if family.topology),
                              soft_split=frozenset(family.family for family in record.families if family.soft_split),
                              grouping=_groupings(devices, catalog),
                              partitioning=catalog.partitionings(),
                              # Interned: nodes share a few tables, and the filter groups nodes by this text.
                              annotations=sys.intern(json.dumps(dict(sorted(record.score_annotations))))
                              if record.score_annotations else "")
    return NodeState(name=name, inventory=inventory, error="; ".join(errors), handshake_due=due, plugin_gone=gone,
                     record=record)
