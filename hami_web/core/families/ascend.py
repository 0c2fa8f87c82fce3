"""Huawei Ascend NPUs (docs/device-families.md#ascend-npus; HAMi v2.10 ``pkg/device/ascend/device.go``): one family per
chip.

Each chip of HAMi's chart (``vnpus.configs``) is its own family, named by its common word. What sets Ascend apart
from the other families is kept here as data on the record and a few pure rules the generic code calls:

- **templates** (hard split): the device plugin carves an NPU only into the vNPU templates of its chip, so the
  webhook rounds a memory ask up to the smallest template that holds it, or to the whole NPU (`MemoryTemplates`);
- **soft split** (``huawei.com/vnpu-mode: hami-core``): HAMi-core shares an NPU by memory and cores (100 per NPU) on
  the nodes that allow it;
- **HCCS groups** (910A/910B chips): a multi-NPU container is filled from the largest ``custominfo.NetworkID`` group;
- **module pairs** (910C): two NPUs share one module, so a multi-NPU container takes whole modules only;
- **RuntimeInfo** (`RuntimeInfo`): the ``huawei.com/<CW>`` JSON the Ascend device plugin reads at start-up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_web.core.families import config
from hami_web.core.families.family import (
    AdmissionAsk,
    AdmissionRewrite,
    AdmissionRules,
    BookedDevice,
    DeviceConfigError,
    Family,
    MemoryTemplates,
    ResourceNames,
    SoftSplit,
    VnpuTemplate,
)
from hami_web.core.families.spec import FamilySpec
from hami_web.core.groups import MODULE_PAIRS, NETWORK_GROUPS

KIND = "ascend"
SOFT_SPLIT_KEY = "huawei.com/vnpu-mode"
SOFT_SPLIT_MODE = "hami-core"
SOFT_SPLIT_NODE_KEY = "hami-vnpu-core"
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
HCCS_PREFIX = "Ascend910"
MODULE_PAIR_CW = "Ascend910C"


@dataclass(frozen=True, slots=True)
class AscendChip:
    """One entry of the device config's ``vnpus.configs`` (HAMi's ``VNPUConfig``), with the chart's defaults."""

    common_word: str
    chip_name: str
    resources: ResourceNames
    memory: MemoryTemplates
    memory_factor: int = 1
    runtime_class_name: str = ""
    overwrite_env: bool = False
    super_pod: bool = False


def _resources(cw: str) -> ResourceNames:
    return ResourceNames(count=f"huawei.com/{cw}", memory=f"huawei.com/{cw}-memory", memory_percentage="",
                         cores=f"huawei.com/{cw}-core", priority="")


def _templates(*pairs: tuple[str, int]) -> tuple[VnpuTemplate, ...]:
    return tuple(VnpuTemplate(name=name, memory_mib=memory) for name, memory in pairs)


_B3_TEMPLATES = _templates(("vir05_1c_16g", 16384), ("vir10_3c_32g", 32768))

# HAMi v2.10's chart (charts/hami/templates/scheduler/device-configmap.yaml), chip by chip.
DEFAULT_CHIPS = (
    AscendChip("Ascend910A", "910A", _resources("Ascend910A"), MemoryTemplates(
        _templates(("vir02", 2184), ("vir04", 4369), ("vir08", 8738), ("vir16", 17476)), 32768, 32768)),
    AscendChip("Ascend910B2", "910B2", _resources("Ascend910B2"), MemoryTemplates(
        _templates(("vir03_1c_8g", 8192), ("vir06_1c_16g", 16384), ("vir12_3c_32g", 32768)), 65536, 65536)),
    AscendChip("Ascend910B3", "910B3", _resources("Ascend910B3"), MemoryTemplates(_B3_TEMPLATES, 65536, 65536)),
    AscendChip("Ascend910B4-1", "910B4-1", _resources("Ascend910B4-1"),
               MemoryTemplates(_B3_TEMPLATES, 65536, 65536)),
    AscendChip("Ascend910B4", "910B4", _resources("Ascend910B4"), MemoryTemplates(
        _templates(("vir05_1c_8g", 8192), ("vir10_3c_16g", 16384)), 32768, 32768)),
    AscendChip("Ascend310P", "310P3", _resources("Ascend310P"), MemoryTemplates(
        _templates(("vir01", 3072), ("vir02", 6144), ("vir04", 12288)), 21527, 24576)),
    AscendChip("Ascend910C", "Ascend910", _resources("Ascend910C"), MemoryTemplates(_B3_TEMPLATES, 65536, 65536),
               super_pod=True),
)


def default_chip(common_word: str) -> AscendChip | None:
    """The chart's chip of that common word, None for a chip the chart does not ship."""
    return next((chip for chip in DEFAULT_CHIPS if chip.common_word == common_word), None)


def ascend_family(chip: AscendChip, *, soft_split_default: bool = False) -> Family:
    """The family of one Ascend chip; ``soft_split_default`` is ``vnpus.hamiVnpuCore`` (a node without the
    ``hami-vnpu-core`` annotation allows soft split only then)."""
    cw = chip.common_word
    pairs = cw == MODULE_PAIR_CW
    return Family(
        cw=cw, kind=KIND, label=f"Ascend {chip.chip_name}", resources=chip.resources,
        register_key=f"hami.io/node-register-{cw}",
        handshake_key=f"hami.io/node-handshake-{cw}",
        to_allocate_key=f"hami.io/{cw}-devices-to-allocate",
        allocated_key=f"hami.io/{cw}-devices-allocated",
        memory_factor=chip.memory_factor,
        use_uuid_key=f"hami.io/use-{cw}-uuid",
        nouse_uuid_key=f"hami.io/no-use-{cw}-uuid",
        templates=chip.memory,
        soft_split=SoftSplit(key=SOFT_SPLIT_KEY, mode=SOFT_SPLIT_MODE, node_key=SOFT_SPLIT_NODE_KEY,
                             default=soft_split_default),
        grouping=MODULE_PAIRS if pairs else NETWORK_GROUPS if cw.startswith(HCCS_PREFIX) else None,
        booking_extras=RuntimeInfo(cw=cw, templates=chip.memory),
        predicate_time=True,
        admission=AdmissionRules(resize=admit_ascend, pair_count=pairs and chip.super_pod,
                                 runtime_class_name=chip.runtime_class_name,
                                 visible_devices_env=VISIBLE_DEVICES_ENV, visible_devices_off="",
                                 overwrite_env=chip.overwrite_env),
    )


def admit_ascend(family: Family, ask: AdmissionAsk) -> AdmissionRewrite:
    """HAMi's ``MutateAdmission`` for one container asking ``ask.count`` NPUs (docs/device-families.md#ascend-npus):
    910C module pairs, cores only in soft split, memory rounded to a template or the whole NPU, no template shared by
    several NPUs. A refusal carries HAMi's words."""
    names = family.resources
    count = ask.count
    if family.admission.pair_count:
        if count == 1:
            count = 2  # the smallest unit of a 910C super pod is a module: two NPUs
        elif count % 2:
            return AdmissionRewrite(refusal=f"{family.cw} device request must be 1 or 2*n, got {ask.count}")
    if not ask.soft_split and names.cores and (ask.cores or 0) > 0:
        return AdmissionRewrite(refusal=f"{names.cores} is only supported in hami-core (soft split) mode")
    templates = family.templates
    if templates is None:
        return AdmissionRewrite(count=count)
    memory = templates.allocatable_mib
    if ask.memory is not None:
        if ask.soft_split:
            memory = ask.memory
        else:
            rounded = templates.round_up(ask.memory)
            if rounded is None:
                return AdmissionRewrite(refusal=f"{names.memory} {ask.memory} is invalid")
            memory = rounded[0]
    if ask.count > 1 and not ask.soft_split and memory != templates.allocatable_mib:
        return AdmissionRewrite(refusal="vNPU not supported for multiple devices")
    return AdmissionRewrite(count=count, memory=memory)


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    """The ``huawei.com/<CW>`` annotation a booking of the chip writes (docs/device-families.md#ascend-npus): HAMi's
    ``RuntimeInfo`` list over all containers' NPUs, zero fields left out as Go's ``omitempty`` does: ``UUID``, ``temp``
    (the template of the booked memory; none for the whole NPU or soft split), ``memory``, ``core``. A value, not a
    closure, so that two catalogs built alike compare equal."""

    cw: str
    templates: MemoryTemplates | None

    def __call__(self, grants: Sequence[Sequence[BookedDevice]]) -> dict[str, str]:
        entries: list[dict[str, object]] = []
        for container in grants:
            for grant in container:
                templates = None if grant.soft_split else self.templates
                template = templates.name_for(grant.memory_mib) if templates else ""
                entry: dict[str, object] = {"UUID": grant.uuid, "temp": template, "memory": grant.memory_mib,
                                            "core": grant.cores}
                entries.append({key: value for key, value in entry.items() if value})
        return {f"huawei.com/{self.cw}": json.dumps(entries, separators=(",", ":"))}



@dataclass(frozen=True, slots=True)
class VnpuConfig:
    """The ``vnpus`` section: ``hamiVnpuCore`` and the chips of ``configs`` (None when the file lists none)."""

    hami_vnpu_core: bool | None = None
    chips: tuple[AscendChip, ...] | None = None


def _vnpu_templates(entry: Mapping[str, object], where: str) -> tuple[VnpuTemplate, ...] | None:
    listed = config.entries(entry.get("templates"), f"{where}.templates")
    if listed is None:
        return None
    templates: list[VnpuTemplate] = []
    for here, template in listed:
        name = config.string(template, "name", here)
        if not name:
            raise DeviceConfigError(f"{here}.name: a template needs a name")
        memory = config.integer(template, "memory", here, minimum=1, maximum=1 << 21)
        if memory is None:
            raise DeviceConfigError(f"{here}.memory: a template needs its memory in MiB")
        templates.append(VnpuTemplate(name=name, memory_mib=memory))
    return tuple(templates)


def _vnpu_chip(entry: Mapping[str, object], where: str) -> AscendChip:
    word = entry.get("commonWord")
    if not isinstance(word, str) or not config.COMMON_WORD.fullmatch(word.strip()):
        raise DeviceConfigError(f"{where}.commonWord: {word!r} is not a common word like Ascend910B3")
    word = word.strip()
    chart = default_chip(word)
    resources = chart.resources if chart else ResourceNames(
        count=f"huawei.com/{word}", memory=f"huawei.com/{word}-memory", memory_percentage="",
        cores=f"huawei.com/{word}-core", priority="")
    allocatable = config.integer(entry, "memoryAllocatable", where, minimum=1, maximum=1 << 21)
    capacity = config.integer(entry, "memoryCapacity", where, minimum=1, maximum=1 << 21)
    templates = _vnpu_templates(entry, where)
    if chart is None and (allocatable is None or capacity is None):
        raise DeviceConfigError(f"{where}: chip {word} is not one of HAMi's chart; give its memoryAllocatable and "
                                f"memoryCapacity")
    memory = MemoryTemplates(
        templates=chart.memory.templates if templates is None and chart else templates or (),
        allocatable_mib=allocatable or (chart.memory.allocatable_mib if chart else 0),
        capacity_mib=capacity or (chart.memory.capacity_mib if chart else 0))
    if memory.capacity_mib < memory.allocatable_mib:
        raise DeviceConfigError(f"{where}: memoryCapacity {memory.capacity_mib} is below memoryAllocatable "
                                f"{memory.allocatable_mib}")
    return AscendChip(
        common_word=word, chip_name=config.string(entry, "chipName", where) or (chart.chip_name if chart else word),
        resources=ResourceNames(
            count=config.resource(entry, "resourceName", where) or resources.count,
            memory=config.resource(entry, "resourceMemoryName", where) or resources.memory, memory_percentage="",
            cores=config.resource(entry, "resourceCoreName", where) or resources.cores, priority=""),
        memory=memory,
        memory_factor=config.memory_factor(entry, where) or 1,
        runtime_class_name=config.string(entry, "runtimeClassName", where) or "",
        overwrite_env=bool(config.boolean(entry, "overwriteEnv", where)),
        super_pod=bool(config.boolean(entry, "superPod", where)) if entry.get("superPod") is not None
        else bool(chart and chart.super_pod))


def read_vnpus(value: object, where: str) -> VnpuConfig:
    """The ``vnpus`` section: ``hamiVnpuCore`` and the chips of ``configs``."""
    section = config.section_map(value, where)
    listed = config.entries(section.get("configs"), f"{where}.configs")
    chips = None if listed is None else tuple(_vnpu_chip(entry, where) for where, entry in listed)
    return VnpuConfig(hami_vnpu_core=config.boolean(section, "hamiVnpuCore", where), chips=chips)


def publish_vnpus(vnpus: VnpuConfig) -> object | None:
    """The section back (None when nothing was set)."""
    document: dict[str, object] = {}
    if vnpus.hami_vnpu_core is not None:
        document["hamiVnpuCore"] = vnpus.hami_vnpu_core
    if vnpus.chips is not None:
        document["configs"] = [{
            "chipName": chip.chip_name, "commonWord": chip.common_word, "resourceName": chip.resources.count,
            "resourceMemoryName": chip.resources.memory, "resourceCoreName": chip.resources.cores,
            "memoryAllocatable": chip.memory.allocatable_mib, "memoryCapacity": chip.memory.capacity_mib,
            "memoryFactor": chip.memory_factor, "runtimeClassName": chip.runtime_class_name,
            "overwriteEnv": chip.overwrite_env, "superPod": chip.super_pod,
            "templates": [{"name": t.name, "memory": t.memory_mib} for t in chip.memory.templates],
        } for chip in vnpus.chips]
    return document or None


SPEC = FamilySpec(
    name=KIND, label="Huawei Ascend NPU", section="vnpus", default=VnpuConfig(), read=read_vnpus,
    publish=publish_vnpus,
    build=lambda vnpus: tuple(ascend_family(chip, soft_split_default=bool(vnpus.hami_vnpu_core))
                              for chip in (DEFAULT_CHIPS if vnpus.chips is None else vnpus.chips)),
    flag="--enable-ascend", chart_value="ascend.enabled",
    flag_help="schedule Huawei Ascend NPUs (the chips of the device config's vnpus.configs, else HAMi's chart's "
              "seven) (false)")
