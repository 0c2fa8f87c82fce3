"""How a setting's text becomes its value: the parsers of the option table, each raising `ValueError` with a message
an operator can act on (`build_settings` prefixes the flag's name).

The same parsers check ``kubectl hami``'s overrides of the server's settings (`argument_type`), so a value the
server refuses is refused there too, in the same words.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hami_web.core.options import parse_gpu_policy

# The longest deadline of one /filter or /bind (see `bind_deadline`).
MAX_BIND_DEADLINE_SECONDS = 27.0


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``, or ``:PORT`` for every interface) as ``(host, port)``."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or ``localhost``) only listens on this machine."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_seconds(text: str) -> float:
    """Parse ``15``, ``15s``, ``5m``, ``1h30m`` or ``500ms`` (Go-style, as HAMi's flags) into seconds."""
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    try:
        return float(value)
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(value):
        raise ValueError(f"{text!r} is not a duration (examples: 30, 30s, 5m, 1h)")
    return total


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    # Go's strconv.ParseBool (HAMi's flags) also takes t and f.
    if lowered in ("1", "true", "t", "yes", "on"):
        return True
    if lowered in ("0", "false", "f", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


def non_negative_int(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("must not be negative")
    return value


def positive_int(text: str) -> int:
    value = int(text.strip())
    if value < 1:
        raise ValueError("must be at least 1")
    return value


@dataclass(frozen=True, slots=True)
class Whole:
    """A whole number from ``low`` to ``high``, the message saying which bound was passed and by what; the bounds
    stay readable (a form shows them as its inputs' min and max)."""

    low: int
    high: int

    def __call__(self, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, got {text.strip()!r}") from None
        if not self.low <= value <= self.high:
            raise ValueError(f"must be between {self.low} and {self.high}, got {value}")
        return value


def whole(low: int, high: int) -> Whole:
    """`Whole` from ``low`` to ``high``."""
    return Whole(low, high)


def non_negative_duration(text: str) -> float:
    seconds = parse_duration_seconds(text)
    if seconds < 0:
        raise ValueError("must not be negative")
    return seconds


def non_negative_float(text: str) -> float:
    value = float(text.strip())
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} must be a number >= 0")
    return value


def bind_deadline(*, allow_zero: bool) -> Callable[[str], float]:
    # kube-scheduler abandons a /filter or /bind after its extender httpTimeout (30s as deployed); the deadline
    # plus the cleanup after a failed bind (at most 3s) must end before it, or the answer arrives too late.
    def parse(text: str) -> float:
        seconds = non_negative_duration(text) if allow_zero else positive_duration(text)
        if seconds > MAX_BIND_DEADLINE_SECONDS:
            raise ValueError(f"must be at most {MAX_BIND_DEADLINE_SECONDS:g}s, so that with the cleanup after a "
                             "failed bind the answer comes inside kube-scheduler's 30s httpTimeout")
        return seconds

    return parse


def positive_duration(text: str) -> float:
    seconds = parse_duration_seconds(text)
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


def duration_or_off(text: str) -> float:
    if text.strip().lower() in ("off", "0", "false", "none"):
        return 0.0
    return positive_duration(text)


def choice(options: Sequence[str]) -> Callable[[str], str]:
    """A parser of one of ``options`` (a flag's, a tool's shape field's), naming them when the text is none."""
    def parse(text: str) -> str:
        value = text.strip()
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return parse


def configmap_or_off(text: str) -> str:
    text = text.strip()
    if text.lower() in ("off", ""):
        return ""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ValueError(f"{text!r} is not NAMESPACE/NAME or off")
    return text


def gpu_policy(text: str) -> str:
    # The same parser as the pod annotation, so a chain such as binpack,numa is a valid default too.
    return parse_gpu_policy(text, source="policy")


def cores(text: str) -> int:
    value = non_negative_int(text)
    if value > 100:
        raise ValueError("must be between 0 and 100")
    return value


def bind_address(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return f"{host}:{port}"


def optional_bind_address(text: str) -> str:
    return "" if text.strip().lower() in ("", "off") else bind_address(text)


def resource_name(text: str) -> str:
    value = text.strip()
    if not re.fullmatch(r"[A-Za-z0-9.\-]+/[A-Za-z0-9.\-_]+", value):
        raise ValueError(f"{text!r} is not an extended resource name like nvidia.com/gpu")
    return value


def plain_text(text: str) -> str:
    return text.strip()
