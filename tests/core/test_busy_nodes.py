"""Nodes busy binding are tried last (docs/compatibility.md#filter-and-placement, node policy order), and when a
HAMi node lock is stale (`core.nodelocks`).

Covers: busy nodes come after the free ones in `rank_nodes` and `choose_node`, each group keeping the node policy's
order (binpack: the fullest free node first; spread: the emptiest) with ties by name; a pod that fits only on a busy
node still gets it (``node_busy`` says so); a busy name that is not a candidate changes nothing; no busy set is
HAMi's strict order. The lock codec round-trips and tolerates HAMi's older forms; `stale_reason` over its inputs:
unreadable time, age against the timeout (at and past the bound), owner gone, owner bind-phase success / failed /
allocating / none, unknown owner, owner-less locks judged by age alone.
"""

from __future__ import annotations

import pytest

from hami_web.core.choose import NoPlacement, Placement, choose_node, rank_nodes
from hami_web.core.nodelocks import LockValue, Owner, age_stale_reason, format_lock, parse_lock, stale_reason
from hami_web.core.options import PodOptions
from hami_web.core.usage import DeviceUsage, NodeView

from .builders import ask, gpu, inventory, pod, view

SMALL = pod(ask(memory_mib=1000, cores=10))
BIG = pod(ask(memory_mib=7000, cores=10))
NOW = 1_800_000_000.0
TIMEOUT = 300.0


def _cluster() -> dict[str, NodeView]:
    """Five one-GPU nodes by how full they are: ``n4`` fullest … ``n0`` empty; ``n3`` and ``n3b`` tie."""
    def node(name: str, used_mib: int, tasks: int) -> NodeView:
        return view(inventory(name, [gpu(0)]), {"GPU-0": DeviceUsage(tasks, used_mib, 10 * tasks)} if tasks else {})

    return {"n4": node("n4", 6000, 4), "n3": node("n3", 4000, 3), "n3b": node("n3b", 4000, 3),
            "n1": node("n1", 1000, 1), "n0": node("n0", 0, 0)}


def _order(policy: str, busy: frozenset[str]) -> list[str]:
    return [node.name for node in rank_nodes(list(_cluster().values()), policy, busy)]


@pytest.mark.parametrize(("policy", "busy", "order"), [
    pytest.param("binpack", frozenset(), ["n4", "n3", "n3b", "n1", "n0"], id="binpack-no-busy-is-hami-order"),
    pytest.param("binpack", frozenset({"n4"}), ["n3", "n3b", "n1", "n0", "n4"], id="binpack-fullest-busy-goes-last"),
    pytest.param("binpack", frozenset({"n4", "n3"}), ["n3b", "n1", "n0", "n4", "n3"],
                 id="binpack-busy-group-keeps-policy-order"),
    pytest.param("binpack", frozenset({"n3", "n0"}), ["n4", "n3b", "n1", "n3", "n0"], id="binpack-ties-by-name"),
    pytest.param("spread", frozenset(), ["n0", "n1", "n3", "n3b", "n4"], id="spread-no-busy"),
    pytest.param("spread", frozenset({"n0", "n1"}), ["n3", "n3b", "n4", "n0", "n1"],
                 id="spread-emptiest-busy-goes-last"),
    pytest.param("binpack", frozenset({"n4", "n3", "n3b", "n1", "n0"}), ["n4", "n3", "n3b", "n1", "n0"],
                 id="all-busy-is-policy-order"),
    pytest.param("binpack", frozenset({"elsewhere"}), ["n4", "n3", "n3b", "n1", "n0"],
                 id="busy-non-candidate-changes-nothing"),
])
def test_busy_nodes_rank_after_free_ones_in_policy_order(policy: str, busy: frozenset[str],
                                                           order: list[str]) -> None:
    assert _order(policy, busy) == order


@pytest.mark.parametrize(("policy", "busy", "node", "node_busy"), [
    pytest.param("binpack", frozenset(), "n4", False, id="binpack-fullest"),
    pytest.param("binpack", frozenset({"n4"}), "n3", False, id="binpack-fullest-free"),
    pytest.param("binpack", frozenset({"n4", "n3", "n3b"}), "n1", False, id="binpack-skips-every-busy"),
    pytest.param("spread", frozenset({"n0"}), "n1", False, id="spread-emptiest-free"),
    pytest.param("binpack", frozenset({"n4", "n3", "n3b", "n1", "n0"}), "n4", True, id="all-busy-still-placed"),
])
def test_choose_node_prefers_free_nodes(policy: str, busy: frozenset[str], node: str, node_busy: bool) -> None:
    nodes = _cluster()
    placement = choose_node(SMALL, PodOptions(node_policy=policy), list(nodes), nodes, busy=busy)
    assert isinstance(placement, Placement)
    assert (placement.node, placement.node_busy) == (node, node_busy)


def test_a_pod_that_fits_only_on_a_busy_node_still_gets_it() -> None:
    nodes = _cluster()  # 7,000 MiB of an 8,000 MiB GPU fit only where at most 1,000 MiB are used: n1 and n0
    free_enough = [name for name, node in nodes.items()
                   if node.inventory.devices[0].memory_mib - node.usage[0].memory_mib >= 7000]
    assert free_enough == ["n1", "n0"]
    placement = choose_node(BIG, PodOptions(node_policy="binpack"), list(nodes), nodes, busy={"n1", "n0"})
    assert isinstance(placement, Placement)
    assert placement.node == "n1" and placement.node_busy  # the fuller of the two busy nodes that fit


def test_busy_nodes_do_not_change_the_reasons_when_nothing_fits() -> None:
    nodes = _cluster()
    huge = pod(ask(memory_mib=9000, cores=10))
    without = choose_node(huge, PodOptions(), list(nodes), nodes)
    with_busy = choose_node(huge, PodOptions(), list(nodes), nodes, busy={"n4", "n0"})
    assert isinstance(without, NoPlacement) and without == with_busy


# -- the lock annotation and its staleness ----------------------------------------------------------------------


def test_lock_round_trips() -> None:
    value = format_lock(NOW, "ns", "pod-1")
    assert value == "2027-01-15T08:00:00Z,ns,pod-1"
    assert parse_lock(value) == LockValue(taken_at=NOW, namespace="ns", pod="pod-1")
    assert parse_lock(value).owner == "ns/pod-1" and parse_lock(value).owned_by("ns", "pod-1")


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param("2027-01-15T08:00:00Z", LockValue(NOW, "", ""), id="hami-old-owner-less"),
    pytest.param("2027-01-15T08:00:00+00:00,ns,p", LockValue(NOW, "ns", "p"), id="offset-form"),
    pytest.param(" 2027-01-15T08:00:00Z , ns , p ", LockValue(NOW, "ns", "p"), id="spaces-trimmed"),
    pytest.param("yesterday,ns,p", LockValue(None, "ns", "p"), id="unreadable-time"),
    pytest.param("", LockValue(None, "", ""), id="empty"),
])
def test_lock_parsing(value: str, expected: LockValue) -> None:
    assert parse_lock(value) == expected


def _lock(age_seconds: float, pod: str = "p") -> LockValue:
    return LockValue(taken_at=NOW - age_seconds, namespace="ns" if pod else "", pod=pod)


@pytest.mark.parametrize(("lock", "owner", "phase", "stale"), [
    pytest.param(_lock(1), Owner.PRESENT, "allocating", "", id="fresh-allocating-owner-is-live"),
    pytest.param(_lock(1), Owner.PRESENT, "", "", id="fresh-owner-without-phase-is-live"),
    pytest.param(_lock(1), Owner.UNKNOWN, "", "", id="unknown-owner-is-live"),
    pytest.param(_lock(1), Owner.UNKNOWN, "success", "", id="phase-ignored-for-unknown-owner"),
    pytest.param(_lock(1), Owner.PRESENT, "success", "owner pod bind-phase is success", id="owner-succeeded"),
    pytest.param(_lock(1), Owner.PRESENT, "failed", "owner pod bind-phase is failed", id="owner-failed"),
    pytest.param(_lock(1), Owner.GONE, "", "owner pod no longer exists", id="owner-gone"),
    pytest.param(_lock(TIMEOUT), Owner.PRESENT, "allocating", "", id="exactly-at-timeout-is-live"),
    pytest.param(_lock(TIMEOUT + 1), Owner.PRESENT, "allocating", "301s old", id="older-than-timeout"),
    pytest.param(LockValue(None, "ns", "p"), Owner.PRESENT, "allocating", "unreadable lock time", id="unreadable"),
    pytest.param(_lock(1, pod=""), Owner.GONE, "", "", id="owner-less-fresh-judged-by-age-only"),
    pytest.param(_lock(TIMEOUT + 5, pod=""), Owner.UNKNOWN, "", "305s old", id="owner-less-old"),
    pytest.param(_lock(-30), Owner.PRESENT, "allocating", "", id="clock-skew-future-lock-is-live"),
])
def test_stale_reason(lock: LockValue, owner: Owner, phase: str, stale: str) -> None:
    assert stale_reason(lock, now=NOW, timeout_seconds=TIMEOUT, owner=owner, owner_bind_phase=phase) == stale


def test_age_alone_never_looks_at_the_owner() -> None:
    assert age_stale_reason(_lock(1), now=NOW, timeout_seconds=TIMEOUT) == ""
    assert age_stale_reason(_lock(TIMEOUT + 10), now=NOW, timeout_seconds=TIMEOUT) == "310s old"
