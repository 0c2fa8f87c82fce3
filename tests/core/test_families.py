"""The registry of device families (docs/device-families.md#device-families): the catalog, each family's record, and
HAMi's device config.

Covers: `DEFAULT_CATALOG` holding NVIDIA, DCU, MLU and Kunlunxin (``kunlun`` whole XPUs, ``XPU`` slices),
`build_catalog(enable={"iluvatar"})` adding MR-V100, MR-V50, BI-V150 and BI-V100, families kept in common-word order;
each family's resource names and annotation keys as the table of docs/device-families.md#device-families writes them
(register, handshake, ``…-devices-to-allocate`` / ``-allocated``, UUID pins, lock), its memory factor and default cores;
one table that runs every family of the catalog through the same behaviours (a pod asking only the family's count
resource gets one request of that family; it fits on a node of that family through the node-state reader; the booking
lands under the family's keys with its common word as vendor and reads back as the pod's usage; a device whose type
lacks the common word is a `CardTypeMismatch`); a resource name shared by two families, or twice in one, refused with
`DeviceConfigError`; `parse_device_config` on HAMi v2.10's chart ConfigMap (the template's ``else`` branch rendered with
the chart's default values) and the catalog built from it; malformed configs (wrong types, bad resource names or common
words, ``iluvatars`` not a list) refused with a message naming the key.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device
from hami_web.core.families import (
    DEFAULT_CATALOG,
    NODE_LOCK,
    DeviceCatalog,
    DeviceConfigError,
    Family,
    build_catalog,
    cambricon,
    config_document,
    hygon,
    iluvatar,
    nvidia,
    parse_device_config,
)
from hami_web.core.families.cambricon import DEFAULT_RESOURCES as MLU_NAMES
from hami_web.core.families.hygon import DEFAULT_RESOURCES as DCU_NAMES
from hami_web.core.families.hygon import HygonConfig
from hami_web.core.families.iluvatar import IluvatarChip, default_chip
from hami_web.core.families.nvidia import NvidiaConfig
from hami_web.core.families.spec import DeviceConfig
from hami_web.core.grants import booking_annotations
from hami_web.core.options import pod_options
from hami_web.core.requests import ContainerRequest, RequestDefaults, pod_request
from hami_web.core.usage import build_node_view
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import pod_usage

FULL_CATALOG = build_catalog(enable={"iluvatar"})


def _hygon(**names: str) -> DeviceConfig:
    """A device config whose ``hygon`` section changes ``names`` of the chart's."""
    return DeviceConfig(sections={"hygon": HygonConfig(resources=replace(DCU_NAMES, **names))})
ILUVATAR_CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")


# The families HAMi v2.10 registers unconditionally that hami-web schedules: on by default.
ALWAYS_ON = ["AMD", "AWSNeuron", "Biren", "DCU", "Enflame", "GCU", "MLU", "Metax-GPU", "Metax-SGPU", "Mthreads",
             "NVIDIA", "Vastai", "XPU", "kunlun"]


def test_the_default_catalog_holds_every_family_hami_does_not_gate() -> None:
    assert [family.cw for family in DEFAULT_CATALOG] == ALWAYS_ON


def test_enabling_iluvatar_adds_its_four_chips_in_common_word_order() -> None:
    assert [family.cw for family in FULL_CATALOG] == sorted([*ALWAYS_ON, *ILUVATAR_CHIPS])
    assert {family.kind for family in FULL_CATALOG if family.cw in ILUVATAR_CHIPS} == {"iluvatar"}


def test_the_catalog_lists_every_resource_and_three_locks() -> None:
    assert tuple(family.resources.count for family in DEFAULT_CATALOG) == (
        "amd.com/gpu", "aws.amazon.com/neuron", "birentech.com/gpu", "hygon.com/dcunum", "enflame.com/drs-gcu",
        "enflame.com/gcu", "cambricon.com/vmlu", "metax-tech.com/gpu", "metax-tech.com/sgpu", "mthreads.com/vgpu",
        "nvidia.com/gpu", "vastaitech.com/va", "kunlunxin.com/vxpu", "kunlunxin.com/xpu")
    assert set(DEFAULT_CATALOG.managed_resources()) == {
        "birentech.com/gpu", "enflame.com/gcu", "metax-tech.com/gpu", "mthreads.com/vgpu", "mthreads.com/sgpu-memory",
        "mthreads.com/sgpu-core", "vastaitech.com/va",
        "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores", "cambricon.com/vmlu",
        "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore", "nvidia.com/gpu", "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "nvidia.com/priority", "kunlunxin.com/xpu",
        "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory", "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores",
        "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core", "metax-tech.com/sgpu",
        "metax-tech.com/vmemory", "metax-tech.com/vcore",
        "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"}
    # Enflame GCU, Metax GPU and whole Kunlunxin XPUs have no HAMi lock: their binds take hami-web's own.
    assert FULL_CATALOG.lock_keys() == ("cambricon.com/dsmlu.lock", "hami-web.io/bind.lock", NODE_LOCK)
    assert NODE_LOCK == "hami.io/mutex.lock"
    assert FULL_CATALOG.get("MR-V100") is FULL_CATALOG["MR-V100"]
    assert DEFAULT_CATALOG.get("MR-V100") is None


# One row of the table of docs/device-families.md#device-families per family: resources, then register, handshake,
# to-allocate, allocated, UUID pins, then the memory factor, default cores and the node lock.
SPEC_ROWS = [
    pytest.param("NVIDIA", ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
                 ("hami.io/node-nvidia-register", "hami.io/node-handshake", "hami.io/vgpu-devices-to-allocate",
                  "hami.io/vgpu-devices-allocated", "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"), 1, 0,
                 "hami.io/mutex.lock", id="NVIDIA"),
    pytest.param("DCU", ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
                 ("hami.io/node-dcu-register", "hami.io/node-handshake-dcu", "hami.io/dcu-devices-to-allocate",
                  "hami.io/dcu-devices-allocated", "hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"), 1, 100,
                 "hami.io/mutex.lock", id="DCU"),
    pytest.param("MLU", ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"),
                 ("", "", "hami.io/cambricon-mlu-devices-to-allocate", "hami.io/cambricon-mlu-devices-allocated",
                  "cambricon.com/use-gpuuuid", "cambricon.com/nouse-gpuuuid"), 256, 100, "cambricon.com/dsmlu.lock",
                 id="MLU"),
    pytest.param("Enflame", ("enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core"),
                 ("", "", "", "hami.io/enflame-vgpu-devices-allocated", "enflame.com/use-gpuuuid",
                  "enflame.com/nouse-gpuuuid"), 1, 0, "hami-web.io/bind.lock", id="Enflame-DRS"),
    *(pytest.param(cw, (f"iluvatar.ai/{cw}-vgpu", f"iluvatar.ai/{cw}.vMem", f"iluvatar.ai/{cw}.vCore"),
                   (f"hami.io/node-{cw}-register", f"hami.io/node-handshake-{cw}", f"hami.io/{cw}-devices-to-allocate",
                    f"hami.io/{cw}-devices-allocated", f"hami.io/use-{cw}-uuid", f"hami.io/no-use-{cw}-uuid"), 256, 0,
                   "hami.io/mutex.lock", id=cw) for cw in ILUVATAR_CHIPS),
]


@pytest.mark.parametrize(("cw", "resources", "keys", "memory_factor", "default_cores", "lock"), SPEC_ROWS)
def test_each_family_has_the_names_of_spec_table(cw: str, resources: tuple[str, str, str], keys: tuple[str, ...],
                                                 memory_factor: int, default_cores: int, lock: str) -> None:
    family = FULL_CATALOG[cw]
    assert (family.resources.count, family.resources.memory, family.resources.cores) == resources
    assert (family.register_key, family.handshake_key, family.to_allocate_key, family.allocated_key,
            family.use_uuid_key, family.nouse_uuid_key) == keys
    assert family.lock_key == lock
    assert (family.memory_factor, family.default_cores) == (memory_factor, default_cores)


@pytest.mark.parametrize(("cw", "use_type", "nouse_type", "mode_key", "numa_key", "cordon", "topology"), [
    pytest.param("NVIDIA", "nvidia.com/use-gputype", "nvidia.com/nouse-gputype", "nvidia.com/vgpu-mode",
                 "nvidia.com/numa-bind", True, True, id="NVIDIA-every-selection"),
    pytest.param("DCU", "hygon.com/use-dcutype", "hygon.com/nouse-dcutype", "", "", False, False,
                 id="DCU-types-only"),
    pytest.param("MLU", "cambricon.com/use-mlutype", "cambricon.com/nouse-mlutype", "", "", False, False,
                 id="MLU-types-only"),
    *(pytest.param(cw, "", "", "", "", False, False, id=f"{cw}-none") for cw in ILUVATAR_CHIPS),
])
def test_each_family_has_only_its_own_selections(cw: str, use_type: str, nouse_type: str, mode_key: str,
                                                 numa_key: str, cordon: bool, topology: bool) -> None:
    family = FULL_CATALOG[cw]
    assert (family.use_type_key, family.nouse_type_key, family.mode_key, family.numa_bind_key) == (
        use_type, nouse_type, mode_key, numa_key)
    assert (family.cordon, family.topology) == (cordon, topology)


# --- one table of behaviours for every family of the catalog -------------------------------------------------

def device_type(family: Family) -> str:
    """A card type the family's device plugin could report (it contains the common word)."""
    return {"NVIDIA": "NVIDIA-Tesla T4", "DCU": "DCU-BW100"}.get(family.cw, family.cw)


def only_card(family: Family) -> Device:
    """The one card of `family_node`, as the family's inventory reads it."""
    state = node_state(node_record(family_node(family), catalog=FULL_CATALOG), now=0.0, catalog=FULL_CATALOG)
    assert state.inventory is not None, state.error
    (card,) = state.inventory.devices
    return card


def family_node(family: Family, *, type_: str | None = None) -> dict[str, Any]:
    """A node with one card of ``family``: 16384 MiB (a whole slice for a family of slices), 100 cores (from its
    capacity for a family read from there: whatever of count, cores and memory it reads)."""
    if family.inventory is not None:
        capacity = {name: value for name, value in ((family.resources.count, "1"), (family.resources.cores, "100"),
                                                   (family.resources.memory, "64")) if name}
        return {"metadata": {"name": f"node-{family.cw}", "labels": {"Model": type_ or "MLU370-X4"}},
                "status": {"capacity": capacity}}
    memory = family.slices.whole_mib if family.slices else 16384
    register = f"{family.cw}-card-0,4,{memory},100,{type_ or device_type(family)},0,true:"
    return {"metadata": {"name": f"node-{family.cw}", "annotations": {family.register_key: register}},
            "status": {"allocatable": {family.resources.count: "4"}}}


def count_only_pod(family: Family) -> dict[str, Any]:
    return {"metadata": {"uid": "uid-1", "name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {family.resources.count: "1"}}}]},
            "status": {"phase": "Pending"}}


def place(family: Family, node: dict[str, Any], pod: dict[str, Any]) -> Placement | NoPlacement:
    state = node_state(node_record(node, catalog=FULL_CATALOG), now=0.0, catalog=FULL_CATALOG)
    assert state.inventory is not None, state.error
    request = pod_request(pod, RequestDefaults.of(FULL_CATALOG))
    options = pod_options({}, node_policy="binpack", gpu_policy="spread", catalog=FULL_CATALOG)
    view = build_node_view(state.inventory, {})
    return choose_node(request, options, [view.name], {view.name: view})


# The families whose memory and cores are asked like NVIDIA's (the others have tables of their own, from HAMi's tests:
# tests/core/test_count_families.py).
SHARED_CARDS = ("NVIDIA", "DCU", "MLU", *ILUVATAR_CHIPS)
EVERY_FAMILY = [pytest.param(family.cw, id=family.cw) for family in FULL_CATALOG if family.cw in SHARED_CARDS]
# The families whose device plugin reports each card's type (Cambricon's type is made from the node's model).
REPORTED_TYPES = [pytest.param(family.cw, id=family.cw) for family in FULL_CATALOG
                  if family.inventory is None and family.cw in SHARED_CARDS]


@pytest.mark.parametrize("cw", EVERY_FAMILY)
def test_a_pod_asking_only_a_count_gets_a_request_of_that_family(cw: str) -> None:
    family = FULL_CATALOG[cw]
    request = pod_request(count_only_pod(family), RequestDefaults.of(FULL_CATALOG))
    assert request.families == (cw,)
    memory_mib, cores = family.slices.ask(0) if family.slices else (0, family.default_cores)
    assert request.containers == (ContainerRequest(name="main", init=False, count=1, memory_mib=memory_mib,
                                                   memory_percent=100, cores=cores, family=cw,
                                                   one_size=family.slices is not None),)


@pytest.mark.parametrize("cw", EVERY_FAMILY)
def test_a_pod_of_a_family_fits_on_a_node_of_that_family(cw: str) -> None:
    family = FULL_CATALOG[cw]
    placement = place(family, family_node(family), count_only_pod(family))
    assert isinstance(placement, Placement), placement
    card = only_card(family)
    assert [(g.uuid, g.memory_mib, g.cores, g.vendor) for g in placement.grants[0]] == [
        (card.uuid, card.memory_mib, whole_card_cores(family), cw)]


@pytest.mark.parametrize("cw", EVERY_FAMILY)
def test_the_booking_lands_under_the_family_keys_and_reads_back_as_usage(cw: str) -> None:
    family = FULL_CATALOG[cw]
    placement = place(family, family_node(family), count_only_pod(family))
    assert isinstance(placement, Placement)
    annotations = booking_annotations(placement.grants, FULL_CATALOG)
    card = only_card(family)
    value = f"{card.uuid},{cw},{card.memory_mib},{whole_card_cores(family)}:;"
    extras = {"MLU": {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "0_100_64"},
              "kunlun": {"BAIDU_COM_DEVICE_IDX": "0"}}.get(cw, {})
    assert annotations == {**{key: value for key in (family.to_allocate_key, family.allocated_key) if key}, **extras}

    booked = count_only_pod(family)
    booked["metadata"]["annotations"] = {names.POD_ASSIGNED_NODE: placement.node, **annotations}
    usage = pod_usage(booked, catalog=FULL_CATALOG)
    assert usage is not None and usage.grants == placement.grants
    assert (usage.booking[card.uuid].tasks, usage.booking[card.uuid].memory_mib) == (1, card.memory_mib)


def whole_card_cores(family: Family) -> int:
    """The cores a count-only ask books: the family's default, or a whole slice's."""
    return family.slices.ask(0)[1] if family.slices else family.default_cores


@pytest.mark.parametrize("cw", REPORTED_TYPES)
def test_a_device_whose_type_lacks_the_common_word_is_a_type_mismatch(cw: str) -> None:
    family = FULL_CATALOG[cw]
    placement = place(family, family_node(family, type_="Unknown-Accelerator"), count_only_pod(family))
    assert placement == NoPlacement(reasons={f"node-{cw}": "1/1 CardTypeMismatch"})


@pytest.mark.parametrize("cw", EVERY_FAMILY)
def test_a_pod_of_a_family_ignores_other_families_nodes(cw: str) -> None:
    family = FULL_CATALOG[cw]
    other = FULL_CATALOG["DCU" if cw != "DCU" else "NVIDIA"]
    placement = place(family, family_node(other), count_only_pod(family))
    assert placement == NoPlacement(reasons={f"node-{other.cw}": f"{cw}: 1/0 NodeInsufficientDevice"})


# --- resource names must be unambiguous ------------------------------------------------------------------------

@pytest.mark.parametrize(("config", "message"), [
    pytest.param(_hygon(count="nvidia.com/gpu"),
                 "resource nvidia.com/gpu is used by both", id="hygon-count-is-nvidia-count"),
    pytest.param(_hygon(memory="nvidia.com/gpumem"),
                 "resource nvidia.com/gpumem is used by both", id="hygon-memory-is-nvidia-memory"),
    pytest.param(_hygon(memory="hygon.com/dcucores"),
                 "resource hygon.com/dcucores is given twice for DCU", id="hygon-memory-is-its-cores"),
    pytest.param(DeviceConfig(sections={"iluvatar": (replace(default_chip("MR-V100"), resources=replace(
        default_chip("MR-V100").resources, count="hygon.com/dcunum")),)}),
                 "resource hygon.com/dcunum is used by both DCU and MR-V100", id="iluvatar-count-is-dcu-count"),
    pytest.param(DeviceConfig(sections={"iluvatar": (default_chip("MR-V100"), IluvatarChip(
        common_word="MR-V101", chip_name="MR-V101", resources=default_chip("MR-V100").resources))}),
                 "resource iluvatar.ai/MR-V100-vgpu is used by both MR-V100 and MR-V101",
                 id="two-chips-share-names"),
])
def test_a_resource_name_of_two_families_is_refused(config: DeviceConfig, message: str) -> None:
    with pytest.raises(DeviceConfigError, match=message):
        build_catalog(config=config, enable={"iluvatar"})


@pytest.mark.parametrize("words", [
    pytest.param(("MR-V100", "MR-V100"), id="chip-twice"),
    pytest.param(("DCU",), id="chip-named-DCU"),
    pytest.param(("NVIDIA",), id="chip-named-NVIDIA"),
])
def test_a_common_word_registered_twice_is_a_config_error(words: tuple[str, ...]) -> None:
    config = parse_device_config({"iluvatars": [{"commonWord": word} for word in words]})
    with pytest.raises(DeviceConfigError):
        build_catalog(config=config, enable={"iluvatar"})


def test_iluvatar_names_from_the_config_are_ignored_while_iluvatar_is_disabled() -> None:
    config = parse_device_config({"iluvatars": [{"commonWord": "MR-V100", "resourceCountName": "hygon.com/dcunum"}]})
    assert [family.cw for family in build_catalog(config=config)] == ALWAYS_ON


# --- HAMi's device config ----------------------------------------------------------------------------------------

# charts/hami/templates/scheduler/device-configmap.yaml at v2.10.0, the `else` branch rendered by hand with
# charts/hami/values.yaml's defaults (resourceName nvidia.com/gpu, scheduler.overwriteEnv "false",
# devicePlugin.deviceSplitCount 10, deviceMemoryScaling 1, deviceCoreScaling 1, gpuCorePolicy default, …).
HAMI_CHART_DEVICE_CONFIG = (Path(__file__).resolve().parents[1] / "fixtures"
                            / "hami-v2.10-device-config.yaml").read_text()


def test_hami_chart_device_config_reads_as_the_chart_defaults() -> None:
    config = parse_device_config(yaml.safe_load(HAMI_CHART_DEVICE_CONFIG))
    assert config.get(nvidia.SPEC) == NvidiaConfig(
        count="nvidia.com/gpu", memory="nvidia.com/gpumem", memory_percentage="nvidia.com/gpumem-percentage",
        cores="nvidia.com/gpucores", priority="nvidia.com/priority", overwrite_env=False, default_memory_mib=0,
        default_cores=0, default_count=1, memory_factor=1, runtime_class_name="", gpu_core_policy="default")
    assert config.get(hygon.SPEC) == HygonConfig(resources=DCU_NAMES, memory_factor=1)
    assert config.get(cambricon.SPEC) == MLU_NAMES
    assert config.get(iluvatar.SPEC) == tuple(default_chip(cw) for cw in ILUVATAR_CHIPS)


def test_hami_chart_device_config_builds_the_default_catalog() -> None:
    config = parse_device_config(yaml.safe_load(HAMI_CHART_DEVICE_CONFIG))
    assert build_catalog(config=config, enable={"iluvatar"}) == FULL_CATALOG
    assert build_catalog(config=config) == DEFAULT_CATALOG


@pytest.mark.parametrize(("document", "expected"), [
    pytest.param(None, DeviceConfig(), id="empty-file"),
    pytest.param({}, DeviceConfig(), id="empty-map"),
    pytest.param({"notAVendor": {"resourceCountName": 5}, "someVendor": "anything"}, DeviceConfig(),
                 id="sections-we-do-not-read-are-not-checked"),
    pytest.param({"nvidia": None, "hygon": None}, DeviceConfig(), id="null-sections"),
    pytest.param({"nvidia": {"overwriteEnv": "true"}},
                 DeviceConfig(sections={"nvidia": NvidiaConfig(overwrite_env=True)}),
                 id="overwriteEnv-rendered-as-text"),
    pytest.param({"hygon": {"memoryFactor": 0}}, DeviceConfig(sections={"hygon": HygonConfig(memory_factor=1)}),
                 id="memoryFactor-0-means-1"),
    pytest.param({"hygon": {"resourceCountName": " hygon.com/dcu "}},
                 _hygon(count="hygon.com/dcu"), id="names-trimmed"),
    pytest.param({"iluvatars": []}, DeviceConfig(sections={"iluvatar": ()}), id="no-chips"),
    pytest.param({"cambricon": {"resourceCountName": "cambricon.com/mlu"}},
                 DeviceConfig(sections={"cambricon": replace(MLU_NAMES, count="cambricon.com/mlu")}),
                 id="cambricon-count-as-hami-flag"),
    pytest.param({"iluvatars": [{"commonWord": "MR-V100"}]},
                 DeviceConfig(sections={"iluvatar": (default_chip("MR-V100"),)}),
                 id="chip-with-only-a-common-word-gets-chart-names"),
    pytest.param({"iluvatars": [{"commonWord": "BI-V150", "chipName": "BI150",
                                 "resourceCountName": "iluvatar.ai/vgpu"}]},
                 DeviceConfig(sections={"iluvatar": (IluvatarChip(
                     common_word="BI-V150", chip_name="BI150", resources=replace(
                         default_chip("BI-V150").resources, count="iluvatar.ai/vgpu")),)}), id="chip-with-own-names"),
])
def test_partial_device_configs_read_what_they_say(document: object, expected: DeviceConfig) -> None:
    assert parse_device_config(document) == expected


def test_configured_hygon_names_and_factor_reach_the_dcu_family() -> None:
    config = parse_device_config({"hygon": {"resourceCountName": "hygon.com/dcu", "memoryFactor": 4}})
    family = build_catalog(config=config)["DCU"]
    assert family.resources.count == "hygon.com/dcu"
    assert (family.resources.memory, family.resources.cores) == ("hygon.com/dcumem", "hygon.com/dcucores")
    assert family.memory_factor == 4


def test_configured_cambricon_names_reach_the_mlu_family_and_its_capacity_reader() -> None:
    config = parse_device_config({"cambricon": {"resourceCountName": "cambricon.com/mlu",
                                                "resourceCoreName": "cambricon.com/vcore"}})
    family = build_catalog(config=config)["MLU"]
    assert (family.resources.count, family.resources.memory, family.resources.cores) == (
        "cambricon.com/mlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/vcore")
    node = {"metadata": {"name": "n"}, "status": {"capacity": {"cambricon.com/vcore": "200",
                                                               "cambricon.com/mlu.smlu.vcore": "800"}}}
    assert family.inventory is not None
    assert [device.uuid for device in family.inventory.devices(node) or ()] == [
        "n-cambricon-mlu-0", "n-cambricon-mlu-1"]
    assert config_document(config) == {"cambricon": {"resourceCountName": "cambricon.com/mlu",
                                                     "resourceCoreName": "cambricon.com/vcore"}}


def test_an_empty_iluvatars_list_enables_no_chip() -> None:
    assert isinstance(build_catalog(config=DeviceConfig(sections={"iluvatar": ()}), enable={"iluvatar"}), DeviceCatalog)
    catalog = build_catalog(config=DeviceConfig(sections={"iluvatar": ()}), enable={"iluvatar"})
    assert [f.cw for f in catalog] == ALWAYS_ON


@pytest.mark.parametrize(("document", "message"), [
    pytest.param(["nvidia"], "the document must be a map of device sections, got a list", id="document-a-list"),
    pytest.param({"nvidia": 5}, "nvidia: expected a map, got an integer", id="nvidia-not-a-map"),
    pytest.param({"hygon": []}, "hygon: expected a map, got a list", id="hygon-not-a-map"),
    pytest.param({"cambricon": "mlu"}, "cambricon: expected a map, got a string", id="cambricon-not-a-map"),
    pytest.param({"cambricon": {"resourceCoreName": "vcore"}}, "cambricon.resourceCoreName: 'vcore' is not",
                 id="cambricon-resource-without-domain"),
    pytest.param({"nvidia": {"resourceCountName": 5}}, "nvidia.resourceCountName: 5 is not an extended resource name",
                 id="number-resource-name"),
    pytest.param({"nvidia": {"resourceMemoryName": "gpumem"}}, "nvidia.resourceMemoryName: 'gpumem' is not",
                 id="resource-name-without-domain"),
    pytest.param({"nvidia": {"resourceCoreName": "nvidia.com/gpu cores"}}, "nvidia.resourceCoreName",
                 id="resource-name-with-space"),
    pytest.param({"hygon": {"resourceMemoryName": "hygon.com/"}}, "hygon.resourceMemoryName",
                 id="resource-name-empty-after-slash"),
    pytest.param({"nvidia": {"defaultCores": "ten"}}, "nvidia.defaultCores: expected an integer, got a string",
                 id="string-integer"),
    pytest.param({"nvidia": {"defaultMemory": True}}, "nvidia.defaultMemory: expected an integer, got a boolean",
                 id="boolean-integer"),
    pytest.param({"nvidia": {"memoryFactor": 1.5}}, "nvidia.memoryFactor: expected an integer, got a number",
                 id="fraction-factor"),
    pytest.param({"nvidia": {"defaultCores": 101}}, "nvidia.defaultCores: 101 is outside 0..100",
                 id="cores-over-100"),
    pytest.param({"nvidia": {"defaultGPUNum": 0}}, "nvidia.defaultGPUNum: 0 is outside 1..128", id="gpunum-0"),
    pytest.param({"hygon": {"memoryFactor": -1}}, "hygon.memoryFactor: -1 is outside", id="negative-factor"),
    pytest.param({"nvidia": {"overwriteEnv": "maybe"}}, "nvidia.overwriteEnv: expected true or false",
                 id="overwriteEnv-not-a-boolean"),
    pytest.param({"iluvatars": {"commonWord": "MR-V100"}}, "iluvatars: expected a list, got a map",
                 id="iluvatars-a-map"),
    pytest.param({"iluvatars": "MR-V100"}, "iluvatars: expected a list, got a string", id="iluvatars-a-string"),
    pytest.param({"iluvatars": ["MR-V100"]}, "iluvatars[0]: expected a map, got a string", id="chip-not-a-map"),
    pytest.param({"iluvatars": [{"chipName": "MR-V100"}]}, "iluvatars[0].commonWord: None is not a common word",
                 id="chip-without-common-word"),
    pytest.param({"iluvatars": [{"commonWord": "MR-V100"}, {"commonWord": "MR V50"}]},
                 "iluvatars[1].commonWord: 'MR V50' is not a common word", id="common-word-with-space"),
    pytest.param({"iluvatars": [{"commonWord": "MR-V100", "chipName": 100}]},
                 "iluvatars[0].chipName: expected a string", id="chip-name-a-number"),
    pytest.param({"iluvatars": [{"commonWord": "MR-V100", "resourceCoreName": "vCore"}]},
                 "iluvatars[0].resourceCoreName: 'vCore' is not", id="chip-resource-without-domain"),
])
def test_a_malformed_device_config_names_the_key(document: object, message: str) -> None:
    with pytest.raises(DeviceConfigError) as raised:
        parse_device_config(document)
    assert message in str(raised.value)
