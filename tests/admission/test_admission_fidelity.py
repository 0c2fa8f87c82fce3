"""The webhook where it used to part from HAMi v2.10 (docs/webhook-and-extender.md#the-admission-webhook-post-webhook):
a pod HAMi admits is admitted, with warnings where we are stricter.

Covers, one table per row of the issue, each citing the HAMi function it follows: the device config's
``nvidia.runtimeClassName`` and ``nvidia.gpuCorePolicy`` (``MutateAdmission`` in ``pkg/device/nvidia/device.go``; an
unknown policy written as HAMi writes it, with a warning); ``gpucores`` over 100 clamped to 100 in every family with a
warning (each family's ``Fit``: "core limit can't exceed 100"); ``hami.io/device-scoring-weights`` over 1,000,000
accepted (``ParseDeviceScoringWeights``: any int64); ``nvidia.com/numa-bind`` read as Go's ``strconv.ParseBool``
(``assertNuma``), a value it cannot read ignored with a warning; and the envelope: the review's ``warnings`` carry them.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import pytest

from hami_web.admission import review_admission, review_pod
from hami_web.core import names
from hami_web.core.families import DEFAULT_CATALOG, NVIDIA, parse_device_config
from hami_web.core.options import family_selection
from hami_web.settings import Settings

GPU = "nvidia.com/gpu"
CORES = "nvidia.com/gpucores"
POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"


def _pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None,
         runtime_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _container(name: str = "c") -> dict[str, Any]:
    return {"name": name, "image": "busybox"}


def _gpu(name: str = "c", count: str = "1", **extra: str) -> dict[str, Any]:
    built = _container(name)
    built["resources"] = {"limits": {GPU: count, **extra}}
    return built


def _gpu_limits(limits: dict[str, str]) -> dict[str, Any]:
    container = _container()
    container["resources"] = {"limits": dict(limits)}
    return container


def _settings(**nvidia: object) -> Settings:
    return Settings.of(device_config=parse_device_config({"nvidia": nvidia}))


def _patched(pod: dict[str, Any], settings: Settings) -> tuple[dict[str, Any], tuple[str, ...]]:
    decision = review_pod(pod, settings.admission)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(pod, decision.patch), decision.warnings


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {variable["name"]: variable.get("value", "") for variable in container.get("env") or []}


# --- nvidia.runtimeClassName (HAMi v2.10 NvidiaGPUDevices.MutateAdmission: set when the pod names none) -----

@pytest.mark.parametrize(("pod", "expected"), [
    pytest.param(_pod(_gpu()), "nvidia", id="gpu-pod-naming-none-gets-it"),
    pytest.param(_pod(_gpu(), runtime_class="kata"), "kata", id="a-class-the-pod-names-is-kept"),
    pytest.param(_pod(_container()), None, id="pod-without-gpu-is-left-alone"),
    pytest.param(_pod(_gpu_limits({"nvidia.com/gpumem": "1000"})), "nvidia",
                 id="gpumem-alone-is-a-gpu-pod-by-default-count"),
])
def test_runtime_class_of_the_device_config(pod: dict[str, Any], expected: str | None) -> None:
    patched, _ = _patched(pod, _settings(runtimeClassName="nvidia"))
    assert patched["spec"].get("runtimeClassName") == expected


# --- nvidia.gpuCorePolicy (same function: GPU_CORE_UTILIZATION_POLICY in every container it sees) -----------

@pytest.mark.parametrize(("policy", "expected", "warned"), [
    pytest.param("force", "force", False, id="force"),
    pytest.param("disable", "disable", False, id="disable"),
    pytest.param("default", None, False, id="default-writes-nothing"),
    pytest.param("", None, False, id="empty-writes-nothing"),
    pytest.param("strict", "strict", True, id="unknown-written-as-hami-does-and-warned"),
])
def test_core_policy_goes_into_every_container(policy: str, expected: str | None, warned: bool) -> None:
    pod = _pod(_gpu("gpu"), _container("sidecar"))
    patched, warnings = _patched(pod, _settings(gpuCorePolicy=policy))
    assert [_env(c).get(POLICY_ENV) for c in patched["spec"]["containers"]] == [expected, expected]
    assert [w for w in warnings if "gpuCorePolicy" in w] == ([
        f"nvidia.gpuCorePolicy 'strict' of the device config is none of default, force, disable: "
        f"{POLICY_ENV}=strict is set as HAMi v2.10 sets it, and HAMi-core runs with its default policy"]
        if warned else [])


def test_core_policy_replaces_the_containers_own_value() -> None:
    """HAMi appends its entry after the container's, so its value is the one that counts; we write it in place."""
    container = _gpu()
    container["env"] = [{"name": POLICY_ENV, "value": "disable"}]
    patched, _ = _patched(_pod(container), _settings(gpuCorePolicy="force"))
    assert patched["spec"]["containers"][0]["env"] == [{"name": POLICY_ENV, "value": "force"}]


def test_a_privileged_container_is_not_given_the_policy() -> None:
    """Privileged containers are never changed (README: they are device plugins and exporters)."""
    privileged = _container("exporter")
    privileged["securityContext"] = {"privileged": True}
    patched, _ = _patched(_pod(privileged), _settings(gpuCorePolicy="force"))
    assert "env" not in patched["spec"]["containers"][0]


def test_device_config_round_trips_both_keys() -> None:
    from hami_web.core.families import config_document

    config = parse_device_config({"nvidia": {"runtimeClassName": "nvidia", "gpuCorePolicy": "force"}})
    assert config_document(config)["nvidia"] == {"runtimeClassName": "nvidia", "gpuCorePolicy": "force"}


# --- gpucores over 100: clamped to 100, as every HAMi v2.10 family's Fit does ("core limit can't exceed 100") ---
# (pkg/device/nvidia/device_test.go TestDevices_Fit "fit success: but core limit can't exceed 100")

@pytest.mark.parametrize(("limits", "resource", "settings"), [
    pytest.param({GPU: "1", CORES: "150"}, CORES, Settings(), id="nvidia"),
    pytest.param({"hygon.com/dcunum": "1", "hygon.com/dcucores": "101"}, "hygon.com/dcucores", Settings(), id="dcu"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vCore": "150"}, "iluvatar.ai/MR-V100.vCore",
                 Settings.of(enable_iluvatar=True), id="iluvatar-one-card"),
    pytest.param({"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vcore": "300"}, "cambricon.com/mlu.smlu.vcore",
                 Settings(), id="mlu"),
])
def test_cores_over_100_are_clamped_with_a_warning(limits: dict[str, str], resource: str,
                                                   settings: Settings) -> None:
    container = _container()
    container["resources"] = {"limits": dict(limits), "requests": {resource: limits[resource]}}
    patched, warnings = _patched(_pod(container), settings)
    resources = patched["spec"]["containers"][0]["resources"]
    assert (resources["limits"][resource], resources["requests"][resource]) == ("100", "100")
    assert warnings == (f"container c: {resource} {limits[resource]} is over 100 (100 = one whole device): set to 100, "
                        "as HAMi v2.10's filter clamps it",)


def test_several_iluvatar_cards_still_take_100_each() -> None:
    """HAMi v2.10 IluvatarDevices.MutateAdmission: a count above 1 rewrites the cores to 100 × count, no warning."""
    limits = {"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "150"}
    patched, warnings = _patched(_pod(_gpu_limits(limits)), Settings.of(enable_iluvatar=True))
    assert patched["spec"]["containers"][0]["resources"]["limits"]["iluvatar.ai/MR-V100.vCore"] == "200"
    assert warnings == ()


# --- device-scoring-weights: any int64 >= 0 (HAMi v2.10 ParseDeviceScoringWeights: strconv.ParseInt(v, 10, 64)) -------

@pytest.mark.parametrize("weights", [
    pytest.param("slot=1000001,core=1,memory=1", id="over-a-million"),
    pytest.param("slot=9223372036854775807,core=0,memory=0", id="int64-max"),
    pytest.param("slot=+3,core=1,memory=1", id="plus-sign-as-go-reads-it"),
])
def test_large_scoring_weights_are_admitted(weights: str) -> None:
    decision = review_pod(_pod(_gpu(), annotations={names.POD_SCORING_WEIGHTS: weights}), Settings().admission)
    assert (decision.allowed, decision.warnings) == (True, ())


# --- nvidia.com/numa-bind: Go's strconv.ParseBool (HAMi v2.10 assertNuma; TestAssertNuma "NumaBind invalid value") --

@pytest.mark.parametrize(("value", "bound"), [
    *(pytest.param(value, True, id=f"true-{value}") for value in ("1", "t", "T", "TRUE", "true", "True")),
    *(pytest.param(value, False, id=f"false-{value}") for value in ("0", "f", "F", "FALSE", "false", "False")),
    pytest.param("tRUE", False, id="mixed-case-is-an-error-so-false"),
    pytest.param(" true", False, id="spaces-are-not-trimmed"),
    pytest.param("yes", False, id="yes-is-an-error-so-false"),
])
def test_numa_bind_reads_as_go_parse_bool(value: str, bound: bool) -> None:
    selection = family_selection({names.POD_NUMA_BIND: value}, DEFAULT_CATALOG[NVIDIA])
    assert selection.numa_bind is bound


@pytest.mark.parametrize(("value", "warned"), [
    pytest.param("1", False, id="one"),
    pytest.param("False", False, id="false"),
    pytest.param("yes", True, id="yes"),
])
def test_a_numa_bind_go_cannot_read_is_warned_about(value: str, warned: bool) -> None:
    _, warnings = _patched(_pod(_gpu(), annotations={names.POD_NUMA_BIND: value}), Settings())
    assert warnings == ((f"nvidia.com/numa-bind '{value}' is not a boolean (true, 1, t, false, 0, f, …): no NUMA "
                         "binding, as HAMi v2.10 reads it",) if warned else ())


# --- the envelope --------------------------------------------------------------------------------------------------

def _review(pod: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                        "namespace": "default", "object": pod, "dryRun": dry_run}}


def test_the_review_carries_the_warnings_and_the_patch() -> None:
    answer = review_admission(_review(_pod(_gpu(**{CORES: "150"}))), Settings().admission)
    response = answer.body["response"]
    assert response["allowed"] is True
    assert response["warnings"] == ["container c: nvidia.com/gpucores 150 is over 100 (100 = one whole device): set to "
                                    "100, as HAMi v2.10's filter clamps it"]
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "replace", "path": f"/spec/containers/0/resources/limits/{CORES.replace('/', '~1')}",
            "value": "100"} in patch
    assert (answer.namespace, answer.name, answer.dry_run) == ("default", "p", False)


def test_a_review_without_warnings_has_no_warnings_key() -> None:
    answer = review_admission(_review(_pod(_gpu())), Settings().admission)
    assert "warnings" not in answer.body["response"]


# --- a count of 0: routed to us with HAMi's additions (each family's MutateAdmission: the count key is there) ---------

@pytest.mark.parametrize(("limits", "settings", "added"), [
    # NvidiaGPUDevices.MutateAdmission: mutateContainerResource true; defaultExclusiveCoreIfNeeded adds 100 cores.
    pytest.param({GPU: "0"}, Settings(), {CORES: "100"}, id="nvidia-gets-exclusive-cores"),
    pytest.param({GPU: "0", "nvidia.com/gpumem": "3000"}, Settings(), {}, id="nvidia-with-gpumem-gets-nothing"),
    # DCUDevices.MutateAdmission / CambriconDevices.MutateAdmission: routed, nothing added (hygon device_test.go
    # Test_MutateAdmission "set to resource limits": the key in limits is what routes).
    pytest.param({"hygon.com/dcunum": "0"}, Settings(), {}, id="dcu"),
    pytest.param({"cambricon.com/vmlu": "0"}, Settings(), {}, id="mlu"),
    # ascend Devices.MutateAdmission: the whole NPU's memory written in limits (and requests).
    pytest.param({"huawei.com/Ascend910B3": "0"}, Settings.of(enable_ascend=True),
                 {"huawei.com/Ascend910B3-memory": "65536"}, id="ascend-gets-the-whole-npu-memory"),
])
def test_a_count_of_zero_is_routed_with_the_family_additions(limits: dict[str, str], settings: Settings,
                                                             added: dict[str, str]) -> None:
    patched, _ = _patched(_pod(_gpu_limits(limits)), settings)
    assert patched["spec"]["schedulerName"] == "hami-scheduler"
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {**limits, **added}


def test_a_count_of_zero_takes_the_runtime_class() -> None:
    patched, _ = _patched(_pod(_gpu(count="0")), _settings(runtimeClassName="nvidia"))
    assert patched["spec"]["runtimeClassName"] == "nvidia"


# --- an unknown policy: placed as HAMi v2.10 reads it (DeviceUsageList.Less: spread; NodeScoreList.Less: binpack) --

@pytest.mark.parametrize(("annotations", "warning"), [
    pytest.param({names.POD_GPU_POLICY: "best"}, 'unknown hami.io/gpu-scheduler-policy "best" (expected binpack, '
                 'spread or topology-aware): read as "spread", as HAMi v2.10 reads it', id="gpu"),
    pytest.param({names.POD_NODE_POLICY: "binpak"}, 'unknown hami.io/node-scheduler-policy "binpak" (expected binpack '
                 'or spread): read as "binpack", as HAMi v2.10 reads it', id="node"),
    pytest.param({names.POD_GPU_POLICY: "binpack,numa", names.POD_NODE_POLICY: "spread"}, None, id="known"),
])
def test_an_unknown_policy_is_admitted_with_a_warning(annotations: dict[str, str], warning: str | None) -> None:
    _, warnings = _patched(_pod(_gpu(), annotations=annotations), Settings())
    assert warnings == ((warning,) if warning else ())
