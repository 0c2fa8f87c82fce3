"""Who may be bound (docs/security.md#hardening): ``/bind`` binds only a pod this process placed, and writes the booking
only onto the pod with the placed uid.

Covers: a pod never filtered (a ``kube-system`` pod) is refused and nothing is written — no node lock, no pod
patch, no Binding; blank or whitespace names, a missing uid and an unknown uid are refused the same way; a pod
deleted and re-created under the same name after its filter is refused under either uid; a bind that already
succeeded cannot be replayed; a forged ``/filter`` naming a real pod with another uid writes nothing, and its
``/bind`` is refused (the pod has another uid) without writing to the pod, leaving no lock and no booking.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import Scheduler, annotations_of, delete_pod, gpu_limits, gpu_node, gpu_pod, usage_by_gpu, wait_for

SMALL = gpu_limits(1, memory_mib=1000, cores=10)


@pytest.fixture
def cluster(apiserver: LocalCluster, runtime: Runtime) -> None:
    """``node1`` with four GPUs, a pending GPU pod ``pod1`` and a pending ``kube-system/victim``."""
    apiserver.load([gpu_node("node1"), gpu_pod("pod1", SMALL), gpu_pod("victim", SMALL, namespace="kube-system")])
    runtime.sync.sync_now()


def _writes(apiserver: LocalCluster) -> list[tuple[str, str]]:
    """Writes to pods and nodes (events are sent from a background queue, at their own pace)."""
    return [entry for entry in apiserver.request_log if entry[0] != "GET" and not entry[1].endswith("/events")]


def _bind_args(apiserver: LocalCluster, name: str, namespace: str = "default", **overrides: Any) -> dict[str, Any]:
    pod = apiserver.get("pods", name, namespace)
    assert pod is not None
    return {"PodName": name, "PodNamespace": namespace, "PodUID": pod["metadata"]["uid"], "Node": "node1",
            **overrides}


def _assert_untouched(apiserver: LocalCluster, writes_before: list[tuple[str, str]]) -> None:
    assert _writes(apiserver) == writes_before
    assert names.NODE_LOCK not in annotations_of(apiserver, "nodes", "node1")


def test_a_pod_never_filtered_is_not_bound_and_nothing_is_written(cluster: None, apiserver: LocalCluster,
                                                                  scheduler: Scheduler) -> None:
    before = _writes(apiserver)

    answer = scheduler.post("/bind", _bind_args(apiserver, "victim", "kube-system"))

    assert "was not placed by this hami-web" in answer["Error"]
    _assert_untouched(apiserver, before)
    assert "nodeName" not in (apiserver.get("pods", "victim", "kube-system") or {})["spec"]


@pytest.mark.parametrize("overrides", [
    pytest.param({"PodName": ""}, id="blank-name"),
    pytest.param({"PodName": "   "}, id="whitespace-name"),
    pytest.param({"PodNamespace": ""}, id="blank-namespace"),
    pytest.param({"PodUID": ""}, id="blank-uid"),
    pytest.param({"PodUID": "not-a-uid-we-placed"}, id="unknown-uid"),
    pytest.param({"PodName": "pod2"}, id="another-name-with-the-placed-uid"),
    pytest.param({"Node": " "}, id="blank-node"),
])
def test_blank_or_unknown_names_are_refused_without_touching_any_lock(cluster: None, apiserver: LocalCluster,
                                                                      scheduler: Scheduler,
                                                                      overrides: dict[str, str]) -> None:
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    before = _writes(apiserver)

    answer = scheduler.post("/bind", _bind_args(apiserver, "pod1", **overrides))

    assert answer["Error"] != ""
    _assert_untouched(apiserver, before)
    assert scheduler.bind("pod1", "node1") == {"Error": ""}  # the real pod still binds


def test_a_pod_recreated_under_the_same_name_is_not_bound(cluster: None, apiserver: LocalCluster,
                                                          runtime: Runtime, scheduler: Scheduler) -> None:
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]
    old_uid = scheduler.pod("pod1")["metadata"]["uid"]
    delete_pod(apiserver, "pod1")
    wait_for(lambda: runtime.cache.placed(old_uid) is None, what="the watch to see the deletion")
    apiserver.load([gpu_pod("pod1", SMALL)])
    before = _writes(apiserver)

    for uid in (old_uid, scheduler.pod("pod1")["metadata"]["uid"]):
        answer = scheduler.post("/bind", _bind_args(apiserver, "pod1", PodUID=uid))
        assert "was not placed by this hami-web" in answer["Error"]
    _assert_untouched(apiserver, before)


def test_a_successful_bind_cannot_be_replayed(cluster: None, apiserver: LocalCluster,
                                              scheduler: Scheduler) -> None:
    scheduler.schedule("pod1", ["node1"])

    answer = scheduler.bind("pod1", "node1")

    assert "was not placed by this hami-web" in answer["Error"]
    assert annotations_of(apiserver, "pods", "pod1", "default")[names.POD_BIND_PHASE] == "allocating"


def test_a_forged_filter_for_a_real_pod_with_another_uid_is_never_written_or_bound(
        cluster: None, apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    forged = scheduler.pod("pod1")
    real_uid = forged["metadata"]["uid"]
    forged["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
    before = _writes(apiserver)

    answer = scheduler.post("/filter", {"Pod": forged, "NodeNames": ["node1"]})

    assert answer["Error"] == "" and answer["NodeNames"] == ["node1"]  # an in-memory decision only
    assert _writes(apiserver) == before
    answer = scheduler.post("/bind", _bind_args(apiserver, "pod1", PodUID=forged["metadata"]["uid"]))

    assert answer["Error"] == f"pod default/pod1 was replaced (uid {real_uid})"
    # At most the Binding carrying the booking, refused by its uid precondition (the pod is not read first:
    # docs/webhook-and-extender.md#the-scheduler-extender).
    pod_writes = [entry for entry in _writes(apiserver)[len(before):] if "/pods" in entry[1]]
    assert [method for method, _path in pod_writes] in ([], ["POST"])
    assert apiserver.get("pods", "pod1", "default")["metadata"]["resourceVersion"] == forged["metadata"][
        "resourceVersion"]  # the refused write changed nothing
    assert names.POD_ASSIGNED_NODE not in annotations_of(apiserver, "pods", "pod1", "default")
    assert names.NODE_LOCK not in annotations_of(apiserver, "nodes", "node1")
    assert runtime.cache.placed(forged["metadata"]["uid"]) is None
    assert usage_by_gpu(runtime) == {}
    # The real pod is scheduled with its own booking, once.
    assert scheduler.schedule("pod1", ["node1"]) == "node1"
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 1000, 10)}



def _booked_by_another(runtime: Runtime, name: str, node: str, devices: str, *, bound: bool) -> None:
    """What a second replica's bind leaves on the pod: its booking, and when ``bound`` its Binding too."""
    runtime.kube.patch_pod("default", name, {"metadata": {"annotations": {
        names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: devices, names.POD_DEVICES_TO_ALLOCATE: devices,
        names.POD_BIND_PHASE: "success" if bound else "allocating"}}})
    if bound:
        runtime.kube.bind_pod("default", name, node)


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "booked-not-yet-bound"])
def test_a_filter_of_a_pod_another_replica_took_places_nothing(cluster: None, apiserver: LocalCluster,
                                                                 runtime: Runtime, scheduler: Scheduler,
                                                                 bound: bool) -> None:
    """A second replica's kube-scheduler may send a pod its informer saw after the other replica booked or bound it:
    `/bind` writes on top of the version sent, so placing it would overwrite the other booking."""
    _booked_by_another(runtime, "pod1", "node1", "node1-gpu3,NVIDIA,1000,10:;", bound=bound)

    answer = scheduler.filter("pod1", ["node1"])

    expected = "is already bound to node node1" if bound else "already holds devices on node node1 (node1-gpu3"
    assert expected in answer["Error"] and "not placed again" in answer["Error"], answer
    assert answer["NodeNames"] is None
    pod = apiserver.get("pods", "pod1")
    assert pod is not None and runtime.cache.placed(pod["metadata"]["uid"]) is None


def test_a_bind_whose_pod_another_replica_booked_meanwhile_leaves_that_booking_alone(
        cluster: None, apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    answer = scheduler.filter("pod1", ["node1"])
    assert answer["NodeNames"] == ["node1"], answer
    pod = apiserver.get("pods", "pod1")
    assert pod is not None
    ours = runtime.cache.placed(pod["metadata"]["uid"])
    assert ours is not None
    theirs = "node1-gpu3,NVIDIA,1000,10:;" if "gpu3" not in ours.devices_text else "node1-gpu2,NVIDIA,1000,10:;"
    _booked_by_another(runtime, "pod1", "node1", theirs, bound=False)  # after our filter: our version is stale

    bound = scheduler.bind("pod1", "node1")

    assert "already holds devices on node node1" in bound["Error"] and "booked by another scheduler" in bound["Error"]
    annotations = annotations_of(apiserver, "pods", "pod1")
    assert annotations[names.POD_DEVICES_ALLOCATED] == theirs
    assert annotations[names.POD_BIND_PHASE] == "allocating"  # not voided: it is not ours
    assert names.NODE_LOCK not in annotations_of(apiserver, "nodes", "node1")
    assert "nodeName" not in (apiserver.get("pods", "pod1") or {})["spec"]


def test_a_booking_older_than_the_lock_timeout_on_an_unbound_pod_is_placed_over(
        cluster: None, apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    """A binder that booked the pod and vanished (crashed before its Binding, never voided): once its node lock has
    expired its bind is over, and the pod must not stay unschedulable for ever."""
    _booked_by_another(runtime, "pod1", "node1", "node1-gpu3,NVIDIA,1000,10:;", bound=False)
    long_ago = str(int(time.time() - runtime.settings.binding.node_lock_timeout_seconds - 60))
    runtime.kube.patch_pod("default", "pod1", {"metadata": {"annotations": {names.POD_BIND_TIME: long_ago}}})
    wait_for(lambda: usage_by_gpu(runtime).get("node1-gpu3") is not None, what="the watch to show the old booking")

    answer = scheduler.filter("pod1", ["node1"])

    assert answer["Error"] == "" and answer["NodeNames"] == ["node1"], answer
    assert scheduler.bind("pod1", "node1") == {"Error": ""}
    assert (apiserver.get("pods", "pod1") or {})["spec"]["nodeName"] == "node1"
