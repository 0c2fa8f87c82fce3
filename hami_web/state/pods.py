"""How a pod object from the API turns into GPU usage (SPEC.md §4, usage).

Kept apart from the cache so the rules — which phases hold GPUs, which node the usage belongs to, when init
containers stop counting — are plain functions that can be tested without threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_web.core import names
from hami_web.core.devices import AnnotationError
from hami_web.core.grants import PodGrants, decode_pod_devices
from hami_web.core.usage import DeviceUsage, pod_booking

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one pod holds on one node: its grants (per container) and the per-GPU booking they add up to."""

    uid: str
    namespace: str
    name: str
    node: str
    grants: PodGrants
    booking: Mapping[str, DeviceUsage]
    devices_text: str
    container_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the cache keeps of one pod list item or watch event: its usage, or why it cannot be read.

    The whole object is dropped as soon as this is built, so memory and work stay proportional to the GPU
    pods, not to every pod in the cluster.
    """

    uid: str
    usage: PodUsage | None = None
    error: str = ""
    finished: bool = False


def holds_nothing(pod: Mapping[str, Any]) -> bool:
    """Cheap test for the common case of a list: a pod without our node annotation holds no GPU."""
    return not ((pod.get("metadata") or {}).get("annotations") or {}).get(names.POD_ASSIGNED_NODE)


def pod_record(pod: Mapping[str, Any]) -> PodRecord:
    """Read a pod object's usage; an unreadable device annotation becomes ``error`` (never an exception)."""
    uid, namespace, name = pod_key(pod)
    finished = (pod.get("status") or {}).get("phase") in FINISHED_PHASES
    try:
        return PodRecord(uid=uid, usage=pod_usage(pod), finished=finished)
    except AnnotationError as error:
        return PodRecord(uid=uid, error=f"pod {namespace}/{name}: {error}", finished=finished)


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(uid, namespace, name)`` of a pod object."""
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or ""), str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _init_finished(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Initialized":
            return condition.get("status") == "True"
    return False


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The usage a pod holds, or None when it holds nothing.

    A pod holds GPUs while it carries ``hami.io/vgpu-node`` and ``hami.io/vgpu-devices-allocated`` and is
    neither Succeeded nor Failed (terminating pods keep theirs until they end). A pod whose binding failed
    and that is not bound holds nothing: kube-scheduler will filter it again. Raises `AnnotationError` when
    the device annotation is garbage.
    """
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    node = annotations.get(names.POD_ASSIGNED_NODE)
    devices_text = annotations.get(names.POD_DEVICES_ALLOCATED)
    if not node or devices_text is None:
        return None
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    if status.get("phase") in FINISHED_PHASES:
        return None
    if annotations.get(names.POD_BIND_PHASE) == "failed" and not spec.get("nodeName"):
        return None
    grants = decode_pod_devices(devices_text)
    init_containers = spec.get("initContainers") or []
    containers = [*init_containers, *(spec.get("containers") or [])]
    if len(grants) > len(containers) and containers:
        raise AnnotationError(f"{len(grants)} container entries for a pod with {len(containers)} containers")
    uid, namespace, name = pod_key(pod)
    return PodUsage(
        uid=uid,
        namespace=namespace,
        name=name,
        node=str(node),
        grants=grants,
        booking=pod_booking(grants, init_count=len(init_containers), init_finished=_init_finished(pod)),
        devices_text=devices_text,
        container_names=tuple(str((c or {}).get("name", "")) for c in containers if isinstance(c, Mapping)),
    )
