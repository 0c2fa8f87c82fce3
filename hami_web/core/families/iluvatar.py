"""Iluvatar GPUs (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/iluvatar/device.go``): one family per
chip.

Each chip of HAMi's chart (MR-V100, MR-V50, BI-V150, BI-V100) is its own family with its own common word,
resources and annotation keys, all derived from the common word as HAMi does. Memory is asked in units of
256 MiB; a container asking for more than one device gets whole cards (the webhook sets cores to 100 × count)
and the container's name in ``SOL_CONTINER_NAME`` (HAMi's spelling, which its device plugin reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_web.core.families import config
from hami_web.core.families.family import AdmissionRules, DeviceConfigError, Family, ResourceNames
from hami_web.core.families.spec import FamilySpec

KIND = "iluvatar"
MEMORY_FACTOR = 256
CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")


@dataclass(frozen=True, slots=True)
class IluvatarChip:
    """One entry of the device config's ``iluvatars`` list."""

    common_word: str
    chip_name: str
    resources: ResourceNames


def default_chip(common_word: str) -> IluvatarChip:
    """A chip as HAMi's chart declares it: resources ``iluvatar.ai/<CW>-vgpu``, ``.vMem``, ``.vCore``."""
    return IluvatarChip(common_word=common_word, chip_name=common_word,
                        resources=ResourceNames(count=f"iluvatar.ai/{common_word}-vgpu",
                                                memory=f"iluvatar.ai/{common_word}.vMem", memory_percentage="",
                                                cores=f"iluvatar.ai/{common_word}.vCore", priority=""))


DEFAULT_CHIPS = tuple(default_chip(word) for word in CHIPS)


def iluvatar_family(chip: IluvatarChip) -> Family:
    """The family of one Iluvatar chip."""
    cw = chip.common_word
    return Family(
        cw=cw, kind=KIND, label=f"Iluvatar {chip.chip_name}", resources=chip.resources,
        register_key=f"hami.io/node-{cw}-register",
        handshake_key=f"hami.io/node-handshake-{cw}",
        to_allocate_key=f"hami.io/{cw}-devices-to-allocate",
        allocated_key=f"hami.io/{cw}-devices-allocated",
        memory_factor=MEMORY_FACTOR,
        use_uuid_key=f"hami.io/use-{cw}-uuid",
        nouse_uuid_key=f"hami.io/no-use-{cw}-uuid",
        admission=AdmissionRules(cores_per_count=True, container_name_env="SOL_CONTINER_NAME"),
    )


def read_iluvatars(value: object, where: str) -> tuple[IluvatarChip, ...] | None:
    """The ``iluvatars`` list: each chip's common word, name and resource names (derived from the word by default)."""
    listed = config.entries(value, where)
    if listed is None:
        return None
    chips: list[IluvatarChip] = []
    for here, entry in listed:
        word = entry.get("commonWord")
        if not isinstance(word, str) or not config.COMMON_WORD.fullmatch(word.strip()):
            raise DeviceConfigError(f"{here}.commonWord: {word!r} is not a common word like MR-V100")
        word = word.strip()
        chip_name = entry.get("chipName", word)
        if not isinstance(chip_name, str):
            raise DeviceConfigError(f"{here}.chipName: expected a string, got {config.type_name(chip_name)}")
        chips.append(IluvatarChip(common_word=word, chip_name=chip_name.strip() or word,
                                  resources=config.resource_names(entry, here, default_chip(word).resources)))
    return tuple(chips)


def publish_iluvatars(chips: tuple[IluvatarChip, ...] | None) -> object | None:
    """The list back (None when the file had none)."""
    if chips is None:
        return None
    return [{"chipName": chip.chip_name, "commonWord": chip.common_word, "resourceCountName": chip.resources.count,
             "resourceMemoryName": chip.resources.memory, "resourceCoreName": chip.resources.cores}
            for chip in chips]


SPEC: FamilySpec[tuple[IluvatarChip, ...] | None] = FamilySpec(
    name=KIND, label="Iluvatar GPU", section="iluvatars", default=None, read=read_iluvatars,
    publish=publish_iluvatars,
    build=lambda chips: tuple(iluvatar_family(chip) for chip in (DEFAULT_CHIPS if chips is None else chips)),
    flag="--enable-iluvatar", chart_value="iluvatar.enabled",
    flag_help="schedule Iluvatar GPUs (the chips of the device config's iluvatars list) (false)")
