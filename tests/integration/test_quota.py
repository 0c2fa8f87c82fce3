"""Namespace quotas on device memory and cores through the in-process API server (docs/quotas.md#namespace-quotas).

Covers: a ResourceQuota with ``limits.nvidia.com/gpumem`` honoured end to end — pods placed up to the limit, the next
refused at admission (``exceeding resource quota`` naming resource, limit, use and request) and at filter
(``ResourceQuotaNotFit`` on every device), a deletion freeing room, a raised limit letting the waiting pod in at its
next filter, a lowered limit voiding a booking not yet bound; other namespaces untouched; a malformed quota value
ignored with a warning and the namespace not blocked; the quota metrics; concurrent filters on one server never
booking past a limit; two servers binding in one namespace never passing a limit together (the bind re-reads the
namespace's bookings after its own write); the quota list/watch (added, changed and deleted objects) keeping the
cache's limits current; and a server refused the list of ResourceQuotas staying unready until it is allowed.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
import requests

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.pods import pod_usage

from .helpers import (
    NAMESPACE,
    RuntimeFactory,
    Scheduler,
    admission_response,
    delete_pod,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    release_lock,
    wait_for,
)

TEAM = "team-a"


def quota(hard: dict[str, str], *, name: str = "gpu", namespace: str = TEAM) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard}}


def put_quota(apiserver: LocalCluster, hard: dict[str, str], *, name: str = "gpu", namespace: str = TEAM) -> None:
    """Create the quota, or replace its ``spec.hard`` (a merge patch, as ``kubectl edit`` sends)."""
    base = f"{apiserver.url}/api/v1/namespaces/{namespace}/resourcequotas"
    if apiserver.get("resourcequotas", name, namespace) is None:
        response = requests.post(base, json=quota(hard, name=name, namespace=namespace), timeout=5)
    else:
        response = requests.put(f"{base}/{name}", json={**quota(hard, name=name, namespace=namespace), "metadata": {
            **(apiserver.get("resourcequotas", name, namespace) or {})["metadata"]}}, timeout=5)
    assert response.status_code in (200, 201), response.text


def delete_quota(apiserver: LocalCluster, *, name: str = "gpu", namespace: str = TEAM) -> None:
    response = requests.delete(f"{apiserver.url}/api/v1/namespaces/{namespace}/resourcequotas/{name}", timeout=5)
    assert response.status_code == 200, response.text


def limit_seen(runtime: Runtime, resource: str, value: int | None, namespace: str = TEAM) -> bool:
    return runtime.cache.namespace_quota(namespace).limits.get(resource) == value


def admit(runtime: Runtime, pod: dict[str, Any], namespace: str = TEAM) -> dict[str, Any]:
    """The webhook's answer for a pod CREATE in ``namespace``."""
    return admission_response(runtime, pod, namespace)


def mem_pod(name: str, memory_mib: int, *, namespace: str = TEAM) -> dict[str, Any]:
    return gpu_pod(name, gpu_limits(memory_mib=memory_mib, cores=10), namespace=namespace)


def place(runtime: Runtime, scheduler: Scheduler, name: str, namespace: str = TEAM) -> str:
    """Filter and bind the pod, then release its node lock as HAMi's device plugin does; the node."""
    node = scheduler.schedule(name, ["node1", "node2"], namespace)
    release_lock(runtime.kube, name, node, namespace=namespace)
    return node


@pytest.fixture
def cluster(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> tuple[Runtime, Scheduler]:
    apiserver.load([gpu_node("node1", gpus("node1", 2)), gpu_node("node2", gpus("node2", 2)),
                    quota({"limits.nvidia.com/gpumem": "6000", "limits.cpu": "4"})])
    runtime = make_runtime()
    return runtime, Scheduler(runtime.app.test_client(), apiserver)


def test_pods_fill_the_quota_the_next_is_refused_and_room_comes_back(
        apiserver: LocalCluster, cluster: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = cluster
    assert limit_seen(runtime, "nvidia.com/gpumem", 6000)
    for index in range(3):
        pod = mem_pod(f"job-{index}", 2000)
        assert admit(runtime, pod)["allowed"] is True
        apiserver.load([pod])
        place(runtime, scheduler, f"job-{index}")
    assert runtime.cache.namespace_quota(TEAM).used == {"nvidia.com/gpumem": 6000, "nvidia.com/gpucores": 30}

    late = mem_pod("job-late", 1000)
    refusal = admit(runtime, late)
    assert refusal["allowed"] is False
    message = refusal["status"]["message"]
    assert message.startswith("exceeding resource quota")
    assert "nvidia.com/gpumem: limit 6000, used 6000, request 1000" in message and TEAM in message

    # Created anyway (a pod that skipped the webhook): the filter refuses it on every device of every node.
    apiserver.load([late])
    answer = scheduler.filter("job-late", ["node1", "node2"], TEAM)
    assert answer["NodeNames"] in (None, [])
    assert answer["FailedNodes"] == {"node1": f"2/2 {names.RESOURCE_QUOTA_NOT_FIT}",
                                     "node2": f"2/2 {names.RESOURCE_QUOTA_NOT_FIT}"}

    # Another namespace is not limited.
    other = mem_pod("elsewhere", 4000, namespace=NAMESPACE)
    assert admit(runtime, other, NAMESPACE)["allowed"] is True
    apiserver.load([other])
    place(runtime, scheduler, "elsewhere", NAMESPACE)

    # A deleted pod frees its share at its watch event; the waiting pod then fits.
    delete_pod(apiserver, "job-0", TEAM)
    wait_for(lambda: runtime.cache.namespace_quota(TEAM).used.get("nvidia.com/gpumem") == 4000, what="room freed")
    assert admit(runtime, mem_pod("job-next", 1000))["allowed"] is True
    place(runtime, scheduler, "job-late")


def test_a_raised_limit_admits_the_waiting_pod_at_its_next_filter(
        apiserver: LocalCluster, cluster: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = cluster
    apiserver.load([mem_pod("big", 5000), mem_pod("waiting", 2000)])
    place(runtime, scheduler, "big")
    refused = scheduler.filter("waiting", ["node1", "node2"], TEAM)
    assert names.RESOURCE_QUOTA_NOT_FIT in refused["FailedNodes"]["node1"]

    put_quota(apiserver, {"limits.nvidia.com/gpumem": "8k"})
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", 8000), what="raised limit")
    assert place(runtime, scheduler, "waiting") in ("node1", "node2")

    delete_quota(apiserver)
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", None), what="quota deleted")
    apiserver.load([mem_pod("unlimited", 7000)])
    place(runtime, scheduler, "unlimited")


def test_a_lowered_limit_voids_a_booking_not_yet_bound_and_keeps_placed_pods(
        apiserver: LocalCluster, cluster: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = cluster
    apiserver.load([mem_pod("running", 3000), mem_pod("placed", 2000)])
    place(runtime, scheduler, "running")
    answer = scheduler.filter("placed", ["node1", "node2"], TEAM)
    node = answer["NodeNames"][0]

    put_quota(apiserver, {"limits.nvidia.com/gpumem": "4000"})
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", 4000), what="lowered limit")
    refused = scheduler.bind("placed", node, TEAM)
    assert "past its device quota" in refused["Error"] and "limit 4000, used 3000, request 2000" in refused["Error"]
    stored = apiserver.get("pods", "placed", TEAM) or {}
    assert not (stored.get("spec") or {}).get("nodeName")
    assert pod_usage(stored) is None  # voided: holds nothing
    # The running pod keeps its devices; the namespace still has 1000 MiB for new pods.
    assert (apiserver.get("pods", "running", TEAM) or {})["spec"]["nodeName"]
    wait_for(lambda: runtime.cache.namespace_quota(TEAM).used.get("nvidia.com/gpumem") == 3000, what="void seen")
    apiserver.load([mem_pod("small", 1000)])
    place(runtime, scheduler, "small")


def test_a_malformed_value_is_ignored_with_a_warning_and_blocks_nothing(
        apiserver: LocalCluster, make_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1)),
                    quota({"limits.nvidia.com/gpumem": "1.5", "limits.nvidia.com/gpucores": "50"})])
    with caplog.at_level(logging.WARNING):
        runtime = make_runtime()
    assert any("ResourceQuota team-a/gpu: spec.hard limits.nvidia.com/gpumem" in record.getMessage()
               for record in caplog.records)
    assert runtime.cache.namespace_quota(TEAM).limits == {"nvidia.com/gpucores": 50}
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    apiserver.load([mem_pod("fine", 7000)])
    release_lock(runtime.kube, "fine", scheduler.schedule("fine", ["node1"], TEAM), namespace=TEAM)
    # Cores are still limited: 10 used, 45 more would pass 50.
    apiserver.load([gpu_pod("greedy", gpu_limits(memory_mib=100, cores=45), namespace=TEAM)])
    assert scheduler.filter("greedy", ["node1"], TEAM)["FailedNodes"] == {
        "node1": f"1/1 {names.RESOURCE_QUOTA_NOT_FIT}"}


def test_the_smallest_of_two_quotas_wins_and_the_metrics_show_it(
        apiserver: LocalCluster, cluster: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = cluster
    put_quota(apiserver, {"limits.nvidia.com/gpumem": "3000", "limits.nvidia.com/gpucores": "100"}, name="tight")
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", 3000), what="second quota")
    apiserver.load([mem_pod("one", 2000)])
    place(runtime, scheduler, "one")
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_resource_quota_used{limit="3000",namespace="team-a",quota_name="nvidia.com/gpumem"} 2000.0' in text
    assert 'hami_resource_quota_used{limit="100",namespace="team-a",quota_name="nvidia.com/gpucores"} 10.0' in text
    assert 'hami_resource_quota_limit{namespace="team-a",quota_name="nvidia.com/gpumem"} 3000.0' in text
    delete_quota(apiserver, name="tight")
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", 6000), what="back to the other quota")
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    assert 'hami_resource_quota_used{limit="0",namespace="team-a",quota_name="nvidia.com/gpucores"} 10.0' in text


def test_concurrent_filters_never_book_past_a_limit(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node(f"node{n}", gpus(f"node{n}", 4)) for n in range(4)])
    apiserver.load([quota({"limits.nvidia.com/gpumem": "10000"})])
    apiserver.load([mem_pod(f"job-{index:02d}", 1500) for index in range(24)])
    runtime = make_runtime()
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", 10000), what="quota")
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    pods = {index: scheduler.pod(f"job-{index:02d}", TEAM) for index in range(24)}
    nodes = [f"node{n}" for n in range(4)]
    placed: list[str] = []
    start = threading.Barrier(6)

    def filter_some(worker: int) -> None:
        client = runtime.app.test_client()
        start.wait()
        for index in range(worker, 24, 6):
            body = {"Pod": pods[index], "Nodes": None, "NodeNames": nodes}
            answer = client.post("/filter", data=json.dumps(body), content_type="application/json").get_json()
            if answer["NodeNames"]:
                placed.append(f"job-{index:02d}")

    threads = [threading.Thread(target=filter_some, args=(worker,)) for worker in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(placed) == 6  # 6 × 1500 = 9000 ≤ 10000 < 7 × 1500
    assert runtime.cache.namespace_quota(TEAM).used["nvidia.com/gpumem"] == 9000


def test_two_servers_never_pass_a_limit_together(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 4)), gpu_node("node2", gpus("node2", 4)),
                    quota({"limits.nvidia.com/gpumem": "5000"})])
    apiserver.load([mem_pod(f"a-{index}", 2000) for index in range(3)] +
                   [mem_pod(f"b-{index}", 2000) for index in range(3)])
    first, second = make_runtime(), make_runtime()
    one = Scheduler(first.app.test_client(), apiserver)
    two = Scheduler(second.app.test_client(), apiserver)
    # Both decide before either binds: each cache sees only its own bookings, both place two pods (4000 ≤ 5000).
    chosen = [(one, name, one.filter(name, ["node1"], TEAM)["NodeNames"]) for name in ("a-0", "a-1")]
    chosen += [(two, name, two.filter(name, ["node2"], TEAM)["NodeNames"]) for name in ("b-0", "b-1")]
    assert all(nodes for _, _, nodes in chosen)
    answers = []
    for scheduler, name, nodes in chosen:
        answers.append((name, scheduler.bind(name, nodes[0], TEAM)))
        if not answers[-1][1]["Error"]:
            release_lock(first.kube, name, nodes[0], namespace=TEAM)
    bound = [name for name, answer in answers if not answer["Error"]]
    refused = [answer["Error"] for _, answer in answers if answer["Error"]]
    assert len(bound) == 2, answers
    assert all("past its device quota" in error for error in refused), refused
    booked = sum(usage.booking[uuid].memory_mib for pod in apiserver.list("pods", TEAM)
                 if (usage := pod_usage(pod)) is not None for uuid in usage.booking)
    assert booked == 4000


def test_no_permission_to_list_quotas_keeps_the_server_unready_until_it_has_it(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1)), quota({"limits.nvidia.com/gpumem": "1000"})])
    for watch in (True, False):  # a streaming list is a watch; a paginated one is not
        apiserver.inject_failure("GET", "resourcequotas", status=403, count=2, watch=watch)
    runtime = make_runtime(start=False)
    runtime.start()
    assert not runtime.cache.wait_synced(0.5)
    ready, reason = runtime.sync.readiness()
    assert not ready and "first sync" in reason
    # The list is retried with backoff; once allowed, the limits are known before any filter is answered.
    assert runtime.cache.wait_synced(10.0)
    assert limit_seen(runtime, "nvidia.com/gpumem", 1000)
