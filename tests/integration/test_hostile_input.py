"""Hostile annotations and requests (docs/security.md#hardening): one bad object never stops scheduling, metrics or the
sync.

Covers, through the HTTP routes against the in-process API server: a pod whose device annotation carries a
400-digit number (sync keeps going, ``/metrics`` answers, other pods are filtered); a pod that asks for no
GPU but carries a booking, and one holding more GPUs than it asks for (they hold nothing); a node whose
register annotation has a 400-digit ``devmem`` or a ``1e308`` ``devcore`` (the node is refused with the reason,
``/metrics`` answers); a GPU UUID with a ``,`` or ``:`` (refused at registration, so an exclusive card is never
given twice); ``1e2000000`` / ``1e100000`` / ``1e5000`` quantities at ``/webhook`` and ``/filter`` (refused with a
clear message); pod annotations of the wrong JSON type at ``/filter`` (a clear ``Error``, never
``internal error``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import A40, Scheduler, gpu_limits, gpu_node, gpu_pod, gpus, observe_pod, usage_by_gpu

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HUGE = "9" * 400


def _bound_pod(name: str, devices: str, *, limits: dict[str, str] | None = None) -> dict[str, Any]:
    """A running pod on node1 that carries ``devices`` as its booking (anyone may write their pod's annotations)."""
    pod = gpu_pod(name, limits, annotations={names.POD_ASSIGNED_NODE: "node1", names.POD_DEVICES_ALLOCATED: devices})
    pod["spec"]["nodeName"] = "node1"
    pod["status"] = {"phase": "Running"}
    return pod


def _metrics(runtime: Runtime) -> str:
    response = runtime.app.test_client().get("/metrics")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_hostile_bookings_hold_nothing_and_stop_nothing(apiserver: LocalCluster, runtime: Runtime,
                                                        scheduler: Scheduler) -> None:
    apiserver.load([
        gpu_node("node1", gpus("node1", 1, count=2)),
        _bound_pod("huge-memory", f"node1-gpu0,NVIDIA,{HUGE},10:;"),
        _bound_pod("huge-cores", f"node1-gpu0,NVIDIA,10,{HUGE}:;"),
        _bound_pod("asks-for-nothing", "node1-gpu0,NVIDIA,8000,100:;", limits={}),
        _bound_pod("more-than-asked", "node1-gpu0,NVIDIA,10,1:node1-gpu0,NVIDIA,10,1:;"),
        gpu_pod("pod1", gpu_limits(1, memory_mib=1000, cores=10)),
    ])
    runtime.sync.sync_now()

    answer = scheduler.filter("pod1", ["node1"])

    assert answer["Error"] == "" and answer["NodeNames"] == ["node1"]
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 1000, 10)}  # only pod1's booking counts
    assert runtime.sync.pods.errors == 0
    assert 'hami_web_unreadable_objects{kind="pod"} 4.0' in _metrics(runtime)


def test_a_hostile_booking_arriving_by_watch_changes_nothing(apiserver: LocalCluster, runtime: Runtime,
                                                            scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=2)), _bound_pod("evil", "node1-gpu0,NVIDIA,1,1:;")])
    runtime.sync.sync_now()
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 1, 1)}

    evil = scheduler.pod("evil")
    evil["metadata"]["annotations"][names.POD_DEVICES_ALLOCATED] = f"node1-gpu0,NVIDIA,{HUGE},1:;"
    observe_pod(runtime.cache, "MODIFIED", evil)

    assert usage_by_gpu(runtime) == {}
    assert "huge" not in _metrics(runtime)


@pytest.mark.parametrize("register", [
    pytest.param(f"GPU-a,10,{HUGE},100,{A40},0,true:", id="400-digit-devmem"),
    pytest.param(f"GPU-a,10,8000,{HUGE},{A40},0,true:", id="400-digit-devcore"),
    pytest.param(json.dumps([{"id": "GPU-a", "count": 10, "devmem": 8000, "devcore": 1e308, "type": A40}]),
                 id="1e308-devcore"),
    pytest.param(json.dumps([{"id": "GPU-a,GPU-b", "count": 10, "devmem": 8000, "devcore": 100, "type": A40}]),
                 id="uuid-with-a-comma"),
    pytest.param(f"GPU-a;x,10,8000,100,{A40},0,true:", id="uuid-with-a-semicolon"),
])
def test_a_node_with_an_unusable_register_annotation_is_refused_with_the_reason(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler, register: str) -> None:
    apiserver.load([gpu_node("bad", register=register), gpu_node("node1"), gpu_pod("pod1")])
    runtime.sync.sync_now()

    answer = scheduler.filter("pod1", ["bad"])
    assert answer["FailedNodes"]["bad"].startswith("InvalidRegisterAnnotation: ")
    assert len(answer["FailedNodes"]["bad"]) < 300
    assert scheduler.filter("pod1", ["bad", "node1"])["NodeNames"] == ["node1"]
    assert 'hami_web_unreadable_objects{kind="node"} 1.0' in _metrics(runtime)


def test_a_uuid_with_a_colon_cannot_make_an_exclusive_card_be_given_twice(apiserver: LocalCluster,
                                                                          runtime: Runtime,
                                                                          scheduler: Scheduler) -> None:
    register = encode_register_json([*gpus("node1", 1, count=10)]).replace("node1-gpu0", "GPU-x:y")
    apiserver.load([gpu_node("node1", register=register), gpu_pod("pod1"), gpu_pod("pod2")])
    runtime.sync.sync_now()

    for pod in ("pod1", "pod2"):
        answer = scheduler.filter(pod, ["node1"])
        assert answer["NodeNames"] == [] and "contains ':'" in answer["FailedNodes"]["node1"]


@pytest.mark.parametrize("value", ["1e2000000", "1e100000", "1e5000"])
def test_absurd_quantities_are_refused_by_the_webhook_and_the_filter(apiserver: LocalCluster, runtime: Runtime,
                                                                     scheduler: Scheduler, value: str) -> None:
    review = json.loads((FIXTURES / "admission-review-v1.json").read_text())
    limits = review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/gpu"] = value
    response = runtime.app.test_client().post("/webhook", json=review)
    answer = response.get_json()["response"]
    assert answer["allowed"] is False
    assert f"nvidia.com/gpu: '{value}' is over the limit of 128" in answer["status"]["message"]

    apiserver.load([gpu_node("node1"), gpu_pod("pod1", {"nvidia.com/gpu": value})])
    runtime.sync.sync_now()
    error = scheduler.filter("pod1", ["node1"])["Error"]
    assert f"nvidia.com/gpu: '{value}' is over the limit of 128" in error
    assert usage_by_gpu(runtime) == {}


@pytest.mark.parametrize(("annotations", "message"), [
    pytest.param(["hami.io/gpu-scheduler-policy"], "Pod metadata.annotations must be a map of strings, got list",
                 id="annotations-a-list"),
    pytest.param("binpack", "Pod metadata.annotations must be a map of strings, got string",
                 id="annotations-a-string"),
    pytest.param({names.POD_GPU_POLICY: 1}, "metadata.annotations['hami.io/gpu-scheduler-policy'] must be a string, "
                 "got number", id="policy-a-number"),
    pytest.param({names.POD_NODE_POLICY: None}, "must be a string, got null", id="node-policy-null"),
    pytest.param({names.POD_NUMA_BIND: 1}, "['nvidia.com/numa-bind'] must be a string, got number",
                 id="numa-bind-a-number"),
    pytest.param({names.POD_USE_GPU_TYPE: ["A40"]}, "['nvidia.com/use-gputype'] must be a string, got list",
                 id="use-gputype-a-list"),
])
def test_annotations_of_the_wrong_type_are_a_clear_error(apiserver: LocalCluster, runtime: Runtime,
                                                         scheduler: Scheduler, annotations: Any,
                                                         message: str) -> None:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1")])
    runtime.sync.sync_now()
    pod = scheduler.pod("pod1")
    pod["metadata"]["annotations"] = annotations

    answer = scheduler.post("/filter", {"Pod": pod, "NodeNames": ["node1"]})

    assert message in answer["Error"] and "internal error" not in answer["Error"]
    assert usage_by_gpu(runtime) == {}



THREE_MIB_NAME = "a" * (3 * 1024 * 1024)


def _pod_and_node_writes(apiserver: LocalCluster) -> list[tuple[str, str]]:
    """Writes to pods and nodes so far (events and the settings ConfigMap come from other threads at any time)."""
    return [(method, path) for method, path in apiserver.request_log
            if method != "GET" and ("/pods" in path or "/nodes" in path)]


@pytest.mark.parametrize(("metadata", "message"), [
    ({"name": THREE_MIB_NAME}, f"Pod metadata.name {THREE_MIB_NAME[:40]!r}…(3145728 characters) is not a valid "
                               "Kubernetes name: must be no more than 253 characters"),
    ({"name": "Pod1"}, "Pod metadata.name 'Pod1' is not a valid Kubernetes name: a lowercase RFC 1123 subdomain"),
    ({"name": "pod1", "namespace": "a" * 64}, "Pod metadata.namespace 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'…(64 "
                                              "characters) is not a valid Kubernetes name: must be no more than 63"),
    ({"name": "pod1", "namespace": "team.a"}, "Pod metadata.namespace 'team.a' is not a valid Kubernetes name: a "
                                              "lowercase RFC 1123 label"),
])
def test_a_filter_for_a_pod_whose_name_cannot_exist_books_nothing(apiserver: LocalCluster, runtime: Runtime,
                                                                  scheduler: Scheduler, metadata: dict[str, str],
                                                                  message: str) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1))])
    runtime.sync.sync_now()
    pod = gpu_pod("pod1")
    pod["metadata"] = {**metadata, "uid": "0a1b2c3d"}

    answer = scheduler.post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": ["node1"]})

    assert answer["NodeNames"] is None
    assert answer["Error"].startswith(f"bad ExtenderArgs: {message}")
    assert runtime.cache.placed("0a1b2c3d") is None
    assert usage_by_gpu(runtime) == {}


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("PodName", THREE_MIB_NAME, "must be no more than 253 characters"),
    ("PodName", "pod1/../other", "a lowercase RFC 1123 subdomain"),
    ("PodNamespace", "a" * 64, "must be no more than 63 characters"),
    ("PodNamespace", "Default", "a lowercase RFC 1123 label"),
])
def test_a_bind_naming_a_pod_that_cannot_exist_touches_nothing(apiserver: LocalCluster, runtime: Runtime,
                                                               scheduler: Scheduler, field: str, value: str,
                                                               problem: str) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1")])
    runtime.sync.sync_now()
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    uid = scheduler.pod("pod1")["metadata"]["uid"]
    writes_before = _pod_and_node_writes(apiserver)
    args = {"PodName": "pod1", "PodNamespace": "default", "PodUID": uid, "Node": "node1", field: value}

    answer = scheduler.post("/bind", args)

    assert answer["Error"].startswith(f"bad ExtenderBindingArgs: ExtenderBindingArgs.{field} ")
    assert problem in answer["Error"] and len(answer["Error"]) < 400
    assert _pod_and_node_writes(apiserver) == writes_before
    assert "nodeName" not in scheduler.pod("pod1")["spec"]
