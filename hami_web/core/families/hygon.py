"""Hygon DCUs (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/hygon/device.go``).

A DCU is booked like an NVIDIA GPU, without cordon, NUMA, topology or modes. Two HAMi defaults differ: a
container that gives no cores asks for all of them (``corenum := int32(100)``), and only a count in limits makes
a container a DCU container (``MutateAdmission`` looks at limits only and mutates nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_web.core.families import config
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec

CW = "DCU"
KIND = "hygon"
DEFAULT_RESOURCES = ResourceNames(count="hygon.com/dcunum", memory="hygon.com/dcumem", memory_percentage="",
                                  cores="hygon.com/dcucores", priority="")


def hygon_family(*, resources: ResourceNames = DEFAULT_RESOURCES, memory_factor: int = 1) -> Family:
    """The Hygon DCU family with the given names (HAMi's chart values when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Hygon DCU", resources=resources,
        register_key="hami.io/node-dcu-register",
        handshake_key="hami.io/node-handshake-dcu",
        to_allocate_key="hami.io/dcu-devices-to-allocate",
        allocated_key="hami.io/dcu-devices-allocated",
        memory_factor=memory_factor,
        default_cores=100,
        use_type_key="hygon.com/use-dcutype",
        nouse_type_key="hygon.com/nouse-dcutype",
        use_uuid_key="hygon.com/use-gpuuuid",
        nouse_uuid_key="hygon.com/nouse-gpuuuid",
        admission=AdmissionRules(),
    )


@dataclass(frozen=True, slots=True)
class HygonConfig:
    """The ``hygon`` section: the resource names (chart names when left out) and the memory factor."""

    resources: ResourceNames = DEFAULT_RESOURCES
    memory_factor: int | None = None


def read_hygon(value: object, where: str) -> HygonConfig:
    """The ``hygon`` section."""
    section = config.section_map(value, where)
    return HygonConfig(resources=config.resource_names(section, where, DEFAULT_RESOURCES),
                       memory_factor=config.memory_factor(section, where))


def publish_hygon(hygon: HygonConfig) -> object | None:
    """The section back: the names that differ from the chart's, and the factor when set."""
    return config.names_document((*config.changed_names(hygon.resources, DEFAULT_RESOURCES),
                                  ("memoryFactor", hygon.memory_factor)))


SPEC = FamilySpec(name=KIND, label="Hygon DCU", section="hygon", default=HygonConfig(), read=read_hygon,
                  publish=publish_hygon,
                  build=lambda hygon: (hygon_family(resources=hygon.resources,
                                                    memory_factor=hygon.memory_factor or 1),))
