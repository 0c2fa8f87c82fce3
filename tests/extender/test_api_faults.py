"""API faults (issue 12), made by the in-process API server's fault modes, through the HTTP routes.

Covers: failed lists (500 / 429) keep the last good state and recover; a watch cut mid-stream is resumed and
nothing it missed is lost; a pod patch or Binding answered 500 / 429 / 409 leaves no booking and no node lock
of ours; an API server that stalls past the deadline, or drips its answer a byte at a time, gets a clear
``Error`` from ``/filter`` and ``/bind`` (the deadline, not the client's per-read timeout, bounds the wait);
an API server that is down gets a clear ``Error``; a write applied whose answer is lost (connection reset)
is read back and counts as done; when it cannot be read back the booking is kept, so the next exclusive pod
is not given the same GPU, until the API shows the pod.
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    annotations_of,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    usage_by_gpu,
    wait_for,
)

SMALL = gpu_limits(1, memory_mib=1000, cores=10)
DEADLINE_SECONDS = 1.0
STALL_SECONDS = 3.0  # longer than the deadline (the client's own per-read timeout is 10 s)


@pytest.fixture
def fast(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> tuple[Runtime, Scheduler]:
    """One exclusive GPU on ``node1``, pods ``pod1``/``pod2`` asking for it, and a runtime with a 1 s deadline."""
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    runtime = make_runtime(extender_deadline_seconds=DEADLINE_SECONDS)
    return runtime, Scheduler(runtime.app.test_client(), apiserver)


def _uid(scheduler: Scheduler, pod: str) -> str:
    return scheduler.pod(pod)["metadata"]["uid"]


# -- the sync loops -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 429])
def test_failed_lists_keep_the_last_good_state_and_recover(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                                           status: int) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    runtime = make_runtime(refresh_interval_seconds=0.5)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    wait_for(lambda: runtime.cache.held_by(_uid(scheduler, "pod1")) is not None
             and annotations_of(apiserver, "pods", "pod1", "default").get(names.POD_ASSIGNED_NODE),
             what="pod1 annotated")
    apiserver.inject_failure("GET", "pods", status=status, count=3)
    apiserver.inject_failure("GET", "nodes", status=status, count=3)

    wait_for(lambda: runtime.sync.pods.errors >= 3 and runtime.sync.nodes.errors >= 3, timeout_seconds=10,
             what="three failed lists of each")
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == []

    wait_for(lambda: runtime.sync.pods.last_error == "" and runtime.sync.nodes.last_error == "",
             timeout_seconds=10, what="the lists to recover")
    delete_pod(apiserver, "pod1")
    wait_for(lambda: usage_by_gpu(runtime) == {}, what="the recovered loop to see the deletion")
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == ["node1"]


def test_a_watch_cut_mid_stream_is_resumed_and_misses_nothing(apiserver: LocalCluster,
                                                              make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2")])
    runtime = make_runtime(start=False)  # refresh every 300 s: only the watch can bring news
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    apiserver.inject_failure("GET", "pods", mode="cut", events=0, count=2)
    runtime.start()
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]

    wait_for(lambda: runtime.sync.pods.errors >= 2, timeout_seconds=10, what="two watches to be cut")
    delete_pod(apiserver, "pod1")

    wait_for(lambda: usage_by_gpu(runtime) == {}, timeout_seconds=10, what="the resumed watch to see the deletion")
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == ["node1"]


# -- failed writes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 429, 409])
def test_a_failed_pod_patch_leaves_no_booking(fast: tuple[Runtime, Scheduler], apiserver: LocalCluster,
                                              status: int) -> None:
    runtime, scheduler = fast
    apiserver.inject_failure("PATCH", "pods", name="pod1", status=status)

    answer = scheduler.filter("pod1", ["node1"])

    assert answer["Error"].startswith("cannot annotate pod default/pod1 with its GPUs:")
    assert f"HTTP {status}" in answer["Error"]
    assert usage_by_gpu(runtime) == {} and runtime.cache.placed(_uid(scheduler, "pod1")) is None
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == ["node1"]


@pytest.mark.parametrize("status", [500, 429, 409])
def test_a_failed_binding_leaves_no_booking_and_no_lock_of_ours(fast: tuple[Runtime, Scheduler],
                                                                apiserver: LocalCluster, status: int) -> None:
    runtime, scheduler = fast
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    apiserver.inject_failure("POST", "pods", name="pod1", subresource="binding", status=status)

    answer = scheduler.bind("pod1", "node1")

    assert f"HTTP {status}" in answer["Error"]
    assert names.NODE_LOCK not in annotations_of(apiserver, "nodes", "node1")
    assert annotations_of(apiserver, "pods", "pod1", "default")[names.POD_BIND_PHASE] == "failed"
    assert "nodeName" not in scheduler.pod("pod1")["spec"]
    assert runtime.cache.held_by(_uid(scheduler, "pod1")) is None
    wait_for(lambda: usage_by_gpu(runtime) == {}, what="pod1's GPUs to be free")


# -- a slow or absent API server ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["delay", "drip"])
def test_a_filter_while_the_api_stalls_answers_a_clear_error_at_the_deadline(
        fast: tuple[Runtime, Scheduler], apiserver: LocalCluster, mode: str) -> None:
    _runtime, scheduler = fast
    apiserver.inject_failure("PATCH", "pods", name="pod1", mode=mode, seconds=STALL_SECONDS)
    apiserver.inject_failure("GET", "pods", name="pod1", mode="delay", seconds=STALL_SECONDS)

    answer = scheduler.filter("pod1", ["node1"])

    assert "deadline" in answer["Error"] and "stay booked" in answer["Error"]
    # The patch may still land: the GPU stays promised to pod1 rather than being given to pod2 at once.
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == []


def test_a_bind_while_the_api_stalls_answers_a_clear_error_at_the_deadline(fast: tuple[Runtime, Scheduler],
                                                                            apiserver: LocalCluster) -> None:
    _runtime, scheduler = fast
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    apiserver.inject_failure("GET", "nodes", name="node1", mode="delay", seconds=STALL_SECONDS)

    answer = scheduler.bind("pod1", "node1")

    assert "cannot lock node node1" in answer["Error"] and "deadline" in answer["Error"]
    assert "nodeName" not in scheduler.pod("pod1")["spec"]


def test_a_filter_while_the_api_is_down_answers_a_clear_error(fast: tuple[Runtime, Scheduler],
                                                              apiserver: LocalCluster) -> None:
    runtime, scheduler = fast
    pod = scheduler.pod("pod1")
    apiserver.stop()

    answer = scheduler.post("/filter", {"Pod": pod, "NodeNames": ["node1"]})

    assert answer["Error"].startswith("cannot annotate pod default/pod1 with its GPUs:")
    assert usage_by_gpu(runtime) == {}


# -- unknown outcomes -----------------------------------------------------------------------------------------------


def test_a_pod_patch_applied_whose_answer_is_lost_counts_as_done(fast: tuple[Runtime, Scheduler],
                                                                 apiserver: LocalCluster) -> None:
    _runtime, scheduler = fast
    apiserver.inject_failure("PATCH", "pods", name="pod1", mode="reset")

    answer = scheduler.filter("pod1", ["node1"])

    assert answer == {"NodeNames": ["node1"], "FailedNodes": {}, "Error": ""}
    assert annotations_of(apiserver, "pods", "pod1", "default")[names.POD_ASSIGNED_NODE] == "node1"
    assert scheduler.bind("pod1", "node1") == {"Error": ""}


def test_an_unconfirmed_pod_patch_keeps_the_booking_until_the_api_shows_it(fast: tuple[Runtime, Scheduler],
                                                                           apiserver: LocalCluster) -> None:
    runtime, scheduler = fast
    apiserver.inject_failure("PATCH", "pods", name="pod1", mode="reset")
    apiserver.inject_failure("GET", "pods", name="pod1", status=500)

    answer = scheduler.filter("pod1", ["node1"])

    assert "no answer to the patch" in answer["Error"] and "stay booked" in answer["Error"]
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == []  # the exclusive GPU is not given twice
    wait_for(lambda: usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}, what="pod1's booking to stay")
    # kube-scheduler retries pod1: it is placed again on the same GPU, and binds.
    assert scheduler.schedule("pod1", ["node1"]) == "node1"


def test_a_binding_applied_whose_answer_is_lost_counts_as_bound(fast: tuple[Runtime, Scheduler],
                                                                apiserver: LocalCluster) -> None:
    _runtime, scheduler = fast
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    apiserver.inject_failure("POST", "pods", name="pod1", subresource="binding", mode="reset")

    assert scheduler.bind("pod1", "node1") == {"Error": ""}
    assert scheduler.pod("pod1")["spec"]["nodeName"] == "node1"
    assert annotations_of(apiserver, "nodes", "node1")[names.NODE_LOCK].endswith(",default,pod1")


def test_an_unconfirmed_binding_keeps_booking_and_lock_and_a_retry_finds_it_bound(
        fast: tuple[Runtime, Scheduler], apiserver: LocalCluster) -> None:
    runtime, scheduler = fast
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    apiserver.inject_failure("POST", "pods", name="pod1", subresource="binding", mode="reset")
    apiserver.inject_failure("GET", "pods", name="pod1", status=500)

    answer = scheduler.bind("pod1", "node1")

    assert "no answer to its Binding" in answer["Error"]
    assert annotations_of(apiserver, "nodes", "node1")[names.NODE_LOCK].endswith(",default,pod1")
    assert annotations_of(apiserver, "pods", "pod1", "default")[names.POD_BIND_PHASE] == "allocating"
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
    # kube-scheduler's retry: the Binding is refused as already done, and the read-back shows it bound here.
    assert scheduler.bind("pod1", "node1") == {"Error": ""}
