"""The scheduler-policy user stories, end to end through ``/filter`` and ``/bind``.

Covers (docs/scheduling-rules.md#scores-and-policies): node binpack puts pod2 on pod1's node, node spread on the other
node; GPU binpack puts both 20 %-core / 20 %-memory pods on GPU1, GPU spread puts them on GPU1 then GPU2. Each story
runs through the HTTP routes against the in-process API server and checks what the device plugin would read: the pod
annotations (``hami.io/vgpu-node``, ``hami.io/vgpu-devices-allocated``/``-to-allocate``, the label), the Binding
(``spec.nodeName``), the bind phase and the node lock; and the FilteringSucceed/BindingSucceed events. Between pods the
device plugin is simulated (bind-phase success, node lock removed).
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    annotations_of,
    busy_nodes,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    reasons_for,
    release_lock,
    wait_for,
)


def _two_pods_on(apiserver: LocalCluster, kube: Kube, runtime: Runtime, node_names: list[str],
                 *, annotations: dict[str, str], limits: dict[str, str]) -> list[str]:
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    apiserver.load([gpu_pod("pod1", limits, annotations=annotations),
                    gpu_pod("pod2", limits, annotations=annotations)])
    chosen = []
    for pod in ("pod1", "pod2"):
        node = scheduler.schedule(pod, node_names)
        release_lock(kube, pod, node)
        # The next filter must see the node as its device plugin left it: under load the lock's removal may still be
        # on its way through the watch, and a node busy binding is tried last (binpack would then spread).
        wait_for(lambda: not busy_nodes(runtime.cache), timeout_seconds=10.0, what="the cache to see the lock gone")
        chosen.append(node)
    return chosen


@pytest.mark.parametrize(("policy", "expected"), [
    ("binpack", ["node1", "node1"]),
    ("spread", ["node1", "node2"]),
])
def test_node_policy_story(apiserver: LocalCluster, kube: Kube, make_runtime: RuntimeFactory, policy: str,
                           expected: list[str]) -> None:
    apiserver.load([gpu_node("node1"), gpu_node("node2")])
    runtime = make_runtime()
    chosen = _two_pods_on(apiserver, kube, runtime, ["node1", "node2"],
                          annotations={names.POD_NODE_POLICY: policy}, limits=gpu_limits(1))
    assert chosen == expected
    for pod, node in zip(("pod1", "pod2"), expected, strict=True):
        stored = apiserver.get("pods", pod, "default")
        assert stored is not None
        assert stored["spec"]["nodeName"] == node
        assert stored["metadata"]["annotations"][names.POD_ASSIGNED_NODE] == node


def test_node_policy_comes_from_the_flag_when_the_pod_does_not_say(apiserver: LocalCluster, kube: Kube,
                                                                  make_runtime: RuntimeFactory) -> None:
    apiserver.load([gpu_node("node1"), gpu_node("node2")])
    runtime = make_runtime(node_scheduler_policy="spread")
    assert _two_pods_on(apiserver, kube, runtime, ["node1", "node2"], annotations={},
                        limits=gpu_limits(1)) == ["node1", "node2"]


@pytest.mark.parametrize(("policy", "expected_gpus"), [
    ("binpack", ["node1-gpu0", "node1-gpu0"]),
    ("spread", ["node1-gpu0", "node1-gpu1"]),
])
def test_gpu_policy_story(apiserver: LocalCluster, kube: Kube, make_runtime: RuntimeFactory, policy: str,
                          expected_gpus: list[str]) -> None:
    apiserver.load([gpu_node("node1", gpus("node1", 4, memory_mib=8000))])
    runtime = make_runtime()
    chosen = _two_pods_on(apiserver, kube, runtime, ["node1"], annotations={names.POD_GPU_POLICY: policy},
                          limits=gpu_limits(1, memory_percent=20, cores=20))
    assert chosen == ["node1", "node1"]
    for pod, uuid in zip(("pod1", "pod2"), expected_gpus, strict=True):
        annotations = annotations_of(apiserver, "pods", pod, "default")
        # 20 % of an 8000 MiB card is 1600 MiB; cores 20.
        assert annotations[names.POD_DEVICES_ALLOCATED] == f"{uuid},NVIDIA,1600,20:;"
        assert annotations[names.POD_DEVICES_TO_ALLOCATE] == f"{uuid},NVIDIA,1600,20:;"
        assert annotations[names.POD_BIND_PHASE] == "success"  # set by the simulated device plugin


def test_a_placed_and_bound_pod_carries_everything_the_device_plugin_reads(scheduler: Scheduler,
                                                                          apiserver: LocalCluster,
                                                                          runtime: Runtime) -> None:
    apiserver.load([gpu_node("node1")])
    runtime.sync.sync_now()
    apiserver.load([gpu_pod("pod1", gpu_limits(1, memory_mib=3000, cores=30))])
    node = scheduler.schedule("pod1", ["node1"])

    pod = scheduler.pod("pod1")
    annotations = pod["metadata"]["annotations"]
    assert node == "node1" and pod["spec"]["nodeName"] == "node1"
    assert annotations[names.POD_ASSIGNED_NODE] == "node1"
    assert int(annotations[names.POD_ASSIGNED_TIME]) > 0
    assert annotations[names.POD_DEVICES_ALLOCATED] == "node1-gpu0,NVIDIA,3000,30:;"
    assert annotations[names.POD_BIND_PHASE] == "allocating"
    assert int(annotations[names.POD_BIND_TIME]) > 0
    lock = annotations_of(apiserver, "nodes", "node1")[names.NODE_LOCK]
    assert lock.endswith(",default,pod1") and lock[:20].endswith("Z")
    runtime.events.flush()
    assert reasons_for(apiserver, "pod1") == ["FilteringSucceed", "BindingSucceed"]
