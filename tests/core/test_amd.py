"""AMD GPUs (docs/device-families.md#device-families), table tests from HAMi v2.10's ``pkg/device/amd/device_test.go``.

Covers: the register read as HAMi reads it (Test_GetNodeDevices: the product type kept; no register, no AMD GPU) and
its health from the node's capacity (``CheckHealth``: ``amd.com/gpu`` 0 or absent takes the family away, the node's
other families stay); the request (Test_GenerateResourceRequests "parses limits only", "no gpu limits -> empty",
"defaults an omitted core limit to 100 percent", "rejects zero core percentage", "rejects excessive core
percentage"); the fit (TestDevices_Fit "allocate two whole cards", "core percentage maps per device", "retains the
registered product type in the allocation", "clamps a positive percentage to at least one CU", "insufficient memory",
"insufficient core", "uuid mismatch (use)", "time slicing exhausted", "unhealthy device is rejected"); the type
selection (TestCheckAMDType, every case, and Test_checkType: any registered type serves); the booking under both keys
with the product type in the type field, read back as the pod's usage (Test_PatchAnnotations); and the bind's re-check
counting compute units.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.families.amd import COMPUTE_UNITS, compute_units
from hami_web.core.grants import booking_annotations
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, RequestError, pod_request
from hami_web.core.usage import DeviceUsage, build_node_view
from hami_web.core.verify import other_bookings, placement_conflicts
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import pod_usage

AMD = DEFAULT_CATALOG["AMD"]
DEFAULTS = RequestDefaults.of(DEFAULT_CATALOG)
MI300X = "AMD_Instinct_MI300X_VF"


def gpu(uuid: str, index: int, *, count: int = 2, memory_mib: int = 1000, cores: int = 100, type_: str = MI300X,
        healthy: bool = True) -> Device:
    return Device(uuid=uuid, index=index, count=count, memory_mib=memory_mib, cores=cores, type=type_, healthy=healthy,
                  family="AMD")


def node(name: str, devices: list[Device], *, capacity: str | None = "8",
         extra: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"capacity": {AMD.resources.count: capacity}} if capacity is not None else {}
    return {"metadata": {"name": name, "annotations": {AMD.register_key: encode_register_json(devices),
                                                       **(extra or {})}},
            "status": status}


def pod(limits: dict[str, str], *, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "c0", "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


def place(devices: list[Device], the_pod: dict[str, Any],
          usage: dict[str, DeviceUsage] | None = None) -> Placement | NoPlacement:
    state = node_state(node_record(node("n", devices), catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None, state.error
    views = {"n": build_node_view(state.inventory, usage or {})}
    options = pod_options(the_pod["metadata"]["annotations"], node_policy="binpack", gpu_policy="binpack",
                          catalog=DEFAULT_CATALOG)
    return choose_node(pod_request(the_pod, DEFAULTS), options, ["n"], views)


def test_the_register_keeps_the_product_type() -> None:
    """Test_GetNodeDevices: the register's GPUs as written, the product type kept (HAMi only sets the vendor)."""
    state = node_state(node_record(node("n", [gpu("GPU-0", 0, type_="amd")]), catalog=DEFAULT_CATALOG), now=0.0,
                       catalog=DEFAULT_CATALOG)
    assert state.inventory is not None
    assert [(d.uuid, d.type, d.family) for d in state.inventory.devices] == [("GPU-0", "amd", "AMD")]
    bare = node_state(node_record({"metadata": {"name": "n2", "annotations": {}}}, catalog=DEFAULT_CATALOG), now=0.0,
                      catalog=DEFAULT_CATALOG)
    assert bare.inventory is None


@pytest.mark.parametrize("capacity", ["0", None, "lots"], ids=["zero", "absent", "unreadable"])
def test_no_capacity_takes_the_family_away_and_leaves_the_others(capacity: str | None) -> None:
    """``CheckHealth``: unhealthy while capacity ``amd.com/gpu`` is not above 0; the node's GPUs of another family
    stay."""
    nvidia = "GPU-n,10,16000,100,NVIDIA-Tesla T4,0,true:"
    record = node_record(node("n", [gpu("GPU-0", 0)], capacity=capacity,
                              extra={"hami.io/node-nvidia-register": nvidia,
                                     "hami.io/node-handshake": "Reported_2099-01-01 00:00:00"}),
                         catalog=DEFAULT_CATALOG)
    state = node_state(record, now=0.0, catalog=DEFAULT_CATALOG)
    assert state.plugin_gone == ("AMD",)
    assert state.inventory is not None and [d.family for d in state.inventory.devices] == ["NVIDIA"]


def test_a_request_reads_limits_and_defaults_cores_to_every_unit() -> None:
    """Test_GenerateResourceRequests "parses limits only" (count, MiB, percent) and "defaults an omitted core limit to
    100 percent"; "no gpu limits -> empty"."""
    (asked,) = pod_request(pod({"amd.com/gpu": "2", "amd.com/gpumem": "4096", "amd.com/gpucores": "33"}),
                           DEFAULTS).containers
    assert (asked.family, asked.count, asked.memory_mib, asked.cores) == ("AMD", 2, 4096, 33)
    (default,) = pod_request(pod({"amd.com/gpu": "1", "amd.com/gpumem": "4096"}), DEFAULTS).containers
    assert default.cores == 100
    assert not pod_request(pod({"amd.com/gpumem": "4096", "amd.com/gpucores": "33"}), DEFAULTS).asks_for_gpu


@pytest.mark.parametrize("cores", ["0", "101"], ids=["rejects zero core percentage",
                                                    "rejects excessive core percentage"])
def test_a_core_percentage_outside_1_to_100_is_a_request_error(cores: str) -> None:
    """Test_GenerateResourceRequests: HAMi reads such a container as asking nothing; its webhook refuses it, and so
    does a filter of a pod that skipped ours, naming the resource."""
    with pytest.raises(RequestError, match=r"amd\.com/gpucores must be an integer percentage between 1 and 100"):
        pod_request(pod({"amd.com/gpu": "1", "amd.com/gpucores": cores}), DEFAULTS)


@pytest.mark.parametrize(("total", "percent", "units"), [
    (100, 50, 50), (10, 50, 5), (64, 1, 1), (64, 100, 64), (304, 33, 100), (0, 50, 0)])
def test_a_percentage_is_that_share_of_the_units_at_least_one(total: int, percent: int, units: int) -> None:
    """TestDevices_Fit "core percentage maps per device", "clamps a positive percentage to at least one CU", "clamps a
    core request to the device total"; a GPU registering no units takes no cores ask."""
    assert compute_units(total, percent) == units


def test_two_whole_cards_book_all_memory_and_units() -> None:
    """TestDevices_Fit "allocate two whole cards": no memory asked is the whole card, and all its units."""
    placement = place([gpu("dev-0", 0), gpu("dev-1", 1, count=12)], pod({"amd.com/gpu": "2"}))
    assert isinstance(placement, Placement), placement
    assert sorted((g.uuid, g.memory_mib, g.cores) for g in placement.grants[0]) == [
        ("dev-0", 1000, 100), ("dev-1", 1000, 100)]


def test_the_percentage_is_booked_in_each_cards_units_with_the_product_type() -> None:
    """TestDevices_Fit "core percentage maps per device" and "retains the registered product type in the
    allocation"."""
    placement = place([gpu("dev-0", 0, cores=10), gpu("dev-1", 1, cores=64)],
                      pod({"amd.com/gpu": "2", "amd.com/gpumem": "500", "amd.com/gpucores": "50"}))
    assert isinstance(placement, Placement), placement
    assert sorted((g.uuid, g.memory_mib, g.cores, g.type, g.vendor) for g in placement.grants[0]) == [
        ("dev-0", 500, 5, MI300X, "AMD"), ("dev-1", 500, 32, MI300X, "AMD")]


@pytest.mark.parametrize(("device", "used", "limits", "annotations", "reason"), [
    pytest.param(gpu("dev-0", 0), DeviceUsage(1, 900, 0), {"amd.com/gpumem": "500", "amd.com/gpucores": "10"}, {},
                 "CardInsufficientMemory", id="insufficient memory"),
    pytest.param(gpu("dev-0", 0, cores=10), DeviceUsage(1, 0, 9), {"amd.com/gpumem": "100", "amd.com/gpucores": "100"},
                 {}, "CardInsufficientCore", id="insufficient core"),
    pytest.param(gpu("dev-1", 0), DeviceUsage(), {"amd.com/gpumem": "100"}, {"amd.com/use-gpu-uuid": "dev-0"},
                 "CardUuidMismatch", id="uuid mismatch (use)"),
    pytest.param(gpu("dev-0", 0), DeviceUsage(2, 0, 0), {"amd.com/gpumem": "100", "amd.com/gpucores": "10"}, {},
                 "CardTimeSlicingExhausted", id="time slicing exhausted"),
    pytest.param(gpu("dev-0", 0, healthy=False), DeviceUsage(), {"amd.com/gpumem": "100"}, {}, "CardNotHealth",
                 id="unhealthy device is rejected"),
    pytest.param(gpu("dev-0", 0), DeviceUsage(), {}, {"amd.com/use-gputype": "MI250"}, "CardTypeMismatch",
                 id="Test_checkType use type mismatch"),
])
def test_hamis_refusals(device: Device, used: DeviceUsage, limits: dict[str, str], annotations: dict[str, str],
                        reason: str) -> None:
    """TestDevices_Fit's refusals, each naming HAMi's reason."""
    placement = place([device], pod({"amd.com/gpu": "1", **limits}, annotations=annotations), {device.uuid: used})
    assert isinstance(placement, NoPlacement)
    assert placement.reasons == {"n": f"1/1 {reason}"}


@pytest.mark.parametrize(("annotations", "card", "fits"), [
    ({}, "MI300X", True),
    ({"amd.com/use-gputype": "MI300"}, "MI300X", True),
    ({"amd.com/use-gputype": "MI250"}, "MI300X", False),
    ({"amd.com/nouse-gputype": "MI300"}, "MI300X", False),
    ({"amd.com/nouse-gputype": "MI250"}, "MI300X", True),
    ({"amd.com/nouse-gputype": ""}, "MI300X", True),
    ({"amd.com/use-gputype": ""}, "MI300X", True),
    ({"amd.com/nouse-gputype": "   "}, "MI300X", True),
    ({"amd.com/use-gputype": "   "}, "MI300X", True),
    ({"amd.com/nouse-gputype": "MI250,"}, "MI300X", True),
    ({"amd.com/nouse-gputype": ",MI250"}, "MI300X", True),
    ({"amd.com/nouse-gputype": " MI250 , "}, "MI250X", False),
    ({"amd.com/nouse-gputype": ", "}, "MI300X", True),
    ({"amd.com/use-gputype": "MI300,"}, "MI250X", False),
], ids=["no annotations", "matching use type", "non-matching use type", "matching nouse type excludes card",
        "non-matching nouse type keeps card", "empty nouse annotation keeps card", "empty use annotation keeps card",
        "whitespace-only nouse annotation keeps card", "whitespace-only use annotation keeps card",
        "nouse with trailing comma only excludes named type", "nouse with leading comma only excludes named type",
        "nouse with blank member still excludes named type", "nouse with only commas keeps card",
        "use with trailing comma matches named type only"])
def test_type_selection(annotations: dict[str, str], card: str, fits: bool) -> None:
    """TestCheckAMDType, each case by name; any registered type serves (Test_checkType), so ``MI300X`` without the
    common word is an AMD GPU. (HAMi's "use with only commas rejects card" is a Decision: a list of nothing is no
    constraint, as for every family.)"""
    placement = place([gpu("dev-0", 0, type_=card)], pod({"amd.com/gpu": "1"}, annotations=annotations))
    assert isinstance(placement, Placement) is fits, placement


def test_the_booking_writes_both_keys_with_the_product_type_and_reads_back() -> None:
    """Test_PatchAnnotations: ``hami.io/amd-devices-to-allocate`` and ``-allocated`` hold the same value; the type
    field is the product type, and the pod's usage read back is the family's."""
    the_pod = pod({"amd.com/gpu": "1", "amd.com/gpumem": "100", "amd.com/gpucores": "10"})
    placement = place([gpu("dev-0", 0)], the_pod)
    assert isinstance(placement, Placement), placement
    annotations = booking_annotations(placement.grants, DEFAULT_CATALOG)
    value = f"dev-0,{MI300X},100,10:;"
    assert annotations == {"hami.io/amd-devices-to-allocate": value, "hami.io/amd-devices-allocated": value}
    the_pod["metadata"]["annotations"] = {names.POD_ASSIGNED_NODE: "n", **annotations}
    usage = pod_usage(the_pod, catalog=DEFAULT_CATALOG)
    assert usage is not None and usage.grants == placement.grants
    assert usage.booking["dev-0"] == DeviceUsage(1, 100, 10)


def test_the_binds_recheck_counts_compute_units() -> None:
    """Two bookings of 200 units each do not fit a 304-unit GPU, 150 and 150 do."""
    device = gpu("dev-0", 0, cores=304)
    state = node_state(node_record(node("n", [device]), catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None
    assert COMPUTE_UNITS.book(device, 0, 66) == 200

    def conflicts(theirs: int, ours: int) -> list[str]:
        others = other_bookings([({"dev-0": DeviceUsage(1, 0, theirs)}, ())])
        return [c.reason for c in placement_conflicts(state.inventory, others, {"dev-0": DeviceUsage(1, 0, ours)}, (),
                                                      DEFAULT_CATALOG.core_bookings())]

    assert conflicts(200, 200) == ["CardInsufficientCore"]
    assert conflicts(150, 150) == []
