"""``kubectl hami`` on nodes of the families read from capacity (docs/device-families.md#device-families): Enflame GCU,
Metax GPU and Moore Threads, on by default like HAMi v2.10.

Covers: ``inspect`` lists each card with its family and counts a bound GCU pod on its card (read back from
``hami.io/enflame-gcu-devices-allocated``), the Moore Threads cards with their 512 MiB units in MiB; ``capacity
--family GCU`` counts the free whole GCUs; ``explain`` of a pending Metax pod names the card it would get.
"""

from __future__ import annotations

import json
from typing import Any

from hami_web.localcluster import LocalCluster

from .conftest import Run, hami_pod


def _node(name: str, capacity: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"capacity": capacity, "allocatable": capacity}}


def _cluster(cluster: LocalCluster) -> None:
    cluster.load([
        _node("gcu-0", {"enflame.com/gcu": "2"}),
        _node("metax-0", {"metax-tech.com/gpu": "1"}),
        _node("mt-0", {"mthreads.com/sgpu-core": "16", "mthreads.com/sgpu-memory": "96"}),
        hami_pod("gcu-job", {"enflame.com/gcu": "1"}, {
            "hami.io/vgpu-node": "gcu-0", "hami.io/bind-phase": "success",
            "hami.io/enflame-gcu-devices-allocated": "gcu-0-GCU-0,GCU,100,100:;"}, node="gcu-0"),
        hami_pod("metax-wait", {"metax-tech.com/gpu": "1"}),
    ])


def test_inspect_capacity_and_explain_know_the_families_read_from_capacity(run: Run, cluster: LocalCluster) -> None:
    _cluster(cluster)
    outcome = run("inspect", "-o", "json")
    assert (outcome.code, outcome.err) == (0, "")
    nodes = {node["name"]: node for node in json.loads(outcome.out)["nodes"]}
    assert [(gpu["uuid"], gpu["family"], gpu["tasks"]) for gpu in nodes["gcu-0"]["gpus"]] == [
        ("gcu-0-GCU-0", "GCU", 1), ("gcu-0-GCU-1", "GCU", 0)]
    assert [(gpu["uuid"], gpu["family"], gpu["memory_mib"]) for gpu in nodes["mt-0"]["gpus"]] == [
        ("mt-0-mthreads-0", "Mthreads", 96 * 512)]

    capacity = run("capacity", "--family", "GCU", "-o", "json")
    assert capacity.code == 0, capacity.err
    assert json.loads(capacity.out)["fits"] == 1  # the one free GCU

    explained = run("explain", "ml/metax-wait", "-o", "json")
    assert explained.code == 0, explained.err
    data = json.loads(explained.out)
    assert (data["verdict"], data["node"]) == ("fits", "metax-0")
