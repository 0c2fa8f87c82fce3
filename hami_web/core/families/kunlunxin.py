"""Kunlunxin XPUs, whole (``kunlun``) and sliced (``XPU``, vXPU) (docs/device-families.md#kunlunxin-xpus; HAMi v2.10
``pkg/device/kunlun``): one module, one registry line, two families, HAMi's ``kunlun`` device-config section.

Whole XPUs have no register annotation: the kubelet's capacity of ``kunlunxin.com/xpu`` is N cards
``<node>-kunlun-<i>`` of 98,304 MiB, the upper half on NUMA 1; a container takes whole, idle cards, no node lock,
and its device plugin reads ``hami.io/kunlun-allocated`` and ``BAIDU_COM_DEVICE_IDX``. vXPUs are registered
(``hami.io/node-register-xpu``, with a handshake) and sliced: memory is rounded to a quarter, half or whole card at
admission and at the filter, cores follow memory, a card holds slices of one size, under ``mutex`` only idle cards.
Both pick their cards by the eight-card topology (`hami_web.core.families.kunlunxin_topology.CardTopology`) and
select cards by both of HAMi's UUID annotations (``hami.io/use-xpu-uuid`` and ``baidu.com/use-gpuuuid``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families import config
from hami_web.core.families.family import (
    AdmissionAsk,
    AdmissionRewrite,
    AdmissionRules,
    Family,
    ResourceNames,
    SliceSizes,
)
from hami_web.core.families.kunlunxin_topology import VXPU_TOPOLOGY, XPU_TOPOLOGY, CardTopology
from hami_web.core.families.spec import FamilySpec
from hami_web.core.limits import MAX_DEVICE_INDEX, quote, uuid_problem
from hami_web.core.quantities import QuantityError, parse_whole_quantity

KIND = "kunlunxin"
XPU_CW = "kunlun"  # HAMi's KunlunGPUCommonWord: whole cards
VXPU_CW = "XPU"  # HAMi's XPUCommonWord: slices
CARD_MEMORY_MIB = 98304
CARD_CORES = 100
ID_INFIX = "-kunlun-"
DEVICE_IDX = "BAIDU_COM_DEVICE_IDX"
# HAMi ``trimMemory``: a quarter, a half, else the whole card.
VXPU_SLICES = SliceSizes(sizes_mib=(24576, 49152), whole_mib=CARD_MEMORY_MIB)
# Both of HAMi's UUID selections apply to both families (HAMi's own keys first, Baidu's as well).
UUID_KEYS = ("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid")
BAIDU_UUID_KEYS = ("baidu.com/use-gpuuuid", "baidu.com/nouse-gpuuuid")


@dataclass(frozen=True, slots=True)
class KunlunConfig:
    """HAMi's ``kunlun`` section: ``resourceCountName`` (whole XPUs), ``resourceVCountName`` and
    ``resourceVMemoryName`` (vXPUs)."""

    count: str = "kunlunxin.com/xpu"
    vcount: str = "kunlunxin.com/vxpu"
    vmemory: str = "kunlunxin.com/vxpu-memory"


_KEYS = (("count", "resourceCountName"), ("vcount", "resourceVCountName"), ("vmemory", "resourceVMemoryName"))
DEFAULT_CONFIG = KunlunConfig()


@dataclass(frozen=True, slots=True)
class XpuCapacity:
    """Whole XPUs from ``status.capacity[<count resource>]`` (HAMi ``KunlunDevices.GetNodeDevices``): N cards, card i
    ``<node>-kunlun-<i>`` with index i, 100 shares, 98,304 MiB, 100 cores, type ``kunlun``, NUMA 1 from N ÷ 2 up,
    healthy. None when the node has none."""

    resource: str

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The node's whole XPUs; `AnnotationError` for a capacity that is not a whole number of cards."""
        status = node.get("status")
        capacity = status.get("capacity") if isinstance(status, Mapping) else None
        value = capacity.get(self.resource) if isinstance(capacity, Mapping) else None
        if value is None:
            return None
        try:
            cards = parse_whole_quantity(value, resource=self.resource, maximum=MAX_DEVICE_INDEX + 1,
                                         where=f"status.capacity[{self.resource}]")
        except QuantityError as error:
            raise AnnotationError(str(error)) from None
        if not cards:
            return None
        metadata = node.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        first_id = f"{name}{ID_INFIX}0"
        if not isinstance(name, str) or (problem := uuid_problem(first_id)):
            raise AnnotationError(f"XPU id {quote(first_id)} {problem or 'has no node name'}")
        return tuple(Device(uuid=f"{name}{ID_INFIX}{index}", index=index, count=100, memory_mib=CARD_MEMORY_MIB,
                            cores=CARD_CORES, type=XPU_CW, numa=int(index >= cards // 2), healthy=True,
                            family=XPU_CW) for index in range(cards))


def card_index(uuid: str) -> int | None:
    """The index a whole XPU's id names (``node-a-kunlun-5`` → 5), None for an id of another form."""
    _, infix, index = uuid.rpartition(ID_INFIX)
    return int(index) if infix and index.isdigit() and len(index) <= len(str(MAX_DEVICE_INDEX)) else None


def device_idx_annotations(grants: Sequence[Sequence[Any]]) -> dict[str, str]:
    """``BAIDU_COM_DEVICE_IDX``: the card indices of the last container holding XPUs, comma-separated (HAMi
    ``PatchAnnotations`` writes the key container by container, so the last one stays); nothing without XPUs."""
    held = [indices for container in grants
            if (indices := [index for grant in container if (index := card_index(grant.uuid)) is not None])]
    return {DEVICE_IDX: ",".join(str(index) for index in held[-1])} if held else {}


def round_vxpu_memory(family: Family, ask: AdmissionAsk) -> AdmissionRewrite:
    """The webhook's vXPU rule (HAMi ``KunlunVDevices.MutateAdmission``): a memory in limits is rounded up to a
    slice (24,576 / 49,152 / 98,304 MiB) in limits and requests; the count is left as asked."""
    if ask.memory is None or family.slices is None:
        return AdmissionRewrite(count=ask.count)
    return AdmissionRewrite(count=ask.count, memory=family.slices.round_up(ask.memory))


def _common(cw: str, label: str, resources: ResourceNames, topology: CardTopology) -> dict[str, Any]:
    return {"cw": cw, "kind": KIND, "label": label, "resources": resources, "grouping": topology,
            "use_uuid_key": UUID_KEYS[0], "nouse_uuid_key": UUID_KEYS[1], "more_uuid_keys": (BAIDU_UUID_KEYS,)}


def xpu_family(kunlun: KunlunConfig = DEFAULT_CONFIG) -> Family:
    """Whole XPUs: count only, each card whole (its memory and 100 cores), no lock, no handshake."""
    resources = ResourceNames(count=kunlun.count, memory="", memory_percentage="", cores="", priority="")
    return Family(**_common(XPU_CW, "Kunlunxin XPU", resources, XPU_TOPOLOGY),
                  register_key="", handshake_key="", to_allocate_key="", allocated_key="hami.io/kunlun-allocated",
                  lock=None, default_cores=CARD_CORES, inventory=XpuCapacity(resource=kunlun.count),
                  booking_extras=device_idx_annotations)


def vxpu_family(kunlun: KunlunConfig = DEFAULT_CONFIG) -> Family:
    """vXPU slices: count and memory, registered with a handshake, under HAMi's node lock."""
    resources = ResourceNames(count=kunlun.vcount, memory=kunlun.vmemory, memory_percentage="", cores="",
                              priority="")
    return Family(**_common(VXPU_CW, "Kunlunxin vXPU", resources, VXPU_TOPOLOGY),
                  register_key="hami.io/node-register-xpu", handshake_key="hami.io/node-handshake-xpu",
                  to_allocate_key="hami.io/xpu-devices-to-allocate", allocated_key="hami.io/xpu-devices-allocated",
                  slices=VXPU_SLICES, admission=AdmissionRules(resize=round_vxpu_memory))


def read_kunlun(value: object, where: str) -> KunlunConfig:
    """The ``kunlun`` section: the three resource names, each else the chart's."""
    section = config.section_map(value, where)
    return KunlunConfig(**{field: config.resource(section, key, where) or getattr(DEFAULT_CONFIG, field)
                           for field, key in _KEYS})


def publish_kunlun(kunlun: KunlunConfig) -> object | None:
    """The section back: the names that differ from the chart's (None when none does)."""
    return config.names_document(tuple((key, value) for field, key in _KEYS
                                       if (value := getattr(kunlun, field)) != getattr(DEFAULT_CONFIG, field)))


SPEC = FamilySpec(name=KIND, label="Kunlunxin XPU and vXPU", section="kunlun", default=DEFAULT_CONFIG,
                  read=read_kunlun, publish=publish_kunlun,
                  build=lambda kunlun: (xpu_family(kunlun), vxpu_family(kunlun)))
