"""Ascend NPUs through the real clients (docs/device-families.md#ascend-npus), hami-web running with
``--enable-ascend``.

Covers: an Ascend 910B3 pod created as ``kubectl apply`` would is sent to our webhook by ``k8s/webhook.yaml``'s
matchConditions (``huawei.com/*``), its memory rounded up to the vir05_1c_16g template in limits and requests and the
pod routed to hami-scheduler; kube-scheduler, configured by ``k8s/scheduler-config.yaml``, leaves the Ascend resources
to the extender (no node has ``huawei.com/Ascend910B3-memory`` in its allocatable) and binds the pod onto the NPU node
past an NVIDIA node of the same pool, with ``hami.io/Ascend910B3-devices-allocated``, the ``huawei.com/Ascend910B3``
RuntimeInfo the Ascend device plugin reads and ``predicate-time``; a 910C pod asking 3 NPUs is refused by the API
server with our webhook's words.
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client.exceptions import ApiException

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json

from .controlplane import ControlPlane, gpu_container, pod_manifest
from .test_scheduling import A40, devices

B3 = "Ascend910B3"


@pytest.fixture
def npu_pool(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """An NVIDIA node and an 8-NPU Ascend 910B3 node (HCCS groups 0-3 and 4-7) in one per-test pool."""
    label = {"e2e.hami.io/pool": namespace}
    nvidia = f"{namespace}-nvidia"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    npus = [Device(uuid=f"{namespace}-npu-{i}", index=i, count=4, memory_mib=65536, cores=20, type=B3, family=B3,
                   network=0 if i <= 3 else 1) for i in range(8)]
    control_plane.create_node(f"{namespace}-npu", labels=label, devices={f"huawei.com/{B3}": "8"},
                              annotations={f"hami.io/node-register-{B3}": encode_register_json(npus),
                                           f"hami.io/node-handshake-{B3}": "Reported_2026.08.21 06:20:39"})
    return label


def test_an_ascend_pod_is_rounded_routed_bound_and_annotated(control_plane: ControlPlane, namespace: str,
                                                            npu_pool: dict[str, str]) -> None:
    limits = {f"huawei.com/{B3}": "1", f"huawei.com/{B3}-memory": "10000"}
    before = int(time.time())
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("npu", [gpu_container("mindspore", limits)],
                                                                     node_selector=npu_pool))

    created = control_plane.pod(namespace, "npu")
    assert created.spec.scheduler_name == "hami-scheduler"
    resources = created.spec.containers[0].resources
    assert resources.limits == {f"huawei.com/{B3}": "1", f"huawei.com/{B3}-memory": "16384"}
    # kube-apiserver defaults requests from limits before admission; the webhook rewrote the memory in both.
    assert resources.requests == {f"huawei.com/{B3}": "1", f"huawei.com/{B3}-memory": "16384"}

    pod = control_plane.wait_bound(namespace, "npu")
    node = f"{namespace}-npu"
    assert pod.spec.node_name == node
    annotations = pod.metadata.annotations
    expected = f"{namespace}-npu-0,{B3},16384,0:;"
    assert annotations[f"hami.io/{B3}-devices-allocated"] == expected
    assert annotations[f"hami.io/{B3}-devices-to-allocate"] == expected
    assert json.loads(annotations[f"huawei.com/{B3}"]) == [
        {"UUID": f"{namespace}-npu-0", "temp": "vir05_1c_16g", "memory": 16384}]
    assert before <= int(annotations["predicate-time"]) <= int(time.time())
    assert annotations[names.POD_ASSIGNED_NODE] == node
    assert names.POD_DEVICES_ALLOCATED not in annotations
    for reason in ("FilteringSucceed", "BindingSucceed"):
        control_plane.wait_event(namespace, "npu", reason)


def test_an_odd_910c_request_is_refused_by_the_webhook(control_plane: ControlPlane, namespace: str) -> None:
    manifest = pod_manifest("odd", [gpu_container("mindspore", {"huawei.com/Ascend910C": "3"})])
    with pytest.raises(ApiException) as refused:
        control_plane.core.create_namespaced_pod(namespace, manifest)
    assert refused.value.status == 400
    assert "Ascend910C device request must be 1 or 2*n, got 3" in json.loads(refused.value.body)["message"]
