"""Cambricon MLUs (docs/device-families.md#device-families): the inventory read from node capacity, the card type, the
profile annotations, and the family's own node lock.

Covers: capacity → cards as a table (HAMi's example V 800, M 1536 → eight cards of 49152 MiB; odd vcore counts giving
⌈V/100⌉ cards with the integer memory share; V absent or 0 → no MLU; M absent → cards without memory; canonical
quantities like ``2k``; unreadable, fractional, negative or out-of-range values and over-long ids refused with an
`AnnotationError` naming the resource); the card type from the ``Model`` label (an MLU model, any other label, none);
the node reader: a node with capacity and no annotations is an MLU node, a capacity change changes the record and the
inventory, no handshake is ever due and no time makes its device plugin "gone", a bad capacity leaves the node's other
families usable; ``cambricon.com/use-mlutype`` / ``nouse-mlutype`` against known and unknown models; the profile
annotation values (first device of the first container holding one, index from the id, memory in 256 MiB units, a pod
without MLUs writing none, a GPU+MLU pod writing both families' keys); which locks a booking takes (NVIDIA and DCU
share ``hami.io/mutex.lock``, MLU takes only its own, a GPU+MLU pod both, in key order); the bare-time lock rule (value,
parse ignoring any owner text, held message, live/stale at the 2-minute bound, unparsable = stale), and the watch's
view of both locks (`SeenNode.value`).
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.families.cambricon import DSMLU_LOCK, card_index, dsmlu_annotations, mlu_inventory, mlu_type
from hami_web.core.grants import DeviceGrant, booking_annotations, booking_locks
from hami_web.core.nodelocks import MUTEX_LOCK, SeenNode, bare_lock_live, format_time
from hami_web.core.options import family_selection
from hami_web.state.nodes import device_plugin_gone, handshake_due, node_record, node_state

VCORE = "cambricon.com/mlu.smlu.vcore"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"
READER = mlu_inventory(cores_resource=VCORE, memory_resource=VMEMORY)
NOW = 1_800_000_000.0


def mlu_node(capacity: dict[str, Any] | None, *, name: str = "n1", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    node: dict[str, Any] = {"metadata": metadata}
    if capacity is not None:
        node["status"] = {"capacity": capacity}
    return node


def shape(devices: tuple[Device, ...] | None) -> list[tuple[str, int, int, int, int]] | None:
    """(id, index, shares, MiB, cores) per card."""
    if devices is None:
        return None
    return [(d.uuid, d.index, d.count, d.memory_mib, d.cores) for d in devices]


# -- capacity → cards ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("capacity", "cards"), [
    pytest.param({VCORE: "800", VMEMORY: "1536"}, [(f"n1-cambricon-mlu-{i}", i, 100, 49152, 100) for i in range(8)],
                 id="hami-example-8-cards"),
    pytest.param({VCORE: "100", VMEMORY: "96"}, [("n1-cambricon-mlu-0", 0, 100, 24576, 100)], id="one-card"),
    pytest.param({VCORE: "150", VMEMORY: "600"}, [("n1-cambricon-mlu-0", 0, 100, 102400, 100),
                                                  ("n1-cambricon-mlu-1", 1, 100, 102400, 100)],
                 id="odd-vcores-round-up-with-integer-share"),
    pytest.param({VCORE: "1", VMEMORY: "1"}, [("n1-cambricon-mlu-0", 0, 100, 25600, 100)], id="one-vcore"),
    pytest.param({VCORE: "301", VMEMORY: "7"}, [(f"n1-cambricon-mlu-{i}", i, 100, 595, 100) for i in range(4)],
                 id="odd-vcores-memory-share-truncated"),  # 7 × 256 × 100 / 301 = 595.3
    pytest.param({VCORE: "200"}, [(f"n1-cambricon-mlu-{i}", i, 100, 0, 100) for i in range(2)],
                 id="no-vmemory-no-memory"),
    pytest.param({VCORE: "2k", VMEMORY: "3k"}, [(f"n1-cambricon-mlu-{i}", i, 100, 38400, 100) for i in range(20)],
                 id="canonical-quantities"),
    pytest.param({VCORE: 200, VMEMORY: 64}, [(f"n1-cambricon-mlu-{i}", i, 100, 8192, 100) for i in range(2)],
                 id="numbers-not-text"),
    pytest.param({VMEMORY: "1536"}, None, id="no-vcore-no-mlu"),
    pytest.param({VCORE: "0", VMEMORY: "1536"}, None, id="zero-vcore-no-mlu"),
    pytest.param({}, None, id="empty-capacity"),
    pytest.param({"cpu": "8", "nvidia.com/gpu": "4"}, None, id="a-gpu-node"),
])
def test_capacity_gives_the_cards(capacity: dict[str, Any], cards: list[tuple[str, int, int, int, int]] | None) -> None:
    assert shape(READER.devices(mlu_node(capacity))) == cards


@pytest.mark.parametrize("node", [
    pytest.param({"metadata": {"name": "n1"}}, id="no-status"),
    pytest.param({"metadata": {"name": "n1"}, "status": None}, id="null-status"),
    pytest.param({"metadata": {"name": "n1"}, "status": {"capacity": ["x"]}}, id="capacity-not-a-map"),
])
def test_a_node_without_readable_capacity_has_no_mlu(node: dict[str, Any]) -> None:
    assert READER.devices(node) is None


@pytest.mark.parametrize(("capacity", "message"), [
    pytest.param({VCORE: "eight"}, f"status.capacity[{VCORE}]: 'eight' is not a whole number", id="vcore-text"),
    pytest.param({VCORE: "1.5"}, f"status.capacity[{VCORE}]: '1.5' is not a whole number", id="vcore-fraction"),
    pytest.param({VCORE: "-100"}, f"status.capacity[{VCORE}]: '-100' is not a whole number", id="vcore-negative"),
    pytest.param({VCORE: "1e9"}, f"status.capacity[{VCORE}]: '1e9' is not a whole number in 0..409700",
                 id="vcore-more-cards-than-any-index"),
    pytest.param({VCORE: "100", VMEMORY: "x"}, f"status.capacity[{VMEMORY}]: 'x' is not a whole number",
                 id="vmemory-text"),
    pytest.param({VCORE: "100", VMEMORY: "8388608"}, "is 2147483648 MiB a device, over the limit of 2147483647",
                 id="card-memory-over-the-limit"),
    pytest.param({VCORE: True}, f"status.capacity[{VCORE}]: True is not", id="vcore-boolean"),
])
def test_an_unreadable_capacity_is_an_error_naming_the_resource(capacity: dict[str, Any], message: str) -> None:
    with pytest.raises(AnnotationError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        READER.devices(mlu_node(capacity))


def test_an_id_too_long_for_a_device_is_an_error() -> None:
    with pytest.raises(AnnotationError, match="is longer than 128 characters"):
        READER.devices(mlu_node({VCORE: "100"}, name="n" * 120))


@pytest.mark.parametrize(("labels", "card_type"), [
    pytest.param({"Model": "MLU370-X4"}, "MLU370-X4", id="mlu-model"),
    pytest.param({"Model": "mlu290"}, "mlu290", id="lower-case-model-kept"),
    pytest.param({"Model": "A100"}, "MLU", id="model-of-something-else"),
    pytest.param({"model": "MLU370-X4"}, "MLU", id="label-key-is-case-sensitive"),
    pytest.param({}, "MLU", id="no-label"),
    pytest.param(None, "MLU", id="no-labels"),
])
def test_the_card_type_is_the_model_label_when_it_names_an_mlu(labels: dict[str, str] | None,
                                                               card_type: str) -> None:
    node = mlu_node({VCORE: "200"}, labels=labels)
    assert mlu_type(node) == card_type
    assert {device.type for device in READER.devices(node) or ()} == {card_type}


# -- the node reader ---------------------------------------------------------------------------------------------

def test_a_node_with_mlu_capacity_and_no_annotations_is_an_mlu_node() -> None:
    record = node_record(mlu_node({VCORE: "800", VMEMORY: "1536"}))
    state = node_state(record, now=NOW)
    assert state.inventory is not None and state.error == ""
    assert [(d.uuid, d.family, d.memory_mib) for d in state.inventory.devices] == [
        (f"n1-cambricon-mlu-{i}", "MLU", 49152) for i in range(8)]


def test_an_mlu_node_never_has_a_handshake_due_nor_a_plugin_gone() -> None:
    record = node_record(mlu_node({VCORE: "200"}, annotations={"hami.io/node-handshake": "Deleted_2020-01-01"}))
    assert handshake_due(record) == ()
    for later in (NOW, NOW + 3600, NOW + 10 * 365 * 86400):
        assert device_plugin_gone(record, now=later) == ()
        assert node_state(record, now=later).inventory is not None


def test_a_capacity_change_changes_the_record_and_the_inventory() -> None:
    before = node_record(mlu_node({VCORE: "800", VMEMORY: "1536"}))
    same = node_record(mlu_node({VCORE: "800", VMEMORY: "1536"}))
    after = node_record(mlu_node({VCORE: "400", VMEMORY: "1536"}))
    assert before == same  # an unchanged node is not judged again
    assert before != after
    inventory = node_state(after, now=NOW).inventory
    assert inventory is not None
    assert [(d.uuid, d.memory_mib) for d in inventory.devices] == [
        (f"n1-cambricon-mlu-{i}", 98304) for i in range(4)]
    gone = node_record(mlu_node({VCORE: "0", VMEMORY: "1536"}))
    assert not gone.has_devices and node_state(gone, now=NOW).inventory is None


def test_a_bad_capacity_leaves_the_nodes_other_families_usable() -> None:
    register = "DCU-0,4,65520,100,DCU-BW100,0,true:"
    node = mlu_node({VCORE: "lots"}, annotations={"hami.io/node-dcu-register": register,
                                                    "hami.io/node-handshake-dcu": "Requesting_2099-01-01 00:00:00"})
    state = node_state(node_record(node), now=NOW)
    assert state.inventory is not None
    assert [d.uuid for d in state.inventory.devices] == ["DCU-0"]
    assert f"status.capacity[{VCORE}]" in state.error and "'lots'" in state.error


def test_a_bad_capacity_alone_makes_the_node_unusable_with_the_reason() -> None:
    state = node_state(node_record(mlu_node({VCORE: "-1"})), now=NOW)
    assert state.inventory is None
    assert state.error == f"MLU: status.capacity[{VCORE}]: '-1' is not a whole number in 0..409700"


def test_the_lock_annotations_are_kept_on_the_record() -> None:
    record = node_record(mlu_node({VCORE: "100"}, annotations={
        "cambricon.com/dsmlu.lock": "2026-08-21T06:20:39Z", "hami.io/mutex.lock": "2026-08-21T06:20:39Z,ns,p"}))
    assert record.lock == "2026-08-21T06:20:39Z,ns,p"
    assert record.other_locks == (("cambricon.com/dsmlu.lock", "2026-08-21T06:20:39Z"),)


# -- type selection ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("annotations", "card_type", "allowed"), [
    pytest.param({}, "MLU370-X4", True, id="no-selection-known-model"),
    pytest.param({}, "MLU", True, id="no-selection-unknown-model"),
    pytest.param({"cambricon.com/use-mlutype": "MLU370"}, "MLU370-X4", True, id="use-matching-model"),
    pytest.param({"cambricon.com/use-mlutype": "mlu370"}, "MLU370-X4", True, id="use-case-insensitive"),
    pytest.param({"cambricon.com/use-mlutype": "MLU290"}, "MLU370-X4", False, id="use-other-model"),
    pytest.param({"cambricon.com/use-mlutype": "MLU290,MLU370"}, "MLU370-X4", True, id="use-list"),
    pytest.param({"cambricon.com/nouse-mlutype": "MLU370"}, "MLU370-X4", False, id="nouse-matching-model"),
    pytest.param({"cambricon.com/nouse-mlutype": "MLU290"}, "MLU370-X4", True, id="nouse-other-model"),
    # HAMi v2.10's CambriconDevices reads neither annotation and places the pod: where the model is unknown, neither
    # can be judged, so both are ignored (docs/device-families.md#device-families).
    pytest.param({"cambricon.com/use-mlutype": "MLU"}, "MLU", True, id="use-with-model-unknown-ignored"),
    pytest.param({"cambricon.com/use-mlutype": "MLU370"}, "MLU", True, id="use-a-model-where-unknown-ignored"),
    pytest.param({"cambricon.com/nouse-mlutype": "MLU290"}, "MLU", True, id="nouse-with-model-unknown-ignored"),
    pytest.param({"hygon.com/use-dcutype": "BW"}, "MLU", True, id="another-familys-selection"),
    pytest.param({"cambricon.com/use-gpuuuid": "n1-cambricon-mlu-0"}, "MLU", True, id="uuid-pin-is-not-a-type"),
])
def test_mlu_type_selection(annotations: dict[str, str], card_type: str, allowed: bool) -> None:
    assert family_selection(annotations, DEFAULT_CATALOG["MLU"]).type_allowed(card_type) is allowed


# -- profile annotations -----------------------------------------------------------------------------------------

def mlu(index: int, memory_mib: int, cores: int, node: str = "100.10.15.224") -> DeviceGrant:
    return DeviceGrant(uuid=f"{node}-cambricon-mlu-{index}", memory_mib=memory_mib, cores=cores, vendor="MLU")


GPU = DeviceGrant(uuid="GPU-a", memory_mib=1000, cores=30)


@pytest.mark.parametrize(("grants", "expected"), [
    pytest.param(((mlu(7, 12288, 50),),), {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "7_50_48"},
                 id="wire-format-example"),
    pytest.param(((), (mlu(2, 24576, 100), mlu(3, 24576, 100))),
                 {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "2_100_96"},
                 id="first-container-holding-one"),
    pytest.param(((mlu(0, 300, 10),), (mlu(5, 25600, 20),)),
                 {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "0_10_1"},
                 id="memory-in-whole-256-mib-units"),
    pytest.param(((mlu(12, 0, 0),),), {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "12_0_0"},
                 id="two-digit-index-no-memory"),
    pytest.param(((DeviceGrant(uuid="odd-id", memory_mib=256, cores=5, vendor="MLU"),),),
                 {"CAMBRICON_DSMLU_ASSIGNED": "false"}, id="id-naming-no-index-gets-no-profile"),
    pytest.param(((), ()), {}, id="no-mlu"),
    pytest.param((), {}, id="no-containers"),
])
def test_the_profile_annotations(grants: tuple[tuple[DeviceGrant, ...], ...], expected: dict[str, str]) -> None:
    assert dsmlu_annotations(grants) == expected


@pytest.mark.parametrize(("uuid", "index"), [
    ("n1-cambricon-mlu-0", 0), ("a-cambricon-mlu-b-cambricon-mlu-15", 15), ("n1-cambricon-mlu-", None),
    ("n1-cambricon-mlu-x", None), ("GPU-0", None), ("n1-cambricon-mlu-99999", None),
])
def test_the_card_index_is_read_from_the_id(uuid: str, index: int | None) -> None:
    assert card_index(uuid) == index


def test_a_gpu_and_mlu_booking_writes_both_families_and_the_profile() -> None:
    grants = ((GPU, mlu(1, 2560, 25)), ())
    assert booking_annotations(grants, DEFAULT_CATALOG) == {
        "hami.io/vgpu-devices-to-allocate": "GPU-a,NVIDIA,1000,30:;;",
        "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,30:;;",
        "hami.io/cambricon-mlu-devices-to-allocate": "100.10.15.224-cambricon-mlu-1,MLU,2560,25:;;",
        "hami.io/cambricon-mlu-devices-allocated": "100.10.15.224-cambricon-mlu-1,MLU,2560,25:;;",
        "CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "1_25_10"}


def test_a_gpu_booking_writes_no_profile() -> None:
    assert set(booking_annotations(((GPU,),), DEFAULT_CATALOG)) == {
        "hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated"}


# -- which locks a bind takes ------------------------------------------------------------------------------------

DCU = DeviceGrant(uuid="DCU-0", memory_mib=1000, cores=100, vendor="DCU")


@pytest.mark.parametrize(("grants", "keys"), [
    pytest.param(((GPU,),), ("hami.io/mutex.lock",), id="gpu"),
    pytest.param(((DCU,),), ("hami.io/mutex.lock",), id="dcu"),
    pytest.param(((GPU,), (DCU,)), ("hami.io/mutex.lock",), id="gpu-and-dcu-share-one-lock"),
    pytest.param(((mlu(0, 256, 100),),), ("cambricon.com/dsmlu.lock",), id="mlu-only-its-own"),
    pytest.param(((mlu(0, 256, 100), GPU),), ("cambricon.com/dsmlu.lock", "hami.io/mutex.lock"),
                 id="gpu-and-mlu-both-in-key-order"),
    pytest.param(((GPU,), (mlu(0, 256, 100),), (DCU,)), ("cambricon.com/dsmlu.lock", "hami.io/mutex.lock"),
                 id="three-families-two-locks"),
    pytest.param(((),), (), id="nothing-held"),
])
def test_a_booking_takes_the_locks_of_exactly_its_families(grants: tuple[tuple[DeviceGrant, ...], ...],
                                                           keys: tuple[str, ...]) -> None:
    assert tuple(rule.key for rule in booking_locks(grants, DEFAULT_CATALOG)) == keys


# -- the bare-time lock ------------------------------------------------------------------------------------------

def test_the_dsmlu_lock_value_is_a_bare_rfc3339_time() -> None:
    assert DSMLU_LOCK.value(NOW, "ns", "pod") == format_time(NOW) == "2027-01-15T08:00:00Z"
    assert MUTEX_LOCK.value(NOW, "ns", "pod") == "2027-01-15T08:00:00Z,ns,pod"


@pytest.mark.parametrize(("value", "taken_at"), [
    ("2027-01-15T08:00:00Z", NOW),
    ("2027-01-15T16:00:00+08:00", NOW),  # Go's time.RFC3339 in a local zone
    ("2027-01-15T08:00:00Z,ns,pod", NOW),  # owner text is not an owner for a bare-time lock
    ("yesterday", None),
    ("", None),
])
def test_the_dsmlu_lock_parses_as_a_time_without_owner(value: str, taken_at: float | None) -> None:
    lock = DSMLU_LOCK.parse(value)
    assert (lock.taken_at, lock.owner) == (taken_at, "")


@pytest.mark.parametrize(("value", "now", "live"), [
    pytest.param(format_time(NOW), NOW, True, id="just-taken"),
    pytest.param(format_time(NOW), NOW + 120, True, id="at-two-minutes"),
    pytest.param(format_time(NOW), NOW + 121, False, id="past-two-minutes"),
    pytest.param(format_time(NOW + 30), NOW, True, id="from-a-clock-ahead"),
    pytest.param("not-a-time", NOW, False, id="unparsable-is-stale"),
])
def test_a_dsmlu_lock_is_live_for_two_minutes(value: str, now: float, live: bool) -> None:
    # --node-lock-timeout (here 300 s) does not apply: the rule has its own two minutes.
    assert bare_lock_live(DSMLU_LOCK, value, now=now, default_timeout_seconds=300.0) is live


def test_the_held_messages() -> None:
    assert DSMLU_LOCK.held_message("n1", "2027-01-15T08:00:00Z") == "node n1 has been locked within 2 minutes"
    assert MUTEX_LOCK.held_message("n1", "2027-01-15T08:00:00Z,ns,p") == "node n1 is locked by ns/p"
    assert MUTEX_LOCK.held_message("n1", "2027-01-15T08:00:00Z") == (
        "node n1 is locked by an unnamed owner since 2027-01-15T08:00:00Z")


def test_the_watch_view_gives_each_locks_value() -> None:
    seen = SeenNode(resource_version="7", lock="t,ns,p", other_locks=(("cambricon.com/dsmlu.lock", "t2"),))
    assert (seen.value("hami.io/mutex.lock"), seen.value("cambricon.com/dsmlu.lock"), seen.value("other")) == (
        "t,ns,p", "t2", "")
