"""How a node object from the API turns into a GPU inventory (SPEC.md §4, inventory and handshake).

The handshake is HAMi's liveness protocol with the device plugin: we write ``Requesting_<time>``, the plugin
answers ``Reported_<time>`` when it re-registers. A node that stays ``Requesting`` for over a minute while
the kubelet reports no GPUs has lost its device plugin, so its stale register annotation must not attract
pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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

HANDSHAKE_TIMEOUT_SECONDS = 60.0
_HANDSHAKE_LAYOUTS = ("%Y-%m-%d %H:%M:%S", "%Y.%m.%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the scheduler sees it.

    ``inventory`` is None for a node without GPUs (no annotation, or device plugin gone); ``error`` is set
    when the register annotation does not parse; ``handshake_due`` when we should write ``Requesting_…``.
    """

    name: str
    inventory: NodeInventory | None
    error: str = ""
    handshake_due: bool = False


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


def _device_plugin_gone(handshake: str, node: Mapping[str, Any], *, resource: str, now: float) -> bool:
    if handshake.startswith("Deleted"):
        return True
    if handshake.startswith("Requesting_"):
        requested_at = _parse_handshake_time(handshake[len("Requesting_"):])
        if requested_at is not None and now - requested_at > HANDSHAKE_TIMEOUT_SECONDS:
            return _allocatable_gpus(node, resource) == 0
    return False


def node_name(node: Mapping[str, Any]) -> str:
    """``metadata.name`` of a node object, "" when missing or not a string."""
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def node_state(node: Mapping[str, Any], *, count_resource: str, now: float) -> NodeState:
    """Read a node's GPU inventory, health of its device plugin, and whether a handshake is due."""
    name = node_name(node)
    metadata = node.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if annotations is None:
        return NodeState(name=name, inventory=None)
    if not isinstance(annotations, Mapping):
        return NodeState(name=name, inventory=None, error="metadata.annotations is not a map")
    register = annotations.get(names.NODE_REGISTER)
    if register is None:
        return NodeState(name=name, inventory=None)
    if not isinstance(register, str):
        return NodeState(name=name, inventory=None, error=f"{names.NODE_REGISTER} is not a string")
    handshake = str(annotations.get(names.NODE_HANDSHAKE) or "")
    handshake_due = not handshake or handshake.startswith("Reported")
    if _device_plugin_gone(handshake, node, resource=count_resource, now=now):
        return NodeState(name=name, inventory=NodeInventory(name=name, devices=()))
    try:
        devices = decode_register(str(register))
    except AnnotationError as error:
        return NodeState(name=name, inventory=None, error=str(error), handshake_due=handshake_due)
    try:
        pair_scores = decode_pair_scores(str(annotations.get(names.NODE_PAIR_SCORES) or ""))
    except AnnotationError as error:
        # Topology scores only refine a choice; a broken score annotation must not take the node away.
        pair_scores = {}
        error_text = f"{names.NODE_PAIR_SCORES}: {error}"
    else:
        error_text = ""
    inventory = NodeInventory(name=name, devices=devices, pair_scores=pair_scores,
                              cordoned=decode_cordon(str(annotations.get(names.NODE_DEVICE_CORDON) or "")))
    return NodeState(name=name, inventory=inventory, error=error_text, handshake_due=handshake_due)
