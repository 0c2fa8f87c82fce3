"""What a pod asks for (docs/scheduling-rules.md#what-a-pod-asks-for), read by `container_request` / `pod_request`.

Covers: limits over requests per resource (independently); Kubernetes canonical quantities (``"3k"``);
gpumem vs gpumem-percentage vs ``--default-mem``; 0 counting as unset; cores from the container, else
``--default-cores``, clamped to 100; no count = no GPU; init containers first in spec order; configurable
resource names; the memory a request books on a GPU; malformed values and shapes give `RequestError` naming
the container and the resource.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.requests import ContainerRequest, RequestDefaults, RequestError, container_request, pod_request
from hami_web.settings import ResourceNames

GPU, MEM, PCT, CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"


def container(name: str = "main", limits: dict[str, Any] | None = None,
              requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "resources": resources}


@pytest.mark.parametrize(("limits", "requests", "defaults", "expected"), [
    pytest.param({GPU: "1", MEM: "3k"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_mib=3000), id="canonical-3k-is-3000-mib"),
    pytest.param({GPU: 2}, {GPU: 5}, RequestDefaults(),
                 ContainerRequest("main", False, 2), id="limits-win-over-requests"),
    pytest.param(None, {GPU: "1", MEM: "1024"}, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_mib=1024), id="requests-used-when-no-limits"),
    pytest.param({GPU: "1"}, {MEM: "2k", CORES: "30"}, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_mib=2000, cores=30), id="each-resource-falls-back-alone"),
    pytest.param({GPU: "1", PCT: "30"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_percent=30), id="percentage-only"),
    pytest.param({GPU: "1", MEM: "2000", PCT: "30"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_mib=2000, memory_percent=30), id="mib-and-percentage-kept"),
    pytest.param({GPU: "1"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_percent=100), id="no-memory-means-whole-card"),
    pytest.param({GPU: "1"}, None, RequestDefaults(default_mem_mib=1500),
                 ContainerRequest("main", False, 1, memory_mib=1500), id="no-memory-uses-default-mem"),
    pytest.param({GPU: "1", MEM: "0", PCT: "0"}, None, RequestDefaults(default_mem_mib=1500),
                 ContainerRequest("main", False, 1, memory_mib=1500), id="zero-memory-and-percentage-are-unset"),
    pytest.param({GPU: "1", MEM: "0", PCT: "40"}, None, RequestDefaults(default_mem_mib=1500),
                 ContainerRequest("main", False, 1, memory_percent=40), id="zero-mib-falls-to-percentage"),
    pytest.param({GPU: "1", PCT: "40"}, None, RequestDefaults(default_mem_mib=1500),
                 ContainerRequest("main", False, 1, memory_percent=40), id="percentage-beats-default-mem"),
    pytest.param({GPU: "1"}, None, RequestDefaults(default_cores=25),
                 ContainerRequest("main", False, 1, cores=25), id="no-cores-uses-default-cores"),
    pytest.param({GPU: "1", CORES: "0"}, None, RequestDefaults(default_cores=25),
                 ContainerRequest("main", False, 1, cores=0), id="explicit-zero-cores-kept"),
    pytest.param({GPU: "1", CORES: "150"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 1, cores=100), id="cores-clamped-to-100"),
    pytest.param({GPU: "1"}, None, RequestDefaults(default_cores=300),
                 ContainerRequest("main", False, 1, cores=100), id="default-cores-clamped-to-100"),
    pytest.param({MEM: "3k", CORES: "30"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 0), id="no-count-asks-for-nothing"),
    pytest.param({GPU: "0", MEM: "3k"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 0), id="zero-count-asks-for-nothing"),
    pytest.param({GPU: "1", MEM: "1Ki"}, None, RequestDefaults(),
                 ContainerRequest("main", False, 1, memory_mib=1024), id="binary-suffix-quantity"),
    pytest.param({"example.com/vgpu": "2", "example.com/vmem": "4k"}, None,
                 RequestDefaults(resources=ResourceNames(count="example.com/vgpu", memory="example.com/vmem")),
                 ContainerRequest("main", False, 2, memory_mib=4000), id="configured-resource-names"),
])
def test_container_request_reads_resources(limits: dict[str, Any] | None, requests: dict[str, Any] | None,
                                           defaults: RequestDefaults, expected: ContainerRequest) -> None:
    assert container_request(container(limits=limits, requests=requests), init=False, defaults=defaults) == expected


@pytest.mark.parametrize(("request_", "total_mib", "booked"), [
    pytest.param(ContainerRequest("c", False, 1, memory_mib=3000, memory_percent=30), 46068, 3000, id="mib-wins"),
    pytest.param(ContainerRequest("c", False, 1, memory_percent=30), 46068, 13820, id="percentage-rounds-down"),
    pytest.param(ContainerRequest("c", False, 1), 8000, 8000, id="whole-card"),
])
def test_booked_memory_on_a_gpu(request_: ContainerRequest, total_mib: int, booked: int) -> None:
    assert request_.booked_memory_mib(total_mib) == booked


def test_pod_request_lists_init_containers_first_in_spec_order() -> None:
    spec = {"initContainers": [container("init-a", {GPU: "1"}), container("init-b")],
            "containers": [container("app", {GPU: "2"}), container("sidecar")]}
    request = pod_request({"spec": spec}, RequestDefaults())
    assert [(c.name, c.init, c.count) for c in request.containers] == [
        ("init-a", True, 1), ("init-b", True, 0), ("app", False, 2), ("sidecar", False, 0)]
    assert request.init_count == 2
    assert request.asks_for_gpu


def test_pod_without_gpu_containers_asks_for_no_gpu() -> None:
    request = pod_request({"spec": {"containers": [container("app", {"cpu": "1"})]}}, RequestDefaults())
    assert not request.asks_for_gpu
    assert request.init_count == 0


@pytest.mark.parametrize(("limits", "message"), [
    pytest.param({GPU: "1.5"}, f"container main: {GPU}: '1.5' is not a whole number", id="fractional-count"),
    pytest.param({GPU: "100m"}, f"container main: {GPU}: '100m' is not a whole number", id="milli-count"),
    pytest.param({GPU: "abc"}, f"container main: {GPU}: 'abc' is not a quantity", id="garbage-count"),
    pytest.param({GPU: "-1"}, f"container main: {GPU}: '-1' must not be negative", id="negative-count"),
    pytest.param({GPU: True}, f"container main: {GPU}: True is not a quantity", id="boolean-count"),
    pytest.param({GPU: "1", MEM: "1.5k0"}, f"container main: {MEM}:", id="garbage-memory"),
    pytest.param({GPU: "1", MEM: "-3k"}, f"container main: {MEM}: '-3k' must not be negative", id="negative-memory"),
    pytest.param({GPU: "1", PCT: "101"}, f"container main: {PCT} 101 is over 100", id="percentage-over-100"),
    pytest.param({GPU: "1", CORES: "0.5"}, f"container main: {CORES}: '0.5' is not a whole number",
                 id="fractional-cores"),
])
def test_malformed_quantity_names_container_and_resource(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError) as caught:
        container_request(container(limits=limits), init=False, defaults=RequestDefaults())
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(("pod", "message"), [
    pytest.param({}, "pod has no spec", id="no-spec"),
    pytest.param({"spec": {"containers": {"name": "a"}}}, "spec.containers is not a list", id="containers-not-list"),
    pytest.param({"spec": {"initContainers": ["x"]}}, "spec.initContainers[0] is not an object",
                 id="container-not-object"),
    pytest.param({"spec": {"containers": [{"name": "a", "resources": ["x"]}]}}, "container a: resources is not a map",
                 id="resources-not-map"),
    pytest.param({"spec": {"containers": [{"name": "a", "resources": {"limits": ["x"]}}]}},
                 "container a: resources.limits is not a map", id="limits-not-map"),
])
def test_malformed_pod_shape_is_a_request_error(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError, match=f"^{message.replace('[', '.').replace(']', '.')}$"):
        pod_request(pod, RequestDefaults())
