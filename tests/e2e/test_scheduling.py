"""Through the real clients: kube-apiserver calls our webhook, kube-scheduler calls our filter and bind.

Covers: a GPU pod created as ``kubectl apply`` would is mutated, filtered and bound onto the right GPUs, with
annotations, binding and events as ``kubectl describe`` shows them; a pod no node can take stays Pending with our
per-node reasons in kube-scheduler's ``FailedScheduling`` event; a deleted pod frees its GPUs for the next pod.
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.grants import decode_pod_devices

from .controlplane import ControlPlane, gpu_container, pod_manifest

A40 = "NVIDIA-NVIDIA A40"
T4 = "NVIDIA-Tesla T4"


def devices(node: str, how_many: int, *, memory_mib: int, type: str, count: int = 10) -> list[Device]:
    return [Device(uuid=f"GPU-{node}-{index}", index=index, count=count, memory_mib=memory_mib, cores=100,
                   type=type, numa=0) for index in range(how_many)]


@pytest.fixture
def pool(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """Two GPU nodes only this test's pods may use (a nodeSelector on a per-test label)."""
    label = {"e2e.hami.io/pool": namespace}
    control_plane.create_gpu_node(f"{namespace}-a40", devices(f"{namespace}-a40", 2, memory_mib=46068, type=A40),
                                  labels=label)
    control_plane.create_gpu_node(f"{namespace}-t4", devices(f"{namespace}-t4", 1, memory_mib=15360, type=T4),
                                  labels=label)
    return label


def test_a_gpu_pod_is_mutated_filtered_and_bound_onto_the_gpus_that_fit(control_plane: ControlPlane, namespace: str,
                                                                         pool: dict[str, str]) -> None:
    manifest = pod_manifest("train", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"})],
                            node_selector=pool)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    created = control_plane.pod(namespace, "train")
    assert created.spec.scheduler_name == "hami-scheduler"  # the webhook's patch, applied by kube-apiserver
    assert "nvidia.com/gpucores" not in created.spec.containers[0].resources.limits  # 20000 MiB is not a whole card

    pod = control_plane.wait_bound(namespace, "train")
    node = f"{namespace}-a40"  # the only node with a GPU of 20,000 MiB free
    assert pod.spec.node_name == node
    annotations = pod.metadata.annotations
    assert annotations[names.POD_ASSIGNED_NODE] == node
    assert names.POD_ASSIGNED_NODE not in (pod.metadata.labels or {})  # the booking rode on the Binding: no label
    assert annotations[names.POD_DEVICES_ALLOCATED] == annotations[names.POD_DEVICES_TO_ALLOCATE]
    (grants,) = decode_pod_devices(annotations[names.POD_DEVICES_ALLOCATED])
    assert [(grant.uuid, grant.memory_mib, grant.cores) for grant in grants] == [(f"GPU-{node}-0", 20000, 0)]
    assert annotations[names.POD_BIND_PHASE] in ("allocating", "success")  # success once the plugin stand-in ran

    reasons = [event.reason for event in control_plane.events(namespace, "train")]
    for reason in ("FilteringSucceed", "BindingSucceed", "Scheduled"):
        assert reason in reasons, reasons
    scheduled = control_plane.wait_event(namespace, "train", "Scheduled")
    assert f"Successfully assigned {namespace}/train to {node}" in scheduled.message
    succeeded = control_plane.wait_event(namespace, "train", "FilteringSucceed")
    assert node in succeeded.message and f"GPU-{node}-0" in succeeded.message


def test_a_pod_no_node_can_take_stays_pending_with_our_reasons(control_plane: ControlPlane, namespace: str,
                                                                pool: dict[str, str]) -> None:
    manifest = pod_manifest("too-big", [gpu_container("cuda", {"nvidia.com/gpu": "1",
                                                               "nvidia.com/gpumem": "60000"})], node_selector=pool)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    failed = control_plane.wait_event(namespace, "too-big", "FailedScheduling", containing="CardInsufficientMemory")
    assert "2/2 CardInsufficientMemory" in failed.message  # the A40 node: both GPUs too small
    assert "1/1 CardInsufficientMemory" in failed.message  # the T4 node
    ours = control_plane.wait_event(namespace, "too-big", "FilteringFailed")
    assert "CardInsufficientMemory" in ours.message
    pod = control_plane.pod(namespace, "too-big")
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    assert names.POD_DEVICES_ALLOCATED not in (pod.metadata.annotations or {})


def test_a_deleted_pod_frees_its_gpu_for_the_next_pod(control_plane: ControlPlane, namespace: str,
                                                     pool: dict[str, str]) -> None:
    whole_t4 = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "15000"}
    t4_only = {names.POD_USE_GPU_TYPE: "T4"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "first", [gpu_container("cuda", {**whole_t4, "nvidia.com/gpucores": "100"})], node_selector=pool,
        annotations=t4_only))
    assert control_plane.wait_bound(namespace, "first").spec.node_name == f"{namespace}-t4"

    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "second", [gpu_container("cuda", {**whole_t4, "nvidia.com/gpucores": "100"})], node_selector=pool,
        annotations=t4_only))
    control_plane.wait_event(namespace, "second", "FailedScheduling", containing="1/1 CardInsufficientMemory")

    control_plane.delete_pod(namespace, "first")
    second = control_plane.wait_bound(namespace, "second")
    assert second.spec.node_name == f"{namespace}-t4"
    (grants,) = decode_pod_devices(second.metadata.annotations[names.POD_DEVICES_ALLOCATED])
    assert [grant.uuid for grant in grants] == [f"GPU-{namespace}-t4-0"]
