"""Ranking nodes for a pod whose group term depends on the node's busy devices (Kunlunxin XPU's bubbles:
docs/device-families.md#kunlunxin-xpus), by the most each node's total can be, without fitting it.

The term (up to 3,000) dwarfs the plain scores (a few points), so the plain ranking says little about which node wins,
and fitting node after node until none can beat the best fits most of them. But a node's term depends only on its
shape (`hami_web.core.groups.BusyTerm.node_key`, kept on its view as `NodeView.busy_key`), and a cluster has few
shapes: each ask judges each shape once (`BusyBounds`), one C-level pass looks every node's bound up, and the nodes
come out best bound first (`by_busy_bound`), so the filter stops at the first node that cannot beat the best.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Iterator
from itertools import compress
from operator import attrgetter
from typing import TypeVar

from hami_web.core.capabilities import busy_alike, busy_term_bound
from hami_web.core.options import SPREAD, PodOptions
from hami_web.core.quota import PodQuota
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView

# A node's place in the plain ranking (`hami_web.core.choose.rank_nodes`), for ties: its signed score (binpack:
# negated), then its name.
RankOrder = tuple[float, str]
Keyed = tuple[float, RankOrder, NodeView]

T = TypeVar("T")
_BY_NAME = attrgetter("inventory.name")
_BY_SCORE = attrgetter("score")
_BUSY_KEY = attrgetter("busy_key")


class BusyBounds(dict[str, float]):
    """For one ask whose group term depends on the node's busy devices: by a view's `busy_key`, the most
    `PodFit.group_score` a placement can earn on a node of that shape (`busy_term_bound`, plus what the pod's other
    grouped containers can reach: ``other``), each shape judged on its first look-up; -inf where the pod cannot fit.

    Plain dict operations, as the filter's other memos: concurrent filters at worst judge a shape twice, and
    `distinct` is rebuilt whenever the table holds more shapes than it was built from (shapes are never forgotten), so
    no bound is missed.
    """

    __slots__ = ("_distinct", "alike", "other", "policy", "request")

    def __init__(self, request: PodRequest, options: PodOptions, quota: PodQuota | None) -> None:
        super().__init__()
        self.request, self.policy = request, options.node_policy
        self.alike = busy_alike(request, options, quota)
        others = [c for c in request.containers if c.busy_term is None]
        self.other = float(sum(c.group_weight for c in others
                               if c.node_dependent_term and (self.policy != SPREAD or c.spread_gain)))
        self._distinct: tuple[int, list[float]] = (0, [])

    def __missing__(self, key: str) -> float:
        bound = self[key] = busy_term_bound(self.request, key, self.policy, self.alike) + self.other
        return bound

    def distinct(self) -> list[float]:
        """The distinct bounds of the shapes judged so far, highest first."""
        judged, bounds = self._distinct
        if judged != len(self):
            judged = len(self)
            bounds = sorted(set(self.values()), reverse=True)
            self._distinct = (judged, bounds)
        return bounds


def by_busy_bound(bounds: BusyBounds, views: list[NodeView], busy: Collection[str]) -> Iterator[Keyed]:
    """``views`` ranked by each node's bound, lazily: ``(signed bound, order, view)``, the bound being the node's score
    plus the most group score a placement can earn on a node of its shape (``bounds``), signed so that the best comes
    first (the score plus it, negated, under binpack; the score less it under spread, where the filter takes the group
    score off), ties in the plain ranking's order; nodes busy binding after the others.

    One C-level pass looks each node's bound up. The nodes of one bound are ranked among themselves (`_bound_run`) only
    when the merge needs them: a bound's best key is the best score of any node with that bound, so the runs of lower
    bounds (Kunlunxin's steps of 1,000 against scores of a few points) are not even sorted while a run above them still
    holds a better key."""
    spread = bounds.policy == SPREAD
    per_view = list(map(bounds.__getitem__, map(_BUSY_KEY, views)))
    present = [bound for bound in bounds.distinct() if bound in per_view]  # highest first: best keys first
    if not present:
        return iter(())
    top = min(map(_BY_SCORE, views)) if spread else -max(map(_BY_SCORE, views))
    merged = _merged_as_needed([_bound_run(views, per_view, bound, spread) for bound in present],
                               [top - bound for bound in present])
    return busy_last(merged, busy, _keyed_name)


def _bound_run(views: list[NodeView], per_view: list[float], bound: float, spread: bool) -> Iterator[Keyed]:
    """The nodes of one bound in the plain ranking's order (picked out at C level, sorted on the first look), as merge
    keys: the signed bound of the total (lowest first), then the node's order."""
    run = list(compress(views, map(bound.__eq__, per_view)))
    run.sort(key=_BY_NAME)
    run.sort(key=_BY_SCORE, reverse=not spread)
    if spread:
        for view in run:
            yield view.score - bound, (view.score, view.inventory.name), view
    else:
        for view in run:
            yield -(view.score + bound), (-view.score, view.inventory.name), view


def _merged_as_needed(runs: list[Iterator[Keyed]], firsts: list[float]) -> Iterator[Keyed]:
    """``runs`` merged by key, a run opened only once its best possible key (``firsts``, ascending) could come before
    the next key of those open, or tie it."""
    heap: list[tuple[float, RankOrder, NodeView, Iterator[Keyed]]] = []
    opened = 0
    while True:
        while opened < len(runs) and (not heap or firsts[opened] <= heap[0][0]):
            first = next(runs[opened], None)
            if first is not None:
                heapq.heappush(heap, (*first, runs[opened]))
            opened += 1
        if not heap:
            return
        key, order, view, run = heap[0]
        yield key, order, view
        following = next(run, None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (*following, run))


def busy_last(ranked: Iterable[T], busy: Collection[str], name: Callable[[T], str]) -> Iterator[T]:
    """``ranked`` with the nodes named in ``busy`` (``name`` says each one's) moved behind the others, in the same order
    among themselves, lazily: a filter that stops at the first free node that fits looks no further (a sort by busyness
    would touch every candidate of a 5,000-node cluster); a busy node is tried only when no other fits."""
    if not busy:
        yield from ranked
        return
    deferred: list[T] = []
    for item in ranked:
        if name(item) in busy:
            deferred.append(item)
        else:
            yield item
    yield from deferred


def _keyed_name(keyed: Keyed) -> str:
    return keyed[1][1]
