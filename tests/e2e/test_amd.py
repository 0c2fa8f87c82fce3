"""AMD GPUs through the real clients (docs/device-families.md#device-families).

Covers: a pod asking ``amd.com/gpu``, ``amd.com/gpumem`` and ``amd.com/gpucores`` created as ``kubectl apply`` would
is sent to our webhook by ``k8s/webhook.yaml``'s matchConditions (``amd.com/*``) and routed to hami-scheduler;
kube-scheduler, configured by ``k8s/scheduler-config.yaml`` (the three resources in ``managedResources``), binds it
onto the AMD node of its pool past an NVIDIA node, with HAMi v2.10's ``hami.io/amd-devices-to-allocate`` /
``-allocated`` (its compute units, the product type in the type field).
"""

from __future__ import annotations

from hami_web.core.devices import Device, encode_register_json

from .controlplane import ControlPlane, gpu_container, pod_manifest
from .test_scheduling import A40, devices

PRODUCT = "AMD_Instinct_MI300X"


def test_an_amd_pod_is_routed_filtered_and_bound_with_hamis_annotations(control_plane: ControlPlane,
                                                                        namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, amd = f"{namespace}-nvidia", f"{namespace}-amd"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    register = encode_register_json([Device(uuid=f"{amd}-0", index=0, count=4, memory_mib=196608, cores=304,
                                            type=PRODUCT, family="AMD")])
    control_plane.create_node(amd, labels=label, devices={"amd.com/gpu": "1"},
                              annotations={"hami.io/node-amd-register": register})
    limits = {"amd.com/gpu": "1", "amd.com/gpumem": "4096", "amd.com/gpucores": "50"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("amd", [gpu_container("main", limits)],
                                                                     node_selector=label))
    assert control_plane.pod(namespace, "amd").spec.scheduler_name == "hami-scheduler"

    bound = control_plane.wait_bound(namespace, "amd")
    assert bound.spec.node_name == amd
    written = {key: value for key, value in bound.metadata.annotations.items() if "-devices-" in key}
    assert written == dict.fromkeys(("hami.io/amd-devices-to-allocate", "hami.io/amd-devices-allocated"),
                                    f"{amd}-0,{PRODUCT},4096,152:;")
