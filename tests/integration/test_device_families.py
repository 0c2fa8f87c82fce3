"""NVIDIA, Hygon DCU and Iluvatar devices through ``/filter`` and ``/bind`` against the API
(docs/device-families.md#device-families).

Covers: a pod of each family (NVIDIA, DCU, Iluvatar MR-V100 with ``enable_iluvatar``) bound with exactly its own
family's ``…-devices-to-allocate``/``…-allocated`` keys (the example values of
docs/wire-formats.md#pod-device-annotation, the DCU's whole-card and Iluvatar's 100 % memory defaults),
``hami.io/vgpu-node`` and its label, and no other family's keys; an Iluvatar ask that is not ours while Iluvatar is
disabled; one pod asking for GPU and DCU in one container (with an init container and a DCU-only container) getting
both, each family's keys positional with one entry per container, the usage rebuilt from both keys by a fresh server;
such a pod getting neither family when one cannot fit, the node's reason naming the failing family and nothing booked,
the FilteringFailed event and the rejection metric counting such a reason (and a family's ``InvalidRegisterAnnotation``)
under its cause; a malformed DCU register beside a healthy GPU inventory (GPU pods still scheduled, DCU asks refused
``DCU: InvalidRegisterAnnotation: hami.io/node-dcu-register: …``); a family's handshake gone (``Deleted_``, or
``Requesting_`` over 60 s with no ``hygon.com/dcunum``) taking only that family off the node; the node score covering
every family's devices (binpack sends a DCU pod to the node whose GPU is used, spread away from it); per-family
selection (``hygon.com/use-gpuuuid``/``use-dcutype`` steer DCUs, ``nvidia.com/…`` selections and
``hami.io/device-cordon`` never touch them); ``nvidia.com/vgpu-mode`` both ways; a dynamic-MIG GPU giving
instances (or ``CardMigTopologyInfeasible``) with their reservation written beside a hami-core GPU giving slices; a
JSON-registered GPU without ``health`` never chosen; a DCU pod's
``hami.io/dcu-devices-allocated`` (ours, or HAMi v2.10's compact value) rebuilt by a restarted server so no second pod
overbooks the card; the handshakes written to ``hami.io/node-handshake-dcu`` and ``hami.io/node-handshake-MR-V100``,
NVIDIA's left alone.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    DCU_REGISTER,
    FakeClock,
    RuntimeFactory,
    Scheduler,
    annotations_of,
    container,
    dcu_limits,
    dcu_node,
    dcus,
    device_node,
    events_for,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    iluvatar_limits,
    release_lock,
    text_register,
    usage_by_gpu,
    wait_for,
)

# The example registers of docs/wire-formats.md#node-register-annotation, verbatim.
DCU_SPEC_REGISTER = "DCU-0,4,65520,100,DCU-BW100,0,true:DCU-1,4,65520,100,DCU-BW100,0,true:"
ILUVATAR_UUID = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae"
ILUVATAR_REGISTER_KEY = "hami.io/node-MR-V100-register"
ILUVATAR_SPEC_REGISTER = f"{ILUVATAR_UUID},10,8192,100,MR-V100,0,true:"

VGPU_KEYS = ("hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated")
DCU_KEYS = ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated")
ILUVATAR_KEYS = ("hami.io/MR-V100-devices-to-allocate", "hami.io/MR-V100-devices-allocated")
DCU_HANDSHAKE = "hami.io/node-handshake-dcu"
NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()
CANDIDATES = ["mixed", "ilu"]


def _mixed_node(name: str = "mixed", *, dcu_register: str = DCU_SPEC_REGISTER, gpu_count: int = 2,
                handshakes: dict[str, str | None] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A node with ``gpu_count`` A40s (``<name>-gpu<i>``, JSON register) and the DCUs of ``dcu_register``."""
    return device_node(name, {names.NODE_REGISTER: encode_register_json(gpus(name, gpu_count)),
                              DCU_REGISTER: dcu_register}, handshakes=handshakes, annotations=annotations)


def _device_keys(apiserver: LocalCluster, pod: str) -> dict[str, str]:
    """The pod's ``…-devices-…`` annotations, as stored in the API server."""
    return {key: value for key, value in annotations_of(apiserver, "pods", pod).items() if "-devices-" in key}


def _both(keys: tuple[str, str], value: str) -> dict[str, str]:
    return {key: value for key in keys}


@pytest.fixture
def families(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> Runtime:
    """``mixed`` (2 A40s ``mixed-gpu0/1`` and the example DCUs ``DCU-0/1``) and ``ilu`` (the example MR-V100), with a
    runtime that has Iluvatar enabled."""
    apiserver.load([_mixed_node(), device_node("ilu", {ILUVATAR_REGISTER_KEY: ILUVATAR_SPEC_REGISTER})])
    return make_runtime(enable_iluvatar=True)


# -- one pod per family ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("limits", "node", "keys", "value"), [
    (gpu_limits(1, memory_mib=1000, cores=30), "mixed", VGPU_KEYS, "mixed-gpu0,NVIDIA,1000,30:;"),
    (dcu_limits(1, memory_mib=16384, cores=50), "mixed", DCU_KEYS, "DCU-0,DCU,16384,50:;"),  # wire-formats.md example
    (dcu_limits(1), "mixed", DCU_KEYS, "DCU-0,DCU,65520,100:;"),  # no memory: 100 %; no cores: the whole card
    (iluvatar_limits("MR-V100", memory_units=8, cores=50), "ilu", ILUVATAR_KEYS,
     f"{ILUVATAR_UUID},MR-V100,2048,50:;"),  # vMem in units of 256 MiB; wire-formats.md example
    (iluvatar_limits("MR-V100"), "ilu", ILUVATAR_KEYS, f"{ILUVATAR_UUID},MR-V100,8192,0:;"),  # 100 %, 0 cores
], ids=["nvidia", "dcu", "dcu-defaults", "iluvatar", "iluvatar-defaults"])
def test_a_pod_of_each_family_is_bound_with_only_that_familys_annotations(
        families: Runtime, apiserver: LocalCluster, limits: dict[str, str], node: str, keys: tuple[str, str],
        value: str) -> None:
    apiserver.load([gpu_pod("pod1", limits)])
    scheduler = Scheduler(families.app.test_client(), apiserver)

    assert scheduler.schedule("pod1", CANDIDATES) == node

    stored = scheduler.pod("pod1")
    assert stored["spec"]["nodeName"] == node
    assert _device_keys(apiserver, "pod1") == _both(keys, value)  # no key of another family, NVIDIA's included
    annotations = stored["metadata"]["annotations"]
    assert annotations[names.POD_ASSIGNED_NODE] == node
    assert annotations[names.POD_BIND_PHASE] == "allocating"


def test_an_iluvatar_ask_is_not_ours_while_iluvatar_is_disabled(apiserver: LocalCluster, runtime: Runtime,
                                                                scheduler: Scheduler) -> None:
    apiserver.load([device_node("ilu", {ILUVATAR_REGISTER_KEY: ILUVATAR_SPEC_REGISTER}),
                    gpu_pod("pod1", iluvatar_limits("MR-V100", memory_units=8))])
    runtime.sync.sync_now()

    answer = scheduler.filter("pod1", ["ilu", "elsewhere"])

    # A pod that asks for no enabled family passes every node and is booked nowhere
    # (docs/scheduling-rules.md#the-filter-step-by-step, step 1).
    assert answer["Error"] == "" and answer["NodeNames"] == ["ilu", "elsewhere"]
    assert runtime.cache.placed(scheduler.pod("pod1")["metadata"]["uid"]) is None


# -- several families in one pod ------------------------------------------------------------------------------


def test_a_pod_asking_for_gpu_and_dcu_in_one_container_gets_both(families: Runtime, apiserver: LocalCluster,
                                                                make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_pod("both", init_containers=[container("setup", dcu_limits(1, memory_mib=8000, cores=50))],
                            containers=[
                                container("a", {**gpu_limits(1, memory_mib=1000, cores=30),
                                                **dcu_limits(1, memory_mib=4096, cores=20)}),
                                container("b", dcu_limits(1, memory_mib=2048, cores=10)),
                                container("sidecar")])])
    scheduler = Scheduler(families.app.test_client(), apiserver)

    assert scheduler.schedule("both", CANDIDATES) == "mixed"

    # One entry per container (init first) in each family's keys, empty where the container has none of it.
    # The init container is fitted alone (DCU-0), the containers one after another (spread: DCU-0, then DCU-1).
    assert _device_keys(apiserver, "both") == {
        **_both(DCU_KEYS, "DCU-0,DCU,8000,50:;DCU-0,DCU,4096,20:;DCU-1,DCU,2048,10:;;"),
        **_both(VGPU_KEYS, ";mixed-gpu0,NVIDIA,1000,30:;;;")}
    # DCU-0 holds the larger of the init container's peak and the containers' sum.
    expected = {"DCU-0": (1, 8000, 50), "DCU-1": (1, 2048, 10), "mixed-gpu0": (1, 1000, 30)}
    assert usage_by_gpu(families) == expected
    release_lock(families.kube, "both", "mixed")

    restarted = make_runtime(enable_iluvatar=True)  # its cache is built from the API alone: both families' keys

    assert usage_by_gpu(restarted) == expected


@pytest.mark.parametrize(("limits", "reason"), [
    ({**gpu_limits(1, memory_mib=1000), **dcu_limits(1, memory_mib=70000)}, "DCU: 2/2 CardInsufficientMemory"),
    ({**gpu_limits(1, memory_mib=9000), **dcu_limits(1, memory_mib=1000)}, "NVIDIA: 2/2 CardInsufficientMemory"),
    ({**gpu_limits(3), **dcu_limits(1, memory_mib=1000)}, "NVIDIA: 3/2 NodeInsufficientDevice"),
], ids=["dcu-too-big", "gpu-too-big", "too-many-gpus"])
def test_a_pod_gets_neither_family_when_one_cannot_fit(families: Runtime, apiserver: LocalCluster,
                                                       limits: dict[str, str], reason: str) -> None:
    apiserver.load([gpu_pod("both", containers=[container("main", limits)])])
    scheduler = Scheduler(families.app.test_client(), apiserver)

    answer = scheduler.filter("both", ["mixed"])

    assert answer["Error"] == "" and not answer["NodeNames"]
    assert answer["FailedNodes"] == {"mixed": reason}
    assert usage_by_gpu(families) == {}  # the family that would have fitted booked nothing either
    assert families.cache.placed(scheduler.pod("both")["metadata"]["uid"]) is None
    families.events.flush()
    assert [event["reason"] for event in events_for(apiserver, "both")] == ["FilteringFailed"]


def test_a_refusal_naming_its_family_is_counted_under_its_cause(apiserver: LocalCluster, runtime: Runtime,
                                                                scheduler: Scheduler) -> None:
    apiserver.load([_mixed_node(), _mixed_node("broken", dcu_register="DCU-0,four,65520,100,DCU-BW100,0,true:"),
                    gpu_pod("both", containers=[container("main", {**gpu_limits(1, memory_mib=1000),
                                                                   **dcu_limits(1, memory_mib=70000)})])])
    runtime.sync.sync_now()

    answer = scheduler.filter("both", ["mixed", "broken"])

    assert answer["FailedNodes"]["mixed"] == "DCU: 2/2 CardInsufficientMemory"
    assert answer["FailedNodes"]["broken"].startswith("DCU: InvalidRegisterAnnotation: ")
    runtime.events.flush()
    [event] = events_for(apiserver, "both")
    assert "CardInsufficientMemory (mixed)" in event["message"], event["message"]
    assert "InvalidRegisterAnnotation (broken)" in event["message"], event["message"]
    assert "Other" not in event["message"], event["message"]
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_filter_node_rejections_total{reason="CardInsufficientMemory"} 1.0' in metrics
    assert 'hami_web_filter_node_rejections_total{reason="InvalidRegisterAnnotation"} 1.0' in metrics
    assert 'reason="Other"' not in metrics


def test_a_malformed_dcu_register_refuses_dcu_asks_and_keeps_the_gpus(apiserver: LocalCluster, runtime: Runtime,
                                                                      scheduler: Scheduler) -> None:
    apiserver.load([_mixed_node(dcu_register="DCU-0,four,65520,100,DCU-BW100,0,true:"),
                    gpu_pod("gpu-pod", gpu_limits(1, memory_mib=1000)),
                    gpu_pod("dcu-pod", dcu_limits(1, memory_mib=1000)),
                    gpu_pod("both", containers=[container("main", {**gpu_limits(1), **dcu_limits(1)})])])
    runtime.sync.sync_now()

    assert scheduler.schedule("gpu-pod", ["mixed"]) == "mixed"
    assert _device_keys(apiserver, "gpu-pod") == _both(VGPU_KEYS, "mixed-gpu0,NVIDIA,1000,0:;")
    for pod in ("dcu-pod", "both"):
        answer = scheduler.filter(pod, ["mixed"])
        assert not answer["NodeNames"], (pod, answer)
        reason = answer["FailedNodes"]["mixed"]
        assert reason.startswith("DCU: InvalidRegisterAnnotation: hami.io/node-dcu-register: "), (pod, reason)
        assert "count 'four' is not an integer" in reason
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_annotation_parse_errors_total{kind="node_register"} 1.0' in metrics


@pytest.mark.parametrize(("handshake", "dcus_allocatable"), [
    ("Deleted_2025-03-04 05:06:00", "2"),
    ("Requesting_2025-03-04 05:05:00", "0"),  # 67 s without an answer and the kubelet has no hygon.com/dcunum
])
def test_a_family_whose_device_plugin_is_gone_leaves_the_node_and_the_others_stay(
        apiserver: LocalCluster, make_runtime: RuntimeFactory, handshake: str, dcus_allocatable: str) -> None:
    node = _mixed_node(handshakes={DCU_HANDSHAKE: handshake})
    node["status"]["allocatable"]["hygon.com/dcunum"] = dcus_allocatable
    apiserver.load([node, gpu_pod("gpu-pod", gpu_limits(1, memory_mib=1000)),
                    gpu_pod("dcu-pod", dcu_limits(1, memory_mib=1000))])
    runtime = make_runtime(clock=FakeClock(NOW))
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    refused = scheduler.filter("dcu-pod", ["mixed"])
    assert not refused["NodeNames"] and refused["FailedNodes"]["mixed"].endswith(" NodeInsufficientDevice")
    assert scheduler.schedule("gpu-pod", ["mixed"]) == "mixed"



@pytest.mark.parametrize(("policy", "node"), [("binpack", "mixed"), ("spread", "hygon")])
def test_the_node_score_covers_every_familys_devices(apiserver: LocalCluster, runtime: Runtime,
                                                     scheduler: Scheduler, policy: str, node: str) -> None:
    apiserver.load([_mixed_node(gpu_count=1), dcu_node("hygon"), gpu_pod("gpu-pod", gpu_limits(1, cores=80)),
                    gpu_pod("dcu-pod", dcu_limits(1, memory_mib=1000, cores=10),
                            annotations={names.POD_NODE_POLICY: policy})])
    runtime.sync.sync_now()
    assert scheduler.schedule("gpu-pod", ["mixed"]) == "mixed"
    release_lock(runtime.kube, "gpu-pod", "mixed")  # a node busy binding would be tried last

    # Only its GPU is used, yet the mixed node is the fuller one for a DCU pod too (the node score covers every family's
    # devices).
    wait_for(lambda: scheduler.filter("dcu-pod", ["hygon", "mixed"])["NodeNames"] == [node],
             what=f"{policy} to pick {node} once the lock release reached the cache")

# -- per-family selection -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("annotations", "dcu"), [
    ({"hygon.com/use-gpuuuid": "DCU-1"}, "DCU-1"),
    ({"hygon.com/nouse-gpuuuid": "DCU-0"}, "DCU-1"),
    ({"hygon.com/use-dcutype": "bw100", "hygon.com/nouse-gpuuuid": "DCU-0"}, "DCU-1"),
    # NVIDIA's selections and cordon are NVIDIA's: they never keep a DCU away.
    ({names.POD_USE_GPU_UUID: "mixed-gpu1", names.POD_NOUSE_GPU_UUID: "DCU-0", names.POD_USE_GPU_TYPE: "A40"},
     "DCU-0"),
])
def test_dcu_selection_annotations_steer_the_dcu_and_nvidias_do_not(apiserver: LocalCluster, runtime: Runtime,
                                                                   scheduler: Scheduler,
                                                                   annotations: dict[str, str], dcu: str) -> None:
    apiserver.load([_mixed_node(annotations={names.NODE_DEVICE_CORDON: "DCU-0,mixed-gpu0"}),
                    gpu_pod("pod1", containers=[container("main", {**gpu_limits(1, memory_mib=1000),
                                                                   **dcu_limits(1, memory_mib=1000, cores=10)})],
                            annotations=annotations)])
    runtime.sync.sync_now()

    assert scheduler.schedule("pod1", ["mixed"]) == "mixed"

    assert _device_keys(apiserver, "pod1") == {**_both(DCU_KEYS, f"{dcu},DCU,1000,10:;"),
                                               **_both(VGPU_KEYS, "mixed-gpu1,NVIDIA,1000,0:;")}


def test_a_dcu_type_nobody_has_is_a_type_mismatch_naming_the_family(apiserver: LocalCluster, runtime: Runtime,
                                                                     scheduler: Scheduler) -> None:
    apiserver.load([_mixed_node(), gpu_pod("pod1", dcu_limits(1), annotations={"hygon.com/use-dcutype": "Z100"})])
    runtime.sync.sync_now()
    assert scheduler.filter("pod1", ["mixed"])["FailedNodes"] == {"mixed": "DCU: 2/2 CardTypeMismatch"}


# -- NVIDIA device modes and health --------------------------------------------------------------------------


def _register(*entries: dict[str, Any]) -> str:
    return json.dumps(list(entries))


def _a40(uuid: str, index: int, **fields: Any) -> dict[str, Any]:
    return {"id": uuid, "index": index, "count": 10, "devmem": 8000, "devcore": 100, "type": "NVIDIA-NVIDIA A40",
            **fields}


MODES_REGISTER = _register(_a40("modes-gpu0", 0, mode="mps", health=True),
                           _a40("modes-gpu1", 1, mode="hami-core", health=True))


@pytest.mark.parametrize(("count", "annotations", "devices", "reason"), [
    (1, {"nvidia.com/vgpu-mode": "hami-core"}, "modes-gpu1,NVIDIA,1000,0:;", ""),  # skips the emptier-indexed mps
    (1, {"nvidia.com/vgpu-mode": "mps"}, "modes-gpu0,NVIDIA,1000,0:;", ""),
    (2, {}, "modes-gpu0,NVIDIA,1000,0:modes-gpu1,NVIDIA,1000,0:;", ""),  # no annotation: any mode
    (1, {"nvidia.com/vgpu-mode": "mig"}, "", "2/2 CardTypeMismatch"),
    (2, {"nvidia.com/vgpu-mode": "hami-core"}, "", "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch"),
])
def test_vgpu_mode_picks_gpus_of_that_mode_and_no_annotation_takes_any(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler, count: int, annotations: dict[str, str],
        devices: str, reason: str) -> None:
    apiserver.load([gpu_node("modes", register=MODES_REGISTER),
                    gpu_pod("pod1", gpu_limits(count, memory_mib=1000), annotations=annotations)])
    runtime.sync.sync_now()

    if reason:
        assert scheduler.filter("pod1", ["modes"])["FailedNodes"] == {"modes": reason}
        return
    assert scheduler.schedule("pod1", ["modes"]) == "modes"
    assert _device_keys(apiserver, "pod1") == _both(VGPU_KEYS, devices)


# A dynamic-MIG GPU as HAMi v2.10's device plugin registers it (with ``migProfiles``).
MIG_GPU = {"id": "mig-gpu0", "count": 7, "devmem": 40960, "devcore": 100, "type": "NVIDIA A100-SXM4-40GB",
           "mode": "mig", "migProfiles": [{"name": "2g.10gb", "memoryMB": 9984, "core": 29, "sliceCount": 2,
                                           "placements": [{"start": 0, "size": 2}, {"start": 2, "size": 2}]}],
           "health": True}


@pytest.mark.parametrize(("count", "annotations", "devices", "reason"), [
    (1, {names.POD_USE_GPU_UUID: "mig-gpu0"}, "mig-gpu0,NVIDIA,9984,29:;", ""),
    (1, {"nvidia.com/vgpu-mode": "mig"}, "mig-gpu0,NVIDIA,9984,29:;", ""),
    (1, {"nvidia.com/vgpu-mode": "hami-core"}, "mig-gpu1,NVIDIA,1000,0:;", ""),
    (2, {"nvidia.com/vgpu-mode": "mig"}, "mig-gpu0,NVIDIA,9984,29:mig-gpu0,NVIDIA,9984,29:;", ""),
    (3, {"nvidia.com/vgpu-mode": "mig"}, "",
     "2/2 AllocatedCardsInsufficientRequest, 1/2 CardMigTopologyInfeasible, 1/2 CardTypeMismatch"),
])
def test_a_mig_mode_gpu_gives_instances_and_its_hami_core_neighbour_slices(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler, count: int, annotations: dict[str, str],
        devices: str, reason: str) -> None:
    apiserver.load([gpu_node("mig", register=_register(MIG_GPU, _a40("mig-gpu1", 1, mode="hami-core", health=True))),
                    gpu_pod("pod1", gpu_limits(count, memory_mib=1000), annotations=annotations)])
    runtime.sync.sync_now()

    if reason:
        assert scheduler.filter("pod1", ["mig"])["FailedNodes"] == {"mig": reason}
        return
    assert scheduler.schedule("pod1", ["mig"]) == "mig"
    assert _device_keys(apiserver, "pod1") == _both(VGPU_KEYS, devices)
    reservations = annotations_of(apiserver, "pods", "pod1").get(names.POD_MIG_RESERVATIONS)
    if devices.startswith("mig-gpu0"):
        assert reservations is not None
        assert [(r["deviceIndex"], r["placement"]["start"]) for r in json.loads(reservations)] == [
            (position, 2 * position) for position in range(count)]
    else:
        assert reservations is None


def test_an_earlier_bookings_mig_reservations_are_removed_when_the_pod_is_booked_elsewhere(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    """A Binding adds annotations but removes none: a pod that still carries the MIG reservations of an earlier,
    voided booking is booked apart, its patch removing them (`cleared_annotations`), before its Binding."""
    apiserver.load([gpu_node("mig", register=_register(MIG_GPU, _a40("mig-gpu1", 1, mode="hami-core", health=True))),
                    gpu_pod("earlier", gpu_limits(1, memory_mib=1000), annotations={"nvidia.com/vgpu-mode": "mig"})])
    runtime.sync.sync_now()
    assert scheduler.schedule("earlier", ["mig"]) == "mig"
    leftover = annotations_of(apiserver, "pods", "earlier")[names.POD_MIG_RESERVATIONS]
    release_lock(runtime.kube, "earlier", "mig")
    apiserver.load([gpu_pod("pod1", gpu_limits(1, memory_mib=1000), annotations={
        "nvidia.com/vgpu-mode": "hami-core", names.POD_MIG_RESERVATIONS: leftover, names.POD_BIND_PHASE: "failed"})])

    assert scheduler.schedule("pod1", ["mig"]) == "mig"

    annotations = annotations_of(apiserver, "pods", "pod1")
    assert annotations[names.POD_DEVICES_ALLOCATED] == "mig-gpu1,NVIDIA,1000,0:;"
    assert names.POD_MIG_RESERVATIONS not in annotations


def test_a_gpu_registered_without_health_is_never_chosen(apiserver: LocalCluster, runtime: Runtime,
                                                         scheduler: Scheduler) -> None:
    # Go's encoding/json leaves an omitted ``health`` false: the device is unhealthy
    # (docs/wire-formats.md#node-register-annotation).
    register = _register(_a40("health-gpu0", 0), _a40("health-gpu1", 1, health=True))
    apiserver.load([gpu_node("health", register=register),
                    *(gpu_pod(f"pod{index}", gpu_limits(1, memory_mib=1500)) for index in range(4)),
                    gpu_pod("pinned", gpu_limits(1, memory_mib=1000),
                            annotations={names.POD_USE_GPU_UUID: "health-gpu0"}),
                    gpu_pod("two", gpu_limits(2, memory_mib=1000))])
    runtime.sync.sync_now()

    for index in range(4):  # spread would take the empty health-gpu0 from the second pod on, were it healthy
        assert scheduler.schedule(f"pod{index}", ["health"]) == "health"
        assert _device_keys(apiserver, f"pod{index}") == _both(VGPU_KEYS, "health-gpu1,NVIDIA,1500,0:;")
        release_lock(runtime.kube, f"pod{index}", "health")

    assert scheduler.filter("pinned", ["health"])["FailedNodes"] == {"health": "1/2 CardNotHealth, "
                                                                               "1/2 CardUuidMismatch"}
    assert scheduler.filter("two", ["health"])["FailedNodes"] == {
        "health": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth"}
    assert usage_by_gpu(runtime) == {"health-gpu1": (4, 6000, 0)}


# -- usage rebuilt after a restart, and the handshake ---------------------------------------------------------


def test_a_restarted_server_rebuilds_dcu_usage_and_does_not_overbook(apiserver: LocalCluster,
                                                                     make_runtime: RuntimeFactory) -> None:
    apiserver.load([dcu_node("hygon", dcus("hygon", 1, memory_mib=16384)),
                    gpu_pod("first", dcu_limits(1, memory_mib=12000, cores=30)),
                    gpu_pod("too-much-memory", dcu_limits(1, memory_mib=8000, cores=10)),
                    gpu_pod("whole-card", dcu_limits(1, memory_mib=1000)),  # no cores: all 100
                    gpu_pod("fits", dcu_limits(1, memory_mib=4000, cores=70))])
    before = make_runtime()
    assert Scheduler(before.app.test_client(), apiserver).schedule("first", ["hygon"]) == "hygon"
    release_lock(before.kube, "first", "hygon")
    assert _device_keys(apiserver, "first") == _both(DCU_KEYS, "hygon-dcu0,DCU,12000,30:;")
    before.stop()

    after = make_runtime()  # a fresh process: nothing but the API tells it what "first" holds
    scheduler = Scheduler(after.app.test_client(), apiserver)

    assert usage_by_gpu(after) == {"hygon-dcu0": (1, 12000, 30)}
    assert scheduler.filter("too-much-memory", ["hygon"])["FailedNodes"] == {"hygon": "1/1 CardInsufficientMemory"}
    assert scheduler.filter("whole-card", ["hygon"])["FailedNodes"] == {"hygon": "1/1 CardInsufficientCore"}
    assert scheduler.schedule("fits", ["hygon"]) == "hygon"
    assert _device_keys(apiserver, "fits") == _both(DCU_KEYS, "hygon-dcu0,DCU,4000,70:;")
    assert usage_by_gpu(after) == {"hygon-dcu0": (2, 16000, 100)}


def test_hami_v2_10s_compact_dcu_annotation_is_counted_for_its_container(apiserver: LocalCluster,
                                                                         make_runtime: RuntimeFactory) -> None:
    # HAMi v2.10 leaves out the empty entry of the container without a DCU (docs/wire-formats.md#pod-device-annotation):
    # one entry, two containers.
    compact = "hygon-dcu0,DCU,12000,30:;"
    running = gpu_pod("running", containers=[container("web"), container("main", dcu_limits(1, memory_mib=12000,
                                                                                            cores=30))],
                      annotations={names.POD_ASSIGNED_NODE: "hygon", DCU_KEYS[0]: compact, DCU_KEYS[1]: compact,
                                   names.POD_BIND_PHASE: "success"})
    running["spec"]["nodeName"] = "hygon"
    apiserver.load([dcu_node("hygon", dcus("hygon", 1, memory_mib=16384)), running,
                    gpu_pod("too-much-memory", dcu_limits(1, memory_mib=8000, cores=10))])
    runtime = make_runtime()

    assert usage_by_gpu(runtime) == {"hygon-dcu0": (1, 12000, 30)}
    assert Scheduler(runtime.app.test_client(), apiserver).filter("too-much-memory", ["hygon"])["FailedNodes"] == {
        "hygon": "1/1 CardInsufficientMemory"}


@pytest.mark.parametrize("handshake", [None, "Reported_2025-03-04 05:00:00"])
def test_each_familys_handshake_is_answered_on_its_own_key(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                                           handshake: str | None) -> None:
    iluvatar_handshake = "hami.io/node-handshake-MR-V100"
    apiserver.load([device_node("hygon", {DCU_REGISTER: text_register(dcus("hygon"))},
                                handshakes={DCU_HANDSHAKE: handshake}),
                    _mixed_node(handshakes={DCU_HANDSHAKE: handshake}),
                    device_node("ilu", {ILUVATAR_REGISTER_KEY: ILUVATAR_SPEC_REGISTER},
                                handshakes={iluvatar_handshake: handshake})])
    make_runtime(clock=FakeClock(NOW), enable_iluvatar=True)
    due = [("hygon", DCU_HANDSHAKE), ("mixed", DCU_HANDSHAKE), ("ilu", iluvatar_handshake)]

    def answered() -> bool:
        return all(annotations_of(apiserver, "nodes", node).get(key) == "Requesting_2025-03-04 05:06:07"
                   for node, key in due)

    wait_for(answered, what="the DCU and MR-V100 handshakes to be written")
    # NVIDIA's handshake is its own: a fresh Requesting_ stays as it is, and a node without GPUs gets none.
    assert annotations_of(apiserver, "nodes", "mixed")[names.NODE_HANDSHAKE] == "Requesting_2099-01-01 00:00:00"
    assert names.NODE_HANDSHAKE not in annotations_of(apiserver, "nodes", "hygon")
    assert names.NODE_HANDSHAKE not in annotations_of(apiserver, "nodes", "ilu")
