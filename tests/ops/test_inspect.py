"""``inspect``: per node and per GPU, booked memory and cores, pods sharing each card, health and cordon.

Covers (against ``cluster.yaml`` in the in-process API server): cluster totals first, then a row per node and
per GPU, sorted by name (golden); ``-d`` lists each container's share under its GPU and ``-o wide`` adds
NUMA, UUID and task slots, for named nodes only, through ``hami-web inspect`` (golden); ``--top`` keeps the
fullest nodes while the totals still cover all (golden); the JSON numbers (bookings summed per GPU, a
Succeeded pod not counted, a two-container pod counted once, a cordoned GPU, an unhealthy GPU, a cordoned
node, a node whose device plugin is gone, a node whose annotation does not parse shown with the parse
error, a pod whose annotation does not parse listed and not counted); YAML is the same data; ``--selector``
narrows the nodes.
"""

from __future__ import annotations

import json

import yaml

from .conftest import Run, assert_golden


def test_inspect_prints_totals_then_every_gpu_node_and_gpu(run: Run) -> None:
    outcome = run("inspect")
    assert (outcome.code, outcome.err) == (0, "")
    assert_golden("inspect.txt", outcome.out)


def test_details_and_wide_for_named_nodes_through_hami_web(run: Run) -> None:
    outcome = run("inspect", "gpu-t4-0", "gpu-a40-1", "-d", "-o", "wide", entry="hami-web")
    assert outcome.code == 0
    assert_golden("inspect-details-wide.txt", outcome.out)


def test_top_keeps_the_fullest_nodes_and_totals_cover_all(run: Run) -> None:
    outcome = run("inspect", "--top", "2")
    assert outcome.code == 0
    assert_golden("inspect-top.txt", outcome.out)


def test_json_holds_the_schedulers_numbers(run: Run) -> None:
    outcome = run("inspect", "-o", "json")
    assert outcome.code == 0
    data = json.loads(outcome.out)

    totals = {"gpus": 20, "unhealthy_gpus": 1, "cordoned_gpus": 1, "memory_mib": 1_146_760,
              "memory_booked_mib": 569_748, "cores": 2000, "cores_booked": 750, "pods": 10}
    # gpu-broken's only register annotation does not parse: it counts as a node, not as an NVIDIA node.
    assert data["cluster"] == {"nodes": 7, **totals, "families": {"NVIDIA": {"nodes": 6, **totals}}}
    nodes = {node["name"]: node for node in data["nodes"]}
    assert list(nodes) == sorted(nodes)
    assert "cpu-0" not in nodes
    a40 = nodes["gpu-a40-1"]
    assert (a40["status"], a40["totals"]["pods"], a40["totals"]["memory_booked_mib"]) == ("Ready", 3, 68_000)
    gpu0, gpu1 = a40["gpus"][0], a40["gpus"][1]
    assert gpu0["pods"] == [{"namespace": "prod", "pod": "infer-a", "container": "server", "memory_mib": 8000,
                             "cores": 10}]
    assert (gpu0["tasks"], gpu0["task_slots"], gpu0["status"], gpu0["family"]) == (1, 10, "ok", "NVIDIA")
    assert a40["families"] == {"NVIDIA": {"status": "Ready", "totals": a40["totals"]}}
    assert (gpu1["memory_booked_mib"], gpu1["pods"]) == (0, [])  # old-job Succeeded: it holds nothing
    assert nodes["gpu-a100-0"]["gpus"][7]["status"] == "cordoned"
    assert nodes["gpu-t4-0"]["gpus"][1]["status"] == "unhealthy"
    assert nodes["gpu-a40-c"]["status"] == "SchedulingDisabled"
    assert (nodes["gpu-gone"]["status"], nodes["gpu-gone"]["gpus"]) == ("NoDevicePlugin", [])
    assert nodes["gpu-gone"]["families"]["NVIDIA"]["status"] == "NoDevicePlugin"
    broken = nodes["gpu-broken"]
    assert broken["status"] == ("InvalidRegisterAnnotation: hami.io/node-nvidia-register: device 0 (character 0): "
                                "devmem 'lots' is not an integer")
    assert broken["gpus"] == []
    assert list(data["unreadablePods"]) == ["default/corrupt"]


def test_yaml_is_the_same_data_as_json(run: Run) -> None:
    as_json = json.loads(run("inspect", "-o", "json").out)
    assert yaml.safe_load(run("inspect", "-o", "yaml").out) == as_json


def test_selector_narrows_the_nodes(run: Run) -> None:
    data = json.loads(run("inspect", "-l", "kubernetes.io/hostname=gpu-t4-0", "-o", "json").out)
    assert [node["name"] for node in data["nodes"]] == ["gpu-t4-0"]
    assert data["cluster"]["pods"] == 1
