"""Gang-friendly ``/bind`` (HAMi v2.10): PodGroup members wait for a held node lock instead of failing at once.

Covers: a member (label ``scheduling.x-k8s.io/pod-group``, or ``spec.schedulingGroup``) whose node is locked by
another pod waits, and binds once another thread — playing HAMi's device plugin — releases the lock; a member
still locked out near ``--node-lock-retry-timeout`` (which bounds the wait and the bind's API calls together) is
answered ``node <n> is locked by <ns>/<pod> (waited …)`` with nothing changed; a pod outside any group, and any
pod under ``--node-lock-retry-timeout 0``, is refused at once as before, and so is a member when half of
``--threads`` binds already wait; the wait backs off from 100 ms to 1 s and never sleeps past the deadline. A
member that waits runs under ``--node-lock-retry-timeout`` instead of ``--extender-deadline`` (it may wait longer
than the latter), and the calls after the wait share that one deadline (a Binding that stalls after the wait
ends at it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hami_web.core import names
from hami_web.extender.nodelock import NodeLock, NodeLockHeld
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    FakeClock,
    RuntimeFactory,
    Scheduler,
    annotations_of,
    gpu_limits,
    gpu_node,
    gpu_pod,
    lock_waits,
    make_runtime_refusing_locked_binds,  # noqa: F401  (the fixture: make_runtime, and so runtime, here)
    release_lock,
    wait_for,
)

SMALL = gpu_limits(1, memory_mib=1000, cores=10)


def _member(name: str, *, how: str) -> dict[str, Any]:
    pod = gpu_pod(name, SMALL)
    if how == "label":
        pod["metadata"]["labels"] = {names.LABEL_POD_GROUP: "train"}
    elif how == "schedulingGroup":
        pod["spec"]["schedulingGroup"] = "train"
    return pod


def _pod1_holds_node1(apiserver: LocalCluster, runtime: Runtime, member: dict[str, Any]) -> Scheduler:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1", SMALL), member])
    runtime.sync.sync_now()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    scheduler.schedule("pod1", ["node1"])  # the device plugin has not released pod1's lock yet
    assert scheduler.filter(member["metadata"]["name"], ["node1"])["NodeNames"] == ["node1"]
    return scheduler


@pytest.mark.parametrize("how", ["label", "schedulingGroup"])
def test_a_gang_pod_waits_for_a_held_lock_and_then_binds(apiserver: LocalCluster, runtime: Runtime,
                                                         how: str) -> None:
    scheduler = _pod1_holds_node1(apiserver, runtime, _member("member", how=how))
    answers: list[dict[str, Any]] = []
    binding = threading.Thread(target=lambda: answers.append(scheduler.bind("member", "node1")))
    binding.start()
    wait_for(lambda: lock_waits(runtime, "started") == 1, what="the gang pod to find the lock held and wait")

    device_plugin = threading.Thread(target=release_lock, args=(Kube.for_url(apiserver.url), "pod1", "node1"))
    device_plugin.start()
    device_plugin.join()
    binding.join(timeout=30)

    assert answers == [{"Error": ""}]
    assert annotations_of(apiserver, "nodes", "node1")[names.NODE_LOCK].endswith(",default,member")
    assert scheduler.pod("member")["spec"].get("nodeName") == "node1"
    assert lock_waits(runtime, "acquired") == 1


def test_a_gang_pod_still_locked_out_at_the_retry_timeout_is_refused_unchanged(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(node_lock_retry_timeout_seconds=0.3)
    scheduler = _pod1_holds_node1(apiserver, runtime, _member("member", how="label"))
    lock_before = annotations_of(apiserver, "nodes", "node1")[names.NODE_LOCK]

    answer = scheduler.bind("member", "node1")

    # The wait shares the 0.3 s with the bind's calls and stops a fifth of it early, so it is shorter.
    assert answer["Error"].startswith("node node1 is locked by default/pod1 (waited 0.")
    assert annotations_of(apiserver, "nodes", "node1")[names.NODE_LOCK] == lock_before
    assert names.POD_BIND_PHASE not in scheduler.pod("member")["metadata"]["annotations"]
    assert lock_waits(runtime, "timed_out") == 1


@pytest.mark.parametrize(("how", "retry_seconds"), [
    pytest.param("none", 28.0, id="pod-outside-any-group"),
    pytest.param("label", 0.0, id="retry-timeout-zero-disables-waiting"),
])
def test_other_pods_are_refused_at_once(apiserver: LocalCluster, make_runtime: RuntimeFactory, how: str,
                                        retry_seconds: float) -> None:
    runtime = make_runtime(node_lock_retry_timeout_seconds=retry_seconds)
    scheduler = _pod1_holds_node1(apiserver, runtime, _member("loner", how=how))

    assert scheduler.bind("loner", "node1") == {"Error": "node node1 is locked by default/pod1"}
    assert lock_waits(runtime, "started") == 0


def test_a_member_is_refused_at_once_when_half_the_threads_already_wait(apiserver: LocalCluster,
                                                                       make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(threads=2)  # one bind may wait, one thread stays for /filter and /webhook
    scheduler = _pod1_holds_node1(apiserver, runtime, _member("member1", how="label"))
    apiserver.load([_member("member2", how="label")])
    runtime.sync.sync_now()
    assert scheduler.filter("member2", ["node1"])["NodeNames"] == ["node1"]
    answers: list[dict[str, Any]] = []
    binding = threading.Thread(target=lambda: answers.append(scheduler.bind("member1", "node1")))
    binding.start()
    wait_for(lambda: lock_waits(runtime, "started") == 1, what="member1 to wait for the lock")

    assert scheduler.bind("member2", "node1") == {"Error": "node node1 is locked by default/pod1"}
    assert lock_waits(runtime, "no_slot") == 1

    release_lock(Kube.for_url(apiserver.url), "pod1", "node1")
    binding.join(timeout=30)
    assert answers == [{"Error": ""}]


def test_waiting_backs_off_to_one_second_and_stops_at_the_deadline(apiserver: LocalCluster) -> None:
    apiserver.load([gpu_node("node1", annotations={names.NODE_LOCK: "2099-01-01T00:00:00Z,default,holder"}),
                    gpu_pod("holder", SMALL)])
    clock = FakeClock(now=0.0)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        clock.advance(seconds)

    lock = NodeLock(Kube.for_url(apiserver.url), timeout_seconds=1e12, sleep=sleep, monotonic=clock)
    with pytest.raises(NodeLockHeld) as refused:
        lock.acquire_waiting("node1", "default", "member", wait_seconds=3.0)

    assert slept == [0.1, 0.2, 0.4, 0.8, 1.0, 0.5]
    assert str(refused.value) == "node node1 is locked by default/holder (waited 3s)"


def test_a_waiting_gang_pod_runs_under_the_retry_timeout_not_the_extender_deadline(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    # --extender-deadline alone would end the bind long before the lock comes free.
    runtime = make_runtime(extender_deadline_seconds=0.3, node_lock_retry_timeout_seconds=20.0)
    scheduler = _pod1_holds_node1(apiserver, runtime, _member("member", how="label"))
    answers: list[dict[str, Any]] = []
    binding = threading.Thread(target=lambda: answers.append(scheduler.bind("member", "node1")))
    binding.start()
    wait_for(lambda: lock_waits(runtime, "started") == 1, what="the gang pod to wait")
    time.sleep(1.0)  # well past the extender deadline

    release_lock(Kube.for_url(apiserver.url), "pod1", "node1")
    binding.join(timeout=30)

    assert answers == [{"Error": ""}]
    assert scheduler.pod("member")["spec"].get("nodeName") == "node1"


def test_the_wait_and_the_binds_calls_share_one_deadline(apiserver: LocalCluster,
                                                         make_runtime: RuntimeFactory) -> None:
    # After the wait, the Binding stalls: it must end at the retry timeout, not get a fresh --extender-deadline.
    runtime = make_runtime(extender_deadline_seconds=15.0, node_lock_retry_timeout_seconds=1.5)
    scheduler = _pod1_holds_node1(apiserver, runtime, _member("member", how="label"))
    apiserver.inject_failure("POST", "pods", name="member", subresource="binding", mode="delay", seconds=20.0)
    answers: list[dict[str, Any]] = []
    binding = threading.Thread(target=lambda: answers.append(scheduler.bind("member", "node1")))
    binding.start()
    wait_for(lambda: lock_waits(runtime, "started") == 1, what="the gang pod to wait")

    release_lock(Kube.for_url(apiserver.url), "pod1", "node1")
    binding.join(timeout=30)

    assert not binding.is_alive()
    assert lock_waits(runtime, "acquired") == 1
    assert "within the request's deadline" in answers[0]["Error"]
    # Read back within the cleanup budget, the pod is not bound: our lock is released and the bind marked failed.
    assert names.NODE_LOCK not in annotations_of(apiserver, "nodes", "node1")
    assert scheduler.pod("member")["metadata"]["annotations"][names.POD_BIND_PHASE] == "failed"
