"""A node event that changes nothing its inventory is read from (a bind's lock and release, a handshake's request and
answer: most node events of a burst) keeps the node's inventory instead of decoding the register annotations again,
and the state it gives is the one a fresh read gives (`node_state` with ``previous``, `same_inventory_source`).

HAMi reads a node's devices from its register annotation (``pkg/device/nvidia``'s ``GetNodeDevices``) and judges the
handshake apart (``pkg/device/devices.go`` ``CheckHealth``); a change of the register, the topology scores, the cordon
or a plugin's health is read anew.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.state.nodes import HANDSHAKE_TIMEOUT_SECONDS, NodeState, node_record, node_state

REGISTER, HANDSHAKE = names.NODE_REGISTER, names.NODE_HANDSHAKE
GPU_COUNT = "nvidia.com/gpu"
A40 = "NVIDIA-NVIDIA A40"


def gpus(*uuids: str, memory_mib: int = 46068) -> list[Device]:
    return [Device(uuid=uuid, index=i, count=10, memory_mib=memory_mib, cores=100, type=A40)
            for i, uuid in enumerate(uuids)]


def node(*, devices: list[Device] | None = None, handshake: str = "Reported_2026-11-27 10:00:00",
         gpu_count: str = "2", version: str = "1", extra: dict[str, str] | None = None) -> dict[str, Any]:
    register = encode_register_json(devices if devices is not None else gpus("GPU-a", "GPU-b"))
    return {"metadata": {"name": "n1", "resourceVersion": version,
                         "annotations": {REGISTER: register, HANDSHAKE: handshake, **(extra or {})}},
            "status": {"allocatable": {GPU_COUNT: gpu_count}}}


NOW = 1_800_000_000.0
REQUESTED_LONG_AGO = "Requesting_2020-01-01 00:00:00"

# (what changed, the node before, the node after, whether the inventory is kept)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("the lock taken", node(), node(version="2", extra={names.NODE_LOCK: "2026-11-27T10:00:00Z,team-a,p1"}), True),
    ("the lock released", node(extra={names.NODE_LOCK: "2026-11-27T10:00:00Z,team-a,p1"}), node(version="3"), True),
    ("a handshake requested", node(), node(handshake="Requesting_2026-11-27 10:00:15", version="2"), True),
    ("a handshake answered", node(handshake="Requesting_2026-11-27 10:00:15"), node(version="3"), True),
    ("a device's memory", node(), node(devices=gpus("GPU-a", "GPU-b", memory_mib=24000)), False),
    ("a device added", node(), node(devices=gpus("GPU-a", "GPU-b", "GPU-c")), False),
    ("the register unreadable", node(), {"metadata": {"name": "n1", "annotations": {REGISTER: "[{"}}},
     False),
    ("a device cordoned", node(), node(extra={names.NODE_DEVICE_CORDON: "GPU-a"}), False),
    ("the plugin gone (handshake expired, no GPUs allocatable)", node(gpu_count="0"),
     node(handshake=REQUESTED_LONG_AGO, gpu_count="0"), False),
    ("the plugin back", node(handshake=REQUESTED_LONG_AGO, gpu_count="0"), node(gpu_count="2"), False),
    ("the handshake expired but GPUs allocatable (plugin not gone)", node(), node(handshake=REQUESTED_LONG_AGO),
     True),
]


@pytest.mark.parametrize(("what", "before", "after", "kept"), CASES, ids=[case[0] for case in CASES])
def test_a_node_event_gives_the_state_a_fresh_read_gives(what: str, before: dict[str, Any], after: dict[str, Any],
                                                        kept: bool) -> None:
    previous = node_state(node_record(before), now=NOW)
    record = node_record(after)
    fresh = node_state(record, now=NOW)
    reused = node_state(record, now=NOW, previous=previous)
    assert reused == fresh, what
    assert reused.record is record and reused.handshake_due == fresh.handshake_due
    assert (reused.inventory is not None and reused.inventory is previous.inventory) is kept, what


def test_a_node_without_a_previous_state_or_with_another_name_is_read_anew() -> None:
    record = node_record(node())
    other: NodeState = node_state(node_record({**node(), "metadata": {**node()["metadata"], "name": "n2"}}), now=NOW)
    state = node_state(record, now=NOW, previous=other)
    assert state.name == "n1" and state.inventory is not None and state.inventory is not other.inventory
    assert state.inventory.name == "n1"


def test_the_handshake_deadline_still_takes_the_devices_away() -> None:
    """A kept inventory does not outlive the plugin: once ``Requesting_`` is older than the handshake timeout (and the
    kubelet reports no GPUs) the same record is judged gone."""
    record = node_record(node(handshake="Requesting_2026-11-27 10:00:00", gpu_count="0"))
    requested = record.families[0].requested_at
    assert requested is not None
    early = node_state(record, now=requested + 1)
    assert early.inventory is not None
    late = node_state(record, now=requested + HANDSHAKE_TIMEOUT_SECONDS + 1, previous=early)
    assert late == node_state(record, now=requested + HANDSHAKE_TIMEOUT_SECONDS + 1)
    assert late.plugin_gone == ("NVIDIA",) and (late.inventory is None or not late.inventory.devices)
