"""Namespace quotas on device memory and cores (docs/quotas.md#namespace-quotas), the pure rule.

Covers: which ``spec.hard`` keys of a ResourceQuota are ours (``limits.<R>`` for an enabled family's memory or cores
resource) and how malformed or fractional values are ignored with a warning naming the object and key; the smallest
of several objects' limits winning; the rule itself (memory against limit × memory factor, cores against the limit,
an explicit 0 blocking any non-zero request, no key no limit, a namespace already over a lowered limit); what
admission counts of a pod spec (containers summed, the largest init container, devices × memory, percentage and
whole-card asks as 0); what one pod's booking counts (per device the larger of init peak and containers' sum, only
containers once init containers finished, per family); and the filter's ``ResourceQuotaNotFit`` before the memory
check, counting the pod's own picks so far (earlier containers, earlier devices of a multi-device container,
percentage asks resolved on each device, init containers by their peak), for NVIDIA and the other families alike,
an Ascend choice by network groups judged whole, MIG instances counted by their profile; a room that surely covers
the pod skipping the per-device checks.
Cases follow HAMi v2.10.0 pkg/device/quota_test.go: TestFitQuota, TestFitQuotaExplicitZeroBlocks,
TestAddQuotaAndDelQuota, TestDelQuotaNonLimitsKey.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, NodeInventory, decode_register
from hami_web.core.families import build_catalog
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import DeviceGrant
from hami_web.core.groups import NETWORK_GROUPS
from hami_web.core.options import PodOptions
from hami_web.core.quota import (
    FamilyQuota,
    NamespaceQuota,
    PodQuota,
    QuotaObject,
    QuotaTally,
    booking_quota_use,
    effective_limits,
    family_quota_names,
    parse_resource_quota,
    quota_resources,
    quota_usage_rows,
    spec_request,
)
from hami_web.core.requests import ContainerRequest, PodRequest, RequestDefaults, pod_request
from hami_web.core.usage import build_node_view, pod_booking
from tests.core.builders import a100_mig_register

CATALOG = build_catalog()
ILUVATAR_CATALOG = build_catalog(enable={"iluvatar"})
RESOURCES = quota_resources(ILUVATAR_CATALOG)
MEM = RESOURCES["nvidia.com/gpumem"]
CORES = RESOURCES["nvidia.com/gpucores"]
VMEM = RESOURCES["iluvatar.ai/MR-V100.vMem"]
MLU_MEM = RESOURCES["cambricon.com/mlu.smlu.vmemory"]


def quota_object(hard: Any, *, namespace: str = "team-a", name: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"namespace": namespace, "name": name},
            "spec": {"hard": hard}}


# -- which keys are ours -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("hard", "catalog", "limits", "warned"), [
    pytest.param({"limits.nvidia.com/gpumem": "2000"}, CATALOG, {"nvidia.com/gpumem": 2000}, (), id="memory"),
    pytest.param({"limits.nvidia.com/gpumem": "8k"}, CATALOG, {"nvidia.com/gpumem": 8000}, (),
                 id="canonical-form-read-as-quantity"),
    pytest.param({"limits.nvidia.com/gpucores": 150}, CATALOG, {"nvidia.com/gpucores": 150}, (), id="cores-number"),
    pytest.param({"limits.nvidia.com/gpumem": "0"}, CATALOG, {"nvidia.com/gpumem": 0}, (), id="explicit-zero-kept"),
    pytest.param({"requests.nvidia.com/gpumem": "100", "0123456nvidia.com/gpumem": "50"}, CATALOG, {}, (),
                 id="requests-and-other-prefixes-not-ours"),
    pytest.param({"limits.nvidia.com/gpu": "4"}, CATALOG, {}, (), id="count-resource-not-ours"),
    pytest.param({"limits.cpu": "4", "limits.memory": "8Gi", "pods": "10"}, CATALOG, {}, (),
                 id="kubernetes-own-keys-ignored"),
    pytest.param({"limits.hygon.com/dcumem": "1000"}, CATALOG, {"hygon.com/dcumem": 1000}, (), id="dcu-memory"),
    pytest.param({"limits.cambricon.com/mlu.smlu.vmemory": "16", "limits.cambricon.com/mlu.smlu.vcore": "200"},
                 CATALOG, {"cambricon.com/mlu.smlu.vmemory": 16, "cambricon.com/mlu.smlu.vcore": 200}, (),
                 id="mlu-memory-in-its-units-and-cores"),
    pytest.param({"limits.iluvatar.ai/MR-V100.vMem": "16"}, CATALOG, {}, (), id="disabled-family-not-ours"),
    pytest.param({"limits.iluvatar.ai/MR-V100.vMem": "16"}, ILUVATAR_CATALOG, {"iluvatar.ai/MR-V100.vMem": 16}, (),
                 id="enabled-family-memory-in-its-units"),
    pytest.param({"limits.nvidia.com/gpumem": "1.5"}, CATALOG, {}, ("limits.nvidia.com/gpumem", "not a whole"),
                 id="fraction-ignored-with-warning"),
    pytest.param({"limits.nvidia.com/gpumem": "500m"}, CATALOG, {}, ("limits.nvidia.com/gpumem", "not a whole"),
                 id="milli-ignored-with-warning"),
    pytest.param({"limits.nvidia.com/gpumem": "lots", "limits.nvidia.com/gpucores": "50"}, CATALOG,
                 {"nvidia.com/gpucores": 50}, ("limits.nvidia.com/gpumem", "not a quantity"),
                 id="garbage-ignored-others-kept"),
    pytest.param({"limits.nvidia.com/gpumem": "-1"}, CATALOG, {}, ("limits.nvidia.com/gpumem", "negative"),
                 id="negative-ignored-with-warning"),
    pytest.param({"limits.nvidia.com/gpumem": "1e30"}, CATALOG, {}, ("limits.nvidia.com/gpumem", "over the limit"),
                 id="huge-ignored-with-warning"),
    pytest.param({"limits.nvidia.com/gpumem": None}, CATALOG, {}, ("limits.nvidia.com/gpumem",),
                 id="null-ignored-with-warning"),
    pytest.param(["limits.nvidia.com/gpumem"], CATALOG, {}, ("spec.hard is not a map",), id="hard-not-a-map"),
    pytest.param(None, CATALOG, {}, (), id="no-hard"),
])
def test_which_quota_keys_are_read(hard: Any, catalog: Any, limits: dict[str, int], warned: tuple[str, ...]) -> None:
    quota = parse_resource_quota(quota_object(hard), catalog)
    assert (quota.namespace, quota.name) == ("team-a", "gpu")
    assert dict(quota.limits) == limits
    if warned:
        assert len(quota.warnings) == 1
        assert "ResourceQuota team-a/gpu" in quota.warnings[0]
        for fragment in warned:
            assert fragment in quota.warnings[0]
    else:
        assert quota.warnings == ()


@pytest.mark.parametrize("obj", [{}, {"metadata": "x", "spec": 3}, {"spec": {"hard": {}}}, "not an object"])
def test_an_unreadable_object_limits_nothing(obj: Any) -> None:
    assert dict(parse_resource_quota(obj, CATALOG).limits) == {}


def test_the_smallest_of_several_quotas_wins() -> None:
    objects = [QuotaObject("ns", "a", {"nvidia.com/gpumem": 8000, "nvidia.com/gpucores": 100}),
               QuotaObject("ns", "b", {"nvidia.com/gpumem": 4000}),
               QuotaObject("ns", "c", {"nvidia.com/gpucores": 300})]
    assert effective_limits(objects) == {"nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 100}
    assert effective_limits(objects[1:]) == {"nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 300}
    assert effective_limits([]) == {}


# -- the rule ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("limits", "used", "resource", "request_", "fails"), [
    pytest.param({"nvidia.com/gpumem": 2000}, {"nvidia.com/gpumem": 1000}, MEM, 500, False, id="within"),
    pytest.param({"nvidia.com/gpumem": 2000}, {"nvidia.com/gpumem": 1000}, MEM, 1000, False, id="exactly-at-limit"),
    pytest.param({"nvidia.com/gpumem": 2000}, {"nvidia.com/gpumem": 1000}, MEM, 1001, True, id="one-over"),
    pytest.param({"nvidia.com/gpucores": 400}, {"nvidia.com/gpucores": 200}, CORES, 300, True, id="cores-over"),
    pytest.param({"nvidia.com/gpucores": 400}, {"nvidia.com/gpucores": 200}, CORES, 200, False, id="cores-at-limit"),
    pytest.param({}, {"nvidia.com/gpumem": 10**6}, MEM, 10**6, False, id="no-key-no-limit"),
    pytest.param({"nvidia.com/gpucores": 1}, {}, MEM, 10**6, False, id="other-key-does-not-limit-memory"),
    pytest.param({"nvidia.com/gpumem": 0}, {}, MEM, 1, True, id="explicit-zero-blocks"),
    pytest.param({"nvidia.com/gpumem": 0}, {}, MEM, 0, False, id="explicit-zero-lets-a-zero-request-through"),
    pytest.param({"nvidia.com/gpumem": 1000}, {"nvidia.com/gpumem": 3000}, MEM, 0, True,
                 id="already-over-a-lowered-limit"),
    pytest.param({"iluvatar.ai/MR-V100.vMem": 16}, {"iluvatar.ai/MR-V100.vMem": 2048}, VMEM, 2048, False,
                 id="memory-factor-multiplies-the-limit"),
    pytest.param({"iluvatar.ai/MR-V100.vMem": 16}, {"iluvatar.ai/MR-V100.vMem": 2048}, VMEM, 2049, True,
                 id="memory-factor-one-mib-over"),
    pytest.param({"cambricon.com/mlu.smlu.vmemory": 4}, {"cambricon.com/mlu.smlu.vmemory": 512}, MLU_MEM, 512, False,
                 id="mlu-memory-factor-256"),
    pytest.param({"cambricon.com/mlu.smlu.vmemory": 4}, {"cambricon.com/mlu.smlu.vmemory": 512}, MLU_MEM, 513, True,
                 id="mlu-one-mib-over"),
])
def test_the_quota_rule(limits: dict[str, int], used: dict[str, int], resource: Any, request_: int,
                        fails: bool) -> None:
    excess = NamespaceQuota("ns", limits, used).excess(resource, request_)
    assert (excess is not None) == fails
    if excess is not None:
        text = excess.describe()
        assert f"{resource.name}: limit {limits[resource.name]}" in text
        assert f"used {used.get(resource.name, 0)}, request {request_}" in text


def test_a_memory_limit_in_units_says_its_mib() -> None:
    excess = NamespaceQuota("ns", {"iluvatar.ai/MR-V100.vMem": 1}, {}).excess(VMEM, 512)
    assert excess is not None
    assert "limit 1 (x 256 = 256 MiB)" in excess.describe()


@pytest.mark.parametrize(("containers", "expected"), [
    pytest.param([ContainerRequest("a", False, 1, memory_mib=1000, cores=10)], (1000, 10), id="one"),
    pytest.param([ContainerRequest("a", False, 2, memory_mib=1000, cores=10)], (2000, 20), id="per-device"),
    pytest.param([ContainerRequest("a", False, 1, memory_mib=1000, cores=10),
                  ContainerRequest("b", False, 1, memory_mib=3000, cores=0)], (4000, 10), id="containers-summed"),
    pytest.param([ContainerRequest("i", True, 1, memory_mib=5000, cores=5),
                  ContainerRequest("a", False, 1, memory_mib=1000, cores=30)], (5000, 30),
                 id="init-peak-against-sum-each-resource"),
    pytest.param([ContainerRequest("i1", True, 1, memory_mib=2000), ContainerRequest("i2", True, 1, memory_mib=3000),
                  ContainerRequest("a", False, 1, memory_mib=1000)], (3000, 0), id="init-containers-not-summed"),
    pytest.param([ContainerRequest("a", False, 1, memory_percent=50, cores=20)], (0, 20), id="percentage-counts-0"),
    pytest.param([ContainerRequest("a", False, 1, cores=100)], (0, 100), id="whole-card-counts-0"),
    pytest.param([ContainerRequest("a", False, 0, memory_mib=9999, cores=99)], (0, 0), id="no-device-nothing"),
])
def test_what_admission_counts(containers: list[ContainerRequest], expected: tuple[int, int]) -> None:
    assert spec_request(containers) == expected


def gpu_container(name: str, **limits: str) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {key.replace("_", "/", 1).replace("_", "-"): value
                                                   for key, value in limits.items()}}}


def spec(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"initContainers": list(init),
                                                                   "containers": list(containers)}}


@pytest.mark.parametrize(("pod", "limits", "used", "denied"), [
    pytest.param(spec(gpu_container("a", **{"nvidia.com_gpu": "1", "nvidia.com_gpumem": "3k"})),
                 {"nvidia.com/gpumem": 4000}, {"nvidia.com/gpumem": 1000}, "", id="fits"),
    pytest.param(spec(gpu_container("a", **{"nvidia.com_gpu": "2", "nvidia.com_gpumem": "3k"})),
                 {"nvidia.com/gpumem": 4000}, {}, "nvidia.com/gpumem: limit 4000, used 0, request 6000",
                 id="two-devices-count-twice"),
    pytest.param(spec(gpu_container("a", **{"nvidia.com_gpu": "1", "nvidia.com_gpumem-percentage": "50"})),
                 {"nvidia.com/gpumem": 0}, {}, "", id="percentage-passes-admission"),
    pytest.param(spec(gpu_container("a", **{"nvidia.com_gpu": "1", "nvidia.com_gpucores": "60"})),
                 {"nvidia.com/gpucores": 100}, {"nvidia.com/gpucores": 50},
                 "nvidia.com/gpucores: limit 100, used 50, request 60", id="cores"),
    pytest.param(spec(gpu_container("a", **{"nvidia.com_gpu": "1", "nvidia.com_gpumem": "1k"}),
                      init=(gpu_container("i", **{"nvidia.com_gpu": "1", "nvidia.com_gpumem": "5k"}),)),
                 {"nvidia.com/gpumem": 4000}, {}, "request 5000", id="init-peak"),
    pytest.param(spec(gpu_container("a", **{"hygon.com_dcunum": "1", "hygon.com_dcumem": "2k"})),
                 {"hygon.com/dcumem": 1000}, {}, "hygon.com/dcumem: limit 1000, used 0, request 2000", id="dcu"),
    pytest.param(spec(gpu_container("a", **{"hygon.com_dcunum": "1", "hygon.com_dcumem": "2k"})),
                 {"nvidia.com/gpumem": 0}, {}, "", id="other-family-limit-does-not-apply"),
    pytest.param(spec({"name": "plain"}), {"nvidia.com/gpumem": 0}, {}, "", id="no-device"),
])
def test_admission_against_the_namespace(pod: dict[str, Any], limits: dict[str, int], used: dict[str, int],
                                         denied: str) -> None:
    request = pod_request(pod, RequestDefaults(catalog=CATALOG))
    excess = NamespaceQuota("ns", limits, used).admission_excess(request, CATALOG)
    if denied:
        assert excess is not None
        assert denied in excess.describe()
    else:
        assert excess is None


# -- what a booking counts -----------------------------------------------------------------------------------------

def nv(uuid: str, memory_mib: int, cores: int, vendor: str = "NVIDIA") -> DeviceGrant:
    return DeviceGrant(uuid=uuid, memory_mib=memory_mib, cores=cores, vendor=vendor)


@pytest.mark.parametrize(("grants", "init_count", "init_finished", "expected"), [
    pytest.param(((nv("g0", 1000, 10),),), 0, False, {"nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10},
                 id="one-container"),
    pytest.param(((nv("g0", 1000, 10), nv("g1", 1000, 10)),), 0, False,
                 {"nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 20}, id="two-devices"),
    pytest.param(((nv("g0", 5000, 0),), (nv("g0", 1000, 30),), (nv("g0", 1000, 30),)), 1, False,
                 {"nvidia.com/gpumem": 5000, "nvidia.com/gpucores": 60}, id="init-peak-vs-sum-per-resource"),
    pytest.param(((nv("g0", 5000, 0),), (nv("g0", 1000, 30),)), 1, True,
                 {"nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 30}, id="init-finished-containers-only"),
    pytest.param(((nv("g0", 5000, 0),), (nv("g1", 1000, 30),)), 1, False,
                 {"nvidia.com/gpumem": 6000, "nvidia.com/gpucores": 30}, id="init-on-another-device-adds"),
    pytest.param(((nv("g0", 1000, 0), nv("d0", 512, 50, "DCU")),), 0, False,
                 {"nvidia.com/gpumem": 1000, "hygon.com/dcumem": 512, "hygon.com/dcucores": 50}, id="per-family"),
    pytest.param(((),), 0, False, {}, id="nothing"),
])
def test_what_a_booking_counts(grants: Any, init_count: int, init_finished: bool, expected: dict[str, int]) -> None:
    booking = pod_booking(grants, init_count=init_count, init_finished=init_finished)
    assert booking_quota_use(booking, grants, quota_resources(CATALOG), family_quota_names(CATALOG)) == expected


def test_usage_rows_list_limits_and_uses() -> None:
    rows = quota_usage_rows({"a": {"nvidia.com/gpumem": 100}, "b": {"nvidia.com/gpucores": 0}},
                            {"a": {"nvidia.com/gpumem": 50, "nvidia.com/gpucores": 20}, "c": {"nvidia.com/gpumem": 0}})
    assert rows == [("a", "nvidia.com/gpucores", None, 20), ("a", "nvidia.com/gpumem", 100, 50),
                    ("b", "nvidia.com/gpucores", 0, 0)]


# -- the filter ----------------------------------------------------------------------------------------------------

def gpus(*memories: int, family: str = "NVIDIA", type_: str = "NVIDIA-A40") -> NodeInventory:
    devices = tuple(Device(uuid=f"g{i}", index=i, count=10, memory_mib=memory, cores=100, type=type_, numa=0,
                           healthy=True, family=family) for i, memory in enumerate(memories))
    return NodeInventory(name="node-1", devices=devices)


def fit(containers: list[ContainerRequest], node: NodeInventory, left: FamilyQuota | None,
        family: str = "NVIDIA") -> tuple[tuple[str, ...], ...] | str:
    quota = PodQuota(families=((family, left),)) if left is not None else None
    result = fit_pod(PodRequest(containers=tuple(containers)), build_node_view(node, {}), PodOptions(), quota)
    if isinstance(result, FitFailure):
        return result.summary()
    assert isinstance(result, PodFit)
    return tuple(tuple(grant.uuid for grant in container) for container in result.grants)


def c(count: int = 1, *, memory_mib: int = 0, percent: int = 100, cores: int = 0, init: bool = False,
      family: str = "NVIDIA") -> ContainerRequest:
    return ContainerRequest("c", init, count, memory_mib=memory_mib, memory_percent=percent, cores=cores,
                            family=family)


QUOTA_NOT_FIT = names.RESOURCE_QUOTA_NOT_FIT


@pytest.mark.parametrize(("containers", "node", "left", "expected"), [
    pytest.param([c(memory_mib=1000)], gpus(8000, 8000), None, (("g0",),), id="no-quota"),
    pytest.param([c(memory_mib=1000)], gpus(8000, 8000), FamilyQuota(1000, None), (("g0",),), id="exactly-room"),
    pytest.param([c(memory_mib=1001)], gpus(8000, 8000), FamilyQuota(1000, None), f"2/2 {QUOTA_NOT_FIT}",
                 id="over-room"),
    pytest.param([c(memory_mib=9000)], gpus(8000, 8000), FamilyQuota(1000, None), f"2/2 {QUOTA_NOT_FIT}",
                 id="quota-before-memory"),
    pytest.param([c(memory_mib=9000)], gpus(8000, 8000), FamilyQuota(10000, None),
                 f"2/2 {names.CARD_INSUFFICIENT_MEMORY}", id="memory-after-quota"),
    pytest.param([c(memory_mib=1, cores=30)], gpus(8000), FamilyQuota(None, 20), f"1/1 {QUOTA_NOT_FIT}",
                 id="cores-room"),
    pytest.param([c(memory_mib=1)], gpus(8000), FamilyQuota(0, None), f"1/1 {QUOTA_NOT_FIT}",
                 id="zero-room-blocks-one-mib"),
    pytest.param([c(memory_mib=1, cores=0)], gpus(8000), FamilyQuota(None, 0), (("g0",),),
                 id="zero-cores-room-lets-a-zero-core-ask-through"),
    pytest.param([c(memory_mib=1)], gpus(8000), FamilyQuota(-5, None), f"1/1 {QUOTA_NOT_FIT}",
                 id="namespace-over-lowered-limit"),
    pytest.param([c(memory_mib=0, cores=1)], gpus(8000), FamilyQuota(None, 0), f"1/1 {QUOTA_NOT_FIT}",
                 id="explicit-zero-cores"),
    pytest.param([c(percent=50)], gpus(8000, 4000), FamilyQuota(3000, None), (("g1",),),
                 id="percentage-resolved-per-device"),
    pytest.param([c(percent=100)], gpus(8000, 4000), FamilyQuota(3000, None), f"2/2 {QUOTA_NOT_FIT}",
                 id="whole-card-resolved-per-device"),
    pytest.param([c(memory_mib=1000), c(memory_mib=1000)], gpus(8000, 8000), FamilyQuota(1500, None),
                 f"2/2 {QUOTA_NOT_FIT}", id="earlier-container-counts"),
    pytest.param([c(memory_mib=1000), c(memory_mib=1000)], gpus(8000, 8000), FamilyQuota(2000, None),
                 (("g0",), ("g1",)), id="two-containers-within"),
    pytest.param([c(2, memory_mib=1000)], gpus(8000, 8000, 8000), FamilyQuota(1500, None),
                 f"1/3 {names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST}, 2/3 {QUOTA_NOT_FIT}",
                 id="multi-device-container-counts-its-own-picks"),
    pytest.param([c(2, percent=50)], gpus(8000, 2000, 2000), FamilyQuota(2500, None), (("g1", "g2"),),
                 id="multi-device-skips-the-device-that-would-pass-the-limit"),
    pytest.param([c(memory_mib=3000, init=True), c(memory_mib=1000)], gpus(8000), FamilyQuota(3000, None),
                 (("g0",), ("g0",)), id="init-peak-not-added-to-containers-on-one-device"),
    pytest.param([c(memory_mib=3000, init=True), c(memory_mib=1000), c(memory_mib=2500)], gpus(8000),
                 FamilyQuota(3000, None), f"1/1 {QUOTA_NOT_FIT}", id="containers-sum-past-init-peak"),
    pytest.param([c(memory_mib=300, family="DCU")], gpus(1000, family="DCU", type_="DCU-Z100"),
                 FamilyQuota(200, None), f"1/1 {QUOTA_NOT_FIT}", id="every-family"),
    pytest.param([c(memory_mib=512, cores=50, family="MLU")], gpus(4096, 4096, family="MLU", type_="MLU370-X4"),
                 FamilyQuota(1024, 40), f"2/2 {QUOTA_NOT_FIT}", id="mlu-cores-room"),
])
def test_the_filter_counts_the_pods_own_picks(containers: list[ContainerRequest], node: NodeInventory,
                                              left: FamilyQuota | None, expected: Any) -> None:
    family = containers[0].family
    assert fit(containers, node, left, family) == expected


def test_another_familys_quota_leaves_a_family_alone() -> None:
    assert fit([c(memory_mib=1000)], gpus(8000), FamilyQuota(0, 0), family="DCU") == (("g0",),)


def test_the_tally_takes_the_init_peak_per_device() -> None:
    tally = QuotaTally(FamilyQuota(5000, None))
    tally.add("g0", 4000, 0, True)
    assert tally.fits("g0", 3000, 0, True)  # a second init container on g0 replaces, not adds
    assert tally.fits("g0", 5000, 0, True)
    assert not tally.fits("g1", 1001, 0, True)  # on another device it adds
    tally.add("g0", 3000, 0, False)
    assert tally.fits("g0", 2000, 0, False)  # containers 5000 vs init peak 4000
    assert not tally.fits("g0", 2001, 0, False)


def test_the_pod_quota_covers_only_limited_families_it_asks_for() -> None:
    namespace = NamespaceQuota("ns", {"nvidia.com/gpumem": 4000, "hygon.com/dcucores": 100},
                               {"nvidia.com/gpumem": 1000, "hygon.com/dcucores": 30})
    both = PodRequest(containers=(c(percent=50), c(memory_mib=1, cores=80, family="DCU")))
    quota = namespace.pod_quota(both, CATALOG)
    assert quota is not None
    assert quota.get("NVIDIA") == FamilyQuota(3000, None)
    assert quota.get("DCU") == FamilyQuota(None, 70)
    assert namespace.pod_quota(PodRequest(containers=(c(percent=50),)), CATALOG) == PodQuota(
        (("NVIDIA", FamilyQuota(3000, None)),))
    assert NamespaceQuota("ns", {}, {"nvidia.com/gpumem": 5}).pod_quota(both, CATALOG) is None


def dcu(count: int = 1, **ask: Any) -> ContainerRequest:
    return c(count, family="DCU", **ask)


@pytest.mark.parametrize(("containers", "checked"), [
    pytest.param([dcu(2, memory_mib=1500)], False, id="all-devices-at-once-fit"),
    pytest.param([dcu(2, memory_mib=1501)], True, id="all-devices-at-once-may-not-fit"),
    pytest.param([dcu(memory_mib=1000, init=True), dcu(memory_mib=2001)], True,
                 id="init-and-containers-counted-together"),
    pytest.param([dcu(percent=1)], True, id="a-percentage-may-be-a-large-device"),
    pytest.param([dcu(memory_mib=100, cores=71)], True, id="cores"),
    # A dynamic-MIG family books the profile, which may be larger than the ask (4,000 asked, 1g.5gb's 4,864 booked):
    # the filter must count it as /bind will (docs/quotas.md#namespace-quotas).
    pytest.param([c(1, memory_mib=100, cores=1)], True, id="a-mig-family-may-book-a-larger-profile"),
])
def test_a_pod_the_room_surely_covers_is_not_checked_per_device(containers: list[ContainerRequest],
                                                                 checked: bool) -> None:
    namespace = NamespaceQuota("ns", {"nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 100,
                                      "hygon.com/dcumem": 4000, "hygon.com/dcucores": 100},
                               {"nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 30,
                                "hygon.com/dcumem": 1000, "hygon.com/dcucores": 30})
    quota = namespace.pod_quota(PodRequest(containers=tuple(containers)), CATALOG)
    assert (quota is not None) is checked


def test_a_mig_family_under_a_generous_quota_is_still_not_checked() -> None:
    """A profile is at most a whole device and 100 cores per instance: a room above that still needs no check."""
    namespace = NamespaceQuota("ns", {"nvidia.com/gpumem": 10**13, "nvidia.com/gpucores": 1000}, {})
    assert namespace.pod_quota(PodRequest(containers=(c(2, memory_mib=100, cores=1),)), CATALOG) is None


@pytest.mark.parametrize(("left", "picked", "ask", "covered"), [
    pytest.param(FamilyQuota(None, None), (0, 0), (10**9, 100), True, id="no-limit"),
    pytest.param(FamilyQuota(5000, None), (0, 0), (5000, 100), True, id="exactly"),
    pytest.param(FamilyQuota(5000, None), (1000, 0), (4001, 0), False, id="picks-count"),
    pytest.param(FamilyQuota(None, 50), (0, 30), (0, 20), True, id="cores-exactly"),
    pytest.param(FamilyQuota(None, 50), (0, 30), (0, 21), False, id="cores-over"),
    pytest.param(FamilyQuota(-1, None), (0, 0), (0, 0), False, id="over-a-lowered-limit"),
])
def test_a_room_that_covers_every_device_skips_the_checks(left: FamilyQuota, picked: tuple[int, int],
                                                          ask: tuple[int, int], covered: bool) -> None:
    tally = QuotaTally(left)
    tally.add("g0", picked[0], picked[1], False)
    assert tally.covers(*ask) is covered
    # Covered means every single device passes too.
    if covered:
        assert tally.fits("g1", ask[0], ask[1], False) and tally.fits("g0", ask[0], ask[1], True)


def npus() -> NodeInventory:
    devices = tuple(Device(uuid=f"n{i}", index=i, count=4, memory_mib=65536, cores=20, type="Ascend910B3", numa=0,
                           healthy=True, family="Ascend910B3", network=0 if i < 4 else 1) for i in range(8))
    return NodeInventory(name="node-1", devices=devices, topology=frozenset(), grouping={"Ascend910B3": NETWORK_GROUPS})


@pytest.mark.parametrize(("left", "expected"), [
    pytest.param(FamilyQuota(4 * 65536, None), (("n0", "n1", "n2", "n3"),), id="four-npus-in-one-group-fit"),
    pytest.param(FamilyQuota(3 * 65536, None), f"4/8 {QUOTA_NOT_FIT}", id="a-group-choice-stands-or-fails-whole"),
])
def test_a_choice_by_network_groups_is_judged_whole(left: FamilyQuota, expected: Any) -> None:
    request = ContainerRequest("c", False, 4, memory_mib=65536, family="Ascend910B3", grouped=True)
    assert fit([request], npus(), left, "Ascend910B3") == expected


@pytest.mark.parametrize(("memory_left", "expected"), [
    pytest.param(5000, (("GPU-a",),), id="the-profile-fits"),
    pytest.param(4000, f"1/1 {QUOTA_NOT_FIT}", id="the-profile-books-more-than-asked"),
])
def test_a_mig_instance_counts_its_profile(memory_left: int, expected: Any) -> None:
    a100 = decode_register(a100_mig_register("GPU-a"))[0]  # a 3000 MiB ask gets 1g.5gb: 4864 MiB, 14 cores
    node = NodeInventory(name="node-1", devices=(a100,), partitioning=CATALOG.partitionings())
    assert fit([c(memory_mib=3000, cores=5)], node, FamilyQuota(memory_left, None)) == expected
