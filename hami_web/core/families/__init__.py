"""Device families (README.md#device-families): the registry of what accelerators hami-web schedules, and how they are
enabled.

A family is a record (`Family`); the enabled ones form the server's `DeviceCatalog`. Registering a family is one
module and one entry in `build_catalog`: the fit, the codecs, the webhook, the bind and the tools read the
record and never name a vendor.
"""

from __future__ import annotations

from dataclasses import replace

from hami_web.core.families.ascend import DEFAULT_CHIPS as ASCEND_CHIPS
from hami_web.core.families.ascend import ascend_family
from hami_web.core.families.cambricon import DEFAULT_RESOURCES as CAMBRICON_RESOURCES
from hami_web.core.families.cambricon import cambricon_family
from hami_web.core.families.config import DeviceConfig, DeviceConfigError, parse_device_config
from hami_web.core.families.family import (
    MODULE_PAIRS,
    NETWORK_GROUPS,
    NODE_LOCK,
    AdmissionAsk,
    AdmissionRewrite,
    AdmissionRules,
    DeviceCatalog,
    Family,
    ResourceNames,
)
from hami_web.core.families.hygon import DEFAULT_RESOURCES as HYGON_RESOURCES
from hami_web.core.families.hygon import hygon_family
from hami_web.core.families.iluvatar import DEFAULT_CHIPS, iluvatar_family
from hami_web.core.families.nvidia import CW as NVIDIA
from hami_web.core.families.nvidia import nvidia_family

__all__ = [
    "DEFAULT_CATALOG",
    "MODULE_PAIRS",
    "NETWORK_GROUPS",
    "NODE_LOCK",
    "NVIDIA",
    "AdmissionAsk",
    "AdmissionRewrite",
    "AdmissionRules",
    "DeviceCatalog",
    "DeviceConfig",
    "DeviceConfigError",
    "Family",
    "ResourceNames",
    "build_catalog",
    "parse_device_config",
]


def build_catalog(*, nvidia: Family | None = None, config: DeviceConfig | None = None,
                  enable_iluvatar: bool = False, enable_ascend: bool = False) -> DeviceCatalog:
    """The enabled families: NVIDIA (as given, else chart defaults), Hygon and Cambricon always; Iluvatar's and
    Ascend's chips when enabled (the device config's lists, else the chart's chips).

    ``config`` supplies what the device config file says for the families other than NVIDIA, whose settings the
    flags and the file have already merged into ``nvidia``.
    """
    config = config or DeviceConfig()
    hygon = config.hygon
    families = [
        nvidia or nvidia_family(),
        hygon_family(resources=ResourceNames(count=hygon.count or HYGON_RESOURCES.count,
                                             memory=hygon.memory or HYGON_RESOURCES.memory, memory_percentage="",
                                             cores=hygon.cores or HYGON_RESOURCES.cores, priority=""),
                     memory_factor=hygon.memory_factor or 1),
        cambricon_family(resources=ResourceNames(
            count=config.cambricon.count or CAMBRICON_RESOURCES.count,
            memory=config.cambricon.memory or CAMBRICON_RESOURCES.memory, memory_percentage="",
            cores=config.cambricon.cores or CAMBRICON_RESOURCES.cores, priority="")),
    ]
    if enable_iluvatar:
        chips = DEFAULT_CHIPS if config.iluvatars is None else config.iluvatars
        families.extend(iluvatar_family(chip) for chip in chips)
    if enable_ascend:
        vnpus = config.vnpus
        families.extend(ascend_family(chip, soft_split_default=bool(vnpus.hami_vnpu_core))
                        for chip in (ASCEND_CHIPS if vnpus.chips is None else vnpus.chips))
    catalog = DeviceCatalog(families=tuple(families))
    _check_names(catalog)
    return catalog


def _check_names(catalog: DeviceCatalog) -> None:
    """Two families (or two resources of one) sharing a resource name would make a container ambiguous."""
    owners: dict[str, str] = {}
    for family in catalog:
        for name in family.resources.all():
            if name in owners:
                raise DeviceConfigError(f"resource {name} is used by both {owners[name]} and {family.cw}"
                                        if owners[name] != family.cw else
                                        f"resource {name} is given twice for {family.cw}")
            owners[name] = family.cw


DEFAULT_CATALOG = build_catalog()


def with_nvidia(catalog: DeviceCatalog, nvidia: Family) -> DeviceCatalog:
    """``catalog`` with its NVIDIA family replaced (tests and tools that vary NVIDIA's names or defaults)."""
    return replace(catalog, families=tuple(nvidia if family.cw == NVIDIA else family for family in catalog))
