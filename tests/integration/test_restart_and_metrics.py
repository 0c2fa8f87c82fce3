"""Rebuilding state from the API after a restart (docs/performance.md#scale) and the ``/metrics`` endpoint
(docs/observability.md#observability).

Covers: a second runtime whose cache is built from the API alone (after the first scheduled pods — bound and
released, still allocating, multi-GPU, with an init container, one deleted again) reproduces the first one's
per-GPU usage and per-pod holdings exactly, and holds nothing for a pod the first only filtered (the filter's
booking lives in memory until ``/bind`` writes it); ``/metrics`` shows the booked memory and cores of a GPU and of
the container after a placement (``hami_gpu_*``, ``hami_vgpu_*``) and drops them once the pod is deleted; the
latency histograms of ``/filter`` and ``/bind``, filter and bind results, refresh age and errors are exposed.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    container,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    release_lock,
    usage_by_gpu,
    wait_for,
)

MIB = 1024 * 1024


def test_a_new_cache_built_from_the_api_reproduces_the_usage(apiserver: LocalCluster, kube: Kube,
                                                             make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1"), gpu_node("node2"),
                    gpu_pod("bound", gpu_limits(1, memory_mib=3000, cores=30)),
                    gpu_pod("two-gpus", gpu_limits(2, memory_percent=25, cores=10)),
                    gpu_pod("with-init", init_containers=[container("setup", gpu_limits(1, memory_mib=5000))],
                            containers=[container("main", gpu_limits(1, memory_mib=1000, cores=5))]),
                    gpu_pod("deleted", gpu_limits(1, memory_mib=2000)),
                    gpu_pod("allocating", gpu_limits(1, memory_mib=1500, cores=50)),
                    gpu_pod("only-filtered", gpu_limits(1, memory_mib=700, cores=7))])
    first = make_runtime()
    scheduler = Scheduler(first.app.test_client(), apiserver)
    for pod, candidates in (("bound", ["node1", "node2"]), ("two-gpus", ["node1", "node2"]),
                            ("with-init", ["node1"]), ("deleted", ["node1"])):
        release_lock(kube, pod, scheduler.schedule(pod, candidates))
    assert scheduler.schedule("allocating", ["node2"]) == "node2"  # the device plugin has not answered yet
    delete_pod(apiserver, "deleted")
    wait_for(lambda: "deleted" not in {usage.name for usage in first.cache.pod_usages()},
             what="the deletion to reach the first cache")
    expected_gpus = usage_by_gpu(first)
    expected_pods = {usage.uid: (usage.node, usage.devices_text, dict(usage.booking))
                     for usage in first.cache.pod_usages()}
    # Filtered but not bound: the booking exists only in this process's memory (the filter writes nothing).
    only_filtered = scheduler.pod("only-filtered")["metadata"]["uid"]
    assert scheduler.filter("only-filtered", ["node1"])["Error"] == ""
    assert first.cache.placed(only_filtered) is not None

    second = make_runtime()

    assert usage_by_gpu(second) == expected_gpus
    assert len(expected_gpus) >= 4
    assert {usage.uid: (usage.node, usage.devices_text, dict(usage.booking)) for usage in second.cache.pod_usages()} \
        == expected_pods
    # A restart between filter and bind loses only that in-memory booking: kube-scheduler filters the pod again.
    assert second.cache.placed(only_filtered) is None and second.cache.held_by(only_filtered) is None
    assert scheduler.post("/bind", {"PodName": "only-filtered", "PodNamespace": "default", "PodUID": only_filtered,
                                    "Node": "node1"}) == {"Error": ""}  # the first process still binds it


def _samples(runtime: Runtime) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _gpu_labels(node: str, index: int) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"node": node, "device_uuid": f"{node}-gpu{index}", "device_index": str(index),
                         "device_type": "NVIDIA-NVIDIA A40", "zone": "vGPU"}.items()))


def _with(labels: tuple[tuple[str, str], ...], **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({**dict(labels), **more}.items()))


def test_metrics_show_a_placement_and_drop_it_after_the_pod_is_deleted(apiserver: LocalCluster, runtime: Runtime,
                                                                       scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 2)), gpu_pod("pod1", gpu_limits(1, memory_mib=3000, cores=30))])
    runtime.sync.sync_now()
    scheduler.schedule("pod1", ["node1"])
    gpu0 = _gpu_labels("node1", 0)
    container_labels = tuple(sorted({"node": "node1", "device_uuid": "node1-gpu0", "namespace": "default",
                                     "pod": "pod1", "container_index": "0", "zone": "vGPU"}.items()))

    samples = _samples(runtime)

    assert samples[("hami_gpu_memory_allocated_bytes", _with(gpu0, device_cores="100"))] == 3000 * MIB
    assert samples[("hami_gpu_core_allocated_ratio", gpu0)] == 30
    assert samples[("hami_gpu_shared_count", gpu0)] == 1
    assert samples[("hami_gpu_memory_limit_bytes", gpu0)] == 8000 * MIB
    assert samples[("hami_gpu_core_limit_ratio", gpu0)] == 100
    assert samples[("hami_gpu_memory_allocated_bytes", _with(_gpu_labels("node1", 1), device_cores="100"))] == 0
    assert samples[("hami_vgpu_memory_allocated_bytes", container_labels)] == 3000 * MIB
    assert samples[("hami_vgpu_core_allocated_ratio", container_labels)] == 30
    assert samples[("hami_web_request_duration_seconds_count", (("route", "filter"),))] == 1
    assert samples[("hami_web_request_duration_seconds_count", (("route", "bind"),))] == 1
    assert samples[("hami_web_filter_results_total", (("result", "placed"),))] == 1
    assert samples[("hami_web_bind_results_total", (("result", "bound"),))] == 1
    assert samples[("hami_web_cache_refresh_age_seconds", (("resource", "pods"),))] < 60
    assert samples[("hami_web_cache_refresh_errors_total", (("resource", "nodes"),))] == 0

    delete_pod(apiserver, "pod1")

    wait_for(lambda: _samples(runtime)[("hami_gpu_shared_count", gpu0)] == 0,
             what="the deletion to reach the metrics")
    samples = _samples(runtime)
    assert samples[("hami_gpu_core_allocated_ratio", gpu0)] == 0
    assert samples[("hami_gpu_shared_count", gpu0)] == 0
    assert not [key for key in samples if key[0].startswith("hami_vgpu_")]
