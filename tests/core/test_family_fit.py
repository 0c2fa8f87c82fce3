"""Requests, selections and fits per device family (docs/device-families.md#device-families,
docs/scheduling-rules.md#checks-for-one-device), from HAMi's tables.

Covers, for Hygon DCU: ``family_request`` (HAMi ``Test_GenerateResourceRequests``: limits over requests per resource,
default cores 100 = an exclusive card, ``dcumem`` × memoryFactor, out-of-range values refused), the type filter
``hygon.com/use-dcutype`` / ``nouse-dcutype`` as case-insensitive substrings (``Test_checkDCUtype``) on top of the
family word, the UUID pins ``hygon.com/use-gpuuuid`` / ``nouse-gpuuuid``, and HAMi's ``TestDevices_Fit`` table.
For Iluvatar: ``vMem`` × 256 MiB, cores default 0 (``Test_GenerateResourceRequests``), ``hami.io/use-<CW>-uuid``
and ``Test_Fit``. For NVIDIA: ``nvidia.com/vgpu-mode`` both ways (the value must contain the GPU's mode, a GPU without
mode always qualifies, 7-field text is ``hami-core``, else ``CardTypeMismatch``) and that it, ``numa-bind`` and
``hami.io/device-cordon`` touch no other family; MIG-mode GPUs: a dynamic one (``migProfiles``) gives an instance,
or ``CardMigTopologyInfeasible`` when no usable profile has a free placement, a pre-2.10 one is refused
``CardMigLegacyGeometry``; a GPU whose JSON ``health`` is omitted never chosen. Several
families: a pod asking two families on a mixed node gets both or neither, the reason naming the first failing
family in common-word order, the booking written under each family's keys with empty entries for the containers
not using it, an init container of one family beside a container of two (booked and read back); ``pod_usage``
reading a pod holding NVIDIA and DCU (positional and HAMi's compact form without empty entries); ``node_state``
with a malformed DCU register beside a good NVIDIA one (NVIDIA usable, DCU broken with an
``InvalidRegisterAnnotation`` reason through ``choose_node``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device, NodeInventory, decode_register
from hami_web.core.families import DEFAULT_CATALOG, build_catalog
from hami_web.core.families.hygon import hygon_family
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import DeviceGrant, booking_annotations
from hami_web.core.options import PodOptions, pod_options
from hami_web.core.requests import (
    ContainerRequest,
    PodRequest,
    RequestDefaults,
    RequestError,
    family_request,
    pod_request,
)
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import pod_usage

FULL_CATALOG = build_catalog(enable={"iluvatar"})
DCU = FULL_CATALOG["DCU"]
MR_V100 = FULL_CATALOG["MR-V100"]
NVIDIA = FULL_CATALOG["NVIDIA"]
HAMI_DCU_TYPE = "DCU"  # HAMi's HygonDCUDevice, the card type of its test devices


def card(uuid: str, family: str, *, type_: str, index: int = 0, count: int = 100, memory_mib: int = 1280,
         cores: int = 100, healthy: bool = True, numa: int = 0, mode: str = "") -> Device:
    """A device of ``family`` as a HAMi test table writes it (DeviceUsage's ID, Count, Totalmem, Totalcore)."""
    return Device(uuid=uuid, index=index, count=count, memory_mib=memory_mib, cores=cores, type=type_, numa=numa,
                  healthy=healthy, mode=mode, family=family)


def node_view(devices: list[Device], used: Mapping[str, tuple[int, int, int]] | None = None) -> NodeView:
    """The node's devices with HAMi's (Used, Usedmem, Usedcores) per UUID; pair scores apply to the families that
    have them, and each family partitions its devices as its spec says (NVIDIA's dynamic MIG), as `node_state` builds
    it."""
    usage = {uuid: DeviceUsage(*row) for uuid, row in (used or {}).items()}
    topology = frozenset(family.cw for family in FULL_CATALOG if family.topology)
    return build_node_view(NodeInventory(name="node-1", devices=tuple(devices), topology=topology,
                                         partitioning=FULL_CATALOG.partitionings()), usage)


def ask(family: str, count: int = 1, *, memory_mib: int = 0, memory_percent: int = 100, cores: int = 0,
        name: str = "main") -> ContainerRequest:
    return ContainerRequest(name=name, init=False, count=count, memory_mib=memory_mib, memory_percent=memory_percent,
                            cores=cores, family=family)


def annotated(annotations: Mapping[str, str], *, gpu_policy: str = "spread") -> PodOptions:
    return pod_options(annotations, node_policy="binpack", gpu_policy=gpu_policy, catalog=FULL_CATALOG)


def fit_one(request: ContainerRequest, view: NodeView, options: PodOptions) -> PodFit | FitFailure:
    return fit_pod(PodRequest(containers=(request,)), view, options)


def outcome(result: PodFit | FitFailure) -> tuple[str, ...] | str:
    """The UUIDs of the only container's grants, or the failure summary."""
    if isinstance(result, FitFailure):
        return result.summary()
    return tuple(grant.uuid for grant in result.grants[0])


def container(name: str = "main", *, limits: Mapping[str, Any] | None = None,
              requests: Mapping[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    return {"name": name, "resources": resources}


# --- Hygon DCU: requests ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "expected"), [
    # pkg/device/hygon/device_test.go Test_GenerateResourceRequests.
    pytest.param(container(limits={}, requests={}), ask("DCU", 0), id="hami-nothing-set"),
    pytest.param(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"},
                           requests={"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"}),
                 ask("DCU", memory_mib=1024, cores=1), id="hami-all-in-limits-and-requests"),
    pytest.param(container(limits={"hygon.com/dcunum": "1"},
                           requests={"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"}),
                 ask("DCU", memory_mib=1024, cores=1), id="hami-mem-and-cores-only-in-requests"),
    pytest.param(container(limits={"hygon.com/dcunum": "1"},
                           requests={"hygon.com/dcunum": "1", "hygon.com/dcucores": "1"}),
                 ask("DCU", memory_percent=100, cores=1), id="hami-no-mem-is-whole-card"),
    # docs/device-families.md#device-families: no cores = 100 (HAMi's corenum := int32(100)).
    pytest.param(container(limits={"hygon.com/dcunum": "2"}), ask("DCU", 2, cores=100),
                 id="no-cores-is-an-exclusive-card"),
    pytest.param(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "0"}), ask("DCU", cores=0),
                 id="explicit-zero-cores-stays-zero"),
    # TestDevices_Fit "fit success: but core limit can't exceed 100".
    pytest.param(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "120"}), ask("DCU", cores=100),
                 id="hami-cores-clamp-to-100"),
    pytest.param(container(limits={"hygon.com/dcumem": "1024"}), ask("DCU", 0), id="memory-without-count-asks-nothing"),
])
def test_dcu_container_requests(spec: dict[str, Any], expected: ContainerRequest) -> None:
    assert family_request(spec, init=False, family=DCU) == expected


def test_dcu_memory_is_multiplied_by_the_memory_factor() -> None:
    family = hygon_family(memory_factor=4)
    spec = container(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "1024"})
    assert family_request(spec, init=False, family=family).memory_mib == 4096


@pytest.mark.parametrize(("spec", "memory_factor", "message"), [
    # Test_GenerateResourceRequests "oversized dcu memory request exceeds int32 range".
    pytest.param(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "16Gi"}), 1,
                 "hygon.com/dcumem: '16Gi' is over the limit", id="hami-oversized-memory"),
    # Test_GenerateResourceRequests_OutOfRangeValues.
    pytest.param(container(limits={"hygon.com/dcunum": "2200000000"}), 1, "hygon.com/dcunum: '2200000000' is over",
                 id="hami-oversized-count"),
    pytest.param(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "-1"}), 1,
                 "hygon.com/dcucores: '-1' must not be negative", id="hami-negative-cores"),
    # Test_GenerateResourceRequests_MemoryFactorOverflow: fits int32 alone, not once multiplied by 1024.
    pytest.param(container(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "3000000"}), 1024,
                 "hygon.com/dcumem: '3000000' is over the limit", id="hami-memory-factor-overflow"),
    pytest.param(container(limits={"hygon.com/dcunum": "1.5"}), 1, "is not a whole number", id="fraction-count"),
])
def test_dcu_out_of_range_requests_are_errors(spec: dict[str, Any], memory_factor: int, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        family_request(spec, init=False, family=hygon_family(memory_factor=memory_factor))


# --- Hygon DCU: type and UUID selection ------------------------------------------------------------------------

@pytest.mark.parametrize(("annotations", "card_type", "allowed"), [
    # pkg/device/hygon/device_test.go Test_checkDCUtype; HAMi's "dcu" card is a DCU-BW100 here, since our family
    # also requires the common word DCU in the type (docs/device-families.md#device-families, type matching).
    pytest.param({"hygon.com/use-dcutype": "dcu"}, "DCU-BW100", True, id="hami-exist-one-dcu-in-use-type"),
    pytest.param({"hygon.com/use-dcutype": "dcu"}, "test", False, id="hami-the-different-of-dcu-in-use-type"),
    pytest.param({}, "DCU-BW100", True, id="hami-no-dcu-in-use-annotation"),
    pytest.param({"hygon.com/use-dcutype": "dcu,test"}, "DCU-BW100", True, id="hami-exist-multi-dcu-in-use-type"),
    pytest.param({"hygon.com/nouse-dcutype": "dcu"}, "DCU-BW100", False, id="hami-exist-one-dcu-no-use-type"),
    pytest.param({"hygon.com/nouse-dcutype": "test,dcu"}, "test", False, id="hami-exist-multi-dcu-no-use-type"),
    # HAMi says True (checkDCUtype looks at the lists only); the family word DCU is missing from "test".
    pytest.param({"hygon.com/nouse-dcutype": "dcu"}, "test", False, id="hami-the-different-of-dcu-no-use-type"),
    pytest.param({"hygon.com/nouse-dcutype": "dcu"}, "DCU-BW100", False, id="nouse-matches-case-insensitively"),
    pytest.param({"hygon.com/use-dcutype": ""}, "DCU-BW100", True, id="hami-empty-use-type-is-no-constraint"),
    pytest.param({"hygon.com/nouse-dcutype": ""}, "DCU-BW100", True, id="hami-empty-nouse-type-excludes-nothing"),
    pytest.param({"hygon.com/nouse-dcutype": "   "}, "DCU-BW100", True, id="hami-whitespace-nouse-excludes-nothing"),
    pytest.param({"hygon.com/use-dcutype": " k100 , z100 "}, "DCU-K100", True, id="entries-trimmed"),
    pytest.param({"hygon.com/use-dcutype": "K100"}, "DCU-BW100", False, id="other-model-not-used"),
    pytest.param({"hygon.com/use-dcutype": "BW100", "hygon.com/nouse-dcutype": "BW"}, "DCU-BW100", False,
                 id="nouse-applies-with-use"),
    # TestDevices_Fit (checkType) "the same type" / "the different type".
    pytest.param({"hygon.com/use-dcutype": "DCU"}, "DCU", True, id="hami-checkType-same-type"),
    pytest.param({"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "DCU"}, "DCU-BW100", True,
                 id="nvidia-type-annotations-do-not-apply"),
])
def test_dcu_type_filter(annotations: dict[str, str], card_type: str, allowed: bool) -> None:
    assert annotated(annotations).selection("DCU").type_allowed(card_type) is allowed


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({"hygon.com/use-gpuuuid": "DCU-1"}, ("DCU-1",), id="use-pins-the-dcu"),
    pytest.param({"hygon.com/nouse-gpuuuid": "DCU-0"}, ("DCU-1",), id="nouse-excludes-the-dcu"),
    pytest.param({"hygon.com/use-gpuuuid": " DCU-0 ,DCU-1", "hygon.com/nouse-gpuuuid": "DCU-0"}, ("DCU-1",),
                 id="both-apply-trimmed"),
    pytest.param({"hygon.com/use-gpuuuid": "DCU-9"}, "2/2 CardUuidMismatch", id="use-of-an-absent-dcu"),
    pytest.param({"nvidia.com/use-gpuuuid": "DCU-1"}, ("DCU-0",), id="nvidia-uuid-annotation-does-not-apply"),
    pytest.param({"hygon.com/use-gpuuuid": ""}, ("DCU-0",), id="empty-use-is-no-constraint"),
])
def test_dcu_uuid_pins(annotations: dict[str, str], expected: tuple[str, ...] | str) -> None:
    view = node_view([card("DCU-0", "DCU", type_="DCU-BW100"), card("DCU-1", "DCU", type_="DCU-BW100", index=1)])
    assert outcome(fit_one(ask("DCU", memory_mib=64, cores=50), view, annotated(annotations))) == expected


# --- Hygon DCU: HAMi's fit table ------------------------------------------------------------------------------

def hami_dcu(uuid: str = "dev-0", **changes: Any) -> Device:
    return card(uuid, "DCU", **{"type_": HAMI_DCU_TYPE, **changes})


@pytest.mark.parametrize(("devices", "used", "request_", "annotations", "expected"), [
    # pkg/device/hygon/device_test.go TestDevices_Fit. HAMi visits devices from the last and picks dev-1 of two
    # equal ones; ties go by index, then UUID (docs/scheduling-rules.md#scores-and-policies).
    pytest.param([hami_dcu("dev-0", memory_mib=128), hami_dcu("dev-1", memory_mib=128)], {},
                 ask("DCU", memory_mib=64, cores=50), {}, ("dev-0",), id="hami-fit-success"),
    pytest.param([hami_dcu(memory_mib=128)], {}, ask("DCU", memory_mib=512, cores=50), {},
                 "1/1 CardInsufficientMemory", id="hami-memory-not-enough"),
    pytest.param([hami_dcu(memory_mib=1024)], {"dev-0": (0, 0, 100)}, ask("DCU", memory_mib=512, cores=50), {},
                 "1/1 CardInsufficientCore", id="hami-core-not-enough"),
    pytest.param([hami_dcu(type_="test")], {}, ask("DCU", memory_mib=512, cores=50), {},
                 "1/1 CardTypeMismatch", id="hami-type-mismatch"),
    # HAMi asks for 2 DCUs on a 1-DCU node here; we answer NodeInsufficientDevice for that, so we ask for 1.
    pytest.param([hami_dcu("dev-1")], {}, ask("DCU", memory_mib=512, cores=50), {"hygon.com/use-gpuuuid": "dev-0"},
                 "1/1 CardUuidMismatch", id="hami-use-uuid-mismatch"),
    pytest.param([hami_dcu("dev-0")], {}, ask("DCU", memory_mib=512, cores=50), {"hygon.com/nouse-gpuuuid": "dev-0"},
                 "1/1 CardUuidMismatch", id="hami-no-use-uuid-match"),
    pytest.param([hami_dcu()], {"dev-0": (100, 0, 0)}, ask("DCU", memory_mib=512, cores=50), {},
                 "1/1 CardTimeSlicingExhausted", id="hami-card-overused"),
    pytest.param([hami_dcu()], {}, ask("DCU", memory_mib=512, cores=100), {}, ("dev-0",),
                 id="hami-core-limit-100-fits-an-idle-card"),
    pytest.param([hami_dcu()], {"dev-0": (20, 0, 0)}, ask("DCU", memory_mib=512, cores=100), {},
                 "1/1 ExclusiveDeviceAllocateConflict", id="hami-card-exclusively"),
    pytest.param([hami_dcu()], {"dev-0": (20, 0, 100)}, ask("DCU", memory_mib=512, cores=0), {},
                 "1/1 CardComputeUnitsExhausted", id="hami-compute-units-exhausted"),
    # "AllocatedCardsInsufficientRequest": HAMi's 2-of-1 and 3-of-2 asks are NodeInsufficientDevice here
    # (docs/scheduling-rules.md#checks-for-one-device).
    pytest.param([hami_dcu("dev-0"), hami_dcu("dev-1", index=1, healthy=False)], {},
                 ask("DCU", 2, memory_mib=512, cores=20), {},
                 "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth", id="hami-allocated-cards-insufficient"),
    pytest.param([hami_dcu(), hami_dcu("dev-1", index=1)], {}, ask("DCU", 3, memory_mib=512, cores=20), {},
                 "3/2 NodeInsufficientDevice", id="hami-partial-allocation-three-of-two"),
    pytest.param([hami_dcu()], {"dev-0": (20, 0, 10)}, ask("DCU", memory_percent=10, cores=20), {}, ("dev-0",),
                 id="hami-memory-percentage"),
    pytest.param([hami_dcu(count=2, memory_mib=128)], {"dev-0": (1, 0, 0)}, ask("DCU", memory_mib=64, cores=50),
                 {"hami.io/gpu-scheduler-policy": "mutex"}, "1/1 ExclusiveDeviceAllocateConflict",
                 id="hami-mutex-policy-rejects-used-device"),
    pytest.param([hami_dcu(healthy=False)], {}, ask("DCU", memory_mib=512, cores=50), {}, "1/1 CardNotHealth",
                 id="hami-card-not-health"),
])
def test_hami_dcu_fit_table(devices: list[Device], used: dict[str, tuple[int, int, int]], request_: ContainerRequest,
                            annotations: dict[str, str], expected: tuple[str, ...] | str) -> None:
    policy = annotations.get("hami.io/gpu-scheduler-policy", "spread")
    assert outcome(fit_one(request_, node_view(devices, used), annotated(annotations, gpu_policy=policy))) == expected


def test_dcu_memory_percentage_books_its_share_of_the_card() -> None:
    result = fit_one(ask("DCU", memory_percent=10, cores=20), node_view([hami_dcu()]), annotated({}))
    assert isinstance(result, PodFit)
    assert result.grants == ((DeviceGrant(uuid="dev-0", memory_mib=128, cores=20, vendor="DCU"),),)


def test_a_dcu_pod_without_cores_takes_a_whole_card_and_leaves_shared_ones() -> None:
    # docs/device-families.md#device-families: default cores 100, so the exclusive-card check applies to every DCU pod
    # that names none.
    spec = {"metadata": {"name": "p"}, "spec": {"containers": [container(limits={"hygon.com/dcunum": "1"})]}}
    request = pod_request(spec, RequestDefaults.of(FULL_CATALOG))
    view = node_view([card("DCU-0", "DCU", type_="DCU-BW100", count=4, memory_mib=65520),
                      card("DCU-1", "DCU", type_="DCU-BW100", index=1, count=4, memory_mib=65520)],
                     {"DCU-0": (1, 1024, 10)})
    result = fit_pod(request, view, annotated({}))
    assert isinstance(result, PodFit)
    assert result.grants == ((DeviceGrant(uuid="DCU-1", memory_mib=65520, cores=100, vendor="DCU"),),)


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({"nvidia.com/numa-bind": "true"}, ("DCU-0", "DCU-1"), id="numa-bind-is-nvidia-only"),
    pytest.param({"nvidia.com/vgpu-mode": "mps"}, ("DCU-0", "DCU-1"), id="vgpu-mode-is-nvidia-only"),
    pytest.param({"hami.io/gpu-scheduler-policy": "topology-aware"}, ("DCU-0", "DCU-1"),
                 id="topology-aware-reads-as-spread"),
])
def test_nvidia_only_annotations_do_not_constrain_dcus(annotations: dict[str, str], expected: tuple[str, ...]) -> None:
    view = node_view([card("DCU-0", "DCU", type_="DCU-BW100", numa=0, mode="hami-core"),
                      card("DCU-1", "DCU", type_="DCU-BW100", index=1, numa=1, mode="hami-core")])
    policy = annotations.get("hami.io/gpu-scheduler-policy", "spread")
    assert outcome(fit_one(ask("DCU", 2, memory_mib=64, cores=10), view,
                           annotated(annotations, gpu_policy=policy))) == expected


def test_the_device_cordon_annotation_takes_no_dcu_away() -> None:
    node = {"metadata": {"name": "mixed", "annotations": {
        "hami.io/node-nvidia-register": "GPU-a,10,8000,100,NVIDIA-T4,0,true:",
        "hami.io/node-dcu-register": "DCU-0,4,65520,100,DCU-BW100,0,true:",
        "hami.io/device-cordon": "GPU-a,DCU-0"}}}
    state = node_state(node_record(node), now=0.0)
    assert state.inventory is not None
    assert state.inventory.cordoned == frozenset({"GPU-a"})


# --- Iluvatar --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "expected"), [
    # pkg/device/iluvatar/device_test.go Test_GenerateResourceRequests.
    pytest.param(container(limits={"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "1000",
                                   "iluvatar.ai/MR-V100.vCore": "100"},
                           requests={"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "1000",
                                     "iluvatar.ai/MR-V100.vCore": "100"}),
                 ask("MR-V100", memory_mib=256000, cores=100), id="hami-all-resources-vmem-times-256"),
    pytest.param(container(limits={}, requests={}), ask("MR-V100", 0), id="hami-nothing-set"),
    pytest.param(container(limits={"iluvatar.ai/MR-V100-vgpu": "1"}, requests={"iluvatar.ai/MR-V100-vgpu": "1"}),
                 ask("MR-V100", memory_percent=100, cores=0), id="hami-no-memory-whole-card-cores-0"),
    pytest.param(container(limits={"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vMem": "8"}),
                 ask("MR-V100", 2, memory_mib=2048), id="8-units-are-2048-mib"),
    pytest.param(container(limits={"iluvatar.ai/MR-V50-vgpu": "1"}), ask("MR-V100", 0),
                 id="another-chip-resource-asks-nothing-of-mr-v100"),
])
def test_iluvatar_container_requests(spec: dict[str, Any], expected: ContainerRequest) -> None:
    assert family_request(spec, init=False, family=MR_V100) == expected


@pytest.mark.parametrize("memory", [
    pytest.param("16Gi", id="hami-memory-overflowing-int32"),
    pytest.param("16.0Gi", id="hami-decimal-form-memory"),
    pytest.param("8388608", id="beyond-int32-mib"),
])
def test_iluvatar_oversized_memory_is_an_error(memory: str) -> None:
    spec = container(limits={"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": memory})
    with pytest.raises(RequestError, match=r"iluvatar\.ai/MR-V100\.vMem"):
        family_request(spec, init=False, family=MR_V100)


def hami_iluvatar(uuid: str = "dev-0", **changes: Any) -> Device:
    return card(uuid, "MR-V100", **{"type_": "MR-V100", "memory_mib": 128, **changes})


@pytest.mark.parametrize(("devices", "used", "request_", "annotations", "expected"), [
    # pkg/device/iluvatar/device_test.go Test_Fit (HAMi picks dev-1 of two equal devices; we order ties by UUID).
    pytest.param([hami_iluvatar("dev-0"), hami_iluvatar("dev-1")], {}, ask("MR-V100", memory_mib=64, cores=50), {},
                 ("dev-0",), id="hami-fit-success"),
    pytest.param([hami_iluvatar()], {}, ask("MR-V100", memory_mib=512, cores=50), {}, "1/1 CardInsufficientMemory",
                 id="hami-memory-not-enough"),
    pytest.param([hami_iluvatar()], {"dev-0": (0, 0, 100)}, ask("MR-V100", memory_mib=512, cores=50), {},
                 "1/1 CardInsufficientMemory", id="hami-core-not-enough-fails-on-memory-first"),
    pytest.param([hami_iluvatar()], {"dev-0": (0, 0, 100)}, ask("MR-V100", memory_mib=64, cores=50), {},
                 "1/1 CardInsufficientCore", id="core-not-enough"),
    # Test_checkType "the different type": a card of type test123.
    pytest.param([hami_iluvatar(type_="test123")], {}, ask("MR-V100", memory_mib=64, cores=50), {},
                 "1/1 CardTypeMismatch", id="hami-type-mismatch"),
    pytest.param([hami_iluvatar(type_="MR-V50")], {}, ask("MR-V100", memory_mib=64, cores=50), {},
                 "1/1 CardTypeMismatch", id="another-chip-is-a-type-mismatch"),
    # TestFit_MutexRejectsUsedDevice.
    pytest.param([hami_iluvatar()], {"dev-0": (1, 0, 0)}, ask("MR-V100", memory_mib=64, cores=50),
                 {"hami.io/gpu-scheduler-policy": "mutex"}, "1/1 ExclusiveDeviceAllocateConflict",
                 id="hami-mutex-rejects-used-device"),
    pytest.param([hami_iluvatar(healthy=False)], {}, ask("MR-V100", memory_mib=64, cores=50), {},
                 "1/1 CardNotHealth", id="hami-card-not-health"),
    pytest.param([hami_iluvatar("dev-0"), hami_iluvatar("dev-1")], {}, ask("MR-V100", memory_mib=64),
                 {"hami.io/use-MR-V100-uuid": "dev-1"}, ("dev-1",), id="use-cw-uuid-pins"),
    pytest.param([hami_iluvatar("dev-0"), hami_iluvatar("dev-1")], {}, ask("MR-V100", memory_mib=64),
                 {"hami.io/no-use-MR-V100-uuid": "dev-0"}, ("dev-1",), id="no-use-cw-uuid-excludes"),
    pytest.param([hami_iluvatar("dev-0")], {}, ask("MR-V100", memory_mib=64),
                 {"hami.io/use-MR-V50-uuid": "dev-9", "nvidia.com/use-gpuuuid": "dev-9"}, ("dev-0",),
                 id="other-families-uuid-keys-do-not-apply"),
])
def test_hami_iluvatar_fit_table(devices: list[Device], used: dict[str, tuple[int, int, int]],
                                 request_: ContainerRequest, annotations: dict[str, str],
                                 expected: tuple[str, ...] | str) -> None:
    policy = annotations.get("hami.io/gpu-scheduler-policy", "spread")
    assert outcome(fit_one(request_, node_view(devices, used), annotated(annotations, gpu_policy=policy))) == expected


# --- NVIDIA vgpu-mode -------------------------------------------------------------------------------------------

def json_gpu(mode: str | None) -> Device:
    """One NVIDIA GPU read from a JSON register entry with ``mode`` (left out when None)."""
    mode_field = "" if mode is None else f',"mode":"{mode}"'
    return decode_register('[{"id":"GPU-a","count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-Tesla T4",'
                           f'"health":true{mode_field}}}]')[0]


SEVEN_FIELD_GPU = decode_register("GPU-a,10,8000,100,NVIDIA-Tesla T4,0,true:")[0]


@pytest.mark.parametrize(("value", "gpu", "expected"), [
    pytest.param(None, json_gpu("hami-core"), ("GPU-a",), id="no-annotation-any-mode"),
    pytest.param(None, json_gpu("mps"), ("GPU-a",), id="no-annotation-mps-gpu"),
    # pkg/device/nvidia/device_test.go TestCheckType_AllocateMode.
    pytest.param("mps", json_gpu("hami-core"), "1/1 CardTypeMismatch", id="hami-mps-pod-hami-core-gpu"),
    pytest.param("hami-core", json_gpu("hami-core"), ("GPU-a",), id="hami-hami-core-pod-hami-core-gpu"),
    pytest.param("hami-core", json_gpu("mps"), "1/1 CardTypeMismatch", id="hami-core-pod-mps-gpu"),
    pytest.param("hami-core", json_gpu(None), ("GPU-a",), id="gpu-without-mode-always-qualifies"),
    pytest.param("mps", json_gpu(""), ("GPU-a",), id="gpu-with-empty-mode-always-qualifies"),
    pytest.param("hami-core,mps", json_gpu("mps"), ("GPU-a",), id="value-containing-the-mode"),
    pytest.param("hami-core", SEVEN_FIELD_GPU, ("GPU-a",), id="seven-field-text-is-hami-core"),
    pytest.param("mig", SEVEN_FIELD_GPU, "1/1 CardTypeMismatch", id="mig-pod-seven-field-gpu"),
    pytest.param("hami-core", json_gpu("mig"), "1/1 CardTypeMismatch", id="mode-checked-before-mig-refusal"),
])
def test_vgpu_mode_selects_gpus_whose_mode_it_contains(value: str | None, gpu: Device,
                                                       expected: tuple[str, ...] | str) -> None:
    annotations = {} if value is None else {"nvidia.com/vgpu-mode": value}
    assert outcome(fit_one(ask("NVIDIA", memory_mib=1000), node_view([gpu]), annotated(annotations))) == expected


def test_vgpu_mode_picks_the_matching_gpu_among_several() -> None:
    text = ('[{"id":"GPU-a","index":0,"count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-T4","mode":"mps",'
            '"health":true},{"id":"GPU-b","index":1,"count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-T4",'
            '"mode":"hami-core","health":true}]')
    view = node_view(list(decode_register(text)), {"GPU-b": (3, 6000, 60)})
    assert outcome(fit_one(ask("NVIDIA", memory_mib=1000), view, annotated({}))) == ("GPU-a",)
    assert outcome(fit_one(ask("NVIDIA", memory_mib=1000), view,
                           annotated({"nvidia.com/vgpu-mode": "hami-core"}))) == ("GPU-b",)
    assert outcome(fit_one(ask("NVIDIA", 2, memory_mib=1000), view, annotated({"nvidia.com/vgpu-mode": "mps"}))) == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch")


# --- NVIDIA MIG modes and omitted health ---------------------------------------------------------------------

MIG_WITH_PROFILES = (
    '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","numa":0,"health":true,'
    '"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,"core":14,"sliceCount":1,"instanceCount":7,'
    '"multiprocessorCount":14,"placements":[{"start":6,"size":1}]}]}]')


@pytest.mark.parametrize(("register", "request_", "expected"), [
    # pkg/device/nvidia/device_test.go TestGetNodeDevices_MigProfilesFromNode's GPU: dynamic MIG.
    pytest.param(MIG_WITH_PROFILES, ask("NVIDIA", memory_mib=5000), ("GPU-0",), id="dynamic-mig-with-profiles"),
    pytest.param(MIG_WITH_PROFILES, ask("NVIDIA", memory_mib=6000), "1/1 CardMigTopologyInfeasible",
                 id="dynamic-mig-no-profile-big-enough"),
    # A pre-2.10 geometry MIG GPU as HAMi v2.5–v2.9 register it.
    pytest.param("GPU-3ef99f5d-0000,10,95830,100,NVIDIA-NVIDIA H100 NVL,0,true,0,mig:", ask("NVIDIA", memory_mib=1000),
                 "1/1 CardMigLegacyGeometry", id="legacy-geometry-text"),
    pytest.param('[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig",'
                 '"health":true}]', ask("NVIDIA", memory_mib=1000), "1/1 CardMigLegacyGeometry",
                 id="json-mig-without-profiles"),
    pytest.param('[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig",'
                 '"migProfiles":[],"health":true}]', ask("NVIDIA", memory_mib=1000), "1/1 CardMigLegacyGeometry",
                 id="json-mig-with-empty-profiles"),
    pytest.param('[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig",'
                 '"migProfiles":[{"name":"1g.5gb"}]}]', ask("NVIDIA", memory_mib=1000), "1/1 CardNotHealth",
                 id="unhealthy-before-mig"),
    pytest.param(MIG_WITH_PROFILES, ask("NVIDIA", memory_mib=5000, cores=100), ("GPU-0",),
                 id="idle-mig-gpu-takes-an-exclusive-ask-as-an-instance"),
])
def test_mig_mode_gpus_by_their_kind(register: str, request_: ContainerRequest, expected: object) -> None:
    assert outcome(fit_one(request_, node_view(list(decode_register(register))), annotated({}))) == expected


def test_a_pod_avoids_a_mig_gpu_without_a_usable_profile() -> None:
    text = ('[{"id":"GPU-mig","index":0,"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","mode":"mig",'
            '"migProfiles":[{"name":"1g.5gb"}],"health":true},{"id":"GPU-core","index":1,"count":10,"devmem":40960,'
            '"devcore":100,"type":"NVIDIA-A100","mode":"hami-core","health":true}]')
    view = node_view(list(decode_register(text)))
    assert outcome(fit_one(ask("NVIDIA", memory_mib=1000), view, annotated({}))) == ("GPU-core",)
    assert outcome(fit_one(ask("NVIDIA", 2, memory_mib=1000), view, annotated({}))) == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardMigTopologyInfeasible")


def test_a_gpu_whose_json_health_is_omitted_is_never_chosen() -> None:
    # GPU-a (no "health") is idle and would win under spread; GPU-b is busy but healthy.
    text = ('[{"id":"GPU-a","index":0,"count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-T4"},'
            '{"id":"GPU-b","index":1,"count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-T4","health":true}]')
    node = {"metadata": {"name": "n", "annotations": {"hami.io/node-nvidia-register": text}}}
    state = node_state(node_record(node), now=0.0)
    assert state.inventory is not None
    view = build_node_view(state.inventory, {"GPU-b": DeviceUsage(5, 6000, 50)})
    for policy in ("spread", "binpack"):
        options = pod_options({}, node_policy="binpack", gpu_policy=policy)
        assert outcome(fit_one(ask("NVIDIA", memory_mib=1000), view, options)) == ("GPU-b",)
    assert outcome(fit_one(ask("NVIDIA", 2, memory_mib=1000), view, annotated({}))) == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth")


# --- several families on one node ---------------------------------------------------------------------------------

GOOD_NVIDIA = "GPU-a,10,8000,100,NVIDIA-T4,0,true:"
GOOD_DCU = "DCU-0,4,65520,100,DCU-BW100,0,true:"


def mixed_node(name: str = "mixed", **registers: str) -> dict[str, Any]:
    """A node with the given register annotations (keyword = family common word, lower case)."""
    keys = {"nvidia": "hami.io/node-nvidia-register", "dcu": "hami.io/node-dcu-register",
            "mr_v100": "hami.io/node-MR-V100-register"}
    return {"metadata": {"name": name, "annotations": {keys[family]: text for family, text in registers.items()}}}


def place(node: dict[str, Any], containers: list[dict[str, Any]], annotations: Mapping[str, str] | None = None,
          used: Mapping[str, DeviceUsage] | None = None) -> Placement | NoPlacement:
    state = node_state(node_record(node, catalog=FULL_CATALOG), now=0.0, catalog=FULL_CATALOG)
    assert state.inventory is not None, state.error
    view = build_node_view(state.inventory, used or {})
    request = pod_request({"metadata": {"name": "p"}, "spec": {"containers": containers}},
                          RequestDefaults.of(FULL_CATALOG))
    return choose_node(request, annotated(annotations or {}), [view.name], {view.name: view})


BOTH = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "hygon.com/dcunum": "1", "hygon.com/dcumem": "2000",
        "hygon.com/dcucores": "50"}


def test_a_pod_asking_two_families_gets_both_on_a_mixed_node() -> None:
    placement = place(mixed_node(nvidia=GOOD_NVIDIA, dcu=GOOD_DCU), [container(limits=BOTH)])
    assert isinstance(placement, Placement)
    # Families in common-word order: DCU before NVIDIA inside the container's entry.
    assert placement.grants == ((DeviceGrant(uuid="DCU-0", memory_mib=2000, cores=50, vendor="DCU"),
                                 DeviceGrant(uuid="GPU-a", memory_mib=1000, cores=0, vendor="NVIDIA")),)
    assert booking_annotations(placement.grants, FULL_CATALOG) == {
        "hami.io/dcu-devices-to-allocate": "DCU-0,DCU,2000,50:;",
        "hami.io/dcu-devices-allocated": "DCU-0,DCU,2000,50:;",
        "hami.io/vgpu-devices-to-allocate": "GPU-a,NVIDIA,1000,0:;",
        "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,0:;"}


def test_each_family_annotation_has_an_empty_entry_for_containers_not_using_it() -> None:
    containers = [container("gpu", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
                  container("plain"),
                  container("dcu", limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000"})]
    placement = place(mixed_node(nvidia=GOOD_NVIDIA, dcu=GOOD_DCU), containers)
    assert isinstance(placement, Placement)
    assert booking_annotations(placement.grants, FULL_CATALOG) == {
        "hami.io/dcu-devices-to-allocate": ";;DCU-0,DCU,2000,100:;",
        "hami.io/dcu-devices-allocated": ";;DCU-0,DCU,2000,100:;",
        "hami.io/vgpu-devices-to-allocate": "GPU-a,NVIDIA,1000,0:;;;",
        "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,0:;;;"}


@pytest.mark.parametrize(("registers", "used", "limits", "reason"), [
    pytest.param({"nvidia": GOOD_NVIDIA, "dcu": GOOD_DCU.replace("true", "false")}, {}, BOTH,
                 "DCU: 1/1 CardNotHealth", id="nvidia-fits-dcu-does-not"),
    pytest.param({"nvidia": GOOD_NVIDIA, "dcu": GOOD_DCU}, {"GPU-a": DeviceUsage(1, 7500, 10)}, BOTH,
                 "NVIDIA: 1/1 CardInsufficientMemory", id="dcu-fits-nvidia-does-not"),
    pytest.param({"nvidia": GOOD_NVIDIA.replace("true", "false"), "dcu": GOOD_DCU.replace("true", "false")}, {},
                 BOTH, "DCU: 1/1 CardNotHealth", id="both-fail-dcu-named-first"),
    pytest.param({"nvidia": GOOD_NVIDIA}, {}, BOTH, "DCU: 1/0 NodeInsufficientDevice", id="node-without-dcus"),
    pytest.param({"nvidia": GOOD_NVIDIA, "mr_v100": "ILU-0,10,8192,100,MR-V100,0,false:"}, {},
                 {"nvidia.com/gpu": "2", "iluvatar.ai/MR-V100-vgpu": "1"}, "MR-V100: 1/1 CardNotHealth",
                 id="mr-v100-before-nvidia"),
    pytest.param({"dcu": GOOD_DCU, "mr_v100": "ILU-0,10,8192,100,MR-V100,0,false:"}, {},
                 {"hygon.com/dcunum": "2", "iluvatar.ai/MR-V100-vgpu": "1"}, "DCU: 2/1 NodeInsufficientDevice",
                 id="dcu-before-mr-v100"),
    pytest.param({"nvidia": GOOD_NVIDIA, "dcu": GOOD_DCU}, {}, {"nvidia.com/gpu": "2"},
                 "NVIDIA: 2/1 NodeInsufficientDevice", id="one-family-pod-on-a-mixed-node-names-it"),
])
def test_a_pod_of_several_families_gets_all_or_none_and_the_first_failing_family_is_named(
        registers: dict[str, str], used: dict[str, DeviceUsage], limits: dict[str, str], reason: str) -> None:
    assert place(mixed_node(**registers), [container(limits=limits)], used=used) == NoPlacement(
        reasons={"mixed": reason})


def test_a_pod_of_one_family_on_a_node_of_one_family_gets_hami_reason_unprefixed() -> None:
    placement = place(mixed_node(dcu=GOOD_DCU.replace("true", "false")), [container(limits={"hygon.com/dcunum": "1"})])
    assert placement == NoPlacement(reasons={"mixed": "1/1 CardNotHealth"})


def test_an_init_container_of_one_family_and_a_container_of_two_share_the_dcu_as_init_containers_do() -> None:
    node = mixed_node(nvidia=GOOD_NVIDIA, dcu=GOOD_DCU)
    spec = {"metadata": {"uid": "uid-1", "name": "p", "namespace": "default"}, "status": {"phase": "Pending"},
            "spec": {"initContainers": [container("init", limits={"hygon.com/dcunum": "1",
                                                                   "hygon.com/dcumem": "1000"})],
                     "containers": [container("main", limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000",
                                                              "nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})]}}
    state = node_state(node_record(node, catalog=FULL_CATALOG), now=0.0, catalog=FULL_CATALOG)
    assert state.inventory is not None
    view = build_node_view(state.inventory, {})
    request = pod_request(spec, RequestDefaults.of(FULL_CATALOG))
    placement = choose_node(request, annotated({}), [view.name], {view.name: view})
    assert isinstance(placement, Placement)
    assert placement.grants == (
        (DeviceGrant(uuid="DCU-0", memory_mib=1000, cores=100, vendor="DCU"),),
        (DeviceGrant(uuid="DCU-0", memory_mib=2000, cores=100, vendor="DCU"),
         DeviceGrant(uuid="GPU-a", memory_mib=3000, cores=0, vendor="NVIDIA")))
    annotations = booking_annotations(placement.grants, FULL_CATALOG)
    assert annotations["hami.io/dcu-devices-allocated"] == "DCU-0,DCU,1000,100:;DCU-0,DCU,2000,100:;"
    assert annotations["hami.io/vgpu-devices-allocated"] == ";GPU-a,NVIDIA,3000,0:;"
    spec["metadata"]["annotations"] = {"hami.io/vgpu-node": "mixed", **annotations}
    usage = pod_usage(spec, catalog=FULL_CATALOG)
    assert usage is not None and usage.grants == placement.grants
    # The init container's DCU task ends before the container's starts: one task, the larger memory.
    assert dict(usage.booking) == {"DCU-0": DeviceUsage(1, 2000, 100), "GPU-a": DeviceUsage(1, 3000, 0)}


# --- usage of a pod holding several families ----------------------------------------------------------------------

def held_pod(annotations: dict[str, str], *containers: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"uid": "uid-1", "name": "p", "namespace": "default",
                         "annotations": {"hami.io/vgpu-node": "mixed", **annotations}},
            "spec": {"containers": list(containers)}, "status": {"phase": "Running"}}


GPU_CONTAINER = container("gpu", limits={"nvidia.com/gpu": "1"})
DCU_CONTAINER = container("dcu", limits={"hygon.com/dcunum": "1"})
GPU_GRANT = DeviceGrant(uuid="GPU-a", memory_mib=1000, cores=10, vendor="NVIDIA")
DCU_GRANT = DeviceGrant(uuid="DCU-0", memory_mib=2000, cores=100, vendor="DCU")


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;;",
                  "hami.io/dcu-devices-allocated": ";DCU-0,DCU,2000,100:;"},
                 ((GPU_GRANT,), (DCU_GRANT,)), id="positional-entries"),
    # HAMi v2.10 leaves out the empty entries of containers not using NVIDIA or DCU
    # (docs/wire-formats.md#pod-device-annotation).
    pytest.param({"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;",
                  "hami.io/dcu-devices-allocated": "DCU-0,DCU,2000,100:;"},
                 ((GPU_GRANT,), (DCU_GRANT,)), id="hami-compact-form"),
    pytest.param({"hami.io/dcu-devices-allocated": "DCU-0,DCU,2000,100:;"}, ((), (DCU_GRANT,)),
                 id="hami-compact-dcu-only"),
    pytest.param({"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;",
                  "hami.io/dcu-devices-allocated": ";DCU-0,DCU,2000,100:;"},
                 ((GPU_GRANT,), (DCU_GRANT,)), id="one-compact-one-positional"),
])
def test_pod_usage_reads_every_family_allocated_annotation(annotations: dict[str, str],
                                                           expected: tuple[tuple[DeviceGrant, ...], ...]) -> None:
    usage = pod_usage(held_pod(annotations, GPU_CONTAINER, DCU_CONTAINER))
    assert usage is not None
    assert usage.grants == expected
    assert dict(usage.booking) == {grant.uuid: DeviceUsage(1, grant.memory_mib, grant.cores)
                                   for entry in expected for grant in entry}


@pytest.mark.parametrize(("annotations", "message"), [
    pytest.param({"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;;",
                  "hami.io/dcu-devices-allocated": ";DCU-0,DCU,x,100:;"},
                 "hami.io/dcu-devices-allocated: container 1 device 0", id="garbage-dcu-entry"),
    pytest.param({"hami.io/dcu-devices-allocated": "DCU-0,DCU,2000,100:DCU-1,DCU,2000,100:;"},
                 "hami.io/dcu-devices-allocated: container 1 holds 2 devices but asks for 1 hygon.com/dcunum",
                 id="more-dcus-than-asked"),
    pytest.param({"hami.io/dcu-devices-allocated": "DCU-0,DCU,2000,100:;;;"},
                 "hami.io/dcu-devices-allocated: 3 container entries for a pod with 2 containers",
                 id="more-entries-than-containers"),
])
def test_an_unreadable_family_allocation_names_its_key(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pod_usage(held_pod(annotations, GPU_CONTAINER, DCU_CONTAINER))


def test_pod_usage_reads_iluvatar_keys_only_when_iluvatar_is_enabled() -> None:
    pod = held_pod({"hami.io/MR-V100-devices-allocated": "ILU-0,MR-V100,2048,0:;"},
                   container("ilu", limits={"iluvatar.ai/MR-V100-vgpu": "1"}))
    assert pod_usage(pod, catalog=DEFAULT_CATALOG) is None
    usage = pod_usage(pod, catalog=FULL_CATALOG)
    assert usage is not None
    assert usage.grants == ((DeviceGrant(uuid="ILU-0", memory_mib=2048, cores=0, vendor="MR-V100"),),)


# --- a broken family beside a good one -------------------------------------------------------------------------

BAD_DCU = "DCU-0,4,notanint,100,DCU-BW100,0,true:"
DCU_PARSE_ERROR = "hami.io/node-dcu-register: device 0 (character 0): devmem 'notanint' is not an integer"


def test_a_malformed_dcu_register_leaves_nvidia_usable() -> None:
    state = node_state(node_record(mixed_node(nvidia=GOOD_NVIDIA, dcu=BAD_DCU)), now=0.0)
    assert state.inventory is not None
    assert [device.uuid for device in state.inventory.devices] == ["GPU-a"]
    assert dict(state.inventory.broken) == {"DCU": DCU_PARSE_ERROR}
    assert state.error == DCU_PARSE_ERROR


@pytest.mark.parametrize(("limits", "expected"), [
    pytest.param({"nvidia.com/gpu": "1"}, ("GPU-a",), id="nvidia-pod-placed"),
    pytest.param({"hygon.com/dcunum": "1"}, f"DCU: InvalidRegisterAnnotation: {DCU_PARSE_ERROR}",
                 id="dcu-pod-told-why"),
    pytest.param({"nvidia.com/gpu": "1", "hygon.com/dcunum": "1"},
                 f"DCU: InvalidRegisterAnnotation: {DCU_PARSE_ERROR}", id="two-family-pod-told-why"),
])
def test_a_broken_family_is_reported_through_choose_node(limits: dict[str, str],
                                                         expected: tuple[str, ...] | str) -> None:
    placement = place(mixed_node(nvidia=GOOD_NVIDIA, dcu=BAD_DCU), [container(limits=limits)])
    if isinstance(placement, Placement):
        assert tuple(grant.uuid for grant in placement.grants[0]) == expected
    else:
        assert placement.reasons == {"mixed": expected}


def test_a_dcu_register_with_a_go_type_error_breaks_only_dcu() -> None:
    bad_json = '[{"id":"DCU-0","count":"4","devmem":65520,"devcore":100,"type":"DCU-BW100","health":true}]'
    state = node_state(node_record(mixed_node(nvidia=GOOD_NVIDIA, dcu=bad_json)), now=0.0)
    assert state.inventory is not None
    assert "field 'count' is a string" in state.inventory.broken["DCU"]
    assert [device.family for device in state.inventory.devices] == ["NVIDIA"]


def test_a_node_whose_only_family_is_broken_has_no_inventory() -> None:
    state = node_state(node_record(mixed_node(dcu=BAD_DCU)), now=0.0)
    assert state.inventory is None
    assert state.error == DCU_PARSE_ERROR


def test_names_of_the_mig_reasons_are_hami_style() -> None:
    assert (names.CARD_MIG_TOPOLOGY_INFEASIBLE, names.CARD_MIG_LEGACY_GEOMETRY) == (
        "CardMigTopologyInfeasible", "CardMigLegacyGeometry")
