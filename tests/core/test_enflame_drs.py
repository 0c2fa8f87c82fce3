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
    PARTITIONING,
    REQUEST_SIZE_KEY,
    DrsGcu,
    decode_drs_capacity,
    drs_annotations,
    parse_profile_name,
    shares_of,
)
from hami_web.core.grants import DeviceGrant
from hami_web.core.partitions import DevicePartitions, PartitionAsk, PartitionProfile

NODE_A = '{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
PROFILES = decode_drs_capacity(NODE_A, "node-a").profiles


def drs(slices: int = 0, memory: int = 0, cores: int = 0) -> PartitionAsk:
    return PartitionAsk(PARTITIONING, slices=slices, memory=memory, cores=cores)


def test_capacity_annotation_of_node_a() -> None:
    """HAMi device_test.go TestGetNodeDevices_DRSAnnotation: one GCU of 6 slices with the largest profile's
    40 GB, minor "0"; profiles sorted by slices, cores their share of the largest (rounded up)."""
    node = decode_drs_capacity(NODE_A, "node-a")
    assert node.profiles == (PartitionProfile("1g.6gb", "0", 1, 6144, 17),
                             PartitionProfile("3g.20gb", "1", 3, 20480, 50),
                             PartitionProfile("6g.40gb", "2", 6, 40960, 100))
    assert node.gcus == (DrsGcu(device=Device(uuid="node-a-enflame-drs-0", index=0, count=6, memory_mib=40960,
                                              cores=100, type=CW, family=CW,
                                              partitions=DevicePartitions(node.profiles, "0")), minor="0"),)


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
    (drs(slices=3), "3g.20gb"),  # HAMi TestFit_SelectProfileByRequest
    (drs(memory=20480, cores=40), "3g.20gb"),  # TestFit_SelectProfileByMemoryCoreRequest: MiB → 20 GB, 40 % ≤ 50
    (drs(memory=20), "3g.20gb"),  # GB: not more than twice the largest profile's 40
    (drs(memory=6), "1g.6gb"),
    (drs(memory=7), "3g.20gb"),
    (drs(cores=51), "6g.40gb"),
    (drs(cores=17), "1g.6gb"),
    (drs(memory=81), "1g.6gb"),  # 81 > 2 × 40: read as MiB, 1 GB
    (drs(slices=1), "1g.6gb"),
])
def test_an_ask_maps_to_the_smallest_fitting_profile(ask: PartitionAsk, profile: str) -> None:
    """HAMi selectProfileByRequest: a slice count is exact, memory/cores the smallest holding both."""
    chosen = PARTITIONING.pick(PROFILES, ask)
    assert chosen is not None and chosen.name == profile


@pytest.mark.parametrize("ask", [drs(slices=2), drs(slices=7), drs(memory=41), drs(cores=101),
                                 drs(memory=70 * 1024)])
def test_an_ask_no_profile_holds_gets_none(ask: PartitionAsk) -> None:
    """HAMi TestFit_ProfileNotFound: no profile of the size (or big enough) is ``ModeNotFit``."""
    assert PARTITIONING.pick(PROFILES, ask) is None


def test_no_profiles_no_choice() -> None:
    """HAMi selectProfileByRequest on a node without profiles."""
    assert PARTITIONING.pick((), drs(slices=1)) is None


def _grant(index: int, minor: str, profile: PartitionProfile) -> DeviceGrant:
    return DeviceGrant(uuid=f"node-a-enflame-drs-{index}", memory_mib=profile.memory_mib, cores=profile.cores,
                       vendor=CW, shares=profile.slices, partition=profile, handle=minor)


def test_annotations_the_device_plugin_reads() -> None:
    """HAMi device_test.go TestPatchAnnotations_DRSFields."""
    profile = PROFILES[1]
    annotations = drs_annotations([[_grant(0, "0", profile)]], ["pod-gcu-example1"], 1_700_000_000_000_000_000)
    assert annotations[ASSIGNED_KEY] == "false"
    assert annotations[ASSIGNED_INDEX_KEY] == annotations[ASSIGNED_ID_KEY] == "0"
    assert annotations[ASSIGNED_MINOR_KEY] == "0"
    assert annotations[REQUEST_SIZE_KEY] == "3"
    assert annotations[ASSIGNED_TIME_KEY] == "1700000000000000000"
    assert json.loads(annotations[ASSIGNED_CONTAINERS_KEY]) == {
        "pod-gcu-example1": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}}
    assert shares_of(annotations, "pod-gcu-example1") == 3


def test_annotations_name_the_first_partition_and_list_every_container() -> None:
    """The index, minor and size are the first container's (an init container's first, HAMi containerNameByIndex);
    ``assigned-containers`` has each; none without grants."""
    annotations = drs_annotations([[], [_grant(2, "5", PROFILES[0])], [_grant(0, "0", PROFILES[2])]],
                                  ["init", "a", "b"], 1)
    assert (annotations[ASSIGNED_INDEX_KEY], annotations[ASSIGNED_MINOR_KEY], annotations[REQUEST_SIZE_KEY]) == (
        "2", "5", "1")
    assert set(json.loads(annotations[ASSIGNED_CONTAINERS_KEY])) == {"a", "b"}
    assert drs_annotations([[], []], ["a", "b"], 1) == {}


@pytest.mark.parametrize(("text", "container", "shares"), [
    ('{"a":{"allocated":true,"request":3}}', "a", 3), ('{"a":{"request":3}}', "b", None),
    ('{"a":{"request":"3"}}', "a", None), ('{"a":{"request":0}}', "a", None), ("[", "a", None), ("", "a", None),
])
def test_shares_read_back_after_a_restart(text: str, container: str, shares: int | None) -> None:
    """HAMi's restart counts one slice per container (the device annotation has no slice field); hami-web reads the
    container's ``request`` from ``assigned-containers`` (the device plugin keeps it), one slice when unreadable."""
    assert shares_of({ASSIGNED_CONTAINERS_KEY: text} if text else {}, container) == shares
