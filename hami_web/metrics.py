"""Prometheus metrics (SPEC.md §8), exposed with ``prometheus-client`` on ``/metrics``.

GPU and container gauges use newer HAMi's names so existing dashboards keep working; they are computed from
the cache at scrape time instead of being updated on every change, so they can never drift from the state
the scheduler actually decides on. Each app gets its own registry: no process-global metric state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_web.state.cache import LOCK_HOLD_BUCKETS_SECONDS, ClusterCache

MIB = 1024 * 1024
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_REASON_NAME = re.compile(r"^\d+/\d+ (\w+)$")


def reason_names(reason: str) -> list[str]:
    """The reason names in a per-node filter reason (``"1/2 CardInsufficientCore, 1/2 …"``)."""
    if reason.startswith("InvalidRegisterAnnotation"):
        return ["InvalidRegisterAnnotation"]
    if reason == "node unregistered":
        return ["NodeUnregistered"]
    found = [m.group(1) for part in reason.split(", ") if (m := _REASON_NAME.match(part))]
    return found or ["Other"]


class _ClusterCollector(Collector):
    """Reads the cache (and the sync loops, when running) at scrape time."""

    def __init__(self, cache: ClusterCache, sync: Any = None) -> None:
        self._cache = cache
        self._sync = sync

    def collect(self) -> Iterator[Metric]:
        gpu_labels = ["node", "device_uuid", "device_index", "device_type"]
        memory_limit = GaugeMetricFamily("hami_gpu_memory_limit_bytes", "GPU memory of the device", labels=gpu_labels)
        memory_used = GaugeMetricFamily("hami_gpu_memory_allocated_bytes", "GPU memory booked by pods",
                                        labels=gpu_labels)
        core_limit = GaugeMetricFamily("hami_gpu_core_limit_ratio", "GPU compute of the device (1 = one GPU)",
                                       labels=gpu_labels)
        core_used = GaugeMetricFamily("hami_gpu_core_allocated_ratio", "GPU compute booked by pods",
                                      labels=gpu_labels)
        shared = GaugeMetricFamily("hami_gpu_shared_count", "tasks sharing the GPU", labels=gpu_labels)
        for name, view in sorted(self._cache.node_views().items()):
            for device, usage in zip(view.inventory.devices, view.usage, strict=True):
                labels = [name, device.uuid, str(device.index), device.type]
                memory_limit.add_metric(labels, device.memory_mib * MIB)
                memory_used.add_metric(labels, usage.memory_mib * MIB)
                core_limit.add_metric(labels, device.cores / 100)
                core_used.add_metric(labels, usage.cores / 100)
                shared.add_metric(labels, usage.tasks)
        yield from (memory_limit, memory_used, core_limit, core_used, shared)

        container_labels = ["node", "device_uuid", "pod_namespace", "pod_name", "container_name"]
        vgpu_memory = GaugeMetricFamily("hami_vgpu_memory_allocated_bytes", "GPU memory booked by a container",
                                        labels=container_labels)
        vgpu_cores = GaugeMetricFamily("hami_vgpu_core_allocated_ratio", "GPU compute booked by a container",
                                       labels=container_labels)
        for usage in self._cache.pod_usages():
            for position, container in enumerate(usage.grants):
                container_name = (usage.container_names[position] if position < len(usage.container_names)
                                  else str(position))
                for grant in container:
                    labels = [usage.node, grant.uuid, usage.namespace, usage.name, container_name]
                    vgpu_memory.add_metric(labels, grant.memory_mib * MIB)
                    vgpu_cores.add_metric(labels, grant.cores / 100)
        yield from (vgpu_memory, vgpu_cores)

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
        yield from self._lock_holds()

        if self._sync is not None:
            age = GaugeMetricFamily("hami_web_cache_refresh_age_seconds",
                                    "seconds since the cache was last known in step with the API (list, watch "
                                    "event or bookmark, or a resync while the watch is open)", labels=["resource"])
            errors = CounterMetricFamily("hami_web_cache_refresh_errors", "failed lists and watches",
                                         labels=["resource"])
            for status in (self._sync.nodes, self._sync.pods):
                seconds = self._sync.refresh_age_seconds(status.resource)
                age.add_metric([status.resource], float("inf") if seconds is None else seconds)
                errors.add_metric([status.resource], status.errors)
            yield from (age, errors)


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

    def __init__(self, cache: ClusterCache | None = None, sync: Any = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._latency = Histogram("hami_web_request_duration_seconds", "time to answer a request",
                                  ["route"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self._filter = Counter("hami_web_filter_results", "filter answers by result", ["result"],
                               registry=self.registry)
        self._rejections = Counter("hami_web_filter_node_rejections", "nodes refused by filter, by reason",
                                   ["reason"], registry=self.registry)
        self._bind = Counter("hami_web_bind_results", "bind answers by result", ["result"], registry=self.registry)
        self._webhook = Counter("hami_web_webhook_reviews", "admission reviews by verdict", ["allowed"],
                                registry=self.registry)
        if cache is not None:
            self.registry.register(_ClusterCollector(cache, sync))

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

    def observe_webhook(self, seconds: float, allowed: bool) -> None:
        """Count an admission review and its latency."""
        self._webhook.labels(allowed=str(allowed).lower()).inc()
        self.observe_request("webhook", seconds)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
