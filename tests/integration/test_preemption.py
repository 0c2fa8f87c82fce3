"""Device-aware preemption through ``/filter`` and the in-process API server (docs/preemption.md).

Covers, with graceful pod deletion as kube-apiserver does it (a deleted pod on a node terminates until a delete with
grace 0, the kubelet's, ends it): a high-priority pod that no node takes gets the minimal victim marked
``DisruptionTarget``/``PreemptionByScheduler`` and deleted with its own grace period (uid precondition), events on
victim (``Preempted``) and preemptor (``Preempting``), its ``nominatedNodeName`` set, the filter's reason "preempting
… on node …" then "waiting for 1 preempted pod on …"; the hold: a lower-priority pod created while the victim
terminates (and after it is gone) does not get the freed GPU, a higher-priority one does; the preemptor then placed on
the nominated node; ``preemptionPolicy: Never`` and equal priority never preempt; deletes that fail are retried, and
reported when they keep failing (``PreemptionFailed`` event, ``hami_web_preemptions_total{result="failed"}``, hold
dropped); two servers deciding for one pod: one preempts, the other stands down (``fenced``), victims deleted once;
a preemption of higher priority on the node ends a lower one's hold and does not preempt its terminating victim
again; ``/preempt`` (``ProcessPreemption``) adding device victims to kube-scheduler's and dropping a node; a restarted
server rebuilds the hold from ``nominatedNodeName`` at the preemptor's next filter; a server without the
rights turns preemption off with one log line and says so on ``/metrics``; ``--preemption=off`` preempts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import requests

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    NAMESPACE,
    RuntimeFactory,
    Scheduler,
    events_for,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    release_lock,
    wait_for,
)


@pytest.fixture
def apiserver() -> Iterator[LocalCluster]:
    """The in-process API server with graceful pod deletion (victims terminate until their "kubelet" ends them)."""
    with LocalCluster(bookmark_interval_seconds=0.1, graceful_pod_deletion=True) as cluster:
        yield cluster


def pod(name: str, priority: int, memory_mib: int, **spec: Any) -> dict[str, Any]:
    body = gpu_pod(name, gpu_limits(memory_mib=memory_mib))
    body["spec"].update({"priority": priority, **spec})
    return body


def finish_termination(apiserver: LocalCluster, name: str) -> None:
    """What the kubelet does once a terminating pod's containers stopped: delete it with grace 0."""
    response = requests.delete(f"{apiserver.url}/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                               params={"gracePeriodSeconds": "0"}, timeout=5)
    assert response.status_code in (200, 404), response.text


def run(apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler, name: str) -> str:
    node = scheduler.schedule(name, ["node1"])
    release_lock(runtime.kube, name, node)
    return node


@pytest.fixture
def full_node(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> tuple[Runtime, Scheduler]:
    """node1: one 8000 MiB GPU filled by low-a (priority 1) and low-b (priority 2), 4000 MiB each."""
    apiserver.load([gpu_node("node1", gpus("node1", 1)), pod("low-a", 1, 4000), pod("low-b", 2, 4000)])
    runtime = make_runtime()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    for name in ("low-a", "low-b"):
        run(apiserver, runtime, scheduler, name)
    return runtime, scheduler


def terminating(apiserver: LocalCluster, name: str) -> bool:
    stored = apiserver.get("pods", name, NAMESPACE)
    return stored is not None and bool(stored["metadata"].get("deletionTimestamp"))


def metric(runtime: Runtime, line_start: str) -> float:
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
    return sum(values)


def preempt_low_a(apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    apiserver.load([pod("high", 100, 4000)])
    answer = scheduler.filter("high", ["node1"])
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {"node1": "preempting default/low-a on node node1"}
    wait_for(lambda: terminating(apiserver, "low-a"), what="low-a terminating")
    assert runtime.preempter is not None
    wait_for(runtime.preempter.idle.is_set, what="the preemption carried out")


def test_the_minimal_victim_is_preempted_as_kube_scheduler_does(apiserver: LocalCluster,
                                                               full_node: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = full_node
    preempt_low_a(apiserver, runtime, scheduler)
    victim = apiserver.get("pods", "low-a", NAMESPACE)
    assert victim is not None
    condition = next(c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (condition["status"], condition["reason"]) == ("True", "PreemptionByScheduler")
    assert condition["message"] == "hami-scheduler: preempting to accommodate a higher priority pod"
    assert victim["metadata"]["deletionGracePeriodSeconds"] == 30  # its own grace period (the default)
    assert not terminating(apiserver, "low-b")
    assert scheduler.pod("high")["status"]["nominatedNodeName"] == "node1"
    wait_for(lambda: "Preempted" in [e["reason"] for e in events_for(apiserver, "low-a")], what="Preempted event")
    preempted = next(e for e in events_for(apiserver, "low-a") if e["reason"] == "Preempted")
    assert preempted["message"].startswith("Preempted by pod default/high (") and "on node node1" in \
        preempted["message"]
    wait_for(lambda: "Preempting" in [e["reason"] for e in events_for(apiserver, "high")], what="Preempting event")
    assert metric(runtime, 'hami_web_preemptions_total{result="done"}') == 1.0
    assert metric(runtime, "hami_web_preemption_victims_sum") == 1.0

    # While the victim terminates the preemptor waits; it preempts nobody else.
    answer = scheduler.filter("high", ["node1"])
    assert answer["FailedNodes"] == {"node1": "waiting for 1 preempted pod on node1"}
    assert not terminating(apiserver, "low-b")

    finish_termination(apiserver, "low-a")
    wait_for(lambda: runtime.cache.holds() and not runtime.cache.holds()[0].remaining, what="the victim gone")
    assert run(apiserver, runtime, scheduler, "high") == "node1"
    assert runtime.cache.holds() == []


def test_the_hold_keeps_the_freed_devices_from_lower_priority_pods(apiserver: LocalCluster,
                                                                   full_node: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = full_node
    preempt_low_a(apiserver, runtime, scheduler)
    # Neither may preempt low-b (equal priority, or preemptionPolicy Never): only the hold stands in their way.
    apiserver.load([pod("mid", 2, 4000), pod("equal", 100, 4000, preemptionPolicy="Never")])
    for name in ("mid", "equal"):  # while the victim terminates
        assert scheduler.filter(name, ["node1"])["NodeNames"] == [], name
    finish_termination(apiserver, "low-a")
    wait_for(lambda: not runtime.cache.holds()[0].remaining, what="the victim gone")
    for name in ("mid", "equal"):  # lower and equal priority: the preemptor counts as placed there
        answer = scheduler.filter(name, ["node1"])
        assert answer["NodeNames"] == [], (name, answer)
        assert "CardInsufficientMemory" in answer["FailedNodes"]["node1"]
    assert run(apiserver, runtime, scheduler, "high") == "node1"


def test_a_higher_priority_pod_may_take_the_held_devices(apiserver: LocalCluster,
                                                         full_node: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = full_node
    preempt_low_a(apiserver, runtime, scheduler)
    finish_termination(apiserver, "low-a")
    wait_for(lambda: not runtime.cache.holds()[0].remaining, what="the victim gone")
    apiserver.load([pod("top", 1000, 4000)])
    assert run(apiserver, runtime, scheduler, "top") == "node1"
    # The preemptor's devices are gone: its hold ends, and it would preempt again (low-b is all that is left).
    answer = scheduler.filter("high", ["node1"])
    assert answer["FailedNodes"] == {"node1": "preempting default/low-b on node node1"}


@pytest.mark.parametrize(("priority", "spec"), [
    pytest.param(100, {"preemptionPolicy": "Never"}, id="preemption-policy-never"),
    pytest.param(2, {}, id="equal-priority-is-never-a-victim"),
])
def test_no_preemption(apiserver: LocalCluster, full_node: tuple[Runtime, Scheduler], priority: int,
                       spec: dict[str, Any]) -> None:
    runtime, scheduler = full_node
    apiserver.load([pod("waiter", priority, 8000, **spec)])
    answer = scheduler.filter("waiter", ["node1"])
    assert answer["NodeNames"] == [] and "preempt" not in answer["FailedNodes"]["node1"]
    assert runtime.cache.holds() == []
    assert not terminating(apiserver, "low-a") and not terminating(apiserver, "low-b")


def test_failed_deletes_are_retried(apiserver: LocalCluster, full_node: tuple[Runtime, Scheduler]) -> None:
    runtime, scheduler = full_node
    apiserver.inject_failure("DELETE", "pods", name="low-a", status=500, count=2)
    preempt_low_a(apiserver, runtime, scheduler)
    assert metric(runtime, 'hami_web_preemptions_total{result="done"}') == 1.0


def test_deletes_that_keep_failing_are_reported_and_the_hold_dropped(
        apiserver: LocalCluster, full_node: tuple[Runtime, Scheduler], caplog: pytest.LogCaptureFixture) -> None:
    runtime, scheduler = full_node
    apiserver.inject_failure("DELETE", "pods", name="low-a", status=500, count=100)
    apiserver.load([pod("high", 100, 4000)])
    with caplog.at_level(logging.ERROR):
        scheduler.filter("high", ["node1"])
        assert runtime.preempter is not None
        wait_for(lambda: metric(runtime, 'hami_web_preemptions_total{result="failed"}') == 1.0,
                 timeout_seconds=10, what="the failure counted")
    assert runtime.cache.holds() == []
    assert any("preemption for pod default/high on node node1 failed after 3 attempts" in r.message
               for r in caplog.records)
    wait_for(lambda: "PreemptionFailed" in [e["reason"] for e in events_for(apiserver, "high")],
             what="PreemptionFailed event")
    apiserver.clear_failures()
    assert not terminating(apiserver, "low-a")


def test_two_servers_never_both_preempt_for_one_pod(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                                    full_node: tuple[Runtime, Scheduler]) -> None:
    first, first_scheduler = full_node
    second = make_runtime()
    second_scheduler = Scheduler(second.app.test_client(), apiserver)
    wait_for(lambda: second.cache.held_by(str(apiserver.get("pods", "low-b", NAMESPACE)["metadata"]["uid"])),
             what="the second server sees low-b")
    apiserver.load([pod("high", 100, 4000)])
    sent = first_scheduler.pod("high")
    # Both servers filter the same version of the pod (a hand-over): both decide, one preemption lands.
    for scheduler in (first_scheduler, second_scheduler):
        answer = scheduler.post("/filter", {"Pod": sent, "Nodes": None, "NodeNames": ["node1"]})
        assert answer["FailedNodes"] == {"node1": "preempting default/low-a on node node1"}
    for runtime in (first, second):
        assert runtime.preempter is not None
        wait_for(runtime.preempter.idle.is_set, what="both acts done")
    results = sorted(metric(runtime, 'hami_web_preemptions_total{result="done"}') * 10
                     + metric(runtime, 'hami_web_preemptions_total{result="fenced"}') for runtime in (first, second))
    assert results == [1.0, 10.0]  # one done, one fenced
    deletes = [query for method, path in apiserver.request_log if method == "DELETE" and path.endswith("/low-a")
               for query in [path]]
    assert len(deletes) == 1
    assert not terminating(apiserver, "low-b")


def test_a_restarted_server_rebuilds_the_hold_from_nominated_node_name(
        apiserver: LocalCluster, make_runtime: RuntimeFactory, full_node: tuple[Runtime, Scheduler],
        caplog: pytest.LogCaptureFixture) -> None:
    first, first_scheduler = full_node
    preempt_low_a(apiserver, first, first_scheduler)
    first.stop()
    second = make_runtime()
    scheduler = Scheduler(second.app.test_client(), apiserver)
    with caplog.at_level(logging.INFO):
        answer = scheduler.filter("high", ["node1"])
    assert answer["FailedNodes"] == {"node1": "waiting for 1 preempted pod on node1"}
    assert any("rebuilt from nominatedNodeName" in record.message for record in caplog.records)
    assert not terminating(apiserver, "low-b")
    apiserver.load([pod("mid", 2, 4000)])
    finish_termination(apiserver, "low-a")
    wait_for(lambda: not second.cache.holds()[0].remaining, what="the victim gone")
    assert scheduler.filter("mid", ["node1"])["NodeNames"] == []
    assert run(apiserver, second, scheduler, "high") == "node1"


def test_preemption_off_preempts_nothing(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1)), pod("low", 1, 8000), pod("high", 100, 8000)])
    runtime = make_runtime(preemption="off")
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    run(apiserver, runtime, scheduler, "low")
    assert "preempt" not in scheduler.filter("high", ["node1"])["FailedNodes"]["node1"]
    assert runtime.preempter is None and not terminating(apiserver, "low")
    assert metric(runtime, 'hami_web_preemption_enabled{reason="--preemption=off"}') == 0.0


def test_without_the_rights_preemption_turns_itself_off(apiserver: LocalCluster,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A ServiceAccount bound to a role without pods delete and pods/status patch: one log line, and /metrics says
    why."""
    apiserver.load([
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": "hami-web-token", "namespace": "hami-system",
                      "annotations": {"kubernetes.io/service-account.name": "hami-web"}},
         "stringData": {"token": "restricted-token"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "reader"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "hami-web", "namespace": "hami-system"}]}])
    configuration = kubernetes.client.Configuration()
    configuration.host = apiserver.url
    configuration.api_key = {"authorization": "Bearer restricted-token"}
    from hami_web.server.runtime import build_runtime
    from hami_web.settings import Settings
    with caplog.at_level(logging.WARNING):
        runtime = build_runtime(Settings.of(), kube=Kube(configuration))
    try:
        lines = [r.message for r in caplog.records if "preemption is off" in r.message]
        assert lines == ["device-aware preemption is off: the server may not pods delete, pods/status patch, "
                         "poddisruptionbudgets list, poddisruptionbudgets watch (grant them, see k8s/rbac.yaml, "
                         "and restart)"]
        assert runtime.preempter is None and runtime.settings.preemption == "off"
        assert metric(runtime, "hami_web_preemption_enabled{") == 0.0
        assert "pods delete" in runtime.app.test_client().get("/metrics").get_data(as_text=True)
    finally:
        runtime.kube.close()


def test_preempt_verb_gives_kube_schedulers_candidates_their_device_victims(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    """``ProcessPreemption``: node1's proposed victim (a CPU pod) frees no device, so low-a is added; node2's devices
    are held by a pod of higher priority, so node2 is dropped; a proposal that frees the devices stands as it is."""
    apiserver.load([gpu_node("node1", gpus("node1", 1)), gpu_node("node2", gpus("node2", 1)),
                    pod("low-a", 1, 4000), pod("low-b", 2, 4000), pod("vip", 500, 8000), pod("high", 100, 4000)])
    runtime = make_runtime()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    for name in ("low-a", "low-b"):
        run(apiserver, runtime, scheduler, name)
    node = scheduler.schedule("vip", ["node2"])
    release_lock(runtime.kube, "vip", node)
    uid = {name: scheduler.pod(name)["metadata"]["uid"] for name in ("low-a", "low-b", "vip")}
    answer = scheduler.post("/preempt", {"Pod": scheduler.pod("high"), "NodeNameToMetaVictims": {
        "node1": {"Pods": [{"UID": "cpu-pod-uid"}], "NumPDBViolations": 1},
        "node2": {"Pods": [{"UID": "other-cpu-pod"}], "NumPDBViolations": 0}}})
    assert answer["NodeNameToMetaVictims"] == {
        "node1": {"Pods": [{"UID": "cpu-pod-uid"}, {"UID": uid["low-a"]}], "NumPDBViolations": 1}}
    answer = scheduler.post("/preempt", {"Pod": scheduler.pod("high"), "NodeNameToMetaVictims": {
        "node1": {"Pods": [{"UID": uid["low-b"]}], "NumPDBViolations": 0}}})
    assert answer["NodeNameToMetaVictims"] == {"node1": {"Pods": [{"UID": uid["low-b"]}], "NumPDBViolations": 0}}
    bad = scheduler.post("/preempt", {"Pod": scheduler.pod("high"), "NodeNameToMetaVictims": {"node1": {"Pods": 3}}})
    assert bad["NodeNameToMetaVictims"] == {} and "Pods must be a list" in bad["Error"]
    assert not terminating(apiserver, "low-a")  # kube-scheduler deletes its victims itself


def test_a_higher_priority_preemption_ends_a_lower_ones_hold_on_the_node(
        apiserver: LocalCluster, full_node: tuple[Runtime, Scheduler]) -> None:
    """kube-scheduler clears the nomination of lower-priority pods on the node it preempts on: their hold ends, and
    the terminating victim of the first counts as gone for the second, which preempts only what it still needs."""
    runtime, scheduler = full_node
    preempt_low_a(apiserver, runtime, scheduler)
    apiserver.load([pod("top", 1000, 8000)])
    answer = scheduler.filter("top", ["node1"])
    assert answer["FailedNodes"] == {"node1": "preempting default/low-b on node node1"}
    assert [state.hold.key for state in runtime.cache.holds()] == ["default/top"]
    assert runtime.preempter is not None
    wait_for(lambda: terminating(apiserver, "low-b"), what="low-b terminating")


def test_preempt_verb_reads_whole_victim_pods_when_not_node_cache_capable(
        apiserver: LocalCluster, full_node: tuple[Runtime, Scheduler]) -> None:
    """With ``nodeCacheCapable: false`` kube-scheduler sends ``NodeNameToVictims`` (whole pods); the answer is still
    ``NodeNameToMetaVictims``, as kube-scheduler always reads it."""
    _, scheduler = full_node
    apiserver.load([pod("high", 100, 8000)])
    low_a = scheduler.pod("low-a")
    answer = scheduler.post("/preempt", {"Pod": scheduler.pod("high"), "NodeNameToVictims": {
        "node1": {"Pods": [low_a], "NumPDBViolations": 0}}})
    uid = {name: scheduler.pod(name)["metadata"]["uid"] for name in ("low-a", "low-b")}
    assert answer["NodeNameToMetaVictims"] == {
        "node1": {"Pods": [{"UID": uid["low-a"]}, {"UID": uid["low-b"]}], "NumPDBViolations": 0}}
