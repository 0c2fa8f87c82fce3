"""kube-scheduler's node rules, as the operator tools need them to tell the whole truth.

kube-scheduler offers our extender only the nodes that pass its own filters, so a pod our GPU rules would
place can still stay Pending: the GPU nodes are tainted, the pod selects a pool with no room, the node is
cordoned. The extender never needs these rules (kube-scheduler applied them first), but ``explain``,
``capacity`` and the dashboard do, or they promise placements that never happen. The rules and their reasons
follow kube-scheduler v1.32's default filter plugins, in their order (a node fails on the first plugin that
refuses it, as the framework stops there): NodeUnschedulable, TaintToleration (a NotReady or unreachable
node counts as carrying the taint the node lifecycle controller puts on it), NodeAffinity (``nodeSelector``
and required node affinity) and NodeResourcesFit (cpu, memory, pod count against allocatable minus what the
node's bound pods request). Pure: node and pod objects in, reasons out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hami_web.core.limits import MAX_NUMBER_CHARS, quote
from hami_web.core.quantities import parse_quantity
from hami_web.core.reasons import ReasonGroup

# kube-scheduler v1.32's reason texts (its FailedScheduling event counts nodes per reason).
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
INSUFFICIENT = "Insufficient {}"

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
FILTER_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})  # PreferNoSchedule only scores

CPU, MEMORY, PODS = "cpu", "memory", "pods"
# Each resource in the unit kube-scheduler compares it in: cpu in millicores, memory in bytes, pods in pods.
_SCALE = {CPU: 1000, MEMORY: 1, PODS: 1}
MAX_AMOUNT = 1 << 62  # far above any node; keeps a hostile quantity from expanding into millions of digits
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class RuleInputError(ValueError):
    """A node or pod field the rules read is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class Taint:
    """``key=value:effect`` on a node."""

    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    def shown(self) -> str:
        """As kube-scheduler prints it: ``{nvidia.com/gpu: present}``."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """One entry of a pod's ``spec.tolerations``."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: empty effect = every effect, empty key with Exists = every taint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` or ``matchFields`` entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` (a node's labels, or ``{"metadata.name": name}`` for fields) satisfy it."""
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if self.operator == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One ``nodeSelectorTerms`` entry: its expressions and fields are ANDed; an empty term matches nothing."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node ``name`` with ``labels`` satisfies every requirement of the term."""
        if not self.expressions and not self.fields:
            return False
        node_fields = {"metadata.name": name}
        return (all(r.matches(labels) for r in self.expressions)
                and all(r.matches(node_fields) for r in self.fields))


@dataclass(frozen=True, slots=True)
class NodeTraits:
    """What kube-scheduler's node rules read on a node.

    ``ready`` is the Ready condition's status (``""`` when the node reports none, which is not held against
    it); ``allocatable`` holds only the resources the node reports (one it does not report is not checked).
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: str = ""
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, int] = field(default_factory=dict)

    def filter_taints(self) -> tuple[Taint, ...]:
        """The taints that keep pods off: the node's own NoSchedule/NoExecute ones, plus the one the node
        lifecycle controller puts on a NotReady (``False``) or unreachable (``Unknown``) node if it is missing."""
        taints = tuple(t for t in self.taints if t.effect in FILTER_EFFECTS)
        implied = {"False": TAINT_NOT_READY, "Unknown": TAINT_UNREACHABLE}.get(self.ready)
        if implied and not any(t.key == implied for t in taints):
            taints += (Taint(key=implied, effect=NO_SCHEDULE),)
        return taints


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """What the node rules read on a pod: tolerations, node selector, required affinity, resource requests."""

    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity_terms: tuple[SelectorTerm, ...] | None = None  # None: no required node affinity
    requests: Mapping[str, int] = field(default_factory=dict)

    def tolerates(self, taint: Taint) -> bool:
        """Whether any of the pod's tolerations tolerates ``taint``."""
        return any(toleration.tolerates(taint) for toleration in self.tolerations)


# -- reading objects -------------------------------------------------------------------------------------


def _map(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RuleInputError(f"{where} is not a map")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise RuleInputError(f"{where} is not a list")
    return value


def _text(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RuleInputError(f"{where} is not a string")
    return value


def _labels(value: object, where: str) -> dict[str, str]:
    return {str(key): _text(item, f"{where}[{key}]") for key, item in _map(value, where).items()}


@functools.lru_cache(maxsize=4096)
def _amount_cached(text: str, resource: str) -> int:
    number = parse_quantity(text)
    return _bounded(number * _SCALE.get(resource, 1), text, resource)


def _bounded(number: Decimal, text: object, resource: str) -> int:
    if not number.is_finite() or number < 0:
        raise RuleInputError(f"{resource}: {quote(text)} is not a non-negative quantity")
    if number.adjusted() > 18 or number > MAX_AMOUNT:
        raise RuleInputError(f"{resource}: {quote(text)} is over the limit of {MAX_AMOUNT}")
    return math.ceil(number)  # Kubernetes rounds a fractional millicore or byte up


def amount(value: object, resource: str) -> int:
    """A quantity in the unit the rules compare (cpu: millicores, memory: bytes, others: whole units).

    Quantities repeat across thousands of pods (``100m``, ``128Mi``), so parsed strings are remembered.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise RuleInputError(f"{resource}: {quote(value)} is not a quantity")
    if isinstance(value, str):
        if len(value) > MAX_NUMBER_CHARS:
            raise RuleInputError(f"{resource}: {quote(value)} is longer than {MAX_NUMBER_CHARS} characters")
        try:
            return _amount_cached(value, resource)
        except (ValueError, ArithmeticError) as error:
            if isinstance(error, RuleInputError):
                raise
            raise RuleInputError(f"{resource}: {quote(value)} is not a quantity") from None
    return _bounded(Decimal(value) * _SCALE.get(resource, 1), value, resource)


def read_node_traits(node: Mapping[str, Any]) -> NodeTraits:
    """The node rules' view of a Node object; `RuleInputError` names a malformed field."""
    metadata = _map(node.get("metadata"), "metadata")
    spec = _map(node.get("spec"), "spec")
    status = _map(node.get("status"), "status")
    taints = []
    for position, raw in enumerate(_list(spec.get("taints"), "spec.taints")):
        where = f"spec.taints[{position}]"
        entry = _map(raw, where)
        taints.append(Taint(key=_text(entry.get("key"), f"{where}.key"), value=_text(entry.get("value"),
                            f"{where}.value"), effect=_text(entry.get("effect"), f"{where}.effect")))
    ready = ""
    for position, raw in enumerate(_list(status.get("conditions"), "status.conditions")):
        condition = _map(raw, f"status.conditions[{position}]")
        if condition.get("type") == "Ready":
            ready = _text(condition.get("status"), f"status.conditions[{position}].status")
    allocatable = {resource: amount(value, resource)
                   for resource, value in _map(status.get("allocatable"), "status.allocatable").items()
                   if resource in _SCALE}
    return NodeTraits(name=_text(metadata.get("name"), "metadata.name"),
                      labels=_labels(metadata.get("labels"), "metadata.labels"),
                      unschedulable=spec.get("unschedulable") is True, ready=ready, taints=tuple(taints),
                      allocatable=allocatable)


def _requirements(value: object, where: str) -> tuple[Requirement, ...]:
    found = []
    for position, raw in enumerate(_list(value, where)):
        entry = _map(raw, f"{where}[{position}]")
        values = tuple(_text(v, f"{where}[{position}].values") for v in _list(entry.get("values"),
                                                                               f"{where}[{position}].values"))
        found.append(Requirement(key=_text(entry.get("key"), f"{where}[{position}].key"),
                                 operator=_text(entry.get("operator"), f"{where}[{position}].operator"),
                                 values=values))
    return tuple(found)


def _affinity_terms(spec: Mapping[str, Any]) -> tuple[SelectorTerm, ...] | None:
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    node_affinity = _map(_map(spec.get("affinity"), "spec.affinity").get("nodeAffinity"),
                         "spec.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = []
    for position, raw in enumerate(_list(_map(required, where).get("nodeSelectorTerms"),
                                         f"{where}.nodeSelectorTerms")):
        term_where = f"{where}.nodeSelectorTerms[{position}]"
        term = _map(raw, term_where)
        terms.append(SelectorTerm(expressions=_requirements(term.get("matchExpressions"),
                                                            f"{term_where}.matchExpressions"),
                                  fields=_requirements(term.get("matchFields"), f"{term_where}.matchFields")))
    return tuple(terms)


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    """A container's cpu and memory requests; a resource with a limit and no request requests its limit
    (the API server's defaulting, which objects written without it may lack)."""
    resources = _map(container.get("resources"), f"{where}.resources")
    limits = _map(resources.get("limits"), f"{where}.resources.limits")
    requests = _map(resources.get("requests"), f"{where}.resources.requests")
    asked = {}
    for resource in (CPU, MEMORY):
        value = requests.get(resource, limits.get(resource))
        if value is not None:
            asked[resource] = amount(value, resource)
    return asked


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, value in more.items():
        total[resource] = total.get(resource, 0) + value


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What a pod takes from its node as kube-scheduler counts it (cpu, memory and one pod).

    The app containers and sidecars (init containers with ``restartPolicy: Always``) run together; each other
    init container runs alone before them, with the sidecars started before it: the pod needs the larger of
    the two, per resource, plus ``spec.overhead``.
    """
    spec = _map(pod.get("spec"), "spec")
    running: dict[str, int] = {}
    for position, raw in enumerate(_list(spec.get("containers"), "spec.containers")):
        _add(running, _container_requests(_map(raw, f"spec.containers[{position}]"), f"spec.containers[{position}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for position, raw in enumerate(_list(spec.get("initContainers"), "spec.initContainers")):
        where = f"spec.initContainers[{position}]"
        container = _map(raw, where)
        asked = _container_requests(container, where)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, asked)
            continue
        for resource in asked.keys() | sidecars.keys():
            during = asked.get(resource, 0) + sidecars.get(resource, 0)
            init_peak[resource] = max(init_peak.get(resource, 0), during)
    _add(running, sidecars)
    total = {resource: max(running.get(resource, 0), init_peak.get(resource, 0))
             for resource in (CPU, MEMORY) if resource in running or resource in init_peak}
    overhead = _map(spec.get("overhead"), "spec.overhead")
    _add(total, {r: amount(v, r) for r, v in overhead.items() if r in (CPU, MEMORY)})
    total[PODS] = 1
    return total


def read_pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    """The node rules' view of a Pod object; `RuleInputError` names a malformed field."""
    spec = _map(pod.get("spec"), "spec")
    tolerations = []
    for position, raw in enumerate(_list(spec.get("tolerations"), "spec.tolerations")):
        where = f"spec.tolerations[{position}]"
        entry = _map(raw, where)
        tolerations.append(Toleration(key=_text(entry.get("key"), f"{where}.key"),
                                      operator=_text(entry.get("operator"), f"{where}.operator") or "Equal",
                                      value=_text(entry.get("value"), f"{where}.value"),
                                      effect=_text(entry.get("effect"), f"{where}.effect")))
    return PodNeeds(tolerations=tuple(tolerations), node_selector=_labels(spec.get("nodeSelector"),
                                                                          "spec.nodeSelector"),
                    affinity_terms=_affinity_terms(spec), requests=pod_requests(pod))


def pod_occupies_node(pod: Mapping[str, Any]) -> str:
    """The node whose resources a pod takes (bound and not finished), else ``""``."""
    spec = pod.get("spec")
    status = pod.get("status")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return node if isinstance(node, str) and phase not in FINISHED_PHASES else ""


# -- the rules -------------------------------------------------------------------------------------------


def untolerated_taint(needs: PodNeeds, traits: NodeTraits) -> Taint | None:
    """The first NoSchedule/NoExecute taint of the node the pod does not tolerate (kube-scheduler names one)."""
    return next((taint for taint in traits.filter_taints() if not needs.tolerates(taint)), None)


def matches_node_selection(needs: PodNeeds, traits: NodeTraits) -> bool:
    """``nodeSelector`` (every label equal) and required node affinity (any term matches)."""
    if any(traits.labels.get(key) != value for key, value in needs.node_selector.items()):
        return False
    if needs.affinity_terms is None:
        return True
    return any(term.matches(traits.name, traits.labels) for term in needs.affinity_terms)


def insufficient_resources(needs: PodNeeds, traits: NodeTraits, used: Mapping[str, int]) -> tuple[str, ...]:
    """``Too many pods``, ``Insufficient cpu``, ``Insufficient memory`` for what the node has left."""
    reasons = []
    for resource in (PODS, CPU, MEMORY):
        asked = needs.requests.get(resource, 0)
        allocatable = traits.allocatable.get(resource)
        if asked and allocatable is not None and used.get(resource, 0) + asked > allocatable:
            reasons.append(TOO_MANY_PODS if resource == PODS else INSUFFICIENT.format(resource))
    return tuple(reasons)


def node_rule_reasons(needs: PodNeeds, traits: NodeTraits, used: Mapping[str, int] | None = None
                      ) -> tuple[str, ...]:
    """Why kube-scheduler would not offer this node to the extender for the pod; empty when it would.

    The first refusing plugin decides, as in kube-scheduler: unschedulable, then taints, then node
    selection, then resources (which may give several reasons at once).
    """
    unschedulable_taint = Taint(key=TAINT_UNSCHEDULABLE, effect=NO_SCHEDULE)
    if traits.unschedulable and not needs.tolerates(unschedulable_taint):
        return (UNSCHEDULABLE,)
    taint = untolerated_taint(needs, traits)
    if taint is not None:
        return (f"node(s) had untolerated taint {taint.shown()}",)
    if not matches_node_selection(needs, traits):
        return (AFFINITY_MISMATCH,)
    return insufficient_resources(needs, traits, used or {})


def room_for(needs: PodNeeds, traits: NodeTraits, used: Mapping[str, int] | None = None) -> int | None:
    """How many more pods like this the node's cpu, memory and pod count take; None when nothing limits it."""
    used = used or {}
    room: int | None = None
    for resource, asked in needs.requests.items():
        allocatable = traits.allocatable.get(resource)
        if asked and allocatable is not None:
            left = max(allocatable - used.get(resource, 0), 0) // asked
            room = left if room is None else min(room, left)
    return room


def add_requests(used: Mapping[str, int], more: Mapping[str, int], times: int = 1) -> dict[str, int]:
    """``used`` plus ``times`` × ``more``, per resource."""
    total = dict(used)
    for resource, value in more.items():
        total[resource] = total.get(resource, 0) + value * times
    return total


@dataclass(frozen=True, slots=True)
class Screening:
    """The nodes kube-scheduler would offer the extender for a pod, and why each other node is left out."""

    offered: tuple[str, ...]
    left_out: Mapping[str, tuple[str, ...]]


def screen_nodes(needs: PodNeeds, nodes: Iterable[str], traits: Mapping[str, NodeTraits],
                 used: Mapping[str, Mapping[str, int]]) -> Screening:
    """Apply the node rules to ``nodes``; a node without traits (not read) is offered as it is."""
    offered = []
    left_out = {}
    for name in nodes:
        node = traits.get(name)
        reasons = node_rule_reasons(needs, node, used.get(name)) if node is not None else ()
        if reasons:
            left_out[name] = reasons
        else:
            offered.append(name)
    return Screening(offered=tuple(offered), left_out=left_out)


def group_rule_reasons(left_out: Mapping[str, Sequence[str]], *, examples: int = 3) -> tuple[ReasonGroup, ...]:
    """Nodes per kube-scheduler reason (a node under each of its reasons, as in FailedScheduling)."""
    nodes: dict[str, list[str]] = {}
    for name in sorted(left_out):
        for reason in left_out[name]:
            nodes.setdefault(reason, []).append(name)
    order = sorted(nodes, key=lambda reason: (-len(nodes[reason]), reason))
    return tuple(ReasonGroup(cause=reason, nodes=len(nodes[reason]), gpus=0, examples=tuple(nodes[reason][:examples]))
                 for reason in order)


def is_rule_reason(cause: str) -> bool:
    """Whether a grouped cause is one of kube-scheduler's node-rule reasons (not a GPU reason of ours)."""
    return cause.startswith(("node(s) ", "Insufficient ")) or cause == TOO_MANY_PODS


def merge_groups(*groups: Iterable[ReasonGroup]) -> list[ReasonGroup]:
    """Node-rule and GPU reason groups in one table: most nodes first, then most GPUs, then by cause."""
    merged = [group for part in groups for group in part]
    return sorted(merged, key=lambda group: (-group.nodes, -group.gpus, group.cause))
