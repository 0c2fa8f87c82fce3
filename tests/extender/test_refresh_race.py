"""A full refresh racing a filter's booking (SPEC.md §4: assumptions reconcile with what the API reports).

Covers: a pod list that starts after ``/filter`` booked a placement but before its pod patch reached the API
server (so the list does not show the annotation) must not drop the booking — otherwise a second filter could
hand out the same GPU until the watch catches up; an assumption the API never confirms is still dropped by a
list that starts well after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import build_runtime
from hami_web.settings import Settings
from hami_web.state.cache import ASSUMPTION_GRACE_SECONDS

from .helpers import FakeClock, Scheduler, gpu_node, gpu_pod, gpus, usage_by_gpu


class _KubeListingBeforePatch(Kube):
    """The adapter, running ``before_pod_patch`` just before each pod patch is sent (once per setting)."""

    before_pod_patch: Callable[[], None] | None = None

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        hook, self.before_pod_patch = self.before_pod_patch, None
        if hook is not None:
            hook()
        return super().patch_pod(namespace, name, patch)


def test_a_list_that_misses_the_filters_patch_keeps_the_booking(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    clock = FakeClock()
    kube = _KubeListingBeforePatch.for_url(apiserver.url)
    # No background loops: the lists in this test are exactly the ones it runs.
    runtime = build_runtime(replace(Settings(), refresh_interval_seconds=300.0), kube=kube, clock=clock)
    try:
        runtime.sync.sync_now()
        scheduler = Scheduler(runtime.app.test_client(), apiserver)

        def refresh_in_between() -> None:
            clock.advance(1)
            runtime.sync.sync_now()

        kube.before_pod_patch = refresh_in_between
        assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]

        assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
        assert scheduler.filter("pod2", ["node1"])["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}
    finally:
        runtime.stop()


def test_an_assumption_the_api_never_confirms_is_dropped_by_a_later_list(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1")])
    clock = FakeClock()
    runtime = build_runtime(replace(Settings(), refresh_interval_seconds=300.0), kube=Kube.for_url(apiserver.url),
                            clock=clock)
    try:
        runtime.sync.sync_now()
        scheduler = Scheduler(runtime.app.test_client(), apiserver)
        assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
        # Someone strips the annotations and no watch runs here to tell the cache.
        runtime.kube.patch_pod("default", "pod1", {"metadata": {"annotations": {
            "hami.io/vgpu-node": None, "hami.io/vgpu-devices-allocated": None}}})

        clock.advance(1)
        runtime.sync.sync_now()
        assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}  # too recent to give up on
        clock.advance(ASSUMPTION_GRACE_SECONDS)
        runtime.sync.sync_now()
        assert usage_by_gpu(runtime) == {}
    finally:
        runtime.stop()
