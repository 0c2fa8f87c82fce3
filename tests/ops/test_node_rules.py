"""``explain`` and ``capacity`` apply kube-scheduler's node rules before the GPU rules.

Covers: a pod without toleration on tainted GPU nodes is unschedulable with kube-scheduler's reason grouped
next to the GPU reasons, and the nearest miss names the node whose GPUs would take it; capacity leaves out
tainted, cordoned and unselected nodes with the reason and counts them again for a shape that tolerates or
selects them; a cpu request stops the filling of a node at its allocatable minus what its bound pods request;
nothing left but non-GPU nodes is not reported as "runs out".
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from hami_web.core.policy import SchedulingPolicy
from hami_web.ops.capacity import PodShape, ShapeError, parse_toleration, plan_capacity
from hami_web.ops.explain import UNSCHEDULABLE, explain_pod
from hami_web.ops.snapshot import build_snapshot

from .conftest import CLUSTER

OBJECTS = [doc for doc in yaml.safe_load_all(CLUSTER.read_text()) if doc]
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNTOLERATED = "node(s) had untolerated taint {nvidia.com/gpu: present}"


def snapshot(*, tainted: tuple[str, ...] = (), extra_pods: tuple[dict[str, Any], ...] = ()) -> Any:
    objects = copy.deepcopy(OBJECTS)
    nodes = [o for o in objects if o["kind"] == "Node"]
    for node in nodes:
        if node["metadata"]["name"] in tainted:
            node.setdefault("spec", {})["taints"] = [TAINT]
    return build_snapshot(nodes, [*(o for o in objects if o["kind"] == "Pod"), *extra_pods], node_rules=True)


GPU_NODES = tuple(o["metadata"]["name"] for o in OBJECTS if o["kind"] == "Node"
                  and "hami.io/node-nvidia-register" in (o["metadata"].get("annotations") or {}))


def test_explain_groups_the_taint_with_the_gpu_reasons_and_names_the_held_back_node() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ml", "uid": "p"},
           "spec": {"schedulerName": "hami-scheduler", "containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]}}
    explanation = explain_pod(pod, snapshot(tainted=GPU_NODES), SchedulingPolicy())
    assert explanation.verdict == UNSCHEDULABLE
    causes = {group.cause: group.nodes for group in explanation.groups}
    assert causes[UNTOLERATED] == len(GPU_NODES) - 1  # gpu-a40-c is cordoned: that rule comes first
    assert causes["node(s) were unschedulable"] == 1
    assert explanation.ruled_out_fit.endswith(f"kube-scheduler leaves the node out: {UNTOLERATED}")

    tolerating = copy.deepcopy(pod)
    tolerating["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert explain_pod(tolerating, snapshot(tainted=GPU_NODES), SchedulingPolicy()).verdict == "fits"


def test_capacity_leaves_out_tainted_nodes_unless_the_shape_tolerates_them() -> None:
    tainted = snapshot(tainted=GPU_NODES)
    shape = PodShape(memory_mib=1000)
    refused = plan_capacity(tainted, shape, SchedulingPolicy(), limit=50)
    assert refused.fits == 0 and refused.runs_out_first == ""
    assert {group.cause for group in refused.left_out} == {UNTOLERATED, "node(s) were unschedulable"}
    tolerated = plan_capacity(tainted, PodShape(memory_mib=1000, tolerations=("nvidia.com/gpu:NoSchedule",)),
                              SchedulingPolicy(), limit=50)
    untainted = plan_capacity(snapshot(), shape, SchedulingPolicy(), limit=50)
    assert tolerated.fits == untainted.fits == 50


def test_capacity_node_selector_counts_only_the_selected_node() -> None:
    report = plan_capacity(snapshot(), PodShape(memory_mib=1000, node_selector=("kubernetes.io/hostname=gpu-t4-0",)),
                           SchedulingPolicy())
    assert set(report.by_node) <= {"gpu-t4-0"}
    assert any(group.cause == "node(s) didn't match Pod's node affinity/selector" for group in report.left_out)


def test_a_cpu_request_stops_each_node_at_its_allocatable_minus_bound_pods() -> None:
    # Every GPU node of the cluster has 64 cpu allocatable; a bound pod on gpu-a40-0 requests 60 of them.
    hog = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog", "namespace": "x", "uid": "hog"},
           "spec": {"nodeName": "gpu-a40-0", "containers": [{"name": "c", "resources": {"requests": {"cpu": "60"}}}]},
           "status": {"phase": "Running"}}
    report = plan_capacity(snapshot(extra_pods=(hog,)), PodShape(memory_mib=100, cpu="4"), SchedulingPolicy())
    assert report.by_node["gpu-a40-0"] == 1
    assert all(count <= 16 for count in report.by_node.values())
    assert report.runs_out_first == "Insufficient cpu"


@pytest.mark.parametrize(("text", "toleration"), [
    ("nvidia.com/gpu", {"key": "nvidia.com/gpu", "operator": "Exists"}),
    ("nvidia.com/gpu=present", {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}),
    ("nvidia.com/gpu:NoSchedule", {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
    ("k=v:NoExecute", {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}),
    ("*", {"operator": "Exists"}),
])
def test_toleration_flag_syntax(text: str, toleration: dict[str, str]) -> None:
    assert parse_toleration(text) == toleration


@pytest.mark.parametrize(("text", "named"), [("k:Sometimes", "effect must be one of"), (":NoSchedule", "needs a key")])
def test_a_bad_toleration_names_the_problem(text: str, named: str) -> None:
    with pytest.raises(ShapeError, match=named):
        parse_toleration(text)
