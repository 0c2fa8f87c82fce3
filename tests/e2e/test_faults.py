"""What kube-scheduler and kube-apiserver do when our side fails, and how we come back.

Covers: kube-scheduler retries a pod whose bind we refused (a node lock held by another pod) and binds it once
the lock is gone; with hami-web down, ``failurePolicy: Ignore`` lets GPU pods through unmutated and kube-scheduler
keeps pods for hami-scheduler Pending (the extender is unreachable); after hami-web restarts, those pending pods are
filtered and bound.

The restart test runs last in this module: it stops the shared hami-web and starts it again.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.grants import decode_pod_devices

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until

A40 = "NVIDIA-NVIDIA A40"


def _node(control_plane: ControlPlane, namespace: str, suffix: str = "gpu", gpus: int = 2) -> tuple[str, dict]:
    name = f"{namespace}-{suffix}"
    label = {"e2e.hami.io/pool": name}
    control_plane.create_gpu_node(name, [Device(uuid=f"GPU-{name}-{i}", index=i, count=10, memory_mib=46068,
                                                cores=100, type=A40, numa=0) for i in range(gpus)], labels=label)
    return name, label


def test_a_refused_bind_is_retried_by_kube_scheduler_until_it_binds(control_plane: ControlPlane,
                                                                    namespace: str) -> None:
    node, pool = _node(control_plane, namespace)
    # Another pod, still being set up by the device plugin, holds the node lock (fresh, owner alive).
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("holder", [gpu_container("c")]))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    control_plane.core.patch_namespaced_pod("holder", namespace,
                                            {"metadata": {"annotations": {names.POD_BIND_PHASE: "allocating"}}})
    control_plane.core.patch_node(node, {"metadata": {"annotations": {
        names.NODE_LOCK: f"{stamp},{namespace},holder"}}})

    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "waiter", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})], node_selector=pool))
    # A held lock is not a failure of ours (no BindingFailed event): kube-scheduler reports it and retries.
    refused = control_plane.wait_event(namespace, "waiter", "FailedScheduling", containing="is locked by")
    assert f"node {node} is locked by {namespace}/holder" in refused.message
    assert control_plane.pod(namespace, "waiter").spec.node_name is None

    control_plane.core.patch_node(node, {"metadata": {"annotations": {names.NODE_LOCK: None}}})
    pod = control_plane.wait_bound(namespace, "waiter", timeout_seconds=60)  # kube-scheduler's backoff ≤ 10 s
    assert pod.spec.node_name == node
    assert len(decode_pod_devices(pod.metadata.annotations[names.POD_DEVICES_ALLOCATED])[0]) == 1


def test_hami_web_down_then_restarted_while_pods_are_pending(control_plane: ControlPlane, namespace: str) -> None:
    node, pool = _node(control_plane, namespace, gpus=1)
    other_node, other_pool = _node(control_plane, namespace, "other", gpus=1)
    exclusive = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100", "nvidia.com/gpumem": "40000"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("holder", [gpu_container("cuda", exclusive)],
                                                                     node_selector=pool))
    control_plane.wait_bound(namespace, "holder")
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("pending", [gpu_container("cuda", exclusive)],
                                                                     node_selector=pool))
    control_plane.wait_event(namespace, "pending", "FailedScheduling", containing="CardInsufficientMemory")

    assert control_plane.stop_hami_web() == 0  # SIGTERM: a clean exit
    try:
        # failurePolicy Ignore: the API lets a GPU pod through unmutated while the webhook is unreachable.
        control_plane.core.create_namespaced_pod(namespace, pod_manifest(
            "unmutated", [gpu_container("cuda", {"nvidia.com/gpu": "1"})], node_selector=pool))
        unmutated = control_plane.pod(namespace, "unmutated")
        assert unmutated.spec.scheduler_name == "default-scheduler"
        assert "nvidia.com/gpucores" not in unmutated.spec.containers[0].resources.limits
        # A pod already addressed to hami-scheduler: kube-scheduler cannot reach the extender and keeps it Pending.
        control_plane.core.create_namespaced_pod(namespace, pod_manifest(
            "while-down", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
            node_selector=other_pool, schedulerName="hami-scheduler"))
        control_plane.wait_event(namespace, "while-down", "FailedScheduling", containing="127.0.0.1")
        control_plane.delete_pod(namespace, "holder")  # frees the GPU while nobody books it
    finally:
        control_plane.start_hami_web()

    pending = control_plane.wait_bound(namespace, "pending", timeout_seconds=90)
    while_down = control_plane.wait_bound(namespace, "while-down", timeout_seconds=90)
    assert (pending.spec.node_name, while_down.spec.node_name) == (node, other_node)
    (grants,) = decode_pod_devices(pending.metadata.annotations[names.POD_DEVICES_ALLOCATED])
    assert [(grant.uuid, grant.memory_mib, grant.cores) for grant in grants] == [(f"GPU-{node}-0", 40000, 100)]
    wait_until(lambda: control_plane.hami_web_get("/readyz")[0] == 200, timeout_seconds=10, what="ready")
