"""AWS Neuron devices (docs/device-families.md#device-families), table tests from HAMi v2.10's
``pkg/device/awsneuron/device_test.go``.

Covers: the inventory read from capacity (Test_GetNodeDevices "get node device": one device, its two cores as mask 3,
two task slots, no memory, the instance type kept; no capacity, no device); the ask (Test_GenerateResourceRequests
"allocate neuron device", "allocate neuron core", the rejections; Test_splitCoreRequest "single core takes one
device", "a full device is one device", "whole devices divide evenly", "odd count above one has no representable
shape", "per-device cores above the addressable limit are bounded"); the core mask (Test_countMaskAvailable: the
cores free and the lowest taken); the range picker (Test_graphSelect "full allocate", "8 allocate fail", "8 allocate
success", "8 allocate"; a count HAMi cannot place on a non-``inf`` type); the fit (TestDevices_Fit "fit success",
"fit fail: core not enough", "user assign use uuid mismatch", "user assign no use uuid match", "card overused", "mutex
policy rejects used device", "NumaNotFit with multiple devices", which names the refusal
``AllocatedCardsInsufficientRequest`` here); the ids the bind writes (Test_PatchAnnotations "neuron device",
"neuroncore device", "init container neuron device"); and the bind's re-check refusing a core taken twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.families.neuron import NEURON_CORES, NeuronIds, first_range
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, RequestError, pod_request
from hami_web.core.usage import DeviceUsage, build_node_view
from hami_web.core.verify import other_bookings, placement_conflicts
from hami_web.state.nodes import node_record, node_state

NEURON = DEFAULT_CATALOG["AWSNeuron"]
DEFAULTS = RequestDefaults.of(DEFAULT_CATALOG)
COUNT, CORES = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"


def node(name: str = "test", devices: int = 1, cores: int = 2, instance_type: str = "trn1.32xlarge") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": instance_type}},
            "status": {"capacity": {COUNT: str(devices), CORES: str(cores)}}}


def pod(limits: dict[str, str], *, annotations: dict[str, str] | None = None, where: str = "limits") -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "c0", "resources": {where: limits}}]}, "status": {"phase": "Pending"}}


def place(the_node: dict[str, Any], the_pod: dict[str, Any],
          usage: dict[int, DeviceUsage] | None = None) -> Placement | NoPlacement:
    state = node_state(node_record(the_node, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None, state.error
    views = {state.name: build_node_view(state.inventory, {
        device.uuid: (usage or {})[device.index] for device in state.inventory.devices
        if device.index in (usage or {})})}
    options = pod_options(the_pod["metadata"]["annotations"], node_policy="binpack", gpu_policy="spread",
                          catalog=DEFAULT_CATALOG)
    return choose_node(pod_request(the_pod, DEFAULTS), options, [state.name], views)


def test_the_inventory_is_read_from_capacity() -> None:
    """Test_GetNodeDevices "get node device"; a node without the count resource has none."""
    state = node_state(node_record(node(instance_type="inf2"), catalog=DEFAULT_CATALOG), now=0.0,
                       catalog=DEFAULT_CATALOG)
    assert state.inventory is not None
    assert state.inventory.devices == (Device(uuid="test-AWSNeuron-0", index=0, count=2, memory_mib=0, cores=3,
                                              type="AWSNeuron", numa=0, healthy=True, family="AWSNeuron",
                                              instance_type="inf2"),)
    bare = node_state(node_record({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "8"}}},
                                  catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert bare.inventory is None


@pytest.mark.parametrize(("limits", "where", "count", "cores"), [
    pytest.param({COUNT: "2"}, "limits", 2, 0, id="allocate neuron device"),
    pytest.param({COUNT: "2"}, "requests", 2, 0, id="set request-only neuron number"),
    pytest.param({CORES: "1"}, "limits", 1, 1, id="single core takes one device"),
    pytest.param({CORES: "2"}, "limits", 1, 2, id="a full device is one device"),
    pytest.param({CORES: "6"}, "limits", 3, 2, id="whole devices divide evenly"),
    pytest.param({CORES: "4"}, "limits", 2, 2, id="per-device cores above the addressable limit are bounded"),
])
def test_an_ask_is_devices_or_cores(limits: dict[str, str], where: str, count: int, cores: int) -> None:
    """Test_GenerateResourceRequests and Test_splitCoreRequest: a count asks whole devices (cores 0), a core count is
    split into devices of at most two cores."""
    (asked,) = pod_request(pod(limits, where=where), DEFAULTS).containers
    assert (asked.family, asked.count, asked.cores) == ("AWSNeuron", count, cores)


@pytest.mark.parametrize(("cores", "words"), [
    pytest.param("3", "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
                 id="odd count above one has no representable shape"),
    pytest.param("0", "aws.amazon.com/neuroncore must be greater than 0", id="reject zero neuron core request"),
])
def test_a_core_ask_hami_cannot_split_is_a_request_error(cores: str, words: str) -> None:
    """Test_GenerateResourceRequests "reject odd neuron core request when admission is bypassed", "reject zero neuron
    core request when admission is bypassed": HAMi reads them as asking nothing; here a pod that skipped the webhook
    (which refuses them) gets the webhook's words."""
    with pytest.raises(RequestError, match=words):
        pod_request(pod({CORES: cores}), DEFAULTS)


@pytest.mark.parametrize(("used", "cores", "taken"), [
    (0, 0, 3), (0, 2, 3), (0, 1, 1), (1, 1, 2), (2, 1, 1), (1, 2, None), (3, 1, None), (1, 0, None)])
def test_the_core_mask(used: int, cores: int, taken: int | None) -> None:
    """Test_countMaskAvailable ("test 3": 2 cores, "test 2"/"test 1": 1, "test 0": none) as what a grant takes: the
    whole device only when idle, else the lowest free cores."""
    device = Device(uuid="d", index=0, count=2, memory_mib=0, cores=3, type="AWSNeuron", family="AWSNeuron")
    assert NEURON_CORES.book(device, used, cores) == taken


@pytest.mark.parametrize(("busy", "count", "ring", "chosen"), [
    pytest.param(set(), 16, True, list(range(16)), id="full allocate"),
    pytest.param({7, 13}, 8, False, [], id="8 allocate fail"),
    pytest.param({7}, 8, False, list(range(8, 16)), id="8 allocate success"),
    pytest.param({5, 14}, 8, True, list(range(6, 14)), id="8 allocate"),
    pytest.param(set(), 2, False, [], id="two devices are no aligned range"),
    pytest.param({0}, 3, True, [1, 2, 3], id="any start on inf"),
])
def test_the_range_picker(busy: set[int], count: int, ring: bool, chosen: list[int]) -> None:
    """Test_graphSelect over 16 devices."""
    assert first_range(set(range(16)) - busy, count, ring=ring) == chosen


@pytest.mark.parametrize(("limits", "usage", "annotations", "reason"), [
    pytest.param({COUNT: "1"}, DeviceUsage(1, 0, 1), {}, "1/1 CardInsufficientCore", id="fit fail: core not enough"),
    pytest.param({COUNT: "1"}, DeviceUsage(), {"aws.amazon.com/use-neuron-uuid": "dev-0"}, "1/1 CardUuidMismatch",
                 id="fit fail: user assign use uuid mismatch"),
    pytest.param({COUNT: "1"}, DeviceUsage(), {"aws.amazon.com/nouse-neuron-uuid": "test-AWSNeuron-0"},
                 "1/1 CardUuidMismatch", id="fit fail: user assign no use uuid match"),
    pytest.param({CORES: "1"}, DeviceUsage(2, 0, 0), {}, "1/1 CardTimeSlicingExhausted", id="fit fail: card overused"),
    pytest.param({CORES: "1"}, DeviceUsage(1, 0, 1), {"hami.io/gpu-scheduler-policy": "mutex"},
                 "1/1 ExclusiveDeviceAllocateConflict", id="mutex policy rejects used device"),
])
def test_hamis_refusals(limits: dict[str, str], usage: DeviceUsage, annotations: dict[str, str], reason: str) -> None:
    """TestDevices_Fit's refusals, each naming HAMi's reason."""
    placement = place(node(), pod(limits, annotations=annotations), {0: usage})
    assert isinstance(placement, NoPlacement)
    assert placement.reasons == {"test": reason}


def test_a_core_ask_takes_the_free_core_of_a_half_used_device() -> None:
    """TestDevices_Fit "fit success" with cores: one core of a device whose core 0 is taken is core 1 (mask 2)."""
    placement = place(node(), pod({CORES: "1"}), {0: DeviceUsage(1, 0, 1)})
    assert isinstance(placement, Placement), placement
    assert [(g.uuid, g.cores) for g in placement.grants[0]] == [("test-AWSNeuron-0", 2)]


def test_several_devices_are_a_contiguous_idle_range() -> None:
    """TestDevices_Fit "NumaNotFit with multiple devices" (two devices on a non-``inf`` type: no range; HAMi says
    ``NumaNotFit``) and four on trn1 from an aligned start past a busy device."""
    two = place(node(devices=2, cores=4), pod({COUNT: "2"}))
    assert isinstance(two, NoPlacement) and two.reasons == {"test": "2/2 AllocatedCardsInsufficientRequest"}
    four = place(node(devices=8, cores=16), pod({COUNT: "4"}), {1: DeviceUsage(1, 0, 1)})
    assert isinstance(four, Placement), four
    assert [(g.uuid, g.cores) for g in four.grants[0]] == [(f"test-AWSNeuron-{i}", 3) for i in range(4, 8)]
    ring = place(node(devices=6, cores=12, instance_type="inf2.24xlarge"), pod({CORES: "6"}),
                 {0: DeviceUsage(1, 0, 1)})
    assert isinstance(ring, Placement), ring
    assert [g.uuid for g in ring.grants[0]] == [f"test-AWSNeuron-{i}" for i in (1, 2, 3)]


def _grant(uuid: str, mask: int, asked: int) -> DeviceGrant:
    return DeviceGrant(uuid=uuid, memory_mib=0, cores=mask, vendor="AWSNeuron", asked_cores=asked, device_cores=3)


@pytest.mark.parametrize(("grants", "written"), [
    pytest.param(((_grant("n-AWSNeuron-0", 3, 0), _grant("n-AWSNeuron-1", 3, 0)),),
                 {"AWS_NEURON_IDS": "0,1", "NEURON_ALLOCATED": "false"}, id="neuron device"),
    pytest.param(((_grant("n-AWSNeuron-0", 3, 2),),),
                 {"AWS_NEURON_IDS": "0,1", "NEURON_ALLOCATED": "false",
                  "NEURON_RESOURCE_TYPE": "aws.amazon.com/neuroncore"}, id="neuroncore device"),
    pytest.param(((_grant("n-AWSNeuron-0", 3, 0),), ()), {"AWS_NEURON_IDS": "0", "NEURON_ALLOCATED": "false"},
                 id="init container neuron device"),
    pytest.param(((_grant("n-AWSNeuron-3", 2, 1),),),
                 {"AWS_NEURON_IDS": "7", "NEURON_ALLOCATED": "false",
                  "NEURON_RESOURCE_TYPE": "aws.amazon.com/neuroncore"}, id="the second core of device 3"),
    pytest.param(((),), {}, id="no device"),
])
def test_the_ids_the_device_plugin_reads(grants: tuple[tuple[DeviceGrant, ...], ...], written: dict[str, str]) -> None:
    """Test_PatchAnnotations: device indices for a device ask, core indices (and the resource type) for a core ask."""
    assert NeuronIds("aws.amazon.com/neuroncore")(grants) == written


def test_the_binds_recheck_refuses_a_core_taken_twice() -> None:
    state = node_state(node_record(node(), catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None

    def conflicts(theirs: int, ours: int) -> list[str]:
        others = other_bookings([({"test-AWSNeuron-0": DeviceUsage(1, 0, theirs)}, ())])
        return [c.reason for c in placement_conflicts(state.inventory, others,
                                                      {"test-AWSNeuron-0": DeviceUsage(1, 0, ours)}, (),
                                                      DEFAULT_CATALOG.core_bookings())]

    assert conflicts(1, 1) == ["CardInsufficientCore"]
    assert conflicts(1, 2) == []
