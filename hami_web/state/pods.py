"""How a pod object from the API turns into GPU usage (docs/wire-formats.md#pod-device-annotation).

Kept apart from the cache so the rules — which phases hold GPUs, which node the usage belongs to, when init
containers stop counting — are plain functions that can be tested without threads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from hami_web.core import names
from hami_web.core.devices import AnnotationError
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog, Family
from hami_web.core.families.family import SharingRule
from hami_web.core.grants import DeviceGrant, PodGrants, decode_pod_devices, encode_pod_devices, merge_grants
from hami_web.core.limits import json_type_name, quote
from hami_web.core.partitions import Unclaimed
from hami_web.core.preemption import Holder, preemption_terms
from hami_web.core.requests import RequestError, family_asks_devices
from hami_web.core.usage import DeviceUsage, pod_booking

log = logging.getLogger(__name__)

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
    init_count: int = 0  # the first ``init_count`` entries of ``grants`` belong to init containers
    # Not part of what the pod holds (`planning.same_usage` ignores them): the pod's ``hami.io/bind-phase`` (does
    # a node lock it owns still matter?) and the resourceVersion it was read at (a precondition for our write).
    bind_phase: str = ""
    resource_version: str = ""
    # What device-aware preemption judges a holder by (docs/preemption.md): ``spec.priority``, ``status.startTime``
    # (Unix seconds; None when not started), ``deletionTimestamp`` set, and the labels PodDisruptionBudgets select on.
    priority: int = 0
    started_at: float | None = None
    terminating: bool = False
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    # Annotations of an earlier booking the pod carried when it was placed (MIG reservations): `/bind` removes those
    # its booking does not write, which a Binding cannot do.
    leftover_keys: frozenset[str] = frozenset()


def preemption_holder(usage: PodUsage, quota_use: Mapping[str, int]) -> Holder:
    """A pod holding devices as device-aware preemption judges it (the cache's decision and ``explain``'s alike);
    ``quota_use`` is what it counts against its namespace's quota."""
    return Holder(uid=usage.uid, namespace=usage.namespace, name=usage.name, priority=usage.priority,
                  booking=usage.booking, started_at=usage.started_at, terminating=usage.terminating,
                  labels=usage.labels, quota_use=quota_use)


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
    bound: bool = False  # spec.nodeName is set: what the pod holds is final, no placement of ours can follow


def holds_nothing(pod: Mapping[str, Any]) -> bool:
    """Cheap test for the common case of a list: a pod without our node annotation holds no GPU.

    A pod whose metadata or annotations are not maps is not "nothing": `pod_record` reports it as unreadable.
    """
    metadata = pod.get("metadata")
    if metadata is None:
        return True
    if not isinstance(metadata, Mapping):
        return False
    annotations = metadata.get("annotations")
    if annotations is None:
        return True
    return isinstance(annotations, Mapping) and not annotations.get(names.POD_ASSIGNED_NODE)


def pod_record(pod: Mapping[str, Any], *, catalog: DeviceCatalog = DEFAULT_CATALOG) -> PodRecord:
    """Read a pod object's usage; anything unreadable becomes ``error`` (never an exception).

    One bad object must not stop the loop that reads all the others, so even an unexpected error is caught.
    """
    uid, namespace, name = pod_key(pod)
    finished = pod_finished(pod)
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    bound = isinstance(spec, Mapping) and bool(spec.get("nodeName"))
    try:
        return PodRecord(uid=uid, usage=pod_usage(pod, catalog=catalog), finished=finished,
                         bound=bound)
    except AnnotationError as error:
        return PodRecord(uid=uid, error=f"pod {namespace}/{name}: {error}", finished=finished, bound=bound)
    except Exception as error:
        log.exception("pod %s/%s: unexpected error reading its GPU usage", namespace, name)
        return PodRecord(uid=uid, error=f"pod {namespace}/{name}: unreadable: {type(error).__name__}",
                         finished=finished, bound=bound)


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(uid, namespace, name)`` of a pod object (empty strings for what is missing or not a string)."""
    metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(metadata, Mapping):
        return "", "", ""
    uid, namespace, name = (metadata.get(key) for key in ("uid", "namespace", "name"))
    return (uid if isinstance(uid, str) else "", namespace if isinstance(namespace, str) else "",
            name if isinstance(name, str) else "")


def pod_finished(pod: Mapping[str, Any]) -> bool:
    """Whether the pod has ended (Succeeded or Failed) and so holds nothing any more."""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    return isinstance(status, Mapping) and status.get("phase") in FINISHED_PHASES


def string_map(value: object, where: str) -> Mapping[str, str]:
    """``value`` as a map of strings (annotations, labels), {} when absent; `AnnotationError` when it is not."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnnotationError(f"{where} must be a map of strings, got {json_type_name(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise AnnotationError(f"{where} must be a map of strings; {quote(key)} is {json_type_name(item)}")
    return value


def _map(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnnotationError(f"{where} must be an object, got {json_type_name(value)}")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise AnnotationError(f"{where} must be a list of objects")
    return value


def _init_finished(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Initialized":
            return condition.get("status") == "True"
    return False


def _check_grants_match_request(grants: PodGrants, containers: list[Mapping[str, Any]], family: Family) -> None:
    """A booking is only trusted when the pod asks for it: no more entries than containers, and no container
    holding more devices than it asks for (a pod that asks for none holds none). Anyone who may create a pod can
    write these annotations, so a booking the spec does not back would take devices from everyone else."""
    if len(grants) > len(containers):
        raise AnnotationError(f"{len(grants)} container entries for a pod with {len(containers)} containers")
    for position, (container, granted) in enumerate(zip(containers, grants, strict=False)):
        if not granted:
            continue
        asked = _asked(container, position, family)
        if len(granted) > asked:
            raise AnnotationError(f"container {position} holds {len(granted)} devices but asks for {asked} "
                                  f"{family.resources.count}")


def _asked(container: Mapping[str, Any], position: int, family: Family) -> int:
    """The devices a container asks of ``family`` (`family_asks_devices`)."""
    try:
        return family_asks_devices(container, family)
    except RequestError as error:
        raise AnnotationError(f"container {position}: {error}") from None


def _family_grants(text: str, containers: list[Mapping[str, Any]], family: Family) -> PodGrants:
    """One family's allocated annotation as one entry per container.

    HAMi v2.10 writes NVIDIA's and Hygon's annotation without the empty entries of containers that hold none of the
    family (docs/wire-formats.md#pod-device-annotation). Such a compact value, whose entries are as many as the
    containers asking for the family and fit them in order, is read as meant; anything else must be positional and
    backed by the spec.
    """
    grants = decode_pod_devices(text, family.cw)
    try:
        _check_grants_match_request(grants, containers, family)
        return grants
    except AnnotationError:
        asking = [position for position, container in enumerate(containers)
                  if _asked(container, position, family) > 0]
        held = [entry for entry in grants if entry]
        if len(held) != len(asking) or len(grants) != len(held):
            raise
        spread: list[tuple[DeviceGrant, ...]] = [() for _ in containers]
        for position, entry in zip(asking, held, strict=True):
            spread[position] = entry
        _check_grants_match_request(tuple(spread), containers, family)
        return tuple(spread)


def _with_tags(grants: PodGrants, rule: SharingRule, annotations: Mapping[str, str]) -> PodGrants:
    """The grants with what each holds under the family's sharing rule, from the pod's annotations (its class) and the
    grant's cores: the card state the rule judges, rebuilt from the pods after a restart."""
    ask = rule.ask(annotations)
    return tuple(tuple(replace(grant, tags=rule.tags(ask, grant.cores)) for grant in entry) for entry in grants)


def standing_booking(pod: Mapping[str, Any], *, catalog: DeviceCatalog = DEFAULT_CATALOG) -> PodUsage | None:
    """The live booking a pod object already carries (`pod_usage`), None when none or unreadable.

    An unreadable booking is no booking here, as in the cache (unknown usage, not a veto).
    """
    try:
        return pod_usage(pod, catalog=catalog)
    except AnnotationError:
        return None


def booked_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod's booking was written (``hami.io/bind-time``, Unix seconds), None when absent or unreadable."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(names.POD_BIND_TIME) if isinstance(annotations, Mapping) else None
    try:
        return float(str(text)) if text is not None else None
    except ValueError:
        return None


def pod_usage(pod: Mapping[str, Any], *, catalog: DeviceCatalog = DEFAULT_CATALOG) -> PodUsage | None:
    """The usage a pod holds, or None when it holds nothing.

    A pod holds devices while it carries ``hami.io/vgpu-node`` and some enabled family's ``…-devices-allocated`` (the
    families' grants are merged per container, families in common-word order) and is
    neither Succeeded nor Failed (terminating pods keep theirs until they end). A pod whose binding failed
    and that is not bound holds nothing: kube-scheduler will filter it again. Raises `AnnotationError` when
    the device annotation is garbage, the object is not pod-shaped, or the booking is not backed by what the
    pod asks for.
    """
    metadata = _map(pod.get("metadata"), "metadata")
    annotations = string_map(metadata.get("annotations"), "metadata.annotations")
    node = annotations.get(names.POD_ASSIGNED_NODE)
    texts = [(family, annotations[family.allocated_key]) for family in catalog if family.allocated_key in annotations]
    if not node or not texts:
        return None
    status = _map(pod.get("status"), "status")
    spec = _map(pod.get("spec"), "spec")
    if status.get("phase") in FINISHED_PHASES:
        return None
    if annotations.get(names.POD_BIND_PHASE) == "failed" and not spec.get("nodeName"):
        return None
    init_containers = _list(spec.get("initContainers"), "spec.initContainers")
    containers = [*init_containers, *_list(spec.get("containers"), "spec.containers")]
    uid, namespace, name = pod_key(pod)
    owner = f"{namespace}/{name}"
    parts = []
    unclaimed: Unclaimed = {}
    for family, text in texts:
        try:
            family_part = _family_grants(text, containers, family)
        except AnnotationError as error:
            raise AnnotationError(f"{family.allocated_key}: {error}") from None
        if family.partitioning is not None:  # what each partition took (Enflame's slices, NVIDIA's MIG instances)
            restored = family.partitioning.restore(family_part, annotations,
                                                   [str(container.get("name") or "") for container in containers],
                                                   owner)
            if restored.problem:
                # INFO: the fault it causes is logged as an error where the node's view is built (state.planning),
                # and the operator tools, which read pods with this function too, print warnings.
                log.info("pod %s: %s", quote(owner), restored.problem)
            family_part = restored.grants
            unclaimed.update(restored.unclaimed)
        if family.sharing is not None:  # what each grant holds under the family's sharing rule (Metax sGPU's QoS)
            family_part = _with_tags(family_part, family.sharing, annotations)
        parts.append(family_part)
    grants = merge_grants(parts, len(containers)) if len(parts) > 1 else parts[0]
    devices_text = encode_pod_devices(grants) if len(parts) > 1 else texts[0][1]
    return PodUsage(
        uid=uid,
        namespace=namespace,
        name=name,
        node=str(node),
        grants=grants,
        booking=pod_booking(grants, init_count=len(init_containers), init_finished=_init_finished(pod), owner=owner,
                            unclaimed=unclaimed),
        devices_text=devices_text,
        container_names=tuple(str(c.get("name", "")) for c in containers),
        init_count=len(init_containers),
        bind_phase=annotations.get(names.POD_BIND_PHASE, ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        priority=preemption_terms(pod)[0],
        started_at=_timestamp(status.get("startTime")),
        terminating=bool(metadata.get("deletionTimestamp")),
        labels=_labels(metadata.get("labels")),
    )


def _timestamp(value: object) -> float | None:
    """An RFC 3339 time (``status.startTime``) as Unix seconds; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _labels(value: object) -> dict[str, str]:
    """The pod's labels as strings (anything else is left out: a label a budget cannot match)."""
    if not isinstance(value, Mapping):
        return {}
    return {key: item for key, item in value.items() if isinstance(key, str) and isinstance(item, str)}
