"""The webhook's rules for Ascend NPU containers (`review_pod`, docs/device-families.md#ascend-npus), with Ascend
enabled.

Covers, from HAMi's ``Test_MutateAdmission*`` tables and our own: every chip's memory rounded up to its smallest
template, the whole-NPU fallback (memoryAllocatable when within memoryCapacity), memory beyond capacity refused, no
memory = the whole NPU, soft split (``huawei.com/vnpu-mode: hami-core``) keeping the memory as asked; the rounded
memory written to limits and requests (requests created when absent); ``-core`` refused outside soft split (0 is
fine); several NPUs with a partial template refused unless soft split; 910C: 1 → 2 in limits (and requests when
there), odd counts refused, even counts kept; a count only in requests not routing the pod; the runtimeClassName of
the config set when the pod names none; overwriteEnv giving ``ASCEND_VISIBLE_DEVICES=`` once to a container using no
NPU and never to one using a chip; every refusal an AdmissionReview denial with code 400 in HAMi's words; reviewing
the patched pod again yielding no patch; the extender reading the patched pod as the rounded request; nothing while
Ascend is off.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from hami_web.admission import AdmissionDecision, review_pod
from hami_web.core.families import parse_device_config
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.settings import Settings

from .test_admission_families import container

SETTINGS = Settings.of(enable_ascend=True)
HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None,
        runtime_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(original: dict[str, Any], settings: Settings = SETTINGS) -> tuple[AdmissionDecision, dict[str, Any]]:
    """The decision and the pod kube-apiserver would store; the stored pod reviewed again changes nothing."""
    decision = review_pod(original, settings.admission)
    stored: dict[str, Any] = jsonpatch.apply_patch(original, decision.patch) if decision.allowed else original
    if decision.allowed:
        assert review_pod(stored, settings.admission).patch == []
    return decision, stored


def resources(stored: dict[str, Any], position: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = stored["spec"]["containers"][position].get("resources") or {}
    return result


# --- memory -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cw", "memory", "written"), [
    ("Ascend910A", "2000", "2184"), ("Ascend910A", "8738", "8738"), ("Ascend910A", "8739", "17476"),
    ("Ascend910A", "20000", "32768"),  # HAMi Test_MutateAdmission: beyond the templates, within capacity
    ("Ascend910B2", "1", "8192"), ("Ascend910B2", "16385", "32768"), ("Ascend910B2", "40000", "65536"),
    ("Ascend910B3", "10000", "16384"), ("Ascend910B3", "20000", "32768"), ("Ascend910B3", "65536", "65536"),
    ("Ascend910B4-1", "10000", "16384"), ("Ascend910B4", "10000", "16384"), ("Ascend910B4", "20000", "32768"),
    ("Ascend310P", "3000", "3072"), ("Ascend310P", "12288", "12288"), ("Ascend310P", "13000", "21527"),
    ("Ascend310P", "24576", "21527"), ("Ascend910C", "16384", "16384"), ("Ascend910C", "60000", "65536"),
])
def test_memory_is_rounded_up_and_written_to_limits_and_requests(cw: str, memory: str, written: str) -> None:
    decision, stored = review(pod(container(limits={f"huawei.com/{cw}": "1",
                                                    f"huawei.com/{cw}-memory": memory})))
    assert decision.allowed, decision.message
    assert resources(stored)["limits"][f"huawei.com/{cw}-memory"] == written
    assert resources(stored)["requests"] == {f"huawei.com/{cw}-memory": written}
    assert stored["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize(("cw", "whole"), [("Ascend910A", "32768"), ("Ascend910B3", "65536"),
                                           ("Ascend910B4", "32768"), ("Ascend310P", "21527")])
def test_no_memory_asks_for_the_whole_npu(cw: str, whole: str) -> None:
    decision, stored = review(pod(container(limits={f"huawei.com/{cw}": "2"})))
    assert decision.allowed
    assert resources(stored)["limits"] == {f"huawei.com/{cw}": "2", f"huawei.com/{cw}-memory": whole}
    assert resources(stored)["requests"] == {f"huawei.com/{cw}-memory": whole}


@pytest.mark.parametrize(("cw", "memory"), [("Ascend910A", "40000"), ("Ascend910B3", "65537"),
                                            ("Ascend310P", "24577")])
def test_memory_beyond_capacity_is_refused(cw: str, memory: str) -> None:
    decision, _ = review(pod(container(limits={f"huawei.com/{cw}": "1", f"huawei.com/{cw}-memory": memory})))
    assert (decision.allowed, decision.code) == (False, 400)
    assert decision.message == f"container c: huawei.com/{cw}-memory {memory} is invalid"
    assert decision.patch == []


def test_memory_only_in_requests_is_replaced_by_the_whole_npu() -> None:
    """HAMi reads the memory from limits only, and writes the result to both."""
    decision, stored = review(pod(container(limits={"huawei.com/Ascend910B3": "1"},
                                            requests={"huawei.com/Ascend910B3-memory": "16384"})))
    assert decision.allowed
    assert resources(stored)["requests"]["huawei.com/Ascend910B3-memory"] == "65536"


def test_soft_split_keeps_the_memory_and_cores_asked() -> None:
    """HAMi Test_MutateAdmission_VNPUCoreMode "vNPU-mode hami-core: keep raw memory"."""
    limits = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "15360",
              "huawei.com/Ascend910B3-core": "20"}
    decision, stored = review(pod(container(limits=limits, requests=limits), annotations=HAMI_CORE))
    assert decision.allowed
    assert resources(stored)["limits"] == limits
    unannotated, hard = review(pod(container(limits={"huawei.com/Ascend910B3": "1",
                                                     "huawei.com/Ascend910B3-memory": "15360"})))
    assert unannotated.allowed
    assert resources(hard)["limits"]["huawei.com/Ascend910B3-memory"] == "16384"


def test_soft_split_memory_beyond_capacity_is_not_rounded_nor_refused_here() -> None:
    """HAMi keeps a hami-core ask as it is; the filter finds no NPU with that much memory."""
    decision, stored = review(pod(container(limits={"huawei.com/Ascend910B3": "1",
                                                    "huawei.com/Ascend910B3-memory": "70000"}),
                                  annotations=HAMI_CORE))
    assert decision.allowed
    assert resources(stored)["requests"]["huawei.com/Ascend910B3-memory"] == "70000"


# --- cores, counts, 910C ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("core", "annotations", "allowed"), [
    # HAMi v2.10.0 pkg/device/ascend/device_test.go: Test_MutateAdmission_HardSplitCoreRejected.
    pytest.param("10", {}, False, id="hami-hard-split-with-core-is-rejected"),
    pytest.param("25", {}, False, id="hami-hard-split-with-core-over-physical-is-rejected"),
    pytest.param("0", {}, True, id="hami-hard-split-with-core-0-is-allowed"),
    pytest.param(None, {}, True, id="hami-hard-split-without-core-is-allowed"),
    pytest.param("10", HAMI_CORE, True, id="hami-soft-split-with-core-is-allowed"),
    pytest.param("10", {"huawei.com/vnpu-mode": "hami-core "}, False, id="the-mode-must-be-exact"),
])
def test_cores_only_in_soft_split(core: str | None, annotations: dict[str, str], allowed: bool) -> None:
    limits = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "8738"}
    requests = dict(limits)
    if core is not None:
        limits["huawei.com/Ascend910B3-core"] = requests["huawei.com/Ascend910B3-core"] = core
    decision, _ = review(pod(container(limits=limits, requests=requests), annotations=annotations))
    assert decision.allowed is allowed
    if not allowed:
        assert decision.code == 400
        assert decision.message == ("container c: huawei.com/Ascend910B3-core is only supported in hami-core "
                                    "(soft split) mode")


def test_cores_in_requests_only_are_refused_too() -> None:
    decision, _ = review(pod(container(limits={"huawei.com/Ascend910B3": "1"},
                                       requests={"huawei.com/Ascend910B3-core": "5"})))
    assert not decision.allowed and "only supported in hami-core" in decision.message


@pytest.mark.parametrize(("memory", "annotations", "allowed"), [
    pytest.param("16384", {}, False, id="partial-template-on-two-npus"),
    pytest.param("65536", {}, True, id="whole-npus"),
    pytest.param(None, {}, True, id="no-memory-is-whole-npus"),
    pytest.param("40000", {}, True, id="rounded-to-the-whole-npu"),
    pytest.param("16384", HAMI_CORE, True, id="soft-split-shares-any-amount"),
])
def test_several_npus_need_whole_npus_unless_soft_split(memory: str | None, annotations: dict[str, str],
                                                        allowed: bool) -> None:
    limits = {"huawei.com/Ascend910B3": "2"}
    if memory is not None:
        limits["huawei.com/Ascend910B3-memory"] = memory
    decision, _ = review(pod(container(limits=limits), annotations=annotations))
    assert decision.allowed is allowed
    if not allowed:
        assert (decision.code, decision.message) == (400, "container c: vNPU not supported for multiple devices")


@pytest.mark.parametrize(("limits", "requests", "written_limit", "written_request", "refusal"), [
    # HAMi v2.10.0 pkg/device/ascend/device_test.go: Test_MutateAdmission910C.
    pytest.param("1", "1", "2", "2", "", id="hami-1-becomes-2"),
    pytest.param("3", "3", None, None, "container c: Ascend910C device request must be 1 or 2*n, got 3",
                 id="hami-3-is-refused"),
    pytest.param("4", "4", "4", "4", "", id="hami-4-is-kept"),
    pytest.param("1", None, "2", None, "", id="requests-left-alone-when-absent"),
    pytest.param("5", None, None, None, "container c: Ascend910C device request must be 1 or 2*n, got 5",
                 id="5-is-refused"),
])
def test_910c_module_pairs(limits: str, requests: str | None, written_limit: str | None,
                           written_request: str | None, refusal: str) -> None:
    decision, stored = review(pod(container(limits={"huawei.com/Ascend910C": limits},
                                            requests={"huawei.com/Ascend910C": requests} if requests else None)))
    if refusal:
        assert (decision.allowed, decision.code, decision.message) == (False, 400, refusal)
        return
    assert decision.allowed
    assert resources(stored)["limits"]["huawei.com/Ascend910C"] == written_limit
    assert resources(stored)["requests"].get("huawei.com/Ascend910C") == written_request


def test_910c_without_super_pod_keeps_odd_counts() -> None:
    """HAMi Test_MutateAdmission910C_VNPUSplit: a config without superPod neither pairs nor refuses."""
    settings = Settings.of(enable_ascend=True, device_config=parse_device_config(
        {"vnpus": {"configs": [{"commonWord": "Ascend910C", "superPod": False}]}}))
    decision, stored = review(pod(container(limits={"huawei.com/Ascend910C": "1",
                                                    "huawei.com/Ascend910C-memory": "16384"})), settings)
    assert decision.allowed
    assert resources(stored)["limits"] == {"huawei.com/Ascend910C": "1", "huawei.com/Ascend910C-memory": "16384"}
    decision, _ = review(pod(container(limits={"huawei.com/Ascend910C": "3"})), settings)
    assert decision.allowed


def test_910c_one_npu_with_a_template_is_paired_not_refused() -> None:
    """HAMi judges "several NPUs" on the count as asked (1), before its own 1 → 2."""
    decision, stored = review(pod(container(limits={"huawei.com/Ascend910C": "1",
                                                    "huawei.com/Ascend910C-memory": "16384"})))
    assert decision.allowed
    assert resources(stored)["limits"] == {"huawei.com/Ascend910C": "2", "huawei.com/Ascend910C-memory": "16384"}


def test_a_count_only_in_requests_does_not_route_the_pod() -> None:
    decision, stored = review(pod(container(requests={"huawei.com/Ascend910B3": "1"})))
    assert decision.allowed and decision.message == "pod asks for no GPU"
    assert "schedulerName" not in stored["spec"]


def test_nothing_happens_while_ascend_is_off() -> None:
    original = pod(container(limits={"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}))
    decision = review_pod(original, Settings().admission)
    assert decision.allowed and decision.patch == []


# --- runtimeClassName and overwriteEnv ----------------------------------------------------------------------------

CONFIGURED = Settings.of(enable_ascend=True, device_config=parse_device_config({"vnpus": {"configs": [
    {"commonWord": "Ascend910B3", "runtimeClassName": "ascend", "overwriteEnv": True},
    {"commonWord": "Ascend310P", "overwriteEnv": True}]}}))


def test_the_configured_runtime_class_is_set_when_the_pod_names_none() -> None:
    asking = container(limits={"huawei.com/Ascend910B3": "1"})
    decision, stored = review(pod(asking), CONFIGURED)
    assert decision.allowed and stored["spec"]["runtimeClassName"] == "ascend"
    _, kept = review(pod(asking, runtime_class="kata"), CONFIGURED)
    assert kept["spec"]["runtimeClassName"] == "kata"
    _, other_chip = review(pod(container(limits={"huawei.com/Ascend310P": "1"})), CONFIGURED)
    assert "runtimeClassName" not in other_chip["spec"]


def test_overwrite_env_blanks_ascend_visible_devices_once_for_containers_without_npus() -> None:
    original = pod(container("npu", limits={"huawei.com/Ascend910B3": "1"}), container("sidecar"),
                   container("nvidia", limits={"nvidia.com/gpu": "1"}))
    decision, stored = review(original, CONFIGURED)
    assert decision.allowed
    npu, sidecar, gpu = stored["spec"]["containers"]
    assert "env" not in npu  # it uses Ascend910B3; the Ascend310P rule must not blank it
    assert sidecar["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]
    assert gpu["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]


# --- what the extender reads of the patched pod -------------------------------------------------------------------

def test_the_extender_reads_the_rounded_request() -> None:
    _, stored = review(pod(container(limits={"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}),
                           container("second", limits={"huawei.com/Ascend310P": "1"})))
    request = pod_request(stored, RequestDefaults.of(SETTINGS.devices))
    asked = {(c.family, c.name): (c.count, c.memory_mib, c.cores) for c in request.containers if c.count}
    assert asked == {("Ascend310P", "second"): (1, 21527, 0), ("Ascend910B3", "c"): (1, 16384, 0)}
