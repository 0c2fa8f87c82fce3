"""A made-up family, Zeta ZPUs: the *one module* `test_new_family` adds (with one line of the registry).

Everything about it is here, as a vendor module of ``hami_web/core/families/`` would hold it: its resource, its
register annotation (HAMi's ``DeviceInfo`` JSON, so the common codec reads it), the one pod annotation its device
plugin reads (no ``…-to-allocate`` key), no handshake, no HAMi node lock (the bind takes hami-web's own), a
``zeta`` section of the device config for its resource name, and its spec.
"""

from __future__ import annotations

from hami_web.core.families import config
from hami_web.core.families.family import Family, ResourceNames
from hami_web.core.families.spec import FamilySpec

CW = "Zeta"
DEFAULT_RESOURCES = ResourceNames(count="zeta.example.com/zpu", memory="", memory_percentage="", cores="",
                                  priority="")


def zeta_family(resources: ResourceNames) -> Family:
    """Whole ZPUs, asked by count."""
    return Family(cw=CW, kind="zeta", label="Zeta ZPU", resources=resources,
                  register_key="hami.io/node-zeta-register", handshake_key="", to_allocate_key="",
                  allocated_key="hami.io/zeta-devices-allocated", lock=None, default_cores=100)


SPEC = FamilySpec(name="zeta", label="Zeta ZPU", section="zeta", default=DEFAULT_RESOURCES,
                  read=lambda value, where: config.resource_names(config.section_map(value, where), where,
                                                                  DEFAULT_RESOURCES),
                  publish=lambda resources: config.names_document(config.changed_names(resources, DEFAULT_RESOURCES)),
                  build=lambda resources: (zeta_family(resources),))
