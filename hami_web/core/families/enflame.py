"""Enflame GCUs, whole and exclusive (docs/device-families.md#device-families; HAMi v2.10
``pkg/device/enflame/gcu.go``).

Whole cards asked by count (``enflame.com/gcu``, limits or requests; the webhook routes a container with the count in
limits). The inventory is the node's capacity of that resource: card i is ``<node>-GCU-<i>`` with HAMi's nominal 100
memory units and 100 cores, one task, so a card in use takes no other container. A container books all of it. HAMi
takes no node lock for it (the bind takes hami-web's own) and has no handshake; the bind writes
``hami.io/enflame-gcu-devices-to-allocate`` / ``-allocated``. The ``enflame`` section of the device config is shared
with Enflame DRS; this family reads its ``resourceNameGCU``.
"""

from __future__ import annotations

from hami_web.core.families import config
from hami_web.core.families.capacity import CapacityInventory
from hami_web.core.families.family import Family, ResourceNames
from hami_web.core.families.spec import FamilySpec

CW = "GCU"
KIND = "enflame"
NOMINAL_UNITS = 100
DEFAULT_RESOURCES = ResourceNames(count="enflame.com/gcu", memory="", memory_percentage="", cores="", priority="")


def enflame_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The Enflame GCU family with the given count resource (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Enflame GCU", resources=resources,
        register_key="", handshake_key="",
        to_allocate_key="hami.io/enflame-gcu-devices-to-allocate",
        allocated_key="hami.io/enflame-gcu-devices-allocated",
        lock=None,
        default_cores=NOMINAL_UNITS,
        inventory=CapacityInventory(family=CW, resource=resources.count, id_infix=f"-{CW}-", device_type=CW,
                                    memory_mib=NOMINAL_UNITS, cores=NOMINAL_UNITS),
    )


def read_enflame(value: object, where: str) -> ResourceNames:
    """The ``enflame`` section's ``resourceNameGCU`` (its DRS keys belong to Enflame DRS)."""
    section = config.section_map(value, where)
    return ResourceNames(count=config.resource(section, "resourceNameGCU", where) or DEFAULT_RESOURCES.count,
                         memory="", memory_percentage="", cores="", priority="")


def publish_enflame(names: ResourceNames) -> object | None:
    """The section back: ``resourceNameGCU`` when it is not the chart's."""
    return None if names == DEFAULT_RESOURCES else {"resourceNameGCU": names.count}


SPEC = FamilySpec(name=KIND, label="Enflame GCU", section="enflame", default=DEFAULT_RESOURCES, read=read_enflame,
                  publish=publish_enflame, build=lambda names: (enflame_family(names),))
