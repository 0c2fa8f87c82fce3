"""Reading and grouping per-node filter reasons by cause (the FilteringFailed event, metrics, ``explain``).

Covers: the causes in one node's reason with the GPUs each counts (node-level causes and
``NodeInsufficientDevice`` count none); unreadable text is ``Other``; grouping counts a node under each of
its causes, most nodes first, then most GPUs, then by name, with the first few nodes by name as examples;
the causes key ignores counts, so a refusal that only changes its numbers keeps its key.
"""

from __future__ import annotations

import pytest

from hami_web.core.reasons import ReasonGroup, causes_key, group_reasons, reason_causes


@pytest.mark.parametrize(("reason", "causes"), [
    pytest.param("2/2 CardTypeMismatch", (("CardTypeMismatch", 2),), id="one-cause"),
    pytest.param("1/4 AllocatedCardsInsufficientRequest, 3/4 CardInsufficientMemory",
                 (("AllocatedCardsInsufficientRequest", 1), ("CardInsufficientMemory", 3)), id="two-causes"),
    pytest.param("8/4 NodeInsufficientDevice", (("NodeInsufficientDevice", 0),), id="asked-count-is-not-gpus"),
    pytest.param("node unregistered", (("NodeUnregistered", 0),), id="unknown-node"),
    pytest.param("InvalidRegisterAnnotation: device 0: devmem 'x' is not an integer",
                 (("InvalidRegisterAnnotation", 0),), id="broken-register"),
    pytest.param("something else", (("Other", 0),), id="unreadable"),
    pytest.param("DCU: 1/2 CardInsufficientCore, 1/2 CardNotHealth",
                 (("CardInsufficientCore", 1), ("CardNotHealth", 1)), id="family-named"),
    pytest.param("MR-V100: 2/0 NodeInsufficientDevice", (("NodeInsufficientDevice", 0),), id="family-not-on-node"),
    pytest.param("DCU: InvalidRegisterAnnotation: hami.io/node-dcu-register: device 0: empty UUID",
                 (("InvalidRegisterAnnotation", 0),), id="family-register-broken"),
])
def test_reason_causes_reads_each_cause_and_its_gpus(reason: str, causes: tuple[tuple[str, int], ...]) -> None:
    assert reason_causes(reason) == causes


def test_grouping_counts_a_node_under_each_cause_most_nodes_then_gpus_first() -> None:
    reasons = {
        "n4": "4/4 CardInsufficientMemory",
        "n1": "1/4 AllocatedCardsInsufficientRequest, 3/4 CardInsufficientMemory",
        "n3": "4/4 CardInsufficientMemory",
        "n2": "4/4 CardInsufficientMemory",
        "t4": "2/2 CardTypeMismatch",
        "cpu": "node unregistered",
    }
    assert group_reasons(reasons, examples=3) == (
        ReasonGroup(cause="CardInsufficientMemory", nodes=4, gpus=15, examples=("n1", "n2", "n3")),
        ReasonGroup(cause="CardTypeMismatch", nodes=1, gpus=2, examples=("t4",)),
        ReasonGroup(cause="AllocatedCardsInsufficientRequest", nodes=1, gpus=1, examples=("n1",)),
        ReasonGroup(cause="NodeUnregistered", nodes=1, gpus=0, examples=("cpu",)),
    )


def test_no_reasons_make_no_groups() -> None:
    assert group_reasons({}) == ()


def test_the_causes_key_ignores_counts_but_not_causes() -> None:
    before = {"a": "3/4 CardInsufficientMemory", "b": "node unregistered"}
    fewer = {"a": "1/4 CardInsufficientMemory", "b": "node unregistered"}
    other = {"a": "3/4 CardInsufficientCore", "b": "node unregistered"}
    assert causes_key(before) == causes_key(fewer) == "CardInsufficientMemory,NodeUnregistered"
    assert causes_key(other) != causes_key(before)
