"""The families' capabilities the fit applies beyond the common checks (docs/device-families.md#device-families):
a partitioned family's ask mapped to the profile a node offers (`hami_web.core.partitions`) and the handle its grant
carries.

Kept out of `hami_web.core.fit` so the one fit loop stays the rules every family shares.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_web.core.devices import Device
from hami_web.core.requests import ContainerRequest


def with_profile(request: ContainerRequest, devices: Sequence[Device]) -> ContainerRequest | None:
    """A partitioned family's ask as it books the profile the node's devices offer for it (they all offer the same:
    HAMi's ``collectDRSProfiles``), None when none fits."""
    profile = request.partition.profile(devices[0].partitions) if request.partition is not None and devices else None
    return request.with_profile(profile) if profile is not None else None


def device_handle(device: Device) -> str:
    """The device plugin's handle of a partitioned device ("" for another device)."""
    return device.partitions.handle if device.partitions is not None else ""
