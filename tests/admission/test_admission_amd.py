"""The webhook's rules for AMD containers (`review_pod`, docs/device-families.md#device-families), from HAMi v2.10's
``pkg/device/amd/device_test.go`` Test_MutateAdmission.

Covers: the count, the memory or the cores in limits route the pod, and nothing is added ("gpu count in limits", "gpu
memory in limits", "core percentage in limits", "accepts partial memory without a core percentage"); a count only in
requests is not ours ("requests only (limits empty) -> false"), nor a container with none ("no resources"); a cores
percentage outside 1..100 beside a count is refused in HAMi's words, not clamped ("rejects zero core percentage",
"rejects core percentage above 100"); the stored pod reviewed again changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from .test_admission_families import container, pod
from .test_admission_families import review_stored as review

COUNT, MEMORY, CORES = "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"


@pytest.mark.parametrize("limits", [
    pytest.param({COUNT: "2"}, id="gpu count in limits"),
    pytest.param({MEMORY: "1024"}, id="gpu memory in limits"),
    pytest.param({CORES: "50"}, id="core percentage in limits"),
    pytest.param({COUNT: "1", MEMORY: "1024"}, id="accepts partial memory without a core percentage"),
])
def test_any_amd_resource_in_limits_routes_the_pod_unchanged(limits: dict[str, str]) -> None:
    allowed, _, stored = review(pod(container(limits=limits)))
    assert allowed and stored["spec"]["schedulerName"] == "hami-scheduler"
    assert stored["spec"]["containers"][0]["resources"]["limits"] == limits


@pytest.mark.parametrize("the_container", [
    pytest.param(container(requests={COUNT: "1"}), id="requests only (limits empty) -> false"),
    pytest.param(container(limits={}), id="no resources"),
])
def test_a_container_without_amd_limits_is_not_ours(the_container: dict[str, Any]) -> None:
    allowed, message, stored = review(pod(the_container))
    assert allowed and message == "pod asks for no GPU" and "schedulerName" not in stored["spec"]


@pytest.mark.parametrize("cores", [pytest.param("0", id="rejects zero core percentage"),
                                   pytest.param("101", id="rejects core percentage above 100")])
def test_a_percentage_outside_1_to_100_beside_a_count_is_refused(cores: str) -> None:
    allowed, message, _ = review(pod(container(limits={COUNT: "1", CORES: cores})))
    assert not allowed
    assert "container c: amd.com/gpucores must be an integer percentage between 1 and 100" in message
