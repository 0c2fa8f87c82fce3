"""Kunlunxin XPUs and vXPUs through the real clients (docs/device-families.md#kunlunxin-xpus).

Covers: a whole-XPU pod and a vXPU pod created as ``kubectl apply`` would are sent to our webhook by
``k8s/webhook.yaml``'s matchConditions (``kunlunxin.com/*``) and routed to hami-scheduler, the vXPU memory rounded up to
a quarter card in limits and requests; kube-scheduler, configured by ``k8s/scheduler-config.yaml``, leaves their
resources to the extender and binds each onto the node of its kind past an NVIDIA node of the same pool: the XPU pod
onto a node known only by ``kunlunxin.com/xpu`` in its capacity, two cards of one wing, with
``hami.io/kunlun-allocated`` and ``BAIDU_COM_DEVICE_IDX`` and no lock left on the node; the vXPU pod onto the node of
``hami.io/node-register-xpu`` with ``hami.io/xpu-devices-*`` (slice and derived cores).
"""

from __future__ import annotations

import json

from hami_web.core import names

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

CARD_MIB = 98304


def test_a_whole_xpu_pod_is_bound_onto_the_node_known_by_its_capacity(control_plane: ControlPlane,
                                                                      namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, xpu = f"{namespace}-nvidia", f"{namespace}-xpu"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    # As Kunlunxin's device plugin leaves a node: no annotation, the cards in capacity.
    control_plane.create_node(xpu, labels=label, annotations={}, devices={"kunlunxin.com/xpu": "8"})
    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "train", [gpu_container("xpu", {"kunlunxin.com/xpu": "2"})], node_selector=label))

    assert control_plane.pod(namespace, "train").spec.scheduler_name == "hami-scheduler"
    pod = control_plane.wait_bound(namespace, "train")
    assert pod.spec.node_name == xpu
    annotations = pod.metadata.annotations
    assert annotations["hami.io/kunlun-allocated"] == (
        f"{xpu}-kunlun-0,kunlun,{CARD_MIB},100:{xpu}-kunlun-1,kunlun,{CARD_MIB},100:;")
    assert annotations["BAIDU_COM_DEVICE_IDX"] == "0,1"
    assert names.POD_DEVICES_ALLOCATED not in annotations
    # hami-web's bind lock is removed once bound: by the call after the Binding, so the pod may show bound first.
    wait_until(lambda: not any(key.endswith(".lock") for key in control_plane.core.read_node(xpu).metadata.annotations
                               or {}), timeout_seconds=10.0, what=f"{xpu}'s bind lock removed")


def test_a_vxpu_pod_gets_a_rounded_slice_on_the_registered_node(control_plane: ControlPlane, namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, vxpu = f"{namespace}-nvidia", f"{namespace}-vxpu"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    register = json.dumps([{"id": f"{vxpu}-xpu-{i}", "index": i, "count": 4, "devmem": CARD_MIB, "devcore": 100,
                            "type": "XPU-P800", "health": True} for i in range(2)], separators=(",", ":"))
    control_plane.create_node(vxpu, labels=label, devices={"kunlunxin.com/vxpu": "8"},
                              annotations={"hami.io/node-register-xpu": register,
                                           "hami.io/node-handshake-xpu": "Requesting_2099-01-01 00:00:00"})
    limits = {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "20000"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest(
        "infer", [gpu_container("xpu", limits)], node_selector=label))

    created = control_plane.pod(namespace, "infer")
    assert created.spec.scheduler_name == "hami-scheduler"
    assert created.spec.containers[0].resources.limits["kunlunxin.com/vxpu-memory"] == "24576"
    assert created.spec.containers[0].resources.requests["kunlunxin.com/vxpu-memory"] == "24576"
    pod = control_plane.wait_bound(namespace, "infer")
    assert pod.spec.node_name == vxpu
    annotations = pod.metadata.annotations
    assert annotations["hami.io/xpu-devices-allocated"] == annotations["hami.io/xpu-devices-to-allocate"]
    assert annotations["hami.io/xpu-devices-allocated"] in (f"{vxpu}-xpu-{i},XPU,24576,25:;" for i in range(2))
    assert annotations[names.POD_BIND_PHASE] in ("allocating", "success")  # bound under HAMi's lock
