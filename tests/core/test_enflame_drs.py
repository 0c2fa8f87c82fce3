"""Enflame DRS profiles (hami_web.core.families.enflame_drs), table-driven from HAMi v2.10's
``pkg/device/enflame/device_test.go`` (each case names its Go test).

Covers: decoding ``enflame.com/gcu-drs-capacity`` (GCUs, capacity as number or string, minor, the largest profile's
memory) and its refusals, profile names, a slice count mapped to its profile, memory/cores mapped to the smallest
fitting profile (GB or MiB), the webhook's refusals and the annotations the DRS device plugin reads.
"""

from __future__ import annotations

import json

import pytest

from hami_web.core.devices import AnnotationError, Device
from hami_web.core.families.enflame_drs import (
    ASSIGNED_CONTAINERS_KEY,
    ASSIGNED_ID_KEY,
    ASSIGNED_INDEX_KEY,
    ASSIGNED_KEY,
    ASSIGNED_MINOR_KEY,
    ASSIGNED_TIME_KEY,
    CW,
    REQUEST_SIZE_KEY,
    DrsAsk,
    DrsGcu,
    DrsGrant,
    DrsProfile,
    decode_drs_capacity,
    drs_admission_refusal,
    drs_annotations,
    parse_profile_name,
    select_profile,
)

NODE_A = '{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
PROFILES = decode_drs_capacity(NODE_A, "node-a").profiles


def test_capacity_annotation_of_node_a() -> None:
    """HAMi device_test.go TestGetNodeDevices_DRSAnnotation: one GCU of 6 slices with the largest profile's
    40 GB, minor "0"; profiles sorted by slices, cores their share of the largest (rounded up)."""
    node = decode_drs_capacity(NODE_A, "node-a")
    assert node.gcus == (DrsGcu(device=Device(uuid="node-a-enflame-drs-0", index=0, count=6, memory_mib=40960,
                                              cores=100, type=CW, family=CW), minor="0"),)
    assert node.profiles == (DrsProfile("1g.6gb", "0", 1, 6, 17), DrsProfile("3g.20gb", "1", 3, 20, 50),
                             DrsProfile("6g.40gb", "2", 6, 40, 100))


def test_capacity_as_string_index_missing_and_minor_defaulting() -> None:
    """HAMi parseDRSCapacity reads a numeric string; an unreadable index is the position; no minor = the index."""
    node = decode_drs_capacity('{"devices":[{"index":"3","capacity":"4"},{"index":"x","minor":" 7 ","capacity":4.0}],'
                               '"profiles":{"2G.24GB":"a","4g.48gb":"b"}}', "n")
    assert [(g.device.uuid, g.device.index, g.device.count, g.minor) for g in node.gcus] == [
        ("n-enflame-drs-3", 3, 4, "3"), ("n-enflame-drs-1", 1, 4, "7")]
    assert [p.name for p in node.profiles] == ["2G.24GB", "4g.48gb"]


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid JSON"),
    ("[]", "must be an object"),
    ('{"devices":[{"capacity":6}],"profiles":{}}', "no valid drs profiles"),
    ('{"devices":[{"capacity":6}],"profiles":{"big":"0"}}', "no valid drs profiles"),
    ('{"devices":[],"profiles":{"1g.6gb":"0"}}', "no drs devices"),
    ('{"profiles":{"1g.6gb":"0"}}', "no drs devices"),
    # HAMi device_test.go TestParseDRSCapacity_RejectsNaNAndInf: NaN, Infinity, 1e300 are no capacity
    ('{"devices":[{"capacity":NaN}],"profiles":{"1g.6gb":"0"}}', "invalid JSON"),
    ('{"devices":[{"capacity":1e300}],"profiles":{"1g.6gb":"0"}}', "capacity"),
    ('{"devices":[{"capacity":0}],"profiles":{"1g.6gb":"0"}}', "capacity"),
    ('{"devices":[{"capacity":"six"}],"profiles":{"1g.6gb":"0"}}', "capacity"),
    ('{"devices":[{"capacity":true}],"profiles":{"1g.6gb":"0"}}', "capacity"),
    ('{"devices":[7],"profiles":{"1g.6gb":"0"}}', "expected an object"),
])
def test_unreadable_capacity_is_refused_naming_why(text: str, message: str) -> None:
    """A malformed annotation is an `AnnotationError` naming what is wrong, never a crash."""
    with pytest.raises(AnnotationError, match=message):
        decode_drs_capacity(text, "node-a")


@pytest.mark.parametrize(("name", "parsed"), [
    ("1g.6gb", (1, 6)), ("3g.20gb", (3, 20)), (" 6G.40GB ", (6, 40)), ("big", (0, 0)), ("xg.6gb", (0, 0)),
    ("2g.lots", (2, 0)), ("2.24", (2, 24)),
])
def test_profile_names(name: str, parsed: tuple[int, int]) -> None:
    """HAMi parseProfile: ``<n>g.<N>gb``, case-insensitive, suffixes optional."""
    assert parse_profile_name(name) == parsed


@pytest.mark.parametrize(("ask", "profile"), [
    (DrsAsk(slices=3), "3g.20gb"),  # HAMi TestFit_SelectProfileByRequest
    (DrsAsk(memory=20480, cores=40), "3g.20gb"),  # TestFit_SelectProfileByMemoryCoreRequest: MiB → 20 GB, 40 % ≤ 50
    (DrsAsk(memory=20), "3g.20gb"),  # GB: not more than twice the largest profile's 40
    (DrsAsk(memory=6), "1g.6gb"),
    (DrsAsk(memory=7), "3g.20gb"),
    (DrsAsk(cores=51), "6g.40gb"),
    (DrsAsk(cores=17), "1g.6gb"),
    (DrsAsk(memory=81), "1g.6gb"),  # 81 > 2 × 40: read as MiB, 1 GB
    (DrsAsk(slices=1), "1g.6gb"),
])
def test_an_ask_maps_to_the_smallest_fitting_profile(ask: DrsAsk, profile: str) -> None:
    """HAMi selectProfileByRequest: a slice count is exact, memory/cores the smallest holding both."""
    chosen = select_profile(PROFILES, ask)
    assert chosen is not None and chosen.name == profile


@pytest.mark.parametrize("ask", [DrsAsk(slices=2), DrsAsk(slices=7), DrsAsk(memory=41), DrsAsk(cores=101),
                                 DrsAsk(memory=70 * 1024)])
def test_an_ask_no_profile_holds_gets_none(ask: DrsAsk) -> None:
    """HAMi TestFit_ProfileNotFound: no profile of the size (or big enough) is ``ModeNotFit``."""
    assert select_profile(PROFILES, ask) is None


def test_no_profiles_no_choice() -> None:
    """HAMi selectProfileByRequest on a node without profiles."""
    assert select_profile((), DrsAsk(slices=1)) is None


NAMES = {"count": "enflame.com/drs-gcu", "memory": "enflame.com/gcu-memory", "cores": "enflame.com/gcu-core"}


@pytest.mark.parametrize(("slices", "memory", "cores", "refusal"), [
    (3, None, None, ""),
    (0, None, None, "enflame.com/drs-gcu must be greater than 0"),
    (None, 20480, 50, ""),  # HAMi TestMutateAdmission_ByMemoryCoreAPI
    (None, 0, None, "enflame.com/gcu-memory must be greater than 0"),
    (None, None, 0, "enflame.com/gcu-core must be in range (0,100]"),
    (None, 10, 101, "enflame.com/gcu-core must be in range (0,100]"),
    (2, 0, 0, ""),  # a slice count wins: memory and cores are not read
])
def test_webhook_refusals(slices: int | None, memory: int | None, cores: int | None, refusal: str) -> None:
    """HAMi MutateAdmission's errors, word for word."""
    assert drs_admission_refusal(slices=slices, memory=memory, cores=cores, names=NAMES) == refusal


def test_annotations_the_device_plugin_reads() -> None:
    """HAMi device_test.go TestPatchAnnotations_DRSFields."""
    profile = PROFILES[1]
    annotations = drs_annotations([DrsGrant(container="pod-gcu-example1", index=0, minor="0", profile=profile)],
                                  assigned_time_ns=1_700_000_000_000_000_000)
    assert annotations[ASSIGNED_KEY] == "false"
    assert annotations[ASSIGNED_INDEX_KEY] == annotations[ASSIGNED_ID_KEY] == "0"
    assert annotations[ASSIGNED_MINOR_KEY] == "0"
    assert annotations[REQUEST_SIZE_KEY] == "3"
    assert annotations[ASSIGNED_TIME_KEY] == "1700000000000000000"
    assert json.loads(annotations[ASSIGNED_CONTAINERS_KEY]) == {
        "pod-gcu-example1": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}}


def test_annotations_name_the_first_partition_and_list_every_container() -> None:
    """The index, minor and size are the first container's; ``assigned-containers`` has each; none without grants."""
    annotations = drs_annotations([DrsGrant("a", 2, "5", PROFILES[0]), DrsGrant("b", 0, "0", PROFILES[2])],
                                  assigned_time_ns=1)
    assert (annotations[ASSIGNED_INDEX_KEY], annotations[ASSIGNED_MINOR_KEY], annotations[REQUEST_SIZE_KEY]) == (
        "2", "5", "1")
    assert set(json.loads(annotations[ASSIGNED_CONTAINERS_KEY])) == {"a", "b"}
    assert drs_annotations([], assigned_time_ns=1) == {}
