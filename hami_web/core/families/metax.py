"""Metax GPUs, whole cards (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/metax/device.go``,
``MetaxDevices``).

Whole cards asked by count (``metax-tech.com/gpu``, limits or requests; the webhook routes a container with the count
in limits). The inventory is the node's capacity of that resource: card i is ``<node>-metax-<i>``, 64 GiB, 100 cores,
one task. A container books the whole card (100 % of its memory, 100 cores). HAMi takes no node lock for it (the bind
takes hami-web's own) and has no handshake; the bind writes ``hami.io/metax-gpu-devices-to-allocate`` /
``-allocated``. The node score gains the family's term (`TopologyScore`): under binpack 2000 − the node's
``metax-tech.com/gpu.topology.losses`` for the pod's card count, under spread 2000 − its
``metax-tech.com/gpu.topology.scores`` (a node without the annotation: no term). The ``metax`` section of the device
config is shared with Metax sGPU; this family reads its ``resourceCountName``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass

from hami_web.core.families import config
from hami_web.core.families.capacity import CapacityInventory
from hami_web.core.families.family import Family, ResourceNames
from hami_web.core.families.spec import FamilySpec

CW = "Metax-GPU"
KIND = "metax"
CARD_MEMORY_MIB = 65536
LOSSES = "metax-tech.com/gpu.topology.losses"
SCORES = "metax-tech.com/gpu.topology.scores"
TOPOLOGY_BASE = 2000
DEFAULT_RESOURCES = ResourceNames(count="metax-tech.com/gpu", memory="", memory_percentage="", cores="", priority="")


@functools.lru_cache(maxsize=4096)
def topology_value(text: str, devices: int) -> float:
    """HAMi's ``parseMetaxAnnos``: the value for ``devices`` in a JSON map of card counts; 0 when unreadable or absent.
    Remembered: every node of a cluster tends to carry the same few tables, and each decision ranks every node."""
    try:
        table = json.loads(text)
    except ValueError:
        return 0.0
    if not isinstance(table, dict):
        return 0.0
    value = table.get(str(devices))
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else 0.0


@dataclass(frozen=True, slots=True)
class TopologyScore:
    """HAMi's ``MetaxDevices.ScoreNode``: binpack 2000 − loss, spread 2000 − score, for the pod's card count."""

    keys: tuple[str, ...] = (LOSSES, SCORES)

    def term(self, annotations: Mapping[str, str], devices: int, policy: str) -> float:
        """The term, 0 when the node lacks the policy's annotation."""
        key = SCORES if policy == "spread" else LOSSES
        text = annotations.get(key)
        return 0.0 if text is None else TOPOLOGY_BASE - topology_value(text, devices)


def metax_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The Metax GPU family with the given count resource (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Metax GPU", resources=resources,
        register_key="", handshake_key="",
        to_allocate_key="hami.io/metax-gpu-devices-to-allocate",
        allocated_key="hami.io/metax-gpu-devices-allocated",
        lock=None,
        default_cores=100,
        inventory=CapacityInventory(family=CW, resource=resources.count, id_infix="-metax-", device_type=CW,
                                    memory_mib=CARD_MEMORY_MIB),
        node_score=TopologyScore(),
        one_card_per_pod=True,
    )


def read_metax(value: object, where: str) -> ResourceNames:
    """The ``metax`` section's ``resourceCountName`` (its sGPU keys belong to Metax sGPU)."""
    section = config.section_map(value, where)
    return ResourceNames(count=config.resource(section, "resourceCountName", where) or DEFAULT_RESOURCES.count,
                         memory="", memory_percentage="", cores="", priority="")


SPEC = FamilySpec(name=KIND, label="Metax GPU", section="metax", default=DEFAULT_RESOURCES, read=read_metax,
                  publish=lambda names: config.names_document(config.changed_names(names, DEFAULT_RESOURCES)),
                  build=lambda names: (metax_family(names),))
