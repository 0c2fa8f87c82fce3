"""Placement policies (docs/scheduling-rules.md#scores-and-policies) and the pod annotations that select them.

Covers: `pod_options` (pod annotations override the flags; numa-bind; use/nouse type and UUID lists with spaces and
empty entries; unknown policy values → `OptionsError` with the exact message); the type and UUID rules (``A40`` matches
``NVIDIA-NVIDIA A40``, exact UUIDs); node ranking (binpack / spread, ties by name); GPU order for binpack / spread with
ties by NUMA, index, UUID; numa-bind; topology-aware on the worked example's matrix (1 GPU → gpu1, 3 GPUs → gpu1, gpu2,
gpu3); and the four user stories of tests/integration/test_seed_stories.py as two-pod sequences.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node, rank_nodes
from hami_web.core.devices import Device
from hami_web.core.fit import fit_container
from hami_web.core.options import PodOptions, pod_options, policy_warnings
from hami_web.core.usage import DeviceUsage, NodeView

from .builders import ask, book, gpu, inventory, pod, view

A40_1 = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
A40_1_LOOKALIKE = "GPU-03f69c50-207a-2038-9b45-23cac89cb67e"


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param(None, PodOptions(node_policy="spread", gpu_policy="binpack"), id="flags-when-no-annotations"),
    pytest.param({names.POD_NODE_POLICY: "binpack", names.POD_GPU_POLICY: "topology-aware"},
                 PodOptions(node_policy="binpack", gpu_policy="topology-aware"), id="annotations-override-flags"),
    pytest.param({names.POD_GPU_POLICY: " spread "}, PodOptions(node_policy="spread", gpu_policy="spread"),
                 id="policy-value-trimmed"),
    pytest.param({names.POD_NUMA_BIND: "true"}, PodOptions("spread", "binpack", numa_bind=True), id="numa-bind-true"),
    # HAMi v2.10 assertNuma: Go's strconv.ParseBool, which trims nothing (" TRUE " is an error, so false).
    pytest.param({names.POD_NUMA_BIND: "TRUE"}, PodOptions("spread", "binpack", numa_bind=True), id="numa-bind-TRUE"),
    pytest.param({names.POD_NUMA_BIND: " TRUE "}, PodOptions("spread", "binpack"), id="numa-bind-spaces-not-trimmed"),
    pytest.param({names.POD_NUMA_BIND: "yes"}, PodOptions("spread", "binpack"), id="numa-bind-only-true-counts"),
    pytest.param({names.POD_USE_GPU_TYPE: " a40, ,A100 ,", names.POD_NOUSE_GPU_TYPE: "t4,,"},
                 PodOptions("spread", "binpack", use_types=("A40", "A100"), nouse_types=("T4",)),
                 id="type-lists-trimmed-upper-cased-empty-entries-ignored"),
    pytest.param({names.POD_USE_GPU_UUID: f"{A40_1}, ,{A40_1_LOOKALIKE}", names.POD_NOUSE_GPU_UUID: " GPU-x ,"},
                 PodOptions("spread", "binpack", use_uuids=frozenset({A40_1, A40_1_LOOKALIKE}),
                            nouse_uuids=frozenset({"GPU-x"})), id="uuid-lists-trimmed-empty-entries-ignored"),
])
def test_pod_options(annotations: Mapping[str, str] | None, expected: PodOptions) -> None:
    assert pod_options(annotations, node_policy="spread", gpu_policy="binpack") == expected


# HAMi v2.10: DeviceUsageList.Less sorts an unknown GPU policy as spread, NodeScoreList.Less an unknown node policy
# as binpack; the webhook warns (policy_warnings).
@pytest.mark.parametrize(("annotations", "read", "warning"), [
    pytest.param({names.POD_GPU_POLICY: "binpak"}, ("spread", "spread"),
                 'unknown hami.io/gpu-scheduler-policy "binpak" (expected binpack, spread or topology-aware): read '
                 'as "spread", as HAMi v2.10 reads it', id="gpu-policy-typo"),
    pytest.param({names.POD_GPU_POLICY: ""}, ("spread", "spread"),
                 'unknown hami.io/gpu-scheduler-policy "" (expected binpack, spread or topology-aware): read as '
                 '"spread", as HAMi v2.10 reads it', id="gpu-policy-empty"),
    pytest.param({names.POD_NODE_POLICY: "topology-aware"}, ("binpack", "binpack"),
                 'unknown hami.io/node-scheduler-policy "topology-aware" (expected binpack or spread): read as '
                 '"binpack", as HAMi v2.10 reads it', id="node-policy-gpu-only-value"),
])
def test_unknown_policy_is_read_as_hami_reads_it_with_a_warning(annotations: Mapping[str, str],
                                                                read: tuple[str, str], warning: str) -> None:
    options = pod_options(annotations, node_policy="spread", gpu_policy="binpack")
    policy = options.gpu_policy if names.POD_GPU_POLICY in annotations else options.node_policy
    assert policy == read[0]
    assert policy_warnings(annotations) == [warning]


@pytest.mark.parametrize(("use", "nouse", "card_type", "allowed"), [
    pytest.param("A40", "", "NVIDIA-NVIDIA A40", True, id="short-name-a40-matches"),
    pytest.param("NVIDIA-NVIDIA A40", "", "NVIDIA-NVIDIA A40", True, id="full-name-matches"),
    pytest.param("a40", "", "NVIDIA-NVIDIA A40", True, id="case-insensitive"),
    pytest.param("A100, A40", "", "NVIDIA-NVIDIA A40", True, id="any-entry-matches"),
    pytest.param("A100", "", "NVIDIA-NVIDIA A40", False, id="other-type-excluded"),
    pytest.param("", "A100", "NVIDIA-NVIDIA A40", True, id="nouse-other-type-allowed"),
    pytest.param("", "A40", "NVIDIA-NVIDIA A40", False, id="nouse-type-excluded"),
    pytest.param("A40", "NVIDIA", "NVIDIA-NVIDIA A40", False, id="nouse-wins-over-use"),
    pytest.param(" , ", ",", "NVIDIA-NVIDIA A40", True, id="only-empty-entries-ignored"),
    pytest.param("", "", "AMD-MI100", False, id="card-must-be-nvidia"),
])
def test_gpu_type_rules(use: str, nouse: str, card_type: str, allowed: bool) -> None:
    options = pod_options({names.POD_USE_GPU_TYPE: use, names.POD_NOUSE_GPU_TYPE: nouse},
                          node_policy="binpack", gpu_policy="spread")
    assert options.selection("NVIDIA").type_allowed(card_type) is allowed


@pytest.mark.parametrize(("use", "nouse", "uuid", "allowed"), [
    pytest.param(f"{A40_1},{A40_1_LOOKALIKE}", "", A40_1, True, id="listed-uuid-allowed"),
    pytest.param(A40_1_LOOKALIKE, "", A40_1, False, id="unlisted-uuid-excluded"),
    pytest.param(A40_1[:-1], "", A40_1, False, id="prefix-is-not-a-match"),
    pytest.param("", A40_1, A40_1, False, id="nouse-uuid-excluded"),
    pytest.param("", A40_1, A40_1_LOOKALIKE, True, id="nouse-other-uuid-allowed"),
    pytest.param(f" {A40_1} ", A40_1, A40_1, False, id="both-lists-apply"),
])
def test_gpu_uuid_rules(use: str, nouse: str, uuid: str, allowed: bool) -> None:
    options = pod_options({names.POD_USE_GPU_UUID: use, names.POD_NOUSE_GPU_UUID: nouse},
                          node_policy="binpack", gpu_policy="spread")
    assert options.selection("NVIDIA").uuid_allowed(uuid) is allowed


def _views_with_tasks(tasks_by_node: Mapping[str, int]) -> list[NodeView]:
    return [view(inventory(name, [gpu(0, count=4)]), {"GPU-0": DeviceUsage(tasks, 0, 0)})
            for name, tasks in tasks_by_node.items()]


@pytest.mark.parametrize(("policy", "tasks_by_node", "order"), [
    pytest.param("binpack", {"a": 1, "b": 3, "c": 2}, ["b", "c", "a"], id="binpack-fullest-first"),
    pytest.param("spread", {"a": 1, "b": 3, "c": 2}, ["a", "c", "b"], id="spread-emptiest-first"),
    pytest.param("binpack", {"c": 2, "b": 2, "a": 0}, ["b", "c", "a"], id="binpack-ties-by-name"),
    pytest.param("spread", {"c": 0, "b": 0, "a": 3}, ["b", "c", "a"], id="spread-ties-by-name"),
])
def test_rank_nodes(policy: str, tasks_by_node: Mapping[str, int], order: list[str]) -> None:
    assert [v.name for v in rank_nodes(_views_with_tasks(tasks_by_node), policy)] == order


def _picked(devices: list[Device], usage: Mapping[str, DeviceUsage], count: int, options: PodOptions,
            *, pair_scores: Mapping[str, Mapping[str, int]] | None = None, cordoned: tuple[str, ...] = ()) -> list[str]:
    node_view = view(inventory("n", devices, pair_scores=pair_scores, cordoned=cordoned), usage)
    work = [[u.tasks, u.memory_mib, u.cores] for u in node_view.usage]
    result = fit_container(ask(count, memory_mib=1000, cores=10), node_view.inventory, work, options)
    assert isinstance(result, tuple), result
    return [g.uuid for g in result]


BUSY = DeviceUsage(2, 4000, 40)
LIGHT = DeviceUsage(1, 1000, 10)


@pytest.mark.parametrize(("policy", "devices", "usage", "count", "picked"), [
    pytest.param("spread", [gpu(0), gpu(1), gpu(2)], {"GPU-0": BUSY, "GPU-1": LIGHT}, 3, ["GPU-2", "GPU-1", "GPU-0"],
                 id="spread-emptiest-first"),
    pytest.param("binpack", [gpu(0), gpu(1), gpu(2)], {"GPU-1": BUSY, "GPU-2": LIGHT}, 3, ["GPU-1", "GPU-2", "GPU-0"],
                 id="binpack-fullest-first"),
    pytest.param("spread", [gpu(0), gpu(1), gpu(2)], {"GPU-0": BUSY}, 2, ["GPU-1", "GPU-2"],
                 id="spread-two-gpus-in-pick-order"),
    pytest.param("spread", [gpu(0, numa=1), gpu(1, numa=0)], {}, 2, ["GPU-1", "GPU-0"], id="spread-ties-by-numa"),
    pytest.param("binpack", [gpu(0, numa=1), gpu(1, numa=0)], {}, 2, ["GPU-1", "GPU-0"], id="binpack-ties-by-numa"),
    pytest.param("spread", [gpu(3), gpu(1), gpu(2)], {}, 3, ["GPU-1", "GPU-2", "GPU-3"], id="spread-ties-by-index"),
    pytest.param("binpack", [gpu(3), gpu(1)], {}, 2, ["GPU-1", "GPU-3"], id="binpack-ties-by-index"),
    pytest.param("spread", [gpu(0, uuid="GPU-b"), gpu(0, uuid="GPU-a")], {}, 2, ["GPU-a", "GPU-b"],
                 id="spread-ties-by-uuid"),
    pytest.param("binpack", [gpu(0, uuid="GPU-b"), gpu(0, uuid="GPU-a")], {}, 1, ["GPU-a"], id="binpack-ties-by-uuid"),
    pytest.param("spread", [gpu(0, numa=1), gpu(1, numa=0)], {"GPU-1": LIGHT}, 1, ["GPU-0"],
                 id="score-before-numa"),
])
def test_gpu_policy_order(policy: str, devices: list[Device], usage: Mapping[str, DeviceUsage], count: int,
                          picked: list[str]) -> None:
    assert _picked(devices, usage, count, PodOptions(gpu_policy=policy)) == picked


NUMA_NODE = [gpu(0, numa=0), gpu(1, numa=0), gpu(2, numa=1), gpu(3, numa=1)]


@pytest.mark.parametrize(("policy", "numa_bind", "usage", "picked"), [
    pytest.param("spread", False, {"GPU-1": BUSY}, ["GPU-0", "GPU-2"], id="without-numa-bind-spread-crosses-numa"),
    pytest.param("spread", True, {"GPU-1": BUSY}, ["GPU-0", "GPU-1"], id="numa-bind-lowest-numa-group-first"),
    pytest.param("spread", True, {"GPU-1": DeviceUsage(10, 0, 0)}, ["GPU-2", "GPU-3"],
                 id="numa-bind-skips-group-too-small"),
    pytest.param("binpack", True, {"GPU-2": LIGHT, "GPU-3": BUSY, "GPU-0": DeviceUsage(10, 0, 0)},
                 ["GPU-3", "GPU-2"], id="numa-bind-policy-order-inside-group"),
])
def test_numa_bind(policy: str, numa_bind: bool, usage: Mapping[str, DeviceUsage], picked: list[str]) -> None:
    assert _picked(NUMA_NODE, usage, 2, PodOptions(gpu_policy=policy, numa_bind=numa_bind)) == picked


SEED_MATRIX = {
    "gpu0": {"gpu1": 100, "gpu2": 100, "gpu3": 200},
    "gpu1": {"gpu0": 100, "gpu2": 200, "gpu3": 100},
    "gpu2": {"gpu0": 100, "gpu1": 200, "gpu3": 200},
    "gpu3": {"gpu0": 200, "gpu1": 100, "gpu2": 200},
}
SEED_GPUS = [gpu(i, uuid=f"gpu{i}") for i in range(4)]


@pytest.mark.parametrize(("count", "pair_scores", "cordoned", "picked"), [
    pytest.param(1, SEED_MATRIX, (), {"gpu1"}, id="seed-one-gpu-weakest-links-gpu1"),
    pytest.param(3, SEED_MATRIX, (), {"gpu1", "gpu2", "gpu3"}, id="seed-three-gpus-best-combination"),
    pytest.param(2, SEED_MATRIX, (), {"gpu2", "gpu3"}, id="two-gpus-first-best-from-highest-index"),
    pytest.param(4, SEED_MATRIX, (), {"gpu0", "gpu1", "gpu2", "gpu3"}, id="all-candidates"),
    pytest.param(1, SEED_MATRIX, ("gpu1",), {"gpu2"}, id="one-gpu-links-count-only-candidates"),
    pytest.param(2, {}, (), {"gpu2", "gpu3"}, id="missing-pairs-score-zero"),
])
def test_topology_aware(count: int, pair_scores: Mapping[str, Mapping[str, int]], cordoned: tuple[str, ...],
                        picked: set[str]) -> None:
    options = PodOptions(gpu_policy="topology-aware")
    assert set(_picked(SEED_GPUS, {}, count, options, pair_scores=pair_scores, cordoned=cordoned)) == picked


def _place_two_pods(nodes: list[NodeView], annotations: Mapping[str, str], *, memory_percent: int = 100,
                    cores: int = 0) -> list[tuple[str, tuple[str, ...]]]:
    """Place two identical one-GPU pods in sequence, booking the first before the second, as the cache does."""
    options = pod_options(annotations, node_policy="binpack", gpu_policy="spread")
    request = pod(ask(1, memory_percent=memory_percent, cores=cores))
    by_name = {v.name: v for v in nodes}
    placed = []
    for _ in range(2):
        placement = choose_node(request, options, sorted(by_name), by_name)
        assert isinstance(placement, Placement), placement
        by_name[placement.node] = book(by_name[placement.node], placement.grants, init_count=0)
        placed.append((placement.node, tuple(g.uuid for g in placement.grants[0])))
    return placed


FOUR_GPUS = [gpu(i, uuid=f"GPU{i + 1}") for i in range(4)]


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({names.POD_NODE_POLICY: "binpack"}, ["node1", "node1"], id="story-1-node-binpack-same-node"),
    pytest.param({names.POD_NODE_POLICY: "spread"}, ["node1", "node2"], id="story-2-node-spread-other-node"),
])
def test_seed_node_policy_stories(annotations: Mapping[str, str], expected: list[str]) -> None:
    nodes = [view(inventory("node1", FOUR_GPUS)), view(inventory("node2", FOUR_GPUS))]
    assert [node for node, _ in _place_two_pods(nodes, annotations, memory_percent=20, cores=20)] == expected


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({names.POD_GPU_POLICY: "binpack"}, [("node1", ("GPU1",)), ("node1", ("GPU1",))],
                 id="story-3-gpu-binpack-same-gpu"),
    pytest.param({names.POD_GPU_POLICY: "spread"}, [("node1", ("GPU1",)), ("node1", ("GPU2",))],
                 id="story-4-gpu-spread-other-gpu"),
    pytest.param({}, [("node1", ("GPU1",)), ("node1", ("GPU2",))], id="flag-default-spread-when-no-annotation"),
])
def test_seed_gpu_policy_stories(annotations: Mapping[str, str], expected: list[tuple[str, tuple[str, ...]]]) -> None:
    nodes = [view(inventory("node1", FOUR_GPUS))]
    assert _place_two_pods(nodes, annotations, memory_percent=20, cores=20) == expected


def test_gpu_policy_annotation_overrides_flag() -> None:
    options = pod_options({names.POD_GPU_POLICY: "binpack"}, node_policy="binpack", gpu_policy="spread")
    node_view = view(inventory("node1", FOUR_GPUS), {"GPU3": LIGHT})
    placement = choose_node(pod(ask(1, memory_percent=20, cores=20)), options, ["node1"], {"node1": node_view})
    assert not isinstance(placement, NoPlacement)
    assert placement.grants[0][0].uuid == "GPU3"
