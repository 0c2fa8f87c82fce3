"""Enflame DRS through the real clients (docs/device-families.md#partitioned-devices-enflame-drs).

Covers: a pod asking DRS memory and cores alone, created as ``kubectl apply`` would, is sent to our webhook by
``k8s/webhook.yaml``'s matchConditions (``enflame.com/*``) and routed to hami-scheduler with no count added, its limits
copied to requests; kube-scheduler, configured by ``k8s/scheduler-config.yaml``, leaves the resources to the extender
and binds it past an NVIDIA node of the same pool onto the node of ``enflame.com/gcu-drs-capacity``, with one partition
of the smallest profile holding the ask under ``hami.io/enflame-vgpu-devices-allocated`` only, the DRS plugin's
annotations (``enflame.com/gcu-assigned*``, ``gcu-request-size``, ``assigned-containers``) and no lock left on the node.
"""

from __future__ import annotations

import json

from hami_web.core import names

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

CAPACITY = ('{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"1","capacity":6}],'
            '"profiles":{"1g.12gb":"0","2g.24gb":"1","3g.36gb":"2","6g.72gb":"3"}}')


def test_a_drs_pod_gets_one_partition_of_its_profile(control_plane: ControlPlane, namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, drs = f"{namespace}-nvidia", f"{namespace}-drs"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    control_plane.create_node(drs, labels=label, devices={"enflame.com/drs-gcu": "12"},
                              annotations={"enflame.com/gcu-drs-capacity": CAPACITY})
    ask = gpu_container("infer", {"enflame.com/gcu-memory": "30", "enflame.com/gcu-core": "40"})
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("infer", [ask], node_selector=label))

    created = control_plane.pod(namespace, "infer")
    assert created.spec.scheduler_name == "hami-scheduler"
    assert created.spec.containers[0].resources.requests == {"enflame.com/gcu-memory": "30",
                                                             "enflame.com/gcu-core": "40"}
    pod = control_plane.wait_bound(namespace, "infer")
    assert pod.spec.node_name == drs
    annotations = pod.metadata.annotations
    allocated = annotations["hami.io/enflame-vgpu-devices-allocated"]
    assert allocated in (f"{drs}-enflame-drs-{i},Enflame,36864,50:;" for i in range(2))
    index = allocated.split(",")[0].rsplit("-", 1)[1]
    assert (annotations["enflame.com/gcu-assigned"], annotations["enflame.com/gcu-assigned-index"],
            annotations["enflame.com/gcu-assigned-minor"], annotations["enflame.com/gcu-request-size"]) == (
        "false", index, index, "3")
    assert json.loads(annotations["assigned-containers"]) == {
        "infer": {"allocated": False, "request": 3, "profileID": "2", "profileName": "3g.36gb"}}
    assert names.POD_DEVICES_ALLOCATED not in annotations
    # hami-web's bind lock is removed once bound: by the call after the Binding, so the pod may show bound first.
    wait_until(lambda: not any(key.endswith(".lock") for key in control_plane.core.read_node(drs).metadata.annotations
                               or {}), timeout_seconds=10.0, what=f"{drs}'s bind lock removed")
