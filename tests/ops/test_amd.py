"""``kubectl hami`` on AMD GPUs (docs/device-families.md#device-families), on by default like HAMi v2.10.

Covers: ``inspect`` lists each GPU with its family and product type and counts a bound pod's compute units on its GPU
(read back from ``hami.io/amd-devices-allocated``, whose type field is the product type); ``capacity --family AMD``
counts the GPUs a shape still fits; ``explain`` of a pending AMD pod names the node it would get; a node whose
``amd.com/gpu`` capacity is 0 shows the family's device plugin as gone.
"""

from __future__ import annotations

import json
from typing import Any

from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster

from .conftest import Run, hami_pod

PRODUCT = "AMD_Instinct_MI300X"


def _node(name: str, capacity: str = "2") -> dict[str, Any]:
    devices = [Device(uuid=f"{name}-{i}", index=i, count=4, memory_mib=196608, cores=304, type=PRODUCT, family="AMD")
               for i in range(2)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"hami.io/node-amd-register": encode_register_json(devices)}},
            "status": {"capacity": {"amd.com/gpu": capacity}, "allocatable": {"amd.com/gpu": capacity}}}


def test_inspect_capacity_and_explain_know_amd_gpus(run: Run, cluster: LocalCluster) -> None:
    cluster.load([
        _node("amd-0"), _node("amd-gone", capacity="0"),
        hami_pod("amd-job", {"amd.com/gpu": "1", "amd.com/gpumem": "4096", "amd.com/gpucores": "50"}, {
            "hami.io/vgpu-node": "amd-0", "hami.io/bind-phase": "success",
            "hami.io/amd-devices-allocated": f"amd-0-0,{PRODUCT},4096,152:;"}, node="amd-0"),
        hami_pod("amd-wait", {"amd.com/gpu": "1", "amd.com/gpucores": "60"}),
    ])
    outcome = run("inspect", "-o", "json")
    assert (outcome.code, outcome.err) == (0, "")
    nodes = {node["name"]: node for node in json.loads(outcome.out)["nodes"]}
    assert [(gpu["uuid"], gpu["family"], gpu["type"], gpu["tasks"], gpu["cores_booked"], gpu["cores"])
            for gpu in nodes["amd-0"]["gpus"]] == [
        ("amd-0-0", "AMD", PRODUCT, 1, 152, 304), ("amd-0-1", "AMD", PRODUCT, 0, 0, 304)]
    assert nodes["amd-gone"]["gpus"] == []

    capacity = run("capacity", "--family", "AMD", "--gpucores", "60", "-o", "json")
    assert capacity.code == 0, capacity.err
    assert json.loads(capacity.out)["fits"] == 1  # 60 % is 182 units: only the idle GPU has them

    explained = run("explain", "ml/amd-wait", "-o", "json")
    assert explained.code == 0, explained.err
    data = json.loads(explained.out)
    assert (data["verdict"], data["node"]) == ("fits", "amd-0")
