"""Ascend NPUs in the core (docs/device-families.md#ascend-npus): the families, their config, the fit, HCCS groups and
910C pairs.

Covers: ``build_catalog(enable={"ascend"})`` adding the seven chips of HAMi's chart with their keys, resources and
templates, and the chart's ``vnpus`` section building the same families; ``vnpus`` overrides (templates, names,
``hamiVnpuCore``, ``superPod``) and every refusal naming its key; template rounding per chip; ``custominfo.NetworkID``
decoded (numbers only) and HCCS grouping only when every NPU of the chip reports one; HAMi's ``TestDevices_Fit`` table
for every chip (hard split, soft split and ``ModeNotFit``, UUID pins, mutex), ``TestDevices_Fit_910C`` and the 910C
pairing tests; an 8-NPU 910B node with two HCCS groups (a 4-NPU job inside one group, filling from the largest group,
ties to the lower id, shortfalls); the node-score term under binpack and spread, its bound from a node's aggregates,
and the bounded search choosing what fitting every node would (random clusters); a request of one chip never taking
another chip's NPUs; the ``huawei.com/<CW>`` RuntimeInfo (HAMi's ``Test_PatchAnnotations*``) and ``predicate-time``;
HAMi's ``Test_GenerateResourceRequests*`` (count, memory × memoryFactor, soft-split cores, bytes refused).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hami_web.core.capabilities import group_score_bound
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import NO_NETWORK, Device, decode_register, encode_register_json
from hami_web.core.families import DeviceConfigError, ascend, build_catalog, parse_device_config
from hami_web.core.families.ascend import DEFAULT_CHIPS
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import DeviceGrant, bind_annotations, booking_annotations
from hami_web.core.groups import MODULE_PAIRS, NETWORK_GROUPS
from hami_web.core.options import PodOptions, pod_options
from hami_web.core.requests import ContainerRequest, PodRequest, RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view
from hami_web.state.nodes import node_record, node_state

CATALOG = build_catalog(enable={"ascend"})
CHIPS = ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910B4-1", "Ascend310P", "Ascend910C")
CHART_CONFIG = Path(__file__).parents[1] / "fixtures" / "hami-v2.10-device-config.yaml"


def npu(uuid: str, cw: str, *, index: int = 0, count: int = 100, memory_mib: int = 1280, cores: int = 100,
        healthy: bool = True, network: int = NO_NETWORK, type_: str = "") -> Device:
    """An NPU as HAMi's test tables write a DeviceUsage (ID, Index, Count, Totalmem, Totalcore, Health, NetworkID)."""
    return Device(uuid=uuid, index=index, count=count, memory_mib=memory_mib, cores=cores, type=type_ or cw,
                  healthy=healthy, family=cw, network=network)


def view_of(devices: Sequence[Device], used: Mapping[str, tuple[int, int, int]] | None = None, *,
            node: str = "node-1", node_annotations: Mapping[str, str] | None = None) -> NodeView:
    """The node as the cache builds it: each chip's devices written as its JSON register annotation and read back."""
    annotations = dict(node_annotations or {})
    for cw in dict.fromkeys(device.family for device in devices):
        family = CATALOG[cw]
        annotations[family.register_key] = encode_register_json(d for d in devices if d.family == cw)
        annotations[family.handshake_key] = "Reported_2026.08.21 06:20:39"
    state = node_state(node_record({"metadata": {"name": node, "annotations": annotations}}, catalog=CATALOG), now=0,
                       catalog=CATALOG)
    assert state.inventory is not None, state.error
    usage = {uuid: DeviceUsage(*row) for uuid, row in (used or {}).items()}
    return build_node_view(state.inventory, usage)


def ask(cw: str, count: int = 1, *, memory_mib: int = 0, memory_percent: int = 100, cores: int = 0,
        name: str = "main") -> ContainerRequest:
    return ContainerRequest(name=name, init=False, count=count, memory_mib=memory_mib, memory_percent=memory_percent,
                            cores=cores, family=cw, grouped=CATALOG[cw].grouping is NETWORK_GROUPS)


def options(annotations: Mapping[str, str] | None = None, *, node_policy: str = "binpack",
            gpu_policy: str = "spread") -> PodOptions:
    return pod_options(annotations or {}, node_policy=node_policy, gpu_policy=gpu_policy, catalog=CATALOG)


def outcome(result: PodFit | FitFailure) -> tuple[str, ...] | str:
    if isinstance(result, FitFailure):
        return result.summary()
    return tuple(grant.uuid for grant in result.grants[0])


# --- the families -------------------------------------------------------------------------------------------------

def test_enable_ascend_adds_the_seven_chips_of_hamis_chart() -> None:
    assert not any(family.kind == "ascend" for family in build_catalog())
    assert sorted(family.cw for family in CATALOG if family.kind == "ascend") == sorted(CHIPS)


@pytest.mark.parametrize("cw", CHIPS)
def test_each_chip_derives_its_keys_and_resources_from_its_common_word(cw: str) -> None:
    family = CATALOG[cw]
    assert (family.register_key, family.handshake_key) == (f"hami.io/node-register-{cw}",
                                                           f"hami.io/node-handshake-{cw}")
    assert (family.to_allocate_key, family.allocated_key) == (f"hami.io/{cw}-devices-to-allocate",
                                                              f"hami.io/{cw}-devices-allocated")
    assert (family.use_uuid_key, family.nouse_uuid_key) == (f"hami.io/use-{cw}-uuid", f"hami.io/no-use-{cw}-uuid")
    assert family.resources.managed() == (f"huawei.com/{cw}", f"huawei.com/{cw}-memory", f"huawei.com/{cw}-core")
    assert family.lock_key == "hami.io/mutex.lock"
    assert family.admission.visible_devices_env == "ASCEND_VISIBLE_DEVICES"
    assert family.grouping is (MODULE_PAIRS if cw == "Ascend910C"
                               else NETWORK_GROUPS if cw.startswith("Ascend910") else None)


@pytest.mark.parametrize(("cw", "allocatable", "capacity", "templates"), [
    ("Ascend910A", 32768, 32768, {"vir02": 2184, "vir04": 4369, "vir08": 8738, "vir16": 17476}),
    ("Ascend910B2", 65536, 65536, {"vir03_1c_8g": 8192, "vir06_1c_16g": 16384, "vir12_3c_32g": 32768}),
    ("Ascend910B3", 65536, 65536, {"vir05_1c_16g": 16384, "vir10_3c_32g": 32768}),
    ("Ascend910B4-1", 65536, 65536, {"vir05_1c_16g": 16384, "vir10_3c_32g": 32768}),
    ("Ascend910C", 65536, 65536, {"vir05_1c_16g": 16384, "vir10_3c_32g": 32768}),
    ("Ascend910B4", 32768, 32768, {"vir05_1c_8g": 8192, "vir10_3c_16g": 16384}),
    ("Ascend310P", 21527, 24576, {"vir01": 3072, "vir02": 6144, "vir04": 12288}),
])
def test_chart_defaults_per_chip(cw: str, allocatable: int, capacity: int, templates: dict[str, int]) -> None:
    memory = CATALOG[cw].templates
    assert memory is not None
    assert (memory.allocatable_mib, memory.capacity_mib) == (allocatable, capacity)
    assert {t.name: t.memory_mib for t in memory.templates} == templates


def test_the_charts_vnpus_section_builds_the_same_families() -> None:
    config = parse_device_config(yaml.safe_load(CHART_CONFIG.read_text()))
    assert config.get(ascend.SPEC).chips is not None
    assert sorted(config.get(ascend.SPEC).chips, key=lambda chip: chip.common_word) == sorted(
        DEFAULT_CHIPS, key=lambda chip: chip.common_word)
    assert config.get(ascend.SPEC).hami_vnpu_core is False
    assert build_catalog(config=config, enable={"ascend"}) == CATALOG


def test_vnpus_overrides_reach_the_family() -> None:
    config = parse_device_config({"vnpus": {"hamiVnpuCore": True, "configs": [
        {"commonWord": "Ascend910B3", "resourceName": "huawei.com/npu", "memoryFactor": 2,
         "runtimeClassName": "ascend", "overwriteEnv": "true",
         "templates": [{"name": "big", "memory": 32768}, {"name": "small", "memory": 8192}]},
        {"commonWord": "Ascend950", "chipName": "950", "memoryAllocatable": 100000, "memoryCapacity": 120000,
         "superPod": True}]}})
    catalog = build_catalog(config=config, enable={"ascend"})
    assert [f.cw for f in catalog if f.kind == "ascend"] == ["Ascend910B3", "Ascend950"]
    b3 = catalog["Ascend910B3"]
    assert b3.resources.count == "huawei.com/npu" and b3.resources.memory == "huawei.com/Ascend910B3-memory"
    assert b3.memory_factor == 2 and b3.soft_split_allowed({})
    assert (b3.admission.runtime_class_name, b3.admission.overwrite_env) == ("ascend", True)
    assert b3.templates is not None and [t.name for t in b3.templates.templates] == ["small", "big"]
    assert b3.templates.allocatable_mib == 65536  # the chart's value for a chip it knows
    other = catalog["Ascend950"]
    assert other.templates is not None and other.templates.round_up(110000) == (100000, "")
    assert other.admission.pair_count is False  # pairs are 910C's module design, whatever superPod says


@pytest.mark.parametrize(("document", "message"), [
    pytest.param({"vnpus": []}, "vnpus: expected a map, got a list", id="section-not-a-map"),
    pytest.param({"vnpus": {"configs": {}}}, "vnpus.configs: expected a list", id="configs-not-a-list"),
    pytest.param({"vnpus": {"configs": [{"chipName": "x"}]}}, "vnpus.configs[0].commonWord", id="no-common-word"),
    pytest.param({"vnpus": {"configs": [{"commonWord": "Ascend999"}]}},
                 "vnpus.configs[0]: chip Ascend999 is not one of HAMi's chart; give its memoryAllocatable",
                 id="unknown-chip-without-memory"),
    pytest.param({"vnpus": {"configs": [{"commonWord": "Ascend910B3", "templates": [{"name": "x"}]}]}},
                 "vnpus.configs[0].templates[0].memory: a template needs its memory", id="template-without-memory"),
    pytest.param({"vnpus": {"configs": [{"commonWord": "Ascend910B3", "templates": [{"memory": 5}]}]}},
                 "vnpus.configs[0].templates[0].name: a template needs a name", id="template-without-name"),
    pytest.param({"vnpus": {"configs": [{"commonWord": "Ascend910B3", "memoryCapacity": 100}]}},
                 "memoryCapacity 100 is below memoryAllocatable 65536", id="capacity-below-allocatable"),
    pytest.param({"vnpus": {"configs": [{"commonWord": "Ascend910B3", "memoryAllocatable": "64Gi"}]}},
                 "vnpus.configs[0].memoryAllocatable: expected an integer", id="memory-as-text"),
    pytest.param({"vnpus": {"hamiVnpuCore": "yes"}}, "vnpus.hamiVnpuCore: expected true or false", id="bad-switch"),
])
def test_bad_vnpus_config_names_the_key(document: object, message: str) -> None:
    with pytest.raises(DeviceConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_device_config(document)


def test_two_chips_with_one_common_word_are_refused() -> None:
    # HAMi's TestDevices_Fit config lists 910B4 and 910B4-1 both as Ascend910B4: one key, two meanings.
    config = parse_device_config({"vnpus": {"configs": [{"commonWord": "Ascend910B4"}, {"commonWord": "Ascend910B4"}]}})
    with pytest.raises(DeviceConfigError, match="common word Ascend910B4 names two device families"):
        build_catalog(config=config, enable={"ascend"})


@pytest.mark.parametrize(("cw", "memory", "expected"), [
    ("Ascend910B3", 10000, (16384, "vir05_1c_16g")),
    ("Ascend910B3", 16384, (16384, "vir05_1c_16g")),
    ("Ascend910B3", 16385, (32768, "vir10_3c_32g")),
    ("Ascend910B3", 40000, (65536, "")),
    ("Ascend910B3", 65536, (65536, "")),
    ("Ascend910B3", 65537, None),
    ("Ascend310P", 1, (3072, "vir01")),
    ("Ascend310P", 13000, (21527, "")),
    ("Ascend310P", 24576, (21527, "")),
    ("Ascend310P", 24577, None),
    ("Ascend910A", 2185, (4369, "vir04")),
    ("Ascend910A", 20000, (32768, "")),  # HAMi Test_MutateAdmission "not within the template scope"
    ("Ascend910A", 40000, None),  # HAMi Test_MutateAdmission "resourcememoryname is invalid"
    ("Ascend910B2", 20000, (32768, "vir12_3c_32g")),
    ("Ascend910B4", 9000, (16384, "vir10_3c_16g")),
    ("Ascend910B4-1", 9000, (16384, "vir05_1c_16g")),
    ("Ascend910C", 32768, (32768, "vir10_3c_32g")),
])
def test_memory_rounds_to_the_smallest_template_else_the_whole_npu(cw: str, memory: int,
                                                                     expected: tuple[int, str] | None) -> None:
    templates = CATALOG[cw].templates
    assert templates is not None
    assert templates.round_up(memory) == expected


# --- the node's NPUs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("custom", "network"), [
    ('{"NetworkID":0}', 0), ('{"NetworkID":1}', 1), ('{"NetworkID":1.0}', 1), ('{"NetworkID":1.7}', 1),
    ('{}', NO_NETWORK), ('null', NO_NETWORK), ('{"NetworkID":"1"}', NO_NETWORK), ('{"NetworkID":-1}', NO_NETWORK),
    ('{"NetworkID":null}', NO_NETWORK), ('{"NetworkID":true}', NO_NETWORK), ('{"Other":3}', NO_NETWORK),
])
def test_network_id_is_read_from_custominfo_numbers(custom: str, network: int) -> None:
    text = ('[{"id":"Ascend910B3-0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,'
            f'"custominfo":{custom}}}]')
    assert decode_register(text, family="Ascend910B3")[0].network == network


def test_spec_register_example_decodes() -> None:
    text = ('[{"id":"Ascend910B3-0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,'
            '"custominfo":{"NetworkID":0}}]')
    assert decode_register(text, family="Ascend910B3") == (Device(
        uuid="Ascend910B3-0", index=0, count=4, memory_mib=65536, cores=20, type="Ascend910B3", family="Ascend910B3",
        network=0),)


def test_a_custominfo_that_is_not_an_object_fails_the_annotation() -> None:
    from hami_web.core.devices import AnnotationError
    with pytest.raises(AnnotationError, match="custominfo"):
        decode_register('[{"id":"a","health":true,"custominfo":[1]}]', family="Ascend910B3")


def eight_910b(*, networks: Sequence[int] = (0, 0, 0, 0, 1, 1, 1, 1), cw: str = "Ascend910B3") -> list[Device]:
    return [npu(f"{cw}-{i}", cw, index=i, count=4, memory_mib=65536, cores=20, network=network)
            for i, network in enumerate(networks)]


def test_hccs_grouping_applies_only_when_every_npu_reports_its_group() -> None:
    assert view_of(eight_910b()).inventory.grouping == {"Ascend910B3": NETWORK_GROUPS}
    partial = eight_910b()
    partial[3] = replace(partial[3], network=NO_NETWORK)
    assert view_of(partial).inventory.grouping == {}
    assert view_of([npu("c-0", "Ascend910C", index=0, network=0)]).inventory.grouping == {"Ascend910C": MODULE_PAIRS}
    assert view_of([npu("p-0", "Ascend310P", network=0)]).inventory.grouping == {}


@pytest.mark.parametrize(("annotations", "hami_vnpu_core", "allowed"), [
    ({}, False, False), ({}, True, True), ({"hami-vnpu-core": "true"}, False, True),
    ({"hami-vnpu-core": "false"}, True, False), ({"hami-vnpu-core": "True"}, False, False),
])
def test_soft_split_is_allowed_by_the_node_annotation_else_the_config(annotations: dict[str, str],
                                                                      hami_vnpu_core: bool, allowed: bool) -> None:
    catalog = build_catalog(config=parse_device_config({"vnpus": {"hamiVnpuCore": hami_vnpu_core}}),
                            enable={"ascend"})
    annotations = {**annotations, "hami.io/node-register-Ascend910B3": encode_register_json(eight_910b())}
    state = node_state(node_record({"metadata": {"name": "n", "annotations": annotations}}, catalog=catalog), now=0,
                       catalog=catalog)
    assert state.inventory is not None
    assert ("Ascend910B3" in state.inventory.soft_split) is allowed


# --- HAMi's TestDevices_Fit, for every chip -----------------------------------------------------------------------

HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}
NODE_HAMI_CORE = {"hami-vnpu-core": "true"}

# (id, devices as (ID, Index, Used, Count, Usedmem, Totalmem, Totalcore, Usedcores, Health), request as
# (Nums, Memreq, MemPercentagereq, Coresreq), pod annotations, node annotations, expected).
FIT_CASES = [
    # HAMi picks dev-1 (it visits devices from the last); ours is spread order, ties by index then UUID.
    ("fit success", [("dev-0", 0, 0, 100, 0, 128, 100, 0, True), ("dev-1", 0, 0, 100, 0, 128, 100, 0, True)],
     (1, 64, 0, 50), {}, {}, ("dev-0",)),
    ("fit fail: memory not enough", [("dev-0", 0, 0, 100, 0, 128, 100, 0, True)], (1, 512, 0, 50), {}, {},
     "1/1 CardInsufficientMemory"),
    ("fit fail: core not enough", [("dev-0", 0, 0, 100, 0, 1024, 100, 100, True)], (1, 512, 0, 50), {}, {},
     "1/1 CardInsufficientCore"),
    # HAMi asks 2 of 1 device: we say NodeInsufficientDevice for that (docs/scheduling-rules.md#filter-reasons),
    # so one device is asked here to reach the UUID check.
    ("fit fail: user assign use uuid mismatch", [("dev-1", 0, 0, 100, 0, 1280, 100, 0, True)], (1, 512, 0, 50),
     {"use": "dev-0"}, {}, "1/1 CardUuidMismatch"),
    ("fit fail: user assign no use uuid match", [("dev-0", 0, 0, 100, 0, 1280, 100, 0, True)], (1, 512, 0, 50),
     {"nouse": "dev-0"}, {}, "1/1 CardUuidMismatch"),
    ("fit fail: card overused", [("dev-0", 0, 100, 100, 0, 1280, 100, 0, True)], (1, 512, 0, 50), {}, {},
     "1/1 CardTimeSlicingExhausted"),
    # "core limit can't exceed 100": the request is clamped to 100 when it is read.
    ("fit success: but core limit can't exceed 100", [("dev-0", 0, 0, 100, 0, 1280, 100, 0, True)],
     (1, 512, 0, 100), {}, {}, ("dev-0",)),
    ("fit fail:  card exclusively", [("dev-0", 0, 20, 100, 0, 1280, 100, 0, True)], (1, 512, 0, 100), {}, {},
     "1/1 ExclusiveDeviceAllocateConflict"),
    ("fit fail:  CardComputeUnitsExhausted", [("dev-0", 0, 20, 100, 0, 1280, 100, 100, True)], (1, 512, 0, 0), {},
     {}, "1/1 CardComputeUnitsExhausted"),
    ("fit fail:  AllocatedCardsInsufficientRequest (two devices, one used up)",
     [("dev-0", 0, 20, 100, 0, 1280, 100, 10, True), ("dev-1", 1, 100, 100, 0, 1280, 100, 0, True)],
     (2, 512, 0, 20), {}, {}, "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"),
    ("fit success:  memory percentage", [("dev-0", 0, 20, 100, 0, 1280, 100, 10, True)], (1, 0, 10, 20), {}, {},
     ("dev-0",)),
    ("fit fail: hami-core pod on legacy node (ModeNotFit)", [("dev-0", 0, 0, 100, 0, 32768, 100, 0, True)],
     (1, 15360, 0, 20), HAMI_CORE, {}, "1/1 ModeNotFit"),
    ("fit ok: annotation-less pod on hami-core node follows node", [("dev-0", 0, 0, 100, 0, 32768, 100, 0, True)],
     (1, 8738, 0, 0), {}, NODE_HAMI_CORE, ("dev-0",)),
    ("fit fail: whole-card hami-core pod on legacy node (ModeNotFit)",
     [("dev-0", 0, 0, 100, 0, 32768, 100, 0, True)], (1, 32768, 0, 0), HAMI_CORE, {}, "1/1 ModeNotFit"),
    ("fit fail: memory-less hami-core pod on legacy node (ModeNotFit)",
     [("dev-0", 0, 0, 100, 0, 32768, 100, 0, True)], (1, 0, 100, 0), HAMI_CORE, {}, "1/1 ModeNotFit"),
    ("fit success: whole-card hami-core pod on hami-core node", [("dev-0", 0, 0, 100, 0, 32768, 100, 0, True)],
     (1, 32768, 0, 0), HAMI_CORE, NODE_HAMI_CORE, ("dev-0",)),
    ("fit success: whole-card legacy pod on hami-core node", [("dev-0", 0, 0, 100, 0, 32768, 100, 0, True)],
     (1, 32768, 0, 0), {}, NODE_HAMI_CORE, ("dev-0",)),
    ("mutex policy rejects used device", [("dev-0", 0, 1, 100, 0, 128, 100, 0, True)], (1, 64, 0, 50),
     {"hami.io/gpu-scheduler-policy": "mutex"}, {}, "1/1 ExclusiveDeviceAllocateConflict"),
    ("fit fail: CardNotHealth", [("dev-0", 0, 0, 100, 0, 1280, 100, 0, False)], (1, 512, 0, 50), {}, {},
     "1/1 CardNotHealth"),
    # HAMi: 3 of 2 devices → "2/2 AllocatedCardsInsufficientRequest"; we name the node-level cause.
    ("fit fail: partial allocation for multiple cards",
     [("dev-0", 0, 0, 100, 0, 1280, 100, 0, True), ("dev-1", 1, 0, 100, 0, 1280, 100, 0, True)], (3, 512, 0, 20),
     {}, {}, "3/2 NodeInsufficientDevice"),
]


@pytest.mark.parametrize("cw", [cw for cw in CHIPS if cw != "Ascend910C"])
@pytest.mark.parametrize(("case", "rows", "request_row", "pod_annotations", "node_annotations", "expected"),
                         [pytest.param(*case, id=case[0]) for case in FIT_CASES])
def test_hami_devices_fit_table(cw: str, case: str, rows: list[tuple[str, int, int, int, int, int, int, int, bool]],
                                request_row: tuple[int, int, int, int], pod_annotations: dict[str, str],
                                node_annotations: dict[str, str], expected: tuple[str, ...] | str) -> None:
    """HAMi v2.10.0 pkg/device/ascend/device_test.go: TestDevices_Fit (run for every chip, as HAMi does)."""
    devices = [npu(uuid, cw, index=index, count=count, memory_mib=total_mem, cores=total_core, healthy=healthy)
               for uuid, index, _, count, _, total_mem, total_core, _, healthy in rows]
    used = {uuid: (tasks, used_mem, used_cores) for uuid, _, tasks, _, used_mem, _, _, used_cores, _ in rows}
    annotations = {f"hami.io/use-{cw}-uuid" if key == "use" else f"hami.io/no-use-{cw}-uuid" if key == "nouse"
                   else key: value for key, value in pod_annotations.items()}
    count, memory, percent, cores = request_row
    result = fit_pod(PodRequest(containers=(ask(cw, count, memory_mib=memory, memory_percent=percent or 100,
                                                cores=cores),)),
                     view_of(devices, used, node_annotations=node_annotations), options(annotations))
    assert outcome(result) == expected


def test_type_mismatch_a_chip_takes_only_devices_whose_type_contains_its_word() -> None:
    """TestDevices_Fit "fit fail: type mismatch": a device of another type in the chip's own inventory."""
    view = view_of([npu("dev-0", "Ascend910B3", type_="OtherType")])
    assert outcome(fit_pod(PodRequest(containers=(ask("Ascend910B3", memory_mib=512),)), view,
                           options())) == "1/1 CardTypeMismatch"


def test_a_910b4_request_never_takes_910b4_1_npus() -> None:
    """HAMi offers Ascend910B4 requests every device whose type contains the word, Ascend910B4-1 included; ours
    only the Ascend910B4 inventory's."""
    view = view_of([npu("b41-0", "Ascend910B4-1", memory_mib=65536)])
    result = fit_pod(PodRequest(containers=(ask("Ascend910B4", memory_mib=8192),)), view, options())
    assert outcome(result) == "Ascend910B4: 1/0 NodeInsufficientDevice"


def test_soft_split_books_cores_out_of_100_per_npu_whatever_devcore_says() -> None:
    devices = [npu("npu-0", "Ascend910B3", count=4, memory_mib=65536, cores=20)]
    view = view_of(devices, {"npu-0": (1, 16384, 60)}, node_annotations=NODE_HAMI_CORE)
    request = PodRequest(containers=(ask("Ascend910B3", memory_mib=10000, cores=40),))
    fitted = fit_pod(request, view, options(HAMI_CORE))
    assert isinstance(fitted, PodFit)
    assert fitted.grants[0] == (DeviceGrant("npu-0", 10000, 40, "Ascend910B3"),)
    assert fitted.grants[0][0].soft_split
    too_much = PodRequest(containers=(ask("Ascend910B3", memory_mib=10000, cores=41),))
    assert outcome(fit_pod(too_much, view, options(HAMI_CORE))) == "1/1 CardInsufficientCore"
    # A hard-split pod on the same NPU books no cores; HAMi then compares devcore 20 with the 60 soft cores booked.
    assert outcome(fit_pod(PodRequest(containers=(ask("Ascend910B3", memory_mib=16384),)), view,
                           options())) == "1/1 CardInsufficientCore"
    fresh = view_of(devices, node_annotations=NODE_HAMI_CORE)
    hard = fit_pod(PodRequest(containers=(ask("Ascend910B3", memory_mib=16384),)), fresh, options())
    assert isinstance(hard, PodFit) and hard.grants[0][0].cores == 0 and not hard.grants[0][0].soft_split


def test_mode_not_fit_counts_every_npu_of_the_node() -> None:
    view = view_of(eight_910b())
    result = fit_pod(PodRequest(containers=(ask("Ascend910B3", 2, memory_mib=1000, cores=10),)), view,
                     options(HAMI_CORE))
    assert outcome(result) == "8/8 ModeNotFit"


# --- HCCS groups --------------------------------------------------------------------------------------------------

def test_hami_schedule_by_network_id() -> None:
    """TestDevices_Fit "fit success. schedule by NetworkID": dev-1 and dev-2 share group 1 (HAMi lists them in its
    backward visit order, dev-2 first; ours in policy order)."""
    devices = [npu("dev-0", "Ascend910B2", network=0, memory_mib=128), npu("dev-1", "Ascend910B2", network=1,
                                                                          memory_mib=128),
               npu("dev-2", "Ascend910B2", network=1, memory_mib=128)]
    result = fit_pod(PodRequest(containers=(ask("Ascend910B2", 2, memory_mib=64, cores=50),)), view_of(devices),
                     options())
    assert outcome(result) == ("dev-1", "dev-2")


@pytest.mark.parametrize(("used", "count", "expected"), [
    pytest.param({}, 4, ("Ascend910B3-0", "Ascend910B3-1", "Ascend910B3-2", "Ascend910B3-3"),
                 id="4-npus-inside-group-0-ties-to-the-lower-id"),
    pytest.param({"Ascend910B3-1": (4, 0, 0)}, 4,
                 ("Ascend910B3-4", "Ascend910B3-5", "Ascend910B3-6", "Ascend910B3-7"),
                 id="group-0-short-takes-group-1"),
    pytest.param({"Ascend910B3-1": (4, 0, 0)}, 5,
                 ("Ascend910B3-4", "Ascend910B3-5", "Ascend910B3-6", "Ascend910B3-7", "Ascend910B3-0"),
                 id="largest-group-then-the-next"),
    pytest.param({}, 8, tuple(f"Ascend910B3-{i}" for i in range(8)), id="whole-node"),
    pytest.param({"Ascend910B3-0": (1, 0, 0)}, 1, ("Ascend910B3-1",), id="one-npu-first-in-spread-order"),
    pytest.param({f"Ascend910B3-{i}": (4, 0, 0) for i in range(5)}, 4,
                 "3/8 AllocatedCardsInsufficientRequest, 5/8 CardTimeSlicingExhausted", id="short"),
])
def test_hccs_fills_from_the_largest_group(used: dict[str, tuple[int, int, int]], count: int,
                                           expected: tuple[str, ...] | str) -> None:
    result = fit_pod(PodRequest(containers=(ask("Ascend910B3", count, memory_mib=65536),)),
                     view_of(eight_910b(), used), options())
    assert outcome(result) == expected


def test_one_npu_under_binpack_is_the_fullest() -> None:
    view = view_of(eight_910b(), {"Ascend910B3-6": (1, 16384, 0)})
    result = fit_pod(PodRequest(containers=(ask("Ascend910B3", memory_mib=16384),)), view,
                     options(gpu_policy="binpack"))
    assert outcome(result) == ("Ascend910B3-6",)


@pytest.mark.parametrize(("containers", "score"), [
    pytest.param([4], 10.0, id="one-group"), pytest.param([1, 1], 20.0, id="two-single-npu-containers"),
    pytest.param([4, 4], 20.0, id="two-containers-each-in-a-group"),
    pytest.param([6], 10 * 4 / 6, id="six-spans-both-groups"),
])
def test_group_score_is_ten_times_each_containers_largest_group_share(containers: list[int], score: float) -> None:
    request = PodRequest(containers=tuple(ask("Ascend910B3", count, memory_mib=65536, name=f"c{n}")
                                          for n, count in enumerate(containers)))
    result = fit_pod(request, view_of(eight_910b()), options())
    assert isinstance(result, PodFit)
    assert result.group_score == pytest.approx(score)


def test_no_group_score_without_network_ids_nor_for_other_chips() -> None:
    plain = [replace(device, network=NO_NETWORK) for device in eight_910b()]
    result = fit_pod(PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=65536),)), view_of(plain), options())
    assert isinstance(result, PodFit) and result.group_score == 0
    assert outcome(result) == tuple(f"Ascend910B3-{i}" for i in range(4))


@pytest.mark.parametrize("node_policy", ["binpack", "spread"])
def test_the_node_that_keeps_the_job_in_one_group_wins(node_policy: str) -> None:
    """node-a is fuller (higher score) but must split a 4-NPU job over both groups; node-b holds it in one group.
    Binpack adds the term (10 beats node-a's 10 × 4/6·… ), spread subtracts it: node-b either way."""
    split = {f"Ascend910B3-{i}": (4, 0, 0) for i in (0, 1, 4, 5)}
    node_a = view_of(eight_910b(), {**split}, node="node-a")
    node_b = view_of(eight_910b(), {f"Ascend910B3-{i}": (4, 0, 0) for i in (0, 1, 2, 3)}, node="node-b")
    assert node_a.score == node_b.score
    request = PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=65536),))
    placed = choose_node(request, options(node_policy=node_policy), ["node-a", "node-b"],
                         {"node-a": node_a, "node-b": node_b})
    assert isinstance(placed, Placement) and placed.node == "node-b"
    assert placed.node_score == pytest.approx(node_b.score + (10 if node_policy == "binpack" else -10))


def test_binpack_still_prefers_a_much_fuller_node_over_a_better_group() -> None:
    # node-full is 1.5 points of score ahead per NPU used up; the term is worth at most 10.
    full = view_of(eight_910b(), {f"Ascend910B3-{i}": (4, 65536, 0) for i in (0, 1, 4, 5)}, node="node-full")
    empty = view_of(eight_910b(), node="node-empty")
    request = PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=65536),))
    placed = choose_node(request, options(), ["node-empty", "node-full"], {"node-full": full, "node-empty": empty})
    assert isinstance(placed, Placement)
    assert full.score + 5 > empty.score + 10
    assert placed.node == "node-full"


def test_the_search_stops_once_no_node_can_beat_the_best() -> None:
    """Equal empty nodes: the first already earns the full term, so it wins without fitting the others (their
    fit memo stays empty; the winner's holds its fit)."""
    views = {f"node-{n}": view_of(eight_910b(), node=f"node-{n}") for n in range(5)}
    request = PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=65536),))
    placed = choose_node(request, options(), sorted(views), views)
    assert isinstance(placed, Placement) and placed.node == "node-0"
    assert views["node-0"].fits and all(not views[f"node-{n}"].fits for n in range(1, 5))


def test_no_node_fits_gives_every_node_a_reason() -> None:
    views = {"node-a": view_of(eight_910b(), {f"Ascend910B3-{i}": (4, 0, 0) for i in range(6)}, node="node-a"),
             "node-b": view_of(eight_910b(), node="node-b")}
    request = PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=65536),))
    placed = choose_node(request, options(HAMI_CORE), ["node-a", "node-b", "ghost"], views)
    assert isinstance(placed, NoPlacement)
    assert placed.reasons == {"node-a": "8/8 ModeNotFit", "node-b": "8/8 ModeNotFit", "ghost": "node unregistered"}


# --- 910C module pairs --------------------------------------------------------------------------------------------

def c910(*indices: int, count: int = 1, memory_mib: int = 32000, cores: int = 0) -> list[Device]:
    return [npu(f"dev-{i}", "Ascend910C", index=i, count=count, memory_mib=memory_mib, cores=cores, network=0)
            for i in indices]


@pytest.mark.parametrize(("devices", "count", "expected"), [
    # HAMi v2.10.0 pkg/device/ascend/device_test.go: TestDevices_Fit_910C (HAMi lists dev-1 first).
    pytest.param(c910(0, 1, 2, count=100, memory_mib=128, cores=100), 2, ("dev-0", "dev-1"), id="hami-fit-910c"),
    # device_910c_pairing_test.go: TestAscend910C_FitPartialAllocationBug (the reason counts the NPUs that passed).
    pytest.param(c910(0, 1, 2, 4, 6), 4, "5/5 AllocatedCardsInsufficientRequest", id="hami-partial-allocation"),
    # TestAscend910C_FitExactCountBypassBug.
    pytest.param(c910(0, 2), 2, "2/2 AllocatedCardsInsufficientRequest", id="hami-exact-count-two-modules"),
    # TestAscend910C_FitFullPairSucceeds.
    pytest.param(c910(0, 1), 2, ("dev-0", "dev-1"), id="hami-full-pair"),
    # TestComputeBestCombination910C_NoFullPairsReturnsEmpty.
    pytest.param(c910(0, 2, 4, 6), 4, "4/4 AllocatedCardsInsufficientRequest", id="hami-no-full-pairs"),
    pytest.param(c910(0, 1, 2, 3, 4, 5), 4, ("dev-0", "dev-1", "dev-2", "dev-3"), id="lowest-modules-first"),
    pytest.param(c910(0, 1, 2, 3), 3, "4/4 AllocatedCardsInsufficientRequest", id="odd-count-never-pairs"),
    pytest.param(c910(0, 2), 1, ("dev-0",), id="one-npu-needs-no-pair"),
])
def test_910c_takes_whole_module_pairs(devices: list[Device], count: int, expected: tuple[str, ...] | str) -> None:
    result = fit_pod(PodRequest(containers=(ask("Ascend910C", count, memory_mib=128),)), view_of(devices), options())
    assert outcome(result) == expected


def test_910c_pairs_skip_a_module_with_a_used_up_npu() -> None:
    """TestAscend910C_FitWithoutNetworkID_ValidatesPairing, the usage way: module 0 has one NPU taken."""
    devices = [replace(device, network=NO_NETWORK) for device in c910(0, 1, 2, 3)]
    result = fit_pod(PodRequest(containers=(ask("Ascend910C", 2, memory_mib=128),)),
                     view_of(devices, {"dev-1": (1, 0, 0)}), options())
    assert outcome(result) == ("dev-2", "dev-3")


# --- bind annotations ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("grants", "expected"), [
    # HAMi v2.10.0 pkg/device/ascend/device_test.go: Test_PatchAnnotations.
    pytest.param([[DeviceGrant("device-0", 8738, 1, "Ascend910A")]],
                 '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]', id="hami-template"),
    # Test_PatchAnnotations_ZeroCore.
    pytest.param([[DeviceGrant("device-zero-core", 8738, 0, "Ascend910A")]],
                 '[{"UUID":"device-zero-core","temp":"vir08","memory":8738}]', id="hami-zero-core"),
    # Test_PatchAnnotations_VNPUCoreMode (fields in RuntimeInfo's order: UUID, temp, memory, core).
    pytest.param([[DeviceGrant("ascend-uuid-1", 8192, 5, "Ascend910A", soft_split=True)]],
                 '[{"UUID":"ascend-uuid-1","memory":8192,"core":5}]', id="hami-core-has-no-template"),
    pytest.param([[DeviceGrant("a", 32768, 0, "Ascend910A"), DeviceGrant("b", 32768, 0, "Ascend910A")], [],
                  [DeviceGrant("c", 2184, 0, "Ascend910A")]],
                 '[{"UUID":"a","memory":32768},{"UUID":"b","memory":32768},{"UUID":"c","temp":"vir02","memory":2184}]',
                 id="whole-npus-and-containers-in-order"),
])
def test_runtime_info_lists_every_containers_npus(grants: list[list[DeviceGrant]], expected: str) -> None:
    family = CATALOG["Ascend910A"]
    assert family.booking_extras is not None
    assert family.booking_extras(grants) == {"huawei.com/Ascend910A": expected}


def test_the_booking_writes_runtime_info_and_the_bind_predicate_time() -> None:
    grants = ((DeviceGrant("Ascend910B3-0", 16384, 0, "Ascend910B3"),), (DeviceGrant("GPU-0", 1000, 0),))
    catalog = build_catalog(enable={"ascend"})
    booked = booking_annotations(grants, catalog)
    assert booked["huawei.com/Ascend910B3"] == '[{"UUID":"Ascend910B3-0","temp":"vir05_1c_16g","memory":16384}]'
    written = bind_annotations(grants, catalog, now_seconds=42)
    assert written == {**booked, "predicate-time": "42"}
    assert written["hami.io/Ascend910B3-devices-allocated"] == "Ascend910B3-0,Ascend910B3,16384,0:;;"
    assert "predicate-time" not in booked
    nvidia_only = ((DeviceGrant("GPU-0", 1000, 0),),)
    assert bind_annotations(nvidia_only, catalog, now_seconds=42) == booking_annotations(nvidia_only, catalog)


# --- a pod end to end in the core ----------------------------------------------------------------------------------

def test_a_pod_is_read_fitted_and_annotated() -> None:
    pod = {"metadata": {"annotations": {}}, "spec": {"containers": [{"name": "train", "resources": {"limits": {
        "huawei.com/Ascend910B3": "4", "huawei.com/Ascend910B3-memory": "65536"}}}]}}
    request = pod_request(pod, RequestDefaults.of(CATALOG))
    assert request.containers == (ask("Ascend910B3", 4, memory_mib=65536, name="train"),)
    assert request.group_score_reach == 10  # one grouped container: at most 10 (HAMi's weight)
    view = view_of(eight_910b(), {"Ascend910B3-0": (1, 16384, 0)})
    placed = choose_node(request, options(), ["node-1"], {"node-1": view})
    assert isinstance(placed, Placement)
    assert [grant.uuid for grant in placed.grants[0]] == [f"Ascend910B3-{i}" for i in range(4, 8)]
    info = json.loads(booking_annotations(placed.grants, CATALOG)["huawei.com/Ascend910B3"])
    assert info == [{"UUID": f"Ascend910B3-{i}", "memory": 65536} for i in range(4, 8)]


def test_group_score_bound_counts_each_groups_devices_with_the_memory_asked() -> None:
    view = view_of(eight_910b(), {f"Ascend910B3-{i}": (1, 16384, 0) for i in (0, 1, 4, 5, 6)})
    whole = PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=65536),))
    # group 0 has two idle NPUs, group 1 one
    assert group_score_bound(whole, view, "binpack") == pytest.approx(10 * 2 / 4)
    slices = PodRequest(containers=(ask("Ascend910B3", 4, memory_mib=16384),))
    assert group_score_bound(slices, view, "binpack") == 10
    plain = view_of([replace(device, network=NO_NETWORK) for device in eight_910b()])
    assert group_score_bound(whole, plain, "binpack") == 0


@pytest.mark.parametrize("seed", range(12))
def test_the_bounded_search_chooses_what_fitting_every_node_would(seed: int) -> None:
    """The search stops early and skips nodes whose groups cannot win; on random clusters its answer is the node a fit
    of every node ranks first (score ± the group term, ties in rank order)."""
    import random
    rng = random.Random(seed)
    views: dict[str, NodeView] = {}
    for number in range(30):
        used = {f"n{number}-{i}": (slices, slices * 16384, 0) for i in range(8)
                if (slices := rng.choice((0, 0, 1, 2, 4)))}
        devices = [replace(device, uuid=f"n{number}-{device.index}") for device in eight_910b()]
        views[f"node-{number:02d}"] = view_of(devices, used, node=f"node-{number:02d}")
    for count, memory, policy in ((4, 65536, "binpack"), (2, 65536, "spread"), (3, 16384, "binpack"),
                                  (1, 32768, "spread"), (5, 16384, "spread")):
        request = PodRequest(containers=(ask("Ascend910B3", count, memory_mib=memory),))
        chosen = choose_node(request, options(node_policy=policy), sorted(views), views)
        ranked = sorted(views.values(), key=lambda view: (-view.score if policy == "binpack" else view.score,
                                                          view.name))
        best: tuple[float, str] | None = None
        for view in ranked:
            fitted = fit_pod(request, view, options(node_policy=policy))
            if isinstance(fitted, PodFit):
                total = view.score + (fitted.group_score if policy == "binpack" else -fitted.group_score)
                if best is None or (total > best[0] if policy == "binpack" else total < best[0]):
                    best = (total, view.name)
        if best is None:
            assert isinstance(chosen, NoPlacement)
        else:
            assert isinstance(chosen, Placement)
            assert (chosen.node, chosen.node_score) == (best[1], pytest.approx(best[0]))


# --- what a container asks (HAMi's Test_GenerateResourceRequests*) -------------------------------------------------

def _container(limits: dict[str, str], requests: dict[str, str] | None = None) -> dict[str, object]:
    return {"name": "main", "resources": {"limits": limits, "requests": requests or dict(limits)}}


@pytest.mark.parametrize(("limits", "expected"), [
    # HAMi v2.10.0 pkg/device/ascend/device_test.go: Test_GenerateResourceRequests.
    pytest.param({}, None, id="hami-nothing-set"),
    pytest.param({"huawei.com/Ascend910A": "2", "huawei.com/Ascend910A-memory": "8738"},
                 ask("Ascend910A", 2, memory_mib=8738), id="hami-count-and-memory"),
    pytest.param({"huawei.com/Ascend910A": "2"}, ask("Ascend910A", 2, memory_percent=100), id="hami-no-memory"),
    # Test_GenerateResourceRequests_VNPUCoreMode.
    pytest.param({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "10",
                  "huawei.com/Ascend910B3-memory": "15360"}, ask("Ascend910B3", memory_mib=15360, cores=10),
                 id="hami-soft-split-core-and-memory"),
])
def test_hami_generate_resource_requests(limits: dict[str, str], expected: ContainerRequest | None) -> None:
    request = pod_request({"spec": {"containers": [_container(limits)]}}, RequestDefaults.of(CATALOG))
    assert request.containers == (() if expected is None else (expected,))


def test_hami_generate_resource_requests_factor() -> None:
    """Test_GenerateResourceRequestsFactor "factor 10": 128 × 10 MiB."""
    config = parse_device_config({"vnpus": {"configs": [{"commonWord": "Ascend910A", "memoryFactor": 10}]}})
    catalog = build_catalog(config=config, enable={"ascend"})
    request = pod_request({"spec": {"containers": [_container({"huawei.com/Ascend910A": "1",
                                                               "huawei.com/Ascend910A-memory": "128"})]}},
                          RequestDefaults.of(catalog))
    assert [(c.count, c.memory_mib) for c in request.containers] == [(1, 1280)]


def test_hami_out_of_range_memory_is_refused_naming_the_container() -> None:
    """Test_GenerateResourceRequests_OutOfRangeValues: 16Gi is bytes, far beyond any NPU's MiB."""
    from hami_web.core.requests import RequestError
    with pytest.raises(RequestError, match=r"huawei\.com/Ascend910B3-memory"):
        pod_request({"spec": {"containers": [_container({"huawei.com/Ascend910B3": "1",
                                                         "huawei.com/Ascend910B3-memory": "16Gi"})]}},
                    RequestDefaults.of(CATALOG))
