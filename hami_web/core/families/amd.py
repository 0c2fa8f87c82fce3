"""AMD GPUs (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/amd/device.go``).

The device plugin registers each GPU as HAMi's ``DeviceInfo`` JSON under ``hami.io/node-amd-register``, ``devcore``
being its compute units (CUs) and ``type`` its product (``AMD_Instinct_MI300X_VF``). There is no handshake: the
family's health is the node's capacity of ``amd.com/gpu`` (HAMi's ``CheckHealth``), and its GPUs leave the node while
that is 0. A container asks ``amd.com/gpu`` in limits, memory in MiB (``amd.com/gpumem``; none or 0: the whole GPU) and
``amd.com/gpucores`` as a percentage of each GPU (1..100, none: 100), which each GPU books as its compute units
(`ComputeUnits`). Any registered type serves; ``amd.com/use-gputype`` / ``nouse-gputype`` select by it and
``amd.com/use-gpu-uuid`` / ``nouse-gpu-uuid`` by id. The webhook routes a container with any of the three resources in
limits but adds no count, and refuses a cores percentage outside 1..100 beside a count. The bind takes
``hami.io/mutex.lock`` and writes ``hami.io/amd-devices-to-allocate`` / ``-allocated`` with each grant's product type in
the type field.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_web.core.devices import Device
from hami_web.core.families import config
from hami_web.core.families.capacity import CapacityHealth
from hami_web.core.families.devicetypes import PRODUCT_TYPES
from hami_web.core.families.family import AdmissionRules, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec

CW = "AMD"
KIND = "amd"
FULL_PERCENT = 100
DEFAULT_RESOURCES = ResourceNames(count="amd.com/gpu", memory="amd.com/gpumem", memory_percentage="",
                                  cores="amd.com/gpucores", priority="")


@dataclass(frozen=True, slots=True)
class ComputeUnits:
    """HAMi's AMD ``Fit``: a cores percentage books ``devcore × percent ÷ 100`` compute units of each GPU, at least one
    and at most all of them; a GPU registering no compute units takes no cores ask."""

    unit = "compute units (each GPU's devcore x percent / 100)"

    def ask(self, count: int, cores: int | None, resources: ResourceNames) -> tuple[int, int]:
        """The count as given; cores 100 when absent, else 1..100 (HAMi's ``GenerateResourceRequests`` reads any other
        value as no request at all)."""
        if cores is None:
            return count, FULL_PERCENT
        if count and not 1 <= cores <= FULL_PERCENT:
            raise ValueError(f"{resources.cores} must be an integer percentage between 1 and 100, got {cores}")
        return count, cores

    def book(self, device: Device, used: int, cores: int) -> int | None:
        """The compute units ``cores`` percent of ``device`` is, None when fewer are free."""
        units = compute_units(device.cores, cores)
        return units if units and device.cores - used >= units else None

    def overbooked(self, device: Device, theirs: int, ours: int) -> bool:
        """More compute units booked than the GPU has."""
        return theirs + ours > device.cores


def compute_units(total: int, percent: int) -> int:
    """``percent`` of ``total`` compute units, clamped to 1..total; 0 when the GPU registers none."""
    return min(max(total * percent // FULL_PERCENT, 1), total) if total > 0 else 0


COMPUTE_UNITS = ComputeUnits()


def amd_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The AMD family with the given names (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="AMD GPU", resources=resources,
        register_key="hami.io/node-amd-register",
        handshake_key="",
        to_allocate_key="hami.io/amd-devices-to-allocate",
        allocated_key="hami.io/amd-devices-allocated",
        use_type_key="amd.com/use-gputype",
        nouse_type_key="amd.com/nouse-gputype",
        use_uuid_key="amd.com/use-gpu-uuid",
        nouse_uuid_key="amd.com/nouse-gpu-uuid",
        admission=AdmissionRules(route_without_count=True),
        core_booking=COMPUTE_UNITS,
        types=PRODUCT_TYPES,
        health=CapacityHealth(resources.count),
    )


def read_amd(value: object, where: str) -> ResourceNames:
    """The ``amd`` section: its three resource names, each else the chart's."""
    return config.resource_names(config.section_map(value, where), where, DEFAULT_RESOURCES)


SPEC = FamilySpec(name=KIND, label="AMD GPU", section="amd", default=DEFAULT_RESOURCES, read=read_amd,
                  publish=lambda names: config.names_document(config.changed_names(names, DEFAULT_RESOURCES)),
                  build=lambda names: (amd_family(names),))
