"""The bounded memory the dashboard reads (`DecisionLog`) and the chart geometry (`dashboard.charts`).

Covers: the decision ring keeps the newest and forgets the oldest; a refusal keeps its first time and counts
attempts; the refusals are bounded (oldest refused forgotten first) and forgotten when stale or placed; the
histogram puts every value in one bin (a whole free GPU in the last); the latency chart keeps points in its
window only.
"""

from __future__ import annotations

import pytest

from hami_web.dashboard import charts
from hami_web.state.decisions import Decision, DecisionLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _decision(number: int) -> Decision:
    return Decision(at=float(number), kind="filter", pod=f"ns/pod-{number}", node="n", gpus="", result="placed",
                    latency_seconds=0.001)


def test_the_ring_keeps_the_newest_decisions_newest_first() -> None:
    log = DecisionLog(capacity=3)
    for number in range(5):
        log.record(_decision(number))
    assert [d.pod for d in log.decisions()] == ["ns/pod-4", "ns/pod-3", "ns/pod-2"]


def test_a_repeated_refusal_keeps_its_first_time_and_counts_attempts() -> None:
    clock = Clock()
    log = DecisionLog(clock=clock)
    log.record_refusal(uid="u1", pod="ns/a", reasons={"n1": "1/1 CardInsufficientMemory"}, pod_object={})
    clock.now += 30
    log.record_refusal(uid="u1", pod="ns/a", reasons={"n1": "1/1 CardInsufficientCore"}, pod_object={})
    [refusal] = log.refusals()
    assert (refusal.first_at, refusal.last_at, refusal.attempts) == (1000.0, 1030.0, 2)
    assert refusal.reasons == {"n1": "1/1 CardInsufficientCore"}


def test_refusals_are_bounded_forgetting_the_least_recently_refused() -> None:
    clock = Clock()
    log = DecisionLog(pending_capacity=2, clock=clock)
    for uid in ("a", "b", "a", "c"):
        clock.now += 1
        log.record_refusal(uid=uid, pod=f"ns/{uid}", reasons={}, pod_object={})
    assert [r.uid for r in log.refusals()] == ["c", "a"]


@pytest.mark.parametrize(("seconds_later", "remembered"), [(60.0, True), (15 * 60.0 + 1, False)])
def test_a_refusal_not_repeated_for_fifteen_minutes_is_forgotten(seconds_later: float, remembered: bool) -> None:
    clock = Clock()
    log = DecisionLog(clock=clock)
    log.record_refusal(uid="u1", pod="ns/a", reasons={}, pod_object={})
    clock.now += seconds_later
    assert bool(log.refusals()) is remembered


def test_a_placed_pod_is_no_longer_refused() -> None:
    log = DecisionLog()
    log.record_refusal(uid="u1", pod="ns/a", reasons={}, pod_object={})
    log.forget_refusal("u1")
    assert log.refusals() == []


@pytest.mark.parametrize(("values", "top", "counts"), [
    ([0, 999, 1000], 1000, [1, 0, 0, 0, 0, 0, 0, 0, 0, 2]),
    ([100, 150, 500], 1000, [0, 2, 0, 0, 0, 1, 0, 0, 0, 0]),
    ([], 1000, [0] * 10),
    ([-5], 1000, [1] + [0] * 9),  # overbooked GPU: no free memory
])
def test_the_histogram_puts_each_value_in_one_bin(values: list[int], top: int, counts: list[int]) -> None:
    assert [bar["count"] for bar in charts.histogram(values, top=top)["bars"]] == counts


def test_the_latency_chart_keeps_only_points_in_its_window() -> None:
    chart = charts.latency_chart({"filter": [(5.0, 0.002), (50.0, 0.004), (200.0, 0.001)]}, start=10.0, end=110.0)
    assert chart["lines"]["filter"]["count"] == 1
    assert chart["scale_ms"] == pytest.approx(4.4)
