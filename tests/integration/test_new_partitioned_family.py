"""A partitioned family is one module and one registry line too: the partitioning seam
(`hami_web.core.partitions.Partitioning`) is what NVIDIA's dynamic MIG and Enflame's DRS go through, and a made-up
family using it schedules end to end (docs/device-families.md#partitioned-devices-enflame-drs).

Covers: the made-up Omega family of `newfamily.omega` (its module holds its own `Partitioning`: OPUs of four
quarters, a profile placed per grant) added by one line of ``hami_web.core.families.registry.REGISTRY``; then in
process against the API: ``/filter`` and ``/bind`` give one container two partitions of the node's one OPU (several of
one device), the next pod the aligned half left, the bind writing the device annotation and the placements its device
plugin reads; a third pod finds no free quarter and is refused with the family's own reason; and a second server,
starting from the pods alone, reads the placements back and refuses it the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import build_catalog, registry
from hami_web.localcluster import LocalCluster

from .helpers import RuntimeFactory, Scheduler, annotations_of, container, gpu_pod, plain_node
from .newfamily import omega

# What adding Omega needed: the family's module, and one line in the registry (the monkeypatch below is that line).
FILES_NEEDED = (Path(omega.__file__).name, "hami_web/core/families/registry.py (one line: omega.SPEC)")


@pytest.fixture(autouse=True)
def omega_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one registry line: ``REGISTRY = (..., omega.SPEC)``."""
    monkeypatch.setattr(registry, "REGISTRY", (*registry.REGISTRY, omega.SPEC))


def _omega_node(name: str) -> dict[str, Any]:
    node = plain_node(name)
    opu = Device(uuid=f"{name}-opu0", index=0, count=4, memory_mib=65536, cores=100, type="Omega-O1", family=omega.CW)
    node["metadata"].setdefault("annotations", {})[omega.REGISTER_KEY] = encode_register_json([opu])
    node["status"]["allocatable"][omega.DEFAULT_RESOURCES.count] = "4"
    return node


def _opu_pod(name: str, count: int, memory_mib: int) -> dict[str, Any]:
    return gpu_pod(name, containers=[container("main", {"omega.example.com/opu": str(count),
                                                        "omega.example.com/opu-mem": str(memory_mib)})])


def test_the_made_up_partitioned_family_needed_one_module_and_one_registry_line() -> None:
    assert FILES_NEEDED == ("omega.py", "hami_web/core/families/registry.py (one line: omega.SPEC)")
    catalog = build_catalog()
    assert catalog["Omega"] == omega.omega_family(omega.DEFAULT_RESOURCES)
    assert catalog.partitionings()["Omega"] == omega.OpuQuarters()


def test_an_omega_pod_gets_placed_partitions_end_to_end(apiserver: LocalCluster,
                                                         make_runtime: RuntimeFactory) -> None:
    apiserver.load([_omega_node("omega-node"), plain_node("cpu-node"),
                    _opu_pod("two-quarters", 2, 4096), _opu_pod("half", 1, 16000), _opu_pod("one-more", 1, 4096)])
    scheduler = Scheduler(make_runtime().app.test_client(), apiserver)

    assert scheduler.schedule("two-quarters", ["cpu-node", "omega-node"]) == "omega-node"
    stored = annotations_of(apiserver, "pods", "two-quarters")
    assert stored[omega.ALLOCATED_KEY] == "omega-node-opu0,Omega,8192,10:omega-node-opu0,Omega,8192,10:;"
    assert json.loads(stored[omega.PARTITIONS_KEY]) == {"omega-node-opu0": [["1q", 0, 1], ["1q", 1, 1]]}

    assert scheduler.schedule("half", ["omega-node"]) == "omega-node"
    assert json.loads(annotations_of(apiserver, "pods", "half")[omega.PARTITIONS_KEY]) == {
        "omega-node-opu0": [["2q", 2, 2]]}

    refused = scheduler.filter("one-more", ["omega-node"])
    assert refused["NodeNames"] == [] and refused["FailedNodes"]["omega-node"] == f"1/1 {omega.NO_FREE_QUARTER}"

    restarted = Scheduler(make_runtime().app.test_client(), apiserver)  # the occupancy read back from the pods
    again = restarted.filter("one-more", ["omega-node"])
    assert again["NodeNames"] == [] and again["FailedNodes"]["omega-node"] == f"1/1 {omega.NO_FREE_QUARTER}"
