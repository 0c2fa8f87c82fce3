"""Biren, Enflame GCU, Metax GPU, Moore Threads and Vastai through the real clients
(docs/device-families.md#device-families).

Covers: one pod per family created as ``kubectl apply`` would is sent to our webhook by ``k8s/webhook.yaml``'s
matchConditions (``birentech.com/*``, ``enflame.com/*``, ``metax-tech.com/*``,
``mthreads.com/*``, ``vastaitech.com/*``) and routed to hami-scheduler;
kube-scheduler, configured by ``k8s/scheduler-config.yaml`` (the three count resources in ``managedResources``),
binds each onto its family's node of one pool, past an NVIDIA node and the other families' nodes, with exactly the pair
of ``…-devices-to-allocate`` / ``-allocated`` annotations HAMi v2.10's ``PatchAnnotations`` writes; the GCU's and
Metax's binds leave no lock on the node (hami-web's own bind lock is removed once bound).
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.nodelocks import BIND_LOCK

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

BIREN_REGISTER = ('[{"id":"%s-biren-0","index":0,"count":1,"devmem":32768,"type":"Biren","health":true},'
                  '{"id":"%s-biren-1","index":1,"count":1,"devmem":32768,"type":"Biren","health":true}]')


@pytest.fixture
def count_pool(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """An NVIDIA node, a Biren node (its register), a GCU, a Metax and a Moore Threads node (their capacity), one
    pool."""
    label = {"e2e.hami.io/pool": namespace}
    nvidia = f"{namespace}-nvidia"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    control_plane.create_node(f"{namespace}-biren", labels=label, devices={"birentech.com/gpu": "2"}, annotations={
        "hami.io/node-biren-register": BIREN_REGISTER % (namespace, namespace),
        "hami.io/node-handshake-biren": "Reported 2099-01-01 00:00:00"})
    control_plane.create_node(f"{namespace}-gcu", labels=label, devices={"enflame.com/gcu": "2"}, annotations={})
    control_plane.create_node(f"{namespace}-metax", labels=label, devices={"metax-tech.com/gpu": "2"}, annotations={})
    dies = encode_register_json(Device(uuid=f"{namespace}-va-{i}", index=i, count=1, memory_mib=16384, cores=0,
                                       type="VA1", family="Vastai", card=str(min(i, 1))) for i in range(3))
    control_plane.create_node(f"{namespace}-vastai", labels=label, devices={"vastaitech.com/va": "3"}, annotations={
        "hami.io/node-va-register": dies, "hami.io/node-handshake-va": "Reported 2099-01-01 00:00:00"})
    control_plane.create_node(f"{namespace}-mthreads", labels=label, annotations={}, devices={
        "mthreads.com/vgpu": "200", "mthreads.com/sgpu-core": "32", "mthreads.com/sgpu-memory": "192"})
    return label


@pytest.mark.parametrize(("pod", "resource", "node", "keys", "device", "lock"), [
    ("biren", "birentech.com/gpu", "biren", ("hami.io/Biren-devices-to-allocate", "hami.io/Biren-devices-allocated"),
     "{ns}-biren-0,Biren,0,0:;", names.NODE_LOCK),
    ("gcu", "enflame.com/gcu", "gcu",
     ("hami.io/enflame-gcu-devices-to-allocate", "hami.io/enflame-gcu-devices-allocated"),
     "{ns}-gcu-GCU-0,GCU,100,100:;", None),
    ("metax", "metax-tech.com/gpu", "metax",
     ("hami.io/metax-gpu-devices-to-allocate", "hami.io/metax-gpu-devices-allocated"),
     "{ns}-metax-metax-0,Metax-GPU,65536,100:;", None),
    ("vastai", "vastaitech.com/va", "vastai",
     ("hami.io/Vastai-devices-to-allocate", "hami.io/Vastai-devices-allocated"), "{ns}-va-0,Vastai,0,0:;",
     names.NODE_LOCK),  # die mode, one die: the first in the policy's order
    ("mthreads", "mthreads.com/vgpu", "mthreads", ("hami.io/mthreads-vgpu-devices-allocated",),
     "{ns}-mthreads-mthreads-0,Mthreads,49152,16:;", None),  # the webhook made it a whole card
])
def test_a_pod_of_each_family_is_routed_filtered_and_bound_with_hamis_annotations(
        control_plane: ControlPlane, namespace: str, count_pool: dict[str, str], pod: str, resource: str, node: str,
        keys: tuple[str, ...], device: str, lock: str | None) -> None:
    control_plane.core.create_namespaced_pod(namespace, pod_manifest(pod, [gpu_container("main", {resource: "1"})],
                                                                     node_selector=count_pool))
    assert control_plane.pod(namespace, pod).spec.scheduler_name == "hami-scheduler"

    bound = control_plane.wait_bound(namespace, pod)
    assert bound.spec.node_name == f"{namespace}-{node}"
    annotations = bound.metadata.annotations
    assert {key: value for key, value in annotations.items() if "-devices-" in key} == dict.fromkeys(
        keys, device.format(ns=namespace))
    # hami-web's bind lock is removed by the call after the Binding: the pod may show bound first.
    [node_annotations] = wait_until(lambda: _without_bind_lock(control_plane, f"{namespace}-{node}"),
                                    timeout_seconds=10.0, what="the bind lock removed")
    if lock is None:  # no lock of HAMi's was taken (Biren's mutex.lock is the device plugin stand-in's to remove)
        assert names.NODE_LOCK not in node_annotations


def _without_bind_lock(control_plane: ControlPlane, node: str) -> list[dict[str, str]]:
    """``[the node's annotations]`` once hami-web's bind lock is gone from them, else ``[]`` (not yet)."""
    annotations = control_plane.core.read_node(node).metadata.annotations or {}
    return [] if BIND_LOCK.key in annotations else [annotations]
