"""A namespace quota on GPU memory through the real kube-apiserver and kube-scheduler (docs/quotas.md#namespace-quotas).

Covers: a ResourceQuota with ``limits.nvidia.com/gpumem`` (accepted by kube-apiserver next to its own quota keys,
listed and watched by hami-web with ``k8s/rbac.yaml``'s rights) is honoured end to end: a pod within the limit is
bound; a pod whose spec would pass it is refused at creation by our webhook (``exceeding resource quota`` naming the
resource, limit, use and request); a percentage pod, which admission counts as 0, stays Pending with
``ResourceQuotaNotFit`` in kube-scheduler's ``FailedScheduling`` event; deleting the first pod frees the room and
kube-scheduler then binds the waiting pod.
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from hami_web.core import names

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

WEBHOOK = "vgpu.hami-web.hami.io"


def test_a_gpu_memory_quota_is_honoured_through_kube_scheduler(control_plane: ControlPlane, namespace: str) -> None:
    pool = {"e2e.hami.io/pool": namespace}
    node = f"{namespace}-a40"
    control_plane.create_gpu_node(node, devices(node, 1, memory_mib=46068, type=A40), labels=pool)
    control_plane.core.create_namespaced_resource_quota(namespace, {
        "metadata": {"name": "gpu"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "30000", "pods": "20"}}})

    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "first", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"})], node_selector=pool))
    assert control_plane.wait_bound(namespace, "first").spec.node_name == node

    with pytest.raises(ApiException) as refused:
        control_plane.core.create_namespaced_pod(namespace, pod_manifest(
            "too-much", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "25000"})],
            node_selector=pool))
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403
    assert message == (f'admission webhook "{WEBHOOK}" denied the request: exceeding resource quota: namespace '
                       f'{namespace}, nvidia.com/gpumem: limit 30000, used 10000, request 25000')

    # Half of the 46,068 MiB card is 23,034 MiB: admission cannot know it (it counts 0), the filter does.
    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "half-card", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"})],
        node_selector=pool))
    failed = control_plane.wait_event(namespace, "half-card", "FailedScheduling",
                                      containing=names.RESOURCE_QUOTA_NOT_FIT)
    assert f"1/1 {names.RESOURCE_QUOTA_NOT_FIT}" in failed.message
    assert control_plane.pod(namespace, "half-card").spec.node_name is None

    control_plane.delete_pod(namespace, "first")
    wait_until(lambda: not any(pod.metadata.name == "first" for pod in
                               control_plane.core.list_namespaced_pod(namespace).items),
               timeout_seconds=30.0, what="first pod deleted")
    half = control_plane.wait_bound(namespace, "half-card", timeout_seconds=60.0)
    assert half.spec.node_name == node
    assert half.metadata.annotations[names.POD_DEVICES_ALLOCATED] == f"GPU-{node}-0,NVIDIA,23034,0:;"
