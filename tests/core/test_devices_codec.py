"""Node annotation codecs (docs/wire-formats.md#node-register-annotation): ``hami.io/node-nvidia-register``, ``-score``
and ``device-cordon``.

Covers: the register annotation in 7-field text (index = position, mode hami-core), 9-field text (index and mode
read) and JSON (read as Go's encoding/json reads HAMi's DeviceInfo: missing numbers 0, strings for numbers refused;
see test_go_json for the whole table); HAMi's A40 example strings; surrounding
whitespace; encode∘decode = identity for JSON, 9-field and 7-field text; every malformed form (empty, no
devices, missing ``:``, wrong field count, non-numeric and non-boolean fields, empty UUID, bad JSON, JSON that
is not a list, entries that are not objects, missing fields, duplicate UUIDs, absurd JSON) raising
`AnnotationError` whose message says where; pair scores (the worked example's matrix with string numbers) and their
errors; the cordon list.
"""

from __future__ import annotations

import pytest

from hami_web.core.devices import (
    AnnotationError,
    Device,
    decode_cordon,
    decode_pair_scores,
    decode_register,
    encode_register_json,
    encode_register_text,
)

A40_1 = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
A40_2 = "GPU-1afede84-4e70-2174-49af-f07ebb94d1ae"
SEED_ONE_GPU = f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true:"
SEED_TWO_GPUS = f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true:{A40_2},10,46068,100,NVIDIA-NVIDIA A40,0,true:"
SEED_DEVICE_1 = Device(uuid=A40_1, index=0, count=10, memory_mib=46068, cores=100, type="NVIDIA-NVIDIA A40",
                       mode="hami-core")
SEED_DEVICE_2 = Device(uuid=A40_2, index=1, count=10, memory_mib=46068, cores=100, type="NVIDIA-NVIDIA A40",
                       mode="hami-core")

SEED_PAIR_SCORES = """[
{"uuid": "gpu0", "score": {"gpu1": "100", "gpu2": "100", "gpu3": "200"}},
{"uuid": "gpu1", "score": {"gpu0": "100", "gpu2": "200", "gpu3": "100"}},
{"uuid": "gpu2", "score": {"gpu0": "100", "gpu1": "200", "gpu3": "200"}},
{"uuid": "gpu3", "score": {"gpu0": "200", "gpu1": "100", "gpu2": "200"}}
]"""

MIXED_DEVICES = (
    Device(uuid="GPU-a", index=0, count=10, memory_mib=24576, cores=100, type="NVIDIA-NVIDIA A10", numa=0,
           healthy=True, mode="hami-core"),
    Device(uuid="GPU-b", index=3, count=4, memory_mib=81920, cores=200, type="NVIDIA-NVIDIA A100-SXM4-80GB", numa=1,
           healthy=False, mode="mig"),
)


@pytest.mark.parametrize(("text", "devices"), [
    pytest.param(SEED_ONE_GPU, (SEED_DEVICE_1,), id="seed-7-field-one-gpu"),
    pytest.param(SEED_TWO_GPUS, (SEED_DEVICE_1, SEED_DEVICE_2), id="seed-7-field-index-is-position"),
    pytest.param(f"  {SEED_ONE_GPU}\n", (SEED_DEVICE_1,), id="surrounding-whitespace"),
    pytest.param("GPU-x,4,16000,200,NVIDIA-Tesla T4,1,false,5,hami-core:",
                 (Device(uuid="GPU-x", index=5, count=4, memory_mib=16000, cores=200, type="NVIDIA-Tesla T4", numa=1,
                         healthy=False, mode="hami-core"),), id="9-field-index-and-mode"),
    pytest.param(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true,7,:{A40_2},10,46068,100,NVIDIA-NVIDIA A40,0,true:",
                 (Device(uuid=A40_1, index=7, count=10, memory_mib=46068, cores=100, type="NVIDIA-NVIDIA A40"),
                  SEED_DEVICE_2), id="7-and-9-fields-mixed"),
    pytest.param('[{"id":"GPU-j","index":2,"count":10,"devmem":24000,"devcore":100,"type":"NVIDIA-NVIDIA L4",'
                 '"numa":1,"mode":"hami-core","health":true}]',
                 (Device(uuid="GPU-j", index=2, count=10, memory_mib=24000, cores=100, type="NVIDIA-NVIDIA L4",
                         numa=1, mode="hami-core"),), id="json-all-fields"),
    pytest.param('[{"id":"GPU-j","index":3,"count":10,"devmem":24000,"devcore":100,"type":"NVIDIA-NVIDIA L4"},'
                 '{"id":"GPU-k","count":10,"devmem":1,"type":"NVIDIA","health":true}]',
                 (Device(uuid="GPU-j", index=3, count=10, memory_mib=24000, cores=100, type="NVIDIA-NVIDIA L4",
                         healthy=False),
                  Device(uuid="GPU-k", index=0, count=10, memory_mib=1, cores=0, type="NVIDIA")),
                 id="json-omitted-fields-are-go-zero-values"),
])
def test_decode_register(text: str, devices: tuple[Device, ...]) -> None:
    assert decode_register(text) == devices


@pytest.mark.parametrize("encode", [
    pytest.param(encode_register_json, id="json"),
    pytest.param(encode_register_text, id="text-9-fields"),
])
def test_register_round_trip(encode: object) -> None:
    assert callable(encode)
    assert decode_register(encode(MIXED_DEVICES)) == MIXED_DEVICES


def test_empty_text_segments_are_skipped_as_hami_does() -> None:
    # HAMi v2.10 DecodeNodeDevices skips empty segments ("args is multiple delimiters" in its test table).
    assert decode_register(f"{SEED_ONE_GPU}:") == decode_register(SEED_ONE_GPU)
    assert decode_register(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true::{A40_2},10,46068,100,"
                           "NVIDIA-NVIDIA A40,0,true:") == (SEED_DEVICE_1, SEED_DEVICE_2)


def test_register_round_trip_7_fields_when_index_is_position() -> None:
    devices = (SEED_DEVICE_1, SEED_DEVICE_2)
    text = encode_register_text(devices, with_index=False)
    assert text == SEED_TWO_GPUS
    assert decode_register(text) == devices


FIELDS = "expected 7 or 9 comma-separated fields"


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("", "register annotation is empty", id="empty"),
    pytest.param("  \n", "register annotation is empty", id="blank"),
    pytest.param("[]", "register annotation lists no devices", id="json-empty-list"),
    pytest.param(SEED_ONE_GPU[:-1], f"character {len(SEED_ONE_GPU) - 1}: device entry does not end with ':'",
                 id="missing-final-colon"),
    pytest.param(SEED_ONE_GPU.replace(":", ""), "does not end with ':'", id="no-colon-at-all"),
    pytest.param(SEED_TWO_GPUS.replace("true:GPU", "true,GPU", 1), f"device 0 (character 0): {FIELDS}",
                 id="missing-colon-between-devices"),
    pytest.param(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0:", f"device 0 (character 0): {FIELDS}", id="6-fields"),
    pytest.param(f"{SEED_ONE_GPU}{A40_2},10,46068,100,NVIDIA-NVIDIA A40,0,true,1:",
                 f"device 1 (character {len(SEED_ONE_GPU)}): {FIELDS}", id="8-fields-names-second-device"),
    pytest.param(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true,1,m,x:", f"device 0 (character 0): {FIELDS}",
                 id="10-fields"),
    pytest.param(":", "register annotation lists no devices", id="only-colon"),
    pytest.param(f"{A40_1},ten,46068,100,NVIDIA-NVIDIA A40,0,true:", "device 0 (character 0): count 'ten' is not an",
                 id="non-numeric-count"),
    pytest.param(f"{SEED_ONE_GPU}{A40_2},10,46GB,100,NVIDIA-NVIDIA A40,0,true:",
                 f"device 1 (character {len(SEED_ONE_GPU)}): devmem '46GB' is not an integer", id="non-numeric-devmem"),
    pytest.param(f"{A40_1},10,46068,,NVIDIA-NVIDIA A40,0,true:", "devcore '' is not an integer",
                 id="empty-devcore"),
    pytest.param(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,zero,true:", "numa 'zero' is not an integer",
                 id="non-numeric-numa"),
    pytest.param(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,yes:", "health 'yes' is not true or false",
                 id="non-boolean-health"),
    pytest.param(f"{A40_1},10,46068,100,NVIDIA-NVIDIA A40,0,true,x,m:", "index 'x' is not an integer",
                 id="non-numeric-index"),
    pytest.param(",10,46068,100,NVIDIA-NVIDIA A40,0,true:", "device 0 (character 0): empty UUID", id="empty-uuid"),
    pytest.param(SEED_ONE_GPU * 2, f"device {A40_1} is listed twice", id="duplicate-uuid-text"),
    pytest.param('[{"id":"a","count":1,"devmem":1,"devcore":1},{"id":"a","count":1,"devmem":1,"devcore":1}]',
                 "device a is listed twice", id="duplicate-uuid-json"),
    pytest.param('[{"id":"a",', "character 11: invalid JSON", id="truncated-json"),
    pytest.param('{"id":"a","count":1,"devmem":1,"devcore":1}', "JSON register annotation must be a list",
                 id="json-object-not-list"),
    pytest.param('["a"]', "device 0: expected an object", id="json-entry-not-object"),
    pytest.param('[{"count":1,"devmem":1,"devcore":1}]', "device 0: field 'id' is missing", id="json-missing-id"),
    pytest.param('[{"id":" ","count":1,"devmem":1,"devcore":1}]', "device 0: field 'id' is missing or empty",
                 id="json-blank-id"),
    pytest.param('[{"id":"a","count":1,"devmem":1.5,"devcore":1}]',
                 "device 0: field 'devmem' is the number 1.5, not an integer", id="json-fractional-devmem"),
    pytest.param('[{"id":"a","count":1,"devmem":1,"devcore":true}]',
                 "device 0: field 'devcore' is a boolean, not an integer", id="json-boolean-devcore"),
    pytest.param('[{"id":"a","count":1,"devmem":1,"devcore":1,"numa":[0]}]',
                 "device 0: field 'numa' is a list, not an integer", id="json-list-numa"),
    pytest.param('[{"id":"a","count":"x","devmem":1,"devcore":1}]',
                 "device 0: field 'count' is a string, not an integer", id="json-non-numeric-string"),
    pytest.param('[{"id":"a","count":NaN,"devmem":1,"devcore":1}]', "invalid JSON: NaN is not a JSON value",
                 id="json-nan"),
    pytest.param('[{"id":"a","count":1,"devmem":1,"devcore":1,"health":2}]',
                 "device 0: field 'health' is the number 2, not a boolean", id="json-numeric-health"),
    pytest.param("[" * 100_000, "invalid JSON", id="json-nested-too-deep"),
    pytest.param('[{"id":"a","count":' + "1" * 5000 + "}]", "invalid JSON", id="json-integer-too-long"),
])
def test_malformed_register_is_an_annotation_error_saying_where(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_register(text)
    assert message in str(caught.value)


def test_seed_pair_scores_decode_string_numbers() -> None:
    scores = decode_pair_scores(SEED_PAIR_SCORES)
    assert scores["gpu0"] == {"gpu1": 100, "gpu2": 100, "gpu3": 200}
    assert scores["gpu2"]["gpu3"] == 200
    assert sorted(scores) == ["gpu0", "gpu1", "gpu2", "gpu3"]


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("", {}, id="empty"),
    pytest.param("[]", {}, id="empty-list"),
    pytest.param('[{"uuid":"a"}]', {"a": {}}, id="no-score-object"),
    pytest.param('[{"uuid":"a","score":{"b":7}}]', {"a": {"b": 7}}, id="integer-score"),
])
def test_decode_pair_scores(text: str, expected: dict[str, dict[str, int]]) -> None:
    assert decode_pair_scores(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("[{", "invalid JSON", id="bad-json"),
    pytest.param('{"uuid":"a"}', "score annotation must be a list", id="not-a-list"),
    pytest.param('[{"score":{}}]', "score entry 0: expected an object with a string 'uuid'", id="missing-uuid"),
    pytest.param('[{"uuid":"a","score":[1]}]', "score entry 0: 'score' must be an object", id="score-not-object"),
    pytest.param('[{"uuid":"a","score":{"b":"fast"}}]', "score entry 0 pair 'b': score 'fast' is not an integer",
                 id="non-numeric-score"),
    pytest.param("[" * 100_000, "invalid JSON", id="nested-too-deep"),
])
def test_malformed_pair_scores_are_annotation_errors(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_pair_scores(text)
    assert message in str(caught.value)


@pytest.mark.parametrize(("text", "cordoned"), [
    pytest.param("", frozenset(), id="empty"),
    pytest.param("GPU-a", frozenset({"GPU-a"}), id="one"),
    pytest.param(" GPU-a, ,GPU-b,, ", frozenset({"GPU-a", "GPU-b"}), id="spaces-and-empty-entries"),
])
def test_decode_cordon(text: str, cordoned: frozenset[str]) -> None:
    assert decode_cordon(text) == cordoned
