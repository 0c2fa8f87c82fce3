"""HAMi's device config (the ``device-config.yaml`` of the ``hami-scheduler-device`` ConfigMap), read as HAMi reads it.

Every HAMi install mounts this file, so an operator switching to hami-web passes it unchanged with
``--device-config-file``. Only what hami-web uses is read (README.md#configuration, ``--device-config-file``):
resource names and family settings of ``nvidia``, ``hygon``, ``cambricon``, ``iluvatars``, ``vnpus``; other keys
(other vendors, MIG allow-lists, device-plugin settings) are ignored. A key we read with the wrong type fails with the
key's path, never a half-read configuration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from hami_web.core.families.ascend import AscendChip
from hami_web.core.families.ascend import default_chip as default_ascend_chip
from hami_web.core.families.family import DeviceConfigError, MemoryTemplates, ResourceNames, VnpuTemplate
from hami_web.core.families.iluvatar import IluvatarChip, default_chip

__all__ = ["CambriconConfig", "DeviceConfig", "DeviceConfigError", "HygonConfig", "NvidiaConfig", "VnpuConfig",
           "config_document", "parse_device_config"]

_RESOURCE_NAME = re.compile(r"[A-Za-z0-9.\-]+/[A-Za-z0-9.\-_]+")
_COMMON_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-_]{0,62}")
# Memory factors beyond this turn any request into more memory than a device has.
MAX_MEMORY_FACTOR = 1 << 16


@dataclass(frozen=True, slots=True)
class NvidiaConfig:
    """The ``nvidia`` section: each field None when the file leaves it out."""

    count: str | None = None
    memory: str | None = None
    memory_percentage: str | None = None
    cores: str | None = None
    priority: str | None = None
    overwrite_env: bool | None = None
    default_memory_mib: int | None = None
    default_cores: int | None = None
    default_count: int | None = None
    memory_factor: int | None = None


@dataclass(frozen=True, slots=True)
class HygonConfig:
    """The ``hygon`` section."""

    count: str | None = None
    memory: str | None = None
    cores: str | None = None
    memory_factor: int | None = None


@dataclass(frozen=True, slots=True)
class CambriconConfig:
    """The ``cambricon`` section (names only: the memory factor is fixed at 256 MiB)."""

    count: str | None = None
    memory: str | None = None
    cores: str | None = None


@dataclass(frozen=True, slots=True)
class VnpuConfig:
    """The ``vnpus`` section: ``hamiVnpuCore`` and the chips of ``configs`` (None when the file lists none)."""

    hami_vnpu_core: bool | None = None
    chips: tuple[AscendChip, ...] | None = None


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """What hami-web takes from HAMi's device config; ``iluvatars`` None when the file has no such list."""

    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    hygon: HygonConfig = field(default_factory=HygonConfig)
    cambricon: CambriconConfig = field(default_factory=CambriconConfig)
    iluvatars: tuple[IluvatarChip, ...] | None = None
    vnpus: VnpuConfig = field(default_factory=VnpuConfig)


def _section(document: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = document.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DeviceConfigError(f"{key}: expected a map, got {_type(value)}")
    return value


def _type(value: object) -> str:
    return {dict: "a map", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def _resource(section: Mapping[str, object], key: str, where: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _RESOURCE_NAME.fullmatch(value.strip()):
        raise DeviceConfigError(f"{where}.{key}: {value!r} is not an extended resource name like nvidia.com/gpu")
    return value.strip()


def _integer(section: Mapping[str, object], key: str, where: str, *, minimum: int, maximum: int) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeviceConfigError(f"{where}.{key}: expected an integer, got {_type(value)} {value!r}")
    if not minimum <= value <= maximum:
        raise DeviceConfigError(f"{where}.{key}: {value} is outside {minimum}..{maximum}")
    return value


def _boolean(section: Mapping[str, object], key: str, where: str) -> bool | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"  # the chart renders `overwriteEnv: "false"` as text
    raise DeviceConfigError(f"{where}.{key}: expected true or false, got {value!r}")


def _memory_factor(section: Mapping[str, object], where: str) -> int | None:
    factor = _integer(section, "memoryFactor", where, minimum=0, maximum=MAX_MEMORY_FACTOR)
    return None if factor is None else max(factor, 1)  # HAMi applies the factor only when > 1


def _entries(section: Mapping[str, object], key: str, where: str) -> list[tuple[str, Mapping[str, object]]] | None:
    """A list of maps under ``key`` (None when absent), each with its path for messages."""
    listed = section.get(key)
    if listed is None:
        return None
    if not isinstance(listed, list):
        raise DeviceConfigError(f"{where}: expected a list, got {_type(listed)}")
    entries: list[tuple[str, Mapping[str, object]]] = []
    for position, entry in enumerate(listed):
        here = f"{where}[{position}]"
        if not isinstance(entry, Mapping):
            raise DeviceConfigError(f"{here}: expected a map, got {_type(entry)}")
        entries.append((here, entry))
    return entries


def _iluvatars(document: Mapping[str, object]) -> tuple[IluvatarChip, ...] | None:
    listed = _entries(document, "iluvatars", "iluvatars")
    if listed is None:
        return None
    chips: list[IluvatarChip] = []
    for where, entry in listed:
        word = entry.get("commonWord")
        if not isinstance(word, str) or not _COMMON_WORD.fullmatch(word.strip()):
            raise DeviceConfigError(f"{where}.commonWord: {word!r} is not a common word like MR-V100")
        word = word.strip()
        chip_name = entry.get("chipName", word)
        if not isinstance(chip_name, str):
            raise DeviceConfigError(f"{where}.chipName: expected a string, got {_type(chip_name)}")
        default = default_chip(word).resources
        chips.append(IluvatarChip(common_word=word, chip_name=chip_name.strip() or word, resources=ResourceNames(
            count=_resource(entry, "resourceCountName", where) or default.count,
            memory=_resource(entry, "resourceMemoryName", where) or default.memory,
            memory_percentage="",
            cores=_resource(entry, "resourceCoreName", where) or default.cores,
            priority="")))
    return tuple(chips)


def _string(section: Mapping[str, object], key: str, where: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DeviceConfigError(f"{where}.{key}: expected a string, got {_type(value)} {value!r}")
    return value.strip()


def _vnpu_templates(entry: Mapping[str, object], where: str) -> tuple[VnpuTemplate, ...] | None:
    listed = _entries(entry, "templates", f"{where}.templates")
    if listed is None:
        return None
    templates: list[VnpuTemplate] = []
    for here, template in listed:
        name = _string(template, "name", here)
        if not name:
            raise DeviceConfigError(f"{here}.name: a template needs a name")
        memory = _integer(template, "memory", here, minimum=1, maximum=1 << 21)
        if memory is None:
            raise DeviceConfigError(f"{here}.memory: a template needs its memory in MiB")
        templates.append(VnpuTemplate(name=name, memory_mib=memory))
    return tuple(templates)


def _vnpu_chip(entry: Mapping[str, object], where: str) -> AscendChip:
    word = entry.get("commonWord")
    if not isinstance(word, str) or not _COMMON_WORD.fullmatch(word.strip()):
        raise DeviceConfigError(f"{where}.commonWord: {word!r} is not a common word like Ascend910B3")
    word = word.strip()
    chart = default_ascend_chip(word)
    resources = chart.resources if chart else ResourceNames(
        count=f"huawei.com/{word}", memory=f"huawei.com/{word}-memory", memory_percentage="",
        cores=f"huawei.com/{word}-core", priority="")
    allocatable = _integer(entry, "memoryAllocatable", where, minimum=1, maximum=1 << 21)
    capacity = _integer(entry, "memoryCapacity", where, minimum=1, maximum=1 << 21)
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
        common_word=word, chip_name=_string(entry, "chipName", where) or (chart.chip_name if chart else word),
        resources=ResourceNames(
            count=_resource(entry, "resourceName", where) or resources.count,
            memory=_resource(entry, "resourceMemoryName", where) or resources.memory, memory_percentage="",
            cores=_resource(entry, "resourceCoreName", where) or resources.cores, priority=""),
        memory=memory,
        memory_factor=_memory_factor(entry, where) or 1,
        runtime_class_name=_string(entry, "runtimeClassName", where) or "",
        overwrite_env=bool(_boolean(entry, "overwriteEnv", where)),
        super_pod=bool(_boolean(entry, "superPod", where)) if entry.get("superPod") is not None
        else bool(chart and chart.super_pod))


def _vnpus(document: Mapping[str, object]) -> VnpuConfig:
    section = _section(document, "vnpus")
    listed = _entries(section, "configs", "vnpus.configs")
    chips = None if listed is None else tuple(_vnpu_chip(entry, where) for where, entry in listed)
    return VnpuConfig(hami_vnpu_core=_boolean(section, "hamiVnpuCore", "vnpus"), chips=chips)


def parse_device_config(document: object) -> DeviceConfig:
    """Read a loaded ``device-config.yaml``; `DeviceConfigError` names the key that is wrong."""
    if document is None:
        return DeviceConfig()
    if not isinstance(document, Mapping):
        raise DeviceConfigError(f"the document must be a map of device sections, got {_type(document)}")
    nvidia = _section(document, "nvidia")
    hygon = _section(document, "hygon")
    cambricon = _section(document, "cambricon")
    return DeviceConfig(
        nvidia=NvidiaConfig(
            count=_resource(nvidia, "resourceCountName", "nvidia"),
            memory=_resource(nvidia, "resourceMemoryName", "nvidia"),
            memory_percentage=_resource(nvidia, "resourceMemoryPercentageName", "nvidia"),
            cores=_resource(nvidia, "resourceCoreName", "nvidia"),
            priority=_resource(nvidia, "resourcePriorityName", "nvidia"),
            overwrite_env=_boolean(nvidia, "overwriteEnv", "nvidia"),
            default_memory_mib=_integer(nvidia, "defaultMemory", "nvidia", minimum=0, maximum=1 << 19),
            default_cores=_integer(nvidia, "defaultCores", "nvidia", minimum=0, maximum=100),
            default_count=_integer(nvidia, "defaultGPUNum", "nvidia", minimum=1, maximum=128),
            memory_factor=_memory_factor(nvidia, "nvidia"),
        ),
        hygon=HygonConfig(
            count=_resource(hygon, "resourceCountName", "hygon"),
            memory=_resource(hygon, "resourceMemoryName", "hygon"),
            cores=_resource(hygon, "resourceCoreName", "hygon"),
            memory_factor=_memory_factor(hygon, "hygon"),
        ),
        cambricon=CambriconConfig(
            count=_resource(cambricon, "resourceCountName", "cambricon"),
            memory=_resource(cambricon, "resourceMemoryName", "cambricon"),
            cores=_resource(cambricon, "resourceCoreName", "cambricon"),
        ),
        iluvatars=_iluvatars(document),
        vnpus=_vnpus(document),
    )


def config_document(config: DeviceConfig) -> dict[str, object]:
    """``config`` as HAMi's YAML document (only what is set): what the server publishes for the operator tools,
    which read it back with `parse_device_config`."""
    nvidia = {key: value for key, value in (
        ("resourceCountName", config.nvidia.count), ("resourceMemoryName", config.nvidia.memory),
        ("resourceMemoryPercentageName", config.nvidia.memory_percentage),
        ("resourceCoreName", config.nvidia.cores), ("resourcePriorityName", config.nvidia.priority),
        ("overwriteEnv", config.nvidia.overwrite_env), ("defaultMemory", config.nvidia.default_memory_mib),
        ("defaultCores", config.nvidia.default_cores), ("defaultGPUNum", config.nvidia.default_count),
        ("memoryFactor", config.nvidia.memory_factor)) if value is not None}
    hygon = {key: value for key, value in (
        ("resourceCountName", config.hygon.count), ("resourceMemoryName", config.hygon.memory),
        ("resourceCoreName", config.hygon.cores), ("memoryFactor", config.hygon.memory_factor)) if value is not None}
    cambricon = {key: value for key, value in (
        ("resourceCountName", config.cambricon.count), ("resourceMemoryName", config.cambricon.memory),
        ("resourceCoreName", config.cambricon.cores)) if value is not None}
    document: dict[str, object] = {}
    if nvidia:
        document["nvidia"] = nvidia
    if hygon:
        document["hygon"] = hygon
    if cambricon:
        document["cambricon"] = cambricon
    if config.iluvatars is not None:
        document["iluvatars"] = [{"chipName": chip.chip_name, "commonWord": chip.common_word,
                                  "resourceCountName": chip.resources.count,
                                  "resourceMemoryName": chip.resources.memory,
                                  "resourceCoreName": chip.resources.cores} for chip in config.iluvatars]
    vnpus: dict[str, object] = {}
    if config.vnpus.hami_vnpu_core is not None:
        vnpus["hamiVnpuCore"] = config.vnpus.hami_vnpu_core
    if config.vnpus.chips is not None:
        vnpus["configs"] = [{
            "chipName": chip.chip_name, "commonWord": chip.common_word, "resourceName": chip.resources.count,
            "resourceMemoryName": chip.resources.memory, "resourceCoreName": chip.resources.cores,
            "memoryAllocatable": chip.memory.allocatable_mib, "memoryCapacity": chip.memory.capacity_mib,
            "memoryFactor": chip.memory_factor, "runtimeClassName": chip.runtime_class_name,
            "overwriteEnv": chip.overwrite_env, "superPod": chip.super_pod,
            "templates": [{"name": t.name, "memory": t.memory_mib} for t in chip.memory.templates],
        } for chip in config.vnpus.chips]
    if vnpus:
        document["vnpus"] = vnpus
    return document
