"""HAMi v2.10's pod annotations through ``/filter`` and ``/bind`` (HTTP routes, in-process API server).

Covers: ``mutex`` pods scheduled one after another onto a node with shared pods never land on a GPU that
already has a task, and the next one is refused with ``ExclusiveDeviceAllocateConflict`` once no GPU is idle;
chains (``numa,spread``, ``spread,numa``, ``binpack,numa``) reach the decision; a malformed chain or
``hami.io/device-scoring-weights`` refuses the pod with ``Error`` naming the problem and a FilteringFailed event,
booking nothing.
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    A40,
    Scheduler,
    devices_of,
    events_for,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    release_lock,
    usage_by_gpu,
)

SMALL = gpu_limits(1, memory_mib=1000, cores=10)


def _run(scheduler: Scheduler, runtime: Runtime, name: str) -> None:
    """Filter and bind ``name`` onto node1, then play the device plugin, which releases the node lock."""
    scheduler.schedule(name, ["node1"])
    release_lock(runtime.kube, name, "node1")


def test_mutex_pods_never_land_on_a_used_gpu(apiserver: LocalCluster, runtime: Runtime,
                                              scheduler: Scheduler) -> None:
    mutex = {names.POD_GPU_POLICY: "mutex,binpack"}
    apiserver.load([gpu_node("node1", gpus("node1", 4)), gpu_pod("shared1", SMALL), gpu_pod("shared2", SMALL),
                    *[gpu_pod(f"solo{i}", SMALL, annotations=mutex) for i in range(3)]])
    runtime.sync.sync_now()
    _run(scheduler, runtime, "shared1")
    _run(scheduler, runtime, "shared2")  # spread: the shared pods sit on two different GPUs
    used_before = set(usage_by_gpu(runtime))
    assert len(used_before) == 2

    _run(scheduler, runtime, "solo0")
    _run(scheduler, runtime, "solo1")
    refused = scheduler.filter("solo2", ["node1"])

    solo_gpus = {devices_of(apiserver, f"solo{i}").split(",")[0] for i in range(2)}
    assert solo_gpus.isdisjoint(used_before) and len(solo_gpus) == 2
    assert refused["NodeNames"] == []
    assert refused["FailedNodes"] == {"node1": "4/4 ExclusiveDeviceAllocateConflict"}


def test_policy_chains_reach_the_decision(apiserver: LocalCluster, runtime: Runtime,
                                          scheduler: Scheduler) -> None:
    # gpu0 sits on NUMA node 1, gpu1 on NUMA node 0; each pod asks for 1000 MiB and 10 % of one GPU.
    devices = [Device(uuid="node1-gpu0", index=0, count=10, memory_mib=8000, cores=100, type=A40, numa=1),
               Device(uuid="node1-gpu1", index=1, count=10, memory_mib=8000, cores=100, type=A40, numa=0)]
    chains = (("first", "numa,spread", "node1-gpu1"),    # NUMA 0 first, although both are idle
              ("spreading", "spread,numa", "node1-gpu0"),  # the idle GPU
              ("local", "numa,spread", "node1-gpu1"),     # NUMA first beats the emptier gpu0 (1 task each now)
              ("packed", "binpack,numa", "node1-gpu1"))   # the fuller GPU (2 tasks against 1)
    apiserver.load([gpu_node("node1", devices),
                    *[gpu_pod(name, SMALL, annotations={names.POD_GPU_POLICY: chain}) for name, chain, _ in chains]])
    runtime.sync.sync_now()
    for name, _, gpu in chains:
        _run(scheduler, runtime, name)
        assert devices_of(apiserver, name).startswith(f"{gpu},"), name


@pytest.mark.parametrize(("key", "value", "message"), [
    pytest.param(names.POD_SCORING_WEIGHTS, "slot=1,core=1",
                 'hami.io/device-scoring-weights "slot=1,core=1": missing memory '
                 "(expected slot=<n>,core=<n>,memory=<n>)", id="weights-missing-key"),
    pytest.param(names.POD_SCORING_WEIGHTS, "slot=0,core=0,memory=0",
                 'hami.io/device-scoring-weights "slot=0,core=0,memory=0": the weights must not all be zero',
                 id="weights-all-zero"),
])
def test_a_malformed_annotation_refuses_the_pod_naming_the_problem(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler, key: str, value: str, message: str) -> None:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1", SMALL, annotations={key: value})])
    runtime.sync.sync_now()

    answer = scheduler.filter("pod1", ["node1"])

    assert answer["Error"] == message
    assert usage_by_gpu(runtime) == {}
    runtime.events.flush()
    [event] = events_for(apiserver, "pod1")
    assert (event["reason"], event["message"]) == ("FilteringFailed", message)
