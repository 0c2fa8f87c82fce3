"""Per-pod placement options: policies, scoring weights and GPU type / UUID selection, from pod annotations.

Pod annotations override the service-wide flags. An unknown policy value is read as HAMi v2.10 reads it (a GPU policy
as ``spread``, unknown keys of a chain dropped; a node policy as ``binpack``): HAMi places such a pod, so we do too, and
the webhook warns its owner (`policy_warnings`) that a typo like ``binpak`` fell back.

The GPU policy is either one of the single values (binpack, spread, topology-aware) or, as in HAMi v2.10, a
comma-separated chain: ``mutex`` and ``topology-aware`` act as filters, ``binpack`` / ``spread`` / ``numa`` are sort
keys applied in the order written. Single values keep their order (score, then NUMA, then index;
docs/scheduling-rules.md#scores-and-policies), so existing pods place as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field

from hami_web.core import names
from hami_web.core.families import DEFAULT_CATALOG, NVIDIA, DeviceCatalog, Family
from hami_web.core.families.devicetypes import COMMON_WORD, DeviceTypes
from hami_web.core.limits import json_type_name

NODE_POLICIES = ("binpack", "spread")
GPU_POLICIES = ("binpack", "spread", "topology-aware")
TOPOLOGY_AWARE = "topology-aware"
BINPACK = "binpack"
SPREAD = "spread"
NUMA = "numa"
MUTEX = "mutex"
GPU_POLICY_KEYS = (BINPACK, SPREAD, NUMA, MUTEX, TOPOLOGY_AWARE)
SORT_KEYS = frozenset({BINPACK, SPREAD, NUMA})
# The single values' orders (docs/scheduling-rules.md#scores-and-policies) as key chains: the score first, NUMA node and
# then GPU index break ties.
_SPEC_ORDER = {BINPACK: (BINPACK, NUMA), SPREAD: (SPREAD, NUMA)}
SCORING_WEIGHT_KEYS = ("slot", "core", "memory")
# HAMi v2.10 reads each weight with Go's ``strconv.ParseInt(…, 10, 64)``: any int64 that is not negative.
MAX_SCORING_WEIGHT = (1 << 63) - 1
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
# Go's ``strconv.ParseBool``, which HAMi v2.10 reads ``nvidia.com/numa-bind`` with (``assertNuma``): exactly these
# spellings, nothing trimmed; anything else is an error HAMi reads as false.
GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class OptionsError(ValueError):
    """A placement annotation has a value we do not understand."""


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """Weights of the slot, core and memory terms of the GPU score (``hami.io/device-scoring-weights``)."""

    slot: int = 1
    core: int = 1
    memory: int = 1


DEFAULT_WEIGHTS = ScoringWeights()


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    """A parsed GPU policy: which filters apply and the sort keys that order the GPUs that pass.

    ``sort_keys`` is never empty: a chain without one sorts as the single value ``spread``. ``spec_topology`` marks the
    single value ``topology-aware``, whose GPUs are listed in HAMi's visit order rather than by sort keys.
    """

    mutex: bool
    topology_aware: bool
    sort_keys: tuple[str, ...]
    spec_topology: bool


@dataclass(frozen=True, slots=True)
class DeviceSelection:
    """Which devices of one family a pod accepts, from that family's annotations
    (docs/scheduling-rules.md#checks-for-one-device, steps 2-3).

    A device qualifies when its type serves the family (``types``: contains its common word, or any type) and passes
    ``use_types`` / ``nouse_types`` (upper-cased substrings; a device of ``types.unknown``, whose model is unknown,
    passes both), its UUID passes ``use_uuids`` / ``nouse_uuids`` (exact), and, when ``modes`` is set
    (``nvidia.com/vgpu-mode``), the value contains the device's mode. ``numa_bind`` keeps a container's devices on one
    NUMA node.
    """

    family: str = NVIDIA
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    numa_bind: bool = False
    modes: str | None = None
    soft_split: bool = False  # the pod asks for the family's soft split (Ascend ``huawei.com/vnpu-mode: hami-core``)
    # Which device types serve the family (its word, "" any) and which is of an unknown model (`Family.types`).
    types: DeviceTypes = COMMON_WORD
    # Verdicts per card type, filled on first use: a node list holds few distinct types but many devices.
    _type_verdicts: dict[str, bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def selects_uuids(self) -> bool:
        """Whether a UUID list applies at all (most pods have none: the check is skipped)."""
        return bool(self.use_uuids or self.nouse_uuids)

    def type_allowed(self, device_type: str) -> bool:
        """Whether a device of ``device_type`` serves the family and passes the use/nouse type rules."""
        verdict = self._type_verdicts.get(device_type)
        if verdict is None:
            verdict = self._type_verdicts[device_type] = self._judge_type(device_type)
        return verdict

    def _judge_type(self, device_type: str) -> bool:
        upper = device_type.upper()
        if self.types.word_for(self.family) not in upper:
            return False
        if self.types.unknown and upper == self.types.unknown.upper():
            # The model is unknown here, so no type rule can be judged: HAMi v2.10 reads no MLU type annotation at
            # all and places the pod, so the rules are ignored on such a device
            # (docs/device-families.md#device-families).
            return True
        if self.use_types and not any(wanted in upper for wanted in self.use_types):
            return False
        return not any(unwanted in upper for unwanted in self.nouse_types)

    def uuid_allowed(self, uuid: str) -> bool:
        """Whether a device passes the use/nouse UUID rules (exact match)."""
        if self.use_uuids and uuid not in self.use_uuids:
            return False
        return uuid not in self.nouse_uuids

    def mode_allowed(self, mode: str) -> bool:
        """Whether a device of ``mode`` passes the pod's mode annotation (no mode on the device always does)."""
        return self.modes is None or not mode or mode in self.modes

    @property
    def constrained(self) -> bool:
        """Whether the pod said anything about this family's devices."""
        return bool(self.use_types or self.nouse_types or self.use_uuids or self.nouse_uuids or self.numa_bind
                    or self.modes is not None or self.soft_split)


@dataclass(frozen=True, slots=True)
class PodOptions:
    """How to choose a node and devices for one pod. ``gpu_policy`` is the normalised text (`parse_gpu_policy`).

    ``selections`` holds the families the pod's annotations constrain (the others accept every device of theirs).
    The keywords ``use_types`` … ``numa_bind`` are a shorthand for an NVIDIA selection.
    """

    node_policy: str = BINPACK
    gpu_policy: str = SPREAD
    numa_bind: InitVar[bool] = False
    use_types: InitVar[tuple[str, ...]] = ()
    nouse_types: InitVar[tuple[str, ...]] = ()
    use_uuids: InitVar[frozenset[str]] = frozenset()
    nouse_uuids: InitVar[frozenset[str]] = frozenset()
    scoring_weights: ScoringWeights = DEFAULT_WEIGHTS
    selections: tuple[DeviceSelection, ...] = ()
    # (family, types) of the families whose types do not match by the common word alone (`Family.types`), for the
    # selection of a family the pod does not constrain.
    family_types: tuple[tuple[str, DeviceTypes], ...] = field(default=(), compare=False)
    # Derived from gpu_policy once, because the fit reads it for every container on every node it tries.
    gpu: GpuPolicy = field(init=False, compare=False, repr=False)
    _by_family: dict[str, DeviceSelection] = field(init=False, compare=False, repr=False)

    def __post_init__(self, numa_bind: bool, use_types: tuple[str, ...], nouse_types: tuple[str, ...],
                      use_uuids: frozenset[str], nouse_uuids: frozenset[str]) -> None:
        object.__setattr__(self, "gpu", gpu_policy_of(self.gpu_policy))
        shorthand = DeviceSelection(family=NVIDIA, use_types=use_types, nouse_types=nouse_types, use_uuids=use_uuids,
                                    nouse_uuids=nouse_uuids, numa_bind=numa_bind)
        if shorthand.constrained:
            object.__setattr__(self, "selections", (shorthand, *self.selections))
        object.__setattr__(self, "_by_family", {selection.family: selection for selection in self.selections})

    def selection(self, family: str) -> DeviceSelection:
        """The pod's selection of ``family``'s devices (an unconstrained one when it names none)."""
        selection = self._by_family.get(family)
        if selection is None:
            types = next((types for cw, types in self.family_types if cw == family), COMMON_WORD)
            selection = self._by_family[family] = DeviceSelection(family=family, types=types)
        return selection


def _split(value: str, *, upper: bool) -> tuple[str, ...]:
    parts = (part.strip() for part in value.split(","))
    return tuple(part.upper() if upper else part for part in parts if part)


def _text(annotations: Mapping[str, str], key: str) -> str | None:
    """The annotation's value, None when absent; a non-string (a hand-made request) is an error naming it."""
    value = annotations.get(key)
    if value is not None and not isinstance(value, str):
        raise OptionsError(f"{key} must be a string, got {json_type_name(value)}")
    return value


def _policy(annotations: Mapping[str, str], key: str, default: str, allowed: tuple[str, ...]) -> str:
    return _node_policy_read(annotations, key, default, allowed)[0]


def _node_policy_read(annotations: Mapping[str, str], key: str, default: str,
                      allowed: tuple[str, ...]) -> tuple[str, str]:
    """The node policy and, for a value that is none of ``allowed``, what was done: HAMi v2.10's ``NodeScoreList``
    sorts anything but ``spread`` as ``binpack``."""
    value = _text(annotations, key)
    if value is None:
        return default, ""
    if value.strip() not in allowed:
        expected = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"
        return BINPACK, f'unknown {key} "{value}" (expected {expected}): read as "{BINPACK}", as HAMi v2.10 reads it'
    return value.strip(), ""


def read_pod_gpu_policy(value: str) -> tuple[str, str]:
    """A pod's GPU policy as HAMi v2.10 reads it, and what was done with a value `parse_gpu_policy` refuses ("" when
    nothing): a single unknown value sorts as ``spread`` (``DeviceUsageList.Less``), unknown keys of a chain are
    dropped (``gpuSortKeyChain``, ``PolicyContains``) and a chain left with none sorts as ``spread``."""
    try:
        return parse_gpu_policy(value), ""
    except OptionsError as error:
        if not isinstance(value, str):
            raise
        known = [key for key in _policy_keys(value) if key in GPU_POLICY_KEYS] if "," in value else []
        read = ",".join(known) or SPREAD
        return read, f'{error}: read as "{read}", as HAMi v2.10 reads it'


def policy_warnings(annotations: Mapping[str, str]) -> list[str]:
    """What the pod's policy annotations say that HAMi v2.10 reads otherwise than their owner meant (the webhook's
    warnings): an unknown GPU or node policy."""
    warnings = []
    gpu = _text(annotations, names.POD_GPU_POLICY)
    if gpu is not None:
        warnings.append(read_pod_gpu_policy(gpu)[1])
    warnings.append(_node_policy_read(annotations, names.POD_NODE_POLICY, BINPACK, NODE_POLICIES)[1])
    return [warning for warning in warnings if warning]


def _policy_keys(text: str) -> list[str]:
    return list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


def parse_gpu_policy(value: str, *, source: str = names.POD_GPU_POLICY) -> str:
    """The normalised GPU policy (trimmed, duplicates dropped), or `OptionsError` naming the bad key.

    A value without a comma is one of the single values (or ``mutex`` / ``numa``); an unknown one gets the
    single-value message (docs/scheduling-rules.md#scores-and-policies). In a chain, the message names the entry
    that is not a policy.
    """
    if not isinstance(value, str):
        raise OptionsError(f"{source} must be a string, got {json_type_name(value)}")
    if "," not in value:
        single = value.strip()
        if single in GPU_POLICY_KEYS:
            return single
        expected = ", ".join(GPU_POLICIES[:-1]) + f" or {GPU_POLICIES[-1]}"
        raise OptionsError(f'unknown {source} "{value}" (expected {expected})')
    keys = _policy_keys(value)
    unknown = [key for key in keys if key not in GPU_POLICY_KEYS]
    if unknown:
        raise OptionsError(f'unknown {source} key "{unknown[0]}" in "{value}" '
                           f'(expected a comma-separated list of {", ".join(GPU_POLICY_KEYS)})')
    if not keys:
        raise OptionsError(f'{source} "{value}" names no policy '
                           f'(expected a comma-separated list of {", ".join(GPU_POLICY_KEYS)})')
    return ",".join(keys)


def gpu_policy_of(normalised: str) -> GpuPolicy:
    """What a normalised GPU policy does: filters, and the sort keys in the order written."""
    keys = _policy_keys(normalised)
    sort_keys = tuple(key for key in keys if key in SORT_KEYS)
    if len(keys) == 1 and keys[0] in _SPEC_ORDER:
        sort_keys = _SPEC_ORDER[keys[0]]
    elif not sort_keys:
        sort_keys = _SPEC_ORDER[SPREAD]  # filters only (or mutex alone): the usual spread order
    return GpuPolicy(mutex=MUTEX in keys, topology_aware=TOPOLOGY_AWARE in keys, sort_keys=sort_keys,
                     spec_topology=keys == [TOPOLOGY_AWARE])


def parse_scoring_weights(value: str, *, source: str = names.POD_SCORING_WEIGHTS) -> ScoringWeights:
    """``slot=a,core=b,memory=c``: whole numbers >= 0, all three keys, not all zero; errors name the problem."""
    if not isinstance(value, str):
        raise OptionsError(f"{source} must be a string, got {json_type_name(value)}")
    expected = "expected slot=<n>,core=<n>,memory=<n>"
    weights: dict[str, int] = {}
    for part in value.split(","):
        key, sep, number = (piece.strip() for piece in part.partition("="))
        if not sep:
            raise OptionsError(f'{source} "{value}": entry "{part.strip()}" is not key=value ({expected})')
        if key not in SCORING_WEIGHT_KEYS:
            raise OptionsError(f'{source} "{value}": unknown key "{key}" ({expected})')
        if key in weights:
            raise OptionsError(f'{source} "{value}": {key} is given twice')
        if not _WHOLE_NUMBER.fullmatch(number):
            raise OptionsError(f'{source} "{value}": {key} "{number}" is not a whole number >= 0')
        negative = number.startswith("-")
        # Length first: int() of thousands of digits is refused by Python itself (and slow before that).
        digits = number.lstrip("+-").lstrip("0") or "0"
        if negative and digits != "0":
            raise OptionsError(f'{source} "{value}": {key} "{number}" is not a whole number >= 0')
        if len(digits) > len(str(MAX_SCORING_WEIGHT)) or int(digits) > MAX_SCORING_WEIGHT:
            raise OptionsError(f'{source} "{value}": {key} is over {MAX_SCORING_WEIGHT} (a 64-bit integer)')
        weights[key] = int(digits)
    missing = [key for key in SCORING_WEIGHT_KEYS if key not in weights]
    if missing:
        raise OptionsError(f'{source} "{value}": missing {", ".join(missing)} ({expected})')
    if not any(weights.values()):
        raise OptionsError(f'{source} "{value}": the weights must not all be zero')
    return ScoringWeights(**weights)


# A use list no device can pass: a UUID is never empty (two use annotations that share no UUID).
_NO_UUID = frozenset({""})


def _use_uuids(values: list[str]) -> frozenset[str]:
    """The UUIDs a device must be among: those of every use annotation given (HAMi checks each key in turn, so a
    device must pass all); none given, no constraint."""
    lists = [frozenset(listed) for value in values if (listed := _split(value, upper=False))]
    if not lists:
        return frozenset()
    return frozenset.intersection(*lists) or _NO_UUID


def family_selection(annotations: Mapping[str, str], family: Family) -> DeviceSelection:
    """What the pod's annotations say about ``family``'s devices (its own keys; an empty key is not read)."""
    def text(key: str) -> str:
        return (_text(annotations, key) or "") if key else ""

    modes = _text(annotations, family.mode_key) if family.mode_key else None
    return DeviceSelection(
        family=family.cw,
        use_types=_split(text(family.use_type_key), upper=True),
        nouse_types=_split(text(family.nouse_type_key), upper=True),
        use_uuids=_use_uuids([text(key) for key, _ in ((family.use_uuid_key, ""), *family.more_uuid_keys)]),
        nouse_uuids=frozenset(uuid for _, key in ((None, family.nouse_uuid_key), *family.more_uuid_keys)
                              for uuid in _split(text(key), upper=False)),
        numa_bind=text(family.numa_bind_key) in GO_TRUE,
        modes=modes.strip() if modes is not None else None,
        # HAMi compares the value exactly (``vnpuMode == "hami-core"``).
        soft_split=family.soft_split is not None
        and _text(annotations, family.soft_split.key) == family.soft_split.mode,
        types=family.types,
    )


def pod_options(annotations: Mapping[str, str] | None, *, node_policy: str, gpu_policy: str,
                catalog: DeviceCatalog = DEFAULT_CATALOG) -> PodOptions:
    """Options for a pod from its annotations, with the flags' policies as defaults."""
    annotations = annotations or {}
    pod_gpu_policy = annotations.get(names.POD_GPU_POLICY)
    weights = annotations.get(names.POD_SCORING_WEIGHTS)
    selections = tuple(selection for selection in (family_selection(annotations, family) for family in catalog)
                       if selection.constrained)
    return PodOptions(
        node_policy=_policy(annotations, names.POD_NODE_POLICY, node_policy, NODE_POLICIES),
        gpu_policy=gpu_policy if pod_gpu_policy is None else read_pod_gpu_policy(pod_gpu_policy)[0],
        scoring_weights=DEFAULT_WEIGHTS if weights is None else parse_scoring_weights(weights),
        selections=selections,
        family_types=tuple((family.cw, family.types) for family in catalog if family.types != COMMON_WORD),
    )
