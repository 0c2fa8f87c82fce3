"""How a node object from the API turns into a GPU inventory (SPEC.md §4, inventory and handshake).

The handshake is HAMi's liveness protocol with the device plugin: we write ``Requesting_<time>``, the plugin
answers ``Reported_<time>`` when it re-registers. A node that stays ``Requesting`` for over a minute while
the kubelet reports no GPUs has lost its device plugin, so its stale register annotation must not attract
pods.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hami_web.core import names
from hami_web.core.devices import (
    AnnotationError,
    NodeInventory,
    decode_cordon,
    decode_pair_scores,
    decode_register,
)
from hami_web.core.quantities import QuantityError, parse_whole_quantity

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_SECONDS = 60.0
_HANDSHAKE_LAYOUTS = ("%Y-%m-%d %H:%M:%S", "%Y.%m.%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the cache keeps of a Node object: the GPU annotations as text, the handshake, allocatable GPUs.

    Never the whole object: a node's status (images, conditions) is most of its size and none of it matters
    here. The handshake time is parsed once, so a resync can re-judge every node with arithmetic alone.
    """

    name: str
    register: str | None = None
    pair_scores: str = ""
    cordon: str = ""
    handshake: str = ""
    requested_at: float | None = None
    allocatable_gpus: int = 0
    error: str = ""
    # Change on every bind (the lock) or every write (the version); they do not change the inventory, so two
    # records that differ only in them are equal and a node is not re-judged for them (see `ClusterCache`).
    lock: str = field(default="", compare=False)
    resource_version: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the scheduler sees it.

    ``inventory`` is None for a node without GPUs (no annotation); it has no devices when the device plugin
    is gone (``plugin_gone``); ``error`` is set when the register annotation does not parse;
    ``handshake_due`` when we should write ``Requesting_…``.
    """

    name: str
    inventory: NodeInventory | None
    error: str = ""
    handshake_due: bool = False
    plugin_gone: bool = False
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


def _allocatable_gpus(node: Mapping[str, Any], resource: str) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
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


def node_record(node: Mapping[str, Any], *, count_resource: str) -> NodeRecord:
    """Keep only what scheduling needs from a Node object; ``error`` says why its GPU annotations are unreadable.

    One bad object must not stop the loop that reads all the others, so even an unexpected error is caught.
    """
    try:
        return _node_record(node, count_resource)
    except Exception as error:
        name = node_name(node)
        log.exception("node %s: unexpected error reading its GPU inventory", name)
        return NodeRecord(name=name, error=f"unreadable node: {type(error).__name__}")


def _node_record(node: Mapping[str, Any], count_resource: str) -> NodeRecord:
    name = node_name(node)
    metadata = node.get("metadata")
    if not isinstance(metadata, Mapping):
        return NodeRecord(name=name)
    annotations = metadata.get("annotations")
    if annotations is None:
        return NodeRecord(name=name)
    if not isinstance(annotations, Mapping):
        return NodeRecord(name=name, error="metadata.annotations is not a map")
    register = annotations.get(names.NODE_REGISTER)
    if register is None:
        return NodeRecord(name=name)
    if not isinstance(register, str):
        return NodeRecord(name=name, error=f"{names.NODE_REGISTER} is not a string")
    handshake = str(annotations.get(names.NODE_HANDSHAKE) or "")
    requested_at = (_parse_handshake_time(handshake[len("Requesting_"):])
                    if handshake.startswith("Requesting_") else None)
    return NodeRecord(name=name, register=str(register), pair_scores=str(annotations.get(names.NODE_PAIR_SCORES) or ""),
                      cordon=str(annotations.get(names.NODE_DEVICE_CORDON) or ""), handshake=handshake,
                      requested_at=requested_at, allocatable_gpus=_allocatable_gpus(node, count_resource),
                      lock=str(annotations.get(names.NODE_LOCK) or ""),
                      resource_version=str(metadata.get("resourceVersion") or ""))


def device_plugin_gone(record: NodeRecord, *, now: float) -> bool:
    """``Deleted_…``, or ``Requesting_`` for over a minute while the kubelet reports no GPUs."""
    if record.handshake.startswith("Deleted"):
        return True
    if record.requested_at is not None and now - record.requested_at > HANDSHAKE_TIMEOUT_SECONDS:
        return record.allocatable_gpus == 0
    return False


def handshake_due(record: NodeRecord) -> bool:
    """Whether we should ask the device plugin to report (handshake missing or ``Reported…``)."""
    return record.register is not None and (not record.handshake or record.handshake.startswith("Reported"))


def node_state(record: NodeRecord, *, now: float) -> NodeState:
    """Read a node's GPU inventory, health of its device plugin, and whether a handshake is due."""
    name = record.name
    if record.register is None:
        return NodeState(name=name, inventory=None, error=record.error, record=record)
    due = handshake_due(record)
    if device_plugin_gone(record, now=now):
        return NodeState(name=name, inventory=NodeInventory(name=name, devices=()), handshake_due=due,
                         plugin_gone=True, record=record)
    try:
        devices = decode_register(record.register)
    except AnnotationError as error:
        return NodeState(name=name, inventory=None, error=str(error), handshake_due=due, record=record)
    try:
        pair_scores = decode_pair_scores(record.pair_scores)
    except AnnotationError as error:
        # Topology scores only refine a choice; a broken score annotation must not take the node away.
        pair_scores = {}
        error_text = f"{names.NODE_PAIR_SCORES}: {error}"
    else:
        error_text = ""
    inventory = NodeInventory(name=name, devices=devices, pair_scores=pair_scores,
                              cordoned=decode_cordon(record.cordon))
    return NodeState(name=name, inventory=inventory, error=error_text, handshake_due=due, record=record)
