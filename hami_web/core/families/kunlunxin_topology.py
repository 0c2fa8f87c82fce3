"""Kunlunxin's eight-card topology (docs/device-families.md#kunlunxin-xpus; HAMi v2.10 ``pkg/device/kunlun/topo.go``).

A Kunlunxin node is eight cards in two wings (0–3 and 4–7, each wing fully linked) joined by four cross links
(0-4, 1-5, 2-6, 3-7). A container gets 1, 2, 4 or 8 cards chosen so the cards left free stay in shapes later pods
can use: HAMi's ``graghSelect``, ported here as `pick_cards`. HAMi judges a wing by the *position* of a card in the
list it is handed (its devices sorted by the scheduling policy) and the links by the card's *index*; `pick_cards`
takes the same ordered list, and `CardTopology` (the family's way of grouping) hands it the cards in index order.
Whole XPUs score a node by "bubbles" (`bubble_score`), added to its rank under either policy as HAMi adds it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hami_web.core.devices import Device
from hami_web.core.groups import SPREAD_POLICY, BusyTerm

WING_SIZE = 4
TOPOLOGY_CARDS = 2 * WING_SIZE
# HAMi's ``InterGroupConnection``: the cross links between the wings.
CROSS_PAIRS: tuple[tuple[int, int], ...] = ((0, 4), (1, 5), (2, 6), (3, 7))
# HAMi's ``InterGroupConnection2``: the four-card shapes across both wings, in the order HAMi tries them.
CROSS_QUADS: tuple[tuple[int, int, int, int], ...] = (
    (0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
# For one card, a wing is taken by how many free cards it has, best first: a lone free card (no bubble left), then
# three (a pair stays), then two, then a whole wing (HAMi's ``oddorder``).
_ONE_CARD_WING_ORDER = (1, 3, 2, 4)
PICKABLE_COUNTS = (1, 2, 4, 8)
# HAMi's ``calcscore``: the term by the change in bubbles from the busy cards to the pod's; any other change 1000.
_BUBBLE_TERMS = {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}
_OTHER_CHANGE = 1000.0
BUBBLE_WEIGHT = int(max(_BUBBLE_TERMS.values()))



@dataclass(frozen=True, slots=True)
class Slot:
    """One card as the picker sees it: its index (what the links name) and whether it may take the container."""

    index: int
    fits: bool


def pick_cards(slots: Sequence[Slot], count: int) -> tuple[int, ...]:
    """The indices of the cards a container asking ``count`` cards gets, () when the node has no fitting shape.

    ``slots`` is the node's cards in the order HAMi hands them to ``graghSelect``; slots 0–3 are the left wing,
    4–7 the right (a card past the eighth is in no wing and never picked). Eight cards: all eight free. One, two or
    four: inside one wing when a wing has enough (`_wing_choice`), else across the wings by the links (two: a cross
    pair; four: one of `CROSS_QUADS`). Any other count: ().
    """
    slots = slots[:TOPOLOGY_CARDS]
    if count == TOPOLOGY_CARDS:
        return tuple(slot.index for slot in slots) if len(slots) == count and all(s.fits for s in slots) else ()
    if count not in PICKABLE_COUNTS:
        return ()
    left = [slot.index for slot in slots[:WING_SIZE] if slot.fits]
    right = [slot.index for slot in slots[WING_SIZE:] if slot.fits]
    wing = _wing_choice(len(left), len(right), count)
    if wing is not None:
        return tuple((left if wing == 0 else right)[:count])
    free = {slot.index for slot in slots if slot.fits}
    if count == 2:
        # The first fitting card (in slot order) whose cross partner fits too, then that partner.
        return next(((index, partner) for index in (*left, *right)
                     if (partner := _cross_partner(index)) in free), ())
    return _cross_quad(free)


def _cross_partner(index: int) -> int:
    return index + WING_SIZE if index < WING_SIZE else index - WING_SIZE


def _linked(first: int, second: int) -> bool:
    """Two cards joined by a link: in one wing, or a cross pair (HAMi's ``GroupConnection`` and
    ``InterGroupConnection``)."""
    return first // WING_SIZE == second // WING_SIZE or _cross_partner(first) == second


def _wing_choice(left_free: int, right_free: int, count: int) -> int | None:
    """Which wing (0 left, 1 right) holds the container, None when neither has ``count`` fitting cards.

    A wing is taken by its number of fitting cards, the one leaving the fewest stranded cards first (for one card
    `_ONE_CARD_WING_ORDER`, else exactly ``count``, then one more, up to four); the left wing wins a tie.
    """
    if left_free < count and right_free < count:
        return None
    order = _ONE_CARD_WING_ORDER if count == 1 else tuple(range(count, WING_SIZE + 1))
    for free in order:
        if left_free == free:
            return 0
        if right_free == free:
            return 1
    return None


def _cross_quad(free: set[int]) -> tuple[int, ...]:
    """Four cards across the wings (neither wing has four): with four or five fitting cards the first quad of
    `CROSS_QUADS` they hold; with six, the first quad whose two left-over cards are linked (`_linked`), else the
    last quad they hold (HAMi's ``interconnect``); with fewer or more, none."""
    held = [quad for quad in CROSS_QUADS if set(quad) <= free]
    if not held or len(free) not in (4, 5, 6):
        return ()
    if len(free) < 6:
        return held[0]
    for quad in held:
        first, second = sorted(free - set(quad))
        if _linked(first, second):
            return quad
    return held[-1]


def _bubbles(indices: Sequence[int]) -> int:
    """HAMi's ``countbubble``: per wing 0 for a whole wing, 2 for a lone card, else 1; an empty set counts 1."""
    if not indices:
        return 1
    left = sum(1 for index in indices if index < WING_SIZE)
    return _wing_bubbles(left, len(indices) - left)


def _wing_bubbles(left: int, right: int) -> int:
    return sum(0 if n == WING_SIZE else 2 if n == 1 else 1 for n in (left, right))


def bubble_score(used_before: Sequence[int], chosen: Sequence[int]) -> float:
    """A whole-XPU node's score for a pod given ``chosen`` cards, the node's busy cards being ``used_before``
    (HAMi ``ScoreNode`` / ``calcscore``): 3000 when the pod's cards have one bubble fewer than the busy set, 2000 as
    many, 1000 one more, 0 two more, else 1000. Added to the node score under either policy, as HAMi adds it."""
    change = _bubbles(sorted(set(chosen))) - _bubbles(sorted(set(used_before)))
    return _BUBBLE_TERMS.get(change, _OTHER_CHANGE)


# A node whose cards are not indexed 0…n-1 (n ≤ 8) has no key: its term range is the whole of HAMi's.
UNKNOWN_SHAPE = -1
_MASKS = 1 << TOPOLOGY_CARDS


@dataclass(frozen=True, slots=True)
class BubbleTerm:
    """HAMi's bubble term (``KunlunDevices.ScoreNode`` / ``calcscore``) as a busy-dependent term
    (`hami_web.core.groups.BusyTerm`) for whole XPUs.

    The term is decided by the busy cards' bubbles and by how many of the pod's cards sit in each wing (a wing's
    bubbles are its card count's). A whole XPU books its card's memory and 100 cores, so a card with a task never
    takes one (HAMi's exclusive rule, ``ExclusiveDeviceAllocateConflict``): the pod's cards are open cards (healthy,
    not cordoned, nothing booked). So a node comes down to its busy cards' bubbles, its open cards and whether its
    cards are alike (`node_key`, a number below 2^14 shared by every node of that shape), and `term_range` says:

    - for a pod of one container of the family whose selection and quota treat every card alike (``exact``), on a
      node of alike cards: every open card passes or none does, so the picker's choice among the open cards is the
      pod's, and its term the one term it can earn (a range only where the picker falls back on the policy order);
    - otherwise, the range over every split of the pod's cards between the wings that the open cards allow. For a pod
      of one container each such split is one the fit may give (the picker's shapes, its fallback, a UUID selection
      leaving some open cards passing), so the range is exact; for several containers it holds every term.
    """

    def term(self, busy: Sequence[Device], chosen: Sequence[Device]) -> float:
        """`bubble_score` of the busy cards' indices and the pod's."""
        return bubble_score([device.index for device in busy], [device.index for device in chosen])

    def node_key(self, devices: Sequence[Device], rows: Sequence[Sequence[int]], cordoned: frozenset[str]) -> int:
        """The busy cards' bubbles, whether the cards differ (type, memory, cores, shares, mode), the number of cards
        and the open cards' mask, as one number; `UNKNOWN_SHAPE` for a node whose cards are not indexed 0 to n-1 with
        n ≤ 8 (HAMi's picker reads slots, its bubbles indices: they agree only there)."""
        if len(devices) > TOPOLOGY_CARDS or sorted(device.index for device in devices) != list(range(len(devices))):
            return UNKNOWN_SHAPE
        busy = sorted(device.index for device, row in zip(devices, rows, strict=True) if row[0] > 0)
        open_mask = 0
        for device, row in zip(devices, rows, strict=True):
            if not any(row) and device.count > 0 and device.healthy and device.uuid not in cordoned:
                open_mask |= 1 << device.index
        mixed = len({(device.type, device.memory_mib, device.cores, device.count, device.mode)
                     for device in devices}) > 1
        return ((_bubbles(busy) * 2 + mixed) * (TOPOLOGY_CARDS + 1) + len(devices)) * _MASKS + open_mask

    def term_range(self, key: int, sizes: Sequence[int], exact: bool) -> tuple[float, float] | None:
        """The least and the most term a pod of ``sizes`` cards can earn on a node of ``key`` (see the class); None
        when it cannot fit there."""
        if key == UNKNOWN_SHAPE:
            return min(_BUBBLE_TERMS.values()), max(_BUBBLE_TERMS.values())
        return _term_range(key, tuple(sizes), exact)


@functools.cache
def _term_range(key: int, sizes: tuple[int, ...], exact: bool) -> tuple[float, float] | None:
    """`BubbleTerm.term_range` of a known shape, computed once per shape, sizes and mode."""
    rest, open_mask = divmod(key, _MASKS)
    rest, cards = divmod(rest, TOPOLOGY_CARDS + 1)
    before, mixed = divmod(rest, 2)
    if exact and not mixed and len(sizes) == 1:
        picked = pick_cards([Slot(index=index, fits=bool(open_mask >> index & 1)) for index in range(cards)],
                            sizes[0])
        if picked:
            term = _BUBBLE_TERMS.get(_bubbles(picked) - before, _OTHER_CHANGE)
            return term, term
        if sizes[0] not in (1, 2, WING_SIZE) or open_mask.bit_count() < sizes[0]:
            return None  # `CardTopology.pick` has no fallback either
    open_left = (open_mask & (1 << WING_SIZE) - 1).bit_count()
    open_right = (open_mask >> WING_SIZE).bit_count()
    terms = [_BUBBLE_TERMS.get(_wing_bubbles(left, size - left) - before, _OTHER_CHANGE)
             for size in sizes if size > 0 for left in range(max(0, size - open_right), min(size, open_left) + 1)]
    return (min(terms), max(terms)) if terms else None


def _index_slots(devices: Sequence[Device], passing: Iterable[int]) -> list[Slot]:
    """The node's cards in index order (the wiring of the board), each fitting when its position is in
    ``passing``."""
    fitting = set(passing)
    return [Slot(index=devices[p].index, fits=p in fitting)
            for p in sorted(range(len(devices)), key=lambda p: (devices[p].index, devices[p].uuid))]


@dataclass(frozen=True, slots=True)
class CardTopology:
    """The eight-card topology as a way of grouping a family's devices (`hami_web.core.groups.Grouping`): Kunlunxin
    XPU and vXPU.

    Whole XPUs are ``scored`` (`XPU_TOPOLOGY`): a node earns `bubble_score` of its busy cards and the pod's
    (HAMi's ``KunlunDevices.ScoreNode``), under binpack and spread alike; vXPUs earn none (HAMi's
    ``KunlunVDevices.ScoreNode`` is 0). A container's cards are `pick_cards` over the node's cards in index order.
    When that finds no shape but enough cards fit for a count of 1, 2 or 4, the first that fit in policy order are
    taken: HAMi v2.10 runs the picker on its policy-sorted device list, where the free cards come first and fill a
    "wing" whatever their indices, so it places such a pod, and so do we (README.md, Decisions). Other counts than
    1, 2, 4 and 8 never fit.
    """

    scored: bool = False
    weight: int = 0
    spread_gain: bool = False  # added under both policies
    busy_term: BusyTerm | None = None  # set with ``scored``: the term is the busy cards' (`BubbleTerm`)

    def applies(self, devices: Sequence[Device]) -> bool:
        """Always: the wings and links are the card indices'."""
        return True

    def pick(self, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
        """``count`` of the passing positions ``ordered`` (policy order), or [] when no shape holds them."""
        by_index = {devices[p].index: p for p in ordered}
        picked = pick_cards(_index_slots(devices, ordered), count)
        if picked:
            return [by_index[index] for index in picked]
        if count in (1, 2, WING_SIZE) and len(ordered) >= count:
            return list(ordered[:count])
        return []

    def describe(self, passing: Sequence[Device], count: int) -> str:
        """Why the free cards hold no shape for ``count`` ("" when they do)."""
        if count not in PICKABLE_COUNTS:
            return f"{count} cards is not a Kunlunxin shape (1, 2, 4 or 8 cards)"
        if len(passing) >= count and (count != TOPOLOGY_CARDS or len(passing) == TOPOLOGY_CARDS):
            return ""
        free = ", ".join(str(device.index) for device in sorted(passing, key=lambda d: d.index)) or "none"
        return f"cards free for the container: {free}; {count} asked"

    def label(self, device: Device) -> str:
        """``wing 0-3`` or ``wing 4-7``."""
        first = device.index // WING_SIZE * WING_SIZE
        return f"wing {first}-{first + WING_SIZE - 1}"

    def group_of(self, device: Device) -> object:
        """The wing (0 or 1) of the card."""
        return device.index // WING_SIZE

    def score(self, containers: Sequence[Sequence[Device]], policy: str, busy: Sequence[Device]) -> float:
        """`bubble_score` of the busy cards before the pod and the indices of all the pod's cards (HAMi's
        ``ScoreNode``: ``previous`` is the node's usage snapshotted before the pod's containers are fitted), signed
        so that the filter, which subtracts the term under spread, adds it under both policies as HAMi does; 0 when
        not ``scored`` or the pod has no card here."""
        chosen = [device for container in containers for device in container]
        if not self.scored or self.busy_term is None or not chosen:
            return 0.0
        term = self.busy_term.term(busy, chosen)
        return -term if policy == SPREAD_POLICY else term

    def mutex_conflicts(self, devices: Sequence[Device], tasks: Sequence[int]) -> set[int]:
        """None: a wing is no unit of exclusivity."""
        return set()


# Whole XPUs: the picker and HAMi's bubble term; vXPUs: the picker alone.
XPU_TOPOLOGY = CardTopology(scored=True, weight=BUBBLE_WEIGHT, busy_term=BubbleTerm())
VXPU_TOPOLOGY = CardTopology()
