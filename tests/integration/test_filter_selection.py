"""``/filter`` choosing among nodes, and explaining itself when nothing fits (docs/scheduling-rules.md#filter-reasons).

Covers: ``nvidia.com/use-gputype``/``nouse-gputype`` (substring, case-insensitive) and ``use-gpuuuid``/
``nouse-gpuuuid`` (exact) steering the node and GPU; an impossible selection giving every candidate a reason
in the ``"<n>/<total> <Reason>"`` format, sorted by reason, with a FilteringFailed warning event and the
rejection counted in the metrics; a container asking for more GPUs than a node has; an unregistered
candidate (``node unregistered``); a node whose register annotation is garbage (``InvalidRegisterAnnotation:
…`` for that node, the others keep working, a parse-error metric); the older text register format; unknown
policy annotations (the exact error of docs/scheduling-rules.md#scores-and-policies and a FilteringFailed event).
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_text
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    Scheduler,
    devices_of,
    events_for,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    plain_node,
    usage_by_gpu,
    wait_for,
)

T4 = "NVIDIA-Tesla T4"


@pytest.fixture
def mixed_cluster(apiserver: LocalCluster, runtime: Runtime) -> None:
    """``a40-node`` (2 × A40, ``a40-node-gpu0/1``) and ``t4-node`` (2 × T4)."""
    apiserver.load([gpu_node("a40-node", gpus("a40-node", 2)), gpu_node("t4-node", gpus("t4-node", 2, type=T4))])
    runtime.sync.sync_now()


@pytest.mark.parametrize(("annotations", "node", "gpu"), [
    ({names.POD_USE_GPU_TYPE: "a40"}, "a40-node", "a40-node-gpu0"),
    ({names.POD_USE_GPU_TYPE: " h100 , T4 ,"}, "t4-node", "t4-node-gpu0"),
    ({names.POD_NOUSE_GPU_TYPE: "A40"}, "t4-node", "t4-node-gpu0"),
    ({names.POD_USE_GPU_UUID: "t4-node-gpu1"}, "t4-node", "t4-node-gpu1"),
    ({names.POD_NOUSE_GPU_UUID: "a40-node-gpu0,a40-node-gpu1,t4-node-gpu0"}, "t4-node", "t4-node-gpu1"),
    ({names.POD_USE_GPU_UUID: "a40-node-gpu0,a40-node-gpu1", names.POD_NOUSE_GPU_UUID: "a40-node-gpu0"},
     "a40-node", "a40-node-gpu1"),
])
def test_type_and_uuid_selection_steer_the_node_and_gpu(mixed_cluster: None, scheduler: Scheduler,
                                                       apiserver: LocalCluster, annotations: dict[str, str],
                                                       node: str, gpu: str) -> None:
    apiserver.load([gpu_pod("pod1", gpu_limits(1, memory_mib=1000), annotations=annotations)])
    assert scheduler.schedule("pod1", ["a40-node", "t4-node"]) == node
    assert devices_of(apiserver, "pod1") == f"{gpu},NVIDIA,1000,0:;"


def test_an_impossible_selection_gives_every_node_a_reason_and_an_event(mixed_cluster: None, scheduler: Scheduler,
                                                                       apiserver: LocalCluster,
                                                                       runtime: Runtime) -> None:
    apiserver.load([plain_node("cpu-node"),
                    gpu_pod("pod1", annotations={names.POD_USE_GPU_TYPE: "H100"})])
    runtime.sync.sync_now()

    answer = scheduler.filter("pod1", ["a40-node", "t4-node", "cpu-node", "ghost"])

    assert answer["Error"] == ""
    assert not answer["NodeNames"]
    assert answer["FailedNodes"] == {"a40-node": "2/2 CardTypeMismatch", "t4-node": "2/2 CardTypeMismatch",
                                     "cpu-node": "node unregistered", "ghost": "node unregistered"}
    assert names.POD_ASSIGNED_NODE not in scheduler.pod("pod1")["metadata"]["annotations"]
    assert usage_by_gpu(runtime) == {}
    runtime.events.flush()
    [event] = events_for(apiserver, "pod1")
    assert (event["reason"], event["type"]) == ("FilteringFailed", "Warning")
    assert event["message"] == ("0/4 nodes fit: 2 nodes: CardTypeMismatch (a40-node, t4-node); "
                                "2 nodes: NodeUnregistered (cpu-node, ghost). "
                                "Every node's reason: kubectl hami explain default/pod1")
    assert event["involvedObject"]["uid"] == scheduler.pod("pod1")["metadata"]["uid"]
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_filter_node_rejections_total{reason="CardTypeMismatch"} 2.0' in metrics
    assert 'hami_web_filter_node_rejections_total{reason="NodeUnregistered"} 2.0' in metrics
    assert 'hami_web_filter_results_total{result="unschedulable"} 1.0' in metrics


def test_reasons_count_gpus_per_cause_sorted_by_reason(scheduler: Scheduler, apiserver: LocalCluster,
                                                      runtime: Runtime) -> None:
    only_gpu0 = {names.POD_USE_GPU_UUID: "node1-gpu0"}
    apiserver.load([gpu_node("node1", gpus("node1", 2)),
                    gpu_pod("full", gpu_limits(1, memory_mib=1000, cores=100), annotations=only_gpu0),
                    gpu_pod("pod1", gpu_limits(1, memory_mib=1000, cores=30), annotations=only_gpu0)])
    runtime.sync.sync_now()
    assert scheduler.filter("full", ["node1"])["NodeNames"] == ["node1"]

    answer = scheduler.filter("pod1", ["node1"])

    assert answer["FailedNodes"] == {"node1": "1/2 CardInsufficientCore, 1/2 CardUuidMismatch"}


def test_asking_for_more_gpus_than_a_node_has_is_node_insufficient_device(scheduler: Scheduler,
                                                                         apiserver: LocalCluster,
                                                                         runtime: Runtime) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 4)), gpu_pod("pod1", gpu_limits(5))])
    runtime.sync.sync_now()
    assert scheduler.filter("pod1", ["node1"])["FailedNodes"] == {"node1": "5/4 NodeInsufficientDevice"}


def test_a_garbage_register_annotation_fails_only_that_node(apiserver: LocalCluster, runtime: Runtime,
                                                           scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("broken", register="GPU-0,ten,8000,100,NVIDIA-A40,0,true:"), gpu_node("good"),
                    gpu_pod("pod1"), gpu_pod("pod2")])
    runtime.sync.sync_now()

    placed = scheduler.filter("pod1", ["broken", "good"])
    refused = scheduler.filter("pod2", ["broken"])

    assert placed["Error"] == "" and placed["NodeNames"] == ["good"]
    reason = refused["FailedNodes"]["broken"]
    assert reason.startswith("InvalidRegisterAnnotation: ") and "count 'ten' is not an integer" in reason
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_annotation_parse_errors_total{kind="node_register"} 1.0' in metrics
    assert 'hami_web_unreadable_objects{kind="node"} 1.0' in metrics


def test_a_repaired_register_annotation_is_read_again_from_the_watch(apiserver: LocalCluster, runtime: Runtime,
                                                                    scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", register="[{not json"), gpu_pod("pod1")])
    runtime.sync.sync_now()
    assert scheduler.filter("pod1", ["node1"])["FailedNodes"]["node1"].startswith("InvalidRegisterAnnotation: ")

    runtime.kube.patch_node("node1", {"metadata": {"annotations": {
        names.NODE_REGISTER: encode_register_text(gpus("node1", 1), with_index=False)}}})

    def placed() -> bool:
        return scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]

    wait_for(placed, what="the watch to deliver the repaired register annotation")
    assert scheduler.bind("pod1", "node1") == {"Error": ""}
    assert devices_of(apiserver, "pod1").startswith("node1-gpu0,NVIDIA,8000,")


def test_the_older_text_register_format_is_scheduled(apiserver: LocalCluster, runtime: Runtime,
                                                    scheduler: Scheduler) -> None:
    devices = [Device(uuid="GPU-03f69c50-207a-2038-9b45-23cac89cb67d", index=0, count=10, memory_mib=46068,
                      cores=100, type="NVIDIA-NVIDIA A40")]
    apiserver.load([gpu_node("node1", register=encode_register_text(devices, with_index=False)),
                    gpu_pod("pod1", gpu_limits(1, memory_mib="3k", cores=25))])
    runtime.sync.sync_now()
    assert scheduler.schedule("pod1", ["node1"]) == "node1"
    assert devices_of(apiserver, "pod1") == "GPU-03f69c50-207a-2038-9b45-23cac89cb67d,NVIDIA,3000,25:;"


@pytest.mark.parametrize(("key", "value"), [
    (names.POD_GPU_POLICY, "best"),
    (names.POD_NODE_POLICY, "binpak"),
])
def test_an_unknown_policy_annotation_is_placed_as_hami_reads_it(apiserver: LocalCluster, runtime: Runtime,
                                                                scheduler: Scheduler, key: str, value: str) -> None:
    """HAMi v2.10 sorts an unknown GPU policy as spread (``DeviceUsageList.Less``) and an unknown node policy as
    binpack (``NodeScoreList.Less``): the pod is placed, and the webhook has warned its owner."""
    apiserver.load([gpu_node("node1"), gpu_pod("pod1", annotations={key: value})])
    runtime.sync.sync_now()

    assert scheduler.schedule("pod1", ["node1"]) == "node1"
