"""The operator tools on dynamic MIG GPUs (docs/mig.md#dynamic-mig): a node with two A100-40GB in MIG mode, GPU-a
holding a 1g.5gb at slice 6 and a 3g.20gb at slices 0-3, GPU-b empty; a node whose GPU fails closed (a pod holds
it without a reservation); a pre-2.10 geometry node with an old pod.

Covers: ``inspect`` lists each MIG GPU's instances (placement, profile, pod), its free placements per profile, why
a GPU fails closed and the pre-2.10 entries (text and JSON, ``-d`` naming each pod's instance); ``explain`` shows
the profile and placement a pending pod would get, and for a pod no MIG GPU takes the profile it needs and how
many GPUs have a free placement, or that no profile is that large; ``capacity --mig-profile 2g.10gb`` counts the
2g.10gb pods that fit now and the instances they get, and an unknown profile is a one-line error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from tests.core.builders import a100_mig_register

from .conftest import Run

HANDSHAKE = "Requesting_2099-01-01 00:00:00"


def _node(name: str, register: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {names.NODE_REGISTER: register, names.NODE_HANDSHAKE: HANDSHAKE}},
            "status": {"allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "pods": "110"}}}


def _pod(name: str, node: str | None, memory_mib: int, *, devices: str = "", reservations: Any = None,
         count: int = 1) -> dict[str, Any]:
    annotations = {"nvidia.com/vgpu-mode": "mig"}
    if node:
        annotations.update({names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: devices})
    if reservations is not None:
        annotations[names.POD_MIG_RESERVATIONS] = json.dumps(reservations)
    limits = {"nvidia.com/gpu": str(count), "nvidia.com/gpumem": str(memory_mib)}
    spec: dict[str, Any] = {"schedulerName": "hami-scheduler",
                            "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "annotations": annotations},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def _reservation(gpu: str, profile: str, start: int, size: int) -> dict[str, Any]:
    return {"containerIndex": 0, "deviceIndex": 0, "gpuUUID": gpu, "profile": profile,
            "placement": {"start": start, "size": size}}


@pytest.fixture(scope="module")
def mig() -> Iterator[LocalCluster]:
    with LocalCluster() as api:
        api.load([
            _node("a100", a100_mig_register("GPU-a", "GPU-b")),
            _node("broken", a100_mig_register("GPU-c")),
            _node("h100", "GPU-h,10,95830,100,NVIDIA-NVIDIA H100 NVL,0,true,0,mig:"),
            _pod("small", "a100", 4000, devices="GPU-a,NVIDIA,4864,14:;",
                 reservations=[_reservation("GPU-a", "1g.5gb", 6, 1)]),
            _pod("large", "a100", 15000, devices="GPU-a,NVIDIA,19968,43:;",
                 reservations=[_reservation("GPU-a", "3g.20gb", 0, 4)]),
            _pod("stray", "broken", 4000, devices="GPU-c,NVIDIA,4864,14:;"),
            _pod("old", "h100", 10240, devices="GPU-h[1-0],NVIDIA,10240,28:;"),
            _pod("pending", None, 9000),
            _pod("too-big", None, 40500),
            _pod("no-room", None, 15000, count=3),
        ])
        yield api


def _run(run: Run, cluster: LocalCluster, *argv: str) -> str:
    outcome = run(*argv, server=cluster.url)
    assert (outcome.code, outcome.err) == (0, ""), outcome.err
    return outcome.out


def test_inspect_shows_instances_free_placements_and_faults(run: Run, mig: LocalCluster) -> None:
    out = _run(run, mig, "inspect", "-d")
    lines = [line.strip() for line in out.splitlines()]
    assert "mig 0+4 3g.20gb default/large" in lines
    assert "mig 6+1 1g.5gb default/small" in lines
    assert "free 1g.5gb@4,5 1g.10gb@4 2g.10gb@4" in lines
    assert "free 1g.5gb@0,1,2,3,4,5,6 1g.10gb@0,2,4,6 2g.10gb@0,2,4 3g.20gb@0,4 4g.20gb@0 7g.40gb@0" in lines
    assert any(line.startswith("fails closed: GPU GPU-c: device entry without a MIG reservation (pods default/stray)")
               for line in lines)
    assert "pre-2.10 MIG geometry: 1 entries; drain and migrate" in lines
    assert any(line.startswith("- default/small [main] 1g.5gb@6+1") for line in lines)
    # The notes sit under the GPU's row without widening its columns.
    raw = out.splitlines()
    header = next(line for line in raw if line.startswith("NODE"))
    gpu_row = raw[raw.index(next(line for line in raw if line.strip() == "mig 0+4 3g.20gb default/large")) - 1]
    assert gpu_row.index("24832/40960") == header.index("MEMORY(MiB)") < 64  # the free-placement note is 90 wide


def test_inspect_json_carries_the_layout(run: Run, mig: LocalCluster) -> None:
    data = json.loads(_run(run, mig, "inspect", "-o", "json"))
    gpus = {gpu["uuid"]: gpu for node in data["nodes"] for gpu in node["gpus"]}
    assert gpus["GPU-a"]["mig"]["slices"] == 8
    assert [(i["profile"], i["start"], i["pod"]) for i in gpus["GPU-a"]["mig"]["instances"]] == [
        ("3g.20gb", 0, "default/large"), ("1g.5gb", 6, "default/small")]
    assert gpus["GPU-a"]["mig"]["free"]["2g.10gb"] == [4]
    assert gpus["GPU-c"]["status"] == "unhealthy" and "stray" in gpus["GPU-c"]["migFault"]
    assert gpus["GPU-h"]["legacyMigEntries"] == 1 and "mig" not in gpus["GPU-h"]


def test_explain_names_the_instance_a_pod_would_get(run: Run, mig: LocalCluster) -> None:
    data = json.loads(_run(run, mig, "explain", "pending", "-o", "json"))
    assert data["verdict"] == "fits"
    assert [(gpu["uuid"], gpu["mig"]) for gpu in data["placement"]["main"]] == [("GPU-b", "1g.10gb@6+2")]
    assert "1g.10gb@6+2" in _run(run, mig, "explain", "pending")


@pytest.mark.parametrize(("pod", "note"), [
    ("too-big", "container main asks 40500 MiB: no MIG profile is that large (the largest offered is 7g.40gb "
                "(40192 MiB))"),
    ("no-room", "container main asks 15000 MiB: it needs 3g.20gb (19968 MiB) or larger; 2 of 3 MIG GPUs have a "
                "free placement for one"),
])
def test_explain_says_why_no_mig_gpu_takes_a_pod(run: Run, mig: LocalCluster, pod: str, note: str) -> None:
    data = json.loads(_run(run, mig, "explain", pod, "-o", "json"))
    assert data["verdict"] == "unschedulable"
    assert data["mig"] == [note]
    assert note.split(":")[0] in _run(run, mig, "explain", pod)


def test_capacity_counts_pods_of_one_profile(run: Run, mig: LocalCluster) -> None:
    data = json.loads(_run(run, mig, "capacity", "--mig-profile", "2g.10gb", "-o", "json"))
    # GPU-a: only slices 4-5 are free for a 2g.10gb; GPU-b: three.
    assert data["fits"] == 4
    assert data["by_mig_profile"] == {"2g.10gb": 4}
    assert data["memory_mib_per_device"] == 9984
    out = _run(run, mig, "capacity", "--mig-profile", "2g.10gb")
    assert "MIG profile 2g.10gb" in out and "4 more pods" in out


def test_capacity_of_an_unknown_profile_is_an_error(run: Run, mig: LocalCluster) -> None:
    outcome = run("capacity", "--mig-profile", "9g.90gb", server=mig.url)
    assert outcome.code != 0
    assert "no MIG GPU offers profile '9g.90gb' (offered: 1g.10gb, 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb)" in (
        outcome.err)
