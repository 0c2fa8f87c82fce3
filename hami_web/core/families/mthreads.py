"""Moore Threads GPUs (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/mthreads/device.go``).

The inventory is the node's capacity: ``mthreads.com/sgpu-core`` ÷ 16 cards (a card has 16 cores), each
``<node>-mthreads-<i>`` with an equal share of ``mthreads.com/sgpu-memory`` (units of 512 MiB) and 100 task slots. A
container asks ``mthreads.com/vgpu`` (limits or requests) with memory and cores for all its devices together: each
device books its share (``divides_ask``). The webhook (`admit_mthreads`): a count of 0 or less is refused; a count above
1 means whole cards (16 cores and 96 memory units each, and ``mthreads.com/request-gpu-num`` on the pod); one device
without memory is a whole card; one device with memory must ask 2, 4, 8, 16, 32, 64 or 96 units. A pod's later
containers only get the card its first one holds (HAMi's ``customFilterRule``). HAMi takes no node lock (the bind takes
hami-web's own) and has no handshake; the bind writes only ``hami.io/mthreads-vgpu-devices-allocated``, with
``mthreads.com/gpu-index`` (the indices of the last container's cards), ``mthreads.com/predicate-time`` (nanoseconds)
and ``mthreads.com/predicate-node``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_web.core.families import config
from hami_web.core.families.capacity import CapacityInventory
from hami_web.core.families.family import (
    AdmissionAsk,
    AdmissionRewrite,
    AdmissionRules,
    BookedDevice,
    Family,
    ResourceNames,
)
from hami_web.core.families.spec import FamilySpec

CW = "Mthreads"
KIND = "mthreads"
CORES_PER_CARD = 16
MEMORY_PER_CARD = 96  # in memory units
MEMORY_FACTOR = 512
SLOTS_PER_CARD = 100
LEGAL_MEMORY = (2, 4, 8, 16, 32, 64, 96)
GPU_INDEX = "mthreads.com/gpu-index"
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"
ID_INFIX = "-mthreads-"
DEFAULT_RESOURCES = ResourceNames(count="mthreads.com/vgpu", memory="mthreads.com/sgpu-memory", memory_percentage="",
                                  cores="mthreads.com/sgpu-core", priority="")
INVENTORY_IDS = CapacityInventory(family=CW, resource=DEFAULT_RESOURCES.cores, id_infix=ID_INFIX, device_type=CW)


def admit_mthreads(family: Family, ask: AdmissionAsk) -> AdmissionRewrite:
    """HAMi's ``MutateAdmission`` for a container asking ``ask.count`` > 0 devices (memory: its limit, None when
    absent)."""
    if ask.count > 1:
        return AdmissionRewrite(count=ask.count, memory=ask.count * MEMORY_PER_CARD, cores=ask.count * CORES_PER_CARD,
                                pod_annotations=((REQUEST_GPU_NUM, str(ask.count)),))
    if ask.memory is None:
        return AdmissionRewrite(count=ask.count, memory=MEMORY_PER_CARD, cores=CORES_PER_CARD)
    if ask.memory not in LEGAL_MEMORY:
        return AdmissionRewrite(refusal="sGPU memory request value is invalid, valid values are "
                                        f"[{', '.join(map(str, LEGAL_MEMORY))}]")
    return AdmissionRewrite(count=ask.count)


def gpu_index(grants: Sequence[Sequence[BookedDevice]]) -> dict[str, str]:
    """``mthreads.com/gpu-index``: the card indices of the last container holding cards (HAMi writes each container's
    in turn, so the last one stays)."""
    last = next((container for container in reversed(grants) if container), ())
    indices = [INVENTORY_IDS.device_index(grant.uuid) for grant in last]
    return {GPU_INDEX: ",".join(str(index) for index in indices if index is not None)} if last else {}


def mthreads_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The Mthreads family with the given names (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Moore Threads GPU", resources=resources,
        register_key="", handshake_key="",
        to_allocate_key="",
        allocated_key="hami.io/mthreads-vgpu-devices-allocated",
        lock=None,
        memory_factor=MEMORY_FACTOR,
        use_uuid_key="mthreads.ai/use-gpuuuid",
        nouse_uuid_key="mthreads.ai/nouse-gpuuuid",
        inventory=CapacityInventory(family=CW, resource=resources.cores, id_infix=ID_INFIX, device_type=CW,
                                    memory_resource=resources.memory, memory_factor=MEMORY_FACTOR,
                                    units_per_device=CORES_PER_CARD, count=SLOTS_PER_CARD, cores=CORES_PER_CARD),
        admission=AdmissionRules(count_in_requests=True, positive_count=True, resize=admit_mthreads),
        booking_extras=gpu_index,
        divides_ask=True,
        one_card_per_pod=True,
        predicate_node_key="mthreads.com/predicate-node",
        predicate_ns_key="mthreads.com/predicate-time",
    )


def read_mthreads(value: object, where: str) -> ResourceNames:
    """The ``mthreads`` section: its three resource names."""
    return config.resource_names(config.section_map(value, where), where, DEFAULT_RESOURCES)


SPEC = FamilySpec(name=KIND, label="Moore Threads GPU", section="mthreads", default=DEFAULT_RESOURCES,
                  read=read_mthreads,
                  publish=lambda names: config.names_document(config.changed_names(names, DEFAULT_RESOURCES)),
                  build=lambda names: (mthreads_family(names),))
