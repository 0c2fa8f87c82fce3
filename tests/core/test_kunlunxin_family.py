"""The Kunlunxin families on the registry (hami_web.core.families.kunlunxin), from HAMi v2.10's
``pkg/device/kunlun/device_test.go`` and ``vdevice_test.go`` (each case names its Go test).

Covers: the ``kunlun`` config section (three names, read and published) building two families; whole XPUs read from
the node's capacity (NUMA of the upper half, refusals); what a container asks (vXPU memory rounded to a slice,
cores derived; a whole XPU's card and cores); the fit through the common loop (a busy XPU never shared, vXPU slices
of one size per card, mutex on idle cards only, both UUID annotations, the topology's pick); the webhook's rounding;
``BAIDU_COM_DEVICE_IDX``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from hami_web.core.devices import AnnotationError, Device, NodeInventory
from hami_web.core.families import build_catalog, config_document, parse_device_config
from hami_web.core.families.family import AdmissionAsk
from hami_web.core.families.kunlunxin import (
    CARD_MEMORY_MIB,
    DEVICE_IDX,
    VXPU_CW,
    XPU_CW,
    XpuCapacity,
    device_idx_annotations,
    round_vxpu_memory,
)
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import pod_options
from hami_web.core.quota import quota_resources
from hami_web.core.requests import ContainerRequest, PodRequest, RequestError, family_request
from hami_web.core.usage import DeviceUsage, build_node_view

CATALOG = build_catalog()
XPU = CATALOG[XPU_CW]
VXPU = CATALOG[VXPU_CW]


def test_the_kunlun_section_builds_both_families_and_is_published_back() -> None:
    """HAMi's chart ``kunlun`` section: resourceCountName (XPU), resourceVCountName and resourceVMemoryName (vXPU)."""
    assert (XPU.resources.count, VXPU.resources.count, VXPU.resources.memory) == (
        "kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory")
    config = parse_device_config({"kunlun": {"resourceVCountName": "baidu.com/vxpu"}})
    assert build_catalog(config=config)[VXPU_CW].resources.count == "baidu.com/vxpu"
    assert config_document(config) == {"kunlun": {"resourceVCountName": "baidu.com/vxpu"}}
    assert {"kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"} <= set(CATALOG.managed_resources())


def test_whole_xpus_have_no_lock_handshake_or_to_allocate_key_and_vxpus_have_hamis() -> None:
    """HAMi KunlunDevices (LockNode nil, only ``hami.io/kunlun-allocated``) and KunlunVDevices (mutex.lock,
    ``hami.io/xpu-devices-*``, ``hami.io/node-handshake-xpu``)."""
    assert (XPU.lock, XPU.handshake_key, XPU.to_allocate_key, XPU.allocated_key) == (
        None, "", "", "hami.io/kunlun-allocated")
    assert VXPU.lock is not None and VXPU.lock.key == "hami.io/mutex.lock"
    assert (VXPU.register_key, VXPU.handshake_key, VXPU.to_allocate_key, VXPU.allocated_key) == (
        "hami.io/node-register-xpu", "hami.io/node-handshake-xpu", "hami.io/xpu-devices-to-allocate",
        "hami.io/xpu-devices-allocated")


# ---- whole XPUs from the node's capacity ----

def node(name: str = "node-a", capacity: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"capacity": dict(capacity or {})}}


@pytest.mark.parametrize(("cards", "numa"), [("8", [0, 0, 0, 0, 1, 1, 1, 1]), ("3", [0, 1, 1]), ("1", [1])])
def test_xpus_from_capacity_with_the_upper_half_on_numa_1(cards: str, numa: list[int]) -> None:
    """HAMi KunlunDevices.GetNodeDevices: ``<node>-kunlun-<i>``, 98,304 MiB, 100 cores; NUMA 1 from N ÷ 2 up."""
    devices = XpuCapacity(resource="kunlunxin.com/xpu").devices(node(capacity={"kunlunxin.com/xpu": cards}))
    assert devices is not None
    assert [d.uuid for d in devices] == [f"node-a-kunlun-{i}" for i in range(int(cards))]
    assert [d.numa for d in devices] == numa
    assert {(d.count, d.memory_mib, d.cores, d.type, d.family, d.healthy) for d in devices} == {
        (100, CARD_MEMORY_MIB, 100, "kunlun", "kunlun", True)}


@pytest.mark.parametrize("capacity", [{}, {"kunlunxin.com/xpu": "0"}, {"nvidia.com/gpu": "8"}])
def test_a_node_without_xpus_has_none(capacity: dict[str, str]) -> None:
    """HAMi: capacity absent or 0 is ``device not found``."""
    assert XpuCapacity(resource="kunlunxin.com/xpu").devices(node(capacity=capacity)) is None


@pytest.mark.parametrize("value", ["lots", "1.5", "-1", "99999999"])
def test_an_unreadable_capacity_is_refused_naming_it(value: str) -> None:
    """A capacity that is not a whole number of cards is reported on the node, never a crash."""
    with pytest.raises(AnnotationError, match=r"status\.capacity\[kunlunxin\.com/xpu\]"):
        XpuCapacity(resource="kunlunxin.com/xpu").devices(node(capacity={"kunlunxin.com/xpu": value}))


# ---- what a container asks ----

def spec(limits: Mapping[str, str] | None = None, requests: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"name": "main", "resources": {"limits": dict(limits or {}), "requests": dict(requests or {})}}


@pytest.mark.parametrize(("container", "count", "memory", "cores"), [
    # HAMi vdevice_test.go Test_KunlunVDevices_GenerateResourceRequests
    (spec(), 0, 0, 0),  # no vcount requested
    (spec({"kunlunxin.com/vxpu": "1"}), 1, 98304, 100),  # vcount without memory defaults to full device
    (spec(requests={"kunlunxin.com/vxpu": "2", "kunlunxin.com/vxpu-memory": "24576"}), 2, 24576, 25),
    # trimMemory at the filter too (a pod the webhook did not round)
    (spec({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "30000"}), 1, 49152, 50),
    (spec({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "1"}), 1, 24576, 25),
    (spec({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "200000"}), 1, 98304, 100),
])
def test_vxpu_asks_are_rounded_to_slices_with_cores_from_memory(container: dict[str, Any], count: int, memory: int,
                                                                cores: int) -> None:
    """HAMi KunlunVDevices.GenerateResourceRequests (trimMemory, cores = memory × 100 ÷ 98,304)."""
    request = family_request(container, init=False, family=VXPU)
    assert (request.count, request.memory_mib if count else 0, request.cores) == (count, memory, cores)
    assert request.one_size is bool(count)


def test_a_whole_xpu_ask_is_the_card_and_its_cores() -> None:
    """HAMi KunlunDevices.GenerateResourceRequests: MemPercentagereq 100, and Fit books Totalmem and Totalcore."""
    request = family_request(spec({"kunlunxin.com/xpu": "2"}), init=False, family=XPU)
    assert (request.count, request.memory_mib, request.memory_percent, request.cores) == (2, 0, 100, 100)


def test_an_unreadable_count_is_an_error_naming_it() -> None:
    with pytest.raises(RequestError, match=r"kunlunxin\.com/vxpu"):
        family_request(spec({"kunlunxin.com/vxpu": "two"}), init=False, family=VXPU)


@pytest.mark.parametrize(("memory", "rounded"), [(None, None), (0, 24576), (24577, 49152), (49153, 98304),
                                                 (98304, 98304)])
def test_the_webhook_rounds_vxpu_memory(memory: int | None, rounded: int | None) -> None:
    """HAMi vdevice_test.go Test_MutateAdmission ("vcount with vmemory gets trimmed"; without vmemory nothing)."""
    outcome = round_vxpu_memory(VXPU, AdmissionAsk(count=1, memory=memory, cores=None, soft_split=False))
    assert (outcome.count, outcome.memory, outcome.refusal) == (1, rounded, "")


# ---- the fit ----

def cards(family: str, *, count: int, type_: str, healthy: bool = True, memory_mib: int = CARD_MEMORY_MIB,
          n: int = 8) -> list[Device]:
    return [Device(uuid=f"xpu-{i}", index=i, count=count, memory_mib=memory_mib, cores=100, type=type_,
                   healthy=healthy, family=family) for i in range(n)]


def fit(devices: list[Device], request: ContainerRequest, used: Mapping[str, tuple[int, int, int]] | None = None,
        annotations: Mapping[str, str] | None = None) -> tuple[str, ...] | str:
    view = build_node_view(NodeInventory(name="n", devices=tuple(devices),
                                         grouping={f: CATALOG[f].grouping for f in (XPU_CW, VXPU_CW)}),
                           {uuid: DeviceUsage(*row) for uuid, row in (used or {}).items()})
    options = pod_options(annotations, node_policy="binpack", gpu_policy="spread", catalog=CATALOG)
    result = fit_pod(PodRequest(containers=(request,)), view, options)
    if isinstance(result, FitFailure):
        return result.summary()
    assert isinstance(result, PodFit)
    return tuple(grant.uuid for grant in result.grants[0])


def vxpu_ask(count: int = 1, memory: int = 24576) -> ContainerRequest:
    return family_request(spec({"kunlunxin.com/vxpu": str(count), "kunlunxin.com/vxpu-memory": str(memory)}),
                          init=False, family=VXPU)


def xpu_ask(count: int = 1) -> ContainerRequest:
    return family_request(spec({"kunlunxin.com/xpu": str(count)}), init=False, family=XPU)


VXPUS = cards(VXPU_CW, count=10, type_="XPU-P800")
XPUS = cards(XPU_CW, count=100, type_="kunlun")


@pytest.mark.parametrize(("used", "ask", "outcome"), [
    # HAMi vdevice_test.go Test_FitVXPU_direct, one card
    ((0, 90000, 0), 24576, "1/1 CardInsufficientMemory"),  # would exceed total memory
    ((0, 0, 0), 24576, ("xpu-0",)),  # idle device always fits
    ((2, 49152, 50), 24576, ("xpu-0",)),  # shared device with matching average memory
    ((1, 49152, 50), 24576, "1/1 CardSliceSizeMismatch"),  # shared device with mismatched average memory
    ((4, 98304, 100), 24576, "1/1 CardInsufficientMemory"),  # four quarters: the same size, no room left
])
def test_a_vxpu_card_holds_slices_of_one_size(used: tuple[int, int, int], ask: int,
                                              outcome: tuple[str, ...] | str) -> None:
    """HAMi FitVXPU through the common loop: healthy, memory fits, idle or the same slice size."""
    assert fit(VXPUS[:1], vxpu_ask(memory=ask), {"xpu-0": used}) == outcome


def test_an_unhealthy_vxpu_is_never_taken() -> None:
    """HAMi Test_FitVXPU_direct "unhealthy device is rejected" (HAMi's Fit then says 1/8 NumaNotFit; we name the
    cause)."""
    assert fit(cards(VXPU_CW, count=10, type_="XPU", healthy=False), vxpu_ask()) == "8/8 CardNotHealth"


def test_mutex_takes_only_idle_vxpus() -> None:
    """HAMi device_test.go TestKunlunVDevices_Fit_Mutex: eight busy cards of matching quarters are shared by default;
    under mutex none is taken, ``8/8 ExclusiveDeviceAllocateConflict``."""
    busy = {f"xpu-{i}": (1, 24576, 25) for i in range(8)}
    assert fit(VXPUS, vxpu_ask(), busy) != ()
    assert isinstance(fit(VXPUS, vxpu_ask(), busy), tuple)
    assert fit(VXPUS, vxpu_ask(), busy, {"hami.io/gpu-scheduler-policy": "mutex"}) == (
        "8/8 ExclusiveDeviceAllocateConflict")


def test_a_busy_whole_xpu_is_never_shared() -> None:
    """HAMi device_test.go TestKunlunDevices_Fit_NumaNotFit: every card busy, nothing fits (we name the cause: the
    card's memory is booked)."""
    busy = {f"xpu-{i}": (1, CARD_MEMORY_MIB, 100) for i in range(8)}
    assert fit(XPUS, xpu_ask(), busy) == "8/8 CardInsufficientMemory"


def test_whole_xpus_are_picked_by_the_topology() -> None:
    """HAMi device_test.go Test_graphSelect "allocate 2 cards" through the fit: card 5 busy, two cards → 4 and 6."""
    assert sorted(fit(XPUS, xpu_ask(2), {"xpu-5": (1, CARD_MEMORY_MIB, 100)})) == ["xpu-4", "xpu-6"]


@pytest.mark.parametrize(("devices", "ask"), [(XPUS, "xpu"), (VXPUS, "vxpu")])
@pytest.mark.parametrize(("annotations", "outcome"), [
    # HAMi TestKunlunDevices_Fit_UseUUID / TestKunlunVDevices_Fit_UUIDAnnotations
    ({"baidu.com/use-gpuuuid": "xpu-5"}, ("xpu-5",)),  # legacy annotation
    ({"hami.io/use-xpu-uuid": "xpu-3"}, ("xpu-3",)),  # new standard annotation
    ({"hami.io/use-xpu-uuid": "xpu-99"}, "8/8 CardUuidMismatch"),  # a card not on the node: no fallback
    ({"baidu.com/nouse-gpuuuid": ",".join(f"xpu-{i}" for i in range(8))}, "8/8 CardUuidMismatch"),
    ({"hami.io/no-use-xpu-uuid": ",".join(f"xpu-{i}" for i in range(8))}, "8/8 CardUuidMismatch"),
    # HAMi checks each key in turn: a card must pass both
    ({"hami.io/use-xpu-uuid": "xpu-1,xpu-2", "baidu.com/use-gpuuuid": "xpu-2,xpu-3"}, ("xpu-2",)),
    ({"hami.io/use-xpu-uuid": "xpu-1", "baidu.com/use-gpuuuid": "xpu-3"}, "8/8 CardUuidMismatch"),
    ({"hami.io/use-xpu-uuid": "xpu-1,xpu-2", "baidu.com/nouse-gpuuuid": "xpu-1"}, ("xpu-2",)),
])
def test_both_uuid_annotations_select_cards(devices: list[Device], ask: str, annotations: dict[str, str],
                                            outcome: tuple[str, ...] | str) -> None:
    """HAMi checks ``hami.io/use-xpu-uuid`` / ``no-use-xpu-uuid`` and ``baidu.com/use-gpuuuid`` / ``nouse-gpuuuid``
    for both families."""
    request = xpu_ask() if ask == "xpu" else vxpu_ask(memory=CARD_MEMORY_MIB)
    assert fit(devices, request, annotations=annotations) == outcome


@pytest.mark.parametrize(("grants", "expected"), [
    ([["n-kunlun-0", "n-kunlun-1"]], {DEVICE_IDX: "0,1"}),
    ([["n-kunlun-0"], ["n-kunlun-4", "n-kunlun-5"]], {DEVICE_IDX: "4,5"}),  # each container overwrites the key
    ([["n-kunlun-3"], []], {DEVICE_IDX: "3"}),
    ([[]], {}),
])
def test_device_idx_annotation(grants: list[list[str]], expected: dict[str, str]) -> None:
    """HAMi KunlunDevices.PatchAnnotations: ``BAIDU_COM_DEVICE_IDX`` of the last container holding cards."""
    booked = [[DeviceGrant(uuid=uuid, memory_mib=CARD_MEMORY_MIB, cores=100, vendor=XPU_CW) for uuid in container]
              for container in grants]
    assert device_idx_annotations(booked) == expected


def test_the_vxpu_memory_is_a_quota_key_and_whole_xpus_have_none() -> None:
    """HAMi counts ``limits.<memory resource>`` of every family: vXPU memory (the rounded slice), no key for whole
    XPUs (HAMi's KunlunDevices name no memory or cores resource)."""
    keys = {name: resource.family for name, resource in quota_resources(CATALOG).items()}
    assert keys["kunlunxin.com/vxpu-memory"] == VXPU_CW
    assert XPU_CW not in keys.values()
