"""Pods HAMi v2.10 admits and places, admitted and placed through the real kube-apiserver and kube-scheduler
(docs/compatibility.md#compatibility-with-hami-v210).

Covers: under a device config with ``nvidia.runtimeClassName`` and ``nvidia.gpuCorePolicy: force`` (the chart's
``devicePlugin.runtimeClassName``), a GPU pod is created with the runtime class and
``GPU_CORE_UTILIZATION_POLICY=force`` (HAMi's ``MutateAdmission``) and bound; a ``gpucores`` over 100 is created as
100 with the warning kubectl prints (the API's ``Warning`` header) and an ``AdmittedWithWarnings`` event; a node
registering a 655,360-MiB GPU (HAMi reads ``devmem`` as an int32) takes a pod asking 600,000 MiB of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.grants import decode_pod_devices

from .controlplane import ControlPlane, gpu_container, pod_manifest

H200 = "NVIDIA-NVIDIA H200"


@pytest.fixture
def device_config(control_plane: ControlPlane, tmp_path: Path) -> Iterator[None]:
    """hami-web restarted with a device config naming a runtime class and the ``force`` core policy, then back."""
    config = tmp_path / "device-config.yaml"
    config.write_text(yaml.safe_dump({"nvidia": {"runtimeClassName": "nvidia", "gpuCorePolicy": "force"}}))
    saved = control_plane.hami_web_arguments
    control_plane.stop_hami_web()
    control_plane.hami_web_arguments = (*saved, "--device-config-file", str(config))
    try:
        control_plane.start_hami_web()
        yield
    finally:
        control_plane.stop_hami_web()
        control_plane.hami_web_arguments = saved
        control_plane.start_hami_web()


def _node(control_plane: ControlPlane, namespace: str, *, memory_mib: int = 46068, type: str = H200) -> dict[str, str]:
    label = {"e2e.hami.io/pool": namespace}
    name = f"{namespace}-gpu"
    control_plane.create_gpu_node(name, [Device(uuid=f"GPU-{name}-0", index=0, count=10, memory_mib=memory_mib,
                                                cores=100, type=type, numa=0)], labels=label)
    return label


def test_runtime_class_and_core_policy_of_the_device_config(control_plane: ControlPlane, namespace: str,
                                                            device_config: None) -> None:
    kubernetes.client.NodeV1Api(control_plane.api_client).create_runtime_class(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    try:
        pool = _node(control_plane, namespace)
        manifest = pod_manifest("cuda", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
                                         gpu_container("sidecar")], node_selector=pool)
        control_plane.core.create_namespaced_pod(namespace, manifest)
        created = control_plane.pod(namespace, "cuda")
        assert created.spec.runtime_class_name == "nvidia"
        assert [[(env.name, env.value) for env in container.env or [] if env.name == "GPU_CORE_UTILIZATION_POLICY"]
                for container in created.spec.containers] == [[("GPU_CORE_UTILIZATION_POLICY", "force")]] * 2
        assert control_plane.wait_bound(namespace, "cuda").spec.node_name == f"{namespace}-gpu"
    finally:
        kubernetes.client.NodeV1Api(control_plane.api_client).delete_runtime_class("nvidia")


def test_cores_over_100_are_admitted_as_100_with_a_warning(control_plane: ControlPlane, namespace: str) -> None:
    manifest = pod_manifest("greedy", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"})])
    response = control_plane.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
    warning = response.headers.get("Warning", "")
    assert "nvidia.com/gpucores 150 is over 100" in warning, warning
    assert json.loads(response.data)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    event = control_plane.wait_event(namespace, "greedy", "AdmittedWithWarnings")
    assert event.type == "Warning" and "set to 100" in event.message


def test_a_node_registering_a_655360_mib_gpu_takes_a_pod(control_plane: ControlPlane, namespace: str) -> None:
    pool = _node(control_plane, namespace, memory_mib=655360)
    manifest = pod_manifest("big", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "600000"})],
                            node_selector=pool)
    control_plane.core.create_namespaced_pod(namespace, manifest)
    pod = control_plane.wait_bound(namespace, "big")
    assert pod.spec.node_name == f"{namespace}-gpu"
    (grants,) = decode_pod_devices(pod.metadata.annotations[names.POD_DEVICES_ALLOCATED])
    assert [(grant.uuid, grant.memory_mib) for grant in grants] == [(f"GPU-{namespace}-gpu-0", 600000)]
