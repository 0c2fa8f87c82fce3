"""FilteringFailed events people can read: grouped by cause, one per pod and cause, updated on every retry.

Covers: the message groups the nodes by cause with counts and example nodes and points at ``explain``;
kube-scheduler retrying the same pod updates the one event (``count``, ``lastTimestamp``, the latest message
with its new numbers) instead of creating another; a different set of causes starts a new event; an event
that expired from the API server (deleted) is created again on the next retry; other events (a placement)
are their own series.
"""

from __future__ import annotations

import requests

from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import NAMESPACE, Scheduler, events_for, gpu_limits, gpu_node, gpu_pod, gpus, plain_node


def _failed(apiserver: LocalCluster, pod: str) -> list[dict]:
    return [event for event in events_for(apiserver, pod) if event["reason"] == "FilteringFailed"]


def test_retries_of_an_unschedulable_pod_update_one_grouped_event(scheduler: Scheduler, apiserver: LocalCluster,
                                                                  runtime: Runtime) -> None:
    apiserver.load([gpu_node("node-a", gpus("node-a", 2, memory_mib=8000)),
                    gpu_node("node-b", gpus("node-b", 2, memory_mib=8000)), plain_node("cpu-1"),
                    gpu_pod("big", gpu_limits(1, memory_mib=9000))])
    runtime.sync.sync_now()
    candidates = ["node-a", "node-b", "cpu-1"]

    for _ in range(3):
        assert not scheduler.filter("big", candidates)["NodeNames"]
    runtime.events.flush()

    [event] = _failed(apiserver, "big")
    assert event["count"] == 3
    assert event["type"] == "Warning"
    assert event["message"] == ("0/3 nodes fit: 2 nodes: CardInsufficientMemory (node-a, node-b); "
                                "1 node: NodeUnregistered (cpu-1). "
                                "Every node's reason: kubectl hami explain default/big")
    assert event["lastTimestamp"] >= event["firstTimestamp"]


def test_new_numbers_update_the_message_and_new_causes_start_a_new_event(scheduler: Scheduler,
                                                                          apiserver: LocalCluster,
                                                                          runtime: Runtime) -> None:
    apiserver.load([gpu_node("node-a", gpus("node-a", 2, memory_mib=8000)),
                    gpu_node("node-b", gpus("node-b", 2, memory_mib=8000)),
                    gpu_pod("big", gpu_limits(1, memory_mib=9000))])
    runtime.sync.sync_now()

    scheduler.filter("big", ["node-a"])
    scheduler.filter("big", ["node-a", "node-b"])  # same cause, more nodes: same event, new message
    runtime.events.flush()
    [event] = _failed(apiserver, "big")
    assert (event["count"], event["message"].split(".")[0]) == (
        2, "0/2 nodes fit: 2 nodes: CardInsufficientMemory (node-a, node-b)")

    scheduler.filter("big", ["node-a", "ghost"])  # a new cause: a second event
    runtime.events.flush()
    first, second = _failed(apiserver, "big")
    assert first["count"] == 2
    assert (second["count"], second["message"].split(".")[0]) == (
        1, "0/2 nodes fit: 1 node: CardInsufficientMemory (node-a); 1 node: NodeUnregistered (ghost)")


def test_a_deleted_event_is_created_again_on_the_next_retry(scheduler: Scheduler, apiserver: LocalCluster,
                                                            runtime: Runtime) -> None:
    apiserver.load([gpu_node("node-a", gpus("node-a", 1, memory_mib=8000)),
                    gpu_pod("big", gpu_limits(1, memory_mib=9000))])
    runtime.sync.sync_now()
    scheduler.filter("big", ["node-a"])
    runtime.events.flush()
    [expired] = _failed(apiserver, "big")
    response = requests.delete(f"{apiserver.url}/api/v1/namespaces/{NAMESPACE}/events/"
                               f"{expired['metadata']['name']}", timeout=5)
    assert response.status_code == 200

    scheduler.filter("big", ["node-a"])
    runtime.events.flush()

    [fresh] = _failed(apiserver, "big")
    assert fresh["metadata"]["name"] != expired["metadata"]["name"]
    assert fresh["count"] == 1
    assert runtime.events.failed == 0


def test_a_placement_after_refusals_is_its_own_event(scheduler: Scheduler, apiserver: LocalCluster,
                                                     runtime: Runtime) -> None:
    apiserver.load([gpu_node("node-a", gpus("node-a", 1, memory_mib=8000)),
                    gpu_pod("pod1", gpu_limits(1, memory_mib=4000))])
    runtime.sync.sync_now()
    assert not scheduler.filter("pod1", ["ghost"])["NodeNames"]
    assert not scheduler.filter("pod1", ["ghost"])["NodeNames"]
    assert scheduler.filter("pod1", ["node-a"])["NodeNames"] == ["node-a"]
    runtime.events.flush()

    assert [(e["reason"], e["count"]) for e in events_for(apiserver, "pod1")] == [
        ("FilteringFailed", 2), ("FilteringSucceed", 1)]
