"""HAMi v2.10's GPU policy extensions: ``mutex``, comma-separated chains and per-pod scoring weights.

Covers: parsing of ``hami.io/gpu-scheduler-policy`` chains (trimmed, duplicates dropped, unknown keys named,
single values keep their message) and of ``hami.io/device-scoring-weights`` (all three keys, whole numbers
>= 0, not all zero, each mistake named); the order of GPUs for each chain on a five-GPU node, checked against
scores worked out by hand; ``mutex`` alone and in chains (only idle GPUs, ``ExclusiveDeviceAllocateConflict``
when too few are idle — the node's aggregates already rule such a node out —, the second container of a
mutex pod gets another GPU); ``numa-bind`` forcing NUMA first;
``topology-aware`` inside a chain as a filter whose GPUs the sort keys order; weights changing the GPU score
and the choice on a two-GPU node.
"""

from __future__ import annotations

import pytest

from hami_web.core import names
from hami_web.core.checks import device_score
from hami_web.core.fit import FitFailure, fit_container, fit_pod, may_fit
from hami_web.core.options import (
    OptionsError,
    ScoringWeights,
    parse_gpu_policy,
    parse_scoring_weights,
    pod_options,
    policy_warnings,
)
from hami_web.core.usage import DeviceUsage

from .builders import ask, gpu, inventory, pod, view

# -- parsing ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "normalised"), [
    pytest.param("mutex", "mutex", id="mutex-single"),
    pytest.param("numa", "numa", id="numa-single"),
    pytest.param(" binpack , numa ", "binpack,numa", id="chain-trimmed"),
    pytest.param("mutex,binpack,numa", "mutex,binpack,numa", id="three-keys"),
    pytest.param("numa,numa,spread,numa", "numa,spread", id="duplicates-dropped-first-kept"),
    pytest.param("binpack,binpack", "binpack", id="duplicate-single-is-the-single-value"),
    pytest.param("binpack,,numa,", "binpack,numa", id="empty-entries-ignored"),
])
def test_gpu_policy_chain_is_normalised(value: str, normalised: str) -> None:
    assert parse_gpu_policy(value) == normalised


@pytest.mark.parametrize(("value", "read", "message"), [
    # HAMi v2.10 gpuSortKeyChain / PolicyContains: unknown keys of a chain are dropped; none left sorts as spread.
    pytest.param("binpack,foo", "binpack", 'unknown hami.io/gpu-scheduler-policy key "foo" in "binpack,foo" '
                 "(expected a comma-separated list of binpack, spread, numa, mutex, topology-aware)",
                 id="unknown-key-named"),
    pytest.param("mutex, Binpack", "mutex", 'unknown hami.io/gpu-scheduler-policy key "Binpack" in "mutex, Binpack" '
                 "(expected a comma-separated list of binpack, spread, numa, mutex, topology-aware)",
                 id="keys-are-case-sensitive"),
    pytest.param(" , ", "spread", 'hami.io/gpu-scheduler-policy " , " names no policy '
                 "(expected a comma-separated list of binpack, spread, numa, mutex, topology-aware)",
                 id="only-commas"),
    # DeviceUsageList.Less: a single value it does not know sorts as spread.
    pytest.param("best", "spread",
                 'unknown hami.io/gpu-scheduler-policy "best" (expected binpack, spread or topology-aware)',
                 id="single-value-keeps-spec-message"),
])
def test_bad_gpu_policy_is_read_as_hami_reads_it_naming_the_key(value: str, read: str, message: str) -> None:
    options = pod_options({names.POD_GPU_POLICY: value}, node_policy="binpack", gpu_policy="spread")
    assert options.gpu_policy == read
    assert policy_warnings({names.POD_GPU_POLICY: value}) == [f'{message}: read as "{read}", as HAMi v2.10 reads it']


@pytest.mark.parametrize(("value", "weights"), [
    pytest.param("slot=1,core=1,memory=3", ScoringWeights(1, 1, 3), id="doc-example"),
    pytest.param(" memory = 2 , slot=0,core= 5 ", ScoringWeights(0, 5, 2), id="any-order-spaces-trimmed"),
    pytest.param("slot=0,core=0,memory=1", ScoringWeights(0, 0, 1), id="zeros-allowed-if-one-positive"),
])
def test_scoring_weights_parse(value: str, weights: ScoringWeights) -> None:
    assert parse_scoring_weights(value) == weights
    options = pod_options({names.POD_SCORING_WEIGHTS: value}, node_policy="binpack", gpu_policy="spread")
    assert options.scoring_weights == weights


@pytest.mark.parametrize(("key", "value", "type_name"), [
    (names.POD_GPU_POLICY, ["mutex"], "list"),
    (names.POD_SCORING_WEIGHTS, 3, "number"),
    (names.POD_NODE_POLICY, {"binpack": True}, "object"),
    (names.POD_NOUSE_GPU_UUID, 7, "number"),
    (names.POD_NUMA_BIND, True, "boolean"),
])
def test_a_non_string_annotation_is_an_options_error(key: str, value: object, type_name: str) -> None:
    with pytest.raises(OptionsError) as caught:
        pod_options({key: value}, node_policy="binpack", gpu_policy="spread")  # type: ignore[dict-item]
    assert str(caught.value) == f"{key} must be a string, got {type_name}"


def test_scoring_weights_default_to_one_each() -> None:
    assert pod_options({}, node_policy="binpack", gpu_policy="spread").scoring_weights == ScoringWeights(1, 1, 1)


KEY = names.POD_SCORING_WEIGHTS


@pytest.mark.parametrize(("value", "message"), [
    pytest.param("slot=1,core=1", f'{KEY} "slot=1,core=1": missing memory (expected slot=<n>,core=<n>,memory=<n>)',
                 id="missing-key"),
    pytest.param("slot=1,core=1,memory=1,gpu=2",
                 f'{KEY} "slot=1,core=1,memory=1,gpu=2": unknown key "gpu" (expected slot=<n>,core=<n>,memory=<n>)',
                 id="unknown-key"),
    pytest.param("slot=1,core=-1,memory=1", f'{KEY} "slot=1,core=-1,memory=1": core "-1" is not a whole number >= 0',
                 id="negative"),
    pytest.param("slot=1,core=1.5,memory=1", f'{KEY} "slot=1,core=1.5,memory=1": core "1.5" is not a whole number >= 0',
                 id="fraction"),
    pytest.param("slot=1,core=²,memory=1", f'{KEY} "slot=1,core=²,memory=1": core "²" is not a whole number >= 0',
                 id="unicode-digit"),
    pytest.param("slot=0,core=0,memory=0", f'{KEY} "slot=0,core=0,memory=0": the weights must not all be zero',
                 id="all-zero"),
    pytest.param("slot=1,slot=2,core=1,memory=1", f'{KEY} "slot=1,slot=2,core=1,memory=1": slot is given twice',
                 id="duplicate"),
    pytest.param("slot:1,core=1,memory=1",
                 f'{KEY} "slot:1,core=1,memory=1": entry "slot:1" is not key=value '
                 "(expected slot=<n>,core=<n>,memory=<n>)", id="not-key-value"),
    pytest.param("", f'{KEY} "": entry "" is not key=value (expected slot=<n>,core=<n>,memory=<n>)', id="empty"),
    # HAMi v2.10 ParseDeviceScoringWeights: strconv.ParseInt(…, 10, 64), so any int64 >= 0 is a weight.
    pytest.param("slot=9223372036854775808,core=1,memory=1",
                 f'{KEY} "slot=9223372036854775808,core=1,memory=1": slot is over 9223372036854775807 (a 64-bit '
                 "integer)", id="past-int64"),
    pytest.param("slot=" + "9" * 5000 + ",core=1,memory=1",
                 f'{KEY} "slot={"9" * 5000},core=1,memory=1": slot is over 9223372036854775807 (a 64-bit integer)',
                 id="thousands-of-digits"),
    pytest.param("slot=-1,core=1,memory=1", f'{KEY} "slot=-1,core=1,memory=1": slot "-1" is not a whole number >= 0',
                 id="negative"),
    pytest.param("slot=0001,core=00,memory=1000000", None, id="leading-zeros-and-the-maximum-are-fine"),
])
def test_bad_scoring_weights_are_refused_with_the_problem_named(value: str, message: str | None) -> None:
    if message is None:
        assert parse_scoring_weights(value) == ScoringWeights(1, 0, 1_000_000)
        return
    with pytest.raises(OptionsError) as caught:
        pod_options({KEY: value}, node_policy="binpack", gpu_policy="spread")
    assert str(caught.value) == message


# -- GPU order on a five-GPU node ------------------------------------------------------------------------------
#
# Every GPU: 10 slots, 8000 MiB (GPU-4: 16000 MiB), 100 cores. The ask: 1000 MiB and 10 cores per GPU.
# score = 10 × ((1+tasks)/10 + (10+cores)/100 + (1000+MiB)/mem):
#   GPU-0 numa 1, 2 tasks, 4000 MiB, 40 cores: 10 × (0.3 + 0.5 + 0.625)  = 14.25
#   GPU-1 numa 1, 1 task,  2000 MiB, 20 cores: 10 × (0.2 + 0.3 + 0.375)  =  8.75
#   GPU-2 numa 0, idle:                        10 × (0.1 + 0.1 + 0.125)  =  3.25
#   GPU-3 numa 0, 1 task,  2000 MiB, 20 cores:                              8.75
#   GPU-4 numa 1, idle, 16000 MiB:             10 × (0.1 + 0.1 + 0.0625) =  2.625

NODE = inventory("node", [gpu(0, numa=1), gpu(1, numa=1), gpu(2, numa=0), gpu(3, numa=0),
                          gpu(4, numa=1, memory_mib=16000)],
                 pair_scores={"GPU-0": {"GPU-1": 100, "GPU-2": 0}, "GPU-1": {"GPU-0": 100},
                              "GPU-2": {"GPU-3": 50}, "GPU-3": {"GPU-2": 50}})
USAGE = {"GPU-0": DeviceUsage(2, 4000, 40), "GPU-1": DeviceUsage(1, 2000, 20), "GPU-3": DeviceUsage(1, 2000, 20)}


def _picked(policy: str, count: int, *, numa_bind: bool = False) -> list[int]:
    annotations = {names.POD_GPU_POLICY: policy}
    if numa_bind:
        annotations[names.POD_NUMA_BIND] = "true"
    options = pod_options(annotations, node_policy="binpack", gpu_policy="spread")
    node_view = view(NODE, USAGE)
    result = fit_container(ask(count, memory_mib=1000, cores=10), NODE, list(node_view.usage_rows), options)
    assert not isinstance(result, FitFailure), result
    return [int(grant.uuid.removeprefix("GPU-")) for grant in result]


@pytest.mark.parametrize(("policy", "order"), [
    pytest.param("binpack", [0, 3, 1, 2, 4], id="spec-binpack-ties-by-numa"),
    pytest.param("spread", [4, 2, 3, 1, 0], id="spec-spread-ties-by-numa"),
    pytest.param("binpack,numa", [0, 3, 1, 2, 4], id="binpack-numa-equals-spec-binpack"),
    pytest.param("spread,numa", [4, 2, 3, 1, 0], id="spread-numa-equals-spec-spread"),
    pytest.param("binpack,spread", [0, 1, 3, 2, 4], id="first-key-dominates-then-index"),
    pytest.param("numa,binpack", [3, 2, 0, 1, 4], id="numa-first-then-most-used"),
    pytest.param("numa,spread", [2, 3, 4, 1, 0], id="numa-first-then-least-used"),
    pytest.param("numa", [2, 3, 0, 1, 4], id="numa-alone-then-index"),
    pytest.param("numa, numa ,binpack", [3, 2, 0, 1, 4], id="duplicates-dropped"),
])
def test_chain_orders_gpus_by_keys_in_written_order(policy: str, order: list[int]) -> None:
    assert _picked(policy, 5) == order


@pytest.mark.parametrize(("policy", "count", "numa_bind", "picked"), [
    pytest.param("mutex", 1, False, [4], id="mutex-idle-only-spread-order"),
    pytest.param("mutex,binpack", 1, False, [2], id="mutex-binpack-busiest-idle-gpu"),
    pytest.param("mutex,spread", 1, False, [4], id="mutex-spread"),
    pytest.param("mutex,numa", 1, False, [2], id="mutex-numa-lowest-numa-idle-gpu"),
    pytest.param("mutex,binpack,numa", 2, False, [2, 4], id="mutex-two-idle-gpus"),
    pytest.param("binpack", 2, True, [3, 2], id="numa-bind-forces-numa-first-binpack-inside"),
    pytest.param("spread,numa", 2, True, [2, 3], id="numa-bind-spread-inside"),
    pytest.param("topology-aware", 2, False, [1, 0], id="spec-topology-visit-order"),
    pytest.param("topology-aware,binpack", 2, False, [0, 1], id="topology-filters-binpack-orders"),
    pytest.param("topology-aware,spread", 2, False, [1, 0], id="topology-filters-spread-orders"),
    pytest.param("mutex,topology-aware", 2, False, [4, 2], id="mutex-topology-no-sort-key-spread"),
])
def test_filters_and_forced_numa(policy: str, count: int, numa_bind: bool, picked: list[int]) -> None:
    assert _picked(policy, count, numa_bind=numa_bind) == picked


def test_mutex_without_enough_idle_gpus_fails_with_exclusive_conflict() -> None:
    options = pod_options({names.POD_GPU_POLICY: "mutex,binpack"}, node_policy="binpack", gpu_policy="spread")
    result = fit_pod(pod(ask(3, memory_mib=1000, cores=10)), view(NODE, USAGE), options)
    assert isinstance(result, FitFailure)
    assert result.summary() == "2/5 AllocatedCardsInsufficientRequest, 3/5 ExclusiveDeviceAllocateConflict"


@pytest.mark.parametrize(("policy", "count", "may"), [
    pytest.param("mutex", 2, True, id="two-idle-gpus-for-two"),
    pytest.param("mutex,binpack", 3, False, id="three-wanted-two-idle"),
    pytest.param("binpack", 3, True, id="without-mutex-busy-gpus-count"),
])
def test_node_aggregates_rule_out_a_mutex_pod_without_enough_idle_gpus(policy: str, count: int, may: bool) -> None:
    options = pod_options({names.POD_GPU_POLICY: policy}, node_policy="binpack", gpu_policy="spread")
    node_view = view(NODE, USAGE)
    assert node_view.idle_devices == 2
    assert may_fit(pod(ask(count, memory_mib=1000, cores=10)), node_view, options) is may


def test_second_container_of_a_mutex_pod_gets_another_idle_gpu() -> None:
    options = pod_options({names.POD_GPU_POLICY: "mutex"}, node_policy="binpack", gpu_policy="spread")
    result = fit_pod(pod(ask(1, memory_mib=100, name="a"), ask(1, memory_mib=100, name="b"),
                         ask(1, memory_mib=100, name="c")), view(NODE, USAGE), options)
    assert isinstance(result, FitFailure)
    assert result.summary() == "5/5 ExclusiveDeviceAllocateConflict"
    two = fit_pod(pod(ask(1, memory_mib=100, name="a"), ask(1, memory_mib=100, name="b")), view(NODE, USAGE), options)
    assert not isinstance(two, FitFailure)
    assert [c[0].uuid for c in two.grants] == ["GPU-4", "GPU-2"]


def test_mutex_does_not_count_usage_of_the_same_pods_init_container() -> None:
    # An init container has finished before the containers start: its GPU is still idle for them.
    options = pod_options({names.POD_GPU_POLICY: "mutex,binpack"}, node_policy="binpack", gpu_policy="spread")
    result = fit_pod(pod(ask(1, memory_mib=100, name="init", init=True), ask(1, memory_mib=100, name="main")),
                     view(NODE, USAGE), options)
    assert not isinstance(result, FitFailure)
    assert [c[0].uuid for c in result.grants] == ["GPU-2", "GPU-2"]


# -- scoring weights on a two-GPU node -------------------------------------------------------------------------
#
# Both GPUs: 10 slots, 8000 MiB, 100 cores. The ask: 1 GPU, 1000 MiB, no cores.
#   W-0: 4 tasks, 1000 MiB, 10 cores → slot 5/10 = 0.5, core 10/100 = 0.1, memory 2000/8000 = 0.25
#   W-1: 1 task,  6000 MiB, 10 cores → slot 2/10 = 0.2, core 0.1,          memory 7000/8000 = 0.875

PAIR = inventory("pair", [gpu(0, uuid="W-0"), gpu(1, uuid="W-1")])
PAIR_USAGE = {"W-0": DeviceUsage(4, 1000, 10), "W-1": DeviceUsage(1, 6000, 10)}


@pytest.mark.parametrize(("weights", "score_w0", "score_w1"), [
    pytest.param(ScoringWeights(1, 1, 1), 8.5, 11.75, id="default-1-1-1"),
    pytest.param(ScoringWeights(1, 0, 0), 5.0, 2.0, id="slots-only"),
    pytest.param(ScoringWeights(0, 1, 3), 8.5, 27.25, id="memory-weighted"),
    pytest.param(ScoringWeights(2, 0, 1), 12.5, 12.75, id="two-slots-one-memory"),
])
def test_weighted_gpu_score(weights: ScoringWeights, score_w0: float, score_w1: float) -> None:
    node_view = view(PAIR, PAIR_USAGE)
    request = ask(1, memory_mib=1000)
    assert device_score(PAIR.devices[0], node_view.usage_rows[0], request, weights) == pytest.approx(score_w0)
    assert device_score(PAIR.devices[1], node_view.usage_rows[1], request, weights) == pytest.approx(score_w1)


@pytest.mark.parametrize(("policy", "weights", "picked"), [
    pytest.param("spread", None, "W-0", id="spread-default-weights-lower-score"),
    pytest.param("spread", "slot=1,core=0,memory=0", "W-1", id="spread-slots-only-flips-choice"),
    pytest.param("binpack", None, "W-1", id="binpack-default-weights"),
    pytest.param("binpack", "slot=1,core=0,memory=0", "W-0", id="binpack-slots-only-flips-choice"),
    pytest.param("binpack,numa", "slot=0,core=1,memory=3", "W-1", id="chain-uses-weights"),
])
def test_weights_change_which_gpu_is_tried_first(policy: str, weights: str | None, picked: str) -> None:
    annotations = {names.POD_GPU_POLICY: policy}
    if weights is not None:
        annotations[names.POD_SCORING_WEIGHTS] = weights
    options = pod_options(annotations, node_policy="binpack", gpu_policy="spread")
    result = fit_pod(pod(ask(1, memory_mib=1000)), view(PAIR, PAIR_USAGE), options)
    assert not isinstance(result, FitFailure)
    assert result.grants[0][0].uuid == picked
