"""Whole XPUs' bubble term in the node ranking (hami_web.core.families.kunlunxin_topology.XPU_TOPOLOGY through
`hami_web.core.choose.choose_node`), from HAMi v2.10's ``KunlunDevices.ScoreNode`` and ``calcscore``
(``pkg/device/kunlun/device.go``, ``topo.go``; Go tests ``Test_ScoreNode``, ``TestCalcscore``).

Covers: of two nodes with the same plain score the one where the pod's cards earn the higher term wins, under binpack
and spread alike (HAMi adds the term under both); the term counts for a one-card pod too; vXPUs earn none; the bounded
search never skips the winner for a node that only its term lifts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from hami_web.core.busyrank import BusyBounds, by_busy_bound
from hami_web.core.choose import Placement, choose_node
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.families import build_catalog
from hami_web.core.families.kunlunxin import CARD_MEMORY_MIB, VXPU_CW, XPU_CW
from hami_web.core.options import PodOptions, pod_options
from hami_web.core.requests import ContainerRequest, PodRequest, family_request
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view

from .builders import place_as_everywhere

CATALOG = build_catalog()
XPU = CATALOG[XPU_CW]
VXPU = CATALOG[VXPU_CW]


def view(name: str, busy: Sequence[int], family: str = XPU_CW, cards: int = 8) -> NodeView:
    """A node of ``cards`` whole XPUs (or vXPUs), the cards in ``busy`` each running one whole-card task."""
    devices = tuple(Device(uuid=f"{name}-kunlun-{i}", index=i, count=100 if family == XPU_CW else 10,
                           memory_mib=CARD_MEMORY_MIB, cores=100, type="kunlun" if family == XPU_CW else "XPU-P800",
                           family=family) for i in range(cards))
    inventory = NodeInventory(name=name, devices=devices, grouping={family: CATALOG[family].grouping})
    return build_node_view(inventory, {f"{name}-kunlun-{i}": DeviceUsage(1, CARD_MEMORY_MIB, 100) for i in busy})


def ask(count: int, family: str = XPU_CW) -> ContainerRequest:
    if family == XPU_CW:
        resources = {"kunlunxin.com/xpu": str(count)}
    else:
        resources = {"kunlunxin.com/vxpu": str(count), "kunlunxin.com/vxpu-memory": "24576"}
    return family_request({"name": "c0", "resources": {"limits": resources}}, init=False, family=CATALOG[family])


def place(views: Sequence[NodeView], containers: Sequence[ContainerRequest], policy: str) -> Placement:
    options = pod_options({}, node_policy=policy, gpu_policy="spread", catalog=CATALOG)
    placement = choose_node(PodRequest(containers=tuple(containers)), options, [v.name for v in views],
                            {v.name: v for v in views})
    assert isinstance(placement, Placement), placement
    return placement


@pytest.mark.parametrize("policy", ["binpack", "spread"])
@pytest.mark.parametrize(("low_busy", "high_busy", "count", "low_term", "high_term"), [
    # Two cards: busy 0, 4 (4 bubbles) → the pod's 1-2 (2 bubbles): -2, HAMi's "other" 1,000; busy 0, 1 (2 bubbles)
    # → 2-3 (2): 0, 2,000.
    ((0, 4), (0, 1), 2, 1000.0, 2000.0),
    # One card (3 bubbles): busy 0, 1 (2) → +1, 1,000; busy 0, 4 (4) → -1, 3,000.
    ((0, 1), (0, 4), 1, 1000.0, 3000.0),
    # Four cards: busy 0, 4 (4) → a cross quad, two cards a wing (2): -2, 1,000; busy 0, 1 (2) → the right wing
    # (1): -1, 3,000.
    ((0, 4), (0, 1), 4, 1000.0, 3000.0),
])
def test_of_two_nodes_with_the_same_score_the_bubble_term_decides(
        low_busy: tuple[int, ...], high_busy: tuple[int, ...], count: int, low_term: float, high_term: float,
        policy: str) -> None:
    """HAMi Test_ScoreNode / TestCalcscore on two nodes whose plain scores are equal: the term alone decides. HAMi
    adds it to the node score under both policies (``OverrideScore``; Kunlun is no ``policyNeutralScorer``) and takes
    the highest total under binpack, the lowest under spread (``NodeScoreList.Less``, the last after sorting): binpack
    places on the node of the higher term, spread on the lower one. The expected node is named to lose a tie by
    name, so the term really ranks it first."""
    binpack = policy == "binpack"
    high = view("b-win" if binpack else "a-lose", high_busy)
    low = view("a-lose" if binpack else "b-win", low_busy)
    assert low.score == high.score
    placement = place([low, high], [ask(count)], policy)
    assert placement.node == "b-win"
    assert placement.node_score == (high.score + high_term if binpack else low.score + low_term)


def test_the_search_reaches_a_lower_ranked_node_that_only_its_term_lifts() -> None:
    """Binpack ranks the busier node first (a higher plain score, a few points: HAMi's ``ComputeDefaultScore``); the
    lighter node's term is higher by 1,000, so the bounded search must still fit it (the bound is the busy cards',
    not the wings' free memory, which a one-card ask would not even count)."""
    busier, lighter = view("a-busier", (0, 1, 4)), view("b-lighter", (0, 4))
    assert 0 < busier.score - lighter.score < 1000
    # One card (3 bubbles): busier 0, 1, 4 (1 + 2 = 3 bubbles) → 0, 2,000; lighter 0, 4 (4) → -1, 3,000.
    placement = place([busier, lighter], [ask(1)], "binpack")
    assert (placement.node, placement.node_score) == ("b-lighter", lighter.score + 3000.0)
    assert place([busier, view("c-idle", ())], [ask(1)], "binpack").node == "a-busier"  # idle: +2 bubbles, 0


def test_vxpus_earn_no_term() -> None:
    """HAMi Test_KunlunVDevices_ScoreNode: 0; the nodes rank by their plain score (ties by name)."""
    first, second = view("a", (0, 4), VXPU_CW), view("b", (0, 1), VXPU_CW)
    placement = place([first, second], [ask(1, VXPU_CW)], "binpack")
    assert placement.node_score == max(first.score, second.score)


def random_node(rng: random.Random, number: int) -> NodeView:
    """Eight whole XPUs (sometimes four; sometimes a card of half the memory, or of a type whole-XPU pods do not
    take), some busy, a few unhealthy or cordoned, some with a part of a card booked (scores of every size)."""
    name = f"n{number:03d}"
    cards = 4 if rng.random() < 0.1 else 8
    odd = rng.choice(("memory", "type", "", "", "", "", "", "", "", ""))
    devices = tuple(Device(uuid=f"{name}-kunlun-{i}", index=i, count=100, healthy=rng.random() > 0.05, cores=100,
                           memory_mib=CARD_MEMORY_MIB // 2 if i == 3 and odd == "memory" else CARD_MEMORY_MIB,
                           type="XPU-P800" if i == 3 and odd == "type" else "kunlun", family=XPU_CW)
                    for i in range(cards))
    cordoned = frozenset(device.uuid for device in devices if rng.random() < 0.03)
    inventory = NodeInventory(name=name, devices=devices, grouping={XPU_CW: XPU.grouping}, cordoned=cordoned)
    usage = {}
    for device in devices:
        roll = rng.random()
        if roll < 0.35:
            usage[device.uuid] = DeviceUsage(1, device.memory_mib, 100)
        elif roll < 0.4:
            usage[device.uuid] = DeviceUsage(1, rng.randint(1, device.memory_mib), rng.randint(0, 100))
    return build_node_view(inventory, usage)


def random_pod(rng: random.Random, names: Sequence[str]) -> tuple[PodRequest, PodOptions]:
    """One container of 1, 2, 4 or 8 cards (sometimes 3), or two containers, or an init container before one;
    sometimes a UUID selection; either policy."""
    count = rng.choice((1, 1, 2, 2, 4, 4, 8, 3))
    shape = rng.random()
    containers: tuple[ContainerRequest, ...] = (ask(count),)
    if shape < 0.15:
        containers = (ask(rng.choice((1, 2))), ask(rng.choice((1, 2))))
    elif shape < 0.25:
        containers = (family_request({"name": "i0", "resources": {"limits": {"kunlunxin.com/xpu": "1"}}}, init=True,
                                     family=XPU), ask(rng.choice((1, 2))))
    annotations = {}
    if rng.random() < 0.15:
        nodes = rng.sample(list(names), 5)
        annotations["hami.io/use-xpu-uuid"] = ",".join(f"{node}-kunlun-{rng.randrange(8)}" for node in nodes
                                                        for _ in range(4))
    options = pod_options(annotations, node_policy=rng.choice(("binpack", "spread")), gpu_policy="spread",
                          catalog=CATALOG)
    return PodRequest(containers=containers), options


@pytest.mark.parametrize("seed", range(4))
def test_the_ranking_by_bound_places_as_fitting_every_node(seed: int) -> None:
    """The filter ranks nodes by the most their shape's term allows (`BubbleTerm.term_range`) and stops once no node can
    beat the best: on random clusters (busy cards, unhealthy and cordoned cards, nodes of four cards, a card unlike the
    others, nodes busy binding) and random pods (1-8 cards, several containers, an init container, UUID selections,
    both policies), one placed after another as the cache books them, every placement is the one fitting every node
    gives: the same node, cards and score, or none where nothing fits."""
    rng = random.Random(seed)
    views = {view.name: view for view in (random_node(rng, number) for number in range(60))}
    for _ in range(120):
        busy = frozenset(rng.sample(sorted(views), 6))
        request, options = random_pod(rng, sorted(views))
        place_as_everywhere(request, options, views, busy)


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_the_ranking_by_bound_orders_as_a_full_sort_would(policy: str) -> None:
    """`by_busy_bound` sorts each bound's nodes only when the merge needs them: with bounds closer together than the
    nodes' scores (so the runs interleave), it gives the order of a full sort by the bound of each node's total (its
    score plus the most group score under binpack, less it under spread), ties in the plain rank's order (score, then
    name), nodes busy binding after the others, under both policies."""
    rng = random.Random(5)
    views = [random_node(rng, number) for number in range(80)]
    request, _ = random_pod(rng, [v.name for v in views])
    options = pod_options({}, node_policy=policy, gpu_policy="spread", catalog=CATALOG)
    table = BusyBounds(request, options, None)
    closeness = [0.0, 2.5, -3.0, 7.25, -math.inf]
    table.update({key: closeness[n % len(closeness)] for n, key in enumerate(sorted({v.busy_key for v in views}))})
    busy = frozenset(v.name for v in views[::7])
    spread = policy == "spread"

    def key(node: NodeView) -> tuple[bool, float, float, str]:
        """The bound of the total (the filter takes the group score off under spread), best first, then the rank."""
        bound = table[node.busy_key]
        return (node.name in busy, node.score - bound if spread else -(node.score + bound),
                node.score if spread else -node.score, node.name)

    assert [v.name for _, _, v in by_busy_bound(table, views, busy)] == [v.name for v in sorted(views, key=key)]
