"""Who may be bound (issue 12): ``/bind`` binds only a pod this process placed, and writes the booking only onto
the pod with the placed uid.

Covers: a pod never filtered (a ``kube-system`` pod) is refused and nothing is written — no node lock, no pod
patch, no Binding; blank or whitespace names, a missing uid and an unknown uid are refused the same way; a pod
deleted and re-created under the same name after its filter is refused under either uid; a bind that already
succeeded cannot be replayed; a forged ``/filter`` naming a real pod with another uid writes nothing, and its
``/bind`` is refused (the pod has another uid) without writing to the pod, leaving no lock and no booking.
"""

from __future__ import annotations

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
    # At most the booking write, refused by its uid precondition (issue 19: the pod is not read first); no Binding.
    pod_writes = [entry for entry in _writes(apiserver)[len(before):] if "/pods" in entry[1]]
    assert [method for method, _path in pod_writes] in ([], ["PATCH"])
    assert apiserver.get("pods", "pod1", "default")["metadata"]["resourceVersion"] == forged["metadata"][
        "resourceVersion"]  # the refused write changed nothing
    assert names.POD_ASSIGNED_NODE not in annotations_of(apiserver, "pods", "pod1", "default")
    assert names.NODE_LOCK not in annotations_of(apiserver, "nodes", "node1")
    assert runtime.cache.placed(forged["metadata"]["uid"]) is None
    assert usage_by_gpu(runtime) == {}
    # The real pod is scheduled with its own booking, once.
    assert scheduler.schedule("pod1", ["node1"]) == "node1"
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 1000, 10)}

