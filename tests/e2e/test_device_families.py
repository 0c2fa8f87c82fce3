"""Device families other than NVIDIA's defaults, through the real clients (docs/device-families.md#device-families).

Covers: a Hygon DCU pod and an Iluvatar MR-V100 pod created as ``kubectl apply`` would are sent to our webhook by
``k8s/webhook.yaml``'s matchConditions (``hygon.com/*``, ``iluvatar.ai/*``) and routed to hami-scheduler (the
Iluvatar one also gets ``SOL_CONTINER_NAME``); kube-scheduler, configured by ``k8s/scheduler-config.yaml``, leaves
their resources to the extender (``managedResources`` with ``ignoredByScheduler``: no node has ``dcumem`` or
``.vMem`` in its allocatable) and binds each pod onto the node of its family, past an NVIDIA node and the other
family's node in the same pool, with the family's own ``…-devices-allocated`` annotation; the DCU handshake
(``hami.io/node-handshake-dcu``) goes round between hami-web and the device plugin stand-in. NVIDIA register
annotations in JSON as HAMi v2.10's device plugin writes them (Go ``omitempty``): a GPU whose ``health`` is left
out is unhealthy, never chosen even when it is listed first and is the emptier card, and a node whose only GPU
is such a card keeps the pod Pending with ``CardNotHealth`` in kube-scheduler's ``FailedScheduling`` event. A
Cambricon MLU pod (``cambricon.com/*`` in matchConditions and managedResources) is bound past an NVIDIA node onto a
node that has no annotation, only the MLU shares in its capacity and a ``Model`` label, with the Cambricon annotations
(devices, ``CAMBRICON_DSMLU_PROFILE``/``ASSIGNED``) and the node lock ``cambricon.com/dsmlu.lock``, not
``hami.io/mutex.lock``.

The tier runs hami-web with ``--enable-iluvatar`` (``tests/e2e/conftest.py``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from hami_web.core import names
from hami_web.core.grants import decode_pod_devices

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40, devices

DCU_REGISTER = "hami.io/node-dcu-register"
DCU_HANDSHAKE = "hami.io/node-handshake-dcu"
DCU_ALLOCATED = "hami.io/dcu-devices-allocated"
DCU_TO_ALLOCATE = "hami.io/dcu-devices-to-allocate"
MR_V100_REGISTER = "hami.io/node-MR-V100-register"
MR_V100_HANDSHAKE = "hami.io/node-handshake-MR-V100"
MR_V100_ALLOCATED = "hami.io/MR-V100-devices-allocated"
MR_V100_TO_ALLOCATE = "hami.io/MR-V100-devices-to-allocate"
# hami-web asks again for a family's handshake at every resync (--refresh-interval, 15 s): two rounds and a margin.
HANDSHAKE_ROUND_SECONDS = 40.0
OLD_REPORT = "Reported 2000-01-01 00:00:00"
MLU_ALLOCATED = "hami.io/cambricon-mlu-devices-allocated"
MLU_TO_ALLOCATE = "hami.io/cambricon-mlu-devices-to-allocate"
DSMLU_LOCK = "cambricon.com/dsmlu.lock"


def _reported_now() -> str:
    return f"Reported {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')}"


@pytest.fixture
def mixed_pool(control_plane: ControlPlane, namespace: str) -> dict[str, str]:
    """Three nodes of one per-test pool: an NVIDIA node, a Hygon DCU node and an Iluvatar MR-V100 node.

    Each is written as its family's device plugin leaves it: the register annotation in the family's text form
    (HAMi v2.10 reads DCU and Iluvatar registers as text), the family's handshake key, and the family's count
    resource in capacity and allocatable (what kubelet reports from the plugin).
    """
    label = {"e2e.hami.io/pool": namespace}
    nvidia = f"{namespace}-nvidia"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    control_plane.create_node(
        f"{namespace}-dcu", labels=label, devices={"hygon.com/dcunum": "8"},
        annotations={DCU_REGISTER: f"DCU-{namespace}-0,4,65520,100,DCU-BW100,0,true:"
                                   f"DCU-{namespace}-1,4,65520,100,DCU-BW100,0,true:",
                     DCU_HANDSHAKE: OLD_REPORT})  # an old answer: hami-web asks again at its next resync
    control_plane.create_node(
        f"{namespace}-mr-v100", labels=label, devices={"iluvatar.ai/MR-V100-vgpu": "10"},
        annotations={MR_V100_REGISTER: f"GPU-{namespace}-ilu-0,10,8192,100,MR-V100,0,true:",
                     MR_V100_HANDSHAKE: _reported_now()})
    return label


def _assert_scheduled_events(control_plane: ControlPlane, namespace: str, pod: str, node: str) -> None:
    scheduled = control_plane.wait_event(namespace, pod, "Scheduled")
    assert f"Successfully assigned {namespace}/{pod} to {node}" in scheduled.message
    for reason in ("FilteringSucceed", "BindingSucceed"):
        # Our events are sent from a background queue: they may land after kube-scheduler's Scheduled.
        control_plane.wait_event(namespace, pod, reason)


def test_a_hygon_dcu_pod_is_routed_filtered_and_bound_onto_the_dcu_node(
        control_plane: ControlPlane, namespace: str, mixed_pool: dict[str, str]) -> None:
    manifest = pod_manifest("dcu", [gpu_container("rocm", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "4000"})],
                            node_selector=mixed_pool)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    created = control_plane.pod(namespace, "dcu")
    # The webhook was called (matchConditions know hygon.com/*) and routed the pod; it mutates nothing else.
    assert created.spec.scheduler_name == "hami-scheduler"
    assert created.spec.containers[0].resources.limits == {"hygon.com/dcunum": "1", "hygon.com/dcumem": "4k"}

    pod = control_plane.wait_bound(namespace, "dcu")
    node = f"{namespace}-dcu"
    assert pod.spec.node_name == node
    annotations = pod.metadata.annotations
    # DCU's default cores are the whole card (HAMi: corenum 100); the spread policy takes the first of two equals.
    assert annotations[DCU_ALLOCATED] == f"DCU-{namespace}-0,DCU,4000,100:;" == annotations[DCU_TO_ALLOCATE]
    assert names.POD_DEVICES_ALLOCATED not in annotations  # no NVIDIA key for a pod that uses no NVIDIA GPU
    assert annotations[names.POD_ASSIGNED_NODE] == node
    assert annotations[names.POD_BIND_PHASE] in ("allocating", "success")
    _assert_scheduled_events(control_plane, namespace, "dcu", node)

    # The DCU handshake goes round: hami-web writes Requesting_… to hami.io/node-handshake-dcu, the device plugin
    # stand-in answers Reported <now> (the NVIDIA key is never written on a node without an NVIDIA register).
    def answered() -> str | None:
        value = (control_plane.core.read_node(node).metadata.annotations or {}).get(DCU_HANDSHAKE, "")
        return value if value.startswith("Reported ") and value != OLD_REPORT else None

    wait_until(answered, timeout_seconds=HANDSHAKE_ROUND_SECONDS, what=f"{DCU_HANDSHAKE} answered on {node}",
               interval_seconds=0.5)
    assert names.NODE_HANDSHAKE not in (control_plane.core.read_node(node).metadata.annotations or {})


def test_an_iluvatar_pod_is_routed_filtered_and_bound_onto_the_iluvatar_node(
        control_plane: ControlPlane, namespace: str, mixed_pool: dict[str, str]) -> None:
    limits = {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "8"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("corex", [gpu_container("ixrt", limits)],
                                                                     node_selector=mixed_pool))

    created = control_plane.pod(namespace, "corex")
    assert created.spec.scheduler_name == "hami-scheduler"
    container = created.spec.containers[0]
    assert [(env.name, env.value) for env in container.env or []] == [("SOL_CONTINER_NAME", "ixrt")]  # HAMi's sic
    assert container.resources.limits == limits  # one device: no whole-card vCore rewrite

    pod = control_plane.wait_bound(namespace, "corex")
    node = f"{namespace}-mr-v100"
    assert pod.spec.node_name == node
    annotations = pod.metadata.annotations
    # vMem is in units of 256 MiB: 8 → 2048 MiB; Iluvatar's default cores are 0.
    expected = f"GPU-{namespace}-ilu-0,MR-V100,2048,0:;"
    assert annotations[MR_V100_ALLOCATED] == expected == annotations[MR_V100_TO_ALLOCATE]
    assert names.POD_DEVICES_ALLOCATED not in annotations and DCU_ALLOCATED not in annotations
    (grants,) = decode_pod_devices(annotations[MR_V100_ALLOCATED])
    assert [(grant.uuid, grant.vendor, grant.memory_mib) for grant in grants] == [
        (f"GPU-{namespace}-ilu-0", "MR-V100", 2048)]
    _assert_scheduled_events(control_plane, namespace, "corex", node)


def _json_register(*gpus: dict[str, object]) -> str:
    """An NVIDIA register annotation as HAMi v2.10's device plugin marshals it (compact, omitempty fields)."""
    return json.dumps(list(gpus), separators=(",", ":"))


def _unhealthy_gpu(uuid: str, *, index: int, devmem: int) -> dict[str, object]:
    # Go's encoding/json drops "health": false (omitempty), as it drops a zero index and numa.
    gpu: dict[str, object] = {"id": uuid, "count": 10, "devmem": devmem, "devcore": 100,
                              "type": "NVIDIA-NVIDIA A100-SXM4-80GB", "mode": "hami-core"}
    if index:
        gpu["index"] = index
    return gpu


def test_a_gpu_whose_health_is_omitted_is_never_chosen(control_plane: ControlPlane, namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    name = f"{namespace}-half-sick"
    sick, well = f"GPU-{name}-0", f"GPU-{name}-1"
    # The unhealthy GPU is listed first and is the emptier card (80 GiB against 45 GiB): were its missing health
    # read as healthy, the spread policy (lowest usage after the pod) would pick it.
    register = _json_register(_unhealthy_gpu(sick, index=0, devmem=81920),
                              {"id": well, "index": 1, "count": 10, "devmem": 46068, "devcore": 100, "type": A40,
                               "mode": "hami-core", "health": True})
    control_plane.create_node(name, labels=label, devices={"nvidia.com/gpu": "20"},
                              annotations={names.NODE_REGISTER: register, names.NODE_HANDSHAKE: _reported_now()})
    manifest = pod_manifest("picky", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"})],
                            node_selector=label)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    pod = control_plane.wait_bound(namespace, "picky")
    assert pod.spec.node_name == name
    (grants,) = decode_pod_devices(pod.metadata.annotations[names.POD_DEVICES_ALLOCATED])
    assert [(grant.uuid, grant.memory_mib) for grant in grants] == [(well, 20000)]


def test_a_node_whose_only_gpu_has_health_omitted_keeps_the_pod_pending(control_plane: ControlPlane,
                                                                       namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    name = f"{namespace}-sick"
    control_plane.create_node(name, labels=label, devices={"nvidia.com/gpu": "10"},
                              annotations={names.NODE_REGISTER: _json_register(
                                  _unhealthy_gpu(f"GPU-{name}-0", index=0, devmem=81920)),
                                  names.NODE_HANDSHAKE: _reported_now()})
    manifest = pod_manifest("hopeful", [gpu_container("cuda", {"nvidia.com/gpu": "1",
                                                               "nvidia.com/gpumem": "1000"})], node_selector=label)
    control_plane.core.create_namespaced_pod(namespace, manifest)

    failed = control_plane.wait_event(namespace, "hopeful", "FailedScheduling", containing="CardNotHealth")
    assert "1/1 CardNotHealth" in failed.message
    ours = control_plane.wait_event(namespace, "hopeful", "FilteringFailed")
    assert "CardNotHealth" in ours.message
    pod = control_plane.pod(namespace, "hopeful")
    assert pod.spec.node_name is None and pod.status.phase == "Pending"
    assert names.POD_DEVICES_ALLOCATED not in (pod.metadata.annotations or {})
    control_plane.delete_pod(namespace, "hopeful")  # stop kube-scheduler's retries for the rest of the session


def test_a_cambricon_mlu_pod_is_bound_onto_a_node_known_only_by_its_capacity(control_plane: ControlPlane,
                                                                               namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, mlu = f"{namespace}-nvidia", f"{namespace}-mlu"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    # As Cambricon's device plugin leaves a node: no annotation at all, the shares in capacity, the model as a label.
    control_plane.create_node(mlu, labels={**label, "Model": "MLU370-X4"}, annotations={}, devices={
        "cambricon.com/vmlu": "200", "cambricon.com/mlu.smlu.vmemory": "192", "cambricon.com/mlu.smlu.vcore": "200"})
    limits = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "48", "cambricon.com/mlu.smlu.vcore": "50"}
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("mlu", [gpu_container("neuware", limits)],
                                                                     node_selector=label))

    created = control_plane.pod(namespace, "mlu")
    # The webhook was called (matchConditions know cambricon.com/*) and routed the pod; it mutates nothing else.
    assert created.spec.scheduler_name == "hami-scheduler"
    assert created.spec.containers[0].resources.limits == limits

    pod = control_plane.wait_bound(namespace, "mlu")
    assert pod.spec.node_name == mlu
    annotations = pod.metadata.annotations
    # Two cards of 96 x 256 MiB; vmemory 48 is 12288 MiB; the profile is <index>_<cores>_<MiB / 256>.
    expected = f"{mlu}-cambricon-mlu-0,MLU,12288,50:;"
    assert annotations[MLU_ALLOCATED] == expected == annotations[MLU_TO_ALLOCATE]
    assert (annotations["CAMBRICON_DSMLU_PROFILE"], annotations["CAMBRICON_DSMLU_ASSIGNED"]) == ("0_50_48", "false")
    assert names.POD_DEVICES_ALLOCATED not in annotations
    node_annotations = control_plane.core.read_node(mlu).metadata.annotations or {}
    # Cambricon's own node lock, a bare RFC3339 time (it lapses after two minutes); never HAMi's mutex.lock.
    taken = datetime.fromisoformat(node_annotations[DSMLU_LOCK].replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - taken).total_seconds()) < 60
    assert names.NODE_LOCK not in node_annotations
    _assert_scheduled_events(control_plane, namespace, "mlu", mlu)
