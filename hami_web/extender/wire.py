"""kube-scheduler extender wire format (``k8s.io/kube-scheduler/extender/v1``): decoding the bodies into typed
requests, encoding the extender's outcomes into answers.

The Go structs carry no JSON tags, so field names are Go names (``Pod``, ``NodeNames``); Go's decoder matches
them case-insensitively, and so do we.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict, assert_never

from hami_web.core.limits import json_type_name, quote
from hami_web.core.objectnames import label_problem, subdomain_problem
from hami_web.extender.outcomes import (
    BindOutcome,
    BindRefused,
    BindRequest,
    FilterOutcome,
    FilterRefused,
    FilterRequest,
    Passthrough,
    Placed,
    PodRef,
    PreemptOutcome,
    PreemptRefused,
    PreemptRequest,
    UnreadableArgs,
    Unschedulable,
)


class WireError(ValueError):
    """The request body is not the shape kube-scheduler sends; the message says what is wrong."""


class ExtenderFilterResult(TypedDict, total=False):
    """What `/filter` answers."""

    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class ExtenderPreemptionResult(TypedDict, total=False):
    """What ``/preempt`` answers: kube-scheduler reads only ``NodeNameToMetaVictims`` (victims by UID)."""

    NodeNameToMetaVictims: dict[str, dict[str, Any]]
    Error: str


class ExtenderBindingResult(TypedDict):
    """What `/bind` answers; an empty ``Error`` is success."""

    Error: str


def field(body: Mapping[str, Any], name: str) -> Any:
    """``body[name]`` matched case-insensitively, as Go's encoding/json does; None when absent."""
    if name in body:
        return body[name]
    lowered = name.lower()
    for key, value in body.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def require_object(body: object, what: str) -> Mapping[str, Any]:
    """``body`` as a JSON object, or `WireError` naming ``what``."""
    if not isinstance(body, Mapping):
        raise WireError(f"{what} must be a JSON object, got {type(body).__name__}")
    return body


def filter_candidates(args: Mapping[str, Any]) -> tuple[list[str], dict[str, Mapping[str, Any]] | None]:
    """Candidate node names, and the node objects by name when kube-scheduler sent full ``Nodes``."""
    node_names = field(args, "NodeNames")
    if node_names is not None:
        if not isinstance(node_names, list) or not all(isinstance(n, str) for n in node_names):
            raise WireError("NodeNames must be a list of strings")
        return list(node_names), None
    nodes = field(args, "Nodes")
    if nodes is None:
        raise WireError("ExtenderArgs has neither NodeNames nor Nodes")
    items = field(require_object(nodes, "Nodes"), "items") or []
    if not isinstance(items, list):
        raise WireError("Nodes.items must be a list")
    by_name: dict[str, Mapping[str, Any]] = {}
    for position, node in enumerate(items):
        metadata = field(require_object(node, f"Nodes.items[{position}]"), "metadata") or {}
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise WireError(f"Nodes.items[{position}] has no metadata.name")
        by_name[name] = node
    return list(by_name), by_name


def filter_pod(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod of an ExtenderArgs, checked for the fields we need."""
    pod = field(args, "Pod")
    if pod is None:
        raise WireError("ExtenderArgs has no Pod")
    pod = require_object(pod, "Pod")
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping) or not metadata.get("name") or not metadata.get("uid"):
        raise WireError("Pod has no metadata.name or metadata.uid")
    for key in ("name", "uid", "namespace"):
        if metadata.get(key) is not None and not isinstance(metadata.get(key), str):
            raise WireError(f"Pod metadata.{key} must be a string")
    _check_name("Pod metadata.name", metadata["name"], subdomain_problem)
    if metadata.get("namespace"):
        _check_name("Pod metadata.namespace", metadata["namespace"], label_problem)
    for key in ("annotations", "labels"):
        values = metadata.get(key)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise WireError(f"Pod metadata.{key} must be a map of strings, got {json_type_name(values)}")
        for name, value in values.items():
            if not isinstance(value, str):
                raise WireError(f"Pod metadata.{key}[{quote(name)}] must be a string, got {json_type_name(value)}")
    if not isinstance(pod.get("spec"), Mapping):
        raise WireError("Pod has no spec")
    return pod


def binding_target(args: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """``(namespace, name, uid, node)`` of an ExtenderBindingArgs."""
    values = []
    for key in ("PodNamespace", "PodName", "PodUID", "Node"):
        value = field(args, key)
        if not isinstance(value, str) or not value.strip():
            raise WireError(f"ExtenderBindingArgs.{key} is missing, blank or not a string")
        values.append(value)
    _check_name("ExtenderBindingArgs.PodNamespace", values[0], label_problem)
    _check_name("ExtenderBindingArgs.PodName", values[1], subdomain_problem)
    return values[0], values[1], values[2], values[3]


def _check_name(what: str, value: str, problem_of: Callable[[str], str]) -> None:
    """`WireError` naming ``what`` when ``value`` breaks its Kubernetes name rule (no such pod can exist)."""
    problem = problem_of(value)
    if problem:
        raise WireError(f"{what} {quote(value)} is not a valid Kubernetes name: {problem}")


# -- decode: a body into a typed request -----------------------------------------------------------


def decode_filter_args(body: object) -> FilterRequest | UnreadableArgs:
    """An ExtenderArgs body as a `FilterRequest`, or `UnreadableArgs` saying what is wrong with it."""
    try:
        args = require_object(body, "ExtenderArgs")
        pod = filter_pod(args)
        candidates, node_objects = filter_candidates(args)
    except WireError as error:
        return UnreadableArgs(error=f"bad ExtenderArgs: {error}", pod_key=_named_pod(body))
    metadata = pod["metadata"]
    ref = PodRef(namespace=str(metadata.get("namespace") or "default"), name=str(metadata["name"]),
                 uid=str(metadata["uid"]))
    return FilterRequest(pod=pod, ref=ref, candidates=tuple(candidates), node_objects=node_objects)


def decode_binding_args(body: object) -> BindRequest | UnreadableArgs:
    """An ExtenderBindingArgs body as a `BindRequest`, or `UnreadableArgs` saying what is wrong with it."""
    try:
        namespace, name, uid, node = binding_target(require_object(body, "ExtenderBindingArgs"))
    except WireError as error:
        args: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
        return UnreadableArgs(error=f"bad ExtenderBindingArgs: {error}",
                              pod_key=f"{field(args, 'PodNamespace') or 'default'}/{field(args, 'PodName') or '?'}")
    return BindRequest(ref=PodRef(namespace=namespace, name=name, uid=uid), node=node)


def decode_preemption_args(body: object) -> PreemptRequest | UnreadableArgs:
    """An ExtenderPreemptionArgs body (``NodeNameToMetaVictims`` with ``nodeCacheCapable``, else
    ``NodeNameToVictims`` with whole pods) as a `PreemptRequest`, or `UnreadableArgs` saying what is wrong."""
    try:
        args = require_object(body, "ExtenderPreemptionArgs")
        pod = filter_pod(args)
        meta = field(args, "NodeNameToMetaVictims")
        victims = meta if meta is not None else field(args, "NodeNameToVictims")
        proposals = _proposals(require_object(victims or {}, "NodeNameToMetaVictims"), by_uid=meta is not None)
    except WireError as error:
        return UnreadableArgs(error=f"bad ExtenderPreemptionArgs: {error}", pod_key=_named_pod(body))
    metadata = pod["metadata"]
    ref = PodRef(namespace=str(metadata.get("namespace") or "default"), name=str(metadata["name"]),
                 uid=str(metadata["uid"]))
    return PreemptRequest(pod=pod, ref=ref, proposals=proposals)


def _proposals(victims: Mapping[str, Any], *, by_uid: bool) -> dict[str, tuple[tuple[str, ...], int]]:
    proposals = {}
    for node, entry in victims.items():
        entry = require_object(entry, f"victims of node {quote(node)}")
        pods = field(entry, "Pods") or []
        if not isinstance(pods, list):
            raise WireError(f"victims of node {quote(node)}: Pods must be a list")
        uids = []
        for position, victim in enumerate(pods):
            victim = require_object(victim, f"victims of node {quote(node)}: Pods[{position}]")
            uid = field(victim, "UID") if by_uid else (field(victim, "metadata") or {}).get("uid")
            if not isinstance(uid, str) or not uid:
                raise WireError(f"victims of node {quote(node)}: Pods[{position}] has no UID")
            uids.append(uid)
        violations = field(entry, "NumPDBViolations") or 0
        if not isinstance(violations, int) or isinstance(violations, bool):
            raise WireError(f"victims of node {quote(node)}: NumPDBViolations must be an integer")
        proposals[str(node)] = (tuple(uids), violations)
    return proposals


def _named_pod(body: object) -> str:
    """``namespace/name`` of the pod an unreadable ExtenderArgs names, as far as it does."""
    pod = field(body, "Pod") if isinstance(body, Mapping) else None
    metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(metadata, Mapping):
        metadata = {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '?'}"


# -- encode: an outcome into the answer ------------------------------------------------------------


def encode_filter_result(outcome: FilterOutcome) -> ExtenderFilterResult:
    """The ExtenderFilterResult of a filter's outcome, in the form (``NodeNames`` or ``Nodes``) it was asked in."""
    if isinstance(outcome, FilterRefused):
        return {"NodeNames": None, "FailedNodes": {}, "Error": outcome.message}
    if isinstance(outcome, Placed):
        return _answer(outcome.request, [outcome.placement.node], failed={})
    if isinstance(outcome, Unschedulable):
        return _answer(outcome.request, [], failed=dict(outcome.reasons))
    if isinstance(outcome, Passthrough):
        return _answer(outcome.request, list(outcome.request.candidates), failed={})
    assert_never(outcome)


def encode_preemption_result(outcome: PreemptOutcome) -> ExtenderPreemptionResult:
    """The ExtenderPreemptionResult: victims by UID per node kept (kube-scheduler drops the nodes left out)."""
    if isinstance(outcome, PreemptRefused):
        return {"NodeNameToMetaVictims": {}, "Error": outcome.message}
    return {"NodeNameToMetaVictims": {node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
                                      for node, (uids, violations) in outcome.nodes.items()}, "Error": ""}


def encode_binding_result(outcome: BindOutcome) -> ExtenderBindingResult:
    """The ExtenderBindingResult of a bind's outcome: an empty ``Error`` when bound."""
    return {"Error": outcome.message if isinstance(outcome, BindRefused) else ""}


def _answer(request: FilterRequest, chosen: list[str], failed: dict[str, str]) -> ExtenderFilterResult:
    if request.node_objects is None:
        return {"NodeNames": chosen, "FailedNodes": failed, "Error": ""}
    items = [request.node_objects[node] for node in chosen]
    return {"Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items},
            "NodeNames": None, "FailedNodes": failed, "Error": ""}
