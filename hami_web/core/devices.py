"""Device inventory of a node and the codecs of the node annotations HAMi's device plugins write.

Every family's register annotation (``hami.io/node-nvidia-register``, ``hami.io/node-dcu-register``, …) comes in two
forms (JSON from newer HAMi, ``:``-terminated text from older releases); both decode to the same `Device` tuple so the
rest of the scheduler never cares which device plugin version a node runs. JSON is read exactly as Go's
``encoding/json`` reads HAMi's ``DeviceInfo`` (docs/wire-formats.md#node-register-annotation): every field is
``omitempty``, so a missing field is its zero value (a missing ``health`` is an unhealthy device), keys match
case-insensitively, unknown keys are ignored and the last duplicate wins. Decoding never raises anything but
`AnnotationError`, whose message says where in the text the problem is, because one bad node must not stop scheduling on
the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hami_web.core.limits import (
    MAX_DEVICE_CORES,
    MAX_DEVICE_INDEX,
    MAX_DEVICE_MEMORY_MIB,
    MAX_DEVICE_SHARES,
    MAX_NUMA_NODE,
    MAX_NUMBER_CHARS,
    MAX_PAIR_SCORE,
    MAX_TYPE_CHARS,
    MIN_NUMA_NODE,
    quote,
    uuid_problem,
)
from hami_web.core.mig import MigProfile
from hami_web.core.partitions import DevicePartitions, Partitioning, SliceRange, partitioned

if TYPE_CHECKING:
    from hami_web.core.groups import Grouping


class AnnotationError(ValueError):
    """An annotation does not parse; the message names the position and what was expected."""


NO_NETWORK = -1


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
    family: str = "NVIDIA"  # the common word of the family whose register annotation listed it
    # The dynamic MIG profiles the device plugin offers on it (``migProfiles``, as listed; `core.mig.candidate_profiles`
    # gives the order a request tries them); empty for a GPU that is not carved on demand.
    mig_profiles: tuple[MigProfile, ...] = ()
    network: int = NO_NETWORK  # ``custominfo.NetworkID``: the Ascend HCCS group the NPU is in (-1: none reported)
    card: str = ""  # Vastai's ``custominfo.AIC`` of a die in ``DeviceStrategy`` "die": the card it sits on ("" none)
    instance_type: str = ""  # the node's (AWS Neuron's ``node.kubernetes.io/instance-type``: how its ranges start)
    partitions: DevicePartitions | None = None  # the profiles a partitioned device offers, its handle (core.partitions)
    sharing: str = ""  # how the device plugin says the card is shared now (Metax sGPU's QoS policy; "" nothing said)


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """Everything the scheduler knows about a node's devices, independent of what runs on them.

    ``devices`` lists every family's devices, each family's together (`groups` gives each family's positions);
    ``broken`` maps a family whose register annotation does not parse to the error, so that family takes no pod
    here while the node's other families stay usable.
    """

    name: str
    devices: tuple[Device, ...]
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    cordoned: frozenset[str] = frozenset()
    broken: Mapping[str, str] = field(default_factory=dict)
    # The families whose devices the pair scores and the topology-aware policy apply to (None: all of them).
    topology: frozenset[str] | None = None
    # The families whose soft split (Ascend hami-core) this node allows, and how each family's multi-device
    # containers are picked here (docs/device-families.md#ascend-npus: "network" = HCCS groups, "pairs" = module pairs).
    soft_split: frozenset[str] = frozenset()
    grouping: Mapping[str, Grouping] = field(default_factory=dict)
    # The node annotations the families' own node scores read (`hami_web.core.families.family.NodeScore.keys`), as
    # JSON text of a map ("" = none): a string, whose hash Python keeps, so a decision judges each distinct set once.
    annotations: str = ""
    # How each family carves its devices into partitions (`hami_web.core.partitions.Partitioning`), from its spec.
    partitioning: Mapping[str, Partitioning] = field(default_factory=dict)
    groups: Mapping[str, tuple[int, int]] = field(init=False, compare=False, repr=False)
    # Asked of the partitionings once per inventory: the positions carved per grant, and those refused (`partitioned`).
    carved: frozenset[int] = field(init=False, compare=False, repr=False)
    refused: tuple[tuple[int, str], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        groups: dict[str, tuple[int, int]] = {}
        for position, device in enumerate(self.devices):
            first, _ = groups.get(device.family, (position, position))
            if first != position and groups[device.family][1] != position:
                raise ValueError(f"node {self.name}: the devices of family {device.family} are not listed together")
            groups[device.family] = (first, position + 1)
        object.__setattr__(self, "groups", groups)
        carved, refused = partitioned(self.devices, groups, self.partitioning)
        object.__setattr__(self, "carved", carved)
        object.__setattr__(self, "refused", refused)


_TEXT_FIELDS_SHORT = 7
TEXT_DEFAULT_MODE = "hami-core"
_TEXT_FIELDS_LONG = 9


# The largest value of each numeric register field: a GPU beyond these is garbage, and numbers this size keep
# scores and metrics finite (a 400-digit devmem made every float conversion overflow).
_FIELD_MAXIMUM = {"count": MAX_DEVICE_SHARES, "devmem": MAX_DEVICE_MEMORY_MIB, "devcore": MAX_DEVICE_CORES,
                  "numa": MAX_NUMA_NODE, "index": MAX_DEVICE_INDEX}
_FIELD_MINIMUM = {"numa": MIN_NUMA_NODE}


def _in_range(value: int, what: str, where: str, maximum: int) -> int:
    minimum = _FIELD_MINIMUM.get(what, 0)
    if not minimum <= value <= maximum:
        raise AnnotationError(f"{where}: {what} {quote(value)} is outside {minimum}..{maximum}")
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
    # Go's strconv.ParseBool, which HAMi's text decoder uses.
    value = text.strip()
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise AnnotationError(f"{where}: {what} {quote(value)} is not true or false")


def decode_register(text: str, *, family: str = "NVIDIA") -> tuple[Device, ...]:
    """Decode a register annotation (JSON list or 7/9-field text) into the devices of ``family``."""
    stripped = text.strip()
    if not stripped:
        raise AnnotationError("register annotation is empty")
    devices = _decode_register_json(stripped, family) if stripped[0] in "[{" else _decode_register_text(text, family)
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


def _decode_register_text(text: str, family: str) -> tuple[Device, ...]:
    body = text.strip()
    if not body.endswith(":"):
        raise AnnotationError(f"character {len(text)}: device entry does not end with ':'")
    devices: list[Device] = []
    offset = 0
    position = -1
    for entry in body[:-1].split(":"):
        where = f"device {position + 1} (character {offset})"
        offset += len(entry) + 1
        if not entry.strip():
            continue  # HAMi's decoder skips empty segments (``…:`` twice)
        position += 1
        parts = entry.split(",")
        if len(parts) not in (_TEXT_FIELDS_SHORT, _TEXT_FIELDS_LONG):
            raise AnnotationError(
                f"{where}: expected {_TEXT_FIELDS_SHORT} or {_TEXT_FIELDS_LONG} comma-separated fields "
                f"(UUID,count,devmem,devcore,type,numa,health[,index,mode]), got {len(parts)}")
        uuid = parts[0].strip()
        if not uuid:
            raise AnnotationError(f"{where}: empty UUID")
        index = position
        # A 7-field device predates modes and runs HAMi-core (docs/wire-formats.md#node-register-annotation).
        mode = TEXT_DEFAULT_MODE
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
            family=family,
        ))
    return tuple(devices)


class _MinusZero(int):
    """The JSON literal ``-0``: 0 for Go's signed integers, an error for its unsigned ones (``strconv.ParseUint``)."""


def _go_int(literal: str) -> int:
    return _MinusZero(0) if literal == "-0" else int(literal)


def _refuse_constant(literal: str) -> object:
    # Python's json module reads NaN and Infinity; they are not JSON, and Go's decoder refuses them.
    raise ValueError(f"{literal} is not a JSON value")


def _json_int(value: object, key: str, where: str, maximum: int | None = None, *, unsigned: bool = False) -> int:
    """A Go integer field: only a JSON integer literal (Go refuses ``4.0``, ``1e3`` and ``"4"``), in range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(f"{where}: field {quote(key)} is {_json_kind(value)}, not an integer")
    if unsigned and isinstance(value, _MinusZero):
        raise AnnotationError(f"{where}: field {quote(key)} is -0, not an unsigned integer")
    return _in_range(int(value), key, where, _FIELD_MAXIMUM[key] if maximum is None else maximum)


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {quote(value)}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _load_json(text: str, *, pairs: bool = False) -> object:
    try:
        if pairs:
            return json.loads(text, object_pairs_hook=_GoObject, parse_int=_go_int, parse_constant=_refuse_constant)
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise AnnotationError(f"character {error.pos}: invalid JSON: {error.msg}") from None
    except (ValueError, RecursionError) as error:
        # Nesting deeper than the recursion limit, an integer longer than Python converts, NaN: not a crash.
        raise AnnotationError(f"invalid JSON: {str(error)[:80]}") from None


class _GoObject(dict[str, object]):
    """A JSON object as Go's ``encoding/json`` fills a struct from it: keys folded (Go matches field names
    case-insensitively, with Unicode folding: ``ſ`` matches ``s``), the last of duplicate keys winning, and
    ``null`` leaving a field as it was."""

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__()
        for key, value in pairs:
            if value is not None:
                self[key.casefold()] = value


# DeviceInfo's JSON keys (lower case) and how each decodes; other keys are ignored, as Go does.
_STRING_FIELDS = ("id", "type", "mode", "devicevendor")
_INT32_MAXIMUM = (1 << 31) - 1
_UINT32_MAXIMUM = (1 << 32) - 1


def _json_string(entry: Mapping[str, object], key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise AnnotationError(f"{where}: field {quote(key)} is {_json_kind(value)}, not a string")
    return value


def _mig_profiles(value: object, where: str) -> tuple[MigProfile, ...]:
    """``migProfiles`` decoded as Go decodes ``[]MigProfile`` (name string, memoryMB and core int32, sliceCount
    uint32, placements ``[{start, size}]`` uint32; ``null`` is the zero value): a wrong type fails the annotation.
    Kept as listed, unusable ones too: a GPU with ``migProfiles`` is a dynamic MIG GPU even if none can be booked."""
    if not isinstance(value, list):
        raise AnnotationError(f"{where}: field 'migProfiles' is {_json_kind(value)}, not a list")
    profiles: list[MigProfile] = []
    for position, profile in enumerate(value):
        here = f"{where} migProfiles[{position}]"
        if profile is None:
            profiles.append(MigProfile(name="", memory_mib=0, cores=0, slice_count=0, placements=()))
            continue
        if not isinstance(profile, dict):
            raise AnnotationError(f"{here}: expected an object, got {_json_kind(profile)}")
        name = _json_string(profile, "name", here)
        numbers = {key: _go_number(profile[key], key, here, unsigned=unsigned, maximum=maximum)
                   if key in profile else 0
                   for key, unsigned, maximum in (("memorymb", False, _INT32_MAXIMUM), ("core", False, _INT32_MAXIMUM),
                                                  ("slicecount", True, _UINT32_MAXIMUM))}
        placements = profile.get("placements", [])
        if not isinstance(placements, list):
            raise AnnotationError(f"{here}: field 'placements' is {_json_kind(placements)}, not a list")
        ranges: list[SliceRange] = []
        for index, placement in enumerate(placements):
            if placement is None:
                ranges.append(SliceRange(start=0, size=0))  # Go's zero value; never a free placement
                continue
            if not isinstance(placement, dict):
                raise AnnotationError(f"{here} placements[{index}]: expected an object, got {_json_kind(placement)}")
            start, size = (_go_number(placement[key], key, f"{here} placements[{index}]", unsigned=True,
                                      maximum=_UINT32_MAXIMUM) if key in placement else 0
                           for key in ("start", "size"))
            ranges.append(SliceRange(start=start, size=size))
        profiles.append(MigProfile(name=name, memory_mib=numbers["memorymb"], cores=numbers["core"],
                                   slice_count=numbers["slicecount"], placements=tuple(ranges)))
    return tuple(profiles)


def _go_number(value: object, key: str, where: str, *, unsigned: bool, maximum: int) -> int:
    """A Go integer of another struct than DeviceInfo: a JSON integer literal within the Go type's range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(f"{where}: field {quote(key)} is {_json_kind(value)}, not an integer")
    minimum = 0 if unsigned else -maximum - 1
    if (unsigned and isinstance(value, _MinusZero)) or not minimum <= value <= maximum:
        raise AnnotationError(f"{where}: field {quote(key)} {quote(int(value))} is outside {minimum}..{maximum}")
    return int(value)


def _decode_register_json(text: str, family: str) -> tuple[Device, ...]:
    document = _load_json(text, pairs=True)
    if not isinstance(document, list):
        raise AnnotationError("JSON register annotation must be a list of devices")
    devices: list[Device] = []
    for position, entry in enumerate(document):
        where = f"device {position}"
        if not isinstance(entry, dict):
            raise AnnotationError(f"{where}: expected an object, got {_json_kind(entry)}")
        strings = {key: _json_string(entry, key, where) for key in _STRING_FIELDS}
        if not strings["id"].strip():
            raise AnnotationError(f"{where}: field 'id' is missing or empty")
        health = entry.get("health", False)
        if not isinstance(health, bool):
            raise AnnotationError(f"{where}: field 'health' is {_json_kind(health)}, not a boolean")
        profiles = _mig_profiles(entry.get("migprofiles", []), where)
        custom = entry.get("custominfo", {})
        if not isinstance(custom, dict):
            raise AnnotationError(f"{where}: field 'custominfo' is {_json_kind(custom)}, not an object")
        network = _network_id(custom)
        devices.append(Device(
            uuid=strings["id"].strip(),
            index=_json_int(entry.get("index", 0), "index", where, unsigned=True),
            count=_json_int(entry.get("count", 0), "count", where),
            memory_mib=_json_int(entry.get("devmem", 0), "devmem", where),
            cores=_json_int(entry.get("devcore", 0), "devcore", where),
            type=strings["type"],
            numa=_json_int(entry.get("numa", 0), "numa", where),
            healthy=health,
            mode=strings["mode"],
            family=family,
            mig_profiles=profiles,
            network=network,
            card=_die_card(custom),
        ))
    return tuple(devices)


def _die_card(custom: Mapping[str, object]) -> str:
    """``custominfo.AIC`` when ``custominfo.DeviceStrategy`` is "die" (Vastai's die mode), else "" (keys read
    case-insensitively like every key of the annotation)."""
    strategy, card = custom.get("devicestrategy"), custom.get("aic")
    return card if strategy == "die" and isinstance(card, str) else ""


def _network_id(custom: Mapping[str, object]) -> int:
    """``custominfo.NetworkID`` as HAMi reads it (a JSON number, decoded by Go into ``map[string]any`` as a float64
    and truncated to an int); anything else, or no such key, is no group. The key is read case-insensitively like
    every key of the annotation (HAMi's map lookup is exact: only ``NetworkID`` is ever written)."""
    value = custom.get("networkid")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return NO_NETWORK
    if value != value or not 0 <= value <= MAX_NETWORK_ID:
        return NO_NETWORK
    return int(value)


MAX_NETWORK_ID = 1 << 20


def encode_register_json(devices: Iterable[Device]) -> str:
    """Encode devices as newer HAMi's JSON register annotation (as Go writes it: zero values left out)."""
    encoded = []
    for d in devices:
        entry: dict[str, object] = {"id": d.uuid, "index": d.index, "count": d.count, "devmem": d.memory_mib,
                                    "devcore": d.cores, "type": d.type, "numa": d.numa, "mode": d.mode,
                                    "health": d.healthy,
                                    "migProfiles": [{"name": p.name, "memoryMB": p.memory_mib, "core": p.cores,
                                                     "sliceCount": p.slice_count,
                                                     "placements": [{"start": r.start, "size": r.size}
                                                                    for r in p.placements]}
                                                    for p in d.mig_profiles]}
        if d.network != NO_NETWORK:
            entry["custominfo"] = {"NetworkID": d.network}
        if d.card:
            entry["custominfo"] = {"DeviceStrategy": "die", "AIC": d.card}
        encoded.append({key: value for key, value in entry.items() if value})
    return json.dumps(encoded, separators=(",", ":"))


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
        scores[entry["uuid"]] = {str(other): _pair_score(value, f"{where} pair {quote(other)}")
                                 for other, value in pairs.items()}
    return scores


def _pair_score(value: object, where: str) -> int:
    """A pair score: an integer, or a numeric string (docs/wire-formats.md#pair-scores-and-cordon), in
    ``0..MAX_PAIR_SCORE``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        return _parse_int(value, "score", where, MAX_PAIR_SCORE)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(f"{where}: score is {_json_kind(value)}, not an integer")
    return _in_range(value, "score", where, MAX_PAIR_SCORE)


def decode_cordon(text: str) -> frozenset[str]:
    """Decode ``hami.io/device-cordon``: a comma list of GPU UUIDs that take no new allocations."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def load_go_json(text: str) -> object:
    """``text`` decoded as Go's ``encoding/json`` fills a struct (keys folded, ``null`` = absent, ``-0`` kept apart,
    NaN refused), for the families whose device plugin writes its own JSON schema; `AnnotationError` if invalid."""
    return _load_json(text, pairs=True)


def go_field_int(entry: Mapping[str, object], key: str, where: str, *, maximum: int, unsigned: bool = False) -> int:
    """Field ``key`` (lower case) of a `load_go_json` object as a Go integer within range; absent = 0."""
    return _go_number(entry[key], key, where, unsigned=unsigned, maximum=maximum) if key in entry else 0


def go_field_string(entry: Mapping[str, object], key: str, where: str) -> str:
    """Field ``key`` (lower case) of a `load_go_json` object as a Go string; absent = ""."""
    return _json_string(entry, key, where)


def go_field_bool(entry: Mapping[str, object], key: str, where: str) -> bool:
    """Field ``key`` (lower case) of a `load_go_json` object as a Go bool; absent = false."""
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise AnnotationError(f"{where}: field {quote(key)} is {_json_kind(value)}, not a boolean")
    return value


def json_kind(value: object) -> str:
    """How a decoded JSON value is named in an error (``a list``, ``the number 3``)."""
    return _json_kind(value)
