"""Metax GPU's topology terms in the filter's ranking (`hami_web.core.termrank`; HAMi v2.10
``pkg/device/metax/device.go`` ``MetaxDevices.ScoreNode``: binpack 2000 − the node's topology loss for the pod's card
count, spread 2000 − its topology score, added to the node's score).

Covers: the merge of each annotation set's run (`by_family_term`) gives the order of a full sort by score plus the
set's term, ties by name, under both policies, with totals tied across sets and sets without any node; each annotation
set judged once per ask (`FamilyTerms`), and no merge when every node earns the same term (`present_terms`); on random
clusters of Metax GPU nodes (several topology tables, nodes without them, 4 and 8 cards, cards in use, full nodes, nodes
busy binding), pods of 1, 2, 4 and 8 cards and of two containers, both policies, placed one after another, every
placement is the one fitting every node gives (`fitted_everywhere`), its reported score included.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from hami_web.core.choose import rank_nodes
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.options import PodOptions
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.core.termrank import FamilyTerms, by_family_term, present_terms
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view
from hami_web.state.nodes import node_record, node_state

from .builders import node_terms_on, place_as_everywhere

METAX = DEFAULT_CATALOG["Metax-GPU"]
LOSSES, SCORES = "metax-tech.com/gpu.topology.losses", "metax-tech.com/gpu.topology.scores"
# Values 15 apart: a whole card moves a node of 8 cards 3.75 points and one of 4 cards 7.5, so totals tie across tables.
TABLES = ('{"1":0,"2":15,"4":30,"8":60}', '{"1":15,"2":45,"4":30}', '{"1":30,"2":0,"4":90,"8":15}', "{}", "oops")


def metax_view(rng: random.Random, number: int) -> NodeView:
    """A Metax GPU node as the node reader builds it: 4 or 8 cards, random topology tables (or none), some cards in
    use (every one on a full node)."""
    cards = rng.choice((4, 8))
    annotations = {} if rng.random() < 0.15 else {LOSSES: rng.choice(TABLES), SCORES: rng.choice(TABLES)}
    node = {"metadata": {"name": f"metax-{number:02d}", "annotations": annotations},
            "status": {"capacity": {METAX.resources.count: str(cards)},
                       "allocatable": {METAX.resources.count: str(cards)}}}
    state = node_state(node_record(node, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None, state.error
    full = rng.random() < 0.15
    usage = {device.uuid: DeviceUsage(1, device.memory_mib, device.cores)
             for device in state.inventory.devices if full or rng.random() < 0.3}
    return build_node_view(state.inventory, usage)


def metax_pod(cards: int, containers: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": {}},
            "spec": {"containers": [{"name": f"c{n}", "resources": {"limits": {METAX.resources.count: str(cards)}}}
                                    for n in range(containers)]}}


@pytest.mark.parametrize("policy", ["binpack", "spread"])
@pytest.mark.parametrize("seed", range(3))
def test_the_merge_ranks_as_a_full_sort_by_score_plus_term(policy: str, seed: int) -> None:
    """`by_family_term` over the plain ranking gives the order of one sort by score plus the node's term, ties by
    name: terms apart by less than the scores' range, apart by more, equal totals across sets, and a set no node
    carries (its run is empty)."""
    rng = random.Random(seed)
    texts = ["", '{"a":1}', '{"b":2}', '{"c":3}']
    terms = {"": 0.0, '{"a":1}': 7.5, '{"b":2}': -3.75, '{"c":3}': 40.0, '{"none":0}': 1000.0}
    views = [metax_view(rng, number) for number in range(80)]
    views = [build_node_view(replace(v.inventory, annotations=rng.choice(texts)),
                             {d.uuid: u for d, u in zip(v.inventory.devices, v.usage, strict=True)}) for v in views]
    sign = 1 if policy == "spread" else -1
    expected = sorted(views, key=lambda v: (sign * (v.score + terms[v.score_annotations]), v.name))
    merged = list(by_family_term(rank_nodes(views, policy), terms, policy))
    assert [v.name for v in merged] == [v.name for v in expected]
    ties = {sign * (v.score + terms[v.score_annotations]) for v in views}
    assert len(ties) < len(views)  # the case exercises tied totals


def test_each_annotation_set_is_judged_once_and_one_term_everywhere_merges_nothing() -> None:
    request = pod_request(metax_pod(2), RequestDefaults.of(DEFAULT_CATALOG))
    terms = FamilyTerms(request, "binpack")
    judged: list[str] = []
    original = FamilyTerms.__missing__

    def counting(self: FamilyTerms, text: str) -> float:
        judged.append(text)
        return original(self, text)

    rng = random.Random(5)
    views = [metax_view(rng, number) for number in range(30)]
    FamilyTerms.__missing__ = counting  # type: ignore[method-assign]
    try:
        for _ in range(3):
            present, _ = present_terms(terms, views)
    finally:
        FamilyTerms.__missing__ = original  # type: ignore[method-assign]
    assert sorted(judged) == sorted({v.score_annotations for v in views})
    assert present == {v.score_annotations: node_terms_on(request, v, "binpack") for v in views}
    same = [v for v in views if v.score_annotations == views[0].score_annotations]
    assert present_terms(terms, same) == (None, node_terms_on(request, same[0], "binpack"))


@pytest.mark.parametrize("seed", range(4))
def test_metax_pods_are_placed_as_fitting_every_node(seed: int) -> None:
    """On random Metax GPU clusters, one pod after another (1, 2, 4 or 8 cards, or two containers of 2), both
    policies, some nodes busy binding: the node, its reported score (score plus the topology term) and the cards are
    those of fitting every node and taking the best total, ties by name."""
    rng = random.Random(seed)
    views = {view.name: view for view in (metax_view(rng, number) for number in range(40))}
    defaults = RequestDefaults.of(DEFAULT_CATALOG)
    for _ in range(60):
        shape = metax_pod(2, containers=2) if rng.random() < 0.15 else metax_pod(rng.choice((1, 1, 2, 4, 8)))
        request = pod_request(shape, defaults)
        options = PodOptions(node_policy=rng.choice(("binpack", "spread")))
        busy = frozenset(rng.sample(sorted(views), 3))
        place_as_everywhere(request, options, views, busy)
