"""Ranking nodes for a pod whose families add their own node-score term (Metax GPU's topology loss and score:
docs/device-families.md#device-families), by score plus term, without sorting the nodes again.

The term depends only on the node's node-score annotation set (`NodeView.score_annotations`) and a cluster has few
distinct sets (a table per card layout): each ask judges each set once (`FamilyTerms`), one C-level pass finds the
sets present, and the plain ranking's run of each set (already in order: the term is the same on all its nodes) is
merged with the others as the filter consumes it (`by_family_term`), so a filter that stops at the first node that fits
pays per node it looks at, not per node of the cluster.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import compress, tee
from operator import attrgetter

from hami_web.core.options import SPREAD
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView

_ANNOTATIONS = attrgetter("score_annotations")


class FamilyTerms(dict[str, float]):
    """For one ask: by node-score annotation set (its JSON text), the sum of the asked families' terms
    (`hami_web.core.families.family.NodeScore`) for the devices the ask gets of each, under its node policy; each set
    judged on its first look-up (0 for a node without any). Plain dict operations, as the filter's other memos:
    concurrent filters at worst judge a set twice."""

    __slots__ = ("policy", "request")

    def __init__(self, request: PodRequest, policy: str) -> None:
        super().__init__()
        self.request, self.policy = request, policy

    def __missing__(self, text: str) -> float:
        given = json.loads(text) if text else {}
        term = self[text] = sum(rule.term(given, devices, self.policy)
                                for rule, devices in self.request.node_terms) if given else 0.0
        return term


def present_terms(terms: FamilyTerms, views: Sequence[NodeView]) -> tuple[dict[str, float] | None, float]:
    """The term of each annotation set ``views`` carry, for `by_family_term`; ``(None, term)`` when every node earns
    the same ``term`` (none: 0), whose order is the scores' own."""
    present = {text: terms[text] for text in set(map(_ANNOTATIONS, views))}
    if len(set(present.values())) <= 1:
        return None, next(iter(present.values()), 0.0)
    return present, 0.0


def by_family_term(eligible: Iterable[NodeView], terms: Mapping[str, float], policy: str) -> Iterator[NodeView]:
    """``eligible`` (the plain ranking, score then name, of the nodes the filter may look at) re-ranked
    by score plus each node's term (``terms``, by annotation set), ties by name, lazily: each set's run keeps the plain
    order and is picked out at C level as it is consumed (each node read once, then handed to every run); the merge
    stays on the leading run while its nodes beat the other runs' heads (a comparison a node, a heap operation only when
    the lead changes), and once one run is left it is passed on as it is.

    Binpack takes the highest total first, spread the lowest: the key is the total signed so that the best is the
    lowest (exactly the float `hami_web.core.choose` reports as the node's score, negated under binpack)."""
    sign = 1.0 if policy == SPREAD else -1.0
    copies = tee(eligible, 2 * len(terms))  # per run: the nodes, and the nodes its selector reads
    runs = [(compress(copies[2 * number], map(text.__eq__, map(_ANNOTATIONS, copies[2 * number + 1]))), term)
            for number, (text, term) in enumerate(terms.items())]
    heads: list[tuple[float, str, int, NodeView]] = []
    for number, (run, term) in enumerate(runs):
        view = next(run, None)
        if view is not None:
            heads.append((sign * (view.score + term), view.inventory.name, number, view))
    heapq.heapify(heads)  # node names are distinct: a tie never reaches the run's number
    while len(heads) > 1:
        _, _, number, view = heapq.heappop(heads)
        next_key, next_name = heads[0][0], heads[0][1]
        yield view
        run, term = runs[number]
        for view in run:
            key = sign * (view.score + term)
            if key < next_key or (key == next_key and view.inventory.name < next_name):
                yield view
            else:
                heapq.heappush(heads, (key, view.inventory.name, number, view))
                break
    if heads:
        _, _, number, view = heads[0]
        yield view
        yield from runs[number][0]
