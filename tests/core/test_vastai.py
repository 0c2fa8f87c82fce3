"""Vastai accelerators (docs/device-families.md#device-families), table tests from HAMi v2.10's
``pkg/device/vastai/device_test.go``.

Covers: the register read as HAMi reads it (Test_GetNodeDevices "exist vastai device": ``devcore`` forced to 100; a
die's ``custominfo.AIC`` kept only in die mode); the request (Test_GenerateResourceRequests "only set to limits" /
"only set to request": count only, nothing booked but the share); the fit (TestDevices_Fit "fit success", "user
assign use uuid mismatch", "card overused", "mutex policy rejects used device", "mutex die mode rejects idle die on
occupied card, picks die on free card", "mutex die mode rejects all idle dies on an occupied card"); the multi-die pick
(TestComputeBestCombination "single AIC group, sufficient to meet demand", "multiple AIC groups, select by count after
sorting", "multiple AIC groups, need to take across groups"); the node-score term of die mode (``ScoreNode``: each
container's share of dies on one card, added under both policies) and the node it makes the filter choose.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.groups import CARD_DIES
from hami_web.core.options import pod_options
from hami_web.core.requests import ContainerRequest, RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, build_node_view
from hami_web.state.nodes import node_record, node_state

VASTAI = DEFAULT_CATALOG["Vastai"]
DEFAULTS = RequestDefaults.of(DEFAULT_CATALOG)


def die(uuid: str, index: int, card: str = "", count: int = 1) -> Device:
    return Device(uuid=uuid, index=index, count=count, memory_mib=32768, cores=0, type="VA1", family="Vastai",
                  card=card)


def node(name: str, devices: list[Device]) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {VASTAI.register_key: encode_register_json(devices),
                                                       VASTAI.handshake_key: "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {VASTAI.resources.count: str(len(devices))}}}


def pod(count: int = 1, *, annotations: dict[str, str] | None = None, containers: int = 1,
        where: str = "limits") -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": f"c{i}", "resources": {where: {VASTAI.resources.count: str(count)}}}
                                    for i in range(containers)]},
            "status": {"phase": "Pending"}}


def place(nodes: list[dict[str, Any]], the_pod: dict[str, Any], usage: dict[str, dict[str, int]] | None = None,
          policy: str = "binpack") -> Placement | NoPlacement:
    views = {}
    for each in nodes:
        state = node_state(node_record(each, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
        assert state.inventory is not None, state.error
        views[state.name] = build_node_view(state.inventory, {
            uuid: DeviceUsage(tasks, 0, 0) for uuid, tasks in (usage or {}).get(state.name, {}).items()})
    options = pod_options(the_pod["metadata"]["annotations"], node_policy=policy, gpu_policy="spread",
                          catalog=DEFAULT_CATALOG)
    return choose_node(pod_request(the_pod, DEFAULTS), options, list(views), views)


def test_the_register_is_read_as_hami_reads_it() -> None:
    """Test_GetNodeDevices "exist vastai device"; a die keeps its card only in die mode."""
    state = node_state(node_record(node("v", [die("7-0", 0), die("7-1", 1, card="3")]), catalog=DEFAULT_CATALOG),
                       now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None
    assert [(d.uuid, d.cores, d.type, d.card) for d in state.inventory.devices] == [
        ("7-0", 100, "Vastai", ""), ("7-1", 100, "Vastai", "3")]
    plain = node_state(node_record(node("v", [die("7-0", 0)]), catalog=DEFAULT_CATALOG), now=0.0,
                       catalog=DEFAULT_CATALOG)
    assert plain.inventory is not None and "Vastai" not in plain.inventory.grouping


@pytest.mark.parametrize("where", ["limits", "requests"])
def test_a_count_is_all_a_container_asks(where: str) -> None:
    """Test_GenerateResourceRequests "only set to limits" / "only set to request"."""
    assert pod_request(pod(2, where=where), DEFAULTS).containers == (
        ContainerRequest(name="c0", init=False, count=2, memory_percent=0, family="Vastai", grouped=True,
                         group_weight=1, spread_gain=False),)


@pytest.mark.parametrize(("devices", "used", "asked", "annotations", "outcome"), [
    pytest.param([die("dev-0", 0), die("dev-1", 1)], {}, 1, {}, ["dev-0"], id="fit-success"),
    pytest.param([die("dev-0", 0)], {}, 1, {"vastaitech.com/use-gpuuuid": "dev-1"}, "1/1 CardUuidMismatch",
                 id="user-assign-use-uuid-mismatch"),
    pytest.param([die("dev-0", 0)], {"dev-0": 1}, 1, {}, "1/1 CardTimeSlicingExhausted", id="card-overused"),
    pytest.param([die("dev-0", 0, count=2)], {"dev-0": 1}, 1, {"hami.io/gpu-scheduler-policy": "mutex"},
                 "1/1 ExclusiveDeviceAllocateConflict", id="mutex-policy-rejects-used-device"),
    pytest.param([die("dev-0", 0, "1", count=2), die("dev-1", 1, "1"), die("dev-2", 2, "2")], {"dev-0": 1}, 1,
                 {"hami.io/gpu-scheduler-policy": "mutex"}, ["dev-2"],
                 id="mutex-die-mode-rejects-idle-die-on-occupied-card-picks-die-on-free-card"),
    pytest.param([die("dev-0", 0, "1", count=2), die("dev-1", 1, "1")], {"dev-0": 1}, 1,
                 {"hami.io/gpu-scheduler-policy": "mutex"}, "2/2 ExclusiveDeviceAllocateConflict",
                 id="mutex-die-mode-rejects-all-idle-dies-on-an-occupied-card"),
])
def test_the_fit_as_hami_tests_it(devices: list[Device], used: dict[str, int], asked: int,
                                  annotations: dict[str, str], outcome: list[str] | str) -> None:
    """TestDevices_Fit."""
    placement = place([node("v", devices)], pod(asked, annotations=annotations), {"v": used})
    if isinstance(outcome, str):
        assert placement == NoPlacement(reasons={"v": outcome})
    else:
        assert isinstance(placement, Placement)
        assert [(g.uuid, g.memory_mib, g.cores) for g in placement.grants[0]] == [(u, 0, 0) for u in outcome]


THREE_CARDS = [die("dev1", 1, "1"), die("dev2", 2, "1"), die("dev3", 3, "1"), die("dev4", 4, "2"),
               die("dev5", 5, "2"), die("dev6", 6, "3")]


@pytest.mark.parametrize(("devices", "count", "expected"), [
    pytest.param(THREE_CARDS[:3], 2, ["dev1", "dev2"], id="single-AIC-group-sufficient-to-meet-demand"),
    pytest.param(THREE_CARDS, 3, ["dev1", "dev2", "dev3"], id="multiple-AIC-groups-select-by-count-after-sorting"),
    pytest.param(THREE_CARDS, 4, ["dev1", "dev2", "dev3", "dev4"],
                 id="multiple-AIC-groups-need-to-take-across-groups"),
])
def test_several_dies_come_from_the_fullest_card_first(devices: list[Device], count: int,
                                                       expected: list[str]) -> None:
    """TestComputeBestCombination, through the pick and through the whole fit."""
    assert [devices[p].uuid for p in CARD_DIES.pick(range(len(devices)), devices, count)] == expected
    placement = place([node("v", devices)], pod(count))
    assert isinstance(placement, Placement) and sorted(g.uuid for g in placement.grants[0]) == expected


@pytest.mark.parametrize(("cards", "policy", "term"), [
    (["1", "1"], "binpack", 1.0), (["1", "2"], "binpack", 0.5), (["1", "1", "2", "3"], "binpack", 0.5),
    (["1", "1"], "spread", -1.0),  # the filter subtracts the term under spread: HAMi adds it under both
])
def test_the_die_mode_term_is_each_containers_share_of_one_card(cards: list[str], policy: str, term: float) -> None:
    """HAMi's ``ScoreNode``: the share of the container's dies on its fullest card, not × 10."""
    assert CARD_DIES.score([[die(f"d{i}", i, card) for i, card in enumerate(cards)]], policy, []) == term


def test_binpack_prefers_the_node_where_a_two_die_pod_stays_on_one_card() -> None:
    split = node("a-split", [die("a0", 0, "1"), die("a1", 1, "2")])
    whole = node("b-whole", [die("b0", 0, "1"), die("b1", 1, "1")])
    placement = place([split, whole], pod(2))
    assert isinstance(placement, Placement) and placement.node == "b-whole"
