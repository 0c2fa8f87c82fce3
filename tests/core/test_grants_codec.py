"""Pod device annotation codec (docs/wire-formats.md#pod-device-annotation): ``hami.io/vgpu-devices-allocated`` /
``-to-allocate``.

Covers: encoding is positional, one ``;``-terminated entry per container (init containers first), each device
``UUID,NVIDIA,<mem>,<cores>:``, an empty container is an empty entry; the documented example strings decode as written;
encode∘decode = identity (including leading, trailing and only empty containers); strict decoding errors
(fewer than 4 fields, non-numeric or negative numbers, empty UUID, missing final ``;``) name the container
and device.
"""

from __future__ import annotations

import pytest

from hami_web.core.devices import AnnotationError
from hami_web.core.grants import DeviceGrant, PodGrants, decode_pod_devices, encode_pod_devices

A40_1 = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
A40_2 = "GPU-1afede84-4e70-2174-49af-f07ebb94d1ae"


@pytest.mark.parametrize(("text", "grants"), [
    pytest.param(f"{A40_1},NVIDIA,3000,30:;", ((DeviceGrant(A40_1, 3000, 30),),), id="seed-002-one-container"),
    pytest.param(f"{A40_2},NVIDIA,20000,30:;", ((DeviceGrant(A40_2, 20000, 30),),), id="seed-001-one-container"),
    pytest.param(";GPU-a,NVIDIA,2000,30:GPU-b,NVIDIA,2000,30:;",
                 ((), (DeviceGrant("GPU-a", 2000, 30), DeviceGrant("GPU-b", 2000, 30))),
                 id="spec-empty-first-container-then-two-gpus"),
    pytest.param("GPU-a,NVIDIA,1000,0:;;GPU-a,NVIDIA,500,10:;",
                 ((DeviceGrant("GPU-a", 1000, 0),), (), (DeviceGrant("GPU-a", 500, 10),)),
                 id="empty-container-in-the-middle"),
    pytest.param(";", ((),), id="one-empty-container"),
    pytest.param(";;", ((), ()), id="two-empty-containers"),
    pytest.param("", (), id="no-containers"),
])
def test_pod_devices_encode_and_decode(text: str, grants: PodGrants) -> None:
    assert encode_pod_devices(grants) == text
    assert decode_pod_devices(text) == grants


@pytest.mark.parametrize(("text", "grants"), [
    pytest.param("GPU-a,NVIDIA,2000,30;", ((DeviceGrant("GPU-a", 2000, 30),),), id="device-without-colon"),
    pytest.param(" GPU-a , NVIDIA ,2000, 30 :;", ((DeviceGrant("GPU-a", 2000, 30),),), id="spaces-trimmed"),
    pytest.param("GPU-a,NVIDIA,2000,30,extra:;", ((DeviceGrant("GPU-a", 2000, 30),),), id="extra-fields-ignored"),
])
def test_pod_devices_decoding_tolerates_harmless_variations(text: str, grants: PodGrants) -> None:
    assert decode_pod_devices(text) == grants


@pytest.mark.parametrize(("text", "message"), [
    pytest.param("GPU-a,NVIDIA,2000:;", "container 0 device 0: expected UUID,vendor,memory,cores, got",
                 id="three-fields"),
    pytest.param(";GPU-a,NVIDIA,2000,30:GPU-b:;", "container 1 device 1: expected UUID,vendor,memory,cores",
                 id="one-field-names-second-device"),
    pytest.param("GPU-a,NVIDIA,2k,30:;", "container 0 device 0: memory and cores must be integers",
                 id="non-numeric-memory"),
    pytest.param("GPU-a,NVIDIA,2000,3.5:;", "container 0 device 0: memory and cores must be integers",
                 id="non-numeric-cores"),
    pytest.param("GPU-a,NVIDIA,-1,30:;", "container 0 device 0: negative memory or cores", id="negative-memory"),
    pytest.param(",NVIDIA,2000,30:;", "container 0 device 0: empty UUID", id="empty-uuid"),
    pytest.param("GPU-a,NVIDIA,2000,30:", "container 0: entry does not end with ';'", id="missing-semicolon"),
    pytest.param(";GPU-a,NVIDIA,2000,30:", "container 1: entry does not end with ';'",
                 id="missing-semicolon-second-container"),
])
def test_malformed_pod_devices_are_annotation_errors(text: str, message: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_pod_devices(text)
    assert str(caught.value).startswith(message)
