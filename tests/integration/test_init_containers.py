"""Pods with init containers through ``/filter`` and ``/bind`` (docs/scheduling-rules.md#init-containers,
docs/wire-formats.md#pod-device-annotation).

Covers: one annotation entry per container, init containers first, an empty entry for a container without
a GPU; the booking on a GPU is ``max(init peak, container sum)`` of memory and cores and ``max(1, containers
using it)`` tasks, as the cache holds it and as a new cache reads it back from the API; once the pod's
``Initialized`` condition is True only the containers count; an init container larger than what the regular
containers need still has to fit.
"""

from __future__ import annotations

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    container,
    devices_of,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    patch_pod_status,
    usage_by_gpu,
    wait_for,
)


def test_init_and_regular_containers_get_one_entry_each(apiserver: LocalCluster, runtime: Runtime,
                                                        scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1)), gpu_pod(
        "pod1", init_containers=[container("setup", gpu_limits(1, memory_mib=4000, cores=50))],
        containers=[container("main", gpu_limits(1, memory_mib=1000, cores=10))])])
    runtime.sync.sync_now()

    assert scheduler.schedule("pod1", ["node1"]) == "node1"

    assert devices_of(apiserver, "pod1") == "node1-gpu0,NVIDIA,4000,50:;node1-gpu0,NVIDIA,1000,10:;"
    assert usage_by_gpu(runtime) == {"node1-gpu0": (1, 4000, 50)}


def test_booking_is_the_larger_of_init_peak_and_container_sum(apiserver: LocalCluster,
                                                              make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 1)), gpu_pod(
        "pod1",
        init_containers=[container("small-init", gpu_limits(1, memory_mib=2000, cores=60)),
                         container("no-gpu-init")],
        containers=[container("a", gpu_limits(1, memory_mib=3000, cores=10)), container("sidecar"),
                    container("b", gpu_limits(1, memory_mib=3000, cores=20))])])
    runtime = make_runtime()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    assert scheduler.schedule("pod1", ["node1"]) == "node1"

    assert devices_of(apiserver, "pod1") == ("node1-gpu0,NVIDIA,2000,60:;;node1-gpu0,NVIDIA,3000,10:;;"
                                             "node1-gpu0,NVIDIA,3000,20:;")
    # memory: max(2000, 3000+3000); cores: max(60, 10+20); tasks: max(1, 2).
    assert usage_by_gpu(runtime) == {"node1-gpu0": (2, 6000, 60)}
    assert usage_by_gpu(make_runtime()) == {"node1-gpu0": (2, 6000, 60)}

    patch_pod_status(apiserver, "pod1", {"phase": "Running", "conditions": [
        {"type": "Initialized", "status": "True"}]})
    wait_for(lambda: usage_by_gpu(runtime) == {"node1-gpu0": (2, 6000, 30)},
             what="finished init containers to stop counting")


def test_a_large_init_container_must_fit_on_its_own(apiserver: LocalCluster, runtime: Runtime,
                                                    scheduler: Scheduler) -> None:
    apiserver.load([
        gpu_node("node1", gpus("node1", 1)),
        gpu_pod("running", gpu_limits(1, memory_mib=5000), annotations={
            names.POD_ASSIGNED_NODE: "node1", names.POD_DEVICES_ALLOCATED: "node1-gpu0,NVIDIA,5000,0:;"}),
        gpu_pod("pod1", init_containers=[container("setup", gpu_limits(1, memory_mib=4000))],
                containers=[container("main", gpu_limits(1, memory_mib=1000))])])
    runtime.sync.sync_now()

    answer = scheduler.filter("pod1", ["node1"])

    assert answer["FailedNodes"] == {"node1": "1/1 CardInsufficientMemory"}
