"""Device-aware preemption in the cache (docs/preemption.md): the decision on a snapshot, and the holds; a part
`state.cache.ClusterCache` composes (`Holds`), over the cache's store and under its lock.

A **hold** keeps the devices a preemption frees for its preemptor: from the decision until the preemptor is placed,
bound or deleted, its hold lapses (`HOLD_SECONDS`), or its victims are all gone and it still does not fit. While it
stands, every pod of the same or lower priority is fitted as if the preemptor were already there (kube-scheduler's
nominated pods: ``RunFilterPluginsWithNominatedPods`` adds those of equal or higher priority); a pod of higher
priority is not, so it may take the devices. The preemptor's own filter tries the hold's node first.

The decision (`core.preemption.plan_preemption`) is taken on a snapshot outside the lock (a dry run at 1,000 full
nodes takes tens of milliseconds, which filters of other pods must not wait for) and its hold recorded under the
lock only if the chosen node's view and victims are still those it judged; otherwise the preemptor's next filter
decides again.

A restart loses the holds (they live in memory). The preemptor's next filter rebuilds it from what the API shows: its
victims, already terminating, count as gone, so the node where it then fits needs no victim and is held again
(logged ``rebuilt from nominatedNodeName`` when it is the node ``status.nominatedNodeName`` names); if it no longer
fits there, a new decision is taken.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from hami_web.core.preemption import (
    DisruptionBudget,
    Holder,
    NodeVictims,
    NoPreemption,
    Preemptor,
    extend_victims,
    plan_preemption,
)
from hami_web.core.usage import DeviceUsage, NodeView, pod_booking, with_booking
from hami_web.state.planning import Held
from hami_web.state.pods import preemption_holder
from hami_web.state.store import CacheStore

log = logging.getLogger(__name__)

# How long a hold lasts at most (kube-scheduler's podMaxInUnschedulablePodsDuration: a pending pod is retried at
# least this often, and a hold whose preemptor is not retried within it is not worth keeping).
HOLD_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Hold:
    """Devices held on ``node`` for the preemptor ``uid`` (``namespace/name``, ``priority``): its planned ``booking``
    there, the pods it waits for (``victims``: uid and ``namespace/name``), and when the hold lapses."""

    uid: str
    namespace: str
    name: str
    priority: int
    node: str
    victims: tuple[tuple[str, str], ...]
    booking: Mapping[str, DeviceUsage]
    expires_at: float
    preempted: bool = True  # False: it only waits for pods already terminating (no victim of its own)

    @property
    def key(self) -> str:
        """``namespace/name`` of the preemptor."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class HoldState:
    """A hold as the tools show it: which of its victims the cache still shows holding devices."""

    hold: Hold
    remaining: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Preempting:
    """A new preemption: ``plan`` chosen, its hold recorded; the victims must now be deleted (the act)."""

    hold: Hold
    plan: NodeVictims
    reasons: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Waiting:
    """The preemptor waits for pods already going away (its own victims, or any pod terminating) on ``hold.node``."""

    hold: Hold
    remaining: tuple[str, ...]
    reasons: Mapping[str, str]


PreemptionDecision = Preempting | Waiting | NoPreemption


class _Overlay(Mapping[str, NodeView]):
    """The cache's views with a few replaced (nodes with holds that count against the pod being placed)."""

    __slots__ = ("_base", "_over")

    def __init__(self, base: Mapping[str, NodeView], over: Mapping[str, NodeView]) -> None:
        self._base = base
        self._over = over

    def __getitem__(self, name: str) -> NodeView:
        view = self._over.get(name)
        return view if view is not None else self._base[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)


class Holds:
    """Preemption's part of the cluster cache (see the module): the holds and the PodDisruptionBudgets, kept under
    the store's lock and judged with its data. `state.cache.ClusterCache` composes it and shows it through two faces
    (`state.faces.Preemption`, `state.faces.BudgetFeed`); the ``_locked`` methods are called with the lock held."""

    def __init__(self, store: CacheStore) -> None:
        self._store = store
        self.standing: dict[str, Hold] = {}  # by preemptor uid
        self._budgets: dict[str, DisruptionBudget] = {}

    # -- PodDisruptionBudgets -------------------------------------------------------------------------

    def replace_budgets(self, budgets: Iterable[DisruptionBudget]) -> None:
        """Reconcile the PodDisruptionBudgets with a full list."""
        fresh = {f"{budget.namespace}/{budget.name}": budget for budget in budgets}
        with self._store.locked("budgets"):
            self._budgets = fresh

    def apply_budget_events(self, events: Sequence[tuple[str, DisruptionBudget]]) -> None:
        """Apply watch events (``ADDED``, ``MODIFIED``, ``DELETED``) for PodDisruptionBudgets."""
        with self._store.locked("budgets"):
            for kind, budget in events:
                key = f"{budget.namespace}/{budget.name}"
                if kind == "DELETED":
                    self._budgets.pop(key, None)
                else:
                    self._budgets[key] = budget

    # -- holds ----------------------------------------------------------------------------------------

    def states(self) -> list[HoldState]:
        """Every standing hold and the victims it still waits for (tools, dashboard, metrics)."""
        with self._store.locked("read"):
            return [HoldState(hold, self._remaining_locked(hold)) for hold in self.standing.values()]

    def drop(self, uid: str, why: str) -> None:
        """End the pod's hold (its preemption failed, or another server's stands)."""
        with self._store.locked("filter"):
            self.release_locked([uid], why)

    def _holds_on_locked(self, node: str) -> tuple[str, ...]:
        return tuple(uid for uid, hold in self.standing.items() if hold.node == node)

    def _remaining_locked(self, hold: Hold) -> tuple[str, ...]:
        return tuple(key for uid, key in hold.victims if uid in self._store.held)

    def release_locked(self, uids: Iterable[str], why: str) -> None:
        """End the holds of ``uids`` (those that have one), each with a log line saying ``why``."""
        for uid in uids:
            hold = self.standing.pop(uid, None)
            if hold is not None:
                log.info("preemption hold for pod %s on node %s ends: %s", hold.key, hold.node, why,
                         extra={"pod": hold.key, "node": hold.node})

    def expire_locked(self, now: float) -> None:
        """End the holds that lapsed (`HOLD_SECONDS`)."""
        expired = [uid for uid, hold in self.standing.items() if hold.expires_at <= now]
        self.release_locked(expired, f"lapsed after {HOLD_SECONDS:.0f} s")

    def views_for_locked(self, uid: str, priority: int) -> Mapping[str, NodeView]:
        """The views a pod of ``priority`` is fitted on: each other hold of the same or higher priority counts as
        placed on its node."""
        base = self._store.views
        over: dict[str, NodeView] = {}
        for hold in self.standing.values():
            if hold.uid == uid or hold.priority < priority:
                continue
            view = over.get(hold.node) or base.get(hold.node)
            if view is not None:
                over[hold.node] = with_booking(view, hold.booking)
        return _Overlay(base, over) if over else base

    # -- the decision ---------------------------------------------------------------------------------

    def preempt(self, preemptor: Preemptor, candidates: Sequence[str], *, nominated: str = "") -> PreemptionDecision:
        """For a pod `place` found no node for: wait for its standing hold's victims, or decide a preemption and hold
        the devices it frees (see the module)."""
        now = self._store.clock()
        with self._store.locked("filter"):
            self.expire_locked(now)
            own = self.standing.get(preemptor.uid)
            if own is not None:
                remaining = self._remaining_locked(own)
                if remaining:
                    return Waiting(own, remaining, {own.node: waiting_reason(own.node, len(remaining))})
                self.release_locked([preemptor.uid], "its victims are gone and it still does not fit there")
            if not any(priority < preemptor.priority for priority in self._store.priorities):
                return NoPreemption(reasons={})  # no pod of lower priority holds a device: nothing to look at
            trial = self._trial_locked(preemptor, candidates)
        result = plan_preemption(trial.preemptor, list(candidates), trial.views, trial.holders(), trial.budgets,
                                 self._store.catalog)
        if isinstance(result, NoPreemption):
            return result
        chosen = result.chosen
        booking = pod_booking(chosen.grants, init_count=preemptor.request.init_count, owner=judged_key(preemptor))
        pods = chosen.victims + chosen.waiting_for
        hold = Hold(uid=preemptor.uid, namespace=preemptor.namespace, name=preemptor.name,
                    priority=preemptor.priority, node=chosen.node,
                    victims=tuple((pod.uid, pod.key) for pod in pods), booking=booking,
                    expires_at=now + HOLD_SECONDS, preempted=bool(chosen.victims))
        if not self._record(hold, trial.seen[chosen.node]):
            return NoPreemption(reasons={**result.reasons, chosen.node: CHANGED})
        if not chosen.victims:
            if nominated == chosen.node:
                log.info("preemption hold for pod %s on node %s rebuilt from nominatedNodeName: it waits for %d "
                         "terminating pods", hold.key, hold.node, len(pods), extra={"pod": hold.key, "node": hold.node})
            reasons = {**result.reasons, chosen.node: waiting_reason(chosen.node, len(pods))}
            return Waiting(hold, tuple(pod.key for pod in pods), reasons)
        reasons = {**result.reasons, chosen.node: preempting_reason(chosen)}
        return Preempting(hold, chosen, reasons)

    def _trial_locked(self, preemptor: Preemptor, candidates: Sequence[str]) -> _Trial:
        """What the dry run needs, copied under the lock: the candidates' views (immutable), their held pods (one
        C-level copy per node) and the pods' quota use (one C-level copy); the holders are built outside it."""
        views = self.views_for_locked(preemptor.uid, preemptor.priority)
        snapshot = {name: views[name] for name in candidates if name in views}
        seen = {name: (self._store.views.get(name), self._holds_on_locked(name)) for name in snapshot}
        held_on = self._store.held_on
        held = {name: list(held_on[name].values()) for name in snapshot if name in held_on}
        namespace = self._store.quota_ledger.namespace(preemptor.namespace)
        judged = replace(preemptor, quota=namespace if namespace.limits else None)
        return _Trial(judged, snapshot, seen, held, self._store.quota_ledger.counted(), list(self._budgets.values()))

    def _record(self, hold: Hold, seen: tuple[NodeView | None, tuple[str, ...]]) -> bool:
        """Record ``hold`` if its node's view and holds are still those the decision judged (``seen``)."""
        with self._store.locked("filter"):
            base, holds_there = seen
            if self._store.views.get(hold.node) is not base or self._holds_on_locked(hold.node) != holds_there \
                    or hold.uid in self.standing:
                return False
            # kube-scheduler clears the nomination of lower-priority pods nominated to the node it preempts on
            # (getLowerPriorityNominatedPods): their holds end here, and they are decided again at their next filter.
            self.release_locked([uid for uid, other in self.standing.items() if other.node == hold.node
                                 and other.priority < hold.priority],
                                f"pod {hold.key} of higher priority preempts there")
            self.standing[hold.uid] = hold
            return True

    def extend_victims(self, preemptor: Preemptor, node: str, proposed: Collection[str]) -> NodeVictims | str:
        """The extender's ``ProcessPreemption`` for one node (`core.preemption.extend_victims`) on the cache's state,
        the holds of preemptors of the same or higher priority counted as placed."""
        with self._store.locked("read"):
            trial = self._trial_locked(preemptor, [node])
        view = trial.views.get(node)
        if view is None:
            return f"node {node} has no devices hami-web knows"
        holders = [holder for holder in trial.holders().get(node, []) if holder.uid != preemptor.uid]
        return extend_victims(trial.preemptor, view, holders, proposed, trial.budgets, self._store.catalog)


@dataclass(frozen=True, slots=True)
class _Trial:
    """A preemption's inputs copied under the lock: the preemptor with its namespace's quota, the candidates' views,
    what each view and the holds on its node were (to check before recording), the held pods of each candidate and
    what every pod counts against its namespace's quota (shallow copies: entries are replaced, never changed), the
    budgets."""

    preemptor: Preemptor
    views: Mapping[str, NodeView]
    seen: Mapping[str, tuple[NodeView | None, tuple[str, ...]]]
    held: Mapping[str, list[Held]]
    counted: Mapping[str, tuple[str, Mapping[str, int]]]
    budgets: list[DisruptionBudget]

    def holders(self) -> Mapping[str, list[Holder]]:
        """The holders on the candidate nodes, by node, as preemption judges them; built outside the lock, and only
        for the nodes the dry run reaches (it stops after kube-scheduler's number of candidates)."""
        return _Holders(self.held, self.counted)


class _Holders(Mapping[str, list[Holder]]):
    """Each node's holders, built on first look."""

    __slots__ = ("_built", "_counted", "_held")

    def __init__(self, held: Mapping[str, list[Held]], counted: Mapping[str, tuple[str, Mapping[str, int]]]) -> None:
        self._held = held
        self._counted = counted
        self._built: dict[str, list[Holder]] = {}

    def __getitem__(self, node: str) -> list[Holder]:
        built = self._built.get(node)
        if built is None:
            built = self._built[node] = [preemption_holder(entry.usage, self._quota_use(entry.usage.uid))
                                         for entry in self._held[node]]
        return built

    def _quota_use(self, uid: str) -> Mapping[str, int]:
        counted = self._counted.get(uid)
        return counted[1] if counted is not None else {}

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


CHANGED = "the node changed while preemption was decided; decided again at the pod's next filter"


def judged_key(preemptor: Preemptor) -> str:
    """``namespace/name`` of the preemptor (the owner its planned MIG instances name)."""
    return f"{preemptor.namespace}/{preemptor.name}"


def waiting_reason(node: str, count: int) -> str:
    """The filter's reason for the node a preemptor waits on: ``waiting for 2 preempted pods on n``."""
    return f"waiting for {count} preempted pod{'s' if count != 1 else ''} on {node}"


def preempting_reason(chosen: NodeVictims) -> str:
    """The filter's reason for the node of a new preemption: ``preempting a, b on node n``."""
    return f"preempting {', '.join(victim.key for victim in chosen.victims)} on node {chosen.node}"


__all__ = [
    "HOLD_SECONDS",
    "Hold",
    "HoldState",
    "Holds",
    "Preempting",
    "PreemptionDecision",
    "Waiting",
    "preempting_reason",
    "waiting_reason",
]
