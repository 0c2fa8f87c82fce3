"""Picking a multi-device container inside device groups (docs/device-families.md#ascend-npus): HCCS networks and module
pairs.

Some accelerators are wired in groups that a job spanning several devices should stay inside. Ascend 910A/910B NPUs
report their HCCS group (``custominfo.NetworkID``): a container asking for several is filled from the largest group of
passing NPUs, then the next, and the node earns a score term for how much of each container sits in one group. An
Ascend 910C module carries two NPUs (index ÷ 2) that only run together, so a multi-NPU container takes whole modules.
HAMi breaks ties between groups at random; we take the lower group (or module) id, so placements are reproducible.

A way of grouping is an object a family's record holds (`hami_web.core.families.Family.grouping`): the fit, the node
reader and the tools call its methods and never ask which one it is. A new way is one more class here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hami_web.core.devices import NO_NETWORK, Device

# Node-score weight of a container kept inside one HCCS group (HAMi's ``Ascend910NetworkWeight``).
GROUP_SCORE_WEIGHT = 10
SPREAD_POLICY = "spread"
MODULE_SIZE = 2


class Grouping(Protocol):
    """How a family's multi-device containers are picked on a node, and how the tools show it.

    ``scored``: the node earns `GROUP_SCORE_WEIGHT` × the share of each container kept in one group (HCCS), and the
    node's aggregates track each group's free memory for the score's bound.
    """

    @property
    def scored(self) -> bool: ...

    @property
    def spread_gain(self) -> bool:
        """Whether the term can rank a node better than its score under spread (HCCS: the filter subtracts it); False
        when it only adds to the total under both policies (Vastai's card share), so a spread search can stop at a
        node whose score alone is no better than the best total found."""
        ...

    @property
    def weight(self) -> int:
        """The most one container's term can be (the filter stops looking once no node can beat the best by more)."""
        ...

    @property
    def busy_term(self) -> BusyTerm | None:
        """The part of the term that depends on the node's busy devices (Kunlunxin's bubbles), None for a term that
        does not: then a container of one device earns a different term on each node too, and the filter bounds it
        from the node's busy devices (`BusyTerm.term_range`), not from the groups' free memory."""
        ...

    def applies(self, devices: Sequence[Device]) -> bool:
        """Whether the grouping holds on a node whose devices of the family are ``devices``."""
        ...

    def pick(self, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
        """``count`` of the passing positions ``ordered`` (policy order) as the grouping wants them, or fewer when the
        groups cannot hold the request (the caller reports ``AllocatedCardsInsufficientRequest``)."""
        ...

    def describe(self, passing: Sequence[Device], count: int) -> str:
        """Why the devices that pass cannot hold ``count`` this way (for ``explain``), "" when they can."""
        ...

    def label(self, device: Device) -> str:
        """The group a device belongs to, for the tools (``HCCS 3``, ``module 1``)."""
        ...

    def group_of(self, device: Device) -> object:
        """The key of the group a device belongs to (the node's aggregates keep each group's free memory)."""
        ...

    def score(self, containers: Sequence[Sequence[Device]], policy: str, busy: Sequence[Device]) -> float:
        """The node-score term of a placement (``containers``: each container's devices; ``busy``: the family's
        devices with a task before the pod), which the filter adds under binpack and subtracts under spread; 0 for a
        grouping that is not ``scored``."""
        ...

    def mutex_conflicts(self, devices: Sequence[Device], tasks: Sequence[int]) -> set[int]:
        """The positions a ``mutex`` pod may not take beyond the used devices themselves (``tasks``: each device's
        tasks): Vastai's dies of a card one of whose dies is in use."""
        ...


class BusyTerm(Protocol):
    """A node-score term that depends on the family's devices busy before the pod (HAMi's ``previous`` usage: Kunlunxin
    XPU's bubbles), held by the family's `Grouping`.

    The fit computes the term of a placement (`term`). The filter ranks nodes by it without a fit: a node's busy and
    open devices come down to a small key (`node_key`, computed once when the node's view is built), and the range of
    terms a pod can earn on a node of that key (`term_range`) is computed once per key and ask, so a thousand nodes
    of a few dozen shapes cost a few dozen judgements and one look-up each."""

    def term(self, busy: Sequence[Device], chosen: Sequence[Device]) -> float:
        """The term of a pod given ``chosen`` devices on a node whose busy devices are ``busy``."""
        ...

    def node_key(self, devices: Sequence[Device], rows: Sequence[Sequence[int]], cordoned: frozenset[str]) -> int:
        """What of the family's ``devices`` (with their usage ``rows``, tasks first, and the node's ``cordoned``
        UUIDs) the term and its range depend on, as a small number (nodes of one shape share it)."""
        ...

    def term_range(self, key: int, sizes: Sequence[int], exact: bool) -> tuple[float, float] | None:
        """The least and the most `term` can be on a node of ``key`` for a pod whose devices of the family number one
        of ``sizes``, whichever devices the fit gives it; None when no pod of those sizes fits such a node. ``exact``:
        the pod asks the family in one container whose selection and quota treat every device alike, so the term may
        be judged on the devices the fit would take rather than on any it might."""
        ...


@dataclass(frozen=True, slots=True)
class NetworkGroups:
    """Ascend HCCS groups (``custominfo.NetworkID``): a multi-NPU container is filled from the largest group first;
    they apply only when every device of the family reports its group (HAMi's ``hasNetworkID``)."""

    scored: bool = True
    weight: int = GROUP_SCORE_WEIGHT
    spread_gain: bool = True
    busy_term: BusyTerm | None = None

    def applies(self, devices: Sequence[Device]) -> bool:
        """Every device reports its group."""
        return all(device.network != NO_NETWORK for device in devices)

    def pick(self, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
        """From the largest group (ties: lower id), then the next (`_fill_networks`)."""
        return _fill_networks(ordered, devices, count)

    def describe(self, passing: Sequence[Device], count: int) -> str:
        """The groups with a free NPU and how many each holds."""
        return _held_by_groups([f"group {device.network}" for device in passing], count, "HCCS groups with a free NPU")

    def label(self, device: Device) -> str:
        """``HCCS <id>``."""
        return f"HCCS {device.network}"

    def group_of(self, device: Device) -> object:
        """``custominfo.NetworkID``."""
        return device.network

    def score(self, containers: Sequence[Sequence[Device]], policy: str, busy: Sequence[Device]) -> float:
        """``10 × Σ containers (devices in the container's largest network group / its devices)`` (HAMi's
        ``ScoreNode`` for Ascend 910 chips)."""
        return GROUP_SCORE_WEIGHT * sum(group_share([device.network for device in container])
                                        for container in containers if container)

    def mutex_conflicts(self, devices: Sequence[Device], tasks: Sequence[int]) -> set[int]:
        """None: a group is no unit of exclusivity."""
        return set()


@dataclass(frozen=True, slots=True)
class ModulePairs:
    """Ascend 910C modules of two NPUs (index ÷ 2) that only run together: a multi-NPU container takes whole ones."""

    scored: bool = False
    weight: int = 0
    spread_gain: bool = False
    busy_term: BusyTerm | None = None

    def applies(self, devices: Sequence[Device]) -> bool:
        """Always: the module is the device index's."""
        return True

    def pick(self, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
        """Whole modules (`_whole_modules`) for several NPUs; one NPU as the policy orders them."""
        return _whole_modules(ordered, devices, count) if count > 1 else list(ordered[:count])

    def describe(self, passing: Sequence[Device], count: int) -> str:
        """The whole modules free, and those with one NPU free."""
        if count <= 1:
            return ""
        modules: dict[int, int] = {}
        for device in passing:
            modules[device.index // MODULE_SIZE] = modules.get(device.index // MODULE_SIZE, 0) + 1
        whole = sorted(module for module, free in modules.items() if free == MODULE_SIZE)
        if count % MODULE_SIZE == 0 and len(whole) * MODULE_SIZE >= count:
            return ""
        halves = sorted(module for module, free in modules.items() if free < MODULE_SIZE)
        text = f"{len(whole)} whole module(s) free ({', '.join(map(str, whole)) or 'none'}) for {count} NPUs"
        if halves:
            text += f"; modules with one NPU free: {', '.join(map(str, halves))}"
        if count % MODULE_SIZE:
            text += "; an odd count is never whole modules"
        return text

    def label(self, device: Device) -> str:
        """``module <n>``."""
        return f"module {device.index // MODULE_SIZE}"

    def group_of(self, device: Device) -> object:
        """The module: index ÷ 2."""
        return device.index // MODULE_SIZE

    def score(self, containers: Sequence[Sequence[Device]], policy: str, busy: Sequence[Device]) -> float:
        """No term."""
        return 0.0

    def mutex_conflicts(self, devices: Sequence[Device], tasks: Sequence[int]) -> set[int]:
        """None: the module is not a unit of exclusivity here."""
        return set()


@dataclass(frozen=True, slots=True)
class CardDies:
    """Vastai's die mode (``custominfo.DeviceStrategy`` "die"; `Device.card` = ``custominfo.AIC``): a multi-die
    container takes dies from the card with the most passing dies first (HAMi's ``computeBestCombination``), a
    ``mutex`` pod no die of a card one of whose dies is in use, and the node earns each container's share of dies on
    one card (HAMi's ``ScoreNode``: added under both policies, not × 10)."""

    scored: bool = True
    weight: int = 1
    spread_gain: bool = False  # added under both policies
    busy_term: BusyTerm | None = None

    def applies(self, devices: Sequence[Device]) -> bool:
        """The node's first device is a die of a card (HAMi's ``isDieMode``)."""
        return bool(devices) and bool(devices[0].card)

    def pick(self, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
        """One die: the first in policy order; several: the card with most passing dies first (ties: first seen)."""
        if count == 1:
            return list(ordered[:1])
        cards: dict[str, list[int]] = {}
        for position in ordered:
            cards.setdefault(devices[position].card, []).append(position)
        chosen: list[int] = []
        for card in sorted(cards, key=lambda card: -len(cards[card])):
            chosen.extend(cards[card][:count - len(chosen)])
            if len(chosen) == count:
                break
        return chosen

    def describe(self, passing: Sequence[Device], count: int) -> str:
        """The cards with a free die, and how many each holds."""
        return _held_by_groups([self.label(device) for device in passing], count, "cards with a free die")

    def label(self, device: Device) -> str:
        """``AIC <card>``."""
        return f"AIC {device.card}"

    def group_of(self, device: Device) -> object:
        """The card (``custominfo.AIC``)."""
        return device.card

    def score(self, containers: Sequence[Sequence[Device]], policy: str, busy: Sequence[Device]) -> float:
        """Σ containers (dies on the container's fullest card / its dies), signed so that the filter, which subtracts
        the term under spread, adds it under both policies as HAMi does."""
        share = sum(_card_share([device.card for device in container]) for container in containers if container)
        return -share if policy == SPREAD_POLICY else share

    def mutex_conflicts(self, devices: Sequence[Device], tasks: Sequence[int]) -> set[int]:
        """The dies of a card one of whose dies has a task."""
        busy = {device.card for device, used in zip(devices, tasks, strict=True) if used and device.card}
        return {position for position, device in enumerate(devices) if device.card in busy}


def _held_by_groups(groups: Sequence[str], count: int, what: str) -> str:
    """``<what> (<group>: <passing devices>, …) hold <n> of the <count> asked``, "" when they hold enough."""
    if len(groups) >= count:
        return ""
    sizes: dict[str, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    listed = ", ".join(f"{group}: {sizes[group]}" for group in sorted(sizes)) or "none"
    return f"{what} ({listed}) hold {len(groups)} of the {count} asked"


def _card_share(cards: Sequence[str]) -> float:
    sizes: dict[str, int] = {}
    for card in cards:
        sizes[card] = sizes.get(card, 0) + 1
    return max(sizes.values()) / len(cards) if cards else 0.0


NETWORK_GROUPS = NetworkGroups()
MODULE_PAIRS = ModulePairs()
CARD_DIES = CardDies()


def _fill_networks(ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
    """One device: the first in policy order. Several: from the largest group (ties: lower id), then the next, each
    group's devices in policy order."""
    if count == 1:
        return list(ordered[:1])
    groups: dict[int, list[int]] = {}
    for position in ordered:
        groups.setdefault(devices[position].network, []).append(position)
    chosen: list[int] = []
    for network in sorted(groups, key=lambda network: (-len(groups[network]), network)):
        chosen.extend(groups[network][:count - len(chosen)])
        if len(chosen) == count:
            break
    return chosen


def _whole_modules(ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
    """Modules whose two devices both pass, lowest module first, until ``count``; an odd count cannot be whole
    modules and gets none."""
    if count % MODULE_SIZE:
        return []
    modules: dict[int, list[int]] = {}
    for position in ordered:
        modules.setdefault(devices[position].index // MODULE_SIZE, []).append(position)
    chosen: list[int] = []
    for module in sorted(modules):
        members = modules[module]
        if len(members) == MODULE_SIZE:
            chosen.extend(sorted(members, key=lambda position: devices[position].index))
            if len(chosen) == count:
                break
    return chosen


def group_share(networks: Sequence[int]) -> float:
    """The share of one container's devices that sit in its largest group (1.0 = all in one)."""
    if not networks:
        return 0.0
    sizes: dict[int, int] = {}
    for network in networks:
        sizes[network] = sizes.get(network, 0) + 1
    return max(sizes.values()) / len(networks)
