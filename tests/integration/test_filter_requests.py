"""``/filter`` request and answer forms (docs/wire-formats.md#extender-requests-and-answers).

Covers: the real kube-scheduler body (``tests/fixtures/extender-filter-args.json``, ``NodeNames`` form, gpumem
``"3k"``) placed in memory by ``/filter`` (nothing written yet) and annotated by ``/bind``; the ``Nodes`` form
answered with ``Nodes`` (the chosen node's object as sent, none when nothing fits) and ``NodeNames`` null, and it
books capacity like the other form; keys in any letter case; a pod asking for no GPU passes every candidate (GPU,
plain and unknown nodes) in both forms, changes nothing in the API server and records no event; a pod filtered
again does not count against itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    Scheduler,
    container,
    devices_of,
    events_for,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    plain_node,
    usage_by_gpu,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_real_kube_scheduler_filter_body_is_placed_then_annotated_at_bind(scheduler: Scheduler,
                                                                         apiserver: LocalCluster,
                                                                         runtime: Runtime) -> None:
    args = _fixture("extender-filter-args.json")
    apiserver.load([gpu_node("gpu-node-1", gpus("gpu-node-1", 2, memory_mib=46068))])
    stored_pod = {key: value for key, value in args["Pod"].items() if key != "status"}
    stored_pod["metadata"] = {"name": "plain-pod", "namespace": "default"}
    apiserver.load([{"apiVersion": "v1", "kind": "Pod", **stored_pod}])
    runtime.sync.sync_now()
    # kube-scheduler sends the pod as the API server stores it: same uid.
    args["Pod"]["metadata"]["uid"] = scheduler.pod("plain-pod")["metadata"]["uid"]

    answer = scheduler.post("/filter", args)

    assert answer["Error"] == ""
    assert answer["NodeNames"] == ["gpu-node-1"]
    assert not answer.get("FailedNodes")
    placed = runtime.cache.placed(args["Pod"]["metadata"]["uid"])
    assert placed is not None and placed.node == "gpu-node-1"
    assert placed.devices_text == "gpu-node-1-gpu0,NVIDIA,3000,0:;"
    assert devices_of(apiserver, "plain-pod") == ""  # the filter writes nothing: /bind writes the booking
    assert usage_by_gpu(runtime) == {"gpu-node-1-gpu0": (1, 3000, 0)}

    bind_args = _fixture("extender-bind-args.json")
    bind_args["PodUID"] = args["Pod"]["metadata"]["uid"]
    assert scheduler.post("/bind", bind_args) == {"Error": ""}
    assert scheduler.pod("plain-pod")["spec"]["nodeName"] == "gpu-node-1"
    assert devices_of(apiserver, "plain-pod") == "gpu-node-1-gpu0,NVIDIA,3000,0:;"


def test_nodes_form_is_answered_with_the_chosen_node_object(scheduler: Scheduler, apiserver: LocalCluster,
                                                           runtime: Runtime) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_node("node2", gpus("node2", 1, count=1)),
                    gpu_pod("pod1"), gpu_pod("pod2"), gpu_pod("pod3")])
    runtime.sync.sync_now()
    node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                 "items": [apiserver.get("nodes", "node1"), apiserver.get("nodes", "node2")]}

    answers = [scheduler.post("/filter", {"Pod": scheduler.pod(pod), "Nodes": node_list, "NodeNames": None})
               for pod in ("pod1", "pod2", "pod3")]

    assert answers[0]["Error"] == "" and answers[0]["NodeNames"] is None
    assert answers[0]["Nodes"]["items"] == [apiserver.get("nodes", "node1")]
    assert answers[1]["Nodes"]["items"][0]["metadata"]["name"] == "node2"
    # Both single-task GPUs are booked: the Nodes form is a real scheduling cycle. No node fits the third pod,
    # and the answer stays in the Nodes form.
    assert answers[2]["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted",
                                         "node2": "1/1 CardTimeSlicingExhausted"}
    assert answers[2]["NodeNames"] is None and answers[2]["Nodes"]["items"] == []
    placed = runtime.cache.placed(scheduler.pod("pod1")["metadata"]["uid"])
    assert placed is not None and placed.devices_text.startswith("node1-gpu0,")


def test_keys_are_matched_in_any_letter_case(scheduler: Scheduler, apiserver: LocalCluster,
                                            runtime: Runtime) -> None:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1")])
    runtime.sync.sync_now()

    answer = scheduler.post("/filter", {"pod": scheduler.pod("pod1"), "nodenames": ["node1"]})
    assert answer["Error"] == "" and answer["NodeNames"] == ["node1"]

    uid = scheduler.pod("pod1")["metadata"]["uid"]
    assert scheduler.post("/bind", {"podname": "pod1", "PODNAMESPACE": "default", "podUid": uid,
                                    "node": "node1"}) == {"Error": ""}
    assert scheduler.pod("pod1")["spec"]["nodeName"] == "node1"


def test_a_pod_asking_for_no_gpu_passes_every_node_and_changes_nothing(scheduler: Scheduler,
                                                                      apiserver: LocalCluster,
                                                                      runtime: Runtime) -> None:
    apiserver.load([gpu_node("node1"), plain_node("cpu-node"),
                    gpu_pod("web", containers=[container("web"), container("sidecar", {"cpu": "1"})])])
    runtime.sync.sync_now()
    before = scheduler.pod("web")
    candidates = ["node1", "cpu-node", "not-in-the-cache"]

    answer = scheduler.filter("web", candidates)
    node_list = {"items": [apiserver.get("nodes", "node1"), apiserver.get("nodes", "cpu-node")]}
    nodes_answer = scheduler.post("/filter", {"Pod": before, "Nodes": node_list})

    assert answer == {"NodeNames": candidates, "FailedNodes": {}, "Error": ""}
    assert nodes_answer["Nodes"]["items"] == node_list["items"] and nodes_answer["NodeNames"] is None
    assert scheduler.pod("web") == before
    assert usage_by_gpu(runtime) == {}
    runtime.events.flush()
    assert events_for(apiserver, "web") == []


def test_a_pod_filtered_again_does_not_count_against_itself(scheduler: Scheduler, apiserver: LocalCluster,
                                                           runtime: Runtime) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)),
                    gpu_pod("pod1", gpu_limits(1, memory_mib=6000))])
    runtime.sync.sync_now()
    first = scheduler.filter("pod1", ["node1"])
    second = scheduler.filter("pod1", ["node1"])
    assert first["NodeNames"] == second["NodeNames"] == ["node1"]
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 6000, 0)}
    assert names.POD_BIND_PHASE not in scheduler.pod("pod1")["metadata"]["annotations"]
