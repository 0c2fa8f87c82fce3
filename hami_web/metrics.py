"""Prometheus metrics (docs/observability.md#observability), exposed with ``prometheus-client`` on ``/metrics``.

GPU and container gauges are HAMi v2.10's scheduler metrics exactly — names, label names, units (cores in
percent of the device, HAMi's ``ceil``), the constant label ``zone="vGPU"`` and ``hami_build_info`` — so
HAMi-WebUI and HAMi's Grafana dashboard work unchanged; ``hami_web_*`` are our own. Like HAMi's, the per-device
gauges cover every family's devices under the same names (a Hygon DCU is a ``hami_gpu_*`` series too): the
device's family shows in ``device_type``, the type its device plugin registered (``DCU-BW100``, ``MR-V100``,
``NVIDIA-NVIDIA A40``), which contains the family's common word; ``hami_web_device_info`` adds the family
itself as a label to join on. The gauges are computed
from the cache at scrape time instead of being updated on every change, so they can never drift from the
state the scheduler actually decides on. Each app gets its own registry: no process-global metric state.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_web import __version__
from hami_web.core.checks import core_capacity
from hami_web.core.quota import quota_usage_rows
from hami_web.core.reasons import reason_causes
from hami_web.state.faces import CacheReads
from hami_web.state.lockstats import LOCK_HOLD_BUCKETS_SECONDS

MIB = 1024 * 1024
CORE_PERCENT = 100.0
ZONE = "vGPU"
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}  # hami_build_info's platform reads like Go's GOOS/GOARCH
# hami_build_info's revision and build date, from the environment an image build may set; else "unknown".
REVISION = os.environ.get("HAMI_WEB_REVISION", "unknown")
BUILD_DATE = os.environ.get("HAMI_WEB_BUILD_DATE", "unknown")
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Requests per bind: 4 on the happy path; more after a conflict, a lock takeover, a cleanup.
BIND_CALL_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24)
VICTIM_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32)


def reason_names(reason: str) -> list[str]:
    """The reason names in a per-node filter reason (``"1/2 CardInsufficientCore, 1/2 …"``)."""
    return [cause for cause, _ in reason_causes(reason)]


def _optional(number: int | None) -> str:
    return "" if number is None else str(number)


def _core_percent(used_cores: int, total_cores: int) -> float:
    """HAMi's core unit: percent of the device's compute, rounded up (100 = the whole device, 0 if it has none).

    In whole numbers: HAMi's float ``ceil(used/total*100)`` reports 8 for 7 % (7/100*100 = 7.000000000000001).
    """
    if total_cores <= 0:
        return 0.0
    return float(-(-used_cores * int(CORE_PERCENT) // total_cores))


class _ZoneGauge(GaugeMetricFamily):
    """A gauge with HAMi's constant label ``zone="vGPU"`` after its own labels."""

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        super().__init__(name, documentation, labels=[*labels, "zone"])

    def add(self, labels: list[str], value: float) -> None:
        """Add one sample; ``labels`` without the zone."""
        self.add_metric([*labels, ZONE], value)


class _ClusterCollector(Collector):
    """Reads the cache (and the sync loops, when running) at scrape time."""

    def __init__(self, cache: CacheReads, sync: Any = None, *, legacy: bool = False) -> None:
        self._cache = cache
        self._sync = sync
        self._legacy = legacy

    def collect(self) -> Iterator[Metric]:
        yield from self._gpu_families()
        yield from self._mig_families()
        yield from self._container_families()
        yield from self._quota_families()
        if self._legacy:
            yield from self._legacy_families()
        yield from self._own_families()

    def _legacy_families(self) -> Iterator[Metric]:
        """HAMi's ``--legacy-metrics``: the names and label names before v2.8, beside the current ones
        (``cmd/scheduler/metrics.go``: cores raw, not in percent; every series with ``zone``, as HAMi wraps them)."""
        gpu = ["nodeid", "deviceuuid", "deviceidx", "devicetype"]
        memory_limit = _ZoneGauge("GPUDeviceMemoryLimit", "Device memory limit for a certain GPU", gpu)
        core_limit = _ZoneGauge("GPUDeviceCoreLimit", "Device memory core limit for a certain GPU", gpu)
        memory_used = _ZoneGauge("GPUDeviceMemoryAllocated", "Device memory allocated for a certain GPU",
                                 ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype"])
        shared = _ZoneGauge("GPUDeviceSharedNum", "Number of containers sharing this GPU", gpu)
        core_used = _ZoneGauge("GPUDeviceCoreAllocated", "Device core allocated for a certain GPU", gpu)
        overview = _ZoneGauge("nodeGPUOverview", "GPU overview on a certain node",
                              ["nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype"])
        memory_ratio = _ZoneGauge("nodeGPUMemoryPercentage", "GPU Memory Allocated Percentage on a certain GPU",
                                  ["nodeid", "deviceuuid", "deviceidx"])
        mig = _ZoneGauge("nodeGPUMigInstance", "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps",
                         ["nodeid", "deviceuuid", "deviceidx", "migname"])
        for name, view in sorted(self._cache.node_views().items()):
            for device, usage in zip(view.inventory.devices, view.usage, strict=True):
                index, cores = str(device.index), str(device.cores)
                labels = [name, device.uuid, index, device.type]
                memory_limit.add(labels, device.memory_mib * MIB)
                core_limit.add(labels, device.cores)
                memory_used.add([name, device.uuid, index, cores, device.type], usage.memory_mib * MIB)
                shared.add(labels, usage.tasks)
                core_used.add(labels, usage.cores)
                overview.add([name, device.uuid, index, cores, str(device.memory_mib), device.type],
                             usage.memory_mib * MIB)
                if device.memory_mib > 0:
                    memory_ratio.add([name, device.uuid, index], usage.memory_mib / device.memory_mib)
                for placed in usage.placed:
                    gpu_instance = placed.ids[0] if placed.ids else None
                    mig.add([name, device.uuid, index, f"{placed.profile}-{_optional(gpu_instance)}"], 1)
        container = ["podnamespace", "nodename", "podname", "containeridx", "deviceuuid"]
        vgpu_memory = _ZoneGauge("vGPUMemoryAllocated", "vGPU memory allocated from a container", container)
        vgpu_cores = _ZoneGauge("vGPUCoreAllocated", "vGPU core allocated from a container", container)
        for pod in self._cache.pod_usages():
            for position, grants in enumerate(pod.grants):
                for grant in grants:
                    labels = [pod.namespace, pod.node, pod.name, str(position), grant.uuid]
                    vgpu_memory.add(labels, grant.memory_mib * MIB)
                    vgpu_cores.add(labels, grant.cores)
        quota = _ZoneGauge("QuotaUsed", "resourcequota usage for a certain device",
                           ["quotanamespace", "quotaName", "limit"])
        for namespace, resource, limit, amount in quota_usage_rows(*self._cache.quota_usage()):
            quota.add([namespace, resource, str(limit or 0)], amount)
        yield from (memory_limit, core_limit, memory_used, shared, core_used, overview, memory_ratio, vgpu_memory,
                    vgpu_cores, quota)
        if mig.samples:
            yield mig

    def _gpu_families(self) -> Iterator[Metric]:
        """Per device of every family, HAMi v2.10's scheduler metrics (names, label names and units as its
        dashboards read them), and our ``hami_web_device_info`` naming each device's family."""
        gpu = ["node", "device_uuid", "device_index", "device_type"]
        memory_limit = _ZoneGauge("hami_gpu_memory_limit_bytes", "GPU memory of the device, bytes", gpu)
        memory_used = _ZoneGauge("hami_gpu_memory_allocated_bytes", "GPU memory booked by pods, bytes",
                                 ["node", "device_uuid", "device_index", "device_cores", "device_type"])
        core_limit = _ZoneGauge("hami_gpu_core_limit_ratio", "GPU compute of the device, percent (100 = the device)",
                                gpu)
        core_used = _ZoneGauge("hami_gpu_core_allocated_ratio",
                               "GPU compute booked by pods, percent of the device, rounded up", gpu)
        shared = _ZoneGauge("hami_gpu_shared_count", "tasks sharing the GPU", gpu)
        overview = _ZoneGauge("hami_node_gpu_overview", "GPU memory booked by pods, bytes, with the device's size",
                              ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit",
                               "device_type"])
        # HAMi v2.10 added device_type here (#2554).
        memory_ratio = _ZoneGauge("hami_node_gpu_memory_allocated_ratio",
                                  "share of the GPU's memory booked by pods (0-1)", gpu)
        info = GaugeMetricFamily("hami_web_device_info", "every device the scheduler knows, value 1; family is "
                                 "the common word of the family that registered it (NVIDIA, DCU, MR-V100, ...)",
                                 labels=[*gpu, "family"])
        for name, view in sorted(self._cache.node_views().items()):
            for device, usage in zip(view.inventory.devices, view.usage, strict=True):
                index, total_cores = str(device.index), str(device.cores)
                labels = [name, device.uuid, index, device.type]
                memory_limit.add(labels, device.memory_mib * MIB)
                memory_used.add([name, device.uuid, index, total_cores, device.type], usage.memory_mib * MIB)
                core_limit.add(labels, CORE_PERCENT if device.cores > 0 else 0.0)
                core_used.add(labels, _core_percent(usage.cores, core_capacity(device, view.inventory)))
                shared.add(labels, usage.tasks)
                overview.add([name, device.uuid, index, total_cores, str(device.memory_mib), device.type],
                             usage.memory_mib * MIB)
                if device.memory_mib > 0:
                    memory_ratio.add(labels, usage.memory_mib / device.memory_mib)
                info.add_metric([*labels, device.family], 1)
        yield from (memory_limit, core_limit, memory_used, shared, core_used, overview, memory_ratio, info)

    def _mig_families(self) -> Iterator[Metric]:
        """Dynamic MIG (docs/mig.md#dynamic-mig): HAMi v2.10's per-instance info series, and ours for the GPUs the
        rebuild fails closed (naming the pods) and the pre-2.10 geometry entries counted on their parent GPU."""
        instance_info = GaugeMetricFamily(
            "hami_node_gpu_mig_instance_info", "MIG instance booked on a GPU (runtime identity once created), value 1",
            labels=["node", "device_uuid", "device_index", "mig_uuid", "profile", "gpu_instance_id",
                    "compute_instance_id", "placement_start", "placement_size"])
        fail_closed = GaugeMetricFamily(
            "hami_web_mig_fail_closed", "GPUs taking no pod because the MIG reservations cannot be trusted, value 1 "
            "per GPU and pod named", labels=["node", "device_uuid", "reason", "pod"])
        legacy = GaugeMetricFamily("hami_web_mig_legacy_entries",
                                   "pre-2.10 geometry MIG entries (GPU-x[slot]) counted on their parent GPU",
                                   labels=["node", "device_uuid"])
        for name, view in sorted(self._cache.node_views().items()):
            for device, usage in zip(view.inventory.devices, view.usage, strict=True):
                for placed in usage.placed:
                    gpu_instance, compute_instance = placed.ids or (None, None)
                    instance_info.add_metric(
                        [name, device.uuid, str(device.index), placed.uuid, placed.profile, _optional(gpu_instance),
                         _optional(compute_instance), str(placed.placement.start), str(placed.placement.size)], 1)
                if usage.legacy_entries:
                    legacy.add_metric([name, device.uuid], usage.legacy_entries)
            for fault in view.partition_faults:
                for pod in fault.pods:
                    fail_closed.add_metric([name, fault.uuid, fault.reason, pod], 1)
        # Served only with samples, as HAMi serves its instance series only when there are instances.
        yield from (family for family in (instance_info, fail_closed, legacy) if family.samples)

    def _container_families(self) -> Iterator[Metric]:
        """Per container and GPU it holds: HAMi's ``hami_vgpu_*`` (container_index counts init containers first)."""
        container = ["namespace", "node", "pod", "container_index", "device_uuid"]
        vgpu_memory = _ZoneGauge("hami_vgpu_memory_allocated_bytes", "GPU memory booked by a container, bytes",
                                 container)
        vgpu_cores = _ZoneGauge("hami_vgpu_core_allocated_ratio",
                                "GPU compute booked by a container, percent of the device, rounded up", container)
        total_cores = {device.uuid: core_capacity(device, view.inventory) for view in self._cache.node_views().values()
                       for device in view.inventory.devices}
        for usage in self._cache.pod_usages():
            for position, grants in enumerate(usage.grants):
                for grant in grants:
                    labels = [usage.namespace, usage.node, usage.name, str(position), grant.uuid]
                    vgpu_memory.add(labels, grant.memory_mib * MIB)
                    vgpu_cores.add(labels, _core_percent(grant.cores, total_cores.get(grant.uuid, 0)))
        yield from (vgpu_memory, vgpu_cores)

    def _quota_families(self) -> Iterator[Metric]:
        """HAMi v2.10's namespace quota series (docs/quotas.md#namespace-quotas): per namespace and quota resource with
        a limit or a use, the use (label ``limit``: the limit, ``"0"`` when none is set) and, where set, the limit.
        Units as booked: memory use in MiB against a limit in the resource's own unit (256 MiB for Iluvatar)."""
        used = GaugeMetricFamily("hami_resource_quota_used", "resourcequota usage for a certain device",
                                 labels=["namespace", "quota_name", "limit"])
        limit_gauge = GaugeMetricFamily("hami_resource_quota_limit", "resourcequota limit for a certain device",
                                        labels=["namespace", "quota_name"])
        limits, uses = self._cache.quota_usage()
        for namespace, resource, limit, amount in quota_usage_rows(limits, uses):
            used.add_metric([namespace, resource, str(limit or 0)], amount)
            if limit is not None:
                limit_gauge.add_metric([namespace, resource], limit)
        yield from (used, limit_gauge)

    def _own_families(self) -> Iterator[Metric]:
        """hami-web's own cache and annotation health series."""
        parse_errors = CounterMetricFamily("hami_web_annotation_parse_errors", "annotations that did not parse",
                                           labels=["kind"])
        parse_errors.add_metric(["node_register"], self._cache.stats.node_annotation_errors)
        parse_errors.add_metric(["pod_devices"], self._cache.stats.pod_annotation_errors)
        yield parse_errors
        broken = GaugeMetricFamily("hami_web_unreadable_objects", "objects whose GPU annotations cannot be read now",
                                   labels=["kind"])
        broken.add_metric(["node"], len(self._cache.broken_nodes()))
        broken.add_metric(["pod"], len(self._cache.stats.broken_pods))
        yield broken
        holds = self._cache.holds()
        held = GaugeMetricFamily("hami_web_preemption_holds", "devices held for preemptors (docs/preemption.md), "
                                 "by whether the hold still waits for victims", labels=["waiting"])
        held.add_metric(["true"], sum(1 for state in holds if state.remaining))
        held.add_metric(["false"], sum(1 for state in holds if not state.remaining))
        yield held
        yield from self._lock_holds()

        if self._sync is not None:
            age = GaugeMetricFamily("hami_web_cache_refresh_age_seconds",
                                    "seconds since the cache was last known in step with the API (list, watch "
                                    "event or bookmark, or a resync while the watch is open)", labels=["resource"])
            errors = CounterMetricFamily("hami_web_cache_refresh_errors", "failed lists and watches",
                                         labels=["resource"])
            silence = GaugeMetricFamily("hami_web_watch_silence_seconds",
                                        "seconds since the API last sent this resource anything (list, watch event "
                                        "or bookmark); the watch is re-opened past --watch-silence-bound",
                                        labels=["resource"])
            reopens = CounterMetricFamily("hami_web_watch_reopens", "watches closed for silence and re-opened",
                                          labels=["resource"])
            lists = CounterMetricFamily("hami_web_cache_lists", "full lists (start, 410 Gone, repeated failure or "
                                        "silence, --relist-interval)", labels=["resource"])
            streamed = GaugeMetricFamily("hami_web_cache_list_streamed", "1 when the last list was streamed "
                                         "(sendInitialEvents), 0 when it was read in pages", labels=["resource"])
            list_seconds = GaugeMetricFamily("hami_web_cache_list_seconds", "how long the last full list took",
                                             labels=["resource"])
            for status in self._sync.statuses():
                if status.list_mode:
                    streamed.add_metric([status.resource], 1.0 if status.list_mode == "streaming" else 0.0)
                if status.list_seconds is not None:
                    list_seconds.add_metric([status.resource], status.list_seconds)
                seconds = self._sync.refresh_age_seconds(status.resource)
                age.add_metric([status.resource], float("inf") if seconds is None else seconds)
                errors.add_metric([status.resource], status.errors)
                quiet = self._sync.silence_seconds(status.resource)
                silence.add_metric([status.resource], float("inf") if quiet is None else quiet)
                reopens.add_metric([status.resource], status.reopens)
                lists.add_metric([status.resource], status.lists)
            yield from (age, errors, silence, reopens, lists, streamed, list_seconds)


    def _lock_holds(self) -> Iterator[Metric]:
        holds = self._cache.lock_hold_snapshot()
        histogram = HistogramMetricFamily("hami_web_cache_lock_hold_seconds",
                                          "how long the cache lock was held, by kind of work", labels=["work"])
        longest = GaugeMetricFamily("hami_web_cache_lock_hold_max_seconds",
                                    "the longest hold of the cache lock since start, by kind of work",
                                    labels=["work"])
        longest_cpu = GaugeMetricFamily("hami_web_cache_lock_hold_max_cpu_seconds",
                                        "the most CPU time a holder spent in one hold, by kind of work",
                                        labels=["work"])
        for work, stats in sorted(holds.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(LOCK_HOLD_BUCKETS_SECONDS, stats.bucket_counts, strict=True):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", stats.count))
            histogram.add_metric([work], buckets, stats.total_seconds)
            longest.add_metric([work], stats.max_seconds)
            longest_cpu.add_metric([work], stats.max_cpu_seconds)
        yield from (histogram, longest, longest_cpu)


class Metrics:
    """The app's metrics: request latencies, decision outcomes, and the cluster collector."""

    def __init__(self, cache: CacheReads | None = None, sync: Any = None, *, legacy: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._latency = Histogram("hami_web_request_duration_seconds", "time to answer a request",
                                  ["route"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self._filter = Counter("hami_web_filter_results", "filter answers by result", ["result"],
                               registry=self.registry)
        self._rejections = Counter("hami_web_filter_node_rejections", "nodes refused by filter, by reason",
                                   ["reason"], registry=self.registry)
        self._bind = Counter("hami_web_bind_results", "bind answers by result", ["result"], registry=self.registry)
        self._bind_calls = Histogram("hami_web_bind_api_calls", "requests one /bind sent to kube-apiserver (2 on the "
                                     "happy path: lock, Binding carrying the booking)",
                                     registry=self.registry, buckets=BIND_CALL_BUCKETS)
        self._bind_rereads = Counter("hami_web_bind_rereads", "binds that read before writing: node (the lock's "
                                     "write met a newer node, 409), pod (the Binding or booking met a newer pod, "
                                     "409), node_pods (the cache had not caught up with the lock: the node's pods "
                                     "were listed)", ["what"], registry=self.registry)
        self._webhook = Counter("hami_web_webhook_reviews", "admission reviews by verdict", ["allowed"],
                                registry=self.registry)
        self._lock_waits = Counter("hami_web_node_lock_waits", "gang pods that found their node locked and waited, "
                                   "by outcome (started, acquired, timed_out, failed, no_slot), and binds queued "
                                   "behind a held lock (queued, queue_released, queue_timed_out)", ["outcome"],
                                   registry=self.registry)
        self._preemptions = Counter("hami_web_preemptions", "device-aware preemptions by result (done, failed, "
                                    "fenced: another server's stood, abandoned: the pod went away)", ["result"],
                                    registry=self.registry)
        self._victims = Histogram("hami_web_preemption_victims", "pods deleted by one preemption",
                                  registry=self.registry, buckets=VICTIM_BUCKETS)
        self._preemption = Gauge("hami_web_preemption_enabled", "1 when device-aware preemption is on; reason says "
                                 "why it is off (--preemption=off, or rights the server lacks)", ["reason"],
                                 registry=self.registry)
        # HAMi's build metadata series; go_version and compiler name the Python that runs us.
        Gauge("hami_build_info", "hami-web build metadata as labels, value 1",
              ["version", "revision", "build_date", "go_version", "compiler", "platform"],
              registry=self.registry).labels(
            version=__version__, revision=REVISION, build_date=BUILD_DATE,
            go_version=f"python{platform.python_version()}", compiler=platform.python_implementation(),
            platform=f"{platform.system().lower()}/{GO_ARCH.get(platform.machine(), platform.machine())}").set(1)
        if cache is not None:
            self.registry.register(_ClusterCollector(cache, sync, legacy=legacy))

    def observe_preemption(self, result: str, victims: int) -> None:
        """Count one preemption by result, and its victims when it was carried out."""
        self._preemptions.labels(result=result).inc()
        if result == "done":
            self._victims.observe(victims)

    def set_preemption(self, enabled: bool, reason: str = "") -> None:
        """Whether device-aware preemption is on, and why not."""
        self._preemption.clear()
        self._preemption.labels(reason=reason).set(1.0 if enabled else 0.0)

    def observe_request(self, route: str, seconds: float) -> None:
        """Record how long a ``/filter``, ``/bind`` or ``/webhook`` call took."""
        self._latency.labels(route=route).observe(seconds)

    def observe_filter(self, result: str, reasons: Mapping[str, str]) -> None:
        """Count a filter answer and, when no node fit, each node's reasons."""
        self._filter.labels(result=result).inc()
        for reason in reasons.values():
            for name in reason_names(reason):
                self._rejections.labels(reason=name).inc()

    def observe_bind(self, result: str) -> None:
        """Count a bind answer (bound, locked, failed)."""
        self._bind.labels(result=result).inc()

    def observe_bind_reread(self, what: str) -> None:
        """Count a bind that had to read ``what``: node, pod (the version it wrote against was stale, 409), node_pods
        (the cache could not vouch for the placement)."""
        self._bind_rereads.labels(what=what).inc()

    def observe_bind_calls(self, calls: int) -> None:
        """Record how many API requests one bind sent (its round trips in a row)."""
        self._bind_calls.observe(calls)

    def observe_lock_wait(self, outcome: str) -> None:
        """Count a gang pod's wait for a held node lock (started, acquired, timed_out, failed, no_slot), or a bind's
        in-process queue behind one (queued, queue_released, queue_timed_out)."""
        self._lock_waits.labels(outcome=outcome).inc()

    def observe_webhook(self, seconds: float, allowed: bool) -> None:
        """Count an admission review and its latency."""
        self._webhook.labels(allowed=str(allowed).lower()).inc()
        self.observe_request("webhook", seconds)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
