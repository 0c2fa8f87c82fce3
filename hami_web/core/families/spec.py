"""How a family plugs in: the one object each vendor module exports (docs/device-families.md#device-families, adding a
family).

**Adding a family** is one module and one registry line:

1. write ``hami_web/core/families/<vendor>.py`` exporting ``SPEC = FamilySpec(...)``: its name, the section of HAMi's
   device ConfigMap it reads (``read``) and publishes back (``publish``), the flag that enables it when HAMi gates it
   (none: on by default), and ``build``, which turns that section into its `Family` records (resources, annotation
   keys, lock, inventory source, grouping, node score, grant type, health source, webhook rules: all fields of
   `Family`, so nothing outside the module asks which vendor it is);
2. add ``<vendor>.SPEC`` to ``REGISTRY`` in ``hami_web/core/families/registry.py``.

The CLI flags (``--enable-<vendor>``), the device-config reader and what the server publishes for ``kubectl hami``, the
catalog every part of the server reads, and the checks of the shipped manifests (``managedResources``, the webhook's
``matchConditions``) all read the registry. What several families share is an object the record holds
(`CapacityInventory` for devices read from node capacity, `hami_web.core.groups` for grouped picks), not a field one
family uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from hami_web.core.families.family import Family

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class FamilySpec(Generic[C]):
    """Everything about one vendor that is not per-device data: how it is configured, enabled and built.

    - ``name``: the registry key (lower case, ``--enable-<name>`` when gated); ``label``: for help and the docs;
    - ``section``: the key of HAMi's ``device-config.yaml`` it reads ("" = none); ``default``: its configuration when
      the file has no such key; ``read(value, where)`` parses the key's value (``where`` names it in errors, which
      are `DeviceConfigError`); ``publish(config)`` is the value written back for the tools (None = nothing);
    - ``build(config)``: the family records (one per chip for Iluvatar and Ascend);
    - ``flag``: "" when HAMi registers the family unconditionally (on here too), else the switch that enables it, with
      ``flag_help`` and the chart value that sets it (``chart_value``).
    """

    name: str
    label: str
    section: str
    default: C
    read: Callable[[object, str], C]
    publish: Callable[[C], object | None]
    build: Callable[[C], tuple[Family, ...]]
    flag: str = ""
    flag_help: str = ""
    chart_value: str = ""


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """What hami-web read of HAMi's device config: each registered family's section, parsed by its spec (a family whose
    section the file leaves out has its spec's ``default``)."""

    sections: Mapping[str, object] = field(default_factory=dict)

    def get(self, spec: FamilySpec[C]) -> C:
        """The configuration of ``spec``'s family (its default when the file has no section for it)."""
        value = self.sections.get(spec.name)
        return spec.default if value is None else cast(C, value)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.sections)))
