"""Device-aware preemption, the pure decision (docs/preemption.md#preemption), against kube-scheduler v1.32's rules.

Covers, per node (``SelectVictimsOnNode`` in ``pkg/scheduler/framework/plugins/defaultpreemption``): the minimal
victims, lowest priority first (every lower-priority holder removed, then put back by importance while the pod still
fits: ``MoreImportantPod``, priority then earlier start); never a pod of equal or higher priority; a node where the pod
does not fit even without every lower-priority pod is no candidate; PDB-violating pods put back first
(``filterPodsWithPDBViolation``: matching budgets spend ``disruptionsAllowed`` in importance order, a pod in
``disruptedPods`` spends nothing, an empty selector matches nothing, other namespaces never match) and the violations
counted; a terminating pod counts as gone and is never chosen again (a node where the pod fits once such pods are gone
needs no victim); a victim in the preemptor's namespace gives its quota back, one elsewhere does not; dynamic MIG
instances; every family (Hygon DCU, Cambricon MLU, Iluvatar, Ascend, NVIDIA). Among nodes (``pickOneNodeForPreemption``
in ``pkg/scheduler/framework/preemption``): a node with no victim at once, then fewest PDB violations, lowest
highest-victim priority, smallest priority sum, fewest victims, latest start among the highest-priority victims, first
in order. The dry run's size (``calculateNumCandidates``: 10 %, at least 100) and its early stop; reasons for the nodes
that are no candidates; reading a pod's priority and ``preemptionPolicy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from hami_web.core.devices import Device, NodeInventory, decode_register
from hami_web.core.families import DeviceCatalog, build_catalog
from hami_web.core.fit import PodFit, fit_pod
from hami_web.core.noderules import Requirement
from hami_web.core.options import PodOptions
from hami_web.core.preemption import (
    NO_VICTIMS,
    DisruptionBudget,
    Holder,
    LabelSelector,
    NodeVictims,
    NoPreemption,
    PreemptionPlan,
    Preemptor,
    candidate_count,
    extend_victims,
    parse_disruption_budget,
    pick_node,
    plan_preemption,
    preemption_terms,
    select_victims,
    split_by_budget,
)
from hami_web.core.quota import NamespaceQuota
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView, build_node_view, pod_booking, sum_bookings
from tests.core.builders import a100_mig_register, gpu

CATALOG = build_catalog(enable=("iluvatar", "ascend"))
OPTIONS = PodOptions(node_policy="binpack", gpu_policy="binpack")


def request(memory_mib: int, *, count: int = 1, family: str = "NVIDIA", cores: int = 0) -> PodRequest:
    return PodRequest(containers=(ContainerRequest(name="main", init=False, count=count, memory_mib=memory_mib,
                                                   cores=cores, family=family),))


def fill(name: str, devices: Sequence[Device], pods: Sequence[tuple[str, int, PodRequest]], *,
         started: Mapping[str, float] | None = None, terminating: Sequence[str] = (), namespace: str = "low",
         labels: Mapping[str, Mapping[str, str]] | None = None) -> tuple[NodeView, list[Holder]]:
    """A node whose devices are filled by ``pods`` (name, priority, ask), each placed by the fit in turn, and its
    holders."""
    inventory = NodeInventory(name=name, devices=tuple(devices), partitioning=CATALOG.partitionings())
    view = build_node_view(inventory, {})
    holders: list[Holder] = []
    for pod_name, priority, ask in pods:
        fitted = fit_pod(ask, view, OPTIONS)
        assert isinstance(fitted, PodFit), f"{pod_name} does not fit: {fitted}"
        booking = pod_booking(fitted.grants, init_count=0, owner=f"{namespace}/{pod_name}")
        holders.append(Holder(uid=f"uid-{pod_name}", namespace=namespace, name=pod_name, priority=priority,
                              booking=booking, started_at=(started or {}).get(pod_name, 100.0),
                              terminating=pod_name in terminating, labels=(labels or {}).get(pod_name, {}),
                              quota_use={"nvidia.com/gpumem": sum(used.memory_mib for used in booking.values())}))
        view = build_node_view(inventory, sum_bookings(holder.booking for holder in holders))
    return view, holders


def preemptor(memory_mib: int, priority: int = 100, *, count: int = 1, family: str = "NVIDIA", namespace: str = "high",
              quota: NamespaceQuota | None = None) -> Preemptor:
    return Preemptor(uid="uid-preemptor", namespace=namespace, name="preemptor", priority=priority,
                     request=request(memory_mib, count=count, family=family), options=OPTIONS, quota=quota)


def victims_of(result: NodeVictims | str) -> tuple[str, ...] | str:
    return result if isinstance(result, str) else tuple(victim.name for victim in result.victims)


ONE_GPU = [gpu(0, memory_mib=16000)]
QUARTERS = [("p1", 1, request(4000)), ("p2", 2, request(4000)), ("p3", 3, request(4000)), ("p4", 4, request(4000))]


@pytest.mark.parametrize(("pods", "ask", "priority", "victims"), [
    pytest.param(QUARTERS, 8000, 100, ("p2", "p1"), id="minimal-victims-lowest-priority-first"),
    pytest.param(QUARTERS, 16000, 100, ("p4", "p3", "p2", "p1"), id="all-of-them-most-important-first"),
    pytest.param(QUARTERS, 8000, 3, ("p2", "p1"), id="only-strictly-lower-priority-are-potential-victims"),
    pytest.param(QUARTERS, 12000, 3, "1/1 CardInsufficientMemory even without its lower-priority pods (2)",
                 id="no-fit-even-without-every-lower-priority-pod"),
    pytest.param([("equal", 100, request(16000))], 8000, 100, NO_VICTIMS, id="never-equal-priority"),
    pytest.param([("higher", 200, request(16000))], 8000, 100, NO_VICTIMS, id="never-higher-priority"),
    pytest.param([("low", 1, request(8000)), ("high", 200, request(8000))], 8000, 100, ("low",),
                 id="the-lower-one-of-a-mixed-node"),
])
def test_victims_on_one_node(pods: list[tuple[str, int, PodRequest]], ask: int, priority: int,
                             victims: tuple[str, ...] | str) -> None:
    """``SelectVictimsOnNode``: remove every pod with ``PodPriority(p) < PodPriority(preemptor)``, check the fit
    (else the node's own reason), reprieve from the highest priority down while the pod still fits."""
    view, holders = fill("n1", ONE_GPU, pods)
    assert victims_of(select_victims(preemptor(ask, priority), view, holders, [], CATALOG)) == victims


def test_equal_priority_the_later_started_pod_goes() -> None:
    """``MoreImportantPod``: at equal priority the earlier start is more important, so it is reprieved first."""
    view, holders = fill("n1", ONE_GPU, [("new", 1, request(8000)), ("old", 1, request(8000))],
                         started={"new": 200.0, "old": 100.0})
    assert victims_of(select_victims(preemptor(8000), view, holders, [], CATALOG)) == ("new",)


def test_a_pod_not_started_yet_counts_as_the_latest() -> None:
    """``GetPodStartTime``: a pod without ``status.startTime`` counts as started now, after every started one."""
    view, holders = fill("n1", ONE_GPU, [("pending", 1, request(8000)), ("old", 1, request(8000))])
    holders = [Holder(**{**{slot: getattr(h, slot) for slot in Holder.__slots__},
                         "started_at": None if h.name == "pending" else 5.0}) for h in holders]
    assert victims_of(select_victims(preemptor(8000), view, holders, [], CATALOG)) == ("pending",)


def budget(allowed: int, *, match: Mapping[str, str] | None = None, namespace: str = "low",
           disrupted: frozenset[str] = frozenset(), expressions: tuple[Requirement, ...] = ()) -> DisruptionBudget:
    selector = LabelSelector(match_labels=match or {}, expressions=expressions)
    return DisruptionBudget(namespace=namespace, name="pdb", selector=selector, disruptions_allowed=allowed,
                            disrupted_pods=disrupted)


TWO_HALVES = [("guarded", 1, request(8000)), ("free", 2, request(8000))]
GUARD = {"guarded": {"app": "db"}}


@pytest.mark.parametrize(("budgets", "victims", "violations"), [
    pytest.param([], ("guarded",), 0, id="no-budget-lowest-priority-goes"),
    pytest.param([budget(0, match={"app": "db"})], ("free",), 0, id="violating-pod-reprieved-first"),
    pytest.param([budget(1, match={"app": "db"})], ("guarded",), 0, id="budget-with-room-is-no-violation"),
    pytest.param([budget(0, match={"app": "db"}, disrupted=frozenset({"guarded"}))], ("guarded",), 0,
                 id="pod-in-disruptedPods-spends-nothing"),
    pytest.param([budget(0)], ("guarded",), 0, id="empty-selector-matches-nothing"),
    pytest.param([budget(0, match={"app": "db"}, namespace="other")], ("guarded",), 0,
                 id="other-namespace-never-matches"),
    pytest.param([budget(0, expressions=(Requirement("app", "In", ("db", "cache")),))], ("free",), 0,
                 id="match-expressions"),
])
def test_disruption_budgets(budgets: list[DisruptionBudget], victims: tuple[str, ...], violations: int) -> None:
    """``filterPodsWithPDBViolation`` then the reprieve of the violating group before the other one."""
    view, holders = fill("n1", ONE_GPU, TWO_HALVES, labels=GUARD)
    result = select_victims(preemptor(8000), view, holders, budgets, CATALOG)
    assert isinstance(result, NodeVictims)
    assert (victims_of(result), result.pdb_violations) == (victims, violations)


def test_violations_are_counted_when_the_guarded_pods_must_go() -> None:
    """A victim that takes a budget below zero counts as one violation (``numViolatingVictim``)."""
    view, holders = fill("n1", ONE_GPU, TWO_HALVES, labels={"guarded": {"app": "db"}, "free": {"app": "db"}})
    result = select_victims(preemptor(16000), view, holders, [budget(1, match={"app": "db"})], CATALOG)
    assert isinstance(result, NodeVictims)
    assert (victims_of(result), result.pdb_violations) == (("free", "guarded"), 1)


def test_split_by_budget_spends_the_allowance_in_order() -> None:
    """Each matching pod spends one disruption; the pods after the allowance is spent violate it."""
    pods = [Holder(uid=n, namespace="low", name=n, priority=1, booking={}, labels={"app": "db"}) for n in "abc"]
    violating, other = split_by_budget(pods, [budget(2, match={"app": "db"})])
    assert ([p.name for p in violating], [p.name for p in other]) == (["c"], ["a", "b"])


def test_a_terminating_pod_counts_as_free_and_no_victim_is_needed() -> None:
    """A pod being deleted frees its devices: the pod waits for it instead of preempting anyone
    (``PodEligibleToPreemptOthers``: no new preemption while a victim terminates)."""
    view, holders = fill("n1", ONE_GPU, [("leaving", 1, request(8000)), ("staying", 1, request(8000))],
                         terminating=["leaving"])
    result = select_victims(preemptor(8000), view, holders, [], CATALOG)
    assert isinstance(result, NodeVictims)
    assert (victims_of(result), [h.name for h in result.waiting_for]) == ((), ["leaving"])


def test_a_terminating_pod_is_never_chosen_again() -> None:
    view, holders = fill("n1", ONE_GPU, [("leaving", 1, request(8000)), ("staying", 1, request(8000))],
                         terminating=["leaving"])
    result = select_victims(preemptor(16000), view, holders, [], CATALOG)
    assert isinstance(result, NodeVictims)
    assert (victims_of(result), [h.name for h in result.waiting_for]) == (("staying",), ["leaving"])


@pytest.mark.parametrize(("victim_namespace", "victims"), [
    pytest.param("team", ("mine",), id="same-namespace-victim-frees-quota"),
    pytest.param("low", "2/2 ResourceQuotaNotFit even without its lower-priority pods (1)",
                 id="other-namespace-victim-frees-none"),
])
def test_namespace_quota(victim_namespace: str, victims: tuple[str, ...] | str) -> None:
    """The namespace's limit (8000 MiB) is used up by its own low-priority pod on GPU-0; GPU-1 is free but the quota
    refuses it. Only a victim of the same namespace gives the quota back."""
    view, holders = fill("n1", [gpu(0, memory_mib=8000), gpu(1, memory_mib=8000)], [("mine", 1, request(8000))],
                         namespace=victim_namespace)
    quota = NamespaceQuota("team", {"nvidia.com/gpumem": 8000}, {"nvidia.com/gpumem": 8000})
    result = select_victims(preemptor(8000, namespace="team", quota=quota), view, holders, [], CATALOG)
    assert victims_of(result) == victims


def test_dynamic_mig_instances_are_freed_by_their_pods() -> None:
    """A 7g.40gb instance needs the whole A100: both 3g.20gb holders go; a 3g.20gb ask frees one, the lower."""
    devices = decode_register(a100_mig_register("GPU-A"))
    view, holders = fill("n1", devices, [("left", 1, request(19968)), ("right", 2, request(19968))])
    assert victims_of(select_victims(preemptor(40192), view, holders, [], CATALOG)) == ("right", "left")
    assert victims_of(select_victims(preemptor(19968), view, holders, [], CATALOG)) == ("left",)


def device_of(cw: str, catalog: DeviceCatalog, memory_mib: int) -> Device:
    device_type = {"DCU": "DCU-BW100", "MLU": "MLU370-X4", "MR-V100": "MR-V100", "Ascend910B3": "Ascend910B3"}[cw]
    return Device(uuid=f"{cw}-0", index=0, count=10, memory_mib=memory_mib, cores=100, type=device_type, family=cw)


@pytest.mark.parametrize("family", ["NVIDIA", "DCU", "MLU", "MR-V100", "Ascend910B3"])
def test_every_family(family: str) -> None:
    """One fit loop serves every family, so does preemption: the lower of two half-card holders goes."""
    devices = [gpu(0, memory_mib=32768)] if family == "NVIDIA" else [device_of(family, CATALOG, 32768)]
    view, holders = fill("n1", devices, [("low", 1, request(16384, family=family)),
                                         ("mid", 2, request(16384, family=family))])
    result = select_victims(preemptor(16384, family=family), view, holders, [], CATALOG)
    assert isinstance(result, NodeVictims)
    assert victims_of(result) == ("low",)
    assert [grant.uuid for container in result.grants for grant in container] == [f"{devices[0].uuid}"]


def chosen(node: str, *victims: tuple[int, float], violations: int = 0) -> NodeVictims:
    """A candidate whose victims are (priority, start) pairs."""
    return NodeVictims(node=node, pdb_violations=violations, waiting_for=(), grants=(),
                       victims=tuple(Holder(uid=f"{node}-{i}", namespace="low", name=f"{node}-{i}", priority=p,
                                            booking={}, started_at=s) for i, (p, s) in enumerate(victims)))


@pytest.mark.parametrize(("candidates", "winner"), [
    pytest.param([chosen("a", (1, 0), violations=1), chosen("b", (9, 0))], "b", id="fewest-pdb-violations"),
    pytest.param([chosen("a", (5, 0)), chosen("b", (3, 0), (3, 0))], "b", id="lowest-highest-victim-priority"),
    pytest.param([chosen("a", (5, 0), (4, 0)), chosen("b", (5, 0), (1, 0))], "b", id="smallest-priority-sum"),
    pytest.param([chosen("a", (-5, 0), (-5, 0)), chosen("b", (-5, 0), (-6, 0), (-7, 0))], "a",
                 id="negative-priorities-sum-with-kube-schedulers-offset"),
    pytest.param([chosen("a", (5, 0), (0, 0)), chosen("b", (5, 0))], "b", id="fewest-victims"),
    pytest.param([chosen("a", (5, 10), (5, 300)), chosen("b", (5, 200), (5, 250))], "b",
                 id="latest-earliest-start-of-the-highest-priority-victims"),
    pytest.param([chosen("a", (5, 0)), chosen("b", (5, 0))], "a", id="first-on-a-full-tie"),
    pytest.param([chosen("a", (1, 0)), chosen("b")], "b", id="a-node-without-victims-at-once"),
])
def test_node_order(candidates: list[NodeVictims], winner: str) -> None:
    """``pickOneNodeForPreemption`` with its default score functions, in their order."""
    assert pick_node(candidates).node == winner


@pytest.mark.parametrize(("nodes", "count"), [(5, 5), (100, 100), (1000, 100), (5000, 500)])
def test_candidate_count(nodes: int, count: int) -> None:
    """``calculateNumCandidates`` with minCandidateNodesPercentage 10 and minCandidateNodesAbsolute 100."""
    assert candidate_count(nodes) == count


def test_plan_picks_the_best_node_and_says_why_not_the_others() -> None:
    cheap_view, cheap = fill("cheap", ONE_GPU, [("c1", 1, request(16000))])
    dear_view, dear = fill("dear", ONE_GPU, [("d1", 50, request(16000))])
    busy_view, busy = fill("busy", ONE_GPU, [("b1", 500, request(16000))])
    views = {"dear": dear_view, "cheap": cheap_view, "busy": busy_view}
    result = plan_preemption(preemptor(8000), ["busy", "dear", "cheap", "unknown"], views,
                             {"cheap": cheap, "dear": dear, "busy": busy}, [], CATALOG)
    assert isinstance(result, PreemptionPlan)
    assert (result.chosen.node, victims_of(result.chosen)) == ("cheap", ("c1",))
    assert result.reasons == {"busy": NO_VICTIMS}


def test_plan_without_candidates() -> None:
    view, holders = fill("n1", ONE_GPU, [("high", 500, request(16000))])
    assert plan_preemption(preemptor(8000), ["n1"], {"n1": view}, {"n1": holders}, [], CATALOG) == \
        NoPreemption(reasons={"n1": NO_VICTIMS})


def test_plan_stops_at_a_node_that_needs_no_victim() -> None:
    waiting_view, waiting = fill("waiting", ONE_GPU, [("leaving", 1, request(16000))], terminating=["leaving"])
    other_view, other = fill("other", ONE_GPU, [("o1", 1, request(16000))])
    result = plan_preemption(preemptor(8000), ["waiting", "other"], {"waiting": waiting_view, "other": other_view},
                             {"waiting": waiting, "other": other}, [], CATALOG)
    assert isinstance(result, PreemptionPlan)
    assert (result.chosen.node, result.chosen.victims) == ("waiting", ())


def test_the_preemptor_is_never_its_own_victim() -> None:
    view, holders = fill("n1", ONE_GPU, [("preemptor", 1, request(16000))])
    holders = [Holder(**{**{slot: getattr(h, slot) for slot in Holder.__slots__}, "uid": "uid-preemptor"})
               for h in holders]
    assert plan_preemption(preemptor(8000), ["n1"], {"n1": view}, {"n1": holders}, [], CATALOG) == \
        NoPreemption(reasons={"n1": NO_VICTIMS})


@pytest.mark.parametrize(("spec", "terms"), [
    pytest.param({}, (0, True), id="no-priority-is-zero-and-may-preempt"),
    pytest.param({"priority": 1000}, (1000, True), id="priority"),
    pytest.param({"priority": -5, "preemptionPolicy": "PreemptLowerPriority"}, (-5, True), id="explicit-policy"),
    pytest.param({"priority": 1000, "preemptionPolicy": "Never"}, (1000, False), id="never"),
    pytest.param({"priority": "high"}, (0, True), id="unreadable-priority-is-zero"),
    pytest.param({"priority": True}, (0, True), id="a-boolean-is-no-priority"),
])
def test_preemption_terms(spec: dict[str, object], terms: tuple[int, bool]) -> None:
    """``corev1helpers.PodPriority`` (``spec.priority``, 0 when unset) and ``preemptionPolicy: Never``."""
    assert preemption_terms({"spec": spec}) == terms


@pytest.mark.parametrize(("obj", "selector", "allowed", "disrupted"), [
    pytest.param({"metadata": {"namespace": "low", "name": "db"},
                  "spec": {"selector": {"matchLabels": {"app": "db"}}},
                  "status": {"disruptionsAllowed": 1, "disruptedPods": {"db-0": "2026-01-01T00:00:00Z"}}},
                 LabelSelector(match_labels={"app": "db"}), 1, frozenset({"db-0"}), id="full"),
    pytest.param({"metadata": {"namespace": "low", "name": "db"},
                  "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}},
                 LabelSelector(expressions=(Requirement("app", "Exists"),)), 0, frozenset(),
                 id="no-status-yet-allows-nothing"),
    pytest.param({"metadata": {"namespace": "low", "name": "db"},
                  "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}}, None, 0,
                 frozenset(), id="bad-operator-matches-nothing"),
    pytest.param({"metadata": {"namespace": "low", "name": "db"}, "spec": {}}, None, 0, frozenset(),
                 id="no-selector-matches-nothing"),
    pytest.param({"metadata": "junk", "spec": [], "status": {"disruptionsAllowed": "2"}}, None, 0, frozenset(),
                 id="garbage-never-raises"),
])
def test_parse_disruption_budget(obj: dict[str, object], selector: LabelSelector | None, allowed: int,
                                 disrupted: frozenset[str]) -> None:
    budget_read = parse_disruption_budget(obj)
    assert (budget_read.selector, budget_read.disruptions_allowed, budget_read.disrupted_pods) == \
        (selector, allowed, disrupted)


@pytest.mark.parametrize(("proposed", "outcome"), [
    pytest.param({"uid-p1", "uid-p2"}, (), id="kube-schedulers-victims-free-the-devices-too"),
    pytest.param({"uid-p1"}, ("p2",), id="device-victims-added"),
    pytest.param(set(), ("p2", "p1"), id="victims-for-cpu-elsewhere-devices-still-need-theirs"),
])
def test_process_preemption_adds_device_victims(proposed: set[str], outcome: tuple[str, ...]) -> None:
    """The extender's ``ProcessPreemption``: kube-scheduler's victims count as gone; device victims are added when
    they do not free enough, chosen as ``SelectVictimsOnNode`` chooses."""
    view, holders = fill("n1", ONE_GPU, QUARTERS)
    assert victims_of(extend_victims(preemptor(8000), view, holders, proposed, [], CATALOG)) == outcome


def test_process_preemption_drops_a_node_the_devices_never_fit() -> None:
    view, holders = fill("n1", ONE_GPU, [("high", 500, request(16000))])
    assert victims_of(extend_victims(preemptor(8000), view, holders, set(), [], CATALOG)) == \
        f"1/1 CardInsufficientMemory, and {NO_VICTIMS}"
