"""Cambricon MLUs through ``/filter`` and ``/bind`` against the API, and the family's own node lock
(docs/device-families.md#device-families).

Covers: an MLU pod bound with HAMi's Cambricon annotations (``hami.io/cambricon-mlu-devices-…``,
``CAMBRICON_DSMLU_PROFILE``, ``CAMBRICON_DSMLU_ASSIGNED``) from a node whose only inventory is its capacity, with the
lock ``cambricon.com/dsmlu.lock`` (a bare RFC3339 time) and never ``hami.io/mutex.lock``; the whole-card and
exclusive-cores defaults; UUID pinning; type selection by the node's ``Model``, ignored where the model is unknown;
a capacity change through the node's status reaching the inventory; the lock: a fresh one refuses the bind (``node <n>
has been locked within 2 minutes``, nothing written), an old or unparsable one is taken over, a failed bind clears only
our own value (a value replaced meanwhile, another pod's or another process's is left alone, one whose write's answer
was lost is cleared), re-entrant for the same pod, and two pods of one process writing the same second's value never
both hold it; a GPU+MLU pod takes both locks or neither; an MLU pod and a GPU pod binding on one node at once, each
under its own lock, both bound; a live MLU lock makes its node busy for MLU pods (placed elsewhere) but not for GPU
pods, and HAMi's lock for GPU pods but not for MLU pods; a gang member waits for the MLU lock until it lapses.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import requests

from hami_web.core import names
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.families.cambricon import DSMLU_LOCK as DSMLU_RULE
from hami_web.core.nodelocks import format_time
from hami_web.extender.nodelock import NodeLock, NodeLockHeld
from hami_web.kube import Kube, KubeError
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    DSMLU_LOCK,
    MLU_VCORE,
    MLU_VMEMORY,
    RuntimeFactory,
    Scheduler,
    annotations_of,
    busy_nodes,
    container,
    gpu_limits,
    gpu_pod,
    gpus,
    make_runtime_refusing_locked_binds,  # noqa: F401  (the fixture: make_runtime, and so runtime, here)
    mlu_limits,
    mlu_node,
    release_lock,
    wait_for,
)

MLU_KEYS = ("hami.io/cambricon-mlu-devices-to-allocate", "hami.io/cambricon-mlu-devices-allocated")


def _lock(apiserver: LocalCluster, node: str, key: str = DSMLU_LOCK) -> str:
    return annotations_of(apiserver, "nodes", node).get(key, "")


def _set_node_annotations(kube: Kube, node: str, annotations: dict[str, str | None]) -> None:
    kube.patch_node(node, {"metadata": {"annotations": annotations}})


def _booking(apiserver: LocalCluster, pod: str) -> dict[str, str]:
    return {key: value for key, value in annotations_of(apiserver, "pods", pod).items()
            if "-devices-" in key or key.startswith("CAMBRICON_")}


def _bound_to(scheduler: Scheduler, pod: str) -> str:
    return str(scheduler.pod(pod)["spec"].get("nodeName") or "")


@pytest.fixture
def mlus(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> Runtime:
    """``mlu-1``: two MLU370-X4 cards of 24576 MiB (capacity only); ``mixed``: two A40s and two MLU cards."""
    apiserver.load([mlu_node("mlu-1"), mlu_node("mixed", gpu_devices=gpus("mixed", 2))])
    return make_runtime()


@pytest.fixture
def mlu_scheduler(mlus: Runtime, apiserver: LocalCluster) -> Scheduler:
    return Scheduler(mlus.app.test_client(), apiserver)


# -- placement and annotations ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("limits", "value", "profile"), [
    pytest.param(mlu_limits(1, memory_units=48, cores=50), "mlu-1-cambricon-mlu-0,MLU,12288,50:;", "0_50_48",
                 id="memory-and-cores"),
    pytest.param(mlu_limits(1), "mlu-1-cambricon-mlu-0,MLU,24576,100:;", "0_100_96", id="whole-card-by-default"),
])
def test_an_mlu_pod_is_bound_with_the_cambricon_annotations_and_its_own_lock(
        mlus: Runtime, mlu_scheduler: Scheduler, apiserver: LocalCluster, limits: dict[str, str], value: str,
        profile: str) -> None:
    apiserver.load([gpu_pod("p1", limits)])
    before = time.time()

    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"

    assert _booking(apiserver, "p1") == {MLU_KEYS[0]: value, MLU_KEYS[1]: value,
                                         "CAMBRICON_DSMLU_PROFILE": profile, "CAMBRICON_DSMLU_ASSIGNED": "false"}
    lock = _lock(apiserver, "mlu-1")
    taken_at = DSMLU_RULE.parse(lock).taken_at
    assert lock.endswith("Z") and "," not in lock
    assert taken_at is not None and before - 1 <= taken_at <= time.time()
    assert _lock(apiserver, "mlu-1", names.NODE_LOCK) == ""  # an MLU pod never takes HAMi's mutex.lock
    assert annotations_of(apiserver, "pods", "p1")[names.POD_ASSIGNED_NODE] == "mlu-1"


def test_a_gpu_pod_on_an_mlu_node_takes_only_the_mutex_lock(mlus: Runtime, mlu_scheduler: Scheduler,
                                                            apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("g1", gpu_limits(1, memory_mib=1000, cores=10))])
    assert mlu_scheduler.schedule("g1", ["mixed"]) == "mixed"
    assert _lock(apiserver, "mixed", names.NODE_LOCK).endswith(",default,g1")
    assert _lock(apiserver, "mixed") == ""
    assert not any(key.startswith("CAMBRICON_") for key in annotations_of(apiserver, "pods", "g1"))


def test_whole_card_mlus_are_not_shared(mlus: Runtime, mlu_scheduler: Scheduler, apiserver: LocalCluster,
                                        kube: Kube) -> None:
    apiserver.load([gpu_pod(f"p{i}", mlu_limits(1)) for i in (1, 2, 3)])
    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: None})  # the device plugin done with p1
    assert mlu_scheduler.schedule("p2", ["mlu-1"]) == "mlu-1"
    assert _booking(apiserver, "p2")[MLU_KEYS[1]] == "mlu-1-cambricon-mlu-1,MLU,24576,100:;"

    answer = mlu_scheduler.filter("p3", ["mlu-1"])
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {"mlu-1": "2/2 CardInsufficientMemory"}


def test_shares_of_one_card_fit_together(mlus: Runtime, mlu_scheduler: Scheduler, apiserver: LocalCluster,
                                         kube: Kube) -> None:
    apiserver.load([gpu_pod("p1", mlu_limits(1, memory_units=40, cores=50)),
                    gpu_pod("p2", mlu_limits(1, memory_units=40, cores=50),
                            annotations={"cambricon.com/use-gpuuuid": "mlu-1-cambricon-mlu-0"})])
    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: None})
    assert mlu_scheduler.schedule("p2", ["mlu-1"]) == "mlu-1"
    assert _booking(apiserver, "p2")["CAMBRICON_DSMLU_PROFILE"] == "0_50_40"


def test_a_uuid_pin_picks_the_card(mlus: Runtime, mlu_scheduler: Scheduler, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("p1", mlu_limits(1, memory_units=8, cores=10),
                            annotations={"cambricon.com/use-gpuuuid": "mlu-1-cambricon-mlu-1"})])
    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"
    assert _booking(apiserver, "p1")["CAMBRICON_DSMLU_PROFILE"] == "1_10_8"


@pytest.mark.parametrize(("model", "annotations", "reason"), [
    pytest.param("MLU370-X4", {"cambricon.com/use-mlutype": "MLU290"}, "2/2 CardTypeMismatch", id="use-other-model"),
    pytest.param("MLU370-X4", {"cambricon.com/nouse-mlutype": "MLU370"}, "2/2 CardTypeMismatch",
                 id="nouse-this-model"),
    # HAMi v2.10 reads no MLU type annotation: where the model is unknown it is ignored and the pod placed.
    pytest.param(None, {"cambricon.com/use-mlutype": "MLU370"}, "", id="model-unknown-use-ignored"),
    pytest.param(None, {"cambricon.com/nouse-mlutype": "MLU290"}, "", id="model-unknown-nouse-ignored"),
    pytest.param("MLU370-X4", {"cambricon.com/use-mlutype": "MLU370"}, "", id="use-this-model"),
    pytest.param(None, {}, "", id="model-unknown-no-selection"),
])
def test_type_selection_by_the_nodes_model(apiserver: LocalCluster, make_runtime: RuntimeFactory,
                                           model: str | None, annotations: dict[str, str], reason: str) -> None:
    apiserver.load([mlu_node("m", model=model), gpu_pod("p1", mlu_limits(1), annotations=annotations)])
    scheduler = Scheduler(make_runtime().app.test_client(), apiserver)
    answer = scheduler.filter("p1", ["m"])
    assert answer["FailedNodes"] == ({"m": reason} if reason else {})
    assert answer["NodeNames"] == ([] if reason else ["m"])


def test_a_capacity_change_reaches_the_inventory(mlus: Runtime, apiserver: LocalCluster) -> None:
    def cards() -> int:
        view = mlus.cache.node_view("mlu-1")
        return len(view.inventory.devices) if view is not None else 0

    assert cards() == 2
    response = requests.patch(f"{apiserver.url}/api/v1/nodes/mlu-1/status", timeout=10,
                              data=json.dumps({"status": {"capacity": {MLU_VCORE: "400", MLU_VMEMORY: "384"}}}),
                              headers={"Content-Type": "application/merge-patch+json"})
    assert response.status_code == 200, response.text
    wait_for(lambda: cards() == 4, what="four MLU cards")
    view = mlus.cache.node_view("mlu-1")
    assert view is not None and {d.memory_mib for d in view.inventory.devices} == {24576}

    requests.patch(f"{apiserver.url}/api/v1/nodes/mlu-1/status", timeout=10,
                   data=json.dumps({"status": {"capacity": {MLU_VCORE: "0"}}}),
                   headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()
    wait_for(lambda: mlus.cache.node_view("mlu-1") is None, what="mlu-1 to have no MLU")


# -- the lock ---------------------------------------------------------------------------------------------------

def test_a_fresh_lock_refuses_the_bind_and_nothing_is_written(mlus: Runtime, mlu_scheduler: Scheduler,
                                                              apiserver: LocalCluster, kube: Kube) -> None:
    apiserver.load([gpu_pod("p1", mlu_limits(1))])
    held = format_time(time.time() - 60)
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: held})
    wait_for(lambda: mlus.cache.seen_node("mlu-1") is not None
             and mlus.cache.seen_node("mlu-1").value(DSMLU_LOCK) == held,  # type: ignore[union-attr]
             what="the watch to show the lock")
    assert mlu_scheduler.filter("p1", ["mlu-1"])["NodeNames"] == ["mlu-1"]

    answer = mlu_scheduler.bind("p1", "mlu-1")

    assert answer == {"Error": "node mlu-1 has been locked within 2 minutes"}
    assert _lock(apiserver, "mlu-1") == held
    assert _booking(apiserver, "p1") == {} and _bound_to(mlu_scheduler, "p1") == ""


@pytest.mark.parametrize("held", [
    pytest.param(format_time(time.time() - 180), id="older-than-two-minutes"),
    pytest.param("2026-13-45T99:99:99Z", id="unparsable"),
    pytest.param("locked", id="not-a-time"),
])
def test_a_stale_lock_is_taken_over(mlus: Runtime, mlu_scheduler: Scheduler, apiserver: LocalCluster, kube: Kube,
                                    held: str) -> None:
    apiserver.load([gpu_pod("p1", mlu_limits(1))])
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: held})

    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"

    taken_at = DSMLU_RULE.parse(_lock(apiserver, "mlu-1")).taken_at
    assert taken_at is not None and abs(taken_at - time.time()) < 30


def test_a_failed_bind_clears_our_lock(mlus: Runtime, mlu_scheduler: Scheduler, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("p1", mlu_limits(1))])
    assert mlu_scheduler.filter("p1", ["mlu-1"])["NodeNames"] == ["mlu-1"]
    apiserver.inject_failure("POST", "pods", name="p1", subresource="binding", status=500)

    answer = mlu_scheduler.bind("p1", "mlu-1")

    assert "injected failure" in answer["Error"]
    assert _lock(apiserver, "mlu-1") == ""
    assert names.POD_BIND_PHASE not in annotations_of(apiserver, "pods", "p1")  # the failed Binding wrote nothing
    # kube-scheduler retries: filtered and bound again, the lock taken again.
    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"
    assert _lock(apiserver, "mlu-1") != ""


def test_release_clears_only_our_own_value(mlus: Runtime, apiserver: LocalCluster, kube: Kube) -> None:
    clock = [time.time()]
    locks = NodeLock(kube, timeout_seconds=300, clock=lambda: clock[0], rules=DEFAULT_CATALOG.lock_rules())
    other_process = NodeLock(kube, timeout_seconds=300, rules=DEFAULT_CATALOG.lock_rules())

    locks.acquire("mlu-1", "default", "p1", rules=(DSMLU_RULE,))
    ours = _lock(apiserver, "mlu-1")
    assert ours == format_time(clock[0])
    assert locks.acquire("mlu-1", "default", "p1", rules=(DSMLU_RULE,)) != ""  # re-entrant: nothing rewritten
    assert _lock(apiserver, "mlu-1") == ours
    assert locks.release("mlu-1", "default", "p2") is False  # another pod's
    assert other_process.release("mlu-1", "default", "p1") is False  # a value this process never wrote
    assert _lock(apiserver, "mlu-1") == ours

    # Someone replaced our value meanwhile (HAMi took the lock over): it is no longer ours to clear.
    foreign = format_time(clock[0] + 5)
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: foreign})
    assert locks.release("mlu-1", "default", "p1") is False
    assert _lock(apiserver, "mlu-1") == foreign

    # Our own value, still there: cleared, and only it (HAMi's lock of another pod stays).
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: None, names.NODE_LOCK: f"{foreign},default,g9"})
    locks.acquire("mlu-1", "default", "p1", rules=(DSMLU_RULE,))
    assert locks.release("mlu-1", "default", "p1") is True
    assert _lock(apiserver, "mlu-1") == ""
    assert _lock(apiserver, "mlu-1", names.NODE_LOCK) == f"{foreign},default,g9"


def test_a_gpu_and_mlu_pod_takes_both_locks_or_neither(mlus: Runtime, mlu_scheduler: Scheduler,
                                                        apiserver: LocalCluster, kube: Kube) -> None:
    both = {**gpu_limits(1, memory_mib=1000, cores=10), **mlu_limits(1, memory_units=8, cores=10)}
    apiserver.load([gpu_pod("p1", both), gpu_pod("p2", both)])
    held = format_time(time.time())
    _set_node_annotations(kube, "mixed", {DSMLU_LOCK: held})
    assert mlu_scheduler.filter("p1", ["mixed"])["NodeNames"] == ["mixed"]

    assert mlu_scheduler.bind("p1", "mixed") == {"Error": "node mixed has been locked within 2 minutes"}
    assert _lock(apiserver, "mixed", names.NODE_LOCK) == ""  # the free mutex.lock was not taken alone

    _set_node_annotations(kube, "mixed", {DSMLU_LOCK: None})
    assert mlu_scheduler.schedule("p2", ["mixed"]) == "mixed"
    assert _lock(apiserver, "mixed", names.NODE_LOCK).endswith(",default,p2")
    assert _lock(apiserver, "mixed") != ""
    assert set(_booking(apiserver, "p2")) == {*MLU_KEYS, "CAMBRICON_DSMLU_PROFILE", "CAMBRICON_DSMLU_ASSIGNED",
                                              names.POD_DEVICES_TO_ALLOCATE, names.POD_DEVICES_ALLOCATED}


def test_one_familys_lock_does_not_block_the_other_family(mlus: Runtime, mlu_scheduler: Scheduler,
                                                          apiserver: LocalCluster, kube: Kube) -> None:
    apiserver.load([gpu_pod("g1", gpu_limits(1, memory_mib=1000, cores=10)),
                    gpu_pod("g2", gpu_limits(1, memory_mib=1000, cores=10)),
                    gpu_pod("m1", mlu_limits(1, memory_units=8, cores=10)),
                    gpu_pod("m2", mlu_limits(1, memory_units=8, cores=10))])
    assert mlu_scheduler.schedule("g1", ["mixed"]) == "mixed"  # g1 holds mutex.lock (its device plugin is slow)
    assert mlu_scheduler.schedule("m1", ["mixed"]) == "mixed"  # not blocked by it
    # Each family's next pod waits for its own lock only.
    assert mlu_scheduler.filter("m2", ["mixed"])["NodeNames"] == ["mixed"]
    assert mlu_scheduler.bind("m2", "mixed") == {"Error": "node mixed has been locked within 2 minutes"}
    assert mlu_scheduler.filter("g2", ["mixed"])["NodeNames"] == ["mixed"]
    assert mlu_scheduler.bind("g2", "mixed") == {"Error": "node mixed is locked by default/g1"}
    release_lock(kube, "g1", "mixed")
    assert mlu_scheduler.schedule("g2", ["mixed"]) == "mixed"


def test_an_mlu_pod_and_a_gpu_pod_bind_on_one_node_at_once(mlus: Runtime, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("g1", gpu_limits(1, memory_mib=1000, cores=10)),
                    gpu_pod("m1", mlu_limits(1, memory_units=8, cores=10))])
    schedulers = {pod: Scheduler(mlus.app.test_client(), apiserver) for pod in ("g1", "m1")}
    for pod, scheduler in schedulers.items():
        assert scheduler.filter(pod, ["mixed"])["NodeNames"] == ["mixed"]
    start = threading.Barrier(len(schedulers))
    answers: dict[str, Any] = {}

    def bind(pod: str) -> None:
        start.wait()
        answers[pod] = schedulers[pod].bind(pod, "mixed")

    threads = [threading.Thread(target=bind, args=(pod,)) for pod in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert answers == {"g1": {"Error": ""}, "m1": {"Error": ""}}
    assert _bound_to(schedulers["g1"], "g1") == _bound_to(schedulers["m1"], "m1") == "mixed"
    assert _lock(apiserver, "mixed", names.NODE_LOCK).endswith(",default,g1")
    assert DSMLU_RULE.parse(_lock(apiserver, "mixed")).taken_at is not None


# -- busy nodes -------------------------------------------------------------------------------------------------

def test_a_live_mlu_lock_makes_its_node_busy_for_mlu_pods_only(apiserver: LocalCluster,
                                                               make_runtime: RuntimeFactory, kube: Kube) -> None:
    apiserver.load([mlu_node("mixed-1", gpu_devices=gpus("mixed-1", 2)),
                    mlu_node("mixed-2", gpu_devices=gpus("mixed-2", 2)),
                    gpu_pod("g1", gpu_limits(1, memory_mib=1000, cores=10)),
                    gpu_pod("m1", mlu_limits(1, memory_units=8, cores=10))])
    runtime = make_runtime()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    _set_node_annotations(kube, "mixed-1", {DSMLU_LOCK: format_time(time.time() - 121)})
    wait_for(lambda: runtime.cache.seen_node("mixed-1").value(DSMLU_LOCK) != "",  # type: ignore[union-attr]
             what="the watch to show the stale lock")
    assert busy_nodes(runtime.cache) == frozenset()
    _set_node_annotations(kube, "mixed-1", {DSMLU_LOCK: format_time(time.time())})
    wait_for(lambda: busy_nodes(runtime.cache) == {"mixed-1"}, what="mixed-1 busy")

    assert scheduler.filter("m1", ["mixed-1", "mixed-2"])["NodeNames"] == ["mixed-2"]
    assert scheduler.filter("g1", ["mixed-1", "mixed-2"])["NodeNames"] == ["mixed-1"]  # the tie goes by name


def test_container_layout_of_a_two_container_mlu_pod(mlus: Runtime, mlu_scheduler: Scheduler,
                                                      apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("p1", containers=[container("sidecar"),
                                              container("main", mlu_limits(2, memory_units=16, cores=25))])])
    assert mlu_scheduler.schedule("p1", ["mlu-1"]) == "mlu-1"
    value = ";mlu-1-cambricon-mlu-0,MLU,4096,25:mlu-1-cambricon-mlu-1,MLU,4096,25:;"
    assert _booking(apiserver, "p1") == {MLU_KEYS[0]: value, MLU_KEYS[1]: value,
                                         "CAMBRICON_DSMLU_PROFILE": "0_25_16", "CAMBRICON_DSMLU_ASSIGNED": "false"}


def test_two_pods_of_one_process_in_the_same_second_never_both_hold_the_lock(mlus: Runtime, apiserver: LocalCluster,
                                                                             kube: Kube) -> None:
    now = time.time()
    locks = NodeLock(kube, timeout_seconds=300, clock=lambda: now, rules=DEFAULT_CATALOG.lock_rules())
    seen_free = mlus.cache.seen_node("mlu-1")
    assert seen_free is not None and seen_free.value(DSMLU_LOCK) == ""

    locks.acquire("mlu-1", "default", "a", seen=seen_free, rules=(DSMLU_RULE,))
    value = _lock(apiserver, "mlu-1")
    # b writes the very same text (same second) from the watch's stale copy: its write meets a newer node, and the
    # value it then reads is a's, not b's.
    with pytest.raises(NodeLockHeld, match="node mlu-1 has been locked within 2 minutes"):
        locks.acquire("mlu-1", "default", "b", seen=seen_free, rules=(DSMLU_RULE,))
    assert locks.release("mlu-1", "default", "b") is False
    assert _lock(apiserver, "mlu-1") == value
    assert locks.release("mlu-1", "default", "a") is True
    assert _lock(apiserver, "mlu-1") == ""


def test_a_lock_write_whose_answer_was_lost_is_still_released(mlus: Runtime, apiserver: LocalCluster,
                                                              kube: Kube) -> None:
    locks = NodeLock(kube, timeout_seconds=300, rules=DEFAULT_CATALOG.lock_rules())
    apiserver.inject_failure("PATCH", "nodes", name="mlu-1", mode="reset")  # applied, then the connection drops
    with pytest.raises(KubeError):
        locks.acquire("mlu-1", "default", "a", rules=(DSMLU_RULE,))
    assert _lock(apiserver, "mlu-1") != ""
    assert locks.release("mlu-1", "default", "a") is True
    assert _lock(apiserver, "mlu-1") == ""


def test_hamis_lock_makes_a_node_busy_for_gpu_pods_not_for_mlu_pods(apiserver: LocalCluster,
                                                                     make_runtime: RuntimeFactory) -> None:
    apiserver.load([mlu_node("mixed-1", gpu_devices=gpus("mixed-1", 2)),
                    mlu_node("mixed-2", gpu_devices=gpus("mixed-2", 2)),
                    *(gpu_pod(pod, gpu_limits(1, memory_mib=1000, cores=10)) for pod in ("g1", "g2")),
                    gpu_pod("m1", mlu_limits(1, memory_units=8, cores=10))])
    runtime = make_runtime()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.schedule("g1", ["mixed-1"]) == "mixed-1"  # g1 holds mutex.lock: its device plugin is slow
    wait_for(lambda: busy_nodes(runtime.cache) == {"mixed-1"}, what="mixed-1 busy")

    # binpack prefers mixed-1 (g1 uses a GPU there): an MLU pod, whose bind takes no mutex.lock, still goes there ...
    assert scheduler.filter("m1", ["mixed-1", "mixed-2"])["NodeNames"] == ["mixed-1"]
    assert scheduler.bind("m1", "mixed-1") == {"Error": ""}
    # ... while a GPU pod is sent to the free node.
    assert scheduler.filter("g2", ["mixed-1", "mixed-2"])["NodeNames"] == ["mixed-2"]


def test_a_gang_member_waits_for_the_mlu_lock_until_it_lapses(mlus: Runtime, apiserver: LocalCluster,
                                                              kube: Kube) -> None:
    now = [time.time()]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    locks = NodeLock(kube, timeout_seconds=300, clock=lambda: now[0], sleep=sleep, monotonic=lambda: now[0],
                     rules=DEFAULT_CATALOG.lock_rules())
    held = format_time(now[0])
    _set_node_annotations(kube, "mlu-1", {DSMLU_LOCK: held})

    with pytest.raises(NodeLockHeld, match=r"has been locked within 2 minutes \(waited 60s\)"):
        locks.acquire_waiting("mlu-1", "default", "m1", wait_seconds=60, rules=(DSMLU_RULE,))
    assert _lock(apiserver, "mlu-1") == held

    looks, _ = locks.acquire_waiting("mlu-1", "default", "m1", wait_seconds=120, rules=(DSMLU_RULE,))
    assert looks > 0
    assert _lock(apiserver, "mlu-1") == format_time(now[0]) != held  # taken once older than two minutes
