"""The operator tools on Ascend NPUs (``cluster-ascend.yaml``), with ``--enable-ascend``.

Covers: ``inspect`` shows each NPU with its HCCS group or 910C module and each share with the template it runs as
(text and JSON), and no Ascend node without the flag; ``explain`` says which template a pod's memory rounds to and
why (a template, the whole NPU, soft split), places a 4-NPU job across the free NPUs, says why a node's HCCS groups or
910C modules cannot take a job (the NPUs free per group, the whole modules free), and refuses a soft-split pod on a
node that does not allow it with ``ModeNotFit``; ``capacity --family Ascend910B3`` counts template slices.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_web.localcluster import LocalCluster

from .conftest import Run

ASCEND_CLUSTER = Path(__file__).parent / "cluster-ascend.yaml"


@pytest.fixture(scope="module")
def ascend() -> Iterator[LocalCluster]:
    with LocalCluster() as api:
        api.load_file(ASCEND_CLUSTER)
        yield api


def _run(run: Run, api: LocalCluster, *argv: str) -> str:
    outcome = run(*argv, "--enable-ascend", server=api.url)
    assert (outcome.code, outcome.err) == (0, ""), outcome.err
    return outcome.out


def _json(run: Run, api: LocalCluster, *argv: str) -> dict:
    return json.loads(_run(run, api, *argv, "-o", "json"))


def test_inspect_shows_groups_and_templates(run: Run, ascend: LocalCluster) -> None:
    data = _json(run, ascend, "inspect")
    nodes = {node["name"]: node for node in data["nodes"]}
    npus = nodes["ascend-0"]["gpus"]
    assert [gpu["group"] for gpu in npus] == ["HCCS 0"] * 4 + ["HCCS 1"] * 4
    assert npus[0]["pods"] == [{"namespace": "ml", "pod": "small", "container": "main", "memory_mib": 16384,
                                "cores": 0, "template": "vir05_1c_16g"}]
    assert npus[1]["pods"][0]["memory_mib"] == 65536 and "template" not in npus[1]["pods"][0]  # the whole NPU
    assert [gpu["group"] for gpu in nodes["ascend-c"]["gpus"]] == ["module 0", "module 0", "module 1", "module 1"]
    assert data["cluster"]["families"]["Ascend910B3"]["memory_booked_mib"] == 16384 + 3 * 65536
    text = _run(run, ascend, "inspect", "-d")
    assert "Ascend910B3 (HCCS 1)" in text
    assert "16384 (vir05_1c_16g)" in text


def test_inspect_without_the_flag_shows_no_npu(run: Run, ascend: LocalCluster) -> None:
    outcome = run("inspect", "-o", "json", server=ascend.url)
    assert outcome.code == 0
    assert json.loads(outcome.out)["nodes"] == []


@pytest.mark.parametrize(("pod", "template"), [
    ("ml/slice", "vir05_1c_16g (16384 MiB): the smallest template of Ascend910B3 holding 10000 MiB"),
    ("ml/job4", "the whole NPU (65536 MiB): no template of Ascend910B3 holds 65536 MiB (the largest is 32768 MiB)"),
    ("ml/soft", "soft split (hami-core): memory and cores as asked, no template"),
])
def test_explain_says_which_template_the_memory_rounds_to(run: Run, ascend: LocalCluster, pod: str,
                                                          template: str) -> None:
    data = _json(run, ascend, "explain", pod)
    assert [ask["template"] for ask in data["containers"]] == [template]
    assert f"container main: {template}" in _run(run, ascend, "explain", pod)


def test_explain_places_a_job_on_the_free_npus(run: Run, ascend: LocalCluster) -> None:
    data = _json(run, ascend, "explain", "ml/job4")
    assert (data["verdict"], data["node"]) == ("fits", "ascend-0")
    # HCCS: the largest group first (4, 6, 7 of group 1), then group 0's NPU 3.
    assert [gpu["uuid"] for gpu in data["placement"]["main"]] == [
        "Ascend910B3-4", "Ascend910B3-6", "Ascend910B3-7", "Ascend910B3-3"]


def test_explain_says_why_the_groups_cannot_take_a_job(run: Run, ascend: LocalCluster) -> None:
    data = _json(run, ascend, "explain", "ml/job5")
    assert data["verdict"] == "unschedulable"
    assert data["node_reasons"]["ascend-0"] == (
        "4/8 AllocatedCardsInsufficientRequest, 4/8 CardInsufficientMemory")
    assert data["group_reasons"] == {"ascend-0": "Ascend910B3 container main: HCCS groups with a free NPU "
                                                 "(group 0: 1, group 1: 3) hold 4 of the 5 asked"}
    pairs = _json(run, ascend, "explain", "ml/pair4")
    assert pairs["group_reasons"] == {"ascend-c": "Ascend910C container main: 1 whole module(s) free (1) for 4 NPUs; "
                                                  "modules with one NPU free: 0"}
    assert "Groups:" in _run(run, ascend, "explain", "ml/pair4")


def test_explain_a_soft_split_pod_on_a_node_that_does_not_allow_it(run: Run, ascend: LocalCluster) -> None:
    data = _json(run, ascend, "explain", "ml/soft")
    assert data["node_reasons"]["ascend-0"] == "8/8 ModeNotFit"
    assert "huawei.com/vnpu-mode: hami-core" in data["constraints"]


def test_capacity_counts_template_slices(run: Run, ascend: LocalCluster) -> None:
    data = _json(run, ascend, "capacity", "--family", "Ascend910B3", "--gpumem", "16384")
    # Four slices on each of the 4 free NPUs and three beside ml/small on NPU 0 (4 tasks per NPU).
    assert (data["device"], data["fits"], data["by_node"]) == ("Ascend 910B3", 19, {"ascend-0": 19})
