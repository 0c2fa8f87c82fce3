"""HAMi's ``--leader-elect`` and ``--legacy-metrics`` against the in-process API server (README.md#switching-from-hami).

Covers: the replica whose hostname leads kube-scheduler's Lease holder identity books (``/filter`` and ``/bind``), says
``leader`` on ``/readyz`` and labels the scheduler pods of ``POD_NAMESPACE`` ``hami.io/scheduler-role`` leader /
follower as HAMi's ``updateSchedulerLabel`` does (HAMi's chart selects its Service by it); a standby (another
holder, an expired Lease, or none) stays ready (a rollout waits for readiness) but refuses ``/filter`` and
``/bind`` with the reason, touching nothing, and books as soon as the Lease names it (read again on the call);
``holds_lease`` table-driven on HAMi's ``leaderManager.IsLeader`` rules; ``--legacy-metrics`` serves HAMi's pre-2.8
names with their label names and raw core units beside the current ones, and nothing of them without it.
"""

from __future__ import annotations

import socket
from typing import Any

import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami_web.localcluster import LocalCluster
from hami_web.state.leadership import ROLE_LABEL, holds_lease

from .conftest import RuntimeFactory
from .helpers import Scheduler, gpu_limits, gpu_node, gpu_pod

LEASE_NAMESPACE, LEASE_NAME = "kube-system", "hami-scheduler"
LEADER_ELECT = {"leader_elect": True, "leader_elect_resource_name": LEASE_NAME,
                "leader_elect_resource_namespace": LEASE_NAMESPACE}
MIB = 1024 * 1024


def _lease(holder: str | None, duration: int | None = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if holder is not None:
        spec["holderIdentity"] = holder
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE}, "spec": spec}


def _scheduler_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": LEASE_NAMESPACE,
                         "labels": {"app.kubernetes.io/component": "hami-scheduler"}},
            "spec": {"containers": [{"name": "vgpu-scheduler-extender", "image": "hami-web"}]}}


@pytest.mark.parametrize(("lease", "observed_at", "now", "leads"), [
    pytest.param(_lease("node-a_1b2c"), 100.0, 110.0, True, id="holder-is-us"),
    pytest.param(_lease("node-a"), 100.0, 110.0, True, id="bare-hostname"),
    pytest.param(_lease("node-b_1b2c"), 100.0, 110.0, False, id="another-holder"),
    pytest.param(_lease("node-a_1b2c"), 100.0, 115.0, False, id="expired-at-duration"),
    pytest.param(_lease("node-a_1b2c", duration=None), 100.0, 101.0, False, id="no-duration"),
    pytest.param(_lease(None), 100.0, 101.0, False, id="no-holder"),
    pytest.param(None, 100.0, 101.0, False, id="no-lease"),
])
def test_holds_lease_as_hamis_leader_manager(lease: dict[str, Any] | None, observed_at: float, now: float,
                                             leads: bool) -> None:
    """HAMi v2.10 pkg/util/leaderelection: isHolderOf (HasPrefix of the hostname) and isLeaseValid."""
    assert holds_lease(lease, "node-a", observed_at=observed_at, now=now) is leads


def test_the_leader_books_and_labels_the_scheduler_pods(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    me = socket.gethostname()
    monkeypatch.setenv("POD_NAMESPACE", LEASE_NAMESPACE)
    monkeypatch.setenv("POD_NAME", "hami-scheduler-a")
    apiserver.load([_lease(f"{me}_5f1c"), _scheduler_pod("hami-scheduler-a"), _scheduler_pod("hami-scheduler-b"),
                    gpu_node("node1"), gpu_pod("pod1")])
    runtime = make_runtime(**LEADER_ELECT)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.schedule("pod1", ["node1"]) == "node1"
    ready = runtime.app.test_client().get("/readyz").get_json()
    assert ready["leader_election"].startswith(f"leader (Lease kube-system/hami-scheduler held by {me}_5f1c")

    def roles() -> dict[str, str]:
        return {name: (apiserver.get("pods", name, LEASE_NAMESPACE)["metadata"].get("labels") or {}).get(ROLE_LABEL, "")
                for name in ("hami-scheduler-a", "hami-scheduler-b")}

    assert _eventually(lambda: roles() == {"hami-scheduler-a": "leader", "hami-scheduler-b": "follower"})


@pytest.mark.parametrize("lease", [_lease("another-host_5f1c"), _lease(None), None],
                         ids=["another-holder", "no-holder", "no-lease"])
def test_a_standby_stays_ready_but_never_books(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                               lease: dict[str, Any] | None) -> None:
    apiserver.load([*([lease] if lease else []), gpu_node("node1"), gpu_pod("pod1")])
    runtime = make_runtime(**LEADER_ELECT)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    answer = scheduler.filter("pod1", ["node1"])
    assert answer["NodeNames"] is None and "this hami-web replica is a standby" in answer["Error"]
    bound = scheduler.bind("pod1", "node1")
    assert "standby" in bound["Error"]
    pod = scheduler.pod("pod1")
    assert not pod["spec"].get("nodeName") and not (pod["metadata"].get("annotations") or {})
    response = runtime.app.test_client().get("/readyz")
    assert response.status_code == 200 and response.get_json()["leader_election"].startswith("standby")
    # kube-scheduler of this pod wins the Lease: the next call reads it and books.
    taken = _lease(f"{socket.gethostname()}_9e0d")
    coordination = kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient(
        kubernetes.client.Configuration(host=apiserver.url)))
    if lease is None:
        coordination.create_namespaced_lease(LEASE_NAMESPACE, taken)
    else:
        coordination.patch_namespaced_lease(LEASE_NAME, LEASE_NAMESPACE, {"spec": taken["spec"]})
    assert scheduler.schedule("pod1", ["node1"]) == "node1"


def _scrape(runtime: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    return {family.name: [(sample.labels, sample.value) for sample in family.samples]
            for family in text_string_to_metric_families(text)}


LEGACY_LABELS = {
    "GPUDeviceMemoryLimit": {"nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"},
    "GPUDeviceCoreLimit": {"nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"},
    "GPUDeviceMemoryAllocated": {"nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone"},
    "GPUDeviceSharedNum": {"nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"},
    "GPUDeviceCoreAllocated": {"nodeid", "deviceuuid", "deviceidx", "devicetype", "zone"},
    "nodeGPUOverview": {"nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit", "devicetype", "zone"},
    "nodeGPUMemoryPercentage": {"nodeid", "deviceuuid", "deviceidx", "zone"},
    "vGPUMemoryAllocated": {"podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone"},
    "vGPUCoreAllocated": {"podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone"},
}


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy-metrics", "current-only"])
def test_legacy_metric_names(apiserver: LocalCluster, make_runtime: RuntimeFactory, legacy: bool) -> None:
    """HAMi v2.10 cmd/scheduler/metrics.go, ``legacy`` descriptors: cores raw (GPUDeviceCoreAllocated is the booked
    cores, not a percent of the device)."""
    apiserver.load([gpu_node("node1"), gpu_pod("pod1", gpu_limits(1, memory_mib=3000, cores=30))])
    runtime = make_runtime(legacy_metrics=legacy)
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("pod1", ["node1"]) == "node1"
    families = _scrape(runtime)
    assert "hami_gpu_memory_limit_bytes" in families
    if not legacy:
        assert not set(LEGACY_LABELS) & set(families)
        return
    for name, labels in LEGACY_LABELS.items():
        assert families.get(name), name
        assert all(set(sample) == labels for sample, _ in families[name]), name
    used = [value for labels, value in families["GPUDeviceMemoryAllocated"] if value]
    cores = [value for labels, value in families["GPUDeviceCoreAllocated"] if value]
    (container,) = families["vGPUCoreAllocated"]
    assert (used, cores, container[0]["podname"], container[1]) == ([3000 * MIB], [30], "pod1", 30)


def _eventually(condition: Any, timeout_seconds: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())
