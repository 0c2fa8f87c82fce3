"""``/bind``: the node lock, bind phases, the Binding, and failures
(docs/webhook-and-extender.md#the-scheduler-extender), through the HTTP routes.

Covers: a second pod on a node is refused (``node <n> is locked by <ns>/<pod>``) while the lock is fresh and
its holder is allocating, and nothing is changed by the refusal; it is accepted once the holder is deleted,
has bind-phase success or failed, or the lock is older than ``--node-lock-timeout`` (fake clock, and an old
timestamp written into the annotation); a 409 on the node patch is retried and succeeds, five are an error;
the lock is re-entrant for the same pod; a failing Binding carrying the booking answers ``Error`` and leaves no
booking at all (booked apart in a namespace with a device quota, a failing Binding or booking patch marks the pod
``bind-phase=failed``), releases our lock, drops the pod's GPUs from the cache and records BindingFailed, and the pod
can then be filtered and bound again; another pod's lock is never released; a bind to another node than the filter
chose is refused before anything is written; a failing write answers ``Error`` without leaking capacity (the
exclusive GPU then goes to the next pod, once); a booking another scheduler wrote first on the same GPU fails the
bind (the exact reason) before ours reaches a device (never written, or voided when booked apart), releases the lock,
and the cache then counts the other booking; the echo of our voided booking (booked apart), arriving after the bind
gave up, does not make the next filter refuse the pod as another binder's (the race behind that test's flakiness,
made deterministic).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hami_web.core import names
from hami_web.extender.nodelock import NodeLock
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.pods import pod_record

from .helpers import (
    FakeClock,
    RuntimeFactory,
    Scheduler,
    annotations_of,
    booking_apart_quota,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    reasons_for,
    release_lock,
    usage_by_gpu,
    wait_for,
)

SMALL = gpu_limits(1, memory_mib=1000, cores=10)


@pytest.fixture
def cluster(apiserver: LocalCluster) -> None:
    """``node1`` and ``node2`` (4 GPUs each) and three small pods."""
    apiserver.load([gpu_node("node1"), gpu_node("node2"), gpu_pod("pod1", SMALL), gpu_pod("pod2", SMALL),
                    gpu_pod("pod3", SMALL)])


def _lock(apiserver: LocalCluster, node: str = "node1") -> str:
    return annotations_of(apiserver, "nodes", node).get(names.NODE_LOCK, "")


def _phase(apiserver: LocalCluster, pod: str) -> str | None:
    return annotations_of(apiserver, "pods", pod, "default").get(names.POD_BIND_PHASE)


def _pod1_holds_node1(scheduler: Scheduler) -> None:
    scheduler.schedule("pod1", ["node1"])
    assert scheduler.filter("pod2", ["node1"])["NodeNames"] == ["node1"]


# -- the node lock ---------------------------------------------------------------------------------------


def test_a_second_pod_is_refused_while_the_lock_is_fresh_and_held_by_an_allocating_pod(
        cluster: None, scheduler: Scheduler, apiserver: LocalCluster, runtime: Runtime) -> None:
    _pod1_holds_node1(scheduler)
    lock_before = _lock(apiserver)

    answer = scheduler.bind("pod2", "node1")

    assert answer == {"Error": "node node1 is locked by default/pod1"}
    assert _lock(apiserver) == lock_before
    pod2 = scheduler.pod("pod2")
    assert "nodeName" not in pod2["spec"] and names.POD_BIND_PHASE not in pod2["metadata"]["annotations"]
    # Its booking stays: kube-scheduler retries the bind of the same placement.
    assert runtime.cache.held_by(pod2["metadata"]["uid"]) is not None


@pytest.mark.parametrize("how", ["deleted", "success", "failed"])
def test_the_lock_is_taken_over_once_its_holder_is_gone_or_finished(cluster: None, scheduler: Scheduler,
                                                                    apiserver: LocalCluster, kube: Kube,
                                                                    how: str) -> None:
    _pod1_holds_node1(scheduler)
    if how == "deleted":
        delete_pod(apiserver, "pod1")
    else:
        kube.patch_pod("default", "pod1", {"metadata": {"annotations": {names.POD_BIND_PHASE: how}}})

    assert scheduler.bind("pod2", "node1") == {"Error": ""}
    assert _lock(apiserver).endswith(",default,pod2")
    assert scheduler.pod("pod2")["spec"]["nodeName"] == "node1"


def test_a_lock_older_than_the_timeout_is_taken_over(cluster: None, apiserver: LocalCluster,
                                                     make_runtime: RuntimeFactory) -> None:
    clock = FakeClock()
    runtime = make_runtime(clock=clock, node_lock_timeout_seconds=60.0)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    _pod1_holds_node1(scheduler)

    clock.advance(59)
    assert scheduler.bind("pod2", "node1") == {"Error": "node node1 is locked by default/pod1"}
    clock.advance(2)
    assert scheduler.bind("pod2", "node1") == {"Error": ""}
    assert _lock(apiserver).endswith(",default,pod2")


def test_a_lock_with_an_old_timestamp_is_stale(cluster: None, scheduler: Scheduler, apiserver: LocalCluster,
                                               kube: Kube) -> None:
    _pod1_holds_node1(scheduler)
    kube.patch_node("node1", {"metadata": {"annotations": {
        names.NODE_LOCK: "2020-01-01T00:00:00Z,default,pod1"}}})
    assert scheduler.bind("pod2", "node1") == {"Error": ""}


def test_a_conflict_on_the_node_patch_is_retried(cluster: None, scheduler: Scheduler,
                                                 apiserver: LocalCluster) -> None:
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    apiserver.inject_failure("PATCH", "nodes", name="node1", status=409, count=2)

    assert scheduler.bind("pod1", "node1") == {"Error": ""}
    assert apiserver.request_log.count(("PATCH", "/api/v1/nodes/node1")) == 3
    assert _lock(apiserver).endswith(",default,pod1")
    assert scheduler.pod("pod1")["spec"]["nodeName"] == "node1"


def test_a_lock_that_stays_contended_is_an_error_that_changes_nothing(cluster: None, scheduler: Scheduler,
                                                                      apiserver: LocalCluster) -> None:
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    # The write preconditioned on the watch's version, then every try after reading the node
    # (docs/webhook-and-extender.md#the-scheduler-extender, /bind step 1).
    apiserver.inject_failure("PATCH", "nodes", name="node1", status=409, count=6)

    answer = scheduler.bind("pod1", "node1")

    assert "node1" in answer["Error"] and "contended" in answer["Error"]
    assert _lock(apiserver) == ""
    assert "nodeName" not in scheduler.pod("pod1")["spec"]


def test_the_lock_is_reentrant_for_the_same_pod(cluster: None, scheduler: Scheduler, apiserver: LocalCluster,
                                                kube: Kube) -> None:
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    kube.patch_node("node1", {"metadata": {"annotations": {names.NODE_LOCK: "2099-01-01T00:00:00Z,default,pod1"}}})

    assert scheduler.bind("pod1", "node1") == {"Error": ""}
    assert scheduler.pod("pod1")["spec"]["nodeName"] == "node1"


# -- failures ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("failing", "apart"), [("binding", False), ("binding", True), ("booking patch", True)])
def test_a_failed_bind_leaves_no_booking_releases_our_lock_and_frees_its_gpus(cluster: None, scheduler: Scheduler,
                                                                              apiserver: LocalCluster,
                                                                              runtime: Runtime, kube: Kube,
                                                                              failing: str, apart: bool) -> None:
    """A Binding carrying the booking that fails wrote nothing: the pod has no booking at all. Booked apart (a
    namespace with a device quota), the booking written before the Binding is voided (``bind-phase=failed``)."""
    if apart:
        apiserver.load([booking_apart_quota()])
        wait_for(lambda: runtime.cache.namespace_quota("default").limits, what="the quota")
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    uid = scheduler.pod("pod1")["metadata"]["uid"]
    if failing == "binding":
        apiserver.inject_failure("POST", "pods", name="pod1", subresource="binding", status=500)
    else:
        apiserver.inject_failure("PATCH", "pods", name="pod1", status=500)

    answer = scheduler.bind("pod1", "node1")

    assert "injected failure" in answer["Error"]
    assert _phase(apiserver, "pod1") == ("failed" if apart else None)
    if not apart:
        assert names.POD_ASSIGNED_NODE not in annotations_of(apiserver, "pods", "pod1", "default")
    assert _lock(apiserver) == ""
    assert "nodeName" not in scheduler.pod("pod1")["spec"]
    # The watch may still deliver the booking patch after the bind dropped it; the voiding patch follows.
    wait_for(lambda: runtime.cache.held_by(uid) is None, what="the failed pod's booking to be dropped")
    wait_for(lambda: usage_by_gpu(runtime) == {}, what="the failed pod's GPUs to stay free")
    runtime.events.flush()
    assert reasons_for(apiserver, "pod1") == ["FilteringSucceed", "BindingFailed"]

    # kube-scheduler retries the pod: filtered and bound again from a clean slate.
    node = scheduler.schedule("pod1", ["node1"])
    assert _phase(apiserver, "pod1") == "allocating"
    release_lock(kube, "pod1", node)
    wait_for(lambda: usage_by_gpu(runtime) == {"node1-gpu0": (1, 1000, 10)}, what="pod1's GPUs booked once")


def test_releasing_never_touches_another_pods_lock(cluster: None, scheduler: Scheduler, apiserver: LocalCluster,
                                                   kube: Kube) -> None:
    _pod1_holds_node1(scheduler)
    lock = _lock(apiserver)
    assert NodeLock(kube, timeout_seconds=300).release("node1", "default", "pod2") is False
    assert _lock(apiserver) == lock


def test_a_bind_to_another_node_than_the_filter_chose_is_refused_and_keeps_others_locks(
        cluster: None, scheduler: Scheduler, apiserver: LocalCluster, runtime: Runtime) -> None:
    _pod1_holds_node1(scheduler)
    lock = _lock(apiserver)
    assert scheduler.filter("pod3", ["node2"])["NodeNames"] == ["node2"]

    answer = scheduler.bind("pod3", "node1")

    assert "node2" in answer["Error"] and "filter it again" in answer["Error"]
    assert _lock(apiserver) == lock
    assert _lock(apiserver, "node2") == ""
    # Refused before anything was written: no booking and no bind phase on the pod.
    pod3 = annotations_of(apiserver, "pods", "pod3", "default")
    assert names.POD_BIND_PHASE not in pod3 and names.POD_ASSIGNED_NODE not in pod3
    assert "nodeName" not in scheduler.pod("pod3")["spec"]
    assert runtime.cache.held_by(scheduler.pod("pod3")["metadata"]["uid"]) is None


@pytest.mark.parametrize("apart", [False, True])
def test_a_failed_write_is_an_error_and_leaks_no_capacity(apiserver: LocalCluster, runtime: Runtime,
                                                          scheduler: Scheduler, apart: bool) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), gpu_pod("pod2"),
                    *([booking_apart_quota()] if apart else [])])
    runtime.sync.sync_now()
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    if apart:
        apiserver.inject_failure("PATCH", "pods", name="pod1", status=500)
    else:
        apiserver.inject_failure("POST", "pods", name="pod1", subresource="binding", status=500)

    answer = scheduler.bind("pod1", "node1")

    assert answer["Error"].startswith("cannot write the device booking onto the pod:" if apart
                                      else "bind pod default/pod1 to node1: HTTP 500")
    assert "nodeName" not in scheduler.pod("pod1")["spec"]
    assert names.POD_ASSIGNED_NODE not in scheduler.pod("pod1")["metadata"]["annotations"]
    assert _lock(apiserver) == ""
    assert usage_by_gpu(runtime) == {}
    # The exclusive GPU goes to the next pod, once.
    assert scheduler.schedule("pod2", ["node1"]) == "node1"
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}
    assert scheduler.filter("pod1", ["node1"])["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}


def _intruder_on_node1() -> dict[str, Any]:
    """A pod another scheduler bound to node1's exclusive GPU."""
    intruder = gpu_pod("intruder", annotations={names.POD_ASSIGNED_NODE: "node1",
                                                names.POD_DEVICES_ALLOCATED: "node1-gpu0,NVIDIA,8000,0:;"})
    intruder["spec"]["nodeName"] = "node1"
    return intruder


@pytest.mark.parametrize("apart", [False, True])
def test_a_booking_another_scheduler_wrote_first_fails_the_bind_before_it_reaches_a_device(
        apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler, apart: bool) -> None:
    """Our booking is never written (on the Binding) or voided (booked apart) and the pod stays unbound.

    The other scheduler binds under node1's lock, as a second hami-web does: the check before our Binding covers every
    booking written before the lock we take (a booking written without the lock is counted by the filters through the
    watch, not by this check: docs/compatibility.md#bind-and-node-locks; a run on the loaded machine bound pod1 when
    the intruder was loaded lock-less and the cache's pod stream had passed the node's version but not the intruder).
    """
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"),
                    *([booking_apart_quota()] if apart else [])])
    runtime.sync.sync_now()
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    # Another scheduler (a second hami-web), whose cache had not seen our placement, bound a pod to the same
    # exclusive GPU under the node's lock.
    theirs = NodeLock(kube, timeout_seconds=300)
    theirs.acquire("node1", "default", "intruder")
    apiserver.load([_intruder_on_node1()])
    assert theirs.release("node1", "default", "intruder")

    answer = scheduler.bind("pod1", "node1")

    assert answer["Error"] == ("devices given to pod default/pod1 on node node1 are no longer free (device node1-gpu0: "
                               "CardTimeSlicingExhausted); another scheduler booked them first; filter it again")
    assert "nodeName" not in scheduler.pod("pod1")["spec"]
    assert _phase(apiserver, "pod1") == ("failed" if apart else None)  # booked apart: the booking is void
    assert _lock(apiserver) == ""
    assert runtime.cache.placed(scheduler.pod("pod1")["metadata"]["uid"]) is None
    # Counted as a conflict, and as a failure (the BindingFailed the pod's owner is told of).
    metrics = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_web_bind_results_total{result="conflict"} 1.0' in metrics
    assert 'hami_web_bind_results_total{result="failed"} 1.0' in metrics
    assert 'result="bound"' not in metrics
    # The intruder's booking is what counts now: pod1 no longer fits. (If the watch echoed our booking before the
    # bind gave up, that echo stands until the watch shows the void: the cache never drops what the API showed.)
    wait_for(lambda: usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}, what="only the intruder's booking")
    assert scheduler.filter("pod1", ["node1"])["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}
    runtime.events.flush()
    assert reasons_for(apiserver, "pod1")[-2:] == ["BindingFailed", "FilteringFailed"]


def test_our_voided_booking_echoed_after_the_bind_gave_up_does_not_block_the_next_filter(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    # The race behind the flaky test above, made deterministic: the watch brings the echo of the booking our bind
    # wrote only after the bind voided it and dropped its placement (a loaded machine delays the watch thread). The
    # cache then shows the pod holding that booking, as the API did for a moment; kube-scheduler's retry of the
    # filter must not be refused as if another binder held the pod ("already holds devices ... not placed again").
    apiserver.load([gpu_node("node1", gpus("node1", 1, count=1)), gpu_pod("pod1"), booking_apart_quota()])
    runtime.sync.sync_now()  # booked apart (a namespace with a device quota): a voided booking stands in the API
    runtime.sync.stop()  # from here the test delivers the watch's events, in the order under test
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    apiserver.load([_intruder_on_node1()])
    assert "another scheduler booked them first" in scheduler.bind("pod1", "node1")["Error"]
    voided = scheduler.pod("pod1")
    assert voided["metadata"]["annotations"][names.POD_BIND_PHASE] == "failed"
    echo = copy.deepcopy(voided)  # the version the bind wrote before voiding it
    echo["metadata"]["annotations"][names.POD_BIND_PHASE] = "allocating"
    echo["metadata"]["resourceVersion"] = str(int(voided["metadata"]["resourceVersion"]) - 1)

    runtime.cache.apply_pod_events([("ADDED", pod_record(scheduler.pod("intruder"))), ("MODIFIED", pod_record(echo))])
    answer = scheduler.filter("pod1", ["node1"])

    assert answer["Error"] == "" and answer["FailedNodes"] == {"node1": "1/1 CardTimeSlicingExhausted"}
    runtime.cache.apply_pod_events([("MODIFIED", pod_record(voided))])
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 8000, 0)}  # only the intruder's booking


def test_binding_a_pod_that_does_not_exist_leaves_no_lock_behind(cluster: None, scheduler: Scheduler,
                                                                 apiserver: LocalCluster) -> None:
    answer = scheduler.post("/bind", {"PodName": "ghost", "PodNamespace": "default", "PodUID": "0000",
                                      "Node": "node1"})
    assert "ghost" in answer["Error"]
    assert _lock(apiserver) == ""
