"""Metax sGPUs through the real clients (docs/device-families.md#metax-sgpus).

Covers: an sGPU pod created as ``kubectl apply`` would is sent to our webhook by ``k8s/webhook.yaml``'s matchConditions
(``metax-tech.com/*``), routed to hami-scheduler with the default QoS written (``best-effort``); kube-scheduler,
configured by ``k8s/scheduler-config.yaml``, leaves the resources to the extender and binds it past an NVIDIA node of
the same pool onto the node of ``metax-tech.com/node-gpu-devices``, with its GiB slice under both
``hami.io/metax-sgpu-devices-*`` keys, Metax's ``metax-tech.com/gpu-devices-allocated`` and predicate time, under
HAMi's ``hami.io/mutex.lock``.
"""

from __future__ import annotations

import json

from hami_web.core import names

from .controlplane import ControlPlane, gpu_container, pod_manifest
from .test_scheduling import A40, devices


def test_an_sgpu_pod_gets_its_slice_and_the_default_qos(control_plane: ControlPlane, namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, sgpu = f"{namespace}-nvidia", f"{namespace}-sgpu"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    cards = json.dumps([{"uuid": f"{sgpu}-card-{i}", "totalDevCount": 16, "totalCompute": 100, "totalVRam": 65536,
                         "numa": 0, "healthy": True, "qosPolicy": "best-effort", "linkZone": 0} for i in range(2)])
    control_plane.create_node(sgpu, labels=label, devices={"metax-tech.com/sgpu": "32"},
                              annotations={"metax-tech.com/node-gpu-devices": cards})
    limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "30"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "infer", [gpu_container("main", limits)], node_selector=label))

    created = control_plane.pod(namespace, "infer")
    assert created.spec.scheduler_name == "hami-scheduler"
    assert created.metadata.annotations["metax-tech.com/sgpu-qos-policy"] == "best-effort"
    pod = control_plane.wait_bound(namespace, "infer")
    assert pod.spec.node_name == sgpu
    annotations = pod.metadata.annotations
    allocated = annotations["hami.io/metax-sgpu-devices-allocated"]
    assert allocated == annotations["hami.io/metax-sgpu-devices-to-allocate"]
    assert allocated in (f"{sgpu}-card-{i},Metax-SGPU,4096,30:;" for i in range(2))
    uuid = allocated.split(",")[0]
    assert json.loads(annotations["metax-tech.com/gpu-devices-allocated"]) == [
        [{"uuid": uuid, "compute": 30, "vRam": 4096}]]
    assert int(annotations["metax-tech.com/predicate-time"]) > 10**18
    assert annotations[names.POD_BIND_PHASE] in ("allocating", "success")  # bound under HAMi's lock
