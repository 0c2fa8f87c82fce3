"""``explain`` and the real kube-scheduler agree on kube-scheduler's own node rules.

Covers: GPU nodes tainted ``nvidia.com/gpu=present:NoSchedule`` keep a pod without a toleration Pending with
the same per-reason node counts in kube-scheduler's ``FailedScheduling`` event as in ``explain``, while a pod
that tolerates the taint is bound where ``explain`` said; a node selector (and required node affinity) to a
pool with no node; a cordoned node. The counts cover every node of the session's cluster, so kube-scheduler's
wording of each reason is checked too. ``kubectl hami explain`` with only ``--kubeconfig`` uses the settings
hami-web published under its own ServiceAccount's RBAC.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from hami_web.core.policy import SchedulingPolicy
from hami_web.kube import Kube
from hami_web.ops.command import kubectl_main
from hami_web.ops.explain import FITS, UNSCHEDULABLE, Explanation, explain_pod
from hami_web.ops.snapshot import read_snapshot

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
_AVAILABLE = re.compile(r"^0/(\d+) nodes are available: (.*?)\.(?: preemption:.*)?$", re.S)
_COUNTED = re.compile(r"(\d+) (.+?)(?:, (?=\d+ )|$)")


def scheduler_reasons(message: str) -> tuple[int, dict[str, int]]:
    """``0/7 nodes are available: 1 node(s) were unschedulable, 6 …`` as (7, {reason: nodes})."""
    matched = _AVAILABLE.match(message.strip())
    assert matched, f"not a FailedScheduling message: {message!r}"
    return int(matched.group(1)), {reason: int(count) for count, reason in _COUNTED.findall(matched.group(2))}


def explain(control_plane: ControlPlane, pod: dict[str, Any]) -> Explanation:
    """What ``kubectl hami explain`` computes for ``pod`` on the cluster as the API shows it now."""
    kube = Kube.from_kubeconfig(str(control_plane.admin_kubeconfig))
    try:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        snapshot = read_snapshot(kube, leave_out_pod_uid=uid, node_rules=True)
    finally:
        kube.close()
    return explain_pod(pod, snapshot, SchedulingPolicy())


def explained_reasons(explanation: Explanation) -> tuple[int, dict[str, int]]:
    return len(explanation.node_reasons), {group.cause: group.nodes for group in explanation.groups}


def assert_pending_for_the_same_reasons(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, int]:
    """Wait until kube-scheduler's latest FailedScheduling event and ``explain`` give the same node counts."""
    seen: list[Any] = []

    def agreeing() -> bool:
        events = [e for e in control_plane.events(namespace, name) if e.reason == "FailedScheduling"]
        if not events:
            return False
        pod = control_plane.api_client.sanitize_for_serialization(control_plane.pod(namespace, name))
        explanation = explain(control_plane, pod)
        seen[:] = [events[-1].message, explanation.verdict, explained_reasons(explanation)]
        return explanation.verdict == UNSCHEDULABLE and scheduler_reasons(events[-1].message) == seen[2]

    try:
        wait_until(agreeing, timeout_seconds=30.0, what=f"kube-scheduler and explain to agree on {name}",
                   interval_seconds=0.5)
    except TimeoutError as error:
        pytest.fail(f"{error}; kube-scheduler: {seen[0] if seen else 'no event'}; explain: {seen[1:]}")
    assert control_plane.pod(namespace, name).spec.node_name is None
    return seen[2][1]


@pytest.fixture
def tainted_pool(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """Two GPU nodes tainted as GPU clusters usually are, selected by a per-test label."""
    label = {"e2e.hami.io/pool": namespace}
    for suffix in ("a", "b"):
        name = f"{namespace}-tainted-{suffix}"
        control_plane.create_gpu_node(name, devices(name, 2, memory_mib=46068, type=A40), labels=label)
        control_plane.core.patch_node(name, {"spec": {"taints": [GPU_TAINT]}})
    return label


def test_a_pod_without_toleration_stays_off_tainted_gpu_nodes_as_explain_says(
        control_plane: ControlPlane, namespace: str, tainted_pool: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = pod_manifest("untolerated", [gpu_container("cuda", {"nvidia.com/gpu": "1"})],
                            node_selector=tainted_pool)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    reasons = assert_pending_for_the_same_reasons(control_plane, namespace, "untolerated")
    assert reasons["node(s) had untolerated taint {nvidia.com/gpu: present}"] == 2

    # kubectl hami explain with no flag but --kubeconfig: hami-web published its settings under its own RBAC.
    capsys.readouterr()
    assert kubectl_main(["explain", f"{namespace}/untolerated", "--kubeconfig", str(control_plane.admin_kubeconfig),
                         "-o", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["settings_source"] == "ConfigMap hami-system/hami-web-settings (published by the server)"
    assert explained["verdict"] == UNSCHEDULABLE


def test_a_pod_that_tolerates_the_taint_is_bound_where_explain_said(
        control_plane: ControlPlane, namespace: str, tainted_pool: dict[str, str]) -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    manifest = pod_manifest("tolerated", [gpu_container("cuda", {"nvidia.com/gpu": "1",
                                                                 "nvidia.com/gpumem": "1000"})],
                            node_selector=tainted_pool, tolerations=[toleration], schedulerName="hami-scheduler")
    predicted = explain(control_plane, {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}})
    assert predicted.verdict == FITS, predicted.message

    control_plane.core.create_namespaced_pod(namespace, manifest)
    bound = control_plane.wait_bound(namespace, "tolerated")
    assert bound.spec.node_name == predicted.node


@pytest.mark.parametrize("constraint", ["selector", "affinity"])
def test_a_pod_selecting_an_empty_pool_stays_pending_as_explain_says(
        control_plane: ControlPlane, namespace: str, constraint: str) -> None:
    label = {"e2e.hami.io/pool": f"{namespace}-nobody"}
    name = f"{namespace}-elsewhere"  # an untainted GPU node in another pool: kube-scheduler's affinity check runs
    control_plane.create_gpu_node(name, devices(name, 1, memory_mib=46068, type=A40),
                                  labels={"e2e.hami.io/pool": namespace})
    spec: dict[str, Any] = {"node_selector": label} if constraint == "selector" else {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "e2e.hami.io/pool", "operator": "In", "values": [label["e2e.hami.io/pool"]]}]}]}}}}
    manifest = pod_manifest("nowhere", [gpu_container("cuda", {"nvidia.com/gpu": "1"})], **spec)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    reasons = assert_pending_for_the_same_reasons(control_plane, namespace, "nowhere")
    assert reasons["node(s) didn't match Pod's node affinity/selector"] >= 1


def test_a_pod_whose_only_node_is_cordoned_stays_pending_as_explain_says(
        control_plane: ControlPlane, namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    name = f"{namespace}-cordoned"
    control_plane.create_gpu_node(name, devices(name, 1, memory_mib=46068, type=A40), labels=label)
    control_plane.core.patch_node(name, {"spec": {"unschedulable": True}})
    manifest = pod_manifest("on-cordoned", [gpu_container("cuda", {"nvidia.com/gpu": "1"})], node_selector=label)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    reasons = assert_pending_for_the_same_reasons(control_plane, namespace, "on-cordoned")
    assert reasons["node(s) were unschedulable"] == 1


def test_a_pod_asking_more_cpu_than_its_pool_has_stays_pending_as_explain_says(
        control_plane: ControlPlane, namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    name = f"{namespace}-small-cpu"  # 64 cpu allocatable, as every node of this tier
    control_plane.create_gpu_node(name, devices(name, 1, memory_mib=46068, type=A40), labels=label)
    container = gpu_container("cuda", {"nvidia.com/gpu": "1"})
    container["resources"]["requests"] = {"cpu": "65"}
    manifest = pod_manifest("cpu-hungry", [container], node_selector=label)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    reasons = assert_pending_for_the_same_reasons(control_plane, namespace, "cpu-hungry")
    assert reasons["Insufficient cpu"] == 1
