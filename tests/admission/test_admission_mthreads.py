"""The webhook's rules for Moore Threads containers (`review_pod`, docs/device-families.md#device-families), from HAMi
v2.10's ``pkg/device/mthreads/device_test.go`` Test_MutateAdmission.

Covers: a count in limits or only in requests routes the pod ("count over one requested without limits", "count one
requested without limits"); a count above 1 writes whole cards (16 cores and 96 memory units a card) and
``mthreads.com/request-gpu-num`` on the pod ("set to resources limit", "count over one without pod annotations"); one
device without memory becomes a whole card ("don't set to memory limit"); one device with a legal memory size is left
alone ("count less than one"), an illegal one refused in HAMi's words ("memory no exist legalMemoryslices"); a count of
0 or less refused ("count set to zero is rejected", "count set to negative is rejected", "request-only count set to zero
is rejected"); memory and cores without a count are not ours ("don't set to count limit"); the stored pod reviewed again
changes nothing.
"""

from __future__ import annotations

import pytest

from .test_admission_families import container, pod
from .test_admission_families import review_stored as review

COUNT, MEMORY, CORES = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"


@pytest.mark.parametrize(("limits", "requests", "written", "annotation"), [
    pytest.param({COUNT: "2", MEMORY: "2", CORES: "1"}, None, {COUNT: "2", MEMORY: "192", CORES: "32"}, "2",
                 id="set-to-resources-limit"),
    pytest.param({COUNT: "2"}, None, {COUNT: "2", MEMORY: "192", CORES: "32"}, "2",
                 id="count-over-one-without-pod-annotations"),
    pytest.param(None, {COUNT: "2"}, {MEMORY: "192", CORES: "32"}, "2", id="count-over-one-requested-without-limits"),
    pytest.param(None, {COUNT: "1"}, {MEMORY: "96", CORES: "16"}, None, id="count-one-requested-without-limits"),
    pytest.param({COUNT: "1", CORES: "1"}, None, {COUNT: "1", MEMORY: "96", CORES: "16"}, None,
                 id="dont-set-to-memory-limit"),
    pytest.param({COUNT: "1", MEMORY: "2", CORES: "1"}, None, {COUNT: "1", MEMORY: "2", CORES: "1"}, None,
                 id="count-less-than-one"),
])
def test_mthreads_containers_are_routed_and_rewritten_as_hami_does(
        limits: dict[str, str] | None, requests: dict[str, str] | None, written: dict[str, str],
        annotation: str | None) -> None:
    allowed, _, stored = review(pod(container(limits=limits, requests=requests)))
    assert allowed and stored["spec"]["schedulerName"] == "hami-scheduler"
    assert stored["spec"]["containers"][0]["resources"]["limits"] == written
    annotations = stored["metadata"].get("annotations") or {}
    assert annotations.get("mthreads.com/request-gpu-num") == annotation


@pytest.mark.parametrize(("limits", "requests", "words"), [
    pytest.param({COUNT: "1", MEMORY: "3", CORES: "1"}, None,
                 "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]",
                 id="memory-no-exist-legalMemoryslices"),
    pytest.param({COUNT: "0", MEMORY: "2", CORES: "1"}, None, "mthreads.com/vgpu must be greater than 0",
                 id="count-set-to-zero-is-rejected"),
    pytest.param({COUNT: "-1", MEMORY: "2", CORES: "1"}, None, "mthreads.com/vgpu", id="count-set-to-negative"),
    pytest.param(None, {COUNT: "0", MEMORY: "2", CORES: "1"}, "mthreads.com/vgpu must be greater than 0",
                 id="request-only-count-set-to-zero-is-rejected"),
])
def test_mthreads_refusals_name_the_container_in_hamis_words(limits: dict[str, str] | None,
                                                             requests: dict[str, str] | None, words: str) -> None:
    allowed, message, _ = review(pod(container(limits=limits, requests=requests)))
    assert not allowed and words in message and "container c" in message


def test_memory_and_cores_without_a_count_are_not_ours() -> None:
    """Test_MutateAdmission "don't set to count limit"."""
    allowed, message, stored = review(pod(container(limits={MEMORY: "2", CORES: "1"})))
    assert allowed and message == "pod asks for no GPU" and "schedulerName" not in stored["spec"]
