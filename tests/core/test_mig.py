"""Dynamic MIG in the pure core (docs/mig.md#dynamic-mig): profile choice, placement order and overlap, the fit of MIG
containers under every GPU policy and selection, the reservation annotation (decode, encode, booking) and the
fail-closed rebuild of a node's occupancy from pods.

Cases taken from HAMi v2.10.0 are named after their Go test: pkg/device/nvidia/mig_topology_test.go
(TestCanPlaceMigProfilesA100, TestSelectMigPlacementUsesBalancedPacking), pkg/device/nvidia/mig_profiles_test.go
(TestEncodeDecodeMigAllocations, TestDecodeMigAllocationsRejectsDuplicateDeviceIndex,
TestDecodeMigAllocationsPreservesZeroRuntimeInstanceIDs), pkg/device/nvidia/device_test.go
(TestFit_MigPercentageRequestRejectsUndersizedTemplate) and pkg/scheduler/mig_allocation_test.go
(TestGetNodesUsage*, TestFitInDevices*).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import Placement, choose_node
from hami_web.core.devices import AnnotationError, Device, NodeInventory, decode_register
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.fit import FitFailure, PodFit, fit_pod, may_fit
from hami_web.core.grants import DeviceGrant, booking_annotations, cleared_annotations
from hami_web.core.mig import (
    MigProfile,
    candidate_profiles,
    choose_instance,
    free_placement,
    instances_that_fit,
    legacy_parent,
)
from hami_web.core.migreservations import (
    RESERVATION_ELSEWHERE,
    RESERVATION_ON_NON_MIG,
    UNRESERVED_ENTRY,
    decode_reservations,
)
from hami_web.core.options import PodOptions, pod_options
from hami_web.core.partitions import PlacedPartition, SliceRange
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view, pod_booking, sum_bookings
from hami_web.core.verify import other_bookings, placement_conflicts
from hami_web.state.pods import pod_usage
from tests.core.builders import A100_MIG_PROFILES, a100_mig_register

A100 = decode_register(a100_mig_register("GPU-a"))[0]
PROFILES = candidate_profiles(A100.mig_profiles)
BY_NAME = {profile.name: profile for profile in PROFILES}
CORE_GPU = Device(uuid="GPU-core", index=1, count=10, memory_mib=40960, cores=100, type="NVIDIA-NVIDIA A100",
                  mode="hami-core")


def placements(*pairs: tuple[int, int]) -> tuple[SliceRange, ...]:
    return tuple(SliceRange(start, size) for start, size in pairs)


# --- profiles and placements -----------------------------------------------------------------------------------

def test_profiles_are_tried_by_memory_then_slices() -> None:
    assert [profile.name for profile in PROFILES] == ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb",
                                                       "7g.40gb"]


@pytest.mark.parametrize(("memory_mib", "occupied", "expected"), [
    pytest.param(1000, (), ("1g.5gb", 6), id="small-ask-smallest-profile-highest-start"),
    pytest.param(4864, (), ("1g.5gb", 6), id="exactly-the-profile-memory"),
    pytest.param(4865, (), ("1g.10gb", 6), id="one-mib-more-takes-the-next-profile"),
    pytest.param(9900, (), ("2g.10gb", 0), id="2g-takes-the-lowest-start"),
    pytest.param(15000, (), ("3g.20gb", 4), id="3g-takes-the-highest-start"),
    pytest.param(30000, (), ("7g.40gb", 0), id="whole-gpu-profile"),
    pytest.param(40960, (), None, id="whole-card-memory-never-fits"),
    pytest.param(1000, placements((0, 8)), None, id="full-gpu"),
    pytest.param(1000, placements((6, 1)), ("1g.5gb", 5), id="next-1g-below"),
    pytest.param(5000, placements((6, 2)), ("1g.10gb", 4), id="1g.10gb-below-a-taken-pair"),
    pytest.param(5000, placements((0, 2), (2, 2), (4, 2), (6, 1)), None, id="only-single-slices-left-none"),
    pytest.param(15000, placements((4, 4)), ("3g.20gb", 0), id="3g-falls-back-to-start-0"),
    pytest.param(15000, placements((0, 4), (4, 1)), None, id="no-3g-or-bigger-free"),
    pytest.param(9000, placements((0, 2), (2, 2), (4, 2)), ("1g.10gb", 6), id="a-bigger-profile-when-2g-is-full"),
])
def test_profile_and_placement_choice(memory_mib: int, occupied: tuple[SliceRange, ...],
                                      expected: tuple[str, int] | None) -> None:
    choice = choose_instance(PROFILES, occupied, memory_mib)
    assert (None if choice is None else (choice[0].name, choice[1].start)) == expected


def test_balanced_packing_sequence_from_hami() -> None:
    # TestSelectMigPlacementUsesBalancedPacking: 3g at 4, 2g at 0, then 1g at 3 and 2.
    occupied: list[SliceRange] = []
    starts = []
    for name in ("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"):
        placement = free_placement(BY_NAME[name], occupied)
        assert placement is not None
        starts.append(placement.start)
        occupied.append(placement)
    assert starts == [4, 0, 3, 2]


@pytest.mark.parametrize(("occupied", "profile", "free"), [
    # TestCanPlaceMigProfilesA100's infeasible cases.
    pytest.param(placements((0, 4), (4, 4)), "1g.5gb", False, id="two-3g-leave-no-1g"),
    pytest.param(placements((0, 2), (2, 2), (4, 2)), "2g.10gb", False, id="no-fourth-2g"),
    pytest.param(placements((0, 2), (2, 2), (4, 2)), "1g.5gb", True, id="a-1g-beside-three-2g"),
    pytest.param(placements((1, 1)), "2g.10gb", True, id="2g-skips-the-pair-touching-a-1g"),
    pytest.param(placements((1, 1)), "4g.20gb", False, id="4g-overlaps-a-1g-inside"),
    pytest.param(placements((3, 1)), "3g.20gb", True, id="3g-at-4-beside-a-1g-at-3"),
    pytest.param(placements((4, 1)), "3g.20gb", True, id="3g-at-0-beside-a-1g-at-4"),
    pytest.param(placements((2, 1), (5, 1)), "3g.20gb", False, id="both-3g-ranges-touched"),
])
def test_overlap(occupied: tuple[SliceRange, ...], profile: str, free: bool) -> None:
    assert (free_placement(BY_NAME[profile], occupied) is not None) is free


@pytest.mark.parametrize(("profile", "occupied", "count"), [
    ("1g.5gb", (), 7), ("2g.10gb", (), 3), ("3g.20gb", (), 2), ("7g.40gb", (), 1),
    ("2g.10gb", placements((6, 1)), 3), ("2g.10gb", placements((1, 1)), 2), ("1g.5gb", placements((0, 8)), 0),
])
def test_instances_that_fit(profile: str, occupied: tuple[SliceRange, ...], count: int) -> None:
    assert instances_that_fit(BY_NAME[profile], occupied) == count


@pytest.mark.parametrize(("profile", "usable"), [
    (MigProfile("1g.5gb", 4864, 14, 1, placements((0, 1))), True),
    (MigProfile("", 4864, 14, 1, placements((0, 1))), False),
    (MigProfile("1g.5gb", 0, 14, 1, placements((0, 1))), False),
    (MigProfile("1g.5gb", 4864, 101, 1, placements((0, 1))), False),
    (MigProfile("1g.5gb", 4864, -1, 1, placements((0, 1))), False),
    (MigProfile("1g.5gb", 4864, 14, 1, placements((0, 0))), False),
    (MigProfile("1g.5gb", 4864, 14, 1, ()), False),
])
def test_unusable_profiles_are_never_offered(profile: MigProfile, usable: bool) -> None:
    assert profile.usable is usable
    assert (candidate_profiles((profile,)) == (profile,)) is usable


def test_a_zero_size_placement_is_never_free_to_take() -> None:
    profile = MigProfile("1g.5gb", 4864, 14, 1, placements((0, 0), (3, 1)))
    assert free_placement(profile, placements((3, 1))) is None


def test_the_first_profile_of_a_name_wins() -> None:
    first = MigProfile("1g.5gb", 4864, 14, 1, placements((0, 1)))
    assert candidate_profiles((first, replace(first, placements=placements((6, 1))))) == (first,)


@pytest.mark.parametrize(("uuid", "parent"), [
    ("GPU-x[1-0]", "GPU-x"), ("GPU-3ef99f5d-0000[2-3]", "GPU-3ef99f5d-0000"), ("GPU-x", ""), ("[1-0]", ""),
    ("GPU-x]", ""),
])
def test_legacy_geometry_entries_name_their_parent(uuid: str, parent: str) -> None:
    assert legacy_parent(uuid) == parent


# --- the fit ---------------------------------------------------------------------------------------------------

def mig_node(*devices: Device) -> NodeInventory:
    """A node's inventory with the NVIDIA family's partitioning, dynamic MIG, as `node_state` gives it."""
    return NodeInventory(name="node-1", devices=tuple(devices), partitioning=DEFAULT_CATALOG.partitionings())


def gpu_a(index: int = 0, uuid: str = "GPU-a", **changes: Any) -> Device:
    return replace(A100, uuid=uuid, index=index, **changes)


def ask(count: int = 1, *, memory_mib: int = 0, memory_percent: int = 100, cores: int = 0,
        init: bool = False) -> ContainerRequest:
    return ContainerRequest(name="init" if init else "main", init=init, count=count, memory_mib=memory_mib,
                            memory_percent=memory_percent, cores=cores)


def options(annotations: Mapping[str, str] | None = None, *, gpu_policy: str = "spread") -> PodOptions:
    return pod_options(annotations or {}, node_policy="binpack", gpu_policy=gpu_policy, catalog=DEFAULT_CATALOG)


def picks(result: PodFit | FitFailure, container: int = 0) -> list[tuple[str, str, int, int, int]] | str:
    """Per grant (uuid, profile, placement start, memory, cores), or the failure."""
    if isinstance(result, FitFailure):
        return result.summary()
    return [(g.uuid, g.placed.profile if g.placed else "", g.placed.placement.start if g.placed else -1,
             g.memory_mib, g.cores) for g in result.grants[container]]


def fit(view: NodeView, *containers: ContainerRequest, annotations: Mapping[str, str] | None = None,
        gpu_policy: str = "spread") -> PodFit | FitFailure:
    return fit_pod(PodRequest(containers=containers), view, options(annotations, gpu_policy=gpu_policy))


def held(*instances: tuple[str, int, int], tasks: int | None = None) -> DeviceUsage:
    """A MIG GPU's usage: instances of (profile, start, size), with their profiles' memory and cores booked."""
    made = tuple(PlacedPartition(profile=name, placement=SliceRange(start, size), pod="default/other")
                 for name, start, size in instances)
    return DeviceUsage(len(made) if tasks is None else tasks, sum(BY_NAME[i.profile].memory_mib for i in made),
                       sum(BY_NAME[i.profile].cores for i in made), made)


def test_the_booking_is_the_profile_memory_and_cores() -> None:
    view = build_node_view(mig_node(gpu_a()), {})
    assert picks(fit(view, ask(memory_mib=3000, cores=5))) == [("GPU-a", "1g.5gb", 6, 4864, 14)]


def test_several_instances_of_one_gpu_in_one_container() -> None:
    # TestFitInDevicesAllowsMultipleMigPlacementsOnSingleGPU: two 1g placements on GPU-a, distinct.
    view = build_node_view(mig_node(gpu_a()), {})
    assert picks(fit(view, ask(2, memory_mib=4000))) == [("GPU-a", "1g.5gb", 6, 4864, 14),
                                                          ("GPU-a", "1g.5gb", 5, 4864, 14)]
    assert picks(fit(view, ask(7, memory_mib=4000), annotations={"nvidia.com/vgpu-mode": "mig"}))[-1] == (
        "GPU-a", "1g.5gb", 0, 4864, 14)


def test_too_few_placements_on_the_only_gpu() -> None:
    # TestFitInDevicesRejectsInsufficientMigPlacementsOnSingleGPU: one placement, two asked.
    only_one = replace(A100, mig_profiles=(MigProfile("1g.5gb", 5120, 14, 1, placements((6, 1))),))
    view = build_node_view(mig_node(only_one), {})
    assert picks(fit(view, ask(2, memory_mib=4000))) == (
        "1/1 AllocatedCardsInsufficientRequest, 1/1 CardMigTopologyInfeasible")
    assert picks(fit(view, ask(8, memory_mib=4000), annotations={"nvidia.com/vgpu-mode": "hami-core"})) == (
        "8/1 NodeInsufficientDevice")


def test_the_count_check_stays_for_a_node_without_mig() -> None:
    # TestFitInDevicesRetainsPhysicalCountCheckForNonMigGPU.
    view = build_node_view(mig_node(replace(CORE_GPU, index=0)), {})
    assert picks(fit(view, ask(2, memory_mib=4000))) == "2/1 NodeInsufficientDevice"


def test_a_percentage_ask_resolves_before_the_profile_is_chosen() -> None:
    # TestFit_MigPercentageRequestRejectsUndersizedTemplate: 50 % of 8192 MiB does not fit a 1024 MiB profile.
    small = replace(A100, memory_mib=8192, mig_profiles=(MigProfile("1g.1gb", 1024, 14, 1, placements((0, 1))),))
    view = build_node_view(mig_node(small), {})
    assert picks(fit(view, ask(memory_percent=50, cores=10))) == "1/1 CardMigTopologyInfeasible"
    assert picks(fit(view, ask(memory_percent=10))) == [("GPU-a", "1g.1gb", 0, 1024, 14)]


def test_a_whole_card_ask_never_fits_a_mig_gpu() -> None:
    view = build_node_view(mig_node(gpu_a()), {})
    assert picks(fit(view, ask())) == "1/1 CardMigTopologyInfeasible"


@pytest.mark.parametrize(("usage", "memory_mib", "expected"), [
    pytest.param(held(("1g.5gb", 6, 1)), 4000, [("GPU-a", "1g.5gb", 5, 4864, 14)], id="next-free-1g"),
    pytest.param(held(("3g.20gb", 4, 4)), 9000, [("GPU-a", "1g.10gb", 2, 9856, 14)], id="1g.10gb-below-a-3g"),
    pytest.param(held(("3g.20gb", 4, 4), ("3g.20gb", 0, 4)), 1000, "1/1 CardMigTopologyInfeasible", id="full"),
    pytest.param(held(*((("1g.5gb", start, 1)) for start in range(7))), 1000, "1/1 CardTimeSlicingExhausted",
                 id="seven-tasks-exhaust-the-count-first"),
    pytest.param(held(("2g.10gb", 0, 2), ("2g.10gb", 2, 2), ("2g.10gb", 4, 2)), 9000,
                 [("GPU-a", "1g.10gb", 6, 9856, 14)], id="no-fourth-2g-but-a-1g.10gb"),
    pytest.param(held(("2g.10gb", 0, 2), ("2g.10gb", 2, 2), ("1g.5gb", 4, 1), ("1g.5gb", 6, 1)), 1000,
                 [("GPU-a", "1g.5gb", 5, 4864, 14)], id="the-last-slice"),
    pytest.param(held(("3g.20gb", 4, 4), ("2g.10gb", 0, 2), ("1g.5gb", 3, 1)), 4000,
                 [("GPU-a", "1g.5gb", 2, 4864, 14)], id="a-1g-in-the-gap"),
])
def test_fit_beside_rebuilt_reservations(usage: DeviceUsage, memory_mib: int, expected: object) -> None:
    view = build_node_view(mig_node(gpu_a()), {"GPU-a": usage})
    assert picks(fit(view, ask(memory_mib=memory_mib))) == expected


def test_two_containers_of_one_pod_never_overlap() -> None:
    view = build_node_view(mig_node(gpu_a()), {"GPU-a": held(("3g.20gb", 4, 4))})
    three = fit(view, *(replace(ask(memory_mib=9900), name=name) for name in "abc"))
    assert picks(three) == "1/1 CardInsufficientMemory"  # two 2g.10gb leave 1024 MiB: the memory check fails first
    result = fit(view, replace(ask(memory_mib=9900), name="a"), replace(ask(memory_mib=9900), name="b"))
    assert [picks(result, c) for c in range(2)] == [[("GPU-a", "2g.10gb", 0, 9984, 29)],
                                                    [("GPU-a", "2g.10gb", 2, 9984, 29)]]


def test_an_init_containers_instance_is_kept_apart_from_the_containers() -> None:
    # Its memory is given back to the containers, its slices are not: an instance may outlive its container.
    view = build_node_view(mig_node(gpu_a()), {})
    result = fit(view, ask(memory_mib=4000, init=True), ask(memory_mib=4000), ask(memory_mib=4000))
    assert [picks(result, c) for c in range(3)] == [[("GPU-a", "1g.5gb", 6, 4864, 14)],
                                                    [("GPU-a", "1g.5gb", 5, 4864, 14)],
                                                    [("GPU-a", "1g.5gb", 4, 4864, 14)]]
    assert picks(fit(view, ask(memory_mib=15000, init=True), ask(memory_mib=15000), ask(memory_mib=15000))) == (
        "1/1 CardMigTopologyInfeasible")
    booking = pod_booking(result.grants if isinstance(result, PodFit) else (), init_count=1)
    assert booking["GPU-a"].tasks == 2 and len(booking["GPU-a"].placed) == 3


def two_gpus(**changes: Any) -> NodeView:
    return build_node_view(mig_node(gpu_a(0, "GPU-a", **changes), gpu_a(1, "GPU-b", **changes)),
                           {"GPU-b": held(("1g.5gb", 6, 1))})


@pytest.mark.parametrize(("annotations", "policy", "count", "expected"), [
    pytest.param({}, "spread", 1, ["GPU-a"], id="spread-the-emptier-gpu"),
    pytest.param({}, "binpack", 1, ["GPU-b"], id="binpack-the-fuller-gpu"),
    pytest.param({}, "binpack", 3, ["GPU-b", "GPU-b", "GPU-b"], id="binpack-repeats-on-the-fuller-gpu"),
    pytest.param({}, "spread", 9, ["GPU-a"] * 7 + ["GPU-b"] * 2, id="more-than-the-node-has-gpus"),
    pytest.param({}, "spread", 14, "13/2 AllocatedCardsInsufficientRequest, 2/2 CardTimeSlicingExhausted",
                 id="not-fourteen"),
    pytest.param({}, "topology-aware", 2, ["GPU-b", "GPU-a"], id="topology-distinct-gpus-first"),
    pytest.param({}, "numa,binpack", 2, ["GPU-b", "GPU-b"], id="chain-numa-binpack"),
    pytest.param({}, "mutex,spread", 1, ["GPU-a"], id="chain-mutex-spread"),
    pytest.param({names.POD_USE_GPU_UUID: "GPU-b"}, "spread", 1, ["GPU-b"], id="use-uuid"),
    pytest.param({names.POD_NOUSE_GPU_UUID: "GPU-a,GPU-b"}, "spread", 1, "2/2 CardUuidMismatch", id="nouse-uuid"),
    pytest.param({names.POD_USE_GPU_TYPE: "A100"}, "spread", 1, ["GPU-a"], id="use-type"),
    pytest.param({names.POD_USE_GPU_TYPE: "H100"}, "spread", 1, "2/2 CardTypeMismatch", id="use-type-other"),
    pytest.param({"nvidia.com/vgpu-mode": "mig"}, "spread", 1, ["GPU-a"], id="vgpu-mode-mig"),
    pytest.param({"nvidia.com/vgpu-mode": "hami-core"}, "spread", 1, "2/2 CardTypeMismatch", id="vgpu-mode-core"),
    pytest.param({"nvidia.com/vgpu-mode": "hami-core"}, "spread", 3, "3/2 NodeInsufficientDevice",
                 id="vgpu-mode-core-keeps-the-count-check"),
])
def test_mig_under_policies_and_selections(annotations: dict[str, str], policy: str, count: int,
                                           expected: object) -> None:
    got = picks(fit(two_gpus(), ask(count, memory_mib=4000), annotations=annotations, gpu_policy=policy))
    assert ([pick[0] for pick in got] if isinstance(got, list) else got) == expected


def test_mutex_takes_one_instance_of_an_unused_gpu_only() -> None:
    result = fit(two_gpus(), ask(1, memory_mib=4000), gpu_policy="binpack,mutex")
    assert [pick[0] for pick in picks(result)] == ["GPU-a"]
    assert isinstance(fit(two_gpus(), ask(2, memory_mib=4000), gpu_policy="binpack,mutex"), FitFailure)


def test_numa_binding_keeps_the_instances_on_one_numa_node() -> None:
    view = build_node_view(mig_node(gpu_a(0, "GPU-a", numa=0), gpu_a(1, "GPU-b", numa=1)),
                           {"GPU-a": held(*((("1g.5gb", start, 1)) for start in range(1, 7)))})
    result = fit(view, ask(2, memory_mib=4000), annotations={names.POD_NUMA_BIND: "true"})
    assert [pick[0] for pick in picks(result)] == ["GPU-b", "GPU-b"]
    result = fit(view, ask(2, memory_mib=4000))
    assert [pick[0] for pick in picks(result)] == ["GPU-b", "GPU-b"]  # spread: the emptier GPU first


def test_a_mixed_node_serves_both_kinds() -> None:
    view = build_node_view(mig_node(gpu_a(0), CORE_GPU), {})
    assert picks(fit(view, ask(memory_mib=4000), annotations={"nvidia.com/vgpu-mode": "hami-core"})) == [
        ("GPU-core", "", -1, 4000, 0)]
    assert picks(fit(view, ask(memory_mib=4000), annotations={"nvidia.com/vgpu-mode": "mig"})) == [
        ("GPU-a", "1g.5gb", 6, 4864, 14)]
    assert len(picks(fit(view, ask(3, memory_mib=4000)))) == 3


def test_may_fit_does_not_rule_out_more_instances_than_gpus() -> None:
    """Nor does the ranking, which leaves out at C level the nodes of fewer usable devices than the largest ask
    (`NodeView.container_devices`): one MIG GPU gives a container several instances."""
    request = PodRequest(containers=(ask(5, memory_mib=4000),))
    assert may_fit(request, two_gpus(), options())
    assert two_gpus().container_devices >= request.largest_count
    placed = choose_node(request, options(), ["node-1"], {"node-1": two_gpus()})
    assert isinstance(placed, Placement) and len(placed.grants[0]) == 5


def test_legacy_geometry_stays_refused() -> None:
    legacy = replace(A100, mig_profiles=())
    view = build_node_view(mig_node(legacy), {})
    assert picks(fit(view, ask(memory_mib=1000))) == "1/1 CardMigLegacyGeometry"
    assert picks(fit(view, ask(2, memory_mib=1000))) == "1/1 CardMigLegacyGeometry"


# --- the reservation annotation --------------------------------------------------------------------------------

RESERVATION = {"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-a", "profile": "1g.5gb",
               "placement": {"start": 6, "size": 1}}


def reservations(*entries: Mapping[str, object]) -> str:
    return json.dumps(list(entries))


def test_encode_and_decode_round_trip() -> None:
    # TestEncodeDecodeMigAllocations.
    grants = ((DeviceGrant("GPU-a", 4864, 14, placed=PlacedPartition("1g.5gb", SliceRange(6, 1))),),)
    written = booking_annotations(grants, DEFAULT_CATALOG)
    assert written[names.POD_MIG_RESERVATIONS] == reservations(RESERVATION).replace(" ", "")
    assert written[names.POD_DEVICES_ALLOCATED] == "GPU-a,NVIDIA,4864,14:;"
    decoded = decode_reservations(written[names.POD_MIG_RESERVATIONS])
    assert [(r.container_index, r.device_index, r.gpu_uuid, r.instance.profile, r.instance.placement)
            for r in decoded] == [(0, 0, "GPU-a", "1g.5gb", SliceRange(6, 1))]


def test_no_reservation_annotation_without_instances() -> None:
    assert names.POD_MIG_RESERVATIONS not in booking_annotations(((DeviceGrant("GPU-a", 1000, 0),),), DEFAULT_CATALOG)


def test_device_index_is_the_position_in_the_container_entry() -> None:
    first = DeviceGrant("GPU-core", 1000, 0)
    mig = DeviceGrant("GPU-a", 4864, 14, placed=PlacedPartition("1g.5gb", SliceRange(5, 1)))
    written = booking_annotations(((), (first, mig)), DEFAULT_CATALOG)
    assert json.loads(written[names.POD_MIG_RESERVATIONS]) == [
        {**RESERVATION, "containerIndex": 1, "deviceIndex": 1, "placement": {"start": 5, "size": 1}}]


def test_runtime_identity_and_zero_ids_are_kept() -> None:
    # TestDecodeMigAllocationsPreservesZeroRuntimeInstanceIDs.
    text = reservations({**RESERVATION, "migUUID": "MIG-a", "gpuInstanceID": 4, "computeInstanceID": 0})
    instance = decode_reservations(text)[0].instance
    assert (instance.uuid, instance.ids) == ("MIG-a", (4, 0))


def test_keys_match_case_insensitively_as_in_go() -> None:
    text = ('[{"ContainerIndex":0,"DEVICEINDEX":0,"gpuuuid":"GPU-a","Profile":"1g.5gb",'
            '"Placement":{"Start":6,"SIZE":1}}]')
    assert decode_reservations(text)[0].instance.placement == SliceRange(6, 1)


@pytest.mark.parametrize(("text", "message"), [
    pytest.param('{"a":1}', "must be a list", id="not-a-list"),
    pytest.param("[1", "invalid JSON", id="broken-json"),
    pytest.param(reservations({**RESERVATION, "gpuUUID": ""}), "incomplete", id="no-gpu-uuid"),
    pytest.param(reservations({k: v for k, v in RESERVATION.items() if k != "profile"}), "incomplete",
                 id="no-profile"),
    pytest.param(reservations({**RESERVATION, "placement": {"start": 6, "size": 0}}), "incomplete",
                 id="size-zero"),
    pytest.param(reservations({**RESERVATION, "placement": None}), "incomplete", id="null-placement"),
    pytest.param(reservations({**RESERVATION, "containerIndex": -1}), "negative", id="negative-container"),
    pytest.param(reservations({**RESERVATION, "deviceIndex": -1}), "negative", id="negative-device"),
    pytest.param(reservations({**RESERVATION, "migUUID": "MIG-a"}), "partial runtime identity",
                 id="partial-identity-uuid-only"),
    pytest.param(reservations({**RESERVATION, "gpuInstanceID": 1, "computeInstanceID": 0}),
                 "partial runtime identity", id="partial-identity-ids-only"),
    # TestDecodeMigAllocationsRejectsDuplicateDeviceIndex.
    pytest.param(reservations(RESERVATION, {**RESERVATION, "placement": {"start": 5, "size": 1}}), "a second",
                 id="duplicate-index"),
    pytest.param(reservations({**RESERVATION, "placement": {"start": -1, "size": 1}}), "outside",
                 id="negative-start"),
    pytest.param(reservations({**RESERVATION, "containerIndex": "0"}), "not an integer", id="string-index"),
    pytest.param(reservations({**RESERVATION, "profile": 5}), "not a string", id="number-profile"),
    pytest.param("[null]", "incomplete", id="null-entry"),
    pytest.param(reservations(*([RESERVATION] * 2000)), "at most", id="too-many"),
])
def test_invalid_reservation_annotations(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as raised:
        decode_reservations(text)
    assert message in str(raised.value)


# --- rebuilding occupancy from pods ----------------------------------------------------------------------------

def mig_pod(name: str, devices: str, mig: str | None, *, count: int = 1) -> dict[str, Any]:
    annotations = {names.POD_ASSIGNED_NODE: "node-1", names.POD_DEVICES_ALLOCATED: devices}
    if mig is not None:
        annotations[names.POD_MIG_RESERVATIONS] = mig
    return {"metadata": {"uid": name, "namespace": "default", "name": name, "annotations": annotations},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(count)}}}]},
            "status": {"phase": "Running"}}


def rebuilt(inventory: NodeInventory, *pods: dict[str, Any]) -> NodeView:
    bookings = []
    for pod in pods:
        usage = pod_usage(pod)
        assert usage is not None
        bookings.append(usage.booking)
    return build_node_view(inventory, sum_bookings(bookings))


def test_restores_a_reservation_by_profile_and_placement() -> None:
    # TestGetNodesUsageRestoresMigAllocationByProfileAndPlacement.
    text = reservations({**RESERVATION, "migUUID": "MIG-a", "gpuInstanceID": 7, "computeInstanceID": 0})
    view = rebuilt(mig_node(gpu_a()), mig_pod("p1", "GPU-a,NVIDIA,4864,14:;", text))
    (instance,) = view.usage[0].placed
    assert instance == PlacedPartition("1g.5gb", SliceRange(6, 1), "default/p1", "MIG-a", (7, 0))
    assert view.inventory.devices[0].healthy and not view.partition_faults
    assert picks(fit(view, ask(memory_mib=4000))) == [("GPU-a", "1g.5gb", 5, 4864, 14)]


def test_restores_unconsumed_reservations() -> None:
    # TestGetNodesUsageRestoresUnconsumedMigReservations: two reservations, one device entry: both occupy.
    text = reservations(RESERVATION, {**RESERVATION, "deviceIndex": 1, "placement": {"start": 5, "size": 1}})
    view = rebuilt(mig_node(gpu_a()), mig_pod("p1", "GPU-a,NVIDIA,4864,14:;", text))
    assert view.usage[0].occupied == placements((6, 1), (5, 1))
    assert view.inventory.devices[0].healthy
    assert picks(fit(view, ask(memory_mib=4000))) == [("GPU-a", "1g.5gb", 4, 4864, 14)]


@pytest.mark.parametrize(("devices", "mig", "failed", "reason"), [
    # TestGetNodesUsageFailsClosedWithoutMigAllocation.
    pytest.param("GPU-a,NVIDIA,4864,14:;", None, ["GPU-a"], UNRESERVED_ENTRY, id="entry-without-reservation"),
    pytest.param("GPU-a,NVIDIA,4864,14:;", "not json", ["GPU-a"], UNRESERVED_ENTRY, id="invalid-annotation"),
    pytest.param("GPU-a,NVIDIA,4864,14:;", reservations({**RESERVATION, "migUUID": "MIG-a"}), ["GPU-a"],
                 UNRESERVED_ENTRY, id="partial-identity-invalidates-all"),
    pytest.param("GPU-a,NVIDIA,4864,14:;", reservations({**RESERVATION, "gpuUUID": "GPU-b"}), ["GPU-a"],
                 UNRESERVED_ENTRY, id="reservation-for-the-other-gpu-occupies-it"),
    pytest.param("GPU-core,NVIDIA,1000,0:;", reservations({**RESERVATION, "gpuUUID": "GPU-core"}), ["GPU-core"],
                 RESERVATION_ON_NON_MIG, id="reservation-on-a-hami-core-gpu"),
    pytest.param("GPU-core,NVIDIA,1000,0:;", reservations({**RESERVATION, "gpuUUID": "GPU-gone"}),
                 ["GPU-a", "GPU-b"], RESERVATION_ELSEWHERE, id="reservation-for-a-gpu-not-on-the-node"),
])
def test_the_rebuild_fails_closed(devices: str, mig: str | None, failed: list[str], reason: str) -> None:
    inventory = mig_node(gpu_a(0, "GPU-a"), gpu_a(1, "GPU-b"), replace(CORE_GPU, index=2))
    view = rebuilt(inventory, mig_pod("bad", devices, mig))
    assert sorted(fault.uuid for fault in view.partition_faults) == failed
    assert all(fault.reason.startswith(reason) for fault in view.partition_faults)
    assert all(fault.pods == ("default/bad",) for fault in view.partition_faults)
    assert [d.uuid for d in view.inventory.devices if not d.healthy] == failed
    result = picks(fit(view, ask(len(failed), memory_mib=1000), annotations={names.POD_USE_GPU_UUID: ",".join(failed)}))
    assert result == f"{len(failed)}/3 CardNotHealth, {3 - len(failed)}/3 CardUuidMismatch"


def test_an_unclaimed_reservation_occupies_its_gpu() -> None:
    inventory = mig_node(gpu_a(0, "GPU-a"), gpu_a(1, "GPU-b"))
    text = reservations(RESERVATION, {**RESERVATION, "deviceIndex": 1, "gpuUUID": "GPU-b"})
    view = rebuilt(inventory, mig_pod("p", "GPU-a,NVIDIA,4864,14:;", text))
    assert [used.occupied for used in view.usage] == [placements((6, 1)), placements((6, 1))]
    assert not view.partition_faults


def test_an_ordinary_pod_on_a_hami_core_gpu_is_no_fault() -> None:
    view = rebuilt(mig_node(gpu_a(0), CORE_GPU), mig_pod("ok", "GPU-core,NVIDIA,1000,0:;", None))
    assert not view.partition_faults and all(device.healthy for device in view.inventory.devices)


def test_a_fault_goes_when_its_pod_goes() -> None:
    bad = pod_usage(mig_pod("bad", "GPU-a,NVIDIA,4864,14:;", None))
    assert bad is not None
    faulted = build_node_view(mig_node(gpu_a()), bad.booking)
    assert faulted.partition_faults and not faulted.inventory.devices[0].healthy
    emptied = {uuid: used - bad.booking[uuid] for uuid, used in bad.booking.items()}
    assert emptied["GPU-a"] == DeviceUsage() and emptied["GPU-a"].unreserved == ()
    assert not build_node_view(mig_node(gpu_a()), {}).partition_faults


def test_legacy_geometry_entries_count_on_their_parent() -> None:
    legacy = Device(uuid="GPU-x", index=0, count=10, memory_mib=95830, cores=100, type="NVIDIA-NVIDIA H100 NVL",
                    mode="mig")
    view = rebuilt(mig_node(legacy), mig_pod("old", "GPU-x[1-0],NVIDIA,10240,28:GPU-x[2-1],NVIDIA,10240,28:;", None,
                                             count=2))
    assert view.usage[0] == DeviceUsage(2, 20480, 56, legacy_entries=2)
    assert not view.partition_faults
    assert picks(fit(view, ask(memory_mib=1000))) == "1/1 CardMigLegacyGeometry"


def test_our_booking_carries_the_pod_name_on_its_instances() -> None:
    grants = ((DeviceGrant("GPU-a", 4864, 14, placed=PlacedPartition("1g.5gb", SliceRange(6, 1))),),)
    booking = pod_booking(grants, init_count=0, owner="ns/p")
    assert booking["GPU-a"].placed == (PlacedPartition("1g.5gb", SliceRange(6, 1), "ns/p"),)


# --- verification at bind --------------------------------------------------------------------------------------

def booked_instance(start: int, size: int, profile: str = "1g.5gb", pod: str = "") -> Mapping[str, DeviceUsage]:
    grants = ((DeviceGrant("GPU-a", BY_NAME[profile].memory_mib, BY_NAME[profile].cores,
                           placed=PlacedPartition(profile, SliceRange(start, size))),),)
    return pod_booking(grants, init_count=0, owner=pod)


@pytest.mark.parametrize(("theirs", "ours", "conflict"), [
    pytest.param([(6, 1)], (5, 1), "", id="disjoint"),
    pytest.param([(6, 1)], (6, 1), names.CARD_MIG_TOPOLOGY_INFEASIBLE, id="same-placement"),
    pytest.param([(4, 4)], (6, 2), names.CARD_MIG_TOPOLOGY_INFEASIBLE, id="inside-a-3g"),
    pytest.param([(0, 2), (2, 2), (4, 2)], (6, 1), "", id="cores-add-up-past-100-but-slices-are-free"),
    pytest.param([(start, 1) for start in range(7)], (7, 1), names.CARD_TIME_SLICING_EXHAUSTED, id="count"),
])
def test_verification_checks_placements_not_summed_cores(theirs: Sequence[tuple[int, int]], ours: tuple[int, int],
                                                         conflict: str) -> None:
    others = other_bookings((booked_instance(start, size, "2g.10gb" if size == 2 else "1g.5gb", f"ns/o{start}"), ())
                            for start, size in theirs)
    booking = booked_instance(*ours, profile="1g.10gb" if ours[1] == 2 else "1g.5gb")
    found = placement_conflicts(mig_node(gpu_a()), others, booking, ())
    assert [c.reason for c in found] == ([conflict] if conflict else [])


def test_verification_refuses_a_gpu_with_an_unreserved_entry() -> None:
    unreserved = pod_usage(mig_pod("bad", "GPU-a,NVIDIA,4864,14:;", None))
    assert unreserved is not None
    others = other_bookings([(unreserved.booking, unreserved.grants)])
    assert [c.reason for c in placement_conflicts(mig_node(gpu_a()), others, booked_instance(0, 1), ())] == [
        names.CARD_NOT_HEALTH]


def test_the_profile_table_builder_matches_hami_names() -> None:
    assert [profile["name"] for profile in A100_MIG_PROFILES] == [p.name for p in PROFILES]


@pytest.mark.parametrize(("grants", "cleared"), [
    pytest.param(((DeviceGrant("GPU-core", 1000, 0),),), {names.POD_MIG_RESERVATIONS: None}, id="no-instance"),
    pytest.param(((DeviceGrant("DCU-0", 1000, 0, vendor="DCU"),),), {names.POD_MIG_RESERVATIONS: None},
                 id="another-family-only"),
    pytest.param(((DeviceGrant("GPU-a", 4864, 14, placed=PlacedPartition("1g.5gb", SliceRange(6, 1))),),), {},
                 id="instances-written"),
])
def test_a_booking_clears_the_reservations_it_does_not_write(grants: tuple[tuple[DeviceGrant, ...], ...],
                                                             cleared: dict[str, None]) -> None:
    assert cleared_annotations(grants, DEFAULT_CATALOG) == cleared
