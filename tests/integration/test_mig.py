"""Dynamic MIG through ``/filter`` and ``/bind`` against the in-process API server (docs/mig.md#dynamic-mig).

Covers: a MIG pod's booking written with ``hami.io/vgpu-mig-allocations`` (profile and placement as chosen, the
profile's memory and cores in the device annotation); two servers with their own caches racing for the last free
placement of one GPU: the bind-time verification lets exactly one win; a stream of MIG pods of mixed profiles
scheduled by two uncoordinated servers ending with no overlapping placement on any GPU; a deleted pod's placement
free again; a restarted server rebuilding occupancy from the reservations; a pod holding a MIG GPU without a
reservation failing the GPU closed (``CardNotHealth``, ``hami_web_mig_fail_closed`` naming the pod) until it goes;
a pre-2.10 geometry node refused ``CardMigLegacyGeometry`` with its pods' suffixed entries counted on the parent
GPU (and in ``hami_web_mig_legacy_entries``); ``hami_node_gpu_mig_instance_info`` per instance.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.migreservations import UNRESERVED_ENTRY, decode_reservations
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.pods import pod_usage
from tests.core.builders import a100_mig_register

from .helpers import (
    RuntimeFactory,
    Scheduler,
    annotations_of,
    delete_pod,
    devices_of,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    release_lock,
    usage_by_gpu,
    wait_for,
)
from .test_two_servers import EXPECTED_REFUSALS, _device_plugin, _schedule_all

MIG = {"nvidia.com/vgpu-mode": "mig"}
# One 1g.5gb placement left: slices 0-5 are held by a 3g and a 2g the test pods never touch.
LAST_SLICE_PROFILES = [{"name": "1g.5gb", "memoryMB": 4864, "core": 14, "sliceCount": 1,
                        "placements": [{"start": 6, "size": 1}]}]


def _mig_node(name: str, *uuids: str) -> dict[str, Any]:
    return gpu_node(name, register=a100_mig_register(*uuids))


def _one_placement_node(name: str) -> dict[str, Any]:
    register = json.loads(a100_mig_register(f"{name}-gpu0"))
    register[0]["migProfiles"] = LAST_SLICE_PROFILES
    return gpu_node(name, register=json.dumps(register))


def _reservations(apiserver: LocalCluster, pod: str) -> list[tuple[str, str, int, int]]:
    text = annotations_of(apiserver, "pods", pod).get(names.POD_MIG_RESERVATIONS, "")
    return [(r.gpu_uuid, r.instance.profile, r.instance.placement.start, r.instance.placement.size)
            for r in decode_reservations(text)]


def _scrape(runtime: Runtime, name: str) -> list[dict[str, str]]:
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    return [sample.labels for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == name]


def test_a_mig_pod_is_booked_with_its_reservation(apiserver: LocalCluster, runtime: Runtime,
                                                   scheduler: Scheduler) -> None:
    apiserver.load([_mig_node("a100", "GPU-a"),
                    gpu_pod("small", gpu_limits(1, memory_mib=4000), annotations=MIG),
                    gpu_pod("medium", gpu_limits(1, memory_mib=9000)),
                    gpu_pod("two", gpu_limits(2, memory_mib=15000))])
    runtime.sync.sync_now()

    for pod in ("small", "medium"):
        assert scheduler.schedule(pod, ["a100"]) == "a100"
        release_lock(runtime.kube, pod, "a100")
    assert devices_of(apiserver, "small") == "GPU-a,NVIDIA,4864,14:;"
    assert _reservations(apiserver, "small") == [("GPU-a", "1g.5gb", 6, 1)]
    assert devices_of(apiserver, "medium") == "GPU-a,NVIDIA,9856,14:;"
    assert _reservations(apiserver, "medium") == [("GPU-a", "1g.10gb", 4, 2)]
    # Two 3g.20gb: slices 0-3 take one; the second finds 6272 MiB left (the memory check comes first).
    assert scheduler.filter("two", ["a100"])["FailedNodes"] == {
        "a100": "1/1 AllocatedCardsInsufficientRequest, 1/1 CardInsufficientMemory"}
    wait_for(lambda: usage_by_gpu(runtime).get("GPU-a") == (2, 4864 + 9856, 28), what="usage")
    info = _scrape(runtime, "hami_node_gpu_mig_instance_info")
    assert sorted((s["profile"], s["placement_start"], s["placement_size"]) for s in info) == [
        ("1g.10gb", "4", "2"), ("1g.5gb", "6", "1")]


def test_two_servers_racing_for_the_last_placement_never_both_win(apiserver: LocalCluster,
                                                                   make_runtime: RuntimeFactory) -> None:
    apiserver.load([_one_placement_node("a100"), gpu_pod("pod-a", gpu_limits(1, memory_mib=4000)),
                    gpu_pod("pod-b", gpu_limits(1, memory_mib=4000))])
    first, second = make_runtime(), make_runtime()
    one, two = Scheduler(first.app.test_client(), apiserver), Scheduler(second.app.test_client(), apiserver)
    # Both filters run before either bind: neither cache can know the other's choice.
    assert one.filter("pod-a", ["a100"])["NodeNames"] == ["a100"]
    assert two.filter("pod-b", ["a100"])["NodeNames"] == ["a100"]

    assert one.bind("pod-a", "a100")["Error"] == ""
    release_lock(first.kube, "pod-a", "a100")
    refused = two.bind("pod-b", "a100")["Error"]

    assert names.CARD_MIG_TOPOLOGY_INFEASIBLE in refused
    assert one.pod("pod-a")["spec"]["nodeName"] == "a100"
    assert two.pod("pod-b")["spec"].get("nodeName") is None
    assert names.POD_BIND_PHASE not in annotations_of(apiserver, "pods", "pod-b")  # refused before any write
    assert _reservations(apiserver, "pod-a") == [("a100-gpu0", "1g.5gb", 6, 1)]
    # The loser, filtered again, finds no placement on either server once the winner's booking is seen.
    for runtime, scheduler in ((first, one), (second, two)):
        wait_for(lambda rt=runtime: rt.cache.held_by(one.pod("pod-a")["metadata"]["uid"]) is not None, what="echo")
        runtime.sync.sync_now()
        assert scheduler.filter("pod-b", ["a100"])["FailedNodes"] == {"a100": "1/1 CardMigTopologyInfeasible"}


def _stream(seed: int, pods: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    memory = {"1g.5gb": 4000, "1g.10gb": 9000, "2g.10gb": 9900, "3g.20gb": 15000}
    return [gpu_pod(f"job-{index:02d}", gpu_limits(rng.choice([1, 1, 2]), memory_mib=memory[rng.choice(list(memory))]),
                    annotations=MIG) for index in range(pods)]


def test_two_servers_scheduling_mig_pods_never_overlap_placements(apiserver: LocalCluster,
                                                                  make_runtime: RuntimeFactory) -> None:
    nodes = ("node0", "node1")
    apiserver.load([_mig_node(node, f"{node}-gpu0", f"{node}-gpu1") for node in nodes] + _stream(seed=5, pods=30))
    servers = [make_runtime(), make_runtime()]
    stop = threading.Event()
    plugin = threading.Thread(target=_device_plugin, args=(servers[0], apiserver, stop), daemon=True)
    plugin.start()
    refusals: list[str] = []
    orders = [[f"job-{index:02d}" for index in range(30)] for _ in servers]
    random.Random(3).shuffle(orders[1])
    threads = [threading.Thread(target=_schedule_all, args=(Scheduler(server.app.test_client(), apiserver), order,
                                                              refusals), kwargs={"nodes": nodes})
               for server, order in zip(servers, orders, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    plugin.join(timeout=5)

    occupied: dict[str, list[tuple[int, int, str]]] = {}
    bound = 0
    for pod in apiserver.list("pods", "default"):
        usage = pod_usage(pod)
        if usage is None or not pod["spec"].get("nodeName"):
            continue
        bound += 1
        entries = [grant for container in usage.grants for grant in container]
        assert all(grant.placed is not None for grant in entries), pod["metadata"]["name"]
        for grant in entries:
            assert grant.placed is not None
            placement = grant.placed.placement
            occupied.setdefault(grant.uuid, []).append((placement.start, placement.end, pod["metadata"]["name"]))
    assert bound >= 8
    for uuid, ranges in occupied.items():
        ranges.sort()
        for (_, end, left), (start, _, right) in itertools.pairwise(ranges):
            assert end <= start, f"{uuid}: {left} and {right} overlap"
    assert all(any(expected in refusal for expected in (*EXPECTED_REFUSALS, "CardMig")) for refusal in refusals)


def test_a_deleted_pod_frees_its_placement(apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    apiserver.load([_one_placement_node("a100"), gpu_pod("first", gpu_limits(1, memory_mib=4000)),
                    gpu_pod("second", gpu_limits(1, memory_mib=4000))])
    runtime.sync.sync_now()
    assert scheduler.schedule("first", ["a100"]) == "a100"
    release_lock(runtime.kube, "first", "a100")
    assert scheduler.filter("second", ["a100"])["FailedNodes"] == {"a100": "1/1 CardMigTopologyInfeasible"}

    delete_pod(apiserver, "first")
    wait_for(lambda: not usage_by_gpu(runtime), what="the placement freed")
    assert scheduler.schedule("second", ["a100"]) == "a100"
    assert _reservations(apiserver, "second") == [("a100-gpu0", "1g.5gb", 6, 1)]


def test_a_restarted_server_rebuilds_occupancy_from_the_reservations(apiserver: LocalCluster,
                                                                     make_runtime: RuntimeFactory) -> None:
    apiserver.load([_mig_node("a100", "GPU-a"), gpu_pod("old", gpu_limits(1, memory_mib=15000)),
                    gpu_pod("new", gpu_limits(1, memory_mib=15000))])
    first = make_runtime()
    assert Scheduler(first.app.test_client(), apiserver).schedule("old", ["a100"]) == "a100"
    release_lock(first.kube, "old", "a100")
    second = make_runtime()
    assert Scheduler(second.app.test_client(), apiserver).schedule("new", ["a100"]) == "a100"
    assert [_reservations(apiserver, pod) for pod in ("old", "new")] == [[("GPU-a", "3g.20gb", 4, 4)],
                                                                       [("GPU-a", "3g.20gb", 0, 4)]]


def test_an_entry_without_a_reservation_fails_the_gpu_closed(apiserver: LocalCluster, runtime: Runtime,
                                                             scheduler: Scheduler,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    stray = gpu_pod("stray", gpu_limits(1, memory_mib=4000))
    stray["metadata"]["annotations"].update({names.POD_ASSIGNED_NODE: "a100",
                                             names.POD_DEVICES_ALLOCATED: "GPU-a,NVIDIA,4864,14:;"})
    stray["spec"]["nodeName"] = "a100"
    apiserver.load([_mig_node("a100", "GPU-a"), stray, gpu_pod("next", gpu_limits(1, memory_mib=4000))])
    # The watches bring both (a relist here would do too, but the deletion below must come by the watch).
    wait_for(lambda: (view := runtime.cache.node_views().get("a100")) is not None and view.partition_faults,
             what="the stray pod's booking")

    assert scheduler.filter("next", ["a100"])["FailedNodes"] == {"a100": "1/1 CardNotHealth"}
    assert any("a100: GPU GPU-a: device entry without a MIG reservation (pods default/stray)" in record.getMessage()
               for record in caplog.records if record.levelname == "ERROR")
    assert _scrape(runtime, "hami_web_mig_fail_closed") == [
        {"node": "a100", "device_uuid": "GPU-a", "reason": UNRESERVED_ENTRY, "pod": "default/stray"}]

    delete_pod(apiserver, "stray")
    wait_for(lambda: not runtime.cache.node_views()["a100"].partition_faults, what="the fault gone with its pod")
    assert scheduler.schedule("next", ["a100"]) == "a100"


def test_a_pre_2_10_geometry_node_is_refused_and_its_pods_counted(apiserver: LocalCluster, runtime: Runtime,
                                                                  scheduler: Scheduler) -> None:
    old = gpu_pod("old", gpu_limits(2, memory_mib=10240))
    old["metadata"]["annotations"].update({
        names.POD_ASSIGNED_NODE: "h100",
        names.POD_DEVICES_ALLOCATED: "GPU-3ef99f5d-0000[1-0],NVIDIA,10240,28:GPU-3ef99f5d-0000[1-1],NVIDIA,10240,28:;"})
    old["spec"]["nodeName"] = "h100"
    apiserver.load([gpu_node("h100", register="GPU-3ef99f5d-0000,10,95830,100,NVIDIA-NVIDIA H100 NVL,0,true,0,mig:"),
                    old, gpu_pod("new", gpu_limits(1, memory_mib=1000))])
    runtime.sync.sync_now()

    assert scheduler.filter("new", ["h100"])["FailedNodes"] == {"h100": "1/1 CardMigLegacyGeometry"}
    assert usage_by_gpu(runtime) == {"GPU-3ef99f5d-0000": (2, 20480, 56)}
    assert _scrape(runtime, "hami_web_mig_legacy_entries") == [{"node": "h100", "device_uuid": "GPU-3ef99f5d-0000"}]


def test_a_booking_without_instances_removes_stale_reservations(apiserver: LocalCluster, runtime: Runtime,
                                                                scheduler: Scheduler) -> None:
    again = gpu_pod("again", gpu_limits(1, memory_mib=1000))
    # What a failed bind on a MIG node left behind: a voided booking and its reservation.
    again["metadata"]["annotations"].update({
        names.POD_ASSIGNED_NODE: "a100", names.POD_DEVICES_ALLOCATED: "GPU-a,NVIDIA,4864,14:;",
        names.POD_BIND_PHASE: "failed",
        names.POD_MIG_RESERVATIONS: '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
                                    '"placement":{"start":6,"size":1}}]'})
    apiserver.load([gpu_node("plain", gpus("plain", 1)), again])
    runtime.sync.sync_now()

    assert scheduler.schedule("again", ["plain"]) == "plain"
    annotations = annotations_of(apiserver, "pods", "again")
    assert annotations[names.POD_DEVICES_ALLOCATED] == "plain-gpu0,NVIDIA,1000,0:;"
    assert names.POD_MIG_RESERVATIONS not in annotations
