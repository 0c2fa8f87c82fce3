"""Biren GPUs (docs/device-families.md#device-families; HAMi v2.10 ``pkg/device/biren/device.go``).

Whole cards asked by count (``birentech.com/gpu``, limits or requests; the webhook routes a container with the count in
limits). The device plugin registers them as HAMi's ``DeviceInfo`` JSON under ``hami.io/node-biren-register`` and
answers the handshake ``hami.io/node-handshake-biren``; HAMi forces each card's ``devcore`` to 100 and its type to
``Biren`` (its ``checkType`` only compares the request's type). A grant books none of the card's memory or cores:
only its shares (``count``) are used up. UUID selection: ``birentech.com/use-gpuuuid`` / ``nouse-gpuuuid``. The bind
takes ``hami.io/mutex.lock`` and writes ``hami.io/Biren-devices-to-allocate`` / ``-allocated``.
"""

from __future__ import annotations

from hami_web.core.families import config
from hami_web.core.families.family import Family, ResourceNames, WholeCores
from hami_web.core.families.spec import FamilySpec

CW = "Biren"
KIND = "biren"
DEFAULT_RESOURCES = ResourceNames(count="birentech.com/gpu", memory="", memory_percentage="", cores="", priority="")


def biren_family(resources: ResourceNames = DEFAULT_RESOURCES) -> Family:
    """The Biren family with the given count resource (the chart's when left out)."""
    return Family(
        cw=CW, kind=KIND, label="Biren GPU", resources=resources,
        register_key="hami.io/node-biren-register",
        handshake_key="hami.io/node-handshake-biren",
        to_allocate_key=f"hami.io/{CW}-devices-to-allocate",
        allocated_key=f"hami.io/{CW}-devices-allocated",
        use_uuid_key="birentech.com/use-gpuuuid",
        nouse_uuid_key="birentech.com/nouse-gpuuuid",
        count_only=True,
        amend=WholeCores(CW),
    )


def read_biren(value: object, where: str) -> ResourceNames:
    """The ``biren`` section: ``resourceCountName``."""
    return config.resource_names(config.section_map(value, where), where, DEFAULT_RESOURCES)


SPEC = FamilySpec(name=KIND, label="Biren GPU", section="biren", default=DEFAULT_RESOURCES, read=read_biren,
                  publish=lambda names: config.names_document(config.changed_names(names, DEFAULT_RESOURCES)),
                  build=lambda names: (biren_family(names),))
