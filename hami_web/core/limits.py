"""The largest values hami-web accepts from annotations and requests, and how hostile text is quoted.

Every number that arrives from outside (a node's register annotation, a pod's device annotation, a
resource quantity) is range-checked where it is parsed, against the bounds below. They sit far above any
real GPU, so no real cluster meets them, and far below what could overflow a float score or a Prometheus
gauge, or make Python expand an integer of millions of digits (``1e2000000``).
"""

from __future__ import annotations

# HAMi v2.10 holds a device's share count, memory and cores in Go int32s (``DeviceInfo``): the register bounds.
GO_INT32_MAX = (1 << 31) - 1
# A GPU's memory in MiB (after the device plugin's memory scaling, which on an 80–180 GB card goes past 512 GiB):
# anything HAMi reads (an int32), so a node it schedules on is one we schedule on.
MAX_DEVICE_MEMORY_MIB = GO_INT32_MAX
# A GPU's compute in percent of one GPU: 100 × the device plugin's core scaling.
MAX_DEVICE_CORES = 10_000
# Compute one task may book on one GPU: 100 = the whole GPU.
MAX_TASK_CORES = 100
# Tasks that may share one GPU (HAMi's device-split-count; its default is 10): an int32, as HAMi reads it.
MAX_DEVICE_SHARES = GO_INT32_MAX
# GPUs one container may ask for, and a GPU's index / NUMA node number.
MAX_GPUS_PER_CONTAINER = 128
MAX_DEVICE_INDEX = 4_096
MAX_NUMA_NODE = 4_096
# NVML reports -1 for a GPU whose NUMA node it does not know; HAMi reads it as written.
MIN_NUMA_NODE = -1
# A pair score between two GPUs (``hami.io/node-nvidia-score``); HAMi's are in the tens.
MAX_PAIR_SCORE = 1_000_000
# Any other quantity (gpucores, percentages, priority) before its own check: a 32-bit int, as Kubernetes'
# device plugins see them.
MAX_QUANTITY = (1 << 31) - 1
# Characters of one quantity or annotation number: real ones have a handful.
MAX_NUMBER_CHARS = 32
# A GPU UUID (``GPU-`` + 36 characters, ``MIG-…`` a little longer) and a card type name.
MAX_UUID_CHARS = 128
MAX_TYPE_CHARS = 256

# Characters a GPU UUID may not contain: the separators of the pod device annotation (``,`` ``:`` ``;``) and
# of the node lists (``,``), and whitespace, which the codecs strip.
UUID_FORBIDDEN = frozenset(",:;") | frozenset(" \t\r\n\v\f")

# How much of a hostile value goes into an error message (and from there into logs and events).
QUOTE_CHARS = 40


def quote(value: object) -> str:
    """``repr(value)``, cut to `QUOTE_CHARS` with the full length noted, for messages about bad input."""
    if isinstance(value, str) and len(value) > QUOTE_CHARS:
        return repr(value[:QUOTE_CHARS]) + f"…({len(value)} characters)"
    text = repr(value)
    if len(text) > QUOTE_CHARS:
        return text[:QUOTE_CHARS] + f"…({len(text)} characters)"
    return text


def uuid_problem(uuid: str) -> str:
    """Why ``uuid`` cannot be a GPU UUID, or "" when it can."""
    if not uuid:
        return "is empty"
    if len(uuid) > MAX_UUID_CHARS:
        return f"is longer than {MAX_UUID_CHARS} characters"
    bad = sorted({c for c in uuid if c in UUID_FORBIDDEN or not c.isprintable()})
    if bad:
        listed = ", ".join(repr(c) for c in bad)
        return f"contains {listed} (separators, whitespace and control characters are not allowed)"
    return ""


_JSON_TYPE_NAMES: dict[type, str] = {dict: "object", list: "list", str: "string"}


def json_type_name(value: object) -> str:
    """The JSON name of a decoded value's type, for messages an operator reads."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
