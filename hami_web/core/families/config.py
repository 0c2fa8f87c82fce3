"""Reading HAMi's device config (``device-config.yaml`` of the ``hami-scheduler-device`` ConfigMap) as HAMi reads it.

Every HAMi install mounts this file, so an operator switching to hami-web passes it unchanged with
``--device-config-file``. Each family's spec reads its own section (`hami_web.core.families.spec.FamilySpec.read`)
with these helpers; keys no registered family reads are ignored. A key read with the wrong type fails with the key's
path, never a half-read configuration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hami_web.core.families.family import DeviceConfigError, ResourceNames

__all__ = [
    "COMMON_WORD",
    "MAX_MEMORY_FACTOR",
    "DeviceConfigError",
    "boolean",
    "changed_names",
    "entries",
    "integer",
    "memory_factor",
    "names_document",
    "resource",
    "resource_names",
    "section_map",
    "string",
    "type_name",
]

RESOURCE_NAME = re.compile(r"[A-Za-z0-9.\-]+/[A-Za-z0-9.\-_]+")
COMMON_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-_]{0,62}")
# Memory factors beyond this turn any request into more memory than a device has.
MAX_MEMORY_FACTOR = 1 << 16


def section_map(value: object, where: str) -> Mapping[str, object]:
    """A section's value as a map ({} when absent)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DeviceConfigError(f"{where}: expected a map, got {type_name(value)}")
    return value


def type_name(value: object) -> str:
    """How an error names a value's YAML type."""
    return {dict: "a map", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def resource(section: Mapping[str, object], key: str, where: str) -> str | None:
    """An extended resource name under ``key`` (None when absent)."""
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not RESOURCE_NAME.fullmatch(value.strip()):
        raise DeviceConfigError(f"{where}.{key}: {value!r} is not an extended resource name like nvidia.com/gpu")
    return value.strip()


def integer(section: Mapping[str, object], key: str, where: str, *, minimum: int, maximum: int) -> int | None:
    """An integer in ``minimum..maximum`` under ``key`` (None when absent)."""
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeviceConfigError(f"{where}.{key}: expected an integer, got {type_name(value)} {value!r}")
    if not minimum <= value <= maximum:
        raise DeviceConfigError(f"{where}.{key}: {value} is outside {minimum}..{maximum}")
    return value


def boolean(section: Mapping[str, object], key: str, where: str) -> bool | None:
    """true or false under ``key``, as YAML or as text (None when absent)."""
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"  # the chart renders `overwriteEnv: "false"` as text
    raise DeviceConfigError(f"{where}.{key}: expected true or false, got {value!r}")


def memory_factor(section: Mapping[str, object], where: str) -> int | None:
    """``memoryFactor`` (None when absent; 0 reads as 1, as HAMi applies it only above 1)."""
    factor = integer(section, "memoryFactor", where, minimum=0, maximum=MAX_MEMORY_FACTOR)
    return None if factor is None else max(factor, 1)  # HAMi applies the factor only when > 1


def entries(listed: object, where: str) -> list[tuple[str, Mapping[str, object]]] | None:
    """A list of maps (None when absent), each with its path for messages."""
    if listed is None:
        return None
    if not isinstance(listed, list):
        raise DeviceConfigError(f"{where}: expected a list, got {type_name(listed)}")
    found: list[tuple[str, Mapping[str, object]]] = []
    for position, entry in enumerate(listed):
        here = f"{where}[{position}]"
        if not isinstance(entry, Mapping):
            raise DeviceConfigError(f"{here}: expected a map, got {type_name(entry)}")
        found.append((here, entry))
    return found


def string(section: Mapping[str, object], key: str, where: str) -> str | None:
    """A string under ``key``, trimmed (None when absent)."""
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DeviceConfigError(f"{where}.{key}: expected a string, got {type_name(value)} {value!r}")
    return value.strip()


def resource_names(section: Mapping[str, object], where: str, default: ResourceNames) -> ResourceNames:
    """The ``resourceCountName``/``resourceMemoryName``/``resourceCoreName`` of a section, each else ``default``'s
    (HAMi's chart names); memory percentage and priority as ``default`` has them."""
    return ResourceNames(count=resource(section, "resourceCountName", where) or default.count,
                         memory=resource(section, "resourceMemoryName", where) or default.memory,
                         memory_percentage=default.memory_percentage,
                         cores=resource(section, "resourceCoreName", where) or default.cores,
                         priority=default.priority)


def changed_names(resources: ResourceNames, default: ResourceNames) -> tuple[tuple[str, str | None], ...]:
    """The ``resource…Name`` keys of ``resources`` that differ from ``default`` (None for one that does not)."""
    return tuple((key, name if name != default_name else None) for key, name, default_name in (
        ("resourceCountName", resources.count, default.count), ("resourceMemoryName", resources.memory, default.memory),
        ("resourceCoreName", resources.cores, default.cores)))


def names_document(pairs: tuple[tuple[str, object | None], ...]) -> dict[str, object] | None:
    """A section to publish from (key, value) pairs, the unset (None) ones left out; None when none is set."""
    document = {key: value for key, value in pairs if value is not None}
    return document or None
