"""Vastai accelerators (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/vastai/device.go``).

Devices asked by count (``vastaitech.com/va``, limits or requests; the webhook routes a container with the count in
limits). The device plugin registers them as HAMi's ``DeviceInfo`` JSON under ``hami.io/node-va-register`` and answers
the handshake ``hami.io/node-handshake-va``; HAMi forces each device's ``devcore`` to 100 (its ``checkType`` only
compares the request's type, so any registered type serves). A grant books none of the device's memory or cores, only
its shares. In die mode (``custominfo.DeviceStrategy`` "die", each die naming its card in ``custominfo.AIC``) the
family's grouping is `hami_web.core.groups.CardDies`: a multi-die container fills the card with most free dies first,
a ``mutex`` pod takes no die of a card in use, and the node earns each container's share of dies on one card. UUID
selection: ``vastaitech.com/use-gpuuuid`` / ``nouse-gpuuuid``. The bind takes ``hami.io/mutex.lock`` and writes
``hami.io/Vastai-devices-to-allocate`` / ``-allocated``.
"""

from __future__ import annotations

from hami_web.core.families import config
from hami_web.core.families.family import Family, ResourceNames, WholeCores
from hami_web.core.families.spec import FamilySpec
from hami_web.core.groups import CARD_DIES

CW = "Vastai"
KIND = "vastai"
DEFAULT_RESOURCES = ResourceNames(count="vastaitech.com/va", memory="", memory_percentage="", cores="", priority="")


def vastai_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The Vastai family with the given count resource (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Vastai", resources=resources,
        register_key="hami.io/node-va-register",
        handshake_key="hami.io/node-handshake-va",
        to_allocate_key=f"hami.io/{CW}-devices-to-allocate",
        allocated_key=f"hami.io/{CW}-devices-allocated",
        use_uuid_key="vastaitech.com/use-gpuuuid",
        nouse_uuid_key="vastaitech.com/nouse-gpuuuid",
        count_only=True,
        amend=WholeCores(CW),
        grouping=CARD_DIES,
    )


SPEC = FamilySpec(name=KIND, label="Vastai", section="vastai", default=DEFAULT_RESOURCES,
                  read=lambda value, where: config.resource_names(config.section_map(value, where), where,
                                                                  DEFAULT_RESOURCES),
                  publish=lambda names: config.names_document(config.changed_names(names, DEFAULT_RESOURCES)),
                  build=lambda names: (vastai_family(names),))
