"""GPU inventory of a node and the codecs of the node annotations HAMi's device plugin writes.

``hami.io/node-nvidia-register`` comes in two forms (JSON from newer HAMi, ``:``-terminated text from
older releases); both decode to the same `Device` tuple so the rest of the scheduler never cares which
device plugin version a node runs. Decoding never raises anything but `AnnotationError`, whose message
says where in the text the problem is, because one bad node must not stop scheduling on the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hami_web.core.limits import (
    MAX_DEVICE_CORES,
    MAX_DEVICE_INDEX,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_SHARES,
    MAX_NUMA_NODE,
    MAX_NUMBER_CHARS,
    MAX_PAIR_SCORE,
    MAX_TYPE_CHARS,
    quote,
    uuid_problem,
)


class AnnotationError(ValueError):
    """An annotation does not parse; the message names the position and what was expected."""


@dataclass(frozen=True, slots=True)
class Device:
    """One physical GPU as registered by the device plugin.

    ``count`` is how many tasks may share it, ``memory_mib`` its (already scaled) memory and ``cores`` its
    compute in percent of one GPU (100 × core scaling).
    """

    uuid: str
    index: int
    count: int
    memory_mib: int
    cores: int
    type: str
    numa: int = 0
    healthy: bool = True
    mode: str = ""


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """Everything the scheduler knows about a node's GPUs, independent of what runs on them."""

    name: str
    devices: tuple[Device, ...]
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    cordoned: frozenset[str] = frozenset()


_TEXT_FIELDS_SHORT = 7
_TEXT_FIELDS_LONG = 9


# The largest value of each numeric register field: a GPU beyond these is garbage, and numbers this size keep
# scores and metrics finite (a 400-digit devmem made every float conversion overflow).
_FIELD_MAXIMUM = {"count": MAX_DEVICE_SHARES, "devmem": MAX_DEVICE_MEMORY_MIB, "devcore": MAX_DEVICE_CORES,
                  "numa": MAX_NUMA_NODE, "index": MAX_DEVICE_INDEX}


def _in_range(value: int, what: str, where: str, maximum: int) -> int:
    if not 0 <= value <= maximum:
        raise AnnotationError(f"{where}: {what} {quote(value)} is outside 0..{maximum}")
    return value


def _parse_int(text: str, what: str, where: str, maximum: int | None = None) -> int:
    stripped = text.strip()
    if len(stripped) > MAX_NUMBER_CHARS:
        raise AnnotationError(f"{where}: {what} {quote(stripped)} is longer than {MAX_NUMBER_CHARS} characters")
    try:
        value = int(stripped)
    except ValueError:
        raise AnnotationError(f"{where}: {what} {quote(stripped)} is not an integer") from None
    return _in_range(value, what, where, _FIELD_MAXIMUM[what] if maximum is None else maximum)


def _parse_bool(text: str, what: str, where: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise AnnotationError(f"{where}: {what} {text.strip()!r} is not true or false")


def decode_register(text: str) -> tuple[Device, ...]:
    """Decode ``hami.io/node-nvidia-register`` (JSON list or 7/9-field text) into devices."""
    stripped = text.strip()
    if not stripped:
        raise AnnotationError("register annotation is empty")
    devices = _decode_register_json(stripped) if stripped[0] in "[{" else _decode_register_text(text)
    if not devices:
        raise AnnotationError("register annotation lists no devices")
    seen: set[str] = set()
    for position, device in enumerate(devices):
        problem = uuid_problem(device.uuid)
        if problem:
            raise AnnotationError(f"device {position}: UUID {quote(device.uuid)} {problem}")
        if len(device.type) > MAX_TYPE_CHARS:
            raise AnnotationError(f"device {position}: type is longer than {MAX_TYPE_CHARS} characters")
        if device.uuid in seen:
            raise AnnotationError(f"device {device.uuid} is listed twice")
        seen.add(device.uuid)
    return devices


def _decode_register_text(text: str) -> tuple[Device, ...]:
    body = text.strip()
    if not body.endswith(":"):
        raise AnnotationError(f"character {len(text)}: device entry does not end with ':'")
    devices: list[Device] = []
    offset = 0
    for position, entry in enumerate(body[:-1].split(":")):
        where = f"device {position} (character {offset})"
        offset += len(entry) + 1
        parts = entry.split(",")
        if len(parts) not in (_TEXT_FIELDS_SHORT, _TEXT_FIELDS_LONG):
            raise AnnotationError(
                f"{where}: expected {_TEXT_FIELDS_SHORT} or {_TEXT_FIELDS_LONG} comma-separated fields "
                f"(UUID,count,devmem,devcore,type,numa,health[,index,mode]), got {len(parts)}")
        uuid = parts[0].strip()
        if not uuid:
            raise AnnotationError(f"{where}: empty UUID")
        index = position
        mode = ""
        if len(parts) == _TEXT_FIELDS_LONG:
            index = _parse_int(parts[7], "index", where)
            mode = parts[8].strip()
        devices.append(Device(
            uuid=uuid,
            count=_parse_int(parts[1], "count", where),
            memory_mib=_parse_int(parts[2], "devmem", where),
            cores=_parse_int(parts[3], "devcore", where),
            type=parts[4].strip(),
            numa=_parse_int(parts[5], "numa", where),
            healthy=_parse_bool(parts[6], "health", where),
            index=index,
            mode=mode,
        ))
    return tuple(devices)


def _json_int(entry: Mapping[str, object], key: str, where: str, default: int | None = None, *,
              maximum: int | None = None) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or value is None:
        raise AnnotationError(f"{where}: field {quote(key)} is missing or not an integer")
    limit = _FIELD_MAXIMUM[key] if maximum is None else maximum
    if isinstance(value, int):
        return _in_range(value, key, where, limit)
    if isinstance(value, float) and value.is_integer() and 0 <= value <= limit:
        return int(value)
    if isinstance(value, str):
        return _parse_int(value, key, where, limit)
    if isinstance(value, float) and value.is_integer():
        raise AnnotationError(f"{where}: field {quote(key)} {quote(value)} is outside 0..{limit}")
    raise AnnotationError(f"{where}: field {quote(key)} is not an integer")


def _load_json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise AnnotationError(f"character {error.pos}: invalid JSON: {error.msg}") from None
    except (ValueError, RecursionError) as error:
        # Nesting deeper than the recursion limit, or an integer longer than Python converts: not a crash.
        raise AnnotationError(f"invalid JSON: {str(error)[:80]}") from None


def _decode_register_json(text: str) -> tuple[Device, ...]:
    document = _load_json(text)
    if not isinstance(document, list):
        raise AnnotationError("JSON register annotation must be a list of devices")
    devices: list[Device] = []
    for position, entry in enumerate(document):
        where = f"device {position}"
        if not isinstance(entry, dict):
            raise AnnotationError(f"{where}: expected an object")
        uuid = entry.get("id")
        if not isinstance(uuid, str) or not uuid.strip():
            raise AnnotationError(f"{where}: field 'id' is missing or empty")
        health = entry.get("health", True)
        if isinstance(health, str):
            health = _parse_bool(health, "health", where)
        elif not isinstance(health, bool):
            raise AnnotationError(f"{where}: field 'health' is not a boolean")
        devices.append(Device(
            uuid=uuid.strip(),
            index=_json_int(entry, "index", where, default=position),
            count=_json_int(entry, "count", where),
            memory_mib=_json_int(entry, "devmem", where),
            cores=_json_int(entry, "devcore", where),
            type=str(entry.get("type") or ""),
            numa=_json_int(entry, "numa", where, default=0),
            healthy=health,
            mode=str(entry.get("mode") or ""),
        ))
    return tuple(devices)


def encode_register_json(devices: Iterable[Device]) -> str:
    """Encode devices as newer HAMi's JSON register annotation."""
    return json.dumps([
        {"id": d.uuid, "index": d.index, "count": d.count, "devmem": d.memory_mib, "devcore": d.cores,
         "type": d.type, "numa": d.numa, "mode": d.mode, "health": d.healthy}
        for d in devices
    ], separators=(",", ":"))


def encode_register_text(devices: Iterable[Device], *, with_index: bool = True) -> str:
    """Encode devices as older HAMi's text register annotation (9 fields, or 7 without index and mode)."""
    entries = []
    for d in devices:
        fields = [d.uuid, str(d.count), str(d.memory_mib), str(d.cores), d.type, str(d.numa),
                  "true" if d.healthy else "false"]
        if with_index:
            fields += [str(d.index), d.mode]
        entries.append(",".join(fields) + ":")
    return "".join(entries)


def decode_pair_scores(text: str) -> dict[str, dict[str, int]]:
    """Decode ``hami.io/node-nvidia-score``: per GPU, its link score to each other GPU (higher = faster)."""
    if not text.strip():
        return {}
    document = _load_json(text)
    if not isinstance(document, list):
        raise AnnotationError("score annotation must be a list of {uuid, score} objects")
    scores: dict[str, dict[str, int]] = {}
    for position, entry in enumerate(document):
        where = f"score entry {position}"
        if not isinstance(entry, dict) or not isinstance(entry.get("uuid"), str):
            raise AnnotationError(f"{where}: expected an object with a string 'uuid'")
        pairs = entry.get("score") or {}
        if not isinstance(pairs, dict):
            raise AnnotationError(f"{where}: 'score' must be an object")
        scores[entry["uuid"]] = {str(other): _json_int(pairs, other, f"{where} pair {quote(other)}",
                                                       maximum=MAX_PAIR_SCORE)
                                 for other in pairs}
    return scores


def decode_cordon(text: str) -> frozenset[str]:
    """Decode ``hami.io/device-cordon``: a comma list of GPU UUIDs that take no new allocations."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())
