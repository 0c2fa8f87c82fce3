"""Choosing one node among kube-scheduler's candidates (docs/scheduling-rules.md#the-filter-step-by-step, steps 3–5).

Covers: a placement names the node, the per-container grants (empty entries for containers without a GPU)
and the node's score; binpack / spread node choice with ties by name; candidates the cache does not know
(``node unregistered``) and nodes whose register annotation is broken (``InvalidRegisterAnnotation: <error>``,
with the decoder's own message); a reason for every candidate when nothing fits, including nodes skipped by
the cheap pre-check; duplicate candidates; nodes outside the candidate list are never chosen; a pod that
asks for no GPU; a pod no node takes, decided again, fitted again only on the nodes whose view changed (a family's
node-score terms in the ranking: tests/core/test_metax_ranking.py).
"""

from __future__ import annotations

import pytest

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import AnnotationError, decode_register
from hami_web.core.options import PodOptions
from hami_web.core.usage import DeviceUsage, NodeView

from .builders import ask, gpu, grant, inventory, pod, view

SMALL = pod(ask(memory_mib=1000, cores=10))


def _nodes() -> dict[str, NodeView]:
    """Three two-GPU nodes: ``busy`` (most used), ``idle`` and ``full`` (no task slot left)."""
    devices = [gpu(0, count=2), gpu(1, count=2)]
    return {
        "busy": view(inventory("busy", devices), {"GPU-0": DeviceUsage(1, 4000, 50)}),
        "idle": view(inventory("idle", devices)),
        "full": view(inventory("full", devices), {"GPU-0": DeviceUsage(2, 0, 0), "GPU-1": DeviceUsage(2, 0, 0)}),
    }


@pytest.mark.parametrize(("policy", "candidates", "node"), [
    pytest.param("binpack", ["idle", "busy", "full"], "busy", id="binpack-most-used-node-that-fits"),
    pytest.param("spread", ["busy", "full", "idle"], "idle", id="spread-least-used-node"),
    pytest.param("binpack", ["idle", "full"], "idle", id="only-fitting-candidate"),
    pytest.param("binpack", ["idle"], "idle", id="nodes-outside-candidates-never-chosen"),
])
def test_node_policy_choice(policy: str, candidates: list[str], node: str) -> None:
    placement = choose_node(SMALL, PodOptions(node_policy=policy), candidates, _nodes())
    assert isinstance(placement, Placement)
    assert placement.node == node
    assert placement.node_score == _nodes()[node].score


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_equal_nodes_tie_by_name(policy: str) -> None:
    nodes = {name: view(inventory(name, [gpu(0)])) for name in ("node-c", "node-a", "node-b")}
    placement = choose_node(SMALL, PodOptions(node_policy=policy), ["node-c", "node-b", "node-a"], nodes)
    assert isinstance(placement, Placement)
    assert placement.node == "node-a"


def test_placement_has_an_entry_per_container() -> None:
    request = pod(ask(0, name="init", init=True), ask(memory_mib=1000, cores=10, name="app"), ask(0, name="sidecar"))
    placement = choose_node(request, PodOptions(), ["idle"], _nodes())
    assert placement == Placement(node="idle", grants=((), (grant("GPU-0", 1000, 10),), ()), node_score=0.0)


def test_pod_asking_for_no_gpu_is_placed_with_empty_grants() -> None:
    placement = choose_node(pod(ask(0)), PodOptions(), ["full"], _nodes())
    assert placement == Placement(node="full", grants=((),), node_score=_nodes()["full"].score)


def _register_error(text: str) -> str:
    with pytest.raises(AnnotationError) as caught:
        decode_register(text)
    return str(caught.value)


def test_every_candidate_gets_a_reason_when_nothing_fits() -> None:
    broken_error = _register_error("GPU-x,10,46068,100,NVIDIA-NVIDIA A40,0,true")
    assert broken_error == "character 43: device entry does not end with ':'"
    nodes = _nodes() | {"sick": view(inventory("sick", [gpu(0, healthy=False), gpu(1)]))}
    candidates = ["full", "ghost", "broken", "busy", "sick"]
    result = choose_node(pod(ask(2, memory_mib=5000)), PodOptions(), candidates, nodes, {"broken": broken_error})
    assert isinstance(result, NoPlacement)
    assert result.reasons == {
        "full": "2/2 CardTimeSlicingExhausted",
        "ghost": "node unregistered",
        "broken": f"InvalidRegisterAnnotation: {broken_error}",
        "busy": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
        "sick": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth",
    }
    assert list(result.reasons) == candidates


def test_reasons_for_nodes_skipped_by_the_pre_check() -> None:
    """A node whose aggregates already rule the pod out still gets its exact per-GPU reason."""
    nodes = _nodes()
    result = choose_node(pod(ask(3)), PodOptions(), ["idle", "full"], nodes)
    assert result == NoPlacement(reasons={"idle": "3/2 NodeInsufficientDevice", "full": "3/2 NodeInsufficientDevice"})
    result = choose_node(pod(ask(1, memory_mib=9000)), PodOptions(), ["idle", "full"], nodes)
    assert result == NoPlacement(reasons={"idle": "2/2 CardInsufficientMemory",
                                          "full": "2/2 CardTimeSlicingExhausted"})
    result = choose_node(SMALL, PodOptions(use_types=("H100",)), ["idle"], nodes)
    assert result == NoPlacement(reasons={"idle": "2/2 CardTypeMismatch"})


def test_duplicate_candidates_are_considered_once() -> None:
    result = choose_node(SMALL, PodOptions(), ["ghost", "full", "ghost", "full"], _nodes())
    assert result == NoPlacement(reasons={"ghost": "node unregistered", "full": "2/2 CardTimeSlicingExhausted"})
    placement = choose_node(SMALL, PodOptions(node_policy="spread"), ["busy", "idle", "busy", "idle"], _nodes())
    assert isinstance(placement, Placement)
    assert placement.node == "idle"


def test_no_candidates_no_placement() -> None:
    assert choose_node(SMALL, PodOptions(), [], _nodes()) == NoPlacement(reasons={})


def test_pod_asking_for_no_gpu_follows_rank_order_despite_type_rules() -> None:
    """Type rules only matter for GPUs a pod asks for; found by test_properties (may_fit said no to such a pod)."""
    nodes = {"busy-t4": view(inventory("busy-t4", [gpu(0, type="NVIDIA-Tesla T4")]), {"GPU-0": DeviceUsage(1, 10, 10)}),
             "idle-a40": view(inventory("idle-a40", [gpu(0)]))}
    placement = choose_node(pod(ask(0)), PodOptions(use_types=("A40",)), ["idle-a40", "busy-t4"], nodes)
    assert isinstance(placement, Placement)
    assert placement.node == "busy-t4"


def test_a_pod_no_node_takes_decided_again_reads_back_only_the_unchanged_nodes() -> None:
    """`choose_node` remembers, for an ask that placed nothing, each node's reason with the view it was judged on:
    decided again, a node whose view is unchanged keeps its reason, one whose view changed is fitted again (and is
    chosen when it now fits), and the answer is the one a fresh decision gives."""
    full = {"GPU-0": DeviceUsage(10, 8000, 100), "GPU-1": DeviceUsage(10, 8000, 100)}
    nodes = {name: view(inventory(name, [gpu(0), gpu(1)]), full) for name in ("a", "b", "c")}
    request, options = pod(ask(1, memory_mib=1000)), PodOptions()
    first = choose_node(request, options, ["a", "b", "c"], nodes)
    assert first == NoPlacement(reasons=dict.fromkeys(["a", "b", "c"], "2/2 CardTimeSlicingExhausted"))
    again = choose_node(request, options, ["c", "b", "a"], nodes)
    assert again == NoPlacement(reasons={"c": "2/2 CardTimeSlicingExhausted", "b": "2/2 CardTimeSlicingExhausted",
                                         "a": "2/2 CardTimeSlicingExhausted"})
    assert list(again.reasons) == ["c", "b", "a"]  # in the candidates' order, as always

    nodes["b"] = view(nodes["b"].inventory, {"GPU-0": DeviceUsage(10, 8000, 100), "GPU-1": DeviceUsage(9, 4000, 50)})
    placed = choose_node(request, options, ["a", "b", "c"], nodes)
    assert isinstance(placed, Placement) and placed.node == "b"
    nodes["b"] = view(nodes["b"].inventory, {"GPU-0": DeviceUsage(10, 8000, 100), "GPU-1": DeviceUsage(9, 7500, 50)})
    assert choose_node(request, options, ["a", "b", "c"], nodes) == NoPlacement(reasons={
        "a": "2/2 CardTimeSlicingExhausted", "b": "1/2 CardInsufficientMemory, 1/2 CardTimeSlicingExhausted",
        "c": "2/2 CardTimeSlicingExhausted"})
