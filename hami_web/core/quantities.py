"""Kubernetes resource quantities as whole numbers, bounded before they are expanded.

The API server sends quantities in canonical form (``gpumem: 3000`` arrives as ``"3k"``), so they are
parsed with the official client's `parse_quantity`, never with ``int()``. GPU counts, MiB and percentages
must be whole numbers; anything else is an error naming the container and the resource.

A quantity is text anyone who may create a pod writes. ``"1e2000000"`` is a valid decimal, and turning it
into an integer builds millions of digits (seconds of CPU under the GIL, for every request of the
process). So the text's length and the number's order of magnitude are checked first, on the `Decimal`,
and only a value within ``maximum`` is ever turned into an ``int``.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from kubernetes import utils as kubernetes_utils

from hami_web.core.limits import MAX_NUMBER_CHARS, MAX_QUANTITY, quote

# The official client's quantity parser (``"500m"`` → ``Decimal("0.5")``), typed: the client has no annotations.
parse_quantity: Callable[[str], Decimal] = kubernetes_utils.parse_quantity


class QuantityError(ValueError):
    """A resource value is not a valid whole, non-negative quantity; the message names where it is."""


def parse_whole_quantity(value: object, *, container: str = "", resource: str = "", maximum: int = MAX_QUANTITY,
                         where: str = "") -> int:
    """Parse ``value`` (``"3k"``, ``"1"``, ``2``) into an int in ``0..maximum``, or raise `QuantityError`.

    Errors start with ``where``, by default ``container <container>: <resource>``.
    """
    where = where or f"container {container}: {resource}"
    if isinstance(value, bool) or value is None or not isinstance(value, str | int | float):
        raise QuantityError(f"{where}: {quote(value)} is not a quantity")
    if isinstance(value, str) and len(value) > MAX_NUMBER_CHARS:
        raise QuantityError(f"{where}: {quote(value)} is longer than {MAX_NUMBER_CHARS} characters")
    try:
        number = parse_quantity(value) if isinstance(value, str) else Decimal(value)
    except (ValueError, TypeError, ArithmeticError):
        raise QuantityError(f"{where}: {quote(value)} is not a quantity") from None
    if not number.is_finite():
        raise QuantityError(f"{where}: {quote(value)} is not a whole number")
    if number < 0:
        raise QuantityError(f"{where}: {quote(value)} must not be negative")
    # adjusted() is the exponent of the leading digit: cheap, and it bounds the value before any expansion.
    if number.adjusted() >= len(str(maximum)) or number > maximum:
        raise QuantityError(f"{where}: {quote(value)} is over the limit of {maximum}")
    if number != number.to_integral_value():
        raise QuantityError(f"{where}: {quote(value)} is not a whole number")
    return int(number)
