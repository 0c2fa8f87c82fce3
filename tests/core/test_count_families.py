"""Biren, Enflame GCU and Metax GPU: whole cards asked by count (docs/device-families.md#device-families), table tests
from HAMi v2.10's own cases.

Covers, per family: the inventory (Biren's register with ``devcore`` forced to 100 and the type to ``Biren``:
``pkg/device/biren/device_test.go`` Test_GetNodeDevices "exist biren device"; Enflame's and Metax's from node
capacity: ``enflame/gcu_test.go`` TestGCUDevices_GetNodeDevices "Test with valid node" / "Test with missing
resource", ``metax/device_test.go`` TestGetNodeDevices "Test with valid node"); the request read from limits or
requests (Test_GenerateResourceRequests / TestGCUDevices_GenerateResourceRequests); the fit's decisions and reasons
(Biren TestDevices_Fit: "fit success", "user assign use uuid mismatch", "user assign no use uuid match", "card
overused", "AllocatedCardsInsufficientRequest", "mutex policy rejects used device"; TestGCUDevices_Fit "fit success",
"device already used"); the booking's annotations (Test_PatchAnnotations / TestGCUDevices_PatchAnnotations) and its
usage read back; Metax's topology-loss node score (TestParseMetaxAnnos, Test_ScoreNode "policy is binpack" = 1800,
"policy is spread" = 1900) and the node it makes the filter choose.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG, Family
from hami_web.core.families.metax import TopologyScore, topology_value
from hami_web.core.grants import DeviceGrant, booking_annotations
from hami_web.core.options import pod_options
from hami_web.core.requests import ContainerRequest, RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, build_node_view
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import pod_usage

BIREN, GCU, METAX = DEFAULT_CATALOG["Biren"], DEFAULT_CATALOG["GCU"], DEFAULT_CATALOG["Metax-GPU"]
DEFAULTS = RequestDefaults.of(DEFAULT_CATALOG)


def biren_node(name: str, devices: list[Device]) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {BIREN.register_key: encode_register_json(devices),
                                                       BIREN.handshake_key: "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {BIREN.resources.count: str(len(devices))}}}


def capacity_node(name: str, resource: str, cards: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": dict(annotations or {})},
            "status": {"capacity": {resource: str(cards)}, "allocatable": {resource: str(cards)}}}


def pod(family: Family, count: int = 1, *, where: str = "limits", annotations: dict[str, str] | None = None,
        containers: int = 1) -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": f"c{i}", "resources": {where: {family.resources.count: str(count)}}}
                                    for i in range(containers)]},
            "status": {"phase": "Pending"}}


def devices_of(node: dict[str, Any]) -> tuple[Device, ...]:
    state = node_state(node_record(node, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None, state.error
    return state.inventory.devices


def place(nodes: list[dict[str, Any]], the_pod: dict[str, Any], *, node_policy: str = "binpack",
          usage: dict[str, Any] | None = None) -> Placement | NoPlacement:
    views = {}
    for node in nodes:
        state = node_state(node_record(node, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
        assert state.inventory is not None, state.error
        booked = {uuid: DeviceUsage(*row) for uuid, row in (usage or {}).get(state.name, {}).items()}
        views[state.name] = build_node_view(state.inventory, booked)
    options = pod_options(the_pod["metadata"]["annotations"], node_policy=node_policy, gpu_policy="spread",
                          catalog=DEFAULT_CATALOG)
    return choose_node(pod_request(the_pod, DEFAULTS), options, list(views), views)


# --- inventories -------------------------------------------------------------------------------------------------

def test_biren_cards_are_read_as_hami_reads_them() -> None:
    """Test_GetNodeDevices "exist biren device": devcore forced to 100, the type to Biren whatever was registered."""
    registered = Device(uuid="7-0", index=0, count=1, memory_mib=32768, cores=0, type="BR166", family="Biren")
    assert devices_of(biren_node("b", [registered])) == (
        Device(uuid="7-0", index=0, count=1, memory_mib=32768, cores=100, type="Biren", family="Biren"),)


@pytest.mark.parametrize(("family", "infix", "memory"), [
    pytest.param(GCU, "GCU", 100, id="gcu"),  # TestGCUDevices_GetNodeDevices "Test with valid node"
    pytest.param(METAX, "metax", 65536, id="metax"),  # metax TestGetNodeDevices "Test with valid node"
])
def test_capacity_cards_are_one_task_each(family: Family, infix: str, memory: int) -> None:
    devices = devices_of(capacity_node("testnode", family.resources.count, 2))
    assert devices == tuple(Device(uuid=f"testnode-{infix}-{i}", index=i, count=1, memory_mib=memory, cores=100,
                                   type=family.cw, family=family.cw) for i in range(2))


@pytest.mark.parametrize("family", [GCU, METAX], ids=["gcu", "metax"])
def test_a_node_without_the_capacity_has_no_card_of_the_family(family: Family) -> None:
    """TestGCUDevices_GetNodeDevices "Test with missing resource": no device (and no error for the node)."""
    state = node_state(node_record(capacity_node("n", "other.com/x", 2), catalog=DEFAULT_CATALOG), now=0.0,
                       catalog=DEFAULT_CATALOG)
    assert state.inventory is None and state.error == ""


def test_a_malformed_capacity_of_one_family_leaves_the_others_usable_with_the_reason() -> None:
    node = capacity_node("n", GCU.resources.count, 2)
    node["status"]["capacity"][METAX.resources.count] = "lots"
    state = node_state(node_record(node, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None and {d.family for d in state.inventory.devices} == {"GCU"}
    assert "Metax-GPU: status.capacity[metax-tech.com/gpu]: 'lots' is not a whole number" in state.error


# --- requests ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("family", "memory_percent", "cores"), [
    pytest.param(BIREN, 0, 0, id="biren"),  # Test_GenerateResourceRequests: nothing booked but the card's share
    pytest.param(GCU, 100, 100, id="gcu"),  # TestGCUDevices_GenerateResourceRequests: Memreq 100, Coresreq 100
    pytest.param(METAX, 100, 100, id="metax"),  # Test_GenerateResourceRequests: MemPercentagereq 100, Coresreq 100
])
@pytest.mark.parametrize("where", ["limits", "requests"])
def test_the_count_is_read_from_limits_or_requests(family: Family, memory_percent: int, cores: int,
                                                   where: str) -> None:
    request = pod_request(pod(family, 2, where=where), DEFAULTS)
    assert request.containers == (ContainerRequest(name="c0", init=False, count=2, memory_percent=memory_percent,
                                                   cores=cores, family=family.cw, one_card=family is METAX),)


# --- the fit -------------------------------------------------------------------------------------------------------

def _biren(*used: int, count: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node of Biren cards dev-0.., each with ``count`` shares, ``used[i]`` of them taken by another pod."""
    devices = [Device(uuid=f"dev-{i}", index=i, count=count, memory_mib=32768, cores=100, type="Biren",
                      family="Biren") for i in range(len(used))]
    usage = {"b": {f"dev-{i}": (tasks, 0, 0) for i, tasks in enumerate(used) if tasks}}
    return biren_node("b", devices), usage


@pytest.mark.parametrize(("used", "count", "asked", "annotations", "outcome"), [
    pytest.param((0, 0), 1, 1, {}, ["dev-0"], id="fit-success"),
    pytest.param((0,), 1, 1, {"birentech.com/use-gpuuuid": "dev-9"}, "1/1 CardUuidMismatch",
                 id="use-uuid-mismatch"),
    pytest.param((0,), 1, 1, {"birentech.com/nouse-gpuuuid": "dev-0"}, "1/1 CardUuidMismatch",
                 id="nouse-uuid-match"),
    pytest.param((1,), 1, 1, {}, "1/1 CardTimeSlicingExhausted", id="card-overused"),
    pytest.param((0,), 1, 2, {}, "2/1 NodeInsufficientDevice", id="more-than-the-node-has"),  # HAMi fitInDevices
    pytest.param((1, 0), 2, 2, {"hami.io/gpu-scheduler-policy": "mutex"},
                 "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict",
                 id="mutex-rejects-used-device"),
    pytest.param((1,), 2, 1, {}, ["dev-0"], id="shared-while-shares-remain"),
])
def test_biren_fit_as_hami_tests_it(used: tuple[int, ...], count: int, asked: int, annotations: dict[str, str],
                                    outcome: list[str] | str) -> None:
    """TestDevices_Fit (pkg/device/biren/device_test.go)."""
    node, usage = _biren(*used, count=count)
    placement = place([node], pod(BIREN, asked, annotations=annotations), usage=usage)
    if isinstance(outcome, str):
        assert placement == NoPlacement(reasons={"b": outcome})
    else:
        assert isinstance(placement, Placement)
        assert [(g.uuid, g.memory_mib, g.cores) for g in placement.grants[0]] == [(uuid, 0, 0) for uuid in outcome]


def test_an_enflame_card_in_use_takes_no_other_container() -> None:
    """TestGCUDevices_Fit "fit success" / "device already used" (HAMi's reason there is ExclusiveDeviceAllocateConflict;
    a card of one task says CardTimeSlicingExhausted here:
    docs/compatibility.md#enflame-gcu-metax-gpu-and-moore-threads)."""
    node = capacity_node("g", GCU.resources.count, 1)
    placed = place([node], pod(GCU))
    assert isinstance(placed, Placement) and placed.grants[0] == (DeviceGrant("g-GCU-0", 100, 100, "GCU"),)
    taken = place([node], pod(GCU), usage={"g": {"g-GCU-0": (1, 100, 100)}})
    assert taken == NoPlacement(reasons={"g": "1/1 CardTimeSlicingExhausted"})


# --- the booking ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("family", "node", "value"), [
    pytest.param(BIREN, biren_node("b", [Device("test1", 0, 1, 32768, 100, "Biren", family="Biren")]),
                 "test1,Biren,0,0:;", id="biren"),
    pytest.param(GCU, capacity_node("g", "enflame.com/gcu", 1), "g-GCU-0,GCU,100,100:;", id="gcu"),
    pytest.param(METAX, capacity_node("m", "metax-tech.com/gpu", 1), "m-metax-0,Metax-GPU,65536,100:;", id="metax"),
])
def test_the_booking_writes_both_keys_and_reads_back(family: Family, node: dict[str, Any], value: str) -> None:
    """Test_PatchAnnotations / TestGCUDevices_PatchAnnotations: the same value under -to-allocate and -allocated."""
    placement = place([node], pod(family))
    assert isinstance(placement, Placement)
    annotations = booking_annotations(placement.grants, DEFAULT_CATALOG)
    assert annotations == {family.to_allocate_key: value, family.allocated_key: value}
    booked = pod(family)
    booked["metadata"]["annotations"] = {names.POD_ASSIGNED_NODE: placement.node, **annotations}
    usage = pod_usage(booked, catalog=DEFAULT_CATALOG)
    assert usage is not None and usage.grants == placement.grants


# --- Metax's node score ----------------------------------------------------------------------------------------------

LOSS_TABLE = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


@pytest.mark.parametrize(("devices", "value"), [(1, 0), (2, 110), (3, 270), (4, 540), (5, 580), (6, 730), (7, 930),
                                                 (8, 1240), (9, 0)])
def test_topology_values_are_read_per_card_count(devices: int, value: float) -> None:
    """TestParseMetaxAnnos; a count the table lacks, or text that is no table, is 0."""
    assert topology_value(LOSS_TABLE, devices) == value
    assert topology_value("not json", devices) == 0


@pytest.mark.parametrize(("annotations", "devices", "policy", "term"), [
    pytest.param({"metax-tech.com/gpu.topology.losses": '{"1":100,"2":200}'}, 2, "binpack", 1800, id="binpack"),
    pytest.param({"metax-tech.com/gpu.topology.scores": '{"1":100,"2":200}'}, 1, "spread", 1900, id="spread"),
    pytest.param({}, 1, "binpack", 0, id="no-annotation"),
])
def test_the_metax_term_is_hamis_score_node(annotations: dict[str, str], devices: int, policy: str,
                                            term: float) -> None:
    """Test_ScoreNode (pkg/device/metax/device_test.go)."""
    assert TopologyScore().term(annotations, devices, policy) == term


def test_binpack_prefers_the_node_whose_topology_loses_least() -> None:
    lossy = capacity_node("a-lossy", METAX.resources.count, 4, {"metax-tech.com/gpu.topology.losses": '{"2":900}'})
    tight = capacity_node("b-tight", METAX.resources.count, 4, {"metax-tech.com/gpu.topology.losses": '{"2":100}'})
    placement = place([lossy, tight], pod(METAX, 2))
    assert isinstance(placement, Placement) and placement.node == "b-tight"
    assert placement.node_score == 1900  # both nodes empty: the term alone
    spread = place([lossy, tight], pod(METAX, 2), node_policy="spread")
    assert isinstance(spread, Placement) and spread.node == "a-lossy"  # no scores annotation: no term, name order
