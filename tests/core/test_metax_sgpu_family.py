"""Metax sGPU on the registry (hami_web.core.families.metax_sgpu with metax_qos's `QosSharing`), from HAMi v2.10's
``pkg/device/metax/sdevice_test.go`` (each case names its Go test).

Covers: the ``metax`` section's sGPU names and ``sgpuTopologyAware`` (read, published back beside Metax GPU's); the
cards read from ``metax-tech.com/node-gpu-devices`` with their reported QoS and MetaLink zone; what a container asks
(GiB memory unless a unit, 100 cores by default, none for an online pod); the fit through the common loop with the
sharing rule (QoS of the card's bookings, app classes, in HAMi's order); what a booking holds and its card state; the
bind's annotations; MetaLink zones for whole cards and the fewest online pods for an online pod, on a card and
between nodes (the ±10,000 node-score term), and online pods on random clusters placed as fitting every node would.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from hami_web.core.choose import Placement, choose_node
from hami_web.core.devices import NO_NETWORK, NodeInventory
from hami_web.core.families import build_catalog, config_document, parse_device_config
from hami_web.core.families.metax_qos import CardState, card_state
from hami_web.core.families.metax_sgpu import CW, INVENTORY_KEY, SgpuInventory
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import bind_annotations
from hami_web.core.options import pod_options
from hami_web.core.requests import PodRequest, RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view, pod_booking

from .builders import place_as_everywhere

CATALOG = build_catalog()
SGPU = CATALOG[CW]
CARDS = json.dumps([{"uuid": f"card-{i}", "totalDevCount": 16, "totalCompute": 100, "totalVRam": 65536, "numa": 0,
                     "healthy": True, "qosPolicy": "best-effort", "linkZone": 1 if i < 2 else 0, "model": "C500"}
                    for i in range(3)])


def sgpu_node(text: str = CARDS) -> dict[str, Any]:
    return {"metadata": {"name": "node-a", "annotations": {INVENTORY_KEY: text}}}


DEVICES = SgpuInventory().devices(sgpu_node())
assert DEVICES is not None


def test_the_metax_section_names_sgpu_beside_the_whole_cards_and_is_published_back() -> None:
    """HAMi MetaxConfig: resourceVCountName, resourceVMemoryName, resourceVCoreName, sgpuTopologyAware."""
    assert (SGPU.resources.count, SGPU.resources.memory, SGPU.resources.cores) == (
        "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore")
    config = parse_device_config({"metax": {"resourceCountName": "x.io/gpu", "resourceVCountName": "x.io/sgpu",
                                            "sgpuTopologyAware": True}})
    catalog = build_catalog(config=config)
    assert (catalog[CW].resources.count, catalog["Metax-GPU"].resources.count) == ("x.io/sgpu", "x.io/gpu")
    assert config_document(config) == {"metax": {"resourceCountName": "x.io/gpu", "resourceVCountName": "x.io/sgpu",
                                                 "sgpuTopologyAware": True}}


def test_hamis_lock_both_keys_no_handshake() -> None:
    """HAMi InitMetaxSDevice / LockNode: ``hami.io/metax-sgpu-devices-*`` under ``hami.io/mutex.lock``."""
    assert (SGPU.lock_key, SGPU.handshake_key, SGPU.to_allocate_key, SGPU.allocated_key) == (
        "hami.io/mutex.lock", "", "hami.io/metax-sgpu-devices-to-allocate", "hami.io/metax-sgpu-devices-allocated")


def test_cards_carry_their_reported_qos_and_metalink_zone() -> None:
    """HAMi TestGetMetaxSDevices / convertMetaxSDeviceToHAMIDevice: CustomInfo QosPolicy and LinkZone."""
    assert [(d.uuid, d.count, d.memory_mib, d.cores, d.sharing, d.network) for d in DEVICES] == [
        ("card-0", 16, 65536, 100, "best-effort", 1), ("card-1", 16, 65536, 100, "best-effort", 1),
        ("card-2", 16, 65536, 100, "best-effort", NO_NETWORK)]
    assert SgpuInventory().devices({"metadata": {"name": "n"}}) is None


def pod(limits: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "main", "resources": {"limits": dict(limits)}}]}}


def request(limits: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> PodRequest:
    return pod_request(pod(limits, annotations), RequestDefaults.of(CATALOG))


@pytest.mark.parametrize(("limits", "annotations", "memory", "percent", "cores"), [
    ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4"}, {}, 4096, 100, 100),  # TestGenerateResourceRequests
    ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "512Mi", "metax-tech.com/vcore": "30"}, {}, 512, 100, 30),
    ({"metax-tech.com/sgpu": "1"}, {}, 0, 100, 100),  # no memory: the whole card's
    ({"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "40"}, {"metax-tech.com/sgpu-app-class": "online"}, 0, 100,
     0),  # an online pod books no cores (Fit's coreReq = 0)
])
def test_what_a_container_asks(limits: dict[str, str], annotations: dict[str, str], memory: int, percent: int,
                               cores: int) -> None:
    (ask,) = request(limits, annotations).containers
    assert (ask.count, ask.memory_mib, ask.memory_percent, ask.cores) == (1, memory, percent, cores)


def fit(asked: PodRequest, used: Mapping[str, DeviceUsage] | None = None,
        annotations: Mapping[str, str] | None = None) -> PodFit | str:
    view = build_node_view(NodeInventory(name="node-a", devices=DEVICES), dict(used or {}))
    options = pod_options(annotations, node_policy="binpack", gpu_policy="binpack", catalog=CATALOG)
    result = fit_pod(asked, view, options)
    return result.summary() if isinstance(result, FitFailure) else result


def held(qos: str = "best-effort", app_class: str = "", cores: int = 30, pods: int = 1) -> DeviceUsage:
    """What ``pods`` pods of this class hold on a card, as a restart rebuilds it from their annotations."""
    rule = SGPU.sharing
    assert rule is not None
    tags = rule.tags(f"{app_class}/{qos}", cores) * pods
    return DeviceUsage(pods, 4096 * pods, cores * pods, tags=tuple(sorted(tags)))


QOS = "metax-tech.com/sgpu-qos-policy"
CLASS = "metax-tech.com/sgpu-app-class"
SLICE = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "30"}


@pytest.mark.parametrize(("annotations", "used", "outcome"), [
    # TestCheckDeviceQos: a busy card takes only its own QoS; an idle card any
    ({QOS: "fixed-share"}, {f"card-{i}": held("best-effort") for i in range(3)}, "3/3 CardQosPolicyMismatch"),
    ({QOS: "fixed-share"}, {"card-0": held("best-effort"), "card-1": held("best-effort")}, "card-2"),
    ({QOS: "best-effort"}, {f"card-{i}": held("best-effort") for i in range(3)}, "card-0"),
    # a whole-card booking (100 cores) needs no QoS of its card
    ({QOS: "fixed-share"}, {"card-0": held("best-effort", cores=100)}, "card-1"),
    # TestCheckAppClass: app-class pods never join a card of ordinary pods, nor ordinary pods theirs; offline never
    # beside online
    ({CLASS: "online"}, {f"card-{i}": held() for i in range(3)}, "3/3 CardAppClassMismatch"),
    ({QOS: "best-effort"}, {f"card-{i}": held(app_class="offline") for i in range(3)}, "3/3 CardAppClassMismatch"),
    ({CLASS: "offline", QOS: "best-effort"}, {f"card-{i}": held(app_class="online", qos="") for i in range(3)},
     "3/3 CardAppClassMismatch"),
    ({CLASS: "online"}, {f"card-{i}": held(app_class="offline") for i in range(3)}, "card-0"),
])
def test_the_sharing_rule_through_the_fit(annotations: dict[str, str], used: dict[str, DeviceUsage],
                                         outcome: str) -> None:
    placed = fit(request(SLICE, annotations), used)
    assert (placed if isinstance(placed, str) else placed.grants[0][0].uuid) == outcome


@pytest.mark.parametrize(("limits", "used", "reason"), [
    ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "65"}, None, "3/3 CardInsufficientMemory"),
    ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "100"},
     {f"card-{i}": held(cores=0) for i in range(3)},
     "3/3 ExclusiveDeviceAllocateConflict"),  # TestMetaxSDevices_Fit "card exclusively"
    ({"metax-tech.com/sgpu": "4"}, None, "4/3 NodeInsufficientDevice"),
])
def test_the_common_checks_after_the_rule(limits: dict[str, str], used: dict[str, DeviceUsage] | None,
                                          reason: str) -> None:
    """TestMetaxSDevices_Fit's memory, exclusive and count cases."""
    assert fit(request(limits, {QOS: "best-effort"}), used) == reason


def test_a_booking_holds_its_class_and_qos_and_the_bind_writes_metax_annotations() -> None:
    """HAMi AddResourceUsage (the card's QoS becomes the pod's) and PatchAnnotations (both HAMi keys, Metax's
    allocation JSON, the predicate time in ns)."""
    placed = fit(request(SLICE, {QOS: "burst-share"}))
    assert isinstance(placed, PodFit)
    (grant,) = placed.grants[0]
    booking = pod_booking(placed.grants, init_count=0)[grant.uuid]
    assert card_state(booking.tags) == CardState(qos=(("burst-share", 1),))
    written = bind_annotations(placed.grants, CATALOG, now_seconds=7, containers=["main"])
    assert written["hami.io/metax-sgpu-devices-allocated"] == written["hami.io/metax-sgpu-devices-to-allocate"] == \
        f"{grant.uuid},Metax-SGPU,4096,30:;"
    assert json.loads(written["metax-tech.com/gpu-devices-allocated"]) == [
        [{"uuid": grant.uuid, "compute": 30, "vRam": 4096}]]
    assert written["metax-tech.com/predicate-time"] == "7000000000"


def test_whole_cards_are_taken_inside_one_metalink_zone() -> None:
    """HAMi TestPrioritizeExclusiveDevices: two whole cards from the smallest zone holding both (cards 1 and 2 of
    zone 1), not the policy's first two (cards 0 and 1)."""
    listed = json.loads(CARDS)
    for card, zone in zip(listed, (2, 1, 1), strict=True):
        card["linkZone"] = zone
    devices = SgpuInventory().devices(sgpu_node(json.dumps(listed)))
    assert devices is not None
    view = build_node_view(NodeInventory(name="node-a", devices=devices), {})
    options = pod_options({}, node_policy="binpack", gpu_policy="binpack", catalog=CATALOG)
    placed = fit_pod(request({"metax-tech.com/sgpu": "2", "metax-tech.com/vcore": "100"}, {QOS: "best-effort"}),
                     view, options)
    assert isinstance(placed, PodFit)
    assert [grant.uuid for grant in placed.grants[0]] == ["card-1", "card-2"]


def test_an_online_pod_takes_the_card_with_the_fewest_online_pods() -> None:
    """HAMi TestPrioritizeOnlineDevices: fewest online pods first, cards of only offline pods last."""
    used = {"card-0": held(app_class="online", qos="", pods=2), "card-1": held(app_class="offline"),
            "card-2": held(app_class="online", qos="")}
    placed = fit(request(SLICE, {CLASS: "online"}), used)
    assert isinstance(placed, PodFit) and placed.grants[0][0].uuid == "card-2"


def node_view(name: str, zones: tuple[int, ...], used: Mapping[str, DeviceUsage] | None = None) -> NodeView:
    listed = [{"uuid": f"{name}-card-{i}", "totalDevCount": 16, "totalCompute": 100, "totalVRam": 65536, "numa": 0,
               "healthy": True, "qosPolicy": "best-effort", "linkZone": zone} for i, zone in enumerate(zones)]
    devices = SgpuInventory().devices({"metadata": {"name": name, "annotations": {INVENTORY_KEY: json.dumps(listed)}}})
    assert devices is not None
    return build_node_view(NodeInventory(name=name, devices=devices), dict(used or {}))


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_whole_cards_go_to_the_node_that_keeps_them_in_one_metalink_zone(policy: str) -> None:
    """HAMi TestScoreExclusiveDevices and TestScoreNodePolicyIndependence: two whole cards linked in one zone score
    10 × 10 × 10,000 whatever the policy; the node whose cards are in two zones scores nothing and loses, though the
    node policy alone would have chosen it."""
    views = {"linked": node_view("linked", (1, 1, 2)), "apart": node_view("apart", (1, 2, 3))}
    asked = request({"metax-tech.com/sgpu": "2", "metax-tech.com/vcore": "100"},
                    {QOS: "best-effort", "metax-tech.com/sgpu-topology-aware": "true"})
    options = pod_options({}, node_policy=policy, gpu_policy="binpack", catalog=CATALOG)
    placed = choose_node(asked, options, ["apart", "linked"], views)
    assert isinstance(placed, Placement) and placed.node == "linked"
    assert [grant.uuid for grant in placed.grants[0]] == ["linked-card-0", "linked-card-1"]


def test_an_online_pod_prefers_the_node_with_fewer_online_pods() -> None:
    """HAMi TestScoreOnlineDevices: −20 per online pod on the card (× 10,000): the busier node loses."""
    online = held(app_class="online", qos="", pods=2)
    views = {"busy": node_view("busy", (0,), {"busy-card-0": online}),
             "calm": node_view("calm", (0,), {"calm-card-0": held(app_class="online", qos="")})}
    options = pod_options({}, node_policy="binpack", gpu_policy="binpack", catalog=CATALOG)
    placed = choose_node(request(SLICE, {CLASS: "online"}), options, ["busy", "calm"], views)
    assert isinstance(placed, Placement) and placed.node == "calm"


def random_sgpu_node(rng: random.Random, number: int) -> NodeView:
    """Four to eight cards in MetaLink zones, each idle or running online, offline or ordinary pods (sometimes
    full), some nodes with none."""
    name = f"n{number:03d}"
    view = node_view(name, tuple(rng.choice((0, 1, 2)) for _ in range(rng.choice((4, 8)))))
    used = {}
    for device in view.inventory.devices:
        kind = rng.choice(("idle", "idle", "online", "online", "offline", "ordinary", "full"))
        pods = rng.randint(1, 3)
        if kind in ("online", "offline"):
            used[device.uuid] = held(app_class=kind, qos="" if kind == "online" else "best-effort",
                                     cores=0 if kind == "online" else 10, pods=pods)
        elif kind == "ordinary":
            used[device.uuid] = held(pods=pods)
        elif kind == "full":
            used[device.uuid] = DeviceUsage(16, 65536, 100, tags=("class:online",) * 16)
    return build_node_view(view.inventory, used)


@pytest.mark.parametrize("seed", range(4))
def test_online_pods_are_placed_as_fitting_every_node(seed: int) -> None:
    """The filter skips a node whose online term cannot reach the best total (`QosSharing.bound`: the term of the
    cards of least penalty) and stops once no node can beat the best (an online pod's term is at most 0): on random
    clusters of online, offline and ordinary pods, online pods of one or two cards (two containers too), both
    policies, nodes busy binding, one placed after another, every placement is the one fitting every node gives."""
    rng = random.Random(seed)
    views = {view.name: view for view in (random_sgpu_node(rng, number) for number in range(40))}
    for _ in range(80):
        limits = {"metax-tech.com/sgpu": str(rng.choice((1, 1, 2))), "metax-tech.com/vmemory": "4"}
        asked = request(limits, {CLASS: "online"})
        if rng.random() < 0.2:
            asked = PodRequest(containers=asked.containers * 2)
        options = pod_options({}, node_policy=rng.choice(("binpack", "spread")), gpu_policy="binpack", catalog=CATALOG)
        busy = frozenset(rng.sample(sorted(views), 4))
        place_as_everywhere(asked, options, views, busy)
