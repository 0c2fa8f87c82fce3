"""Which settings the tools decide with: the ones the running server published, else defaults, then flags.

The server writes its scheduling settings into a ConfigMap at start-up (`server.publication`). The tools
read it, let any flag the operator gave override one value, and say where each answer came from, so an
``explain`` on a default install needs no flags and an answer never rests on an unstated guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_web.core.policy import SchedulingPolicy
from hami_web.kube import Kube, KubeError, NotFoundError
from hami_web.settings import Settings, SettingsError, settings_from_published


@dataclass(frozen=True, slots=True)
class ToolSettings:
    """The policies the tools apply, the node selector the server lists with, and where they came from."""

    policies: SchedulingPolicy
    node_label_selector: str
    source: str
    preemption: bool = True  # the server preempts (--preemption, as published: off when it lacks the rights)


def read_published(kube: Kube, location: str) -> tuple[Settings | None, str]:
    """The settings published at ``location`` (NAMESPACE/NAME), or None and why they are not used.

    Only an unreachable API stops the command (it stops the lists too); a missing, unreadable or forbidden
    ConfigMap only means falling back, which the source says.
    """
    if not location:
        return None, "--settings-configmap off"
    namespace, _, name = location.partition("/")
    try:
        config_map = kube.get_config_map(namespace, name)
    except NotFoundError:
        return None, f"ConfigMap {location} not found"
    except KubeError as error:
        if not error.status:
            raise
        return None, f"ConfigMap {location} unreadable: {error}"
    try:
        return settings_from_published(config_map.get("data") or {}, where=f"ConfigMap {location}"), ""
    except SettingsError as error:
        return None, str(error)


def tool_settings(kube: Kube, location: str, overrides: Mapping[str, tuple[str, object]]) -> ToolSettings:
    """The published settings (or the defaults), with ``overrides`` applied on top: a `Settings` field →
    (the flag that gave it, its value or None when not given); ``source`` names both."""
    published, why_not = read_published(kube, location)
    base = published or Settings()
    given: dict[str, Any] = {field: value for field, (_, value) in overrides.items() if value is not None}
    flags = sorted(flag for field, (flag, _) in overrides.items() if field in given)
    settings = base.with_values(**given) if given else base
    source = f"ConfigMap {location} (published by the server)" if published else f"defaults ({why_not})"
    if flags:
        source += f", overridden by {', '.join(flags)}"
    return ToolSettings(policies=settings.policy, node_label_selector=settings.watch.node_label_selector,
                        source=source, preemption=settings.preemption == "on")
