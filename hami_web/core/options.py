"""Per-pod placement options: policies and GPU type / UUID selection, read from pod annotations.

Pod annotations override the service-wide flags. An unknown policy value is an error for that pod: a typo
like ``binpak`` silently falling back to the default would place the pod against its owner's intent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hami_web.core import names

NODE_POLICIES = ("binpack", "spread")
GPU_POLICIES = ("binpack", "spread", "topology-aware")
TOPOLOGY_AWARE = "topology-aware"
BINPACK = "binpack"
SPREAD = "spread"


class OptionsError(ValueError):
    """A placement annotation has a value we do not understand."""


@dataclass(frozen=True, slots=True)
class PodOptions:
    """How to choose a node and GPUs for one pod."""

    node_policy: str = BINPACK
    gpu_policy: str = SPREAD
    numa_bind: bool = False
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()

    # Verdicts per card type, filled on first use: a node list holds few distinct types but many GPUs.
    _type_verdicts: dict[str, bool] = field(default_factory=dict, init=False, compare=False, repr=False)

    def type_allowed(self, device_type: str) -> bool:
        """Whether a card of ``device_type`` passes the NVIDIA and use/nouse-gputype rules (substring match)."""
        verdict = self._type_verdicts.get(device_type)
        if verdict is None:
            verdict = self._type_verdicts[device_type] = self._judge_type(device_type)
        return verdict

    def _judge_type(self, device_type: str) -> bool:
        upper = device_type.upper()
        if names.VENDOR not in upper:
            return False
        if not self.use_types and not self.nouse_types:
            return True
        if self.use_types and not any(wanted in upper for wanted in self.use_types):
            return False
        return not any(unwanted in upper for unwanted in self.nouse_types)

    def uuid_allowed(self, uuid: str) -> bool:
        """Whether a GPU passes the use/nouse-gpuuuid rules (exact match)."""
        if not self.use_uuids and not self.nouse_uuids:
            return True
        if self.use_uuids and uuid not in self.use_uuids:
            return False
        return uuid not in self.nouse_uuids


def _split(value: str, *, upper: bool) -> tuple[str, ...]:
    parts = (part.strip() for part in value.split(","))
    return tuple(part.upper() if upper else part for part in parts if part)


def _policy(annotations: Mapping[str, str], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = annotations.get(key)
    if value is None:
        return default
    if value.strip() not in allowed:
        expected = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"
        raise OptionsError(f'unknown {key} "{value}" (expected {expected})')
    return value.strip()


def pod_options(annotations: Mapping[str, str] | None, *, node_policy: str, gpu_policy: str) -> PodOptions:
    """Options for a pod from its annotations, with the flags' policies as defaults."""
    annotations = annotations or {}
    return PodOptions(
        node_policy=_policy(annotations, names.POD_NODE_POLICY, node_policy, NODE_POLICIES),
        gpu_policy=_policy(annotations, names.POD_GPU_POLICY, gpu_policy, GPU_POLICIES),
        numa_bind=annotations.get(names.POD_NUMA_BIND, "").strip().lower() == "true",
        use_types=_split(annotations.get(names.POD_USE_GPU_TYPE, ""), upper=True),
        nouse_types=_split(annotations.get(names.POD_NOUSE_GPU_TYPE, ""), upper=True),
        use_uuids=frozenset(_split(annotations.get(names.POD_USE_GPU_UUID, ""), upper=False)),
        nouse_uuids=frozenset(_split(annotations.get(names.POD_NOUSE_GPU_UUID, ""), upper=False)),
    )
