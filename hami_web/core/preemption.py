"""Device-aware preemption: which lower-priority pods to remove so that a pod's devices fit
(docs/preemption.md#preemption).

kube-scheduler's own preemption (DefaultPreemption's PostFilter) removes lower-priority pods from a node and re-runs
only its in-tree filters; device resources are ``ignoredByScheduler`` (only the extender knows slices), so in-tree the
pod fits with every victim put back and the node yields no victim. Only the extender knows which pods hold which
device slices, so it chooses the victims itself, by kube-scheduler's rules (v1.32,
``pkg/scheduler/framework/plugins/defaultpreemption`` and ``pkg/scheduler/framework/preemption``), the fit being ours:

- per node (`select_victims`, ``SelectVictimsOnNode``): remove every device holder of strictly lower priority; if
  the pod still does not fit, the node is no candidate; else put them back one by one, PDB-violating ones first
  (``filterPodsWithPDBViolation``), each group by importance (``MoreImportantPod``: priority, then earlier start),
  keeping back each one whose return stops the pod fitting; those kept back are the victims;
- among nodes (`pick_node`, ``pickOneNodeForPreemption``): a node needing no victim at once, else fewest PDB
  violations, lowest highest-victim priority, smallest sum of priorities, fewest victims, latest start among the
  highest-priority victims, then the first in order;
- how many nodes are tried (``calculateNumCandidates``): until max(10 %, 100) of the nodes are candidates.

A pod already terminating (victim of an earlier preemption, or any pod being deleted) counts as gone: its devices are
free for the preemptor and it is never chosen again; a node where the pod fits once such pods are gone needs no
victim (the pod waits for them). A victim in the preemptor's namespace gives its namespace quota back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hami_web.core.families import DeviceCatalog
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import PodGrants
from hami_web.core.noderules import Requirement
from hami_web.core.options import PodOptions
from hami_web.core.quota import NamespaceQuota, PodQuota
from hami_web.core.requests import PodRequest
from hami_web.core.usage import DeviceUsage, NodeView, trial_view

# kube-scheduler's DefaultPreemptionArgs defaults: minCandidateNodesPercentage, minCandidateNodesAbsolute.
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100
# kube-scheduler offsets each priority by MaxInt32 + 1 before summing, so that negative priorities sum in order.
_PRIORITY_OFFSET = 2**31
NO_VICTIMS = "no pod of lower priority holds devices here"
PREEMPT_NEVER = "Never"


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod holding devices on a node, as preemption judges it."""

    uid: str
    namespace: str
    name: str
    priority: int
    booking: Mapping[str, DeviceUsage]
    started_at: float | None = None  # status.startTime (Unix seconds); None: not started, which is as late as it gets
    terminating: bool = False  # deletionTimestamp set: already going away
    labels: Mapping[str, str] = field(default_factory=dict)
    quota_use: Mapping[str, int] = field(default_factory=dict)  # what it counts against its namespace's quota

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A PodDisruptionBudget's ``spec.selector``: matchLabels and matchExpressions, ANDed."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every term; an empty selector matches nothing (``filterPodsWithPDBViolation``:
        "A PDB with a nil or empty selector matches nothing")."""
        if not self.match_labels and not self.expressions:
            return False
        return all(labels.get(key) == value for key, value in self.match_labels.items()) \
            and all(requirement.matches(labels) for requirement in self.expressions)


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """What preemption reads of a PodDisruptionBudget: its selector (None: unreadable, matches nothing) and status."""

    namespace: str
    name: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()


def parse_disruption_budget(obj: Mapping[str, Any]) -> DisruptionBudget:
    """Read a policy/v1 PodDisruptionBudget; never raises. A selector that does not parse matches nothing, as in
    ``filterPodsWithPDBViolation`` ("This object has an invalid selector, it does not match the pod"); a missing or
    unreadable ``status.disruptionsAllowed`` is 0 (the disruption controller has not judged it yet)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    status = obj.get("status") if isinstance(obj, Mapping) else None
    status = status if isinstance(status, Mapping) else {}
    allowed = status.get("disruptionsAllowed")
    disrupted = status.get("disruptedPods")
    return DisruptionBudget(
        namespace=str(metadata.get("namespace") or ""), name=str(metadata.get("name") or ""),
        selector=_label_selector(spec.get("selector") if isinstance(spec, Mapping) else None),
        disruptions_allowed=allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
        disrupted_pods=frozenset(str(name) for name in disrupted) if isinstance(disrupted, Mapping) else frozenset())


def _label_selector(value: object) -> LabelSelector | None:
    if not isinstance(value, Mapping):
        return None
    labels = value.get("matchLabels") or {}
    expressions = value.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not isinstance(expressions, list):
        return None
    requirements = []
    for item in expressions:
        if not isinstance(item, Mapping) or item.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return None
        values = item.get("values") or []
        if not isinstance(values, list):
            return None
        requirements.append(Requirement(str(item.get("key") or ""), str(item["operator"]),
                                        tuple(str(v) for v in values)))
    return LabelSelector(match_labels={str(k): str(v) for k, v in labels.items()}, expressions=tuple(requirements))


@dataclass(frozen=True, slots=True)
class Preemptor:
    """The pod that does not fit: its ask, options, priority and namespace's quota (None: no limits)."""

    uid: str
    namespace: str
    name: str
    priority: int
    request: PodRequest
    options: PodOptions
    quota: NamespaceQuota | None = None


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """One candidate node: the victims to delete (most important first), how many of them violate a PDB, the
    terminating pods the preemptor waits for there, and the devices it gets once they are all gone."""

    node: str
    victims: tuple[Holder, ...]
    pdb_violations: int
    waiting_for: tuple[Holder, ...]
    grants: PodGrants


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """The chosen node and its victims, and why each other node tried was no candidate."""

    chosen: NodeVictims
    reasons: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class NoPreemption:
    """No node can take the pod even after removing every lower-priority device holder; a reason per node tried."""

    reasons: Mapping[str, str]


def preemption_terms(pod: Mapping[str, Any]) -> tuple[int, bool]:
    """A pod's priority (``corev1helpers.PodPriority``: ``spec.priority``, 0 when unset or unreadable) and whether it
    may preempt (``preemptionPolicy`` is not ``Never``)."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    priority = spec.get("priority")
    return (priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
            spec.get("preemptionPolicy") != PREEMPT_NEVER)


def more_important(first: Holder, second: Holder) -> bool:
    """kube-scheduler's ``MoreImportantPod``: higher priority, or equal priority and started earlier."""
    if first.priority != second.priority:
        return first.priority > second.priority
    return _start_key(first) < _start_key(second)


def _start_key(holder: Holder) -> float:
    return float("inf") if holder.started_at is None else holder.started_at


def _importance_order(holders: Iterable[Holder]) -> list[Holder]:
    return sorted(holders, key=lambda holder: (-holder.priority, _start_key(holder)))


def split_by_budget(holders: Sequence[Holder], budgets: Sequence[DisruptionBudget]
                    ) -> tuple[list[Holder], list[Holder]]:
    """``filterPodsWithPDBViolation``: the holders whose removal would take some matching budget below zero (each
    match spends one of its ``disruptionsAllowed``, in the given order; a pod already in its ``disruptedPods`` spends
    none), and the others; both in the order given."""
    allowed = [budget.disruptions_allowed for budget in budgets]
    violating: list[Holder] = []
    other: list[Holder] = []
    for holder in holders:
        violated = False
        if holder.labels:
            for position, budget in enumerate(budgets):
                if budget.namespace != holder.namespace or budget.selector is None \
                        or not budget.selector.matches(holder.labels) or holder.name in budget.disrupted_pods:
                    continue
                allowed[position] -= 1
                if allowed[position] < 0:
                    violated = True
        (violating if violated else other).append(holder)
    return violating, other


class _Trial:
    """One node's usage with some holders taken off, and the pod's fit on it (the namespace quota they free
    included)."""

    __slots__ = ("_catalog", "_freed", "_positions", "_preemptor", "_usage", "_view")

    def __init__(self, view: NodeView, preemptor: Preemptor, catalog: DeviceCatalog) -> None:
        self._view = view
        self._preemptor = preemptor
        self._catalog = catalog
        self._usage = list(view.usage)
        self._positions = {device.uuid: position for position, device in enumerate(view.inventory.devices)}
        self._freed: dict[str, int] = {}

    def remove(self, holder: Holder) -> None:
        """Take ``holder``'s devices (and, in the preemptor's namespace, its quota use) off the node."""
        self._shift(holder, -1)

    def restore(self, holder: Holder) -> None:
        """Put ``holder`` back."""
        self._shift(holder, 1)

    def _shift(self, holder: Holder, sign: int) -> None:
        for uuid, held in holder.booking.items():
            position = self._positions.get(uuid)
            if position is not None:
                before = self._usage[position]
                self._usage[position] = before - held if sign < 0 else before + held
        if holder.namespace == self._preemptor.namespace:
            for resource, amount in holder.quota_use.items():
                self._freed[resource] = self._freed.get(resource, 0) - sign * amount

    def fit(self) -> PodFit | FitFailure:
        """The preemptor's fit on the node as it stands in this trial."""
        return fit_pod(self._preemptor.request, trial_view(self._view, tuple(self._usage)), self._preemptor.options,
                       self._quota())

    def _quota(self) -> PodQuota | None:
        quota = self._preemptor.quota
        if quota is None or not quota.limits:
            return None
        used = dict(quota.used)
        for resource, amount in self._freed.items():
            used[resource] = used.get(resource, 0) - amount
        return NamespaceQuota(quota.namespace, quota.limits, used).pod_quota(self._preemptor.request, self._catalog)


def select_victims(preemptor: Preemptor, view: NodeView, holders: Sequence[Holder],
                   budgets: Sequence[DisruptionBudget], catalog: DeviceCatalog) -> NodeVictims | str:
    """The victims on one node (``SelectVictimsOnNode``), or why the node is no candidate.

    ``holders`` are the pods holding devices on the node (the preemptor itself left out); terminating ones count as
    gone. Only pods of strictly lower priority may be victims.
    """
    trial = _Trial(view, preemptor, catalog)
    waiting = tuple(holder for holder in holders if holder.terminating)
    for holder in waiting:
        trial.remove(holder)
    if waiting:
        fitted = trial.fit()
        if isinstance(fitted, PodFit):
            return NodeVictims(node=view.name, victims=(), pdb_violations=0, waiting_for=waiting,
                               grants=fitted.grants)
    potential = [holder for holder in holders if not holder.terminating and holder.priority < preemptor.priority]
    if not potential:
        return NO_VICTIMS
    for holder in potential:
        trial.remove(holder)
    fitted = trial.fit()
    if isinstance(fitted, FitFailure):
        return f"{fitted.summary()} even without its lower-priority pods ({len(potential)})"
    violating, other = split_by_budget(_importance_order(potential), budgets)
    victims: list[Holder] = []
    violations = 0
    grants = fitted.grants
    for group, counts in ((violating, True), (other, False)):
        for holder in group:
            trial.restore(holder)
            reprieved = trial.fit()
            if isinstance(reprieved, PodFit):
                grants = reprieved.grants
                continue
            trial.remove(holder)
            victims.append(holder)
            violations += counts
    if not victims:  # every lower-priority pod could stay: the fit without victims (the caller found none) disagrees
        return NO_VICTIMS
    return NodeVictims(node=view.name, victims=tuple(_importance_order(victims)), pdb_violations=violations,
                       waiting_for=waiting, grants=grants)


def extend_victims(preemptor: Preemptor, view: NodeView, holders: Sequence[Holder], proposed: Collection[str],
                   budgets: Sequence[DisruptionBudget], catalog: DeviceCatalog) -> NodeVictims | str:
    """The extender's ``ProcessPreemption`` for one node: kube-scheduler proposes the pods ``proposed`` (uids) as
    victims for what it sees (CPU, memory); the pod's devices must fit once they are gone. Those pods count as gone
    here; the result's victims are the device holders that must go too (none when the proposed ones free enough), or
    why no choice of lower-priority device holders makes the devices fit (the node is then dropped)."""
    gone = [replace(holder, terminating=True) if holder.uid in proposed and not holder.terminating else holder
            for holder in holders]
    result = select_victims(preemptor, view, gone, budgets, catalog)
    if isinstance(result, str) and result == NO_VICTIMS:
        trial = _Trial(view, preemptor, catalog)
        for holder in gone:
            if holder.terminating:
                trial.remove(holder)
        fitted = trial.fit()
        if isinstance(fitted, PodFit):
            return NodeVictims(node=view.name, victims=(), pdb_violations=0,
                               waiting_for=tuple(holder for holder in gone if holder.terminating),
                               grants=fitted.grants)
        return f"{fitted.summary()}, and {NO_VICTIMS}"
    return result


def _latest_earliest_start(candidate: NodeVictims) -> float:
    """``GetEarliestPodStartTime`` of the node's victims of the highest priority (negated: the latest wins)."""
    top = candidate.victims[0].priority
    return -min(_start_key(victim) for victim in candidate.victims if victim.priority == top)


def pick_node(candidates: Sequence[NodeVictims]) -> NodeVictims:
    """``pickOneNodeForPreemption``: a node needing no victim first; else the smallest of (PDB violations, highest
    victim priority, sum of priorities, number of victims, minus the earliest start among its highest-priority
    victims); ties to the first in order."""
    for candidate in candidates:
        if not candidate.victims:
            return candidate
    return min(candidates, key=lambda candidate: (
        candidate.pdb_violations,
        candidate.victims[0].priority,
        sum(victim.priority + _PRIORITY_OFFSET for victim in candidate.victims),
        len(candidate.victims),
        _latest_earliest_start(candidate)))


def candidate_count(nodes: int) -> int:
    """``calculateNumCandidates``: how many candidate nodes the dry run looks for before it stops."""
    return min(nodes, max(nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE))


def plan_preemption(preemptor: Preemptor, nodes: Sequence[str], views: Mapping[str, NodeView],
                    holders: Mapping[str, Sequence[Holder]], budgets: Sequence[DisruptionBudget],
                    catalog: DeviceCatalog) -> PreemptionPlan | NoPreemption:
    """Choose the node and victims for ``preemptor`` among ``nodes`` (kube-scheduler's order; those the cache does
    not know as device nodes are skipped), each node's ``holders`` given by name.

    The dry run stops once `candidate_count` nodes are candidates, as kube-scheduler's does (``DryRunPreemption``; it
    starts at a random offset, this one at the first node, so a decision can be replayed), or at once on a node that
    needs no victim.
    """
    wanted = candidate_count(len(nodes))
    found: list[NodeVictims] = []
    reasons: dict[str, str] = {}
    for name in dict.fromkeys(nodes):
        view = views.get(name)
        if view is None:
            continue
        on_node = [holder for holder in holders.get(name, ()) if holder.uid != preemptor.uid]
        result = select_victims(preemptor, view, on_node, budgets, catalog)
        if isinstance(result, str):
            reasons[name] = result
            continue
        found.append(result)
        if not result.victims or len(found) >= wanted:
            break
    if not found:
        return NoPreemption(reasons=reasons)
    return PreemptionPlan(chosen=pick_node(found), reasons=reasons)


__all__ = ["MIN_CANDIDATE_NODES_ABSOLUTE", "MIN_CANDIDATE_NODES_PERCENTAGE", "NO_VICTIMS", "PREEMPT_NEVER",
           "DisruptionBudget", "Holder", "LabelSelector", "NoPreemption", "NodeVictims", "PreemptionPlan", "Preemptor",
           "candidate_count", "extend_victims", "more_important", "parse_disruption_budget", "pick_node",
           "plan_preemption", "preemption_terms", "select_victims", "split_by_budget"]
