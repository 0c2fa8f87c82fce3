"""``explain``'s preemption line (docs/preemption.md): the filter's own decision on the tool's snapshot.

Covers: "would preempt a on node n" for a high-priority pod whose GPU lower-priority pods fill (the minimal victim,
the lowest priority); "waiting for 1 preempted pod on n" for a pod nominated there while its victim terminates;
``preemptionPolicy: Never``; preemption off on the server; no lower-priority pod to free anything.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.devices import Device, NodeInventory
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import PodOptions
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import build_node_view, pod_booking, sum_bookings
from hami_web.ops.preemptnote import preemption_note
from hami_web.ops.snapshot import ClusterSnapshot
from hami_web.state.pods import PodUsage

OPTIONS = PodOptions()
ASK = PodRequest(containers=(ContainerRequest(name="main", init=False, count=1, memory_mib=4000),))


def holding(name: str, priority: int, *, terminating: bool = False) -> PodUsage:
    grants = ((DeviceGrant(uuid="GPU-0", memory_mib=4000, cores=0),),)
    return PodUsage(uid=f"uid-{name}", namespace="batch", name=name, node="n1", grants=grants,
                    booking=pod_booking(grants, init_count=0), devices_text="", priority=priority,
                    terminating=terminating)


def snapshot(*usages: PodUsage) -> ClusterSnapshot:
    inventory = NodeInventory(name="n1", devices=(Device(uuid="GPU-0", index=0, count=10, memory_mib=8000, cores=100,
                                                         type="NVIDIA-NVIDIA A40"),))
    view = build_node_view(inventory, sum_bookings(usage.booking for usage in usages))
    return ClusterSnapshot(views={"n1": view}, usages=list(usages))


def pod(priority: int, **extra: Any) -> dict[str, Any]:
    status = {"nominatedNodeName": extra.pop("nominated")} if "nominated" in extra else {}
    return {"metadata": {"name": "urgent", "namespace": "prod", "uid": "uid-urgent"},
            "spec": {"priority": priority, **extra}, "status": status}


@pytest.mark.parametrize(("the_pod", "usages", "enabled", "note"), [
    pytest.param(pod(100), (holding("a", 1), holding("b", 2)), True,
                 "would preempt batch/a on node n1 (PodDisruptionBudgets not read by this tool)", id="would-preempt"),
    pytest.param(pod(100, nominated="n1"), (holding("a", 1, terminating=True), holding("b", 2)), True,
                 "waiting for 1 preempted pod on n1 (batch/a)", id="waiting"),
    pytest.param(pod(100, preemptionPolicy="Never"), (holding("a", 1), holding("b", 2)), True,
                 "preemptionPolicy: Never: the pod waits for room and preempts nobody", id="never"),
    pytest.param(pod(100), (holding("a", 1), holding("b", 2)), False,
                 "device-aware preemption is off on the server (its published settings say --preemption=off)",
                 id="off"),
    pytest.param(pod(1), (holding("a", 1), holding("b", 2)), True,
                 "no preemption would help (priority 1): no node where pods of lower priority free enough",
                 id="nobody-lower"),
])
def test_preemption_note(the_pod: dict[str, Any], usages: tuple[PodUsage, ...], enabled: bool, note: str) -> None:
    assert preemption_note(the_pod, ASK, OPTIONS, ["n1"], snapshot(*usages), enabled=enabled) == note
