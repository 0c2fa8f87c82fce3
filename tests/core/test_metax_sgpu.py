"""Metax sGPU rules (hami_web.core.families.metax_sgpu and metax_qos), table-driven from HAMi v2.10's
``pkg/device/metax/sdevice_test.go``, ``qos_test.go`` and ``protocol_test.go`` (each case names its Go test).

Covers: the inventory schema decoder and its refusals, vmemory in GiB unless a unit is given, the webhook's app
class and QoS rules with the default QoS, per-card QoS consistency, the QoS state as a value (HAMi's jittery QoS
cache: sync, get, promises), app classes, MetaLink zone preference, the exclusive and online scores, the
topology-aware switch, the ±10,000 weight and the allocation annotation.
"""

from __future__ import annotations

import json

import pytest

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families.metax_qos import (
    CardState,
    LinkedCard,
    QosExpectations,
    SharingPod,
    app_class_fits,
    exclusive_score,
    link_score,
    node_score,
    online_score,
    prioritize_exclusive,
    prioritize_online,
    qos_fits,
    sharing_problem,
    topology_aware,
    weighted_score,
)
from hami_web.core.families.metax_sgpu import (
    APP_CLASS_KEY,
    BEST_EFFORT,
    BURST_SHARE,
    CW,
    FIXED_SHARE,
    OFFLINE,
    ONLINE,
    QOS_POLICY_KEY,
    SgpuCard,
    allocated_annotation,
    decode_sgpu_devices,
    sgpu_admission,
    sgpu_memory_mib,
)
from hami_web.core.quantities import QuantityError

# ---- inventory ----

NORMAL_NODE = ('[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, '
               '"bdf": "0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true, "qosPolicy": "fixed-share"}]')


def test_inventory_of_a_normal_node() -> None:
    """HAMi sdevice_test.go TestGetMetaxSDevices "test normal node" and protocol_test.go
    TestConvertMetaxSDeviceToHAMIDevice: card i is index i, shares, MiB and cores from the totals."""
    assert decode_sgpu_devices(NORMAL_NODE) == (SgpuCard(
        device=Device(uuid="GPU-123", index=0, count=16, memory_mib=32768, cores=100, type=CW, numa=1,
                      healthy=True, family=CW),
        qos_policy=FIXED_SHARE, link_zone=0, model="sgpu"),)


def test_inventory_keys_are_read_as_go_reads_them() -> None:
    """Go's decoder matches keys case-insensitively; ``healthy`` left out is false (``omitempty``)."""
    cards = decode_sgpu_devices('[{"UUID": "a", "TotalDevCount": 4, "LINKZONE": 2}, {"uuid": "b", "healthy": true}]')
    assert [(c.device.uuid, c.device.index, c.device.count, c.link_zone, c.device.healthy) for c in cards] == [
        ("a", 0, 4, 2, False), ("b", 1, 0, 0, True)]


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid JSON"),  # TestGetMetaxSDevices "test Unmarshal fail"
    ("[]", "lists no sdevice"),  # TestGetMetaxSDevices "test devices len 0"
    ('{"uuid": "a"}', "must be a list"),
    ("[null]", "expected an object"),
    ('[{"uuid": ""}]', "is empty"),
    ('[{"uuid": "a,b"}]', "contains ','"),
    ('[{"uuid": "a"}, {"uuid": "a"}]', "listed twice"),
    ('[{"uuid": "a", "totalVRam": "32768"}]', "not an integer"),
    ('[{"uuid": "a", "totalVRam": 1e40}]', "not an integer"),
    ('[{"uuid": "a", "totalDevCount": 2147483648}]', "outside"),
    ('[{"uuid": "a", "healthy": "yes"}]', "not a boolean"),
    ('[{"uuid": "a", "qosPolicy": 3}]', "not a string"),
])
def test_unreadable_inventory_is_refused_naming_why(text: str, message: str) -> None:
    """A malformed inventory is an `AnnotationError` saying what is wrong, never a crash."""
    with pytest.raises(AnnotationError, match=message):
        decode_sgpu_devices(text)


# ---- requests ----

@pytest.mark.parametrize(("value", "mib"), [
    ("16", 16 * 1024),  # TestGenerateResourceRequests "one sgpu test set vmemory": a bare number is GiB
    ("1024Mi", 1024),  # "mem unit Mi"
    ("16Gi", 16 * 1024),  # "mem unit Gi"
    (8, 8 * 1024),
    ("0", 0),
    ("2097151", 2097151 * 1024),
])
def test_vmemory_is_gib_unless_it_has_a_unit(value: object, mib: int) -> None:
    """HAMi GenerateResourceRequests: MemoryFactor 1024 for a bare quantity, bytes ÷ 2²⁰ with a unit."""
    assert sgpu_memory_mib(value, container="c", resource="metax-tech.com/vmemory") == mib


@pytest.mark.parametrize("value", [
    "2100001",  # TestGenerateResourceRequests "oversized memory request exceeds int32 range (no unit, ...)"
    "-1", "1.5", "lots", "1" * 40, True, None,
])
def test_vmemory_out_of_range_or_not_a_quantity_is_refused(value: object) -> None:
    """A vmemory HAMi cannot book (it drops the request) is a `QuantityError` naming container and resource."""
    with pytest.raises(QuantityError, match=r"container c: metax-tech\.com/vmemory"):
        sgpu_memory_mib(value, container="c", resource="metax-tech.com/vmemory")


# ---- admission ----

@pytest.mark.parametrize(("annotations", "counts", "added", "refusal"), [
    # HAMi sdevice_test.go TestMutateAdmission
    ({QOS_POLICY_KEY: "best-effortx"}, [1], {}, "metax-tech.com/sgpu-qos-policy must be set one of "
                                                "[best-effort, fixed-share, burst-share]"),  # qos policy error
    ({}, [1], {QOS_POLICY_KEY: BEST_EFFORT}, ""),  # no qos policy / pod annotation nil
    ({QOS_POLICY_KEY: BURST_SHARE}, [1], {}, ""),  # qos policy fit
    ({APP_CLASS_KEY: ONLINE}, [2], {}, "app-class pod must request single device"),
    ({APP_CLASS_KEY: "oNLine"}, [1], {}, "metax-tech.com/sgpu-app-class must be set one of [online, offline]"),
    ({APP_CLASS_KEY: OFFLINE, QOS_POLICY_KEY: "best-effortx"}, [1], {},
     "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]"),
    ({APP_CLASS_KEY: ONLINE, QOS_POLICY_KEY: "anything"}, [1], {}, ""),  # online task with qos: not checked
    ({APP_CLASS_KEY: OFFLINE}, [1], {QOS_POLICY_KEY: BEST_EFFORT}, ""),
    ({}, [1, 2], {QOS_POLICY_KEY: BEST_EFFORT}, ""),
])
def test_admission_checks_app_class_and_writes_the_default_qos(annotations: dict[str, str], counts: list[int],
                                                               added: dict[str, str], refusal: str) -> None:
    """HAMi sdevice_test.go TestMutateAdmission."""
    answer = sgpu_admission(annotations, counts)
    assert (dict(answer.annotations), answer.refusal) == (added, refusal)


# ---- QoS per card ----

@pytest.mark.parametrize(("tasks", "request_cores", "reported", "fits"), [
    # HAMi sdevice_test.go TestCheckDeviceQos (request best-effort)
    (0, 50, BURST_SHARE, True),  # check no use device
    (2, 100, BURST_SHARE, True),  # check request exclusive
    (2, 50, BURST_SHARE, False),  # check fail
    (2, 50, BEST_EFFORT, True),  # check pass
    (2, 50, "", True),
])
def test_qos_of_a_busy_card_must_match(tasks: int, request_cores: int, reported: str, fits: bool) -> None:
    """HAMi checkDeviceQos on the card's QoS as reported (no pod state, nothing pending)."""
    assert qos_fits(BEST_EFFORT, tasks=tasks, request_cores=request_cores, state=CardState(),
                    reported_qos=reported) is fits


def test_the_qos_the_cards_pods_need_wins_over_the_reported_one() -> None:
    """HAMi AddResourceUsage overwrites a card's QoS with its pods': the device plugin's report lags behind."""
    state = CardState.of(SharingPod(qos=FIXED_SHARE, cores=30))
    assert qos_fits(FIXED_SHARE, tasks=1, request_cores=30, state=state, reported_qos=BEST_EFFORT)
    assert not qos_fits(BEST_EFFORT, tasks=1, request_cores=30, state=state, reported_qos=BEST_EFFORT)


def test_a_pending_expectation_wins_over_everything() -> None:
    """HAMi checkDeviceQos reads the jittery cache first."""
    state = CardState.of(SharingPod(qos=FIXED_SHARE, cores=30))
    assert qos_fits(BURST_SHARE, tasks=1, request_cores=30, state=state, reported_qos=BEST_EFFORT,
                    pending_qos=BURST_SHARE)


def test_a_whole_card_pod_needs_no_qos_and_pods_that_disagree_must_all_agree_with_the_ask() -> None:
    """An exclusive pod's expected QoS is "" (any); a card whose pods disagree takes neither QoS."""
    assert SharingPod(qos=FIXED_SHARE, cores=100).expected_qos == ""
    assert SharingPod(app_class=ONLINE, qos=FIXED_SHARE, cores=10).expected_qos is None
    mixed = CardState.of(SharingPod(qos=FIXED_SHARE, cores=10)) + CardState.of(SharingPod(qos=BURST_SHARE, cores=10))
    assert not qos_fits(FIXED_SHARE, tasks=2, request_cores=10, state=mixed, reported_qos="")
    whole = CardState.of(SharingPod(qos=FIXED_SHARE, cores=100))
    assert qos_fits(BURST_SHARE, tasks=1, request_cores=0, state=whole, reported_qos=FIXED_SHARE)


def test_card_state_adds_and_subtracts_with_bookings() -> None:
    """What a card holds is a sum of its pods: a booking released leaves what was there before."""
    one = CardState.of(SharingPod(qos=FIXED_SHARE, cores=10))
    two = CardState.of(SharingPod(app_class=OFFLINE, qos=FIXED_SHARE, cores=10))
    both = one + two
    assert both == CardState(qos=((FIXED_SHARE, 2),), online=0, offline=1)
    assert both - two == one
    assert both - two - one == CardState()


# ---- the QoS state as a value (qos.go) ----

@pytest.mark.parametrize(("expected", "after"), [
    # HAMi qos_test.go TestJitteryQosCacheSync (every card reports best-effort)
    ({"GPU-123": FIXED_SHARE, "GPU-789": BURST_SHARE}, {"GPU-123": FIXED_SHARE, "GPU-789": BURST_SHARE}),
    ({"GPU-123": BEST_EFFORT, "GPU-789": BURST_SHARE}, {"GPU-789": BURST_SHARE}),
    ({"GPU-123": BEST_EFFORT, "GPU-789": BEST_EFFORT}, {}),
])
def test_expectations_sync_drops_what_the_node_now_reports(expected: dict[str, str], after: dict[str, str]) -> None:
    """HAMi qos_test.go TestJitteryQosCacheSync."""
    reported = [("GPU-123", BEST_EFFORT), ("GPU-456", BEST_EFFORT), ("GPU-789", BEST_EFFORT)]
    assert dict(QosExpectations(expected).synced(reported).expected) == after


def test_expectations_get() -> None:
    """HAMi qos_test.go TestGet."""
    state = QosExpectations({"GPU-123": FIXED_SHARE, "GPU-789": BURST_SHARE})
    assert (state.get("GPU-789"), state.get("GPU-000")) == (BURST_SHARE, None)


def test_a_booking_promises_the_qos_of_cards_that_report_another() -> None:
    """HAMi sdevice_test.go TestAddJitteryQos "request BestEffort": a whole card is promised ""."""
    promised = QosExpectations().promised(app_class="", qos=BEST_EFFORT, cards=[
        ("GPU-123", BEST_EFFORT, 50), ("GPU-456", BURST_SHARE, 50), ("GPU-789", BEST_EFFORT, 100)])
    assert dict(promised.expected) == {"GPU-456": BEST_EFFORT, "GPU-789": ""}
    assert QosExpectations().promised(app_class=ONLINE, qos=BEST_EFFORT, cards=[("GPU-1", BURST_SHARE, 10)]) \
        == QosExpectations()


# ---- app classes ----

@pytest.mark.parametrize(("request_class", "tasks", "state", "fits"), [
    # HAMi sdevice_test.go TestCheckAppClass
    (ONLINE, 0, CardState(), True),  # idle device fit
    ("", 1, CardState(online=1), False),  # normal task unfit online device
    ("", 1, CardState(offline=1), False),  # normal task unfit offline device
    ("", 1, CardState(), True),  # normal task fit normal device
    (ONLINE, 1, CardState(), False),  # online task unfit normal device
    (ONLINE, 2, CardState(online=1, offline=1), True),  # online task fit online/offline device
    (OFFLINE, 2, CardState(online=1, offline=1), False),  # offline task unfit online device
    (OFFLINE, 1, CardState(offline=1), True),
])
def test_app_classes_never_mix_with_ordinary_pods(request_class: str, tasks: int, state: CardState,
                                                   fits: bool) -> None:
    """HAMi sdevice_test.go TestCheckAppClass."""
    assert app_class_fits(request_class, tasks=tasks, state=state) is fits


def test_online_pods_prefer_cards_with_few_online_pods_and_avoid_offline_only_cards() -> None:
    """HAMi sdevice_test.go TestPrioritizeOnlineDevices (all four cases, one card each)."""
    def pick(*cards: tuple[str, int, int]) -> tuple[str, ...]:
        return prioritize_online([(uuid, CardState(online=on, offline=off)) for uuid, on, off in cards], 1)

    assert pick(("GPU-1", 0, 0), ("GPU-2", 1, 0), ("GPU-3", 2, 0), ("GPU-4", 1, 1), ("GPU-5", 2, 1),
                ("GPU-6", 0, 1), ("GPU-7", 0, 2)) == ("GPU-1",)  # prioritize idle device
    assert pick(("GPU-1", 1, 0), ("GPU-2", 2, 0), ("GPU-3", 3, 1), ("GPU-4", 0, 2)) == ("GPU-1",)
    assert pick(("GPU-1", 3, 0), ("GPU-2", 1, 1), ("GPU-3", 2, 1), ("GPU-4", 0, 1), ("GPU-5", 0, 2)) == ("GPU-2",)
    assert pick(("GPU-1", 0, 1), ("GPU-2", 0, 2)) == ("GPU-1",)  # prioritize onlyOffline device


@pytest.mark.parametrize(("state", "score"), [
    # HAMi sdevice_test.go TestScoreOnlineDevices
    (CardState(), 0), (CardState(online=2), -40), (CardState(offline=2), -200), (CardState(online=2, offline=2), -44),
])
def test_online_score(state: CardState, score: int) -> None:
    """HAMi sdevice_test.go TestScoreOnlineDevices."""
    assert online_score(["GPU-123"], {"GPU-123": state}) == score


# ---- MetaLink ----

def cards(*zones: tuple[str, int]) -> list[LinkedCard]:
    return [LinkedCard(uuid, zone) for uuid, zone in zones]


@pytest.mark.parametrize(("candidates", "require", "picked"), [
    # HAMi sdevice_test.go TestPrioritizeExclusiveDevices
    ([("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2)], 1, ["GPU-5"]),  # require one device
    ([("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)], 2, ["GPU-1", "GPU-2"]),
    ([("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2), ("GPU-8", 2)], 4,
     ["GPU-5", "GPU-6", "GPU-7", "GPU-8"]),  # require four device, best result
    ([("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)], 4,
     ["GPU-1", "GPU-2", "GPU-5", "GPU-6"]),  # require four device, general result
    ([("GPU-5", 0), ("GPU-6", 0), ("GPU-7", 0)], 2, ["GPU-5", "GPU-6"]),  # no metalink
    ([("GPU-3", 0), ("GPU-4", 0), ("GPU-7", 1), ("GPU-8", 1)], 2, ["GPU-7", "GPU-8"]),  # part metalink, best
    ([("GPU-3", 0), ("GPU-4", 0), ("GPU-6", 1), ("GPU-7", 1), ("GPU-8", 1)], 4,
     ["GPU-6", "GPU-7", "GPU-8", "GPU-3"]),  # part metalink, require four device, bad result
    ([("GPU-1", 3), ("GPU-2", 3), ("GPU-3", 1), ("GPU-4", 1)], 2, ["GPU-3", "GPU-4"]),  # equal zones: lower zone
])
def test_whole_cards_prefer_one_metalink_zone(candidates: list[tuple[str, int]], require: int,
                                              picked: list[str]) -> None:
    """HAMi sdevice_test.go TestPrioritizeExclusiveDevices."""
    assert [card.uuid for card in prioritize_exclusive(cards(*candidates), require)] == picked


Z1 = [("GPU-1", 1), ("GPU-2", 1), ("GPU-3", 1), ("GPU-4", 1)]
Z2 = [("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2), ("GPU-8", 2)]


@pytest.mark.parametrize(("granted", "idle_before", "score"), [
    # HAMi sdevice_test.go TestScoreExclusiveDevices
    ([("GPU-4", 1)], [("GPU-4", 1)], 0),  # allocate one device, rest zero device
    ([("GPU-4", 1)], Z1, -30),  # allocate one device, rest three device
    ([("GPU-3", 1), ("GPU-4", 1)], Z1, 60),  # allocate two device, best result
    ([("GPU-4", 1), ("GPU-5", 2)], [("GPU-4", 1), ("GPU-5", 2)], 0),  # allocate two device, bad result
    (Z1, Z1 + Z2, 600),  # allocate four device, best result
    (Z1 + Z2, Z1 + Z2, 1200),  # allocate eight device
])
def test_exclusive_score(granted: list[tuple[str, int]], idle_before: list[tuple[str, int]], score: int) -> None:
    """HAMi sdevice_test.go TestScoreExclusiveDevices."""
    assert exclusive_score(cards(*granted), cards(*idle_before)) == score


def test_link_score_counts_pairs_in_one_positive_zone() -> None:
    """HAMi score.go LinkDevices.Score: zone 0 is no MetaLink."""
    assert link_score(cards(("a", 1), ("b", 1), ("c", 0), ("d", 0), ("e", 1))) == 30


@pytest.mark.parametrize(("annotation", "default", "aware"), [
    # HAMi sdevice_test.go TestNeedScore: the pod's annotation, else the server's switch
    ("true", False, True), ("false", True, False), (None, True, True), (None, False, False),
    ("T", False, True), ("0", True, False), ("yes", True, True), ("yes", False, False),
])
def test_topology_aware_switch(annotation: str | None, default: bool, aware: bool) -> None:
    """HAMi topologyAwareEnable (Go's ParseBool; an unreadable value leaves the server's switch)."""
    assert topology_aware(annotation, default=default) is aware


@pytest.mark.parametrize(("score", "spread", "weighted"), [(60, False, 600_000.0), (60, True, -600_000.0),
                                                           (-44, False, -440_000.0), (0, True, 0.0)])
def test_family_score_is_weighted_and_negated_under_spread(score: int, spread: bool, weighted: float) -> None:
    """HAMi node_policy.go OverrideScore (node_policy_test.go: Metax's raw score × 10000, −10000 under spread)."""
    assert weighted_score(score, spread=spread) == weighted


# ---- the allocation annotation ----

def test_allocated_annotation_per_container() -> None:
    """HAMi protocol_test.go TestConvertHAMIPodDeviceToMetaxPodDevice: uuid, compute, vRam per card."""
    grants = [[("GPU-a0", 50, 10), ("GPU-a1", 30, 1024)], [("GPU-a3", 20, 10 * 1024), ("GPU-a7", 80, 64 * 1024)]]
    assert json.loads(allocated_annotation(grants)) == [
        [{"uuid": "GPU-a0", "compute": 50, "vRam": 10}, {"uuid": "GPU-a1", "compute": 30, "vRam": 1024}],
        [{"uuid": "GPU-a3", "compute": 20, "vRam": 10240}, {"uuid": "GPU-a7", "compute": 80, "vRam": 65536}]]


def test_allocated_annotation_leaves_out_zero_fields_and_keeps_empty_containers() -> None:
    """Go's ``omitempty`` on compute and vRam; a container without cards is an empty list."""
    assert allocated_annotation([[("GPU-1", 0, 0)], []]) == '[[{"uuid":"GPU-1"}],[]]'


@pytest.mark.parametrize(("pod", "tasks", "state", "reported", "problem"), [
    # HAMi sdevice_test.go TestMetaxSDevices_Fit "online task, app class unfit" / "normal task, app class unfit"
    (SharingPod(app_class=ONLINE, cores=10), 1, CardState(qos=((BEST_EFFORT, 1),)), BEST_EFFORT,
     "CardAppClassMismatch"),
    (SharingPod(qos=BEST_EFFORT, cores=10), 1, CardState(online=1), BEST_EFFORT, "CardAppClassMismatch"),
    (SharingPod(qos=BEST_EFFORT, cores=10), 1, CardState(qos=((FIXED_SHARE, 1),)), FIXED_SHARE,
     "CardQosPolicyMismatch"),
    (SharingPod(app_class=ONLINE, qos=BURST_SHARE, cores=10), 1, CardState(online=1), FIXED_SHARE, ""),
    (SharingPod(qos=BEST_EFFORT, cores=10), 0, CardState(), FIXED_SHARE, ""),  # fit success: an idle card
])
def test_metax_card_checks_in_hamis_order(pod: SharingPod, tasks: int, state: CardState, reported: str,
                                          problem: str) -> None:
    """HAMi MetaxSDevices.Fit: the app class first, then the QoS for pods that are not online."""
    assert sharing_problem(pod, tasks=tasks, state=state, reported_qos=reported) == problem


@pytest.mark.parametrize(("pod", "annotation", "default", "spread", "score"), [
    # HAMi sdevice_test.go TestScoreNodePolicyIndependence: topology-aware exclusive (60), online, neither (0)
    (SharingPod(qos=BEST_EFFORT, cores=100), None, True, False, 600_000.0),
    (SharingPod(qos=BEST_EFFORT, cores=100), None, True, True, -600_000.0),
    (SharingPod(qos=BEST_EFFORT, cores=100), "false", True, False, 0.0),
    (SharingPod(qos=BEST_EFFORT, cores=100), "true", False, False, 600_000.0),
    (SharingPod(qos=BEST_EFFORT, cores=50), "true", True, False, 0.0),
    (SharingPod(app_class=ONLINE, cores=10), None, False, False, -20 * 10_000.0),
])
def test_node_score_dispatch(pod: SharingPod, annotation: str | None, default: bool, spread: bool,
                             score: float) -> None:
    """HAMi ScoreNode: online pods by online load, whole cards by MetaLink when topology-aware, else 0."""
    granted = cards(("GPU-3", 1), ("GPU-4", 1))
    states = {"GPU-3": CardState(online=1), "GPU-4": CardState()}
    assert node_score(pod, granted=granted, idle_before=cards(*Z1), states=states, topology_default=default,
                      topology_annotation=annotation, spread=spread) == score
