"""Enflame DRS on the registry (hami_web.core.families.enflame_drs on hami_web.core.partitions), from HAMi v2.10's
``pkg/device/enflame/device_test.go`` (each case names its Go test).

Covers: the ``enflame`` section's DRS names (read, legacy key, published back beside GCU's); the GCUs read from the
node's annotation; what a container asks (a slice count, or memory and cores, one device); the fit through the common
loop mapping the ask to the node's profile and booking its memory, cores and slices (profile not found, mutex,
unhealthy, UUID selection, slices exhausted); the booking with its shares; the bind's annotations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from hami_web.core.devices import Device, NodeInventory
from hami_web.core.families import build_catalog, config_document, parse_device_config
from hami_web.core.families.enflame_drs import ASSIGNED_CONTAINERS_KEY, CAPACITY_KEY, CW, DrsCapacity
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import bind_annotations
from hami_web.core.options import pod_options
from hami_web.core.requests import ContainerRequest, PodRequest, family_request
from hami_web.core.usage import DeviceUsage, build_node_view, pod_booking

CATALOG = build_catalog()
DRS = CATALOG[CW]
CAPACITY = ('{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"4","capacity":6}],'
            '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}')


def drs_node(text: str = CAPACITY, name: str = "node-a") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {CAPACITY_KEY: text}}}


GCUS = DrsCapacity().devices(drs_node())
assert GCUS is not None


def test_the_enflame_section_names_drs_beside_gcu_and_is_published_back() -> None:
    """HAMi InitEnflameDevice: resourceNameDRSGCU, else the legacy resourceNameVGCU; memory and core names."""
    assert (DRS.resources.count, DRS.resources.memory, DRS.resources.cores) == (
        "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core")
    config = parse_device_config({"enflame": {"resourceNameVGCU": "enflame.com/vgcu", "resourceNameGCU": "x.io/gcu"}})
    catalog = build_catalog(config=config)
    assert (catalog[CW].resources.count, catalog["GCU"].resources.count) == ("enflame.com/vgcu", "x.io/gcu")
    config = parse_device_config({"enflame": {"resourceNameDRSGCU": "x.io/drs", "resourceNameGCU": "x.io/gcu"}})
    assert config_document(config) == {"enflame": {"resourceNameGCU": "x.io/gcu", "resourceNameDRSGCU": "x.io/drs"}}


def test_no_lock_no_handshake_only_the_allocated_key() -> None:
    """HAMi EnflameDevices: LockNode nil, SupportDevices only ``hami.io/enflame-vgpu-devices-allocated``."""
    assert (DRS.lock, DRS.handshake_key, DRS.to_allocate_key, DRS.allocated_key) == (
        None, "", "", "hami.io/enflame-vgpu-devices-allocated")
    assert DRS.lock_key == "hami-web.io/bind.lock"


def test_gcus_from_the_annotation_and_none_without_it() -> None:
    """HAMi TestGetNodeDevices_DRSAnnotation: each GCU offers the node's profiles; its minor is its handle."""
    assert [(d.uuid, d.count, d.memory_mib, d.partitions.handle if d.partitions else None) for d in GCUS] == [
        ("node-a-enflame-drs-0", 6, 40960, "0"), ("node-a-enflame-drs-1", 6, 40960, "4")]
    assert DrsCapacity().devices({"metadata": {"name": "n", "annotations": {}}}) is None


def spec(limits: Mapping[str, str] | None = None, requests: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"name": "ctr", "resources": {"limits": dict(limits or {}), "requests": dict(requests or {})}}


@pytest.mark.parametrize(("limits", "requests", "count", "slices", "memory", "cores"), [
    ({"enflame.com/drs-gcu": "3"}, {}, 1, 3, 0, 0),  # TestGenerateResourceRequests: Nums 1, Memreq 3
    ({}, {"enflame.com/drs-gcu": "2"}, 1, 2, 0, 0),  # requests are read too
    ({"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "40"}, {}, 1, 0, 20480, 40),  # _ByMemoryCore
    ({"enflame.com/gcu-core": "0"}, {}, 1, 0, 0, 0),  # present, even 0: the smallest profile
    ({"enflame.com/drs-gcu": "0", "enflame.com/gcu-memory": "6"}, {}, 1, 0, 6, 0),  # no slices: memory
    ({"enflame.com/drs-gcu": "0"}, {}, 0, 0, 0, 0),
    ({"enflame.com/gcu": "1"}, {}, 0, 0, 0, 0),  # whole GCUs are the GCU family's
])
def test_what_a_container_asks(limits: dict[str, str], requests: dict[str, str], count: int, slices: int, memory: int,
                               cores: int) -> None:
    """HAMi GenerateResourceRequests: one device, a slice count above 0 (limits over requests), else memory/cores."""
    ask = family_request(spec(limits, requests), init=False, family=DRS)
    assert ask.count == count
    if count:
        assert ask.partition is not None
        assert (ask.partition.slices, ask.partition.memory, ask.partition.cores) == (slices, memory, cores)


def fit(request: ContainerRequest, used: Mapping[str, tuple[int, int, int]] | None = None,
        annotations: Mapping[str, str] | None = None, devices: tuple[Device, ...] = GCUS) -> PodFit | str:
    # The family's partitioning as `node_state` gives it the inventory, from the catalog.
    view = build_node_view(NodeInventory(name="node-a", devices=devices, partitioning=CATALOG.partitionings()),
                           {uuid: DeviceUsage(*row) for uuid, row in (used or {}).items()})
    options = pod_options(annotations, node_policy="binpack", gpu_policy="binpack", catalog=CATALOG)
    result = fit_pod(PodRequest(containers=(request,)), view, options)
    return result.summary() if isinstance(result, FitFailure) else result


def ask(**limits: str) -> ContainerRequest:
    return family_request(spec({f"enflame.com/{key.replace('_', '-')}": value for key, value in limits.items()}),
                          init=False, family=DRS)


@pytest.mark.parametrize(("request_", "profile", "memory", "cores", "slices"), [
    (ask(drs_gcu="3"), "3g.20gb", 20480, 50, 3),  # TestFit_SelectProfileByRequest
    (ask(gcu_memory="20480", gcu_core="40"), "3g.20gb", 20480, 50, 3),  # TestFit_SelectProfileByMemoryCoreRequest
    (ask(gcu_memory="7"), "3g.20gb", 20480, 50, 3),
    (ask(gcu_core="60"), "6g.40gb", 40960, 100, 6),
    (ask(gcu_core="1"), "1g.6gb", 6144, 17, 1),
])
def test_an_ask_books_its_profile(request_: ContainerRequest, profile: str, memory: int, cores: int,
                                  slices: int) -> None:
    """The grant books the profile's memory and cores and takes its slices of the GCU's shares."""
    placed = fit(request_)
    assert isinstance(placed, PodFit)
    (grant,) = placed.grants[0]
    assert grant.partition is not None and grant.partition.name == profile
    assert (grant.memory_mib, grant.cores, grant.shares) == (memory, cores, slices)
    assert pod_booking(placed.grants, init_count=0)[grant.uuid] == DeviceUsage(slices, memory, cores)


@pytest.mark.parametrize(("request_", "used", "annotations", "reason"), [
    (ask(drs_gcu="2"), None, None, "1/2 ModeNotFit"),  # TestFit_ProfileNotFound
    (ask(drs_gcu="200"), None, None, "1/2 ModeNotFit"),  # more slices than any profile: read, then not found
    (ask(drs_gcu=str(2**31 - 1)), None, None, "1/2 ModeNotFit"),  # GenerateResourceRequests reads up to an int32
    (ask(gcu_memory="41"), None, None, "1/2 ModeNotFit"),
    (ask(drs_gcu="1"), {"node-a-enflame-drs-0": (1, 6144, 17), "node-a-enflame-drs-1": (1, 6144, 17)},
     # TestFit_MutexRejectsUsedDevice
     {"hami.io/gpu-scheduler-policy": "mutex"}, "2/2 ExclusiveDeviceAllocateConflict"),
    (ask(drs_gcu="1"), {"node-a-enflame-drs-0": (6, 40960, 100), "node-a-enflame-drs-1": (6, 40960, 100)}, None,
     "2/2 CardTimeSlicingExhausted"),
    (ask(drs_gcu="6"), {"node-a-enflame-drs-0": (1, 6144, 17), "node-a-enflame-drs-1": (3, 20480, 50)}, None,
     "2/2 CardInsufficientMemory"),  # 5 of 6 slices free, but the 6g profile's memory is not
    (ask(drs_gcu="1"), None, {"enflame.com/use-gpuuuid": "node-a-enflame-drs-9"}, "2/2 CardUuidMismatch"),
])
def test_refusals(request_: ContainerRequest, used: Mapping[str, tuple[int, int, int]] | None,
                  annotations: Mapping[str, str] | None, reason: str) -> None:
    """HAMi EnflameDevices.Fit's reasons through the common loop."""
    assert fit(request_, used, annotations) == reason


def test_an_unhealthy_gcu_is_skipped() -> None:
    """HAMi TestFit_UnhealthyDeviceRejected."""
    devices = (replace(GCUS[0], healthy=False), GCUS[1])
    placed = fit(ask(drs_gcu="1"), devices=devices)
    assert isinstance(placed, PodFit) and placed.grants[0][0].uuid == "node-a-enflame-drs-1"
    assert fit(ask(drs_gcu="1"), devices=devices[:1]) == "1/1 CardNotHealth"


def test_two_partitions_share_a_gcu_until_its_slices_and_memory_are_gone() -> None:
    """A 3g fits beside a booked 1g on one GCU (binpack); beside a 3g and a 1g, another 3g no more (memory)."""
    used = {"node-a-enflame-drs-1": (1, 6144, 17)}
    placed = fit(ask(drs_gcu="3"), used)
    assert isinstance(placed, PodFit) and placed.grants[0][0].uuid == "node-a-enflame-drs-1"
    assert fit(ask(drs_gcu="3"), {"node-a-enflame-drs-0": (4, 26624, 67), "node-a-enflame-drs-1": (4, 26624, 67)}) \
        == "2/2 CardInsufficientMemory"


def test_the_bind_writes_the_plugins_annotations() -> None:
    """HAMi TestPatchAnnotations_DRSFields through `bind_annotations`: ``assigned-containers`` carries the slices the
    device annotation has no field for."""
    placed = fit(ask(gcu_memory="20", gcu_core="10"), {"node-a-enflame-drs-1": (1, 6144, 17)})
    assert isinstance(placed, PodFit)
    written = bind_annotations(placed.grants, CATALOG, now_seconds=5, containers=["main"])
    assert written["hami.io/enflame-vgpu-devices-allocated"] == "node-a-enflame-drs-1,Enflame,20480,50:;"
    assert (written["enflame.com/gcu-assigned"], written["enflame.com/gcu-assigned-index"],
            written["enflame.com/gcu-assigned-minor"], written["enflame.com/gcu-request-size"],
            written["enflame.com/gcu-assigned-time"]) == ("false", "1", "4", "3", "5000000000")
    assert json.loads(written[ASSIGNED_CONTAINERS_KEY]) == {
        "main": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}}
