"""Kubernetes resource quantities as whole numbers.

The API server sends quantities in canonical form (``gpumem: 3000`` arrives as ``"3k"``), so they are
parsed with the official client's `parse_quantity`, never with ``int()``. GPU counts, MiB and percentages
must be whole numbers; anything else is an error naming the container and the resource.
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity


class QuantityError(ValueError):
    """A resource value is not a valid whole, non-negative quantity; the message names where it is."""


def parse_whole_quantity(value: object, *, container: str, resource: str) -> int:
    """Parse ``value`` (``"3k"``, ``"1"``, ``2``) into a non-negative int, or raise `QuantityError`."""
    where = f"container {container}: {resource}"
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{where}: {value!r} is not a quantity")
    try:
        number = parse_quantity(value) if isinstance(value, str) else Decimal(value)
    except (ValueError, TypeError, ArithmeticError):
        raise QuantityError(f"{where}: {value!r} is not a quantity") from None
    if not number.is_finite() or number != number.to_integral_value():
        raise QuantityError(f"{where}: {value!r} is not a whole number")
    if number < 0:
        raise QuantityError(f"{where}: {value!r} must not be negative")
    return int(number)
