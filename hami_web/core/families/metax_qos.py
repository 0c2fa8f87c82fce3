"""Metax sGPU sharing rules: QoS per card, online/offline app classes, MetaLink zones and the node score (HAMi
v2.10 ``pkg/device/metax/sdevice.go``, ``qos.go``, ``score.go``).

A Metax card runs all its shared tasks under one QoS policy (best-effort, fixed-share or burst-share), switched by
the device plugin when the card's tasks ask for another: a pod may join a busy card only under the QoS the card's
tasks hold. HAMi keeps the QoS it has promised in a process-local cache (``JitteryQosCache``) until the device
plugin reports it; here what a card holds is a value (`CardState`) summed from the bookings on the card, so it is
rebuilt from the pods after a restart and two servers reading the same pods agree, and `QosExpectations` (the
cache as a value) says which cards the device plugin has yet to switch.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from hami_web.core.devices import Device

ONLINE = "online"
OFFLINE = "offline"
TOPOLOGY_AWARE_KEY = "metax-tech.com/sgpu-topology-aware"
APP_CLASS_KEY = "metax-tech.com/sgpu-app-class"
QOS_POLICY_KEY = "metax-tech.com/sgpu-qos-policy"

# HAMi ``DirectLinkScore``: what two cards in one MetaLink zone add to a set of cards.
DIRECT_LINK_SCORE = 10
# HAMi ``OverrideScore``: a policy-neutral family score is weighted so it dominates the node's usage score, and
# negated under spread (which takes the lowest node).
SCORE_WEIGHT = 10_000
# Go's ``strconv.ParseBool``.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True, slots=True)
class SharingPod:
    """What the rules read of one pod on a card: its app class ("" none), its QoS annotation and the cores it
    books on the card."""

    app_class: str = ""
    qos: str = ""
    cores: int = 0

    @property
    def expected_qos(self) -> str | None:
        """The QoS the pod needs of its card (HAMi ``AddResourceUsage``): none for an online pod, "" (any) for a
        whole card (100 cores), else its own."""
        if self.app_class == ONLINE:
            return None
        return "" if self.cores == 100 else self.qos


@dataclass(frozen=True, slots=True)
class CardState:
    """What the pods on one card hold, as a value that adds and subtracts with bookings: the QoS each non-online
    pod needs (with multiplicity) and how many online and offline pods it runs."""

    qos: tuple[tuple[str, int], ...] = ()
    online: int = 0
    offline: int = 0

    @classmethod
    def of(cls, pod: SharingPod) -> CardState:
        """The state one pod adds to a card."""
        expected = pod.expected_qos
        return cls(qos=((expected, 1),) if expected is not None else (),
                   online=int(pod.app_class == ONLINE), offline=int(pod.app_class == OFFLINE))

    def __add__(self, other: CardState) -> CardState:
        return CardState(_tally(Counter(dict(self.qos)) + Counter(dict(other.qos))),
                         self.online + other.online, self.offline + other.offline)

    def __sub__(self, other: CardState) -> CardState:
        return CardState(_tally(Counter(dict(self.qos)) - Counter(dict(other.qos))),
                         max(0, self.online - other.online), max(0, self.offline - other.offline))

    def held_qos(self) -> frozenset[str]:
        """The QoS policies the card's pods need ("" = a whole-card pod, which accepts any)."""
        return frozenset(qos for qos, _ in self.qos)


def _tally(counter: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((qos, n) for qos, n in counter.items() if n > 0))


def qos_fits(request_qos: str, *, tasks: int, request_cores: int, state: CardState, reported_qos: str,
             pending_qos: str | None = None) -> bool:
    """Whether a pod asking ``request_qos`` may join a card (HAMi ``checkDeviceQos``): an idle card takes any QoS, a
    whole-card ask skips the check, else the card's QoS must be none or the same. The card's QoS is the one
    HAMi still expects of it (``pending_qos``), else the QoS its pods need, else what the device plugin reports; pods
    that disagree (bookings made elsewhere) all have to agree with the ask."""
    if tasks == 0 or request_cores == 100:
        return True
    held = frozenset({pending_qos}) if pending_qos is not None else state.held_qos() or frozenset({reported_qos})
    return all(qos in ("", request_qos) for qos in held)


def app_class_fits(request_class: str, *, tasks: int, state: CardState) -> bool:
    """Whether a pod of ``request_class`` ("" none) may join a card (HAMi ``checkAppClass``): an idle card takes
    anyone; a card running online or offline pods takes only app-class pods, and never an offline one beside an
    online one; a card of ordinary pods takes only ordinary pods."""
    if tasks == 0:
        return True
    card_classed = state.online > 0 or state.offline > 0
    if card_classed != (request_class in (ONLINE, OFFLINE)):
        return False
    return not (state.online > 0 and request_class == OFFLINE)


@dataclass(frozen=True, slots=True)
class QosExpectations:
    """HAMi's ``JitteryQosCache`` as a value: the QoS each card was promised (by uuid) that its device plugin has
    not reported yet. `synced` drops what the node now reports; `promised` adds a booking's expectations."""

    expected: Mapping[str, str] = field(default_factory=dict)

    def get(self, uuid: str) -> str | None:
        """The QoS card ``uuid`` is expected to switch to, None when nothing is pending."""
        return self.expected.get(uuid)

    def synced(self, reported: Iterable[tuple[str, str]]) -> QosExpectations:
        """Without the cards whose reported QoS (``(uuid, qos)`` pairs) is now the expected one (HAMi ``Sync``)."""
        met = {uuid for uuid, qos in reported if self.expected.get(uuid) == qos}
        if not met:
            return self
        return QosExpectations({uuid: qos for uuid, qos in self.expected.items() if uuid not in met})

    def promised(self, *, app_class: str, qos: str,
                 cards: Iterable[tuple[str, str, int]]) -> QosExpectations:
        """After booking a pod of ``app_class`` and ``qos`` on ``cards`` (``(uuid, reported qos, cores booked)``):
        each card whose reported QoS differs from what the pod needs of it is expected to switch (HAMi
        ``addJitteryQos``); an online pod promises nothing."""
        changes = {}
        for uuid, reported, cores in cards:
            expected = SharingPod(app_class=app_class, qos=qos, cores=cores).expected_qos
            if expected is not None and reported != expected:
                changes[uuid] = expected
        return QosExpectations({**self.expected, **changes}) if changes else self


@dataclass(frozen=True, slots=True)
class LinkedCard:
    """A card as the MetaLink rules see it: its uuid and MetaLink zone (0 or less: no MetaLink)."""

    uuid: str
    link_zone: int


def link_score(cards: Sequence[LinkedCard]) -> int:
    """HAMi ``LinkDevices.Score``: `DIRECT_LINK_SCORE` for each pair of distinct cards in one (positive) zone."""
    return sum(DIRECT_LINK_SCORE for a, b in combinations(cards, 2)
               if a.uuid != b.uuid and a.link_zone > 0 and a.link_zone == b.link_zone)


def prioritize_exclusive(candidates: Sequence[LinkedCard], require: int) -> tuple[LinkedCard, ...]:
    """The cards a whole-card ask of ``require`` cards takes (HAMi ``prioritizeExclusiveDevices``): all within one
    MetaLink zone when a zone has enough (the smallest such zone), else across zones (smallest zones first), then
    cards without MetaLink. Zones of equal size go by zone number (HAMi's order there is Go's map order)."""
    if len(candidates) <= require:
        return tuple(candidates)
    zones: dict[int, list[LinkedCard]] = {}
    unlinked: list[LinkedCard] = []
    for card in candidates:
        (zones.setdefault(card.link_zone, []) if card.link_zone > 0 else unlinked).append(card)
    ordered = sorted(zones.items(), key=lambda item: (len(item[1]), item[0]))
    for _, members in ordered:
        if len(members) >= require:
            return tuple(members[:require])
    pooled = [card for _, members in ordered for card in members] + unlinked
    return tuple(pooled[:require])


def prioritize_online(candidates: Sequence[tuple[str, CardState]], require: int) -> tuple[str, ...]:
    """The cards an online pod takes (HAMi ``prioritizeOnlineDevices``): fewest online pods first (then fewest
    offline), and cards running only offline pods last (fewest offline first)."""
    def key(item: tuple[str, CardState]) -> tuple[int, int, int]:
        state = item[1]
        only_offline = state.online == 0 and state.offline > 0
        return (1, state.offline, 0) if only_offline else (0, state.online, state.offline)

    return tuple(uuid for uuid, _ in sorted(candidates, key=key)[:require])


def exclusive_score(granted: Sequence[LinkedCard], idle_before: Sequence[LinkedCard]) -> int:
    """HAMi ``scoreExclusiveDevices``: ten times the links inside the granted whole cards, less the links between
    the node's idle cards that the grant breaks."""
    granted_ids = {card.uuid for card in granted}
    rest = [card for card in idle_before if card.uuid not in granted_ids]
    allocated = link_score(granted)
    loss = link_score(idle_before) - allocated - link_score(rest)
    return 10 * allocated - loss


def online_score(granted: Iterable[str], states: Mapping[str, CardState]) -> int:
    """HAMi ``scoreOnlineDevices``: per granted card −100 per offline pod on a card of only offline pods, else −20 per
    online and −2 per offline pod."""
    total = 0
    for uuid in set(granted):
        state = states.get(uuid, CardState())
        if state.offline > 0 and state.online == 0:
            total -= 100 * state.offline
        else:
            total -= 20 * state.online + 2 * state.offline
    return total


def topology_aware(pod_annotation: str | None, *, default: bool) -> bool:
    """Whether a whole-card ask is placed by MetaLink: the pod's ``sgpu-topology-aware`` when Go's ``ParseBool`` reads
    it, else the server's ``sgpuTopologyAware``."""
    if pod_annotation in _TRUE:
        return True
    if pod_annotation in _FALSE:
        return False
    return default


def weighted_score(score: int, *, spread: bool) -> float:
    """A Metax node score as the node ranking adds it: × 10,000, negated under spread (HAMi ``OverrideScore``)."""
    return float(score * (-SCORE_WEIGHT if spread else SCORE_WEIGHT))


CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"
CARD_QOS_POLICY_MISMATCH = "CardQosPolicyMismatch"


def sharing_problem(pod: SharingPod, *, tasks: int, state: CardState, reported_qos: str,
                    pending_qos: str | None = None) -> str:
    """The Metax check a card fails for ``pod`` before the common ones, "" when none (HAMi ``Fit``, in its order):
    ``CardAppClassMismatch`` (`app_class_fits`), then for a pod that is not online ``CardQosPolicyMismatch``
    (`qos_fits`, ``pod.cores`` being what it asks of each card)."""
    if not app_class_fits(pod.app_class, tasks=tasks, state=state):
        return CARD_APP_CLASS_MISMATCH
    if pod.app_class != ONLINE and not qos_fits(pod.qos, tasks=tasks, request_cores=pod.cores, state=state,
                                                reported_qos=reported_qos, pending_qos=pending_qos):
        return CARD_QOS_POLICY_MISMATCH
    return ""


def node_score(pod: SharingPod, *, granted: Sequence[LinkedCard], idle_before: Sequence[LinkedCard],
               states: Mapping[str, CardState], topology_default: bool, topology_annotation: str | None,
               spread: bool) -> float:
    """What a Metax sGPU grant adds to its node's score (HAMi ``ScoreNode`` weighted by ``OverrideScore``): for an
    online pod `online_score`, for whole cards (100 cores) placed by MetaLink (`topology_aware`) `exclusive_score`,
    else 0; × 10,000, negated under spread."""
    if pod.app_class == ONLINE:
        raw = online_score([card.uuid for card in granted], states)
    elif pod.cores == 100 and granted and topology_aware(topology_annotation, default=topology_default):
        raw = exclusive_score(granted, idle_before)
    else:
        raw = 0
    return weighted_score(raw, spread=spread)


_ONLINE_TAG = "class:online"
_OFFLINE_TAG = "class:offline"
_QOS_TAG = "qos:"


@dataclass(frozen=True, slots=True)
class QosSharing:
    """Metax sGPU's sharing rule (`hami_web.core.families.family.SharingRule`): a pod's class is its app class and QoS
    (``"<app class>/<qos>"``); an online pod books no cores; a grant holds its app class and the QoS it needs of its
    card (`SharingPod.expected_qos`), so a card's `CardState` is the sum of its bookings, the QoS state HAMi's
    scheduler keeps in memory (``JitteryQosCache``) here rebuilt from the pods; a card fails `sharing_problem`."""

    topology_default: bool = False  # the device config's ``sgpuTopologyAware``

    def ask(self, annotations: Mapping[str, str]) -> str:
        """``"<app class>/<qos>/<topology-aware 1 or 0>"`` from the pod's ``sgpu-app-class``, ``sgpu-qos-policy`` and
        ``sgpu-topology-aware`` (else the device config's)."""
        aware = topology_aware(annotations.get(TOPOLOGY_AWARE_KEY), default=self.topology_default)
        return f"{annotations.get(APP_CLASS_KEY, '')}/{annotations.get(QOS_POLICY_KEY, '')}/{int(aware)}"

    def books_cores(self, ask: str) -> bool:
        """An online pod books no cores (HAMi ``Fit``: ``coreReq = 0``)."""
        return _pod(ask, 0).app_class != ONLINE

    def tags(self, ask: str, cores: int) -> tuple[str, ...]:
        """The pod's app class, and the QoS it needs of its card (none for an online pod, "" for a whole card)."""
        pod = _pod(ask, cores)
        tags = [f"class:{pod.app_class}"] if pod.app_class in (ONLINE, OFFLINE) else []
        expected = pod.expected_qos
        return (*tags, _QOS_TAG + expected) if expected is not None else tuple(tags)

    def problem(self, ask: str, cores: int, device: Device, tasks: int, held: tuple[str, ...]) -> str:
        """`sharing_problem` of the card, its state summed from ``held``."""
        return sharing_problem(_pod(ask, cores), tasks=tasks, state=card_state(held), reported_qos=device.sharing)


    def pick(self, ask: str, cores: int, candidates: Sequence[Device], held: Sequence[tuple[str, ...]],
             count: int) -> list[int] | None:
        """HAMi ``Fit``'s own choice among more passing cards than asked: an online pod's by `prioritize_online`, a
        whole-card ask of a pod without app class by `prioritize_exclusive` (MetaLink zones); None otherwise."""
        pod = _pod(ask, cores)
        index = {card.uuid: position for position, card in enumerate(candidates)}
        if pod.app_class == ONLINE:
            chosen = prioritize_online([(card.uuid, card_state(tags)) for card, tags in zip(candidates, held,
                                                                                             strict=True)], count)
        elif not pod.app_class and cores == 100:
            chosen = tuple(card.uuid for card in prioritize_exclusive(
                [LinkedCard(card.uuid, max(card.network, 0)) for card in candidates], count))
        else:
            return None
        return [index[uuid] for uuid in chosen]


    def reach(self, ask: str, cores: int, count: int) -> int | None:
        """An online pod's term is at most 0; whole cards placed by MetaLink earn at most 10 × `DIRECT_LINK_SCORE` a
        pair of them, × 10,000; any other ask is not scored (None)."""
        pod = _pod(ask, cores)
        if pod.app_class == ONLINE:
            return 0
        if cores == 100 and ask.endswith("/1"):
            return 10 * DIRECT_LINK_SCORE * count * (count - 1) // 2 * SCORE_WEIGHT + 1
        return None

    def bound(self, ask: str, cores: int, counts: Sequence[int], idle: Sequence[bool],
              held: Sequence[tuple[str, ...]]) -> float:
        """An online pod's term on a node: at most `online_score` of the cards of least penalty among those an online
        pod may join (`app_class_fits`: idle, or running app-class pods), as many as its largest container asks (each
        card's penalty is its own, at most 0, and a container's cards are distinct), whichever pass; -inf when too few
        may (no fit); any other ask's, its `reach` for all its cards."""
        if _pod(ask, cores).app_class != ONLINE:
            return float(self.reach(ask, cores, sum(counts)) or 0)
        count = max(counts, default=0)
        penalties = sorted(_online_penalty(tags) for free, tags in zip(idle, held, strict=True)
                           if free or _ONLINE_TAG in tags or _OFFLINE_TAG in tags)
        if count > len(penalties):
            return -math.inf
        return weighted_score(sum(penalties[-count:]) if count > 0 else 0, spread=False)

    def score(self, ask: str, cores: int, granted: Sequence[Device], devices: Sequence[Device],
              idle: Sequence[bool], held: Sequence[tuple[str, ...]]) -> float:
        """`node_score` (HAMi ``ScoreNode`` × 10,000) of the granted cards, as binpack counts it."""
        pod = _pod(ask, cores)
        linked = {card.uuid: LinkedCard(card.uuid, max(card.network, 0)) for card in devices}
        return node_score(pod, granted=[linked[card.uuid] for card in granted],
                          idle_before=[linked[card.uuid] for card, free in zip(devices, idle, strict=True) if free],
                          states={card.uuid: card_state(tags) for card, tags in zip(devices, held, strict=True)},
                          topology_default=ask.endswith("/1"), topology_annotation=None, spread=False)


def _online_penalty(tags: tuple[str, ...]) -> int:
    """`online_score` of one card from the tags its grants hold, without building its `CardState` (the filter's bound
    reads every card of every node it looks at)."""
    online, offline = tags.count(_ONLINE_TAG), tags.count(_OFFLINE_TAG)
    return -100 * offline if offline and not online else -(20 * online + 2 * offline)


@functools.lru_cache(maxsize=1024)
def _pod(ask: str, cores: int) -> SharingPod:
    app_class, _, rest = ask.partition("/")
    qos = rest.rpartition("/")[0] if rest.count("/") else rest
    return SharingPod(app_class=app_class, qos=qos, cores=cores)


def card_state(held: Iterable[str]) -> CardState:
    """A card's `CardState` from the tags its grants hold (`QosSharing.tags`)."""
    return _card_state(tuple(held))


@functools.lru_cache(maxsize=4096)
def _card_state(held: tuple[str, ...]) -> CardState:
    """`card_state`, remembered by the tags: a fit reads each card's state several times (check, pick, score) and a
    cluster's cards hold few distinct sets of tags."""
    tags = Counter(held)
    return CardState(qos=_tally(Counter({tag[len(_QOS_TAG):]: n for tag, n in tags.items()
                                         if tag.startswith(_QOS_TAG)})),
                     online=tags[_ONLINE_TAG], offline=tags[_OFFLINE_TAG])
