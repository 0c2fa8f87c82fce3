"""Kunlunxin's eight-card topology (hami_web.core.families.kunlunxin_topology), table-driven from HAMi v2.10's
``pkg/device/kunlun/topo_test.go`` and ``device_test.go`` (each case names its Go test), and the picker checked on
every occupancy of eight cards against a brute-force reference written from the rules.

Covers: the picker (counts 1, 2, 4, 8 and the refused ones; wings, cross pairs, cross quads; slot order as HAMi
hands it), the bubble score, and `CardTopology` (the picker as the families' grouping: index order, the policy order
where HAMi would still place, its explanations and labels; whole XPUs' bubble term on a node and its bound).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations

import pytest

from hami_web.core.devices import Device
from hami_web.core.families.kunlunxin import CARD_MEMORY_MIB
from hami_web.core.families.kunlunxin_topology import (
    CROSS_PAIRS,
    CROSS_QUADS,
    UNKNOWN_SHAPE,
    XPU_TOPOLOGY,
    BubbleTerm,
    CardTopology,
    Slot,
    bubble_score,
    pick_cards,
)


def slots(busy: Sequence[int] = (), order: Sequence[int] = tuple(range(8))) -> list[Slot]:
    """Eight cards in ``order`` (slot order), those in ``busy`` not fitting (HAMi topo_test.go ``newDevices``)."""
    return [Slot(index=index, fits=index not in busy) for index in order]


def only_free(free: Sequence[int]) -> list[int]:
    """HAMi topo_test.go ``onlyFree``: the busy cards that leave exactly ``free`` free."""
    return [index for index in range(8) if index not in free]


# HAMi device_test.go Test_graphSelect (FitXPU: a card fits when unused): (case, busy cards, count, picked).
GRAPH_SELECT = [
    ("full allocate", (), 8, (0, 1, 2, 3, 4, 5, 6, 7)),
    ("full allocate not success", (5,), 8, ()),
    ("allocate 2 cards", (5,), 2, (4, 6)),
    ("allocate 1 card (one busy on the right)", (5,), 1, (4,)),
    ("allocate 1 card (two busy on the right)", (6, 7), 1, (4,)),
    ("allocate 2 card according to interconnect", (0, 1, 2, 4, 5, 6), 2, (3, 7)),
    ("allocate 4 cards according to interconnect when have 5 cards", (2, 3, 7), 4, (0, 1, 4, 5)),
    ("allocate 4 cards according to interconnect when have 6 cards, leave 2 cards unconnected", (3, 6), 4,
     (0, 1, 4, 5)),
    ("allocate 4 cards according to interconnect when have 6 cards, leave 2 cards connected", (2, 6), 4,
     (0, 1, 4, 5)),
    # HAMi topo_test.go
    ("TestGraghSelect_AllEightAvailable", (), 8, (0, 1, 2, 3, 4, 5, 6, 7)),
    ("TestGraghSelect_EightNotFullyAvailable", (0,), 8, ()),
    ("TestGraghSelect_SingleDevice", (), 1, (0,)),
    ("TestGraghSelect_FourFromLeftWing", (4, 5, 6, 7), 4, (0, 1, 2, 3)),
    ("TestInterconnect_TwoDevices (only the pair 0-4 free)", only_free((0, 4)), 2, (0, 4)),
    ("TestInterconnect_FourDevices (only the quad 0-1-4-5 free)", only_free((0, 1, 4, 5)), 4, (0, 1, 4, 5)),
    ("TestInterconnect_UnsupportedCount", (), 3, ()),
]


@pytest.mark.parametrize(("busy", "count", "picked"), [case[1:] for case in GRAPH_SELECT],
                         ids=[case[0] for case in GRAPH_SELECT])
def test_picker_matches_hamis_graph_select_table(busy: Sequence[int], count: int, picked: tuple[int, ...]) -> None:
    """HAMi device_test.go Test_graphSelect and topo_test.go TestGraghSelect_* / TestInterconnect_*."""
    assert pick_cards(slots(busy), count) == picked


def test_two_cards_with_every_card_free_are_linked() -> None:
    """HAMi topo_test.go TestInterconnect_TwoDevices_ChoosesAmongMultipleCandidates: two distinct linked cards."""
    first, second = pick_cards(slots(), 2)
    assert first != second and first // 4 == second // 4


@pytest.mark.parametrize("count", [0, 3, 5, 6, 7, 9, 16])
def test_counts_outside_one_two_four_eight_are_never_placed(count: int) -> None:
    """HAMi graghSelect: only 1, 2, 4 and 8 cards have a shape (TestInterconnect_UnsupportedCount)."""
    assert pick_cards(slots(), count) == ()


# HAMi device_test.go Test_graphSelectVXPU: (case, per card (tasks, used MiB), ask MiB, count, picked).
IDLE = (0, 0)
GRAPH_SELECT_VXPU = [
    ("full allocate with unused devices", [IDLE] * 8, 24576, 8, (0, 1, 2, 3, 4, 5, 6, 7)),
    ("allocate with matching memory requirements",
     [IDLE, (1, 24576), IDLE, (2, 49152), IDLE, (1, 49152), IDLE, IDLE], 24576, 4, (0, 1, 2, 3)),
    ("allocate with mixed memory requirements",
     [IDLE, (2, 49152), IDLE, (1, 49152), IDLE, (1, 24576), IDLE, IDLE], 24576, 4, (4, 5, 6, 7)),
    ("no suitable devices due to memory mismatch", [(1, 49152)] * 8, 24576, 2, ()),
    ("allocate 1 card with matching memory",
     [(1, 24576), (1, 24576), (1, 49152), IDLE, IDLE, (1, 24576), IDLE, IDLE], 24576, 1, (0,)),
    ("allocate 2 cards with different memory requirements",
     [IDLE, (2, 49152), (1, 24576), (1, 49152), IDLE, IDLE, (1, 24576), IDLE], 24576, 2, (0, 1)),
]


@pytest.mark.parametrize(("cards", "ask", "count", "picked"), [case[1:] for case in GRAPH_SELECT_VXPU],
                         ids=[case[0] for case in GRAPH_SELECT_VXPU])
def test_vxpu_picker_matches_hamis_table(cards: list[tuple[int, int]], ask: int, count: int,
                                         picked: tuple[int, ...]) -> None:
    """HAMi device_test.go Test_graphSelectVXPU: the picker over FitVXPU's verdicts (a card shared by one slice size;
    the verdict itself is the fit's, tested with the family in test_kunlunxin_family.py)."""
    fitting = [Slot(index, used + ask <= CARD_MEMORY_MIB and (tasks == 0 or used // tasks == ask))
               for index, (tasks, used) in enumerate(cards)]
    assert pick_cards(fitting, count) == picked


def test_picker_reads_wings_by_slot_and_links_by_index() -> None:
    """HAMi graghSelect counts a wing by the card's position in the list it is handed and names cards by index:
    with the busy cards sorted last (binpack), one card goes to the slot wing holding a lone free card."""
    order = (1, 2, 3, 4, 5, 6, 7, 0)  # card 0 busy, sorted to the end
    assert pick_cards(slots(busy=(0,), order=order), 1) == (5,)
    assert pick_cards(slots(busy=(0,)), 1) == (1,)  # in index order the left wing has three free


# ---- the sweep: every occupancy of eight cards, each count, against a reference written from the rules ----

def reference_pick(order: Sequence[int], fitting: frozenset[int], count: int) -> tuple[int, ...]:
    """What the rules say, by brute force: enumerate every set of ``count`` fitting cards, keep the shapes the rules
    allow, and take the best by the rules' preference.

    Rules (HAMi topo.go): eight cards only all together. Otherwise a container stays inside one wing (slots 0–3 or
    4–7 of the list) when a wing can hold it, taking that wing's first fitting cards; the wing is the one whose
    number of fitting cards comes first in the preference (one card: 1, 3, 2, 4; else count, count+1, …, 4), the
    left first on a tie. When no wing can, two cards are a cross pair (i, i+4), the first fitting card in slot order
    first; four cards are a listed cross quad, and only when 4–6 cards fit: with 4 or 5 the first listed quad they
    hold, with 6 the first whose two leftover cards are linked (same wing or a cross pair), else the last they hold.
    """
    if count == 8:
        return tuple(order) if len(order) == 8 and fitting >= set(order) else ()
    if count not in (1, 2, 4):
        return ()
    wing_of = {index: position // 4 for position, index in enumerate(order)}
    in_wing = [[i for i in order if wing_of[i] == wing and i in fitting] for wing in (0, 1)]
    preference = (1, 3, 2, 4) if count == 1 else tuple(range(count, 5))
    ranked: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for combo in combinations(sorted(fitting), count):
        wings = {wing_of[i] for i in combo}
        if len(wings) == 1:
            wing = wings.pop()
            first_fitting = in_wing[wing][:count]
            if sorted(first_fitting) == list(combo):
                ranked.append(((0, preference.index(len(in_wing[wing])), wing), tuple(first_fitting)))
        elif count == 2 and combo[1] - combo[0] == 4:
            first = min(combo, key=order.index)
            ranked.append(((1, order.index(first)), (first, combo[0] + combo[1] - first)))
        elif count == 4 and combo in CROSS_QUADS and len(fitting) in (4, 5, 6):
            position = CROSS_QUADS.index(combo)
            if len(fitting) < 6:
                ranked.append(((1, position), combo))
            else:
                a, b = sorted(fitting - set(combo))
                linked = a // 4 == b // 4 or (a, b) in CROSS_PAIRS
                ranked.append(((1, 0, position) if linked else (1, 1, -position), combo))
    return min(ranked)[1] if ranked else ()


def _occupancies() -> list[frozenset[int]]:
    return [frozenset(i for i in range(8) if mask >> i & 1) for mask in range(256)]


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 6, 7, 8])
def test_picker_agrees_with_the_reference_on_all_256_occupancies(count: int) -> None:
    """Generated: every subset of eight cards free, in index order, for each count."""
    for fitting in _occupancies():
        want = reference_pick(tuple(range(8)), fitting, count)
        got = pick_cards([Slot(i, i in fitting) for i in range(8)], count)
        assert got == want, f"free {sorted(fitting)} count {count}: picked {got}, rules say {want}"


def test_picker_agrees_with_the_reference_in_shuffled_slot_orders() -> None:
    """Generated: the 256 occupancies in 12 random slot orders (HAMi hands the picker policy-sorted cards)."""
    rng = random.Random(38)
    for _ in range(12):
        order = tuple(rng.sample(range(8), 8))
        for fitting in _occupancies():
            for count in (1, 2, 4, 8):
                want = reference_pick(order, fitting, count)
                got = pick_cards([Slot(i, i in fitting) for i in order], count)
                assert got == want, f"order {order} free {sorted(fitting)} count {count}: {got} vs {want}"


def test_every_pick_is_a_set_of_fitting_distinct_cards_of_the_count() -> None:
    """Whatever the occupancy, a pick never holds a busy card, a card twice, or a wrong number of cards."""
    for fitting in _occupancies():
        for count in (1, 2, 4, 8):
            picked = pick_cards([Slot(i, i in fitting) for i in range(8)], count)
            assert picked == () or (len(set(picked)) == count and set(picked) <= fitting)


def test_cards_past_the_eighth_are_never_picked() -> None:
    """The topology is eight cards; a ninth slot is in no wing (HAMi's devicepick never reaches it)."""
    ten = [Slot(i, i >= 6) for i in range(10)]
    assert pick_cards(ten, 2) == (6, 7)
    assert pick_cards(ten, 4) == ()


# ---- the bubble score ----

@pytest.mark.parametrize(("used_before", "chosen", "score"), [
    # HAMi topo_test.go TestCalcscore
    ((0,), (0, 1), 3000.0),
    ((0,), (4,), 2000.0),
    ((0, 1), (0,), 1000.0),
    ((0, 1, 2, 3), (0,), 0.0),
    # HAMi device_test.go Test_ScoreNode: Scenario 1 (left wing busy, all eight given), Scenario 2 (idle node)
    ((0, 1, 2, 3), (0, 1, 2, 3, 4, 5, 6, 7), 3000.0),
    ((), (0,), 0.0),
    # bubbles: empty 1, whole wing 0+1, lone card 2+1; a change of -2 is none of HAMi's cases: 1000
    ((0, 4), (0, 1, 2, 3), 1000.0),
])
def test_bubble_score(used_before: tuple[int, ...], chosen: tuple[int, ...], score: float) -> None:
    """HAMi ScoreNode / calcscore / countbubble (TestCountbubble's values are the bubbles behind each row)."""
    assert bubble_score(used_before, chosen) == score


# ---- the topology as the family's way of grouping ----

def xpus(count: int = 8) -> list[Device]:
    return [Device(uuid=f"n-kunlun-{i}", index=i, count=100, memory_mib=CARD_MEMORY_MIB, cores=100, type="kunlun",
                   family="kunlun") for i in range(count)]


def test_grouping_picks_by_index_whatever_the_policy_order() -> None:
    """The fit hands passing positions in policy order; the topology reads the card indices (Test_graphSelect's
    "allocate 2 cards": card 5 busy, two cards → 4 and 6)."""
    devices = xpus()
    ordered = [7, 6, 4, 3, 2, 1, 0]  # some policy's order, card 5 busy
    assert sorted(CardTopology().pick(ordered, devices, 2)) == [4, 6]


def test_grouping_maps_indices_back_to_positions() -> None:
    """Devices need not be listed in index order: the pick returns positions in the node's list."""
    devices = list(reversed(xpus()))  # position p holds card 7 - p
    picked = CardTopology().pick([0, 1, 2, 3, 4, 5, 6, 7], devices, 4)
    assert sorted(devices[p].index for p in picked) == [0, 1, 2, 3]


@pytest.mark.parametrize(("free", "count", "picked"), [
    ((0, 1, 2, 4), 4, [0, 1, 2, 4]),  # no wing or quad holds them: the first in policy order, as HAMi places it
    ((1, 6), 2, [1, 6]),  # no cross pair
    ((0, 1, 2, 4), 3, []),  # three is never a shape
    ((0, 1, 2, 3, 4, 5, 6), 8, []),  # eight needs every card
])
def test_grouping_falls_back_to_the_policy_order_where_hami_would_place(free: tuple[int, ...], count: int,
                                                                        picked: list[int]) -> None:
    """HAMi runs graghSelect on its policy-sorted list (free cards first), so enough free cards for 1, 2 or 4 are
    always placed there; ours keeps the real topology first and never refuses those."""
    assert CardTopology().pick(list(free), xpus(), count) == picked


def test_grouping_describes_and_labels() -> None:
    """``explain`` says why no shape holds; the tools name a card's wing."""
    topology, devices = CardTopology(), xpus()
    assert topology.describe(devices[:3], 3) == "3 cards is not a Kunlunxin shape (1, 2, 4 or 8 cards)"
    assert topology.describe(devices[:3], 4) == "cards free for the container: 0, 1, 2; 4 asked"
    assert topology.describe(devices[:4], 4) == ""
    assert (topology.label(devices[2]), topology.label(devices[5])) == ("wing 0-3", "wing 4-7")
    assert topology.applies(devices) and not topology.scored and topology.weight == 0
    assert (topology.group_of(devices[3]), topology.group_of(devices[4])) == (0, 1)
    assert topology.score([devices[:2]], "binpack", devices[2:3]) == 0.0  # vXPUs: no term (KunlunVDevices.ScoreNode)
    assert topology.mutex_conflicts(devices, [1] * 8) == set()


# ---- whole XPUs' bubble term on a node ----

@pytest.mark.parametrize(("busy", "containers", "policy", "term"), [
    # HAMi device_test.go Test_ScoreNode Scenario 1: the left wing busy, the pod gets all eight cards
    ((0, 1, 2, 3), ((0, 1, 2, 3, 4, 5, 6, 7),), "binpack", 3000.0),
    # Test_ScoreNode Scenario 2: an idle node, one card (policy spread): 0
    ((), ((0,),), "spread", -0.0),
    # TestCalcscore's rows on a node: card 0 busy, the pod's cards 0-1 / 4
    ((0,), ((0, 1),), "binpack", 3000.0),
    ((0,), ((4,),), "binpack", 2000.0),
    # the pod's cards of all its containers together (HAMi's ``current``: every container's Idx)
    ((0, 1), ((4,), (5,)), "binpack", 2000.0),
    # added under spread too: the filter subtracts the term under spread, so it is handed back negated
    ((0,), ((0, 1),), "spread", -3000.0),
])
def test_whole_xpus_earn_hamis_bubble_term(busy: tuple[int, ...], containers: tuple[tuple[int, ...], ...],
                                           policy: str, term: float) -> None:
    """HAMi KunlunDevices.ScoreNode: calcscore(previous cards with Used > 0, the pod's cards), 0-3,000, under either
    policy (no ×10,000: KunlunDevices is no policyNeutralScorer)."""
    devices = xpus()
    placed = [[devices[index] for index in container] for container in containers]
    assert XPU_TOPOLOGY.score(placed, policy, [devices[index] for index in busy]) == term
    assert XPU_TOPOLOGY.scored and XPU_TOPOLOGY.busy_term is not None and not XPU_TOPOLOGY.spread_gain


BUBBLES = BubbleTerm()
EVERY_SET = [tuple(c) for n in range(9) for c in combinations(range(8), n)]  # the 256 subsets of eight cards


def node_key(busy: Sequence[int], devices: Sequence[Device] | None = None,
             cordoned: frozenset[str] = frozenset()) -> int:
    """`BubbleTerm.node_key` of a node whose cards in ``busy`` each run one whole-card task."""
    devices = xpus() if devices is None else devices
    rows = [(1, CARD_MEMORY_MIB, 100) if device.index in busy else (0, 0, 0) for device in devices]
    return BUBBLES.node_key(devices, rows, cordoned)


def given_terms(busy: Sequence[int], passing: Sequence[int], count: int) -> set[float]:
    """The terms of the cards `CardTopology.pick` gives a container of ``count`` when ``passing`` pass, over two
    policy orders (the fallback takes the first in policy order)."""
    devices = xpus()
    terms = set()
    for ordered in (list(passing), list(reversed(passing))):
        picked = XPU_TOPOLOGY.pick(ordered, devices, count)
        if len(picked) == count:
            terms.add(XPU_TOPOLOGY.score([[devices[p] for p in picked]], "binpack", [devices[b] for b in busy]))
    return terms


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_the_range_is_exactly_the_terms_the_fit_can_give(count: int) -> None:
    """The ranking bounds a node's term by `BubbleTerm.term_range` of its shape and skips a node that cannot win by it,
    so a bound below a term the fit gives would skip a winning node (a wrong placement). On each of the 256 busy sets
    of eight cards (the others open), over every set of open cards that may pass (a UUID selection can leave any) and
    two policy orders: every term the pick gives lies in the range, and the range's ends are given (it is exact);
    None exactly where nothing fits."""
    for busy in EVERY_SET:
        open_cards = [index for index in range(8) if index not in busy]
        given = set().union(*(given_terms(busy, passing, count) for n in range(len(open_cards) + 1)
                              for passing in combinations(open_cards, n)))
        terms = BUBBLES.term_range(node_key(busy), (count,), False)
        assert (terms is None) == (not given), busy
        if terms is not None:
            assert (min(given), max(given)) == terms, busy


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_the_exact_range_is_the_term_of_the_open_cards(count: int) -> None:
    """For a pod whose selection and quota treat the cards alike, every open card passes or none does: on each of the
    256 busy sets the exact range holds the term of the open cards' pick (a single term unless the picker falls back on
    the policy order), and is None exactly where they hold no shape."""
    for busy in EVERY_SET:
        open_cards = [index for index in range(8) if index not in busy]
        given = given_terms(busy, open_cards, count)
        terms = BUBBLES.term_range(node_key(busy), (count,), True)
        assert (terms is None) == (not given), busy
        if terms is not None:
            assert all(terms[0] <= term <= terms[1] for term in given), busy
            if pick_cards(slots(busy), count):
                assert terms[0] == terms[1] == given.pop(), busy


def test_the_range_of_several_containers_holds_their_terms() -> None:
    """Two containers of one card each (or an init container that may take a card again): the range over the sizes
    holds the term of any two open cards and of any one."""
    for busy in EVERY_SET:
        open_cards = [index for index in range(8) if index not in busy]
        terms = BUBBLES.term_range(node_key(busy), (1, 2), False)
        chosen_sets = [chosen for n in (1, 2) for chosen in combinations(open_cards, n)]
        assert (terms is None) == (not chosen_sets)
        for chosen in chosen_sets:
            assert terms is not None and terms[0] <= bubble_score(busy, chosen) <= terms[1]


def test_a_node_key_is_its_shape() -> None:
    """Cards unhealthy, cordoned or holding anything are not open; cards that differ are flagged (never exact); a node
    whose cards are not indexed 0 to n-1 (n ≤ 8) has no known shape and the whole of HAMi's range."""
    devices = xpus()
    sick = [replace(device, healthy=device.index != 5) for device in devices]
    # Card 0 busy: four cards take the right wing; with card 5 out, the cross quad 2, 3, 6, 7.
    assert BUBBLES.term_range(node_key((0,)), (4,), True) == (bubble_score((0,), (4, 5, 6, 7)),) * 2 == (1000.0,) * 2
    for shape in (node_key((0,), sick), node_key((0,), devices, frozenset({"n-kunlun-5"}))):
        assert BUBBLES.term_range(shape, (4,), True) == (bubble_score((0,), (2, 3, 6, 7)),) * 2 == (3000.0,) * 2
        assert BUBBLES.term_range(shape, (8,), False) is None
    assert BUBBLES.term_range(node_key((), [*devices[:7], replace(devices[7], count=0)]), (8,), False) is None
    assert node_key((), xpus(4)) != node_key((4, 5, 6, 7), devices)  # four cards are not eight with four busy
    assert BUBBLES.term_range(node_key((), xpus(4)), (4,), True) == (BUBBLES.term_range(node_key((4, 5, 6, 7)), (4,),
                                                                                       True))
    mixed = [*devices[:7], replace(devices[7], memory_mib=CARD_MEMORY_MIB // 2)]
    assert BUBBLES.term_range(node_key((), mixed), (2,), True) == BUBBLES.term_range(node_key(()), (2,), False)
    assert node_key((), [*devices[:7], replace(devices[7], index=9)]) == UNKNOWN_SHAPE
    assert node_key((), xpus(9)) == UNKNOWN_SHAPE
    assert BUBBLES.term_range(UNKNOWN_SHAPE, (2,), True) == (0.0, 3000.0)
