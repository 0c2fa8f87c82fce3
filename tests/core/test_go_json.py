"""Register annotations read as HAMi's Go code reads them (docs/wire-formats.md#node-register-annotation):
`decode_register` for every family.

Covers, for the JSON form (Go's ``encoding/json`` into HAMi's ``DeviceInfo``, every field ``omitempty``): each
omitted field is its zero value (no ``health`` = unhealthy, no ``count``/``devmem``/``devcore``/``index``/``numa``
= 0, no ``type``/``mode`` = ""); keys matched case-insensitively (``"ID"``, ``"Count"``, ``"DevMem"``, ``"Health"``);
duplicate keys in any case, the last winning; ``null`` leaving a field as it was; unknown keys of any type ignored;
``custominfo`` and ``migProfiles`` shapes; every wrong JSON type failing the whole annotation (a string, a fraction,
``1e3`` or a boolean for an integer, a negative ``index``, a number beyond int32, a string for ``health``, a
non-string ``id``/``type``/``mode``, a non-object ``custominfo``, a non-list ``migProfiles``). For the text form:
7 fields (index = position, mode ``hami-core``) against 9 (index and mode read), Go's ``strconv.ParseBool`` values
for ``health``, and HAMi's malformed strings (``Test_DecodeNodeDevices``). For the DCU and Iluvatar families:
HAMi's own vectors, and ``Device.family`` set from the ``family`` argument in both forms.

The corners where Python's json module differs from Go's (NaN, ``-0``, Unicode key folding, the element types
of ``migProfiles``) are tested as Go decides them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from hami_web.core.devices import AnnotationError, Device, decode_register
from hami_web.core.mig import MigProfile
from hami_web.core.partitions import SliceRange

# One entry holding every DeviceInfo field we read, and the device it decodes to.
FULL_PAIRS: tuple[tuple[str, object], ...] = (
    ("id", "GPU-a"), ("index", 3), ("count", 10), ("devmem", 8192), ("devcore", 100), ("type", "NVIDIA-Tesla T4"),
    ("numa", 1), ("mode", "hami-core"), ("health", True))
FULL_DEVICE = Device(uuid="GPU-a", index=3, count=10, memory_mib=8192, cores=100, type="NVIDIA-Tesla T4", numa=1,
                     healthy=True, mode="hami-core")

# HAMi's TestGetNodeDevices_MigProfilesFromNode (pkg/device/nvidia/device_test.go), unknown keys and all.
HAMI_MIG_REGISTER = (
    '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","numa":0,"health":true,'
    '"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,"core":14,"sliceCount":1,"instanceCount":7,'
    '"multiprocessorCount":14,"placements":[{"start":6,"size":1}]}]}]')


def entry(*pairs: tuple[str, object]) -> str:
    """One JSON object written pair by pair, so duplicate keys and their order survive."""
    return "{" + ",".join(f"{json.dumps(key)}:{json.dumps(value)}" for key, value in pairs) + "}"


def register(*entries: str) -> str:
    """A JSON register annotation of the given objects."""
    return "[" + ",".join(entries) + "]"


def without(key: str) -> tuple[tuple[str, object], ...]:
    return tuple(pair for pair in FULL_PAIRS if pair[0] != key)


def renamed(key: str, spelling: str) -> tuple[tuple[str, object], ...]:
    return tuple((spelling if name == key else name, value) for name, value in FULL_PAIRS)


def only(text: str, *, family: str = "NVIDIA") -> Device:
    """The one device of a register annotation."""
    devices = decode_register(text, family=family)
    assert len(devices) == 1
    return devices[0]


# --- JSON: omitted fields are Go's zero values ----------------------------------------------------------------

@pytest.mark.parametrize(("key", "field", "zero"), [
    pytest.param("health", "healthy", False, id="no-health-is-unhealthy"),
    pytest.param("count", "count", 0, id="no-count-is-0"),
    pytest.param("devmem", "memory_mib", 0, id="no-devmem-is-0"),
    pytest.param("devcore", "cores", 0, id="no-devcore-is-0"),
    pytest.param("index", "index", 0, id="no-index-is-0"),
    pytest.param("numa", "numa", 0, id="no-numa-is-0"),
    pytest.param("type", "type", "", id="no-type-is-empty"),
    pytest.param("mode", "mode", "", id="no-mode-is-empty"),
])
def test_an_omitted_json_field_is_its_go_zero_value(key: str, field: str, zero: object) -> None:
    changes: dict[str, Any] = {field: zero}
    assert only(register(entry(*without(key)))) == replace(FULL_DEVICE, **changes)


def test_an_entry_of_only_an_id_is_an_empty_unhealthy_device() -> None:
    assert only(register(entry(("id", "GPU-a")))) == Device(uuid="GPU-a", index=0, count=0, memory_mib=0, cores=0,
                                                           type="", numa=0, healthy=False, mode="")


@pytest.mark.parametrize("text", [
    # pkg/device/devices_test.go TestUnMarshalNodeDevices "test one" (trailing newline included).
    pytest.param('[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","health":true}]\n',
                 id="hami-TestUnMarshalNodeDevices-test-one"),
])
def test_hami_unmarshal_vector_decodes_as_in_go(text: str) -> None:
    assert only(text) == Device(uuid="id-1", index=1, count=1, memory_mib=1024, cores=10, type="type", numa=0,
                                healthy=True, mode="")


def test_hami_unmarshal_vector_with_two_devices_keeps_each_health() -> None:
    # pkg/device/devices_test.go TestUnMarshalNodeDevices "test two".
    text = ('[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","health":true},'
            '{"index":2,"id":"id-2","count":2,"devmem":4096,"devcore":20,"type":"type2","health":false}]')
    assert decode_register(text) == (
        Device(uuid="id-1", index=1, count=1, memory_mib=1024, cores=10, type="type", healthy=True, mode=""),
        Device(uuid="id-2", index=2, count=2, memory_mib=4096, cores=20, type="type2", healthy=False, mode=""))


# --- JSON: keys, duplicates, null, unknown keys ---------------------------------------------------------------

@pytest.mark.parametrize(("key", "spelling"), [
    pytest.param("id", "ID", id="ID"),
    pytest.param("id", "Id", id="Id"),
    pytest.param("count", "Count", id="Count"),
    pytest.param("devmem", "DevMem", id="DevMem"),
    pytest.param("devcore", "DEVCORE", id="DEVCORE"),
    pytest.param("health", "Health", id="Health"),
    pytest.param("index", "Index", id="Index"),
    pytest.param("type", "TYPE", id="TYPE"),
    pytest.param("numa", "NuMa", id="NuMa"),
    pytest.param("mode", "Mode", id="Mode"),
])
def test_keys_match_case_insensitively(key: str, spelling: str) -> None:
    assert only(register(entry(*renamed(key, spelling)))) == FULL_DEVICE


def test_keys_written_as_go_field_names_decode_like_the_json_tags() -> None:
    # What a Go struct without json tags would marshal: the field names themselves.
    text = register(entry(("ID", "GPU-a"), ("Index", 3), ("Count", 10), ("Devmem", 8192), ("Devcore", 100),
                          ("Type", "NVIDIA-Tesla T4"), ("Numa", 1), ("Mode", "hami-core"), ("Health", True)))
    assert only(text) == FULL_DEVICE


@pytest.mark.parametrize(("pairs", "field", "expected"), [
    pytest.param((("id", "GPU-a"), ("ID", "GPU-b"), ("health", True)), "uuid", "GPU-b", id="id-then-ID"),
    pytest.param((("ID", "GPU-b"), ("id", "GPU-a"), ("health", True)), "uuid", "GPU-a", id="ID-then-id"),
    pytest.param((("id", "GPU-a"), ("count", 1), ("Count", 7), ("health", True)), "count", 7, id="count-then-Count"),
    pytest.param((("id", "GPU-a"), ("devmem", 1), ("devmem", 2), ("health", True)), "memory_mib", 2,
                 id="same-case-devmem-twice"),
    pytest.param((("id", "GPU-a"), ("health", True), ("HEALTH", False)), "healthy", False, id="health-true-then-false"),
    pytest.param((("id", "GPU-a"), ("Health", False), ("health", True)), "healthy", True, id="health-false-then-true"),
    pytest.param((("id", "GPU-a"), ("mode", "mps"), ("MODE", "hami-core"), ("health", True)), "mode", "hami-core",
                 id="mode-then-MODE"),
])
def test_the_last_of_duplicate_keys_wins_whatever_their_case(pairs: tuple[tuple[str, object], ...], field: str,
                                                             expected: object) -> None:
    assert getattr(only(register(entry(*pairs))), field) == expected


@pytest.mark.parametrize(("pairs", "expected"), [
    pytest.param((*FULL_PAIRS, ("health", None)), FULL_DEVICE, id="null-health-after-true-keeps-true"),
    pytest.param((*FULL_PAIRS, ("Count", None)), FULL_DEVICE, id="null-Count-after-10-keeps-10"),
    pytest.param((*FULL_PAIRS, ("ID", None)), FULL_DEVICE, id="null-ID-after-id-keeps-it"),
    pytest.param((*without("count"), ("count", None)), replace(FULL_DEVICE, count=0), id="null-count-alone-is-0"),
    pytest.param((*without("type"), ("type", None)), replace(FULL_DEVICE, type=""), id="null-type-is-empty"),
    pytest.param((*without("health"), ("health", None)), replace(FULL_DEVICE, healthy=False),
                 id="null-health-alone-is-unhealthy"),
    pytest.param((*FULL_PAIRS, ("custominfo", None), ("migProfiles", None), ("devicevendor", None)), FULL_DEVICE,
                 id="null-custominfo-migProfiles-devicevendor"),
])
def test_a_null_value_leaves_the_field_as_it_was(pairs: tuple[tuple[str, object], ...], expected: Device) -> None:
    assert only(register(entry(*pairs))) == expected


@pytest.mark.parametrize("extra", [
    pytest.param(("vendorSpecific", {"deep": [1, 2.5, {"x": None}]}), id="object"),
    pytest.param(("health2", "not a bool"), id="string-under-a-near-name"),
    pytest.param(("devicePairScore", [1, 2]), id="pair-score-is-not-on-the-wire"),
    pytest.param(("migtemplate", [[{"name": "1g.10gb", "memory": 10240, "count": 7}]]), id="deprecated-migtemplate"),
    pytest.param(("big", 123456789012345678901234567890), id="huge-integer"),
    pytest.param(("ratio", 0.5), id="fraction"),
])
def test_unknown_keys_are_ignored_whatever_their_type(extra: tuple[str, object]) -> None:
    assert only(register(entry(*FULL_PAIRS, extra))) == FULL_DEVICE


# --- JSON: custominfo, devicevendor and migProfiles -----------------------------------------------------------

ONE_G = MigProfile(name="1g.5gb", memory_mib=4864, cores=15, slice_count=1, placements=(SliceRange(6, 1),))


@pytest.mark.parametrize(("extra", "mig_profiles"), [
    pytest.param(("custominfo", {}), (), id="custominfo-empty"),
    pytest.param(("custominfo", {"a": 1.5, "b": "x", "c": [1], "d": {"e": None}}), (), id="custominfo-any-values"),
    pytest.param(("CustomInfo", {"a": 1}), (), id="CustomInfo-capitalised"),
    pytest.param(("devicevendor", "NVIDIA"), (), id="devicevendor-string"),
    pytest.param(("migProfiles", []), (), id="migProfiles-empty-is-none"),
    pytest.param(("migProfiles", [{"name": "1g.5gb", "memoryMB": 4864, "core": 15, "sliceCount": 1,
                                   "placements": [{"start": 6, "size": 1}]}]), (ONE_G,), id="migProfiles-one"),
    pytest.param(("MIGPROFILES", [{"NAME": "1g.5gb", "MemoryMb": 4864, "CORE": 15, "slicecount": 1,
                                   "Placements": [{"START": 6, "Size": 1}]}]), (ONE_G,),
                 id="MIGPROFILES-capitalised"),
    pytest.param(("migProfiles", [None, {"name": "x", "placements": [None]}]),
                 (MigProfile("", 0, 0, 0, ()), MigProfile("x", 0, 0, 0, (SliceRange(0, 0),))),
                 id="null-profile-and-placement-are-zero-values"),
])
def test_custominfo_and_mig_profiles_shapes_are_read(extra: tuple[str, object],
                                                     mig_profiles: tuple[MigProfile, ...]) -> None:
    assert only(register(entry(*FULL_PAIRS, extra))) == replace(FULL_DEVICE, mig_profiles=mig_profiles)


def test_hami_mig_register_vector_is_a_mig_device_with_profiles() -> None:
    # pkg/device/nvidia/device_test.go TestGetNodeDevices_MigProfilesFromNode.
    assert only(HAMI_MIG_REGISTER) == Device(uuid="GPU-0", index=0, count=7, memory_mib=40960, cores=100,
                                             type="NVIDIA-A100-SXM4-40GB", numa=0, healthy=True, mode="mig",
                                             mig_profiles=(MigProfile("1g.5gb", 5120, 14, 1, (SliceRange(6, 1),)),))


# --- JSON: wrong types fail the whole annotation --------------------------------------------------------------

@pytest.mark.parametrize(("extra", "message"), [
    pytest.param(("count", "4"), "field 'count' is a string, not an integer", id="string-count"),
    pytest.param(("devmem", "8192"), "field 'devmem' is a string", id="string-devmem"),
    pytest.param(("count", 4.0), "not an integer", id="count-4.0"),
    pytest.param(("devcore", 1.5), "not an integer", id="fraction-devcore"),
    pytest.param(("index", 0.0), "not an integer", id="index-0.0"),
    pytest.param(("count", True), "field 'count' is a boolean", id="bool-count"),
    pytest.param(("numa", False), "field 'numa' is a boolean", id="bool-numa"),
    pytest.param(("index", -1), "index -1 is outside", id="negative-index"),
    pytest.param(("count", 2147483648), "count 2147483648 is outside", id="count-beyond-int32"),
    pytest.param(("devmem", 2147483648), "devmem 2147483648 is outside", id="devmem-beyond-int32"),
    pytest.param(("index", 18446744073709551616), "is outside", id="index-beyond-uint64"),
    pytest.param(("health", "true"), "field 'health' is a string, not a boolean", id="string-health"),
    pytest.param(("health", 1), "field 'health' is the number 1, not a boolean", id="number-health"),
    pytest.param(("id", 5), "field 'id' is the number 5, not a string", id="number-id"),
    pytest.param(("type", ["NVIDIA"]), "field 'type' is a list, not a string", id="list-type"),
    pytest.param(("mode", False), "field 'mode' is a boolean, not a string", id="bool-mode"),
    pytest.param(("devicevendor", 3), "field 'devicevendor'", id="number-devicevendor"),
    pytest.param(("custominfo", [1]), "field 'custominfo' is a list, not an object", id="list-custominfo"),
    pytest.param(("custominfo", "x"), "field 'custominfo' is a string, not an object", id="string-custominfo"),
    pytest.param(("migProfiles", {}), "field 'migProfiles'", id="object-migProfiles"),
    pytest.param(("migProfiles", "1g.5gb"), "field 'migProfiles' is a string, not a list", id="string-migProfiles"),
])
def test_a_wrong_json_type_fails_the_whole_annotation(extra: tuple[str, object], message: str) -> None:
    good = entry(*FULL_PAIRS)
    bad = entry(("id", "GPU-b"), *without("id"), extra)  # the wrong value comes last, so it is the one Go keeps
    with pytest.raises(AnnotationError, match="device 1") as raised:
        decode_register(register(good, bad))
    assert message in str(raised.value)


@pytest.mark.parametrize(("literal", "message"), [
    pytest.param("1e3", "not an integer", id="1e3"),
    pytest.param("1E2", "not an integer", id="1E2"),
    pytest.param("10.0", "not an integer", id="10.0"),
    pytest.param("-5", "outside", id="minus-5"),
])
def test_a_count_literal_go_refuses_for_int32_fails(literal: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        decode_register('[{"id":"GPU-a","count":' + literal + ',"health":true}]')


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("[]", "lists no devices", id="empty-list"),
    pytest.param('{"id":"GPU-a","health":true}', "must be a list", id="bare-object"),
    pytest.param("[null]", "device 0: expected an object", id="null-entry"),
    pytest.param('["GPU-a"]', "device 0: expected an object", id="string-entry"),
    pytest.param('[{"id":"GPU-a","health":true}] x', "invalid JSON", id="trailing-garbage"),
    pytest.param('[{"id":"GPU-a",}]', "invalid JSON", id="trailing-comma"),
    pytest.param('[{"health":true}]', "field 'id' is missing or empty", id="no-id"),
])
def test_json_that_is_not_a_list_of_device_objects_fails(text: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        decode_register(text)


# --- JSON: the corners where Python's json module differs from Go's ---------------------------------------------------

@pytest.mark.parametrize("profiles", [
    pytest.param([1], id="number-element"),
    pytest.param(["1g.5gb"], id="string-element"),
    pytest.param([{"name": "1g.5gb", "memoryMB": "4864"}], id="string-memoryMB"),
    pytest.param([{"name": "1g.5gb", "core": 14.5}], id="fraction-core"),
    pytest.param([{"name": "1g.5gb", "sliceCount": -1}], id="negative-sliceCount"),
    pytest.param([{"name": 5}], id="number-name"),
    pytest.param([{"name": "1g.5gb", "placements": {"start": 0}}], id="object-placements"),
])
def test_mig_profiles_of_the_wrong_shape_fail_the_annotation(profiles: object) -> None:
    with pytest.raises(AnnotationError):
        decode_register(register(entry(*without("mode"), ("mode", "mig"), ("migProfiles", profiles))))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_fail_the_annotation(literal: str) -> None:
    with pytest.raises(AnnotationError):
        decode_register('[{"id":"GPU-a","count":10,"health":true,"custominfo":{"x":' + literal + '}}]')


@pytest.mark.parametrize(("extra", "message"), [
    pytest.param(("migProfiles", {}), "field 'migProfiles' is an object, not a list", id="migProfiles"),
    pytest.param(("type", {"model": "T4"}), "field 'type' is an object, not a string", id="type"),
])
def test_an_object_of_the_wrong_place_is_called_an_object(extra: tuple[str, object], message: str) -> None:
    with pytest.raises(AnnotationError) as raised:
        decode_register(register(entry(*FULL_PAIRS, extra)))
    assert message in str(raised.value)


def test_keys_fold_as_go_folds_them_beyond_ascii() -> None:
    text = register(entry(*without("mode"), ("mode", "mig"), ("migProfile\u017f", [{"name": "1g.5gb"}])))
    assert only(text).mig_profiles


def test_minus_zero_for_the_unsigned_index_fails_as_in_go() -> None:
    with pytest.raises(AnnotationError):
        decode_register('[{"id":"GPU-a","index":-0,"count":10,"health":true}]')


# --- text forms --------------------------------------------------------------------------------------------------

P4 = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4"


@pytest.mark.parametrize(("text", "expected"), [
    # pkg/device/devices_test.go Test_DecodeNodeDevices "str is old format" (HAMi gives index 0; we: position).
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true:",
                 (Device(uuid=P4, index=0, count=10, memory_mib=7680, cores=100, type="NVIDIA-Tesla P4", numa=0,
                         healthy=True, mode="hami-core"),), id="hami-old-format-7-fields"),
    # Test_DecodeNodeDevices "str is new format".
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:",
                 (Device(uuid=P4, index=1, count=10, memory_mib=7680, cores=100, type="NVIDIA-Tesla P4", numa=0,
                         healthy=True, mode="hami-core"),), id="hami-new-format-9-fields"),
    pytest.param("GPU-a,10,8192,100,NVIDIA-T4,0,true:GPU-b,4,8192,200,NVIDIA-T4,1,false:",
                 (Device(uuid="GPU-a", index=0, count=10, memory_mib=8192, cores=100, type="NVIDIA-T4", numa=0,
                         healthy=True, mode="hami-core"),
                  Device(uuid="GPU-b", index=1, count=4, memory_mib=8192, cores=200, type="NVIDIA-T4", numa=1,
                         healthy=False, mode="hami-core")), id="7-fields-index-is-position"),
    pytest.param("GPU-a,10,8192,100,NVIDIA-T4,0,true,5,mps:GPU-b,10,8192,100,NVIDIA-T4,0,true,2,mig:",
                 (Device(uuid="GPU-a", index=5, count=10, memory_mib=8192, cores=100, type="NVIDIA-T4",
                         healthy=True, mode="mps"),
                  Device(uuid="GPU-b", index=2, count=10, memory_mib=8192, cores=100, type="NVIDIA-T4",
                         healthy=True, mode="mig")), id="9-fields-index-and-mode-read"),
    pytest.param("GPU-a,10,8192,100,NVIDIA-T4,0,true,3,:",
                 (Device(uuid="GPU-a", index=3, count=10, memory_mib=8192, cores=100, type="NVIDIA-T4",
                         healthy=True, mode=""),), id="9-fields-empty-mode-is-no-mode"),
])
def test_text_devices_decode_with_7_or_9_fields(text: str, expected: tuple[Device, ...]) -> None:
    assert decode_register(text) == expected


@pytest.mark.parametrize(("health", "healthy"), [
    # Go's strconv.ParseBool, which HAMi's DecodeNodeDevices calls.
    *(pytest.param(value, True, id=f"true-{value}") for value in ("1", "t", "T", "TRUE", "true", "True")),
    *(pytest.param(value, False, id=f"false-{value}") for value in ("0", "f", "F", "FALSE", "false", "False")),
])
def test_text_health_accepts_go_parsebool_values(health: str, healthy: bool) -> None:
    assert only(f"GPU-a,10,8192,100,NVIDIA-T4,0,{health}:").healthy is healthy


@pytest.mark.parametrize("health", ["yes", "no", "tRUE", "fAlse", "2", "on", ""])
def test_text_health_refuses_what_parsebool_refuses(health: str) -> None:
    with pytest.raises(AnnotationError, match="health"):
        decode_register(f"GPU-a,10,8192,100,NVIDIA-T4,0,{health}:")


@pytest.mark.parametrize(("text", "message"), [
    # pkg/device/devices_test.go Test_DecodeNodeDevices, the error cases.
    pytest.param("", "empty", id="args-is-empty"),
    pytest.param("a", "does not end with ':'", id="missing-split-symbol"),
    pytest.param(",:", "got 2", id="comma-and-delimiter-but-empty-fields"),
    pytest.param("garbage:", "got 1", id="malformed-segment-without-comma"),
    pytest.param(f"{P4},notanint,7680,100,NVIDIA-Tesla P4,0,true:", "count 'notanint' is not an integer",
                 id="invalid-count"),
    pytest.param(f"{P4},10,notanint,100,NVIDIA-Tesla P4,0,true:", "devmem 'notanint' is not an integer",
                 id="invalid-memory"),
    pytest.param(f"{P4},10,7680,notanint,NVIDIA-Tesla P4,0,true:", "devcore 'notanint' is not an integer",
                 id="invalid-core"),
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,notanint,true:", "numa 'notanint' is not an integer",
                 id="invalid-numa"),
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,notabool:", "health 'notabool' is not true or false",
                 id="invalid-health"),
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4:", "got 5", id="unexpected-field-count"),
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,notanint,hami-core:", "index 'notanint' is not an integer",
                 id="invalid-index-new-format"),
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,-1,hami-core:", "index -1 is outside",
                 id="negative-index-new-format"),
    pytest.param(f"{P4},10,7680,100,NVIDIA-Tesla P4,0,true,1:", "got 8", id="eight-fields"),
])
def test_malformed_text_fails_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        decode_register(text)


# --- other families ------------------------------------------------------------------------------------------------

ILUVATAR_UUID = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae"


@pytest.mark.parametrize(("text", "family", "expected"), [
    # pkg/device/hygon/device_test.go Test_GetNodeDevices "exist dcu device".
    pytest.param("test-0,1,1024,100,DCU,0,true,0,test:", "DCU",
                 (Device(uuid="test-0", index=0, count=1, memory_mib=1024, cores=100, type="DCU", numa=0,
                         healthy=True, mode="test", family="DCU"),), id="hami-hygon-exist-dcu-device"),
    # The Hygon register of docs/wire-formats.md#node-register-annotation.
    pytest.param("DCU-0,4,65520,100,DCU-BW100,0,true:DCU-1,4,65520,100,DCU-BW100,0,true:", "DCU",
                 (Device(uuid="DCU-0", index=0, count=4, memory_mib=65520, cores=100, type="DCU-BW100",
                         healthy=True, mode="hami-core", family="DCU"),
                  Device(uuid="DCU-1", index=1, count=4, memory_mib=65520, cores=100, type="DCU-BW100",
                         healthy=True, mode="hami-core", family="DCU")), id="spec-hygon-two-dcus"),
    # pkg/device/iluvatar/device_test.go TestGetNodeDevices "exist device" (also in docs/wire-formats.md).
    pytest.param(f"{ILUVATAR_UUID},10,8192,100,MR-V100,0,true:", "MR-V100",
                 (Device(uuid=ILUVATAR_UUID, index=0, count=10, memory_mib=8192, cores=100, type="MR-V100",
                         healthy=True, mode="hami-core", family="MR-V100"),), id="hami-iluvatar-exist-device"),
    # A value starting with '[' is JSON for every family (docs/wire-formats.md#node-register-annotation).
    pytest.param('[{"ID":"DCU-0","Count":4,"DevMem":65520,"DevCore":100,"Type":"DCU-K100","Health":true}]', "DCU",
                 (Device(uuid="DCU-0", index=0, count=4, memory_mib=65520, cores=100, type="DCU-K100",
                         healthy=True, mode="", family="DCU"),), id="json-dcu-capital-keys"),
    pytest.param('[{"id":"BI-0","count":8,"devmem":32768,"devcore":100,"type":"BI-V150"}]', "BI-V150",
                 (Device(uuid="BI-0", index=0, count=8, memory_mib=32768, cores=100, type="BI-V150",
                         healthy=False, mode="", family="BI-V150"),), id="json-iluvatar-no-health-unhealthy"),
])
def test_other_families_decode_with_their_family_set(text: str, family: str, expected: tuple[Device, ...]) -> None:
    assert decode_register(text, family=family) == expected


@pytest.mark.parametrize(("text", "family", "message"), [
    # Hygon Test_GetNodeDevices "no dcu device", "node annotations not decode successfully", "length less than 7".
    pytest.param(":", "DCU", "lists no devices", id="hami-hygon-no-dcu-device"),
    pytest.param("", "DCU", "empty", id="hami-hygon-empty"),
    pytest.param("test-0,1,1024,100,DCU:", "DCU", "got 5", id="hami-hygon-fewer-than-7-fields"),
    # Iluvatar TestGetNodeDevices "no device", "failed to unmarshal node devices".
    pytest.param("[]", "MR-V100", "lists no devices", id="hami-iluvatar-no-device"),
    pytest.param("", "MR-V100", "empty", id="hami-iluvatar-empty"),
    pytest.param('[{"id":"DCU-0","count":"4","health":true}]', "DCU", "field 'count' is a string",
                 id="json-dcu-string-count"),
])
def test_other_families_refuse_what_hami_refuses(text: str, family: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        decode_register(text, family=family)
