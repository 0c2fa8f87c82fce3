"""The operator tools on Cambricon MLUs, whose inventory is the node's capacity
(docs/device-families.md#device-families).

Covers: ``inspect`` lists the cards of a node that carries no annotation at all (ids, type from the ``Model`` label,
memory from the capacity), what a bound MLU pod holds, the family's totals, and a node whose MLU capacity is
unreadable with the reason; ``explain`` of the bound pod shows its card, of a pending pod the card it would get (the
vmemory in units of 256 MiB), of a pod selecting another model ``CardTypeMismatch`` on a node of a known model and
the node whose model is unknown as its place (the selection cannot be judged there and is ignored, as HAMi v2.10
ignores it);
``capacity --family MLU`` counts whole cards by the MLU default and shares with ``--gpumem``/``--gpucores``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hami_web.localcluster import LocalCluster

from .conftest import Run

VCORE = "cambricon.com/mlu.smlu.vcore"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"


def _node(name: str, capacity: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity}}


def _pod(name: str, limits: dict[str, str], *, annotations: dict[str, str] | None = None,
         node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "hami-scheduler",
                            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


BOOKED = "mlu-a-cambricon-mlu-1,MLU,12288,50:;"


@pytest.fixture(scope="module")
def mlus() -> Iterator[LocalCluster]:
    """``mlu-a``: 2 MLU370-X4 cards of 24 GiB, card 1 half used by ``ml/mlu-job``; ``mlu-nomodel``: one card, no
    model label; ``mlu-bad``: an unreadable vcore capacity."""
    with LocalCluster() as api:
        api.load([
            _node("mlu-a", {VCORE: "200", VMEMORY: "192", "cpu": "8"}, {"Model": "MLU370-X4"}),
            _node("mlu-nomodel", {VCORE: "100", VMEMORY: "96", "cpu": "8"}, {}),
            _node("mlu-bad", {VCORE: "lots", "cpu": "8"}, {}),
            _pod("mlu-job", {"cambricon.com/vmlu": "1", VMEMORY: "48", VCORE: "50"}, node="mlu-a", annotations={
                "hami.io/vgpu-node": "mlu-a", "hami.io/bind-phase": "success",
                "hami.io/cambricon-mlu-devices-to-allocate": BOOKED,
                "hami.io/cambricon-mlu-devices-allocated": BOOKED}),
            _pod("mlu-small", {"cambricon.com/vmlu": "1", VMEMORY: "8", VCORE: "10"}),
            _pod("mlu-typed", {"cambricon.com/vmlu": "1"}, annotations={"cambricon.com/use-mlutype": "MLU290"}),
        ])
        yield api


def _json(run: Run, api: LocalCluster, *argv: str) -> dict[str, Any]:
    outcome = run(*argv, "-o", "json", server=api.url)
    assert (outcome.code, outcome.err) == (0, ""), outcome.err
    data: dict[str, Any] = json.loads(outcome.out)
    return data


def test_inspect_lists_the_cards_read_from_capacity(run: Run, mlus: LocalCluster) -> None:
    data = _json(run, mlus, "inspect")
    nodes = {node["name"]: node for node in data["nodes"]}
    cards = nodes["mlu-a"]["gpus"]
    assert [(gpu["uuid"], gpu["family"], gpu["type"], gpu["memory_mib"]) for gpu in cards] == [
        ("mlu-a-cambricon-mlu-0", "MLU", "MLU370-X4", 24576), ("mlu-a-cambricon-mlu-1", "MLU", "MLU370-X4", 24576)]
    assert cards[1]["pods"] == [{"namespace": "ml", "pod": "mlu-job", "container": "main", "memory_mib": 12288,
                                 "cores": 50}]
    assert [gpu["type"] for gpu in nodes["mlu-nomodel"]["gpus"]] == ["MLU"]
    family = data["cluster"]["families"]["MLU"]
    assert (family["nodes"], family["gpus"], family["memory_booked_mib"], family["pods"]) == (2, 3, 12288, 1)
    bad = run("inspect", "mlu-bad", server=mlus.url)
    assert bad.code == 0 and f"MLU: status.capacity[{VCORE}]: 'lots' is not a whole number" in bad.out


def test_explain_a_bound_mlu_pod_shows_its_card(run: Run, mlus: LocalCluster) -> None:
    data = _json(run, mlus, "explain", "ml/mlu-job")
    assert (data["verdict"], data["node"]) == ("scheduled", "mlu-a")
    assert data["placement"] == {"main": [{"index": 1, "uuid": "mlu-a-cambricon-mlu-1", "type": "MLU370-X4",
                                           "memory_mib": 12288, "cores": 50, "family": "MLU"}]}


def test_explain_a_pending_mlu_pod_in_units_of_256_mib(run: Run, mlus: LocalCluster) -> None:
    data = _json(run, mlus, "explain", "ml/mlu-small")
    assert data["verdict"] == "fits"
    assert data["containers"] == [{"name": "main", "init": False, "gpus": 1, "memory": "2048 MiB", "cores": 10,
                                   "family": "MLU", "device": "Cambricon MLU"}]


def test_explain_a_type_selection_against_a_model_and_where_the_model_is_unknown(run: Run, mlus: LocalCluster
                                                                                 ) -> None:
    data = _json(run, mlus, "explain", "ml/mlu-typed")
    assert (data["verdict"], data["node"]) == ("fits", "mlu-nomodel")
    assert "mlu-a" not in data.get("node_reasons", {})  # a fitting pod lists no refusals


def test_capacity_of_mlus(run: Run, mlus: LocalCluster) -> None:
    whole = _json(run, mlus, "capacity", "--family", "MLU")
    # The MLU default is the whole card: only the idle cards take one (mlu-a's card 0, mlu-nomodel's).
    assert (whole["device"], whole["cores_per_device"], whole["fits"], whole["by_node"]) == (
        "Cambricon MLU", 100, 2, {"mlu-a": 1, "mlu-nomodel": 1})
    # 48 units are 12288 MiB at 50 % cores: two on each idle card, one more beside mlu-job.
    shared = _json(run, mlus, "capacity", "--family", "MLU", "--gpumem", "48", "--gpucores", "50")
    assert (shared["fits"], shared["by_node"]) == (5, {"mlu-a": 3, "mlu-nomodel": 2})
