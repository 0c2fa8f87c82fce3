"""The cache kept current by watches between refreshes (docs/performance.md#scale), seen through ``/filter``.

The runtime never lists again here (no ``--relist-interval``), so only the pod and node watches can explain
what the tests see. Covers: a pod deleted after placement (bound or only filtered) frees its GPUs for the next filter; a
pod whose phase becomes Succeeded or Failed does too, while a Running one keeps them; pods created with
annotations by someone else count as usage; a pod whose device annotation is garbage (present at the first
list, or arriving through the watch) is counted in the parse-error metric and the rest of the cluster keeps
scheduling; a register annotation that grows is re-read from the watch; a deleted node stops being a
candidate; a failed relist (``--relist-interval``) keeps the previous state, is counted and retried.
"""

from __future__ import annotations

import pytest
import requests

from hami_web.core import names
from hami_web.core.devices import encode_register_json
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    patch_pod_status,
    release_lock,
    usage_by_gpu,
    wait_for,
)


@pytest.fixture
def one_gpu(apiserver: LocalCluster, runtime: Runtime) -> None:
    """``node1`` with one GPU that takes a single task; pods pod1 and pod2 each want all of it."""
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    runtime.sync.sync_now()


def _placed(scheduler: Scheduler, pod: str) -> bool:
    return scheduler.filter(pod, ["node1"]).get("NodeNames") == ["node1"]


@pytest.mark.parametrize("bound", [True, False])
def test_a_deleted_pod_frees_its_gpus_without_a_refresh(one_gpu: None, scheduler: Scheduler,
                                                        apiserver: LocalCluster, kube: Kube, runtime: Runtime,
                                                        bound: bool) -> None:
    if bound:
        scheduler.schedule("pod1", ["node1"])
        release_lock(kube, "pod1", "node1")
    else:
        assert _placed(scheduler, "pod1")
    assert scheduler.filter("pod2", ["node1"])["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}

    delete_pod(apiserver, "pod1")

    wait_for(lambda: _placed(scheduler, "pod2"), what="pod1's deletion to free node1-gpu0")
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
    assert {usage.name for usage in runtime.cache.pod_usages()} == {"pod2"}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_frees_its_gpus_without_a_refresh(one_gpu: None, scheduler: Scheduler,
                                                         apiserver: LocalCluster, kube: Kube, phase: str) -> None:
    scheduler.schedule("pod1", ["node1"])
    release_lock(kube, "pod1", "node1")
    patch_pod_status(apiserver, "pod1", {"phase": "Running"})
    assert not _placed(scheduler, "pod2")

    patch_pod_status(apiserver, "pod1", {"phase": phase})

    wait_for(lambda: _placed(scheduler, "pod2"), what=f"pod1 {phase} to free node1-gpu0")


def test_pods_annotated_by_someone_else_count_as_usage(apiserver: LocalCluster, runtime: Runtime,
                                                       scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 2)), gpu_pod("pod1", gpu_limits(1, memory_mib=5000))])
    runtime.sync.sync_now()
    apiserver.load([gpu_pod("running", gpu_limits(1, memory_mib=7000), annotations={
        names.POD_ASSIGNED_NODE: "node1", names.POD_DEVICES_ALLOCATED: "node1-gpu0,NVIDIA,7000,0:;"})])

    wait_for(lambda: usage_by_gpu(runtime) == {"node1-gpu0": (1, 7000, 0)}, what="the watch to report the pod")
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    assert usage_by_gpu(runtime)["node1-gpu1"] == (1, 5000, 0)


def test_a_pod_with_garbage_annotations_is_reported_and_the_rest_keeps_working(apiserver: LocalCluster,
                                                                               make_runtime: RuntimeFactory) -> None:
    apiserver.load([
        gpu_node("node1", gpus("node1", 2)),
        gpu_pod("garbage", annotations={names.POD_ASSIGNED_NODE: "node1",
                                        names.POD_DEVICES_ALLOCATED: "node1-gpu0,NVIDIA,lots,0:;"}),
        gpu_pod("valid", gpu_limits(1, memory_mib=8000), annotations={
            names.POD_ASSIGNED_NODE: "node1", names.POD_DEVICES_ALLOCATED: "node1-gpu1,NVIDIA,8000,0:;"}),
        gpu_pod("pod1", gpu_limits(1, memory_mib=4000)), gpu_pod("pod2", gpu_limits(1, memory_mib=4000))])
    runtime = make_runtime()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    assert _parse_errors(runtime) == 1.0
    assert scheduler.schedule("pod1", ["node1"]) == "node1"
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 4000, 0), "node1-gpu1": (1, 8000, 0)}

    # Garbage arriving through the watch for a pod that held GPUs: counted, its old usage no longer trusted.
    runtime.kube.patch_pod("default", "pod1", {"metadata": {"annotations": {
        names.POD_DEVICES_ALLOCATED: "node1-gpu0;"}}})
    wait_for(lambda: _parse_errors(runtime) == 2.0, what="the watch to report the second garbage annotation")
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == ["node1"]
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_unreadable_objects{kind="pod"} 2.0' in metrics


def _parse_errors(runtime: Runtime) -> float:
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    for line in metrics.splitlines():
        if line.startswith('hami_web_annotation_parse_errors_total{kind="pod_devices"}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("pod parse-error metric missing")


def test_a_register_annotation_that_grows_is_read_again_from_the_watch(one_gpu: None, scheduler: Scheduler,
                                                                       kube: Kube) -> None:
    assert _placed(scheduler, "pod1")
    assert not _placed(scheduler, "pod2")
    kube.patch_node("node1", {"metadata": {"annotations": {
        names.NODE_REGISTER: encode_register_json(gpus("node1", 2, count=1))}}})
    wait_for(lambda: _placed(scheduler, "pod2"), what="the second GPU to appear")


def test_a_deleted_node_is_no_longer_a_candidate(one_gpu: None, scheduler: Scheduler,
                                                 apiserver: LocalCluster) -> None:
    response = requests.delete(f"{apiserver.url}/api/v1/nodes/node1", timeout=5)
    assert response.status_code == 200
    wait_for(lambda: scheduler.filter("pod1", ["node1"])["FailedNodes"] == {"node1": "node unregistered"},
             what="the node's deletion to reach the cache")


def test_a_failed_relist_keeps_the_state_counts_an_error_and_retries(apiserver: LocalCluster,
                                                                     make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    runtime = make_runtime(refresh_interval_seconds=2.0, relist_interval_seconds=1.0)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert _placed(scheduler, "pod1")
    # A failed streaming list (a watch request) is followed by a list in pages at once: fail both.
    apiserver.inject_failure("GET", "pods", status=500, count=1, watch=True)
    apiserver.inject_failure("GET", "pods", status=500, count=1)
    apiserver.inject_failure("GET", "nodes", status=500, count=1, watch=True)
    apiserver.inject_failure("GET", "nodes", status=500, count=1)

    wait_for(lambda: runtime.sync.pods.errors >= 1 and runtime.sync.nodes.errors >= 1, timeout_seconds=5,
             what="the refreshes to fail")
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
    assert not _placed(scheduler, "pod2")
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_cache_refresh_errors_total{resource="pods"} 1.0' in metrics
    wait_for(lambda: runtime.sync.pods.last_error == "" and runtime.sync.nodes.last_error == "",
             timeout_seconds=5, what="the refreshes to be retried")
    assert runtime.app.test_client().get("/readyz").status_code == 200
