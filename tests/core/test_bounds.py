"""Every number from an annotation or a request is range-checked where it is parsed (docs/security.md#hardening).

Covers: quantities refused before expansion (``1e2000000``, ``1e100000``, ``1e5000``, long text, fractions,
per-resource maxima for GPU counts and MiB); the node register annotation's numbers (400-digit ``devmem`` /
``devcore``, ``1e308`` in JSON, negative values) and GPU UUIDs carrying separator or control characters;
pair scores; the pod device annotation's memory and cores; a pod's booking checked against what its spec
asks for (no GPU asked → none held, more devices than asked → garbage); wrong JSON types in a pod object.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami_web.core.devices import AnnotationError, decode_pair_scores, decode_register
from hami_web.core.grants import decode_pod_devices
from hami_web.core.limits import MAX_DEVICE_MEMORY_MIB, quote
from hami_web.core.quantities import QuantityError, parse_whole_quantity
from hami_web.core.requests import RequestDefaults, RequestError, pod_request
from hami_web.state.pods import pod_usage

GPU, MEM = "nvidia.com/gpu", "nvidia.com/gpumem"
HUGE = "9" * 400


# -- quantities ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "message"), [
    pytest.param("1e2000000", "'1e2000000' is over the limit of 2147483647", id="two-million-digit-exponent"),
    pytest.param("1e100000", "'1e100000' is over the limit", id="hundred-thousand-digit-exponent"),
    pytest.param("1e5000", "'1e5000' is over the limit", id="five-thousand-digit-exponent"),
    pytest.param("5E", "'5E' is over the limit", id="exa-suffix"),
    pytest.param(10 ** 4000, "is over the limit", id="huge-json-integer"),
    pytest.param("1" * 33, "is longer than 32 characters", id="too-many-characters"),
    pytest.param("1e-999999999", "is not a whole number", id="tiny-fraction"),
    pytest.param(["1"], "is not a quantity", id="a-list"),
    pytest.param({"a": 1}, "is not a quantity", id="an-object"),
])
def test_absurd_quantities_are_refused_naming_the_resource(value: Any, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_whole_quantity(value, container="main", resource=GPU)
    assert str(caught.value).startswith(f"container main: {GPU}: ")
    assert message in str(caught.value)
    assert len(str(caught.value)) < 200  # the hostile text is quoted, not copied


@pytest.mark.parametrize(("limits", "message"), [
    pytest.param({GPU: "129"}, "nvidia.com/gpu: '129' is over the limit of 128", id="gpu-count"),
    # HAMi v2.10 GenerateResourceRequests refuses a gpumem over MaxInt32 / memoryFactor.
    pytest.param({GPU: "1", MEM: "2Gi"}, "nvidia.com/gpumem: '2Gi' is over the limit of 2147483647", id="gpumem"),
    pytest.param({GPU: "1e100000"}, "nvidia.com/gpu: '1e100000' is over the limit of 128", id="gpu-1e100000"),
])
def test_a_pod_asking_more_than_any_gpu_has_is_a_request_error(limits: dict[str, str], message: str) -> None:
    pod = {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}
    with pytest.raises(RequestError, match=message):
        pod_request(pod, RequestDefaults())


def test_values_at_the_limits_are_accepted() -> None:
    pod = {"spec": {"containers": [{"name": "main", "resources": {"limits": {GPU: "128", MEM: "2147483647"}}}]}}
    (container,) = pod_request(pod, RequestDefaults()).containers
    assert (container.count, container.memory_mib) == (128, MAX_DEVICE_MEMORY_MIB)


# -- node register annotation -----------------------------------------------------------------------------------


def _json_device(**overrides: Any) -> str:
    device = {"id": "GPU-a", "index": 0, "count": 10, "devmem": 8000, "devcore": 100, "type": "NVIDIA-A40",
              "numa": 0, "health": True, **overrides}
    return json.dumps([device])


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(f"GPU-a,10,{HUGE},100,NVIDIA-A40,0,true:", "devmem '" , id="text-400-digit-devmem"),
    pytest.param(f"GPU-a,10,8000,{HUGE},NVIDIA-A40,0,true:", "devcore '", id="text-400-digit-devcore"),
    pytest.param("GPU-a,10,2147483648,100,NVIDIA-A40,0,true:", "devmem 2147483648 is outside 0..2147483647",
                 id="text-devmem-past-int32"),
    pytest.param("GPU-a,10,8000,20000,NVIDIA-A40,0,true:", "devcore 20000 is outside 0..10000", id="text-devcore"),
    pytest.param("GPU-a,2147483648,8000,100,NVIDIA-A40,0,true:", "count 2147483648 is outside 0..2147483647",
                 id="text-count-past-int32"),
    pytest.param("GPU-a,-1,8000,100,NVIDIA-A40,0,true:", "count -1 is outside", id="text-negative-count"),
    pytest.param(_json_device(devmem=1e308), "'devmem' is the number 1e+308, not an integer", id="json-1e308-devmem"),
    pytest.param(_json_device(devcore=10 ** 400), "devcore", id="json-400-digit-devcore"),
    pytest.param(_json_device(devmem=-5), "devmem -5 is outside", id="json-negative-devmem"),
    pytest.param(_json_device(numa=100000), "numa 100000 is outside -1..4096", id="json-numa"),
    pytest.param(_json_device(numa=-2), "numa -2 is outside -1..4096", id="json-numa-below-unknown"),
    pytest.param(_json_device(id="GPU-a,GPU-b"), "contains ','", id="uuid-with-comma"),
    pytest.param(_json_device(id="GPU-a:x"), "contains ':'", id="uuid-with-colon"),
    pytest.param(_json_device(id="GPU-a;x"), "contains ';'", id="uuid-with-semicolon"),
    pytest.param(_json_device(id="GPU-a\nx"), "contains '\\n'", id="uuid-with-newline"),
    pytest.param(_json_device(id="GPU a"), "contains ' '", id="uuid-with-space"),
    pytest.param(_json_device(id="GPU-\x00"), "contains '\\x00'", id="uuid-with-nul"),
    pytest.param(_json_device(id="G" * 200), "longer than 128 characters", id="uuid-too-long"),
    pytest.param(_json_device(type="NVIDIA" * 100), "type is longer than 256", id="type-too-long"),
])
def test_a_register_annotation_out_of_range_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_register(text)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(("text", "expected"), [
    # HAMi v2.10 DeviceInfo: Count and Devmem are int32, Numa an int; its decoders take any such value as written.
    pytest.param("GPU-a,10,655360,100,NVIDIA-H200,0,true:", (10, 655360, 0), id="text-655360-mib"),
    pytest.param("GPU-a,2048,8000,100,NVIDIA-A40,-1,true:", (2048, 8000, -1), id="text-2048-shares-numa-unknown"),
    pytest.param(_json_device(devmem=2147483647, count=1025, numa=-1), (1025, 2147483647, -1), id="json-int32-max"),
])
def test_a_register_hami_reads_is_read_as_written(text: str, expected: tuple[int, int, int]) -> None:
    (device,) = decode_register(text)
    assert (device.count, device.memory_mib, device.numa) == expected


def test_a_pair_score_out_of_range_is_refused() -> None:
    with pytest.raises(AnnotationError, match=r"outside 0\.\.1000000"):
        decode_pair_scores(json.dumps([{"uuid": "a", "score": {"b": 1e308}}]))
    with pytest.raises(AnnotationError, match="longer than 32 characters"):
        decode_pair_scores(json.dumps([{"uuid": "a", "score": {"b": HUGE}}]))


# -- pod device annotation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(f"GPU-a,NVIDIA,{HUGE},30:;", "memory is longer than 32 characters", id="400-digit-memory"),
    pytest.param(f"GPU-a,NVIDIA,1000,{HUGE}:;", "cores is longer than 32 characters", id="400-digit-cores"),
    pytest.param("GPU-a,NVIDIA,2147483648,30:;", "memory 2147483648 is over the limit of 2147483647", id="memory"),
    pytest.param("GPU-a,NVIDIA,1000,10001:;", "cores 10001 is over the limit of 10000", id="cores-over-device-limit"),
])
def test_a_pod_device_annotation_out_of_range_is_refused(text: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        decode_pod_devices(text)


def _bound_pod(containers: list[dict[str, Any]], devices: str, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"uid": "u1", "namespace": "ns", "name": "p",
                         "annotations": {"hami.io/vgpu-node": "node1", "hami.io/vgpu-devices-allocated": devices},
                         **metadata},
            "spec": {"nodeName": "node1", "containers": containers}, "status": {"phase": "Running"}}


def _container(gpus: str | None) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": {GPU: gpus}} if gpus is not None else {}}


@pytest.mark.parametrize(("containers", "devices", "message"), [
    pytest.param([_container(None)], "GPU-a,NVIDIA,8000,100:;", "holds 1 devices but asks for 0",
                 id="asks-for-no-gpu-holds-none"),
    pytest.param([_container("1")], "GPU-a,NVIDIA,10,1:GPU-b,NVIDIA,10,1:;", "holds 2 devices but asks for 1",
                 id="more-devices-than-asked"),
    pytest.param([_container("1")], "GPU-a,NVIDIA,10,1:;;", "2 container entries for a pod with 1 containers",
                 id="more-entries-than-containers"),
    pytest.param([_container("1e5000")], "GPU-a,NVIDIA,10,1:;", "over the limit", id="count-unreadable"),
])
def test_a_booking_the_pod_does_not_ask_for_is_not_trusted(containers: list[dict[str, Any]], devices: str,
                                                            message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        pod_usage(_bound_pod(containers, devices))


def test_a_booking_within_what_the_pod_asks_for_is_counted() -> None:
    usage = pod_usage(_bound_pod([_container("2")], "GPU-a,NVIDIA,10,1:GPU-b,NVIDIA,10,1:;"))
    assert usage is not None and set(usage.booking) == {"GPU-a", "GPU-b"}


@pytest.mark.parametrize(("pod", "message"), [
    pytest.param({"metadata": {"annotations": ["hami.io/vgpu-node"]}}, "metadata.annotations must be a map",
                 id="annotations-a-list"),
    pytest.param({"metadata": {"annotations": "hami.io/vgpu-node=node1"}}, "metadata.annotations must be a map",
                 id="annotations-a-string"),
    pytest.param({"metadata": {"annotations": {"hami.io/vgpu-node": 7}}}, "'hami.io/vgpu-node' is number",
                 id="annotation-a-number"),
    pytest.param({"metadata": "x"}, "metadata must be an object", id="metadata-a-string"),
    pytest.param(_bound_pod([_container("1")], "GPU-a,NVIDIA,1,1:;") | {"spec": {"containers": "c"}},
                 "spec.containers must be a list", id="containers-a-string"),
])
def test_a_pod_of_the_wrong_shape_is_an_annotation_error(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        pod_usage(pod)


def test_quote_cuts_long_values_and_says_how_long() -> None:
    assert quote("x" * 1000) == repr("x" * 40) + "…(1000 characters)"
    assert quote("short") == "'short'"
