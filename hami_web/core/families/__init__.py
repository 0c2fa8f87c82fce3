"""Device families (docs/device-families.md#device-families): the registry of what accelerators hami-web schedules, and
how they are enabled.

A family is a record (`Family`) built by its vendor module's spec (`FamilySpec`, whose docstring says how to add a
family: one module and one line of `REGISTRY`); the enabled ones form the server's `DeviceCatalog`. The fit, the
codecs, the webhook, the bind and the tools read the record and never name a vendor; the flags, the device-config
reader and what is published for the tools read the registry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hami_web.core.families import registry as _registry
from hami_web.core.families.config import type_name
from hami_web.core.families.family import (
    NODE_LOCK,
    AdmissionAsk,
    AdmissionRewrite,
    AdmissionRules,
    DeviceCatalog,
    DeviceConfigError,
    Family,
    ResourceNames,
)
from hami_web.core.families.nvidia import CW as NVIDIA
from hami_web.core.families.registry import REGISTRY
from hami_web.core.families.spec import DeviceConfig, FamilySpec

__all__ = [
    "DEFAULT_CATALOG",
    "NODE_LOCK",
    "NVIDIA",
    "REGISTRY",
    "AdmissionAsk",
    "AdmissionRewrite",
    "AdmissionRules",
    "DeviceCatalog",
    "DeviceConfig",
    "DeviceConfigError",
    "Family",
    "FamilySpec",
    "ResourceNames",
    "build_catalog",
    "config_document",
    "gated_specs",
    "parse_device_config",
]


def gated_specs(registry: Sequence[FamilySpec[Any]] | None = None) -> tuple[FamilySpec[Any], ...]:
    """The specs HAMi gates behind a flag (``--enable-<name>``), in registry order."""
    return tuple(spec for spec in _specs(registry) if spec.flag)


def _specs(registry: Sequence[FamilySpec[Any]] | None) -> Sequence[FamilySpec[Any]]:
    """``registry``, else `REGISTRY` as it is now (read at each call, so a test may add a family to it)."""
    return _registry.REGISTRY if registry is None else registry


def build_catalog(*, nvidia: Family | None = None, config: DeviceConfig | None = None,
                  enable: Collection[str] = (), registry: Sequence[FamilySpec[Any]] | None = None) -> DeviceCatalog:
    """The enabled families: every spec without a flag, and those with one whose name is in ``enable``, each built
    from its section of ``config`` (its default when absent). ``nvidia``, when given, replaces the NVIDIA family
    built from the file (the server merges its flags into it first)."""
    config = config or DeviceConfig()
    unknown = set(enable) - {spec.name for spec in gated_specs(registry)}
    if unknown:
        raise DeviceConfigError(f"no family named {', '.join(sorted(unknown))} can be enabled")
    families: list[Family] = []
    for spec in _specs(registry):
        if spec.flag and spec.name not in enable:
            continue
        families.extend(spec.build(config.get(spec)))
    if nvidia is not None:
        families = [nvidia if family.cw == nvidia.cw else family for family in families]
    catalog = DeviceCatalog(families=tuple(families))
    _check_names(catalog)
    return catalog


def parse_device_config(document: object, registry: Sequence[FamilySpec[Any]] | None = None) -> DeviceConfig:
    """Read a loaded ``device-config.yaml``: each registered family's section by its spec; `DeviceConfigError` names
    the key that is wrong. Keys no family reads are ignored."""
    if document is None:
        return DeviceConfig()
    if not isinstance(document, Mapping):
        raise DeviceConfigError(f"the document must be a map of device sections, got {type_name(document)}")
    sections: dict[str, object] = {}
    for spec in _specs(registry):
        if not spec.section or document.get(spec.section) is None:
            continue
        value = spec.read(document[spec.section], spec.section)
        if value != spec.default:
            sections[spec.name] = value
    return DeviceConfig(sections=sections)


def config_document(config: DeviceConfig, registry: Sequence[FamilySpec[Any]] | None = None) -> dict[str, object]:
    """``config`` as HAMi's YAML document (only what is set): what the server publishes for the operator tools,
    which read it back with `parse_device_config`."""
    document: dict[str, object] = {}
    for spec in _specs(registry):
        if not spec.section or (value := spec.publish(config.get(spec))) is None:
            continue
        shared = document.get(spec.section)
        # Two families may read one section (Metax GPU and sGPU read ``metax``): each publishes its own keys.
        document[spec.section] = {**shared, **value} if isinstance(shared, dict) and isinstance(value, dict) \
            else value
    return document


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
