"""Planning a batch of pod changes outside the cache lock (docs/wire-formats.md#pod-device-annotation;
`hami_web.state.planning`).

Covers, one change at a time: which observation wins over a filter-time assumption (a watch event that shows
the same devices confirms it; one that shows none or other devices leaves it standing unless the pod finished
or is bound; a list keeps it only within the grace period, and not at all when the pod is absent; an expiry falls
back to what the API last showed); deletion and unreadable annotations release the pod; the node totals and
views the batch would swap in; a list's changes grouped by node in chunks.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.usage import DeviceUsage
from hami_web.state.nodes import NodeState
from hami_web.state.planning import ASSUMPTION_GRACE_SECONDS, CHUNK_SIZE, Held, PodChange, chunks_by_node, plan_pods
from hami_web.state.pods import PodRecord, pod_record

NOW = 1_000_000.0
GPU_CONTAINER = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}  # a booking must be asked for
NODE = NodeState(name="n1", inventory=NodeInventory(name="n1", devices=(
    Device(uuid="g0", index=0, count=10, memory_mib=8000, cores=100, type="NVIDIA-A40"),
    Device(uuid="g1", index=1, count=10, memory_mib=8000, cores=100, type="NVIDIA-A40"))))


def record(devices: str | None, *, phase: str = "Running", node: str = "") -> PodRecord:
    """What a list item or watch event says about pod ``p``: ``devices`` on ``n1``, or no annotations."""
    annotations: dict[str, Any] = {}
    if devices is not None:
        annotations = {names.POD_ASSIGNED_NODE: "n1", names.POD_DEVICES_ALLOCATED: devices}
    spec: dict[str, Any] = {"containers": [GPU_CONTAINER], **({"nodeName": node} if node else {})}
    return pod_record({"metadata": {"uid": "p", "namespace": "ns", "name": "p", "annotations": annotations},
                       "spec": spec, "status": {"phase": phase}})


API_G0 = record("g0,NVIDIA,1000,10:;")
API_G1 = record("g1,NVIDIA,2000,20:;")
NOTHING = record(None)


def held(devices: PodRecord, *, assumed_at: float | None = None) -> Held:
    assert devices.usage is not None
    return Held(usage=devices.usage, assumed_at=assumed_at)


RECENT = NOW - 1
OLD = NOW - ASSUMPTION_GRACE_SECONDS - 1


@pytest.mark.parametrize(("change", "before", "listed_at", "after"), [
    # watch events
    (PodChange("p", "event", API_G0), None, None, "g0"),
    (PodChange("p", "event", NOTHING), held(API_G0), None, None),
    (PodChange("p", "event", NOTHING), held(API_G0, assumed_at=RECENT), None, "g0 assumed"),
    (PodChange("p", "event", record(None, phase="Succeeded")), held(API_G0, assumed_at=RECENT), None, None),
    (PodChange("p", "event", API_G1), held(API_G0, assumed_at=RECENT), None, "g0 assumed"),
    # bound by another scheduler with other devices (or none): ours can never follow, the API's booking is final
    (PodChange("p", "event", record("g1,NVIDIA,2000,20:;", node="n1")), held(API_G0, assumed_at=RECENT), None, "g1"),
    (PodChange("p", "event", record(None, node="n1")), held(API_G0, assumed_at=RECENT), None, None),
    (PodChange("p", "event", API_G0), held(API_G0, assumed_at=RECENT), None, "g0"),
    (PodChange("p", "event", API_G1), held(API_G0), None, "g1"),
    (PodChange("p", "deleted", API_G0), held(API_G0, assumed_at=RECENT), None, None),
    (PodChange("p", "event", record("g0,NVIDIA,lots,0:;")), held(API_G0), None, None),
    # a full list: absent, or showing other devices
    (PodChange("p", "listed"), held(API_G0, assumed_at=RECENT), NOW, "g0 assumed"),
    (PodChange("p", "listed"), held(API_G0, assumed_at=OLD), NOW, None),
    (PodChange("p", "listed", absent=True), held(API_G0, assumed_at=RECENT), NOW, None),  # deleted, not unpatched
    (PodChange("p", "listed", absent=True), held(API_G0, assumed_at=NOW + 1), NOW, "g0 assumed"),  # placed after
    (PodChange("p", "listed"), held(API_G0), NOW, None),
    (PodChange("p", "listed", API_G1), held(API_G0, assumed_at=RECENT), NOW, "g0 assumed"),
    (PodChange("p", "listed", API_G1), held(API_G0, assumed_at=OLD), NOW, "g1"),
    # the resync's expiry of an assumption
    (PodChange("p", "expire"), Held(usage=API_G0.usage, assumed_at=OLD, api_usage=API_G1.usage), None, "g1"),
    (PodChange("p", "expire"), held(API_G0, assumed_at=OLD), None, None),
    (PodChange("p", "expire"), held(API_G1), None, "g1"),
])
def test_what_a_pod_holds_after_one_change(change: PodChange, before: Held | None, listed_at: float | None,
                                            after: str | None) -> None:
    plan = plan_pods([change], {"p": before}, {"n1": (NODE, None)}, listed_at=listed_at)
    result = plan.held_after.get("p", before)
    if after is None:
        assert result is None
    else:
        assert result is not None
        gpu, _, assumed = after.partition(" ")
        assert set(result.usage.booking) == {gpu}
        assert (result.assumed_at is not None) == bool(assumed)


def test_an_unreadable_annotation_is_reported_with_the_pod() -> None:
    plan = plan_pods([PodChange("p", "event", record("g0,NVIDIA,lots,0:;"))], {"p": held(API_G0)},
                     {"n1": (NODE, None)}, listed_at=None)
    assert plan.errors["p"].startswith("pod ns/p: ")


def test_a_plan_carries_the_new_node_totals_and_view() -> None:
    before = {"g0": DeviceUsage(1, 1000, 10), "g1": DeviceUsage(1, 500, 0)}
    plan = plan_pods([PodChange("p", "event", API_G1)], {"p": held(API_G0)}, {"n1": (NODE, before)},
                     listed_at=None)
    assert plan.totals_after["n1"] == {"g1": DeviceUsage(2, 2500, 20)}
    view = plan.views_after["n1"]
    assert view is not None and list(view.usage) == [DeviceUsage(), DeviceUsage(2, 2500, 20)]


def test_a_status_update_of_a_running_pod_changes_nothing() -> None:
    current = held(API_G0)
    plan = plan_pods([PodChange("p", "event", API_G0)], {"p": current}, {"n1": (NODE, None)}, listed_at=None)
    assert plan.held_after == {} and plan.views_after == {}


def test_a_lists_changes_are_chunked_with_each_nodes_pods_together() -> None:
    changes = []
    for i in range(3 * CHUNK_SIZE):  # in name order, which interleaves the nodes
        node = f"n{i % 7}"
        usage_record = pod_record({"metadata": {"uid": f"u{i}", "namespace": "ns", "name": f"p{i}", "annotations": {
            names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: f"{node}-g0,NVIDIA,10,0:;"}},
            "spec": {"containers": [GPU_CONTAINER]}})
        changes.append(PodChange(f"u{i}", "listed", usage_record))

    chunks = list(chunks_by_node(changes, {}))

    assert sorted(change.uid for chunk in chunks for change in chunk) == sorted(c.uid for c in changes)
    nodes_per_chunk = [{change.record.usage.node for change in chunk if change.record and change.record.usage}
                       for chunk in chunks]
    for first, second in itertools.pairwise(nodes_per_chunk):
        assert not first & second  # no node's view is rebuilt by two chunks
