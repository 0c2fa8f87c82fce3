"""``/metrics`` against HAMi v2.10's scheduler metrics, name by name
(docs/compatibility.md#compatibility-with-hami-v210).

Covers: every metric HAMi's scheduler serves for NVIDIA vGPUs is there as a gauge with exactly HAMi's label
names (``zone="vGPU"`` on all cluster series, none on ``hami_build_info``); HAMi's units on hand-worked values —
memory in bytes, cores in percent of the device rounded up (a GPU with ``devcore`` 200 booked 50 → 25), memory
ratio 0–1, ``device_memory_limit`` in MiB, ``container_index`` counting init containers first, whole-number
percent where HAMi's float arithmetic would round 7 % up to 8; MIG's series are absent without MIG instances;
our own ``hami_web_*`` series are still served.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from hami_web.core.devices import Device
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import A40, Scheduler, container, gpu_limits, gpu_node, gpu_pod, gpus, release_lock

MIB = 1024 * 1024
GPU = ("node", "device_uuid", "device_index", "device_type", "zone")
CONTAINER = ("namespace", "node", "pod", "container_index", "device_uuid", "zone")

# HAMi v2.10 cmd/scheduler/metrics.go and pkg/metrics: metric name -> its label names.
HAMI_SCHEDULER_METRICS: dict[str, tuple[str, ...]] = {
    "hami_gpu_memory_limit_bytes": GPU,
    "hami_gpu_core_limit_ratio": GPU,
    "hami_gpu_memory_allocated_bytes": ("node", "device_uuid", "device_index", "device_cores", "device_type", "zone"),
    "hami_gpu_shared_count": GPU,
    "hami_gpu_core_allocated_ratio": GPU,
    "hami_node_gpu_overview": ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit",
                               "device_type", "zone"),
    "hami_node_gpu_memory_allocated_ratio": GPU,  # device_type since HAMi v2.10 (#2554)
    "hami_vgpu_memory_allocated_bytes": CONTAINER,
    "hami_vgpu_core_allocated_ratio": CONTAINER,
    "hami_build_info": ("version", "revision", "build_date", "go_version", "compiler", "platform"),
}
# MIG instances: none in this cluster (tests/integration/test_mig.py has them); quotas: tests/integration/test_quota.py.
NOT_SERVED = ("hami_node_gpu_mig_instance_info",)
OUR_OWN = ("hami_web_request_duration_seconds", "hami_web_filter_results", "hami_web_filter_node_rejections",
           "hami_web_bind_results", "hami_web_webhook_reviews", "hami_web_node_lock_waits",
           "hami_web_cache_refresh_age_seconds", "hami_web_cache_refresh_errors", "hami_web_annotation_parse_errors",
           "hami_web_unreadable_objects", "hami_web_device_info")

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _scrape(runtime: Runtime) -> tuple[Samples, dict[str, str]]:
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples, types


def _value(samples: Samples, name: str, **labels: str) -> float:
    found = [value for got, value in samples[name] if all(got.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def _placed(apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    """node1: two 8000 MiB / 100-core GPUs; node2: one 16000 MiB GPU with devcore 200 (core scaling 2)."""
    scaled = Device(uuid="node2-gpu0", index=0, count=10, memory_mib=16000, cores=200, type=A40, numa=0)
    init = container("fetch", gpu_limits(1, memory_mib=1000, cores=10))
    apiserver.load([gpu_node("node1", gpus("node1", 2)), gpu_node("node2", [scaled]),
                    gpu_pod("pod1", containers=[container("main", gpu_limits(1, memory_mib=3000, cores=30))],
                            init_containers=[init]),
                    gpu_pod("pod2", gpu_limits(1, memory_mib=4000, cores=50)),
                    gpu_pod("pod3", gpu_limits(1, memory_mib=1000, cores=7))])
    runtime.sync.sync_now()
    assert scheduler.schedule("pod1", ["node1"]) == "node1"
    assert scheduler.schedule("pod2", ["node2"]) == "node2"
    release_lock(runtime.kube, "pod1", "node1")
    assert scheduler.schedule("pod3", ["node1"]) == "node1"  # spread: the idle node1-gpu1


def test_every_hami_scheduler_metric_is_served_with_hamis_label_names(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    _placed(apiserver, runtime, scheduler)
    samples, types = _scrape(runtime)

    for name, label_names in HAMI_SCHEDULER_METRICS.items():
        assert types.get(name) == "gauge", name
        assert samples.get(name), f"{name} has no samples"
        for labels, _ in samples[name]:
            assert tuple(sorted(labels)) == tuple(sorted(label_names)), (name, labels)
            if "zone" in label_names:
                assert labels["zone"] == "vGPU"
    for name in NOT_SERVED:
        assert name not in types
    for name in OUR_OWN:
        assert name in types, name


def test_hami_units_on_hand_worked_values(apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    _placed(apiserver, runtime, scheduler)
    samples, _ = _scrape(runtime)
    gpu0 = {"node": "node1", "device_uuid": "node1-gpu0"}
    scaled = {"node": "node2", "device_uuid": "node2-gpu0"}
    # pod1 books max(init 1000 MiB / 10 %, main 3000 MiB / 30 %) on its GPU (spread: the first idle one).
    assert _value(samples, "hami_gpu_memory_limit_bytes", **gpu0) == 8000 * MIB
    assert _value(samples, "hami_gpu_memory_allocated_bytes", **gpu0, device_cores="100") == 3000 * MIB
    assert _value(samples, "hami_gpu_core_limit_ratio", **gpu0) == 100
    assert _value(samples, "hami_gpu_core_allocated_ratio", **gpu0) == 30
    assert _value(samples, "hami_gpu_shared_count", **gpu0) == 1
    assert _value(samples, "hami_node_gpu_overview", **gpu0, device_cores="100", device_memory_limit="8000") \
        == 3000 * MIB
    assert _value(samples, "hami_node_gpu_memory_allocated_ratio", **gpu0) == 0.375
    # devcore 200: 50 booked is 25 % of the device, and the limit is still 100 (HAMi normalises to the device).
    assert _value(samples, "hami_gpu_core_limit_ratio", **scaled) == 100
    assert _value(samples, "hami_gpu_core_allocated_ratio", **scaled) == 25
    assert _value(samples, "hami_node_gpu_memory_allocated_ratio", **scaled) == 0.25
    # Per container: init container at index 0, the main container at index 1.
    pod1 = {"namespace": "default", "pod": "pod1", "node": "node1", "device_uuid": "node1-gpu0"}
    assert _value(samples, "hami_vgpu_memory_allocated_bytes", **pod1, container_index="0") == 1000 * MIB
    assert _value(samples, "hami_vgpu_core_allocated_ratio", **pod1, container_index="0") == 10
    assert _value(samples, "hami_vgpu_memory_allocated_bytes", **pod1, container_index="1") == 3000 * MIB
    assert _value(samples, "hami_vgpu_core_allocated_ratio", **pod1, container_index="1") == 30
    assert _value(samples, "hami_vgpu_core_allocated_ratio", namespace="default", pod="pod2",
                  container_index="0") == 25
    # Whole-number percent: 7 % is 7 (HAMi's float ceil(7/100*100) would say 8).
    assert _value(samples, "hami_gpu_core_allocated_ratio", node="node1", device_uuid="node1-gpu1") == 7
    assert _value(samples, "hami_vgpu_core_allocated_ratio", pod="pod3", container_index="0") == 7
    assert _value(samples, "hami_build_info") == 1
