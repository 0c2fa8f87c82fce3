"""Moore Threads GPUs (docs/device-families.md#device-families), table tests from HAMi v2.10's
``pkg/device/mthreads/device_test.go``.

Covers: the inventory from node capacity (Test_GetNodeDevices "get node device": 1 core and 1 memory unit make one card
of 8192 MiB, 16 cores, 100 slots; 32 cores make two cards sharing the memory); the request
(Test_GenerateResourceRequests
"all resources set to limit and request": 1000 units are 512,000 MiB; a count of N divides memory and cores among the N
devices); the fit (TestDevices_Fit "fit fail: memory not enough", "fit fail: core not enough",
"fit fail: CardComputeUnitsExhausted", "fit fail: AllocatedCardsInsufficientRequest" for two whole cards on a node of
one); a pod's later containers only on its first container's card (Test_CustomFilterRule "allocate device" /
"don't allocate device": ``CardNotFoundCustomFilterRule`` on the other card); the bind's annotations
(Test_PatchAnnotations "exist device": only ``…-devices-allocated``, ``mthreads.com/gpu-index``, the predicate time in
nanoseconds and node) and the usage read back.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.grants import bind_annotations
from hami_web.core.options import pod_options
from hami_web.core.requests import ContainerRequest, RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, build_node_view
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import pod_usage

MTHREADS = DEFAULT_CATALOG["Mthreads"]
DEFAULTS = RequestDefaults.of(DEFAULT_CATALOG)
COUNT, MEMORY, CORES = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"


def node(name: str = "m", *, cores: int = 32, memory: int = 192) -> dict[str, Any]:
    capacity = {CORES: str(cores), MEMORY: str(memory)}
    return {"metadata": {"name": name}, "status": {"capacity": capacity, "allocatable": capacity}}


def pod(*limits: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "default", "annotations": {}},
            "spec": {"containers": [{"name": f"c{i}", "resources": {"limits": dict(asked)}}
                                    for i, asked in enumerate(limits)]},
            "status": {"phase": "Pending"}}


def place(the_pod: dict[str, Any], usage: dict[str, tuple[int, int, int]] | None = None,
          the_node: dict[str, Any] | None = None) -> Placement | NoPlacement:
    state = node_state(node_record(the_node or node(), catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None, state.error
    view = build_node_view(state.inventory, {uuid: DeviceUsage(*row) for uuid, row in (usage or {}).items()})
    options = pod_options({}, node_policy="binpack", gpu_policy="binpack", catalog=DEFAULT_CATALOG)
    return choose_node(pod_request(the_pod, DEFAULTS), options, [view.name], {view.name: view})


@pytest.mark.parametrize(("cores", "memory", "expected"), [
    pytest.param(1, 1, [Device("test-mthreads-0", 0, 100, 8192, 16, "Mthreads", family="Mthreads")],
                 id="get-node-device"),
    pytest.param(32, 192, [Device(f"test-mthreads-{i}", i, 100, 49152, 16, "Mthreads", family="Mthreads")
                           for i in range(2)], id="two-cards-share-the-memory"),
])
def test_cards_are_read_from_the_capacity(cores: int, memory: int, expected: list[Device]) -> None:
    state = node_state(node_record(node("test", cores=cores, memory=memory), catalog=DEFAULT_CATALOG), now=0.0,
                       catalog=DEFAULT_CATALOG)
    assert state.inventory is not None and list(state.inventory.devices) == expected


@pytest.mark.parametrize(("limits", "count", "memory_mib", "cores"), [
    pytest.param({COUNT: "1", MEMORY: "1000", CORES: "1"}, 1, 512000, 1, id="all-resources-set-to-limit"),
    pytest.param({COUNT: "2", MEMORY: "192", CORES: "32"}, 2, 49152, 16, id="divided-among-two-devices"),
])
def test_memory_and_cores_are_divided_among_the_devices(limits: dict[str, str], count: int, memory_mib: int,
                                                        cores: int) -> None:
    request = pod_request(pod(limits), DEFAULTS)
    assert request.containers == (ContainerRequest(name="c0", init=False, count=count, memory_mib=memory_mib,
                                                   cores=cores, family="Mthreads", one_card=True),)


@pytest.mark.parametrize(("limits", "usage", "outcome"), [
    pytest.param({COUNT: "1", MEMORY: "96", CORES: "16"}, {}, ["m-mthreads-0"], id="fit-success"),
    pytest.param({COUNT: "1", MEMORY: "97", CORES: "1"}, {}, "2/2 CardInsufficientMemory",
                 id="memory-not-enough"),
    pytest.param({COUNT: "1", MEMORY: "8", CORES: "8"}, {"m-mthreads-0": (1, 0, 16), "m-mthreads-1": (1, 0, 16)},
                 "2/2 CardInsufficientCore", id="core-not-enough"),
    pytest.param({COUNT: "1", MEMORY: "8"}, {"m-mthreads-0": (1, 0, 16), "m-mthreads-1": (1, 0, 16)},
                 "2/2 CardComputeUnitsExhausted", id="compute-units-exhausted"),
    pytest.param({COUNT: "2", MEMORY: "192", CORES: "32"}, {"m-mthreads-1": (1, 49152, 16)},
                 "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
                 id="allocated-cards-insufficient-request"),
])
def test_the_fit_as_hami_tests_it(limits: dict[str, str], usage: dict[str, tuple[int, int, int]],
                                  outcome: list[str] | str) -> None:
    """TestDevices_Fit."""
    placement = place(pod(limits), usage)
    if isinstance(outcome, str):
        assert placement == NoPlacement(reasons={"m": outcome})
    else:
        assert isinstance(placement, Placement) and [g.uuid for g in placement.grants[0]] == outcome


def test_a_pods_later_containers_share_its_first_card() -> None:
    """Test_CustomFilterRule "allocate device": the second container goes to the first one's card even though the
    other card is emptier."""
    placement = place(pod({COUNT: "1", MEMORY: "8", CORES: "4"}, {COUNT: "1", MEMORY: "8", CORES: "4"}),
                      {"m-mthreads-0": (1, 4096, 4)})
    assert isinstance(placement, Placement)
    assert [grant.uuid for container in placement.grants for grant in container] == ["m-mthreads-0"] * 2


def test_a_later_container_that_does_not_fit_the_first_card_fails_the_custom_rule() -> None:
    """Test_CustomFilterRule "don't allocate device": the other card passes every check but this one."""
    placement = place(pod({COUNT: "1", MEMORY: "64", CORES: "8"}, {COUNT: "1", MEMORY: "64", CORES: "8"}))
    assert placement == NoPlacement(reasons={
        "m": "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule"})


def test_the_bind_writes_what_the_device_plugin_reads_and_the_usage_reads_back() -> None:
    """Test_PatchAnnotations "exist device"."""
    placement = place(pod({COUNT: "2", MEMORY: "192", CORES: "32"}))
    assert isinstance(placement, Placement)
    written = bind_annotations(placement.grants, DEFAULT_CATALOG, now_seconds=7, node="m", now_ns=7_000_000_123)
    assert written == {"hami.io/mthreads-vgpu-devices-allocated": "m-mthreads-0,Mthreads,49152,16:"
                                                                   "m-mthreads-1,Mthreads,49152,16:;",
                       "mthreads.com/gpu-index": "0,1", "mthreads.com/predicate-time": "7000000123",
                       "mthreads.com/predicate-node": "m"}
    booked = pod({COUNT: "2", MEMORY: "192", CORES: "32"})
    booked["metadata"]["annotations"] = {names.POD_ASSIGNED_NODE: "m", **written}
    usage = pod_usage(booked, catalog=DEFAULT_CATALOG)
    assert usage is not None and usage.grants == placement.grants
