"""HAMi's device config file (``--device-config-file``) as the server reads it at start-up, and the error every source
of settings raises.

Apart from the option table because it is a file, not a text: read once, its errors naming the file, the key and the
line, and its NVIDIA section filling what no flag set (docs/configuration.md#configuration).
"""

from __future__ import annotations

from typing import Any

import yaml

from hami_web.core.families import DeviceConfig, DeviceConfigError, parse_device_config
from hami_web.core.families import nvidia as nvidia_spec


class SettingsError(ValueError):
    """A configuration value is invalid; the message names the flag."""


def read_device_config(path: str) -> DeviceConfig:
    """Load HAMi's ``device-config.yaml``; `SettingsError` names the file and the key that is wrong."""
    where = f"invalid value for --device-config-file: {path}"
    try:
        with open(path, encoding="utf-8") as stream:
            document = yaml.safe_load(stream)
    except OSError as error:
        raise SettingsError(f"{where}: cannot read it: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        position = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SettingsError(f"{where}: not valid YAML{position}: {problem}") from None
    try:
        return parse_device_config(document)
    except DeviceConfigError as error:
        raise SettingsError(f"{where}: {error}") from None


def fill_from_device_config(config: DeviceConfig, top: dict[str, Any], resources: dict[str, Any]) -> None:
    """Precedence (docs/configuration.md#configuration, ``--device-config-file``): an explicit flag, else the file, else
    the chart default (the field's default)."""
    nvidia = config.get(nvidia_spec.SPEC)
    for key, value in (("count", nvidia.count), ("memory", nvidia.memory),
                       ("memory_percentage", nvidia.memory_percentage), ("cores", nvidia.cores),
                       ("priority", nvidia.priority)):
        if value is not None:
            resources.setdefault(key, value)
    defaults: tuple[tuple[str, int | bool | None], ...] = (
        ("default_mem_mib", nvidia.default_memory_mib), ("default_cores", nvidia.default_cores),
        ("default_gpu", nvidia.default_count), ("overwrite_env", nvidia.overwrite_env))
    for key, setting in defaults:
        if setting is not None:
            top.setdefault(key, setting)
