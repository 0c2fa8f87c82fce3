"""A full refresh racing a filter's booking (assumptions reconcile with what the API reports;
docs/performance.md#scale).

Covers: a pod list that starts after ``/filter`` booked a placement in memory, or after ``/bind`` booked it
again but before its pod patch reached the API server (either way the list does not show the annotation), must
not drop the booking — otherwise a second filter could hand out the same GPU until the watch catches up; an
assumption the API never confirms is still dropped by a list that starts well after it; a pod deleted between
filter and bind (the deletion missed by the watch) frees its GPUs at the next list, without that grace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from hami_web.state.cache import ASSUMPTION_GRACE_SECONDS

from .helpers import FakeClock, Scheduler, delete_pod, gpu_node, gpu_pod, gpus, usage_by_gpu


class _KubeListingBeforePatch(Kube):
    """The adapter, running ``before_pod_patch`` just before each pod patch is sent (once per setting)."""

    before_pod_patch: Callable[[], None] | None = None

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        hook, self.before_pod_patch = self.before_pod_patch, None
        if hook is not None:
            hook()
        return super().patch_pod(namespace, name, patch)


def _runtime(kube: Kube, clock: FakeClock) -> Runtime:
    """A runtime without background loops: the lists in these tests are exactly the ones they run."""
    runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0), kube=kube, clock=clock)
    runtime.sync.sync_now()
    return runtime


def test_a_list_between_filter_and_bind_or_before_binds_patch_keeps_the_booking(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    clock = FakeClock()
    kube = _KubeListingBeforePatch.for_url(apiserver.url)
    runtime = _runtime(kube, clock)
    try:
        scheduler = Scheduler(runtime.app.test_client(), apiserver)

        def refresh_in_between() -> None:
            clock.advance(1)
            runtime.sync.sync_now()

        assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
        refresh_in_between()  # the pod is listed without a booking: the filter wrote nothing yet

        assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
        assert scheduler.filter("pod2", ["node1"])["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}

        kube.before_pod_patch = refresh_in_between  # a list that starts just before bind's booking patch
        assert scheduler.bind("pod1", "node1") == {"Error": ""}

        assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
        assert scheduler.filter("pod2", ["node1"])["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}
    finally:
        runtime.stop()


def test_an_assumption_the_api_never_confirms_is_dropped_by_a_later_list(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1")])
    clock = FakeClock()
    runtime = _runtime(Kube.for_url(apiserver.url), clock)
    try:
        scheduler = Scheduler(runtime.app.test_client(), apiserver)
        assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
        # kube-scheduler never binds it (it gave up, or another replica took over): nothing is ever written.

        clock.advance(1)
        runtime.sync.sync_now()
        assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}  # too recent to give up on
        clock.advance(ASSUMPTION_GRACE_SECONDS)
        runtime.sync.sync_now()
        assert usage_by_gpu(runtime) == {}
    finally:
        runtime.stop()


def test_a_pod_deleted_between_filter_and_bind_frees_its_gpus_at_the_next_list(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    clock = FakeClock()
    runtime = _runtime(Kube.for_url(apiserver.url), clock)
    try:
        scheduler = Scheduler(runtime.app.test_client(), apiserver)
        assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
        delete_pod(apiserver, "pod1")  # no watch runs here: only the next list can tell

        clock.advance(1)
        runtime.sync.sync_now()

        assert usage_by_gpu(runtime) == {}
        assert scheduler.filter("pod2", ["node1"])["NodeNames"] == ["node1"]
    finally:
        runtime.stop()
