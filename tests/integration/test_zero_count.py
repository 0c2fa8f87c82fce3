"""A pod asking a count of 0 (docs/webhook-and-extender.md#the-admission-webhook-post-webhook): HAMi v2.10's webhook
routes it to hami-scheduler (the count key is there), its filter passes every node and its ``Bind`` binds it; so do we.

Covers: ``nvidia.com/gpu: 0`` admitted with the scheduler name and HAMi's exclusive-cores addition; ``/filter``
passes every candidate and books nothing; ``/bind`` binds it once, with no node lock and no booking; a pod asking
for a GPU that was never placed is still refused, and so is a count-0 pod whose uid is not the one asked.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import Scheduler, admission_response, container, gpu_limits, gpu_node, gpu_pod, gpus


def _zero_pod(name: str) -> dict[str, Any]:
    pod = gpu_pod(name, {"nvidia.com/gpu": "0"})
    pod["spec"].pop("schedulerName")
    return pod


def test_a_zero_count_pod_is_routed_filtered_through_and_bound(apiserver: LocalCluster, runtime: Runtime,
                                                               scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 2)), gpu_node("node2", gpus("node2", 2))])
    answer = admission_response(runtime, _zero_pod("zero"))
    assert answer["allowed"] is True
    admitted = jsonpatch.apply_patch(_zero_pod("zero"), json.loads(base64.b64decode(answer["patch"])))
    assert admitted["spec"]["schedulerName"] == "hami-scheduler"
    assert admitted["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "0",
                                                                        "nvidia.com/gpucores": "100"}
    apiserver.load([admitted])
    runtime.sync.sync_now()

    filtered = scheduler.filter("zero", ["node1", "node2"])
    assert (filtered["NodeNames"], filtered["FailedNodes"], filtered["Error"]) == (["node1", "node2"], {}, "")
    assert scheduler.bind("zero", "node2") == {"Error": ""}
    pod = apiserver.get("pods", "zero", "default") or {}
    assert pod["spec"]["nodeName"] == "node2"
    assert names.POD_DEVICES_ALLOCATED not in (pod["metadata"].get("annotations") or {})
    node = apiserver.get("nodes", "node2") or {}
    assert names.NODE_LOCK not in (node["metadata"].get("annotations") or {})
    # kube-scheduler retrying after a lost answer: already bound there is success, not a second Binding.
    assert scheduler.bind("zero", "node2") == {"Error": ""}


def test_a_gpu_pod_never_placed_is_still_refused(apiserver: LocalCluster, runtime: Runtime,
                                                 scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 2)), gpu_pod("wants", gpu_limits(1, memory_mib=1000)),
                    gpu_pod("zero", containers=[container("main", {"nvidia.com/gpu": "0"})])])
    runtime.sync.sync_now()
    answer = scheduler.bind("wants", "node1")
    assert "was not placed by this hami-web" in answer["Error"]
    stale = scheduler.post("/bind", {"PodName": "zero", "PodNamespace": "default", "PodUID": "not-its-uid",
                                     "Node": "node1"})
    assert "was not placed by this hami-web" in stale["Error"]
    assert not (apiserver.get("pods", "zero", "default") or {})["spec"].get("nodeName")
