"""Device-aware preemption through the real kube-apiserver and kube-scheduler (docs/preemption.md).

Covers, with PriorityClasses as users write them (kube-apiserver's Priority admission sets ``spec.priority`` and
``preemptionPolicy``): low-priority pods fill a node's GPU memory, a high-priority pod arrives and exactly the minimal
victims are deleted (the ``DisruptionTarget`` condition, the ``Preempted`` events), the pod is nominated to the node
and bound on the freed GPU within the victims' grace period (0) + 5 s; a pod whose class says ``preemptionPolicy:
Never`` waits and deletes nobody; a CPU-and-GPU shortage goes through kube-scheduler's own preemption and our
``preemptVerb``: kube-scheduler's victim frees the CPU, hami-web adds the GPU holder, and the pod is bound.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes

from hami_web.core import names

from .controlplane import PAUSE_IMAGE, ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

MEMORY_MIB = 46068


def priority_classes(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """low (100), mid (200), high (1000) and high-never (1000, preemptionPolicy Never), named after the test's
    namespace (PriorityClasses are cluster-wide)."""
    api = kubernetes.client.SchedulingV1Api(control_plane.api_client)
    classes = {"low": (100, None), "mid": (200, None), "high": (1000, None), "high-never": (1000, "Never")}
    made = {}
    for short, (value, policy) in classes.items():
        name = f"{namespace}-{short}"
        body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                "metadata": {"name": name}, "value": value}
        if policy:
            body["preemptionPolicy"] = policy
        api.create_priority_class(body)
        made[short] = name
    return made


def gpu_pod(name: str, memory_mib: int, priority_class: str, pool: dict[str, str], **resources: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib)}
    container = gpu_container("cuda", limits)
    if resources:
        container["resources"]["requests"] = dict(resources)
    return pod_manifest(name, [container], node_selector=pool, priorityClassName=priority_class)


def names_in(control_plane: ControlPlane, namespace: str) -> set[str]:
    return {pod.metadata.name for pod in control_plane.core.list_namespaced_pod(namespace).items}


def test_a_high_priority_pod_preempts_the_minimal_victims(control_plane: ControlPlane, namespace: str) -> None:
    classes = priority_classes(control_plane, namespace)
    pool = {"e2e.hami.io/pool": namespace}
    node = f"{namespace}-a40"
    control_plane.create_gpu_node(node, devices(node, 1, memory_mib=MEMORY_MIB, type=A40), labels=pool)
    lows = [f"low-{index}" for index in range(3)]
    for name in lows:  # 45,000 of 46,068 MiB
        control_plane.core.create_namespaced_pod(namespace, gpu_pod(name, 15000, classes["low"], pool))
        control_plane.wait_bound(namespace, name)

    # preemptionPolicy Never: waits, deletes nobody.
    control_plane.core.create_namespaced_pod(namespace, gpu_pod("patient", 20000, classes["high-never"], pool))
    control_plane.wait_event(namespace, "patient", "FailedScheduling", containing="CardInsufficientMemory")
    time.sleep(3)
    assert names_in(control_plane, namespace) >= set(lows)
    assert control_plane.pod(namespace, "patient").spec.node_name is None
    control_plane.delete_pod(namespace, "patient")

    # 20,000 MiB: 1,068 free + one victim's 15,000 is not enough; two victims are, and no more.
    created = time.monotonic()
    control_plane.core.create_namespaced_pod(namespace, gpu_pod("urgent", 20000, classes["high"], pool))
    urgent = control_plane.wait_bound(namespace, "urgent", timeout_seconds=30.0)
    took = time.monotonic() - created
    assert urgent.spec.node_name == node
    remaining = names_in(control_plane, namespace) & set(lows)
    assert len(remaining) == 1, remaining
    assert took <= 5.0, f"bound {took:.1f} s after creation (victims' grace 0 + 5 s)"
    print(f"urgent bound {took:.2f} s after its creation")  # docs/preemption.md's figure (pytest -s)
    preempted = sorted(set(lows) - remaining)
    for victim in preempted:
        event = control_plane.wait_event(namespace, victim, "Preempted")
        assert f"Preempted by pod {namespace}/urgent" in event.message and f"on node {node}" in event.message
    control_plane.wait_event(namespace, "urgent", "Preempting", containing=f"on node {node}")
    granted = urgent.metadata.annotations[names.POD_DEVICES_ALLOCATED]
    assert granted == f"GPU-{node}-0,NVIDIA,20000,0:;"


def test_a_cpu_and_gpu_shortage_goes_through_the_preempt_verb(control_plane: ControlPlane, namespace: str) -> None:
    """kube-scheduler's preemption finds the CPU victim (the in-tree filters see CPU, not GPU memory); the preemptVerb
    adds the GPU holder, whose removal the pod's GPU memory needs; both go and the pod is bound."""
    classes = priority_classes(control_plane, namespace)
    pool = {"e2e.hami.io/pool": namespace}
    node = f"{namespace}-a40"
    control_plane.create_gpu_node(node, devices(node, 1, memory_mib=MEMORY_MIB, type=A40), labels=pool)
    cpu_hog = pod_manifest("cpu-hog", [{"name": "main", "image": PAUSE_IMAGE,
                                         "resources": {"requests": {"cpu": "60"}}}],
                           node_selector=pool, priorityClassName=classes["low"], schedulerName="hami-scheduler")
    control_plane.core.create_namespaced_pod(namespace, cpu_hog)
    control_plane.wait_bound(namespace, "cpu-hog")
    control_plane.core.create_namespaced_pod(namespace, gpu_pod("gpu-holder", 40000, classes["mid"], pool, cpu="1"))
    control_plane.wait_bound(namespace, "gpu-holder")

    control_plane.core.create_namespaced_pod(namespace, gpu_pod("both", 20000, classes["high"], pool, cpu="10"))
    both = control_plane.wait_bound(namespace, "both", timeout_seconds=60.0)
    assert both.spec.node_name == node
    assert not names_in(control_plane, namespace) & {"cpu-hog", "gpu-holder"}
    wait_until(lambda: any(event.reason == "Preempted" for event in control_plane.events(namespace, "gpu-holder")),
               timeout_seconds=10.0, what="kube-scheduler's Preempted event on the GPU holder")
