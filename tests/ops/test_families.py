"""The operator tools on a cluster of several device families (``cluster-families.yaml``): NVIDIA, Hygon DCU, a
node with both, a node whose DCU register does not parse, and an Iluvatar node.

Covers: ``inspect`` lists each device with its family, totals per family for the cluster and for a node of
several families (a row per family before its devices), a broken family on a node whose other family works
(golden); the JSON carries the same (each device's family, a pod holding two families counted once per family
and once on the node); the Iluvatar node shows only with ``--enable-iluvatar`` or when the server published
that setting; ``explain`` of a bound DCU pod shows the DCUs it holds, of a pod of two families one ask per
family, of a pending DCU pod the DCU it would get with the DCU's own selection annotation (golden), of a DCU
pod that fits nowhere the per-node reasons naming the family on a node of several; an Iluvatar pod is not
ours until Iluvatar is enabled, and the message lists the enabled families; ``capacity`` stays NVIDIA-shaped
by default and counts DCU nodes as nodes without NVIDIA devices, ``--family DCU`` counts DCUs (whole cards
by HAMi's DCU default), an unknown or disabled family and a selection the family does not have are one-line
errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.publication import publish_settings
from hami_web.settings import Settings

from .conftest import Run, assert_golden

FAMILIES_CLUSTER = Path(__file__).parent / "cluster-families.yaml"


@pytest.fixture(scope="module")
def families() -> Iterator[LocalCluster]:
    """The cluster of several families, shared by the module's read-only tests."""
    with LocalCluster() as api:
        api.load_file(FAMILIES_CLUSTER)
        yield api


def _run(run: Run, families: LocalCluster, *argv: str) -> str:
    outcome = run(*argv, server=families.url)
    assert (outcome.code, outcome.err) == (0, ""), outcome.err
    return outcome.out


def _json(run: Run, families: LocalCluster, *argv: str) -> dict:
    return json.loads(_run(run, families, *argv, "-o", "json"))


# -- inspect ----------------------------------------------------------------------------------------------


def test_inspect_shows_each_device_with_its_family_and_totals_per_family(run: Run, families: LocalCluster) -> None:
    assert_golden("inspect-families.txt", _run(run, families, "inspect", "-d"))


def test_inspect_json_counts_per_family(run: Run, families: LocalCluster) -> None:
    data = _json(run, families, "inspect")
    cluster = data["cluster"]
    assert (cluster["nodes"], cluster["gpus"], cluster["pods"]) == (4, 7, 2)
    assert {cw: (f["nodes"], f["gpus"], f["memory_booked_mib"], f["pods"])
            for cw, f in cluster["families"].items()} == {"DCU": (3, 3, 16384 + 8000, 2),
                                                          "NVIDIA": (3, 4, 4000, 1)}
    nodes = {node["name"]: node for node in data["nodes"]}
    assert [(gpu["uuid"], gpu["family"], gpu["type"]) for gpu in nodes["dcu-0"]["gpus"]] == [
        ("DCU-0", "DCU", "DCU-BW100"), ("DCU-1", "DCU", "DCU-BW100")]
    assert nodes["dcu-0"]["gpus"][0]["pods"] == [{"namespace": "ml", "pod": "dcu-job", "container": "main",
                                                  "memory_mib": 16384, "cores": 50}]
    mixed = nodes["mixed-0"]
    assert mixed["totals"]["pods"] == 1  # ml/both holds a device of each family: one pod on the node
    assert {cw: (f["status"], f["totals"]["gpus"], f["totals"]["memory_booked_mib"], f["totals"]["pods"])
            for cw, f in mixed["families"].items()} == {"DCU": ("Ready", 1, 8000, 1), "NVIDIA": ("Ready", 1, 4000, 1)}
    broken = nodes["mixed-broken"]
    assert broken["status"] == "Ready"  # its A40 still takes pods
    assert broken["families"]["DCU"]["status"] == (
        "InvalidRegisterAnnotation: hami.io/node-dcu-register: device 0 (character 0): devmem 'lots' is not an "
        "integer")
    assert [gpu["family"] for gpu in broken["gpus"]] == ["NVIDIA"]
    assert "iluvatar-0" not in nodes


def test_inspect_counts_iluvatar_when_enabled_by_flag(run: Run, families: LocalCluster) -> None:
    data = _json(run, families, "inspect", "iluvatar-0", "--enable-iluvatar")
    (node,) = data["nodes"]
    assert [(gpu["family"], gpu["memory_mib"]) for gpu in node["gpus"]] == [("MR-V100", 8192), ("MR-V100", 8192)]
    refused = run("inspect", "iluvatar-0", server=families.url)
    assert (refused.code, refused.err) == (
        1, "Error: node \"iluvatar-0\" has no devices registered by HAMi's device plugins\n")


def test_inspect_counts_the_families_the_server_published(run: Run) -> None:
    with LocalCluster() as api:
        api.load_file(FAMILIES_CLUSTER)
        kube = Kube.for_url(api.url)
        publish_settings(kube, Settings.of(enable_iluvatar=True))
        kube.close()
        data = json.loads(run("inspect", "-o", "json", server=api.url).out)
    assert set(data["cluster"]["families"]) == {"DCU", "MR-V100", "NVIDIA"}


# -- explain ----------------------------------------------------------------------------------------------


def test_explain_a_bound_dcu_pod_shows_the_dcu_it_holds(run: Run, families: LocalCluster) -> None:
    data = _json(run, families, "explain", "ml/dcu-job")
    assert (data["verdict"], data["node"], data["message"]) == (
        "scheduled", "dcu-0", "the pod is already bound to node dcu-0")
    assert data["containers"] == [{"name": "main", "init": False, "gpus": 1, "memory": "16384 MiB", "cores": 50,
                                   "family": "DCU", "device": "Hygon DCU"}]
    assert data["placement"] == {"main": [{"index": 0, "uuid": "DCU-0", "type": "DCU-BW100", "memory_mib": 16384,
                                           "cores": 50, "family": "DCU"}]}


def test_explain_a_pod_of_two_families_lists_an_ask_and_a_device_per_family(run: Run, families: LocalCluster
                                                                            ) -> None:
    data = _json(run, families, "explain", "ml/both")
    assert [(ask["name"], ask["family"], ask["memory"]) for ask in data["containers"]] == [
        ("main", "DCU", "8000 MiB"), ("main", "NVIDIA", "4000 MiB")]
    assert [(gpu["family"], gpu["uuid"]) for gpu in data["placement"]["main"]] == [
        ("DCU", "DCU-mixed-0-0"), ("NVIDIA", "GPU-mixed-0-0")]


def test_explain_a_pending_dcu_pod_with_its_type_selection(run: Run, families: LocalCluster) -> None:
    assert_golden("explain-dcu-fits.txt", _run(run, families, "explain", "ml/dcu-small"))


def test_explain_a_dcu_pod_that_fits_nowhere_names_the_family_on_a_node_of_several(run: Run, families: LocalCluster
                                                                                  ) -> None:
    data = _json(run, families, "explain", "ml/dcu-huge")
    assert data["verdict"] == "unschedulable"
    assert data["node_reasons"]["dcu-0"] == "2/2 CardInsufficientMemory"
    assert data["node_reasons"]["mixed-0"] == "DCU: 1/1 CardInsufficientMemory"
    assert data["node_reasons"]["mixed-broken"].startswith("DCU: InvalidRegisterAnnotation: hami.io/node-dcu-register")


def test_an_iluvatar_pod_is_ours_only_with_iluvatar_enabled(run: Run, families: LocalCluster) -> None:
    disabled = _json(run, families, "explain", "ml/iluvatar-small")
    assert (disabled["verdict"], disabled["message"]) == (
        "no-gpu", "this pod does not ask for a device of an enabled family (AMD, AWSNeuron, Biren, DCU, Enflame, GCU, "
                  "MLU, Metax-GPU, Metax-SGPU, Mthreads, NVIDIA, Vastai, XPU, kunlun); "
                  "hami-web does not "
                  "schedule it")
    enabled = _json(run, families, "explain", "ml/iluvatar-small", "--enable-iluvatar")
    assert (enabled["verdict"], enabled["node"]) == ("fits", "iluvatar-0")
    # vMem 8 is 8 x 256 MiB.
    assert [(a["family"], a["device"], a["memory"]) for a in enabled["containers"]] == [
        ("MR-V100", "Iluvatar MR-V100", "2048 MiB")]
    assert enabled["settings_source"].endswith("overridden by --enable-iluvatar")


# -- capacity ---------------------------------------------------------------------------------------------


def test_capacity_stays_nvidia_shaped_by_default_on_a_cluster_with_dcus(run: Run, families: LocalCluster) -> None:
    data = _json(run, families, "capacity")
    assert (data["shape"]["family"], data["device"], data["fits"]) == ("NVIDIA", "NVIDIA GPU", 3)
    assert data["by_node"] == {"gpu-a40-0": 2, "mixed-broken": 1}
    assert {"cause": "NodeInsufficientDevice", "nodes": 1, "gpus": 0, "examples": ["dcu-0"]} in data["exhausted"]


def test_capacity_of_dcus_counts_whole_cards_by_default(run: Run, families: LocalCluster) -> None:
    data = _json(run, families, "capacity", "--family", "DCU")
    # HAMi's DCU default is the whole card's cores: only the idle DCU-1 of dcu-0 takes one.
    assert (data["device"], data["cores_per_device"], data["fits"], data["by_node"]) == (
        "Hygon DCU", 100, 1, {"dcu-0": 1})
    shared = _json(run, families, "capacity", "--family", "DCU", "--gpumem", "8000", "--gpucores", "10",
                   "--type", "BW100")
    assert shared["by_gpu_type"] == {"DCU-BW100": shared["fits"]} and shared["by_node"] == {"dcu-0": 7}


@pytest.mark.parametrize(("argv", "message"), [
    (["--family", "MR-V100"],
     "error: family 'MR-V100' is not enabled (enabled: AMD, AWSNeuron, Biren, DCU, Enflame, GCU, MLU, Metax-GPU, "
     "Metax-SGPU, Mthreads, NVIDIA, Vastai, XPU, kunlun)"),
    (["--family", "DCU", "--gpumem-percentage", "50"], "error: Hygon DCU (DCU) has no memory percentage"),
    (["--family", "DCU", "--numa-bind"], "error: Hygon DCU (DCU) has no NUMA binding"),
    (["--family", "MR-V100", "--enable-iluvatar", "--type", "x"],
     "error: Iluvatar MR-V100 (MR-V100) has no type selection"),
])
def test_capacity_refuses_a_family_or_selection_it_cannot_count(run: Run, families: LocalCluster, argv: list[str],
                                                                 message: str) -> None:
    outcome = run("capacity", *argv, server=families.url)
    assert (outcome.code, outcome.out, outcome.err) == (1, "", message + "\n")


def test_a_refusal_on_a_node_of_several_families_is_grouped_by_its_cause(run: Run, families: LocalCluster) -> None:
    data = _json(run, families, "explain", "ml/dcu-huge")
    causes = {group["cause"]: group["examples"] for group in data["groups"]}
    assert "Other" not in causes
    assert causes["CardInsufficientMemory"] == ["dcu-0", "mixed-0"]
