"""Which registered device types serve a family, and which type its grants name
(docs/device-families.md#device-families, type matching).

Most families (HAMi v2.10's ``checkType``): a device serves when its type contains the family's common word
(``NVIDIA-A100`` for NVIDIA), the pod's use/nouse type annotations then select among them, and a grant's type field is
the common word. HAMi's AMD compares only the pod's selection, so any registered type serves, and its ``Fit`` writes the
device's product type into the grant (`PRODUCT_TYPES`). Cambricon's capacity inventory names a card by the node's model
label and falls back to the bare word when the model is unknown; a type selection cannot judge such a card and lets it
pass (`hami_web.core.families.capacity.CapacityInventory.types`). One object says all three, so the fit and the options
ask it and never which vendor they look at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hami_web.core.devices import Device


def product_type(device: Device) -> str:
    """A grant's type field as HAMi's AMD ``Fit`` writes it: the device's registered product type."""
    return device.type


@dataclass(frozen=True, slots=True)
class DeviceTypes:
    """How a family's device types are matched and named.

    ``word``: what a device's type must contain (case-insensitively) to serve the family; None: the family's common
    word; "": any type. ``unknown``: the type of a device whose model is unknown, which every use/nouse type rule lets
    pass ("" none). ``product_in_grant``: a grant's type field is the device's type, not the common word.
    """

    word: str | None = None
    unknown: str = ""
    product_in_grant: bool = False

    def word_for(self, cw: str) -> str:
        """What a device's type must contain (upper-case) to serve the family of common word ``cw``."""
        return cw.upper() if self.word is None else self.word.upper()

    @property
    def grant_type(self) -> Callable[[Device], str] | None:
        """The grant's type field from the device (HAMi's ``ContainerDevice.Type``); None: the common word."""
        return product_type if self.product_in_grant else None


# Every family's unless it says otherwise: the type contains the common word, which the grant names.
COMMON_WORD = DeviceTypes()
# HAMi's AMD: any registered type serves, and the grant names the device's product type.
PRODUCT_TYPES = DeviceTypes(word="", product_in_grant=True)
