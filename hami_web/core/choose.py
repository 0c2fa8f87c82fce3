"""Choosing one node for a pod among kube-scheduler's candidates (docs/scheduling-rules.md#the-filter-step-by-step).

The node score does not depend on the pod, so candidates are ranked first and tried in rank order; the
first that fits is the answer. Nodes whose aggregates already rule them out are skipped without a fit, and
exact per-GPU reasons are only computed when no node fits, because only then does anyone read them.

Nodes busy binding (their HAMi node lock held by a live owner, or a placement of ours not yet bound) are ranked after
the free ones, each group in the policy's order (docs/compatibility.md#filter-and-placement, node policy order):
under binpack every pod of a burst would otherwise go to the one fullest node, whose lock the previous pod holds until
its device plugin is done, and have its bind refused. A busy node is never excluded: a pod that fits only there still
gets it.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

from hami_web.core.busyrank import BusyBounds, RankOrder, busy_last, by_busy_bound
from hami_web.core.capabilities import group_score_bound
from hami_web.core.fit import INVALID_REGISTER as INVALID_REGISTER  # re-exported: the reasons' vocabulary
from hami_web.core.fit import PodFit, fit_pod, may_fit
from hami_web.core.grants import PodGrants
from hami_web.core.options import SPREAD, PodOptions
from hami_web.core.quota import PodQuota
from hami_web.core.requests import PodRequest
from hami_web.core.termrank import FamilyTerms, by_family_term, present_terms
from hami_web.core.usage import NodeView

NODE_UNREGISTERED = "node unregistered"
MEMO_ENTRIES_PER_NODE = 16
# Asks whose last decision placed nothing, remembered with the view each node was judged on (`_NoFits`).
NO_FIT_ASKS = 64
MAX_ASKS = 4096  # distinct asks kept canonical (`_canonical`); forgotten all at once past it


@dataclass(frozen=True, slots=True)
class Placement:
    """The chosen node and the GPUs of each container (init containers first)."""

    node: str
    grants: PodGrants
    node_score: float
    node_busy: bool = False  # the node was busy binding: no free node fitted


@dataclass(frozen=True, slots=True)
class NoPlacement:
    """No candidate fits; ``reasons`` holds one message for every candidate node."""

    reasons: Mapping[str, str]


_BY_NAME = attrgetter("inventory.name")
_BY_SCORE = attrgetter("score")
_CONTAINER_DEVICES = attrgetter("container_devices")


@dataclass(frozen=True, slots=True, eq=False)
class _Ask:
    """The pod-side inputs of a fit, hashed once per decision: the key of a node's failure memo."""

    request: PodRequest
    options: PodOptions
    digest: int
    quota: PodQuota | None = None  # what the namespace's limits leave the pod: a fit depends on it
    # For an ask whose group term depends on the node's busy devices: its bound per node shape, made on the canonical
    # ask's first decision (`hami_web.core.busyrank.BusyBounds`).
    busy_bounds: BusyBounds | None = None
    # For an ask whose families add their own node-score term: the term by annotation set (`FamilyTerms`), filled as
    # the canonical ask's decisions meet the sets.
    family_terms: FamilyTerms | None = None
    # Set once canonical (`_canonical`), never reused: the key of the per-view group bounds, hashed at C level (the
    # group search looks a bound up on every node it passes).
    serial: int = 0

    def __hash__(self) -> int:
        return self.digest

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Ask) and self.digest == other.digest
                                 and self.request == other.request and self.options == other.options
                                 and self.quota == other.quota)


class _NoFits:
    """For the asks whose last decision placed nothing: each node's reason, with the view it was judged on.

    A pod no node takes is decided again and again (kube-scheduler retries it; a burst holds many pods of one shape)
    while between two decisions only the few nodes whose usage changed have a new view. A view is immutable, so a node
    whose view is the one its reason was judged on still does not fit: only the others are ranked and fitted, and the
    rest of the answer is read back. Without this a pod that fits nowhere costs a rank and a look at every node
    (``benchmarks/filter_decision.py --ascend``: the 8-NPU pods, docs/device-families.md#ascend-npus). Plain dict
    operations, so concurrent filters at worst judge a node again.
    """

    def __init__(self, asks: int) -> None:
        self._asks = asks
        self._judged: dict[_Ask, dict[str, tuple[NodeView, str]]] = {}

    def changed(self, ask: _Ask, known: list[NodeView], reasons: dict[str, str]) -> list[NodeView]:
        """The views of ``known`` judged on another view (all when the ask placed something last time); the others'
        reasons go into ``reasons``."""
        judged = self._judged.get(ask)
        if judged is None:
            return known
        changed = []
        for view in known:
            last = judged.get(view.inventory.name)
            if last is not None and last[0] is view:
                reasons[view.inventory.name] = last[1]
            else:
                changed.append(view)
        return changed

    def remember(self, ask: _Ask, known: list[NodeView], reasons: Mapping[str, str]) -> None:
        """Nothing of ``known`` fitted ``ask``, for ``reasons``."""
        judged = self._judged.pop(ask, None) or {}
        judged.update((view.inventory.name, (view, reasons[view.inventory.name])) for view in known)
        if len(self._judged) >= self._asks:
            self._judged.pop(next(iter(self._judged)))
        self._judged[ask] = judged

    def forget(self, ask: _Ask) -> None:
        """``ask`` placed something: its next decision starts afresh."""
        self._judged.pop(ask, None)


_NO_FITS = _NoFits(NO_FIT_ASKS)
_ASKS: dict[_Ask, _Ask] = {}
_SERIALS = itertools.count(1)


def _canonical(ask: _Ask) -> _Ask:
    """The one `_Ask` object of its value: the per-node memos (failures, group bounds) are then found by identity, not
    by comparing whole requests node after node."""
    known = _ASKS.get(ask)
    if known is not None:
        return known
    if len(_ASKS) >= MAX_ASKS:
        _ASKS.clear()
    object.__setattr__(ask, "serial", next(_SERIALS))
    _ASKS[ask] = ask
    return ask


def _group_bound(ask: _Ask, view: NodeView) -> float:
    """`group_score_bound`, remembered on the (immutable) view for the next identical ask."""
    bound = view.group_bounds.get(ask.serial)
    if bound is None:
        if len(view.group_bounds) >= MEMO_ENTRIES_PER_NODE:
            view.group_bounds.clear()
        bound = view.group_bounds[ask.serial] = group_score_bound(ask.request, view, ask.options.node_policy)
    return bound


def _family_terms(ask: _Ask, views: Sequence[NodeView]) -> tuple[dict[str, float] | None, float]:
    """`present_terms` for the ask's families' node-score terms, judged once per annotation set per canonical ask;
    ``(None, 0)`` for an ask without such terms."""
    if not ask.request.node_terms:
        return None, 0.0
    terms = ask.family_terms
    if terms is None:
        terms = FamilyTerms(ask.request, ask.options.node_policy)
        object.__setattr__(ask, "family_terms", terms)
    return present_terms(terms, views)


def _fit_or_reason(ask: _Ask, view: NodeView) -> PodFit | str:
    """`fit_pod`, or the node's reason, remembered on the (immutable) view for the next identical ask."""
    known = view.fits.get(ask)
    if isinstance(known, PodFit | str):
        return known
    result = fit_pod(ask.request, view, ask.options, ask.quota)
    if len(view.fits) >= MEMO_ENTRIES_PER_NODE:
        view.fits.clear()
    remembered = view.fits[ask] = result if isinstance(result, PodFit) else result.summary()
    return remembered


def rank_nodes(views: Sequence[NodeView], policy: str, busy: Collection[str] = ()) -> list[NodeView]:
    """Binpack: highest score first (fill nodes up); spread: lowest first; ties by node name ascending.

    Nodes named in ``busy`` come after all the others, in the same order among themselves.
    """
    # Two stable sorts with C-level keys: by name, then by score (reverse keeps equal scores in name order).
    ranked = sorted(views, key=_BY_NAME)
    ranked.sort(key=_BY_SCORE, reverse=policy != SPREAD)
    return list(_busy_last(ranked, busy)) if busy else ranked


def _busy_last(ranked: Iterable[NodeView], busy: Collection[str]) -> Iterator[NodeView]:
    """``ranked`` with the busy nodes moved behind the others (`busy_last`)."""
    return busy_last(ranked, busy, _BY_NAME)


def choose_node(request: PodRequest, options: PodOptions, candidates: Sequence[str],
                nodes: Mapping[str, NodeView], broken: Mapping[str, str] | None = None,
                busy: Collection[str] = (), quota: PodQuota | None = None) -> Placement | NoPlacement:
    """Place ``request`` on the best-ranked candidate that fits, or give a reason for every candidate.

    ``nodes`` are the GPU nodes the cache knows; ``broken`` maps nodes whose register annotation does not
    parse to the parse error; ``busy`` names nodes busy binding, tried after the others (see the module);
    ``quota`` what the namespace's limits leave the pod (docs/quotas.md#namespace-quotas).
    """
    broken = broken or {}
    reasons: dict[str, str] = {}
    known: list[NodeView] = []
    for name in dict.fromkeys(candidates):
        view = nodes.get(name)
        if view is not None:
            known.append(view)
        elif name in broken:
            reasons[name] = f"{INVALID_REGISTER}: {broken[name]}"
        else:
            reasons[name] = NODE_UNREGISTERED
    ask = _canonical(_Ask(request=request, options=options, digest=hash((request, options, quota)), quota=quota))
    result = _choose(ask, _NO_FITS.changed(ask, known, reasons), reasons, candidates, busy)
    if isinstance(result, NoPlacement):
        _NO_FITS.remember(ask, known, result.reasons)
    else:
        _NO_FITS.forget(ask)
    return result


def _choose(ask: _Ask, known: list[NodeView], reasons: dict[str, str], candidates: Sequence[str],
            busy: Collection[str]) -> Placement | NoPlacement:
    """`choose_node` among ``known`` (the candidates not already in ``reasons``)."""
    request, options = ask.request, ask.options
    if request.group_scored and any(container.busy_term is not None for container in request.containers):
        return _choose_with_busy_term(ask, reasons, candidates, busy, known)
    if request.group_scored:
        ranked = _busy_last(rank_nodes(known, options.node_policy), busy)
        return _choose_with_group_score(ask, ranked, reasons, candidates, busy, request.group_score_reach)
    terms, same_term = _family_terms(ask, known)
    plain = rank_nodes(known, options.node_policy)
    eligible = _could_hold(plain, request.largest_count)  # nodes of too few usable devices are not even looked at
    ranked = _busy_last(eligible if terms is None else by_family_term(eligible, terms, options.node_policy), busy)
    skipped: list[NodeView] = []
    for view in ranked:
        if not may_fit(request, view, options):
            skipped.append(view)
            continue
        result = _fit_or_reason(ask, view)
        if isinstance(result, PodFit):
            return Placement(node=view.name, grants=result.grants, node_busy=view.name in busy,
                             node_score=_with_group_term(_node_score(view, terms, same_term),
                                                         result, ask.options.node_policy))
        reasons[view.name] = result
    if request.largest_count:  # the nodes `_could_hold` left out join those `may_fit` ruled out, in rank order
        ranked = _busy_last(plain if terms is None else by_family_term(plain, terms, options.node_policy), busy)
        skipped = [view for view in ranked if view.name not in reasons]
    return _first_skipped(ask, skipped, reasons, candidates, busy, terms, same_term)


def _could_hold(ranked: list[NodeView], devices: int) -> Iterator[NodeView]:
    """The nodes of ``ranked``, in order, on which one container may get ``devices`` by the count alone
    (`NodeView.container_devices`; all of them for 0), lazily and at C level: under binpack the ranking meets the full
    nodes first, and each one the filter looks at costs it a pre-check in Python."""
    if not devices:
        return iter(ranked)
    return compress(ranked, map(devices.__le__, map(_CONTAINER_DEVICES, ranked)))


def _with_group_term(score: float, fit: PodFit, policy: str) -> float:
    """The node's score with the placement's group term (added under binpack, taken off under spread), as the bounded
    search counts it: a grouped container of one device earns the same term on every node, so it ranks nothing."""
    return score - fit.group_score if policy == SPREAD else score + fit.group_score


def _node_score(view: NodeView, terms: Mapping[str, float] | None, same_term: float) -> float:
    """The node's score with its family terms, as `by_family_term` ranked it."""
    return view.score + (terms[view.score_annotations] if terms is not None else same_term)


def _first_skipped(ask: _Ask, skipped: Sequence[NodeView], reasons: dict[str, str], candidates: Sequence[str],
                   busy: Collection[str], terms: Mapping[str, float] | None = None,
                   same_term: float = 0.0) -> Placement | NoPlacement:
    """The nodes `may_fit` ruled out, fitted after all: the full fit is the authority on the reason (may_fit is only
    a necessary condition); should it ever disagree, the skipped nodes are still in rank order, so the first fit is
    the right answer. Otherwise a reason for every candidate."""
    for view in skipped:
        result = _fit_or_reason(ask, view)
        if isinstance(result, PodFit):
            return Placement(node=view.name, grants=result.grants, node_busy=view.name in busy,
                             node_score=_with_group_term(_node_score(view, terms, same_term),
                                                         result, ask.options.node_policy))
        reasons[view.name] = result
    return NoPlacement(reasons={name: reasons[name] for name in dict.fromkeys(candidates)})


def _choose_with_group_score(ask: _Ask, ranked: Iterator[NodeView], reasons: dict[str, str],
                             candidates: Sequence[str], busy: Collection[str], reach: int) -> Placement | NoPlacement:
    """`choose_node` for a pod whose placement earns the network-group term (docs/device-families.md#ascend-npus): a
    node's score is its score plus the term under binpack, minus it under spread (keeping a job in one group wins either
    way).

    Nodes are tried in rank order and the best total wins (ties: the earlier node); the search stops once no later
    node could beat it, because a node's term is at most ``reach`` (under spread, only the groupings that lower a total
    count: Vastai's card share adds to it under both policies). Busy nodes are only tried when no free node fits.
    """
    spread = ask.options.node_policy == SPREAD
    gain = ask.request.spread_gain_reach  # under spread a node's total is at least its score less this
    best: tuple[float, NodeView, PodFit] | None = None
    skipped: list[NodeView] = []
    serial = ask.serial
    for view in ranked:
        if best is not None:
            bound = view.score - gain if spread else view.score + reach
            if (bound >= best[0] if spread else bound <= best[0]) or (busy and view.name in busy
                                                                       and best[1].name not in busy):
                break
            # This node's own groups (or cards) may hold less than the whole term: no fit when even that cannot win.
            own = view.group_bounds.get(serial)
            if own is None:
                own = _group_bound(ask, view)
            if view.score - own >= best[0] if spread else view.score + own <= best[0]:
                continue
        if not may_fit(ask.request, view, ask.options):
            skipped.append(view)
            continue
        result = _fit_or_reason(ask, view)
        if not isinstance(result, PodFit):
            reasons[view.name] = result
            continue
        total = view.score - result.group_score if spread else view.score + result.group_score
        if best is None or (total < best[0] if spread else total > best[0]):
            best = (total, view, result)
    if best is None:
        return _first_skipped(ask, skipped, reasons, candidates, busy)
    total, view, fit = best
    return Placement(node=view.name, grants=fit.grants, node_score=total, node_busy=view.name in busy)


def _choose_with_busy_term(ask: _Ask, reasons: dict[str, str], candidates: Sequence[str], busy: Collection[str],
                           known: list[NodeView]) -> Placement | NoPlacement:
    """`_choose_with_group_score` for a pod whose group term depends on the node's busy devices (Kunlunxin's bubbles,
    up to 3,000 against plain scores of a few points): nodes are tried in the order of their bound (`by_busy_bound`)
    and the best total wins, ties by the plain rank as there; the search stops at the first node whose bound (and
    order, on a tie) cannot beat the best, so it fits the nodes whose shape might win, not every node the term's reach
    covers. Busy nodes only when no free node fits."""
    bounds = ask.busy_bounds
    if bounds is None:
        bounds = BusyBounds(ask.request, ask.options, ask.quota)
        object.__setattr__(ask, "busy_bounds", bounds)
    spread = ask.options.node_policy == SPREAD
    others = bounds.other > 0
    best: tuple[float, RankOrder, NodeView, PodFit] | None = None
    skipped: list[tuple[RankOrder, NodeView]] = []
    for key, rank, view in by_busy_bound(bounds, known, busy):
        if best is not None:
            if key > best[0] or (key == best[0] and rank > best[1]) or (view.name in busy and best[2].name not in busy):
                break
            if others:  # the pod's other grouped containers may earn less here than their reach
                own = _group_bound(ask, view)
                if (view.score - own, rank) >= best[:2] if spread else (-(view.score + own), rank) >= best[:2]:
                    continue
        if not may_fit(ask.request, view, ask.options):
            skipped.append((rank, view))
            continue
        result = _fit_or_reason(ask, view)
        if not isinstance(result, PodFit):
            reasons[view.name] = result
            continue
        total = view.score - result.group_score if spread else -(view.score + result.group_score)
        if best is None or total < best[0] or (total == best[0] and rank < best[1]):
            best = (total, rank, view, result)
    if best is None:
        skipped.sort(key=lambda skip: (skip[1].name in busy, skip[0]))  # back in rank order, busy nodes last
        return _first_skipped(ask, [view for _, view in skipped], reasons, candidates, busy)
    total, _, view, fit = best
    return Placement(node=view.name, grants=fit.grants, node_score=total if spread else -total,
                     node_busy=view.name in busy)
