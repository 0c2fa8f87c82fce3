"""The admission rules over one pod (`review_pod`, docs/scheduling-rules.md#admission-in-order), without HTTP.

Covers: every denial message (no containers, privileged init/regular containers, node assigned,
invalid values naming container and resource, pods that are not pod-shaped); the other-scheduler pass;
count defaulting from gpumem / gpumem-percentage / gpucores; the exclusive-card ``gpucores: 100``
default and each case where it is not added; the priority env; ``--overwrite-env``; configurable
resource names; ``--privileged-policy`` deny vs skip; that the returned patch, applied with
`jsonpatch`, gives the expected pod; and, as hypothesis properties over generated pods, that a
denied pod has no patch and that the patched pod reviewed again yields no patch.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from hami_web.admission import AdmissionDecision, review_pod
from hami_web.settings import ResourceNames, Settings

GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
PRIORITY = "nvidia.com/priority"

HAMI_NAMES = ResourceNames(count="hami.io/gpu", memory="hami.io/gpumem",
                           memory_percentage="hami.io/gpumem-percentage", cores="hami.io/gpucores",
                           priority="hami.io/priority")


def container(name: str = "c", *, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
              env: list[dict[str, Any]] | None = None, privileged: bool | None = None) -> dict[str, Any]:
    """A container as the API server sends it (only the fields the webhook reads)."""
    built: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits is not None or requests is not None:
        built["resources"] = {}
        if limits is not None:
            built["resources"]["limits"] = limits
        if requests is not None:
            built["resources"]["requests"] = requests
    if env is not None:
        built["env"] = env
    if privileged is not None:
        built["securityContext"] = {"privileged": privileged}
    return built


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
        scheduler: str | None = "default-scheduler", node: str | None = None) -> dict[str, Any]:
    """A pod object; ``containers=()`` gives an empty list."""
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def patched(original: dict[str, Any], decision: AdmissionDecision) -> dict[str, Any]:
    """The pod kube-apiserver would store after applying the decision's patch."""
    return jsonpatch.apply_patch(original, decision.patch)


def with_settings(**changes: Any) -> Settings:
    return Settings.of(**changes)


# --- denials and passes, one per rule and message -------------------------------------------------------------

DECISION_CASES = [
    pytest.param(pod(), Settings(), False, 400, "pod has no containers", id="empty-containers-denied"),
    pytest.param({"kind": "Pod", "spec": {"initContainers": [container("i", limits={GPU: "1"})]}}, Settings(),
                 False, 400, "pod has no containers", id="only-init-containers-denied"),
    pytest.param(pod(container(limits={GPU: "1"}), scheduler="volcano"), Settings(), True, 200,
                 "pod already has different scheduler assigned", id="other-scheduler-allowed-unchanged"),
    pytest.param(pod(container(limits={GPU: "1"}, privileged=True)), Settings(), False, 403,
                 "container c is privileged", id="privileged-gpu-container-denied"),
    pytest.param(pod(container(limits={GPU: "1"}), init=(container("setup", privileged=True),)), Settings(),
                 False, 403, "container setup is privileged", id="privileged-init-container-denied"),
    pytest.param(pod(container(limits={GPU: "1"}), container("sidecar", privileged=True)), Settings(), False,
                 403, "container sidecar is privileged", id="privileged-sidecar-of-gpu-pod-denied"),
    pytest.param(pod(container(limits={GPU: "1"}), node="node-1"), Settings(), False, 403,
                 "pod has node assigned", id="gpu-pod-with-node-name-denied"),
    pytest.param(pod(container(limits={GPU: "1"}, privileged=True), node="node-1"), Settings(), False, 403,
                 "container c is privileged", id="privileged-is-checked-before-node-name"),
    pytest.param(pod(container(limits={GPU: "1.5"})), Settings(), False, 400,
                 "container c: nvidia.com/gpu: '1.5' is not a whole number", id="fractional-count-denied"),
    pytest.param(pod(container(limits={GPU: "1", MEM: "500m"})), Settings(), False, 400,
                 "container c: nvidia.com/gpumem: '500m' is not a whole number", id="milli-memory-denied"),
    pytest.param(pod(container(limits={GPU: "1", MEM: "-3k"})), Settings(), False, 400,
                 "container c: nvidia.com/gpumem: '-3k' must not be negative", id="negative-memory-denied"),
    pytest.param(pod(container(limits={GPU: "one"})), Settings(), False, 400,
                 "container c: nvidia.com/gpu: 'one' is not a quantity", id="non-quantity-denied"),
    pytest.param(pod(container(limits={GPU: "1", PCT: "101"})), Settings(), False, 400,
                 "container c: nvidia.com/gpumem-percentage: '101' is outside 0..100",
                 id="percentage-over-100-denied"),
    pytest.param(pod(container(limits={GPU: "1"}, requests={GPU: "1", MEM: "x"})), Settings(), False, 400,
                 "container c: nvidia.com/gpumem: 'x' is not a quantity", id="bad-value-in-requests-denied"),
    pytest.param(pod(container(limits={GPU: "1", PRIORITY: "0.5"})), Settings(), False, 400,
                 "container c: nvidia.com/priority: '0.5' is not a whole number", id="bad-priority-denied"),
    pytest.param(pod(container(), init=(container("warmup", limits={MEM: "-1"}),)), Settings(), False, 400,
                 "container warmup: nvidia.com/gpumem: '-1' must not be negative",
                 id="bad-value-in-init-container-names-it"),
    pytest.param(pod(container(limits={GPU: "1", MEM: "-1"}), node="node-1"), Settings(), False, 400,
                 "container c: nvidia.com/gpumem: '-1' must not be negative",
                 id="invalid-value-is-checked-before-node-name"),
    pytest.param(pod(container(limits={"hami.io/gpu": "1", "hami.io/gpumem": "-2"})),
                 with_settings(resources=HAMI_NAMES), False, 400,
                 "container c: hami.io/gpumem: '-2' must not be negative",
                 id="configured-resource-name-in-message"),
    pytest.param(pod(container(limits={GPU: "1"}, privileged=True)), with_settings(privileged_policy="skip"),
                 True, 200, "pod asks for no GPU (privileged containers left alone: c)",
                 id="skip-policy-lone-privileged-gpu-container-allowed"),
    pytest.param(pod(container(limits={GPU: "x"}, privileged=True)), with_settings(privileged_policy="skip"),
                 True, 200, "pod asks for no GPU (privileged containers left alone: c)",
                 id="skip-policy-does-not-validate-privileged-container"),
    pytest.param(pod(container("exporter", privileged=True)), Settings(), True, 200, "pod asks for no GPU",
                 id="privileged-pod-without-gpu-allowed"),
    pytest.param(pod(container(), node="node-1"), Settings(), True, 200, "pod asks for no GPU",
                 id="pod-without-gpu-may-name-its-node"),
]


@pytest.mark.parametrize(("pod_object", "config", "allowed", "code", "message"), DECISION_CASES)
def test_review_pod_decision_and_message(pod_object: dict[str, Any], config: Settings, allowed: bool, code: int,
                                         message: str) -> None:
    decision = review_pod(pod_object, config.admission)
    assert (decision.allowed, decision.code, decision.message) == (allowed, code, message)
    if not allowed or message == "pod already has different scheduler assigned":
        assert decision.patch == []


NOT_A_POD_CASES = [
    pytest.param([], "object is not a valid pod: must be a JSON object, got list", id="list"),
    pytest.param({"kind": "Deployment", "spec": {}}, "object is not a valid pod: kind is 'Deployment', not 'Pod'",
                 id="other-kind"),
    pytest.param({"kind": "Pod"}, "object is not a valid pod: spec is missing", id="no-spec"),
    pytest.param({"spec": "x"}, "object is not a valid pod: spec must be an object, got string", id="spec-string"),
    pytest.param({"spec": {"containers": {"name": "c"}}},
                 "object is not a valid pod: spec.containers must be a list, got object", id="containers-object"),
    pytest.param({"spec": {"containers": ["c"]}},
                 "object is not a valid pod: spec.containers[0] must be an object, got string",
                 id="container-string"),
    pytest.param({"spec": {"containers": [{"image": "x"}]}},
                 "object is not a valid pod: spec.containers[0].name must be a non-empty string",
                 id="container-without-name"),
    pytest.param({"spec": {"containers": [{"name": "c", "resources": []}]}},
                 "object is not a valid pod: spec.containers[0].resources must be an object, got list",
                 id="resources-list"),
    pytest.param({"spec": {"containers": [{"name": "c", "resources": {"limits": ["nvidia.com/gpu"]}}]}},
                 "object is not a valid pod: spec.containers[0].resources.limits must be an object, got list",
                 id="limits-list"),
    pytest.param({"spec": {"containers": [{"name": "c", "env": {"A": "1"}}]}},
                 "object is not a valid pod: spec.containers[0].env must be a list, got object", id="env-object"),
    pytest.param({"spec": {"containers": [{"name": "c", "env": [{"value": "1"}]}]}},
                 "object is not a valid pod: spec.containers[0].env[0].name must be a string",
                 id="env-entry-without-name"),
    pytest.param({"spec": {"initContainers": [{"name": "i", "securityContext": {"privileged": "yes"}}],
                           "containers": [{"name": "c"}]}},
                 "object is not a valid pod: spec.initContainers[0].securityContext.privileged must be a "
                 "boolean, got string", id="privileged-string"),
    pytest.param({"spec": {"containers": [{"name": "c"}], "nodeName": 7}},
                 "object is not a valid pod: spec.nodeName must be a string, got number", id="node-name-number"),
    pytest.param({"metadata": {"annotations": True}, "spec": {"containers": [container(limits={GPU: "1"})]}},
                 "object is not a valid pod: metadata.annotations must be an object, got boolean",
                 id="annotations-boolean"),
    pytest.param({"metadata": {"annotations": {"hami.io/device-scoring-weights": 3}},
                  "spec": {"containers": [container(limits={GPU: "1"})]}},
                 "object is not a valid pod: metadata.annotations['hami.io/device-scoring-weights'] must be a "
                 "string, got number", id="annotation-number"),
]


@pytest.mark.parametrize(("pod_object", "message"), NOT_A_POD_CASES)
def test_object_that_is_not_pod_shaped_is_denied_naming_the_field(pod_object: object, message: str) -> None:
    decision = review_pod(pod_object, Settings().admission)
    assert (decision.allowed, decision.code, decision.message, decision.patch) == (False, 400, message, [])


# --- what a GPU container becomes ----------------------------------------------------------------------------

CONTAINER_MUTATION_CASES = [
    pytest.param({GPU: "1"}, None, Settings(), {GPU: "1", CORES: "100"}, id="count-only-gets-exclusive-cores"),
    pytest.param({GPU: "1", MEM: "3k"}, None, Settings(), {GPU: "1", MEM: "3k"},
                 id="gpumem-given-no-exclusive-cores"),
    pytest.param({GPU: "2", PCT: "50"}, None, Settings(), {GPU: "2", PCT: "50"},
                 id="percentage-below-100-no-exclusive-cores"),
    pytest.param({GPU: "1", PCT: "100"}, None, Settings(), {GPU: "1", PCT: "100", CORES: "100"},
                 id="percentage-100-gets-exclusive-cores"),
    # HAMi v2.10 defaultExclusiveCoreIfNeeded decides by the keys' presence, not their values
    # (TestMutateAdmissionDefaultsExclusiveCore "memory size present treated as shareable", "non-exclusive percentage";
    # the filter then books the whole card: TestZeroMemoryPercentageIsAccountedAsWholeCard).
    pytest.param({GPU: "1", MEM: "0"}, None, Settings(), {GPU: "1", MEM: "0"},
                 id="gpumem-zero-is-given-no-exclusive-cores"),
    pytest.param({GPU: "1", PCT: "0"}, None, Settings(), {GPU: "1", PCT: "0"},
                 id="percentage-zero-is-given-no-exclusive-cores"),
    pytest.param({GPU: "1", CORES: "30"}, None, Settings(), {GPU: "1", CORES: "30"},
                 id="cores-given-are-kept"),
    pytest.param({GPU: "1", CORES: "0"}, None, Settings(), {GPU: "1", CORES: "0"},
                 id="cores-zero-given-are-kept"),
    pytest.param({GPU: "1"}, {GPU: "1", CORES: "20"}, Settings(), {GPU: "1"},
                 id="cores-in-requests-only-no-exclusive-cores"),
    pytest.param(None, {GPU: "1"}, Settings(), {CORES: "100"}, id="count-in-requests-only-is-a-gpu-container"),
    pytest.param({MEM: "3k"}, None, Settings(), {MEM: "3k", GPU: "1"}, id="gpumem-without-count-gets-count"),
    pytest.param({CORES: "40"}, None, Settings(), {CORES: "40", GPU: "1"}, id="cores-without-count-gets-count"),
    pytest.param({PCT: "100"}, None, Settings(), {PCT: "100", GPU: "1", CORES: "100"},
                 id="percentage-100-without-count-gets-count-and-cores"),
    pytest.param(None, {MEM: "2k"}, Settings(), {GPU: "1"}, id="gpumem-in-requests-only-gets-count-in-limits"),
    pytest.param({MEM: "3k"}, None, with_settings(default_gpu=2), {MEM: "3k", GPU: "2"},
                 id="default-gpu-setting-is-the-added-count"),
    pytest.param({"hami.io/gpu": "1"}, None, with_settings(resources=HAMI_NAMES),
                 {"hami.io/gpu": "1", "hami.io/gpucores": "100"}, id="configured-names-are-used"),
]


@pytest.mark.parametrize(("limits", "requests", "config", "expected_limits"), CONTAINER_MUTATION_CASES)
def test_gpu_container_limits_after_patch(limits: dict[str, Any] | None, requests: dict[str, Any] | None,
                                          config: Settings, expected_limits: dict[str, str]) -> None:
    original = pod(container(limits=limits, requests=requests))
    decision = review_pod(original, config.admission)
    assert decision.allowed, decision.message
    result = patched(original, decision)
    assert result["spec"]["containers"][0]["resources"]["limits"] == expected_limits
    assert result["spec"]["schedulerName"] == config.scheduler_name
    assert review_pod(result, config.admission).patch == []


NO_GPU_CASES = [
    pytest.param(container(limits={"cpu": "1"}), id="only-cpu"),
    pytest.param(container(limits={GPU: "1"}), id="names-other-than-the-configured-ones"),
    pytest.param(container(limits={"hami.io/priority": "1"}, env=[{"name": "CUDA_TASK_PRIORITY", "value": "1"}]),
                 id="priority-alone-is-not-a-gpu"),
]


@pytest.mark.parametrize("gpu_less_container", NO_GPU_CASES)
def test_container_asking_no_gpu_is_left_alone(gpu_less_container: dict[str, Any]) -> None:
    config = with_settings(resources=HAMI_NAMES)
    decision = review_pod(pod(gpu_less_container), config.admission)
    assert (decision.allowed, decision.message, decision.patch) == (True, "pod asks for no GPU", [])


def test_fixture_like_pod_gets_only_the_scheduler_name() -> None:
    original = pod(container(limits={GPU: "1", MEM: "3k"}, requests={GPU: "1", MEM: "3k"}))
    decision = review_pod(original, Settings().admission)
    assert decision.patch == [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}]


def test_pod_without_scheduler_name_gets_ours_added() -> None:
    original = pod(container(limits={GPU: "1", MEM: "1k"}), scheduler=None)
    decision = review_pod(original, with_settings(scheduler_name="gpu-sched").admission)
    assert decision.patch == [{"op": "add", "path": "/spec/schedulerName", "value": "gpu-sched"}]


def test_pod_already_ours_and_complete_has_no_patch() -> None:
    original = pod(container(limits={GPU: "1", MEM: "1k"}), scheduler="hami-scheduler")
    decision = review_pod(original, Settings().admission)
    assert (decision.allowed, decision.patch) == (True, [])


def test_patch_applied_to_original_gives_the_whole_expected_pod() -> None:
    original = pod(container("train", limits={MEM: "3k", PRIORITY: "1"}, env=[{"name": "A", "value": "1"}]),
                   container("log"), init=(container("warmup", limits={GPU: "1"}),))
    before = copy.deepcopy(original)
    decision = review_pod(original, with_settings(overwrite_env=True).admission)
    assert original == before, "review_pod must not modify its input"
    expected = copy.deepcopy(original)
    expected["spec"]["schedulerName"] = "hami-scheduler"
    expected["spec"]["initContainers"][0]["resources"]["limits"][CORES] = "100"
    expected["spec"]["containers"][0]["resources"]["limits"][GPU] = "1"
    expected["spec"]["containers"][0]["env"].append({"name": "CUDA_TASK_PRIORITY", "value": "1"})
    expected["spec"]["containers"][1]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert patched(original, decision) == expected
    assert decision.message == "scheduled by hami-scheduler: GPU containers warmup, train"


def test_init_container_alone_makes_a_gpu_pod() -> None:
    original = pod(container("main"), init=(container("prep", limits={CORES: "50"}),))
    result = patched(original, review_pod(original, Settings().admission))
    assert result["spec"]["initContainers"][0]["resources"]["limits"] == {CORES: "50", GPU: "1"}
    assert result["spec"]["schedulerName"] == "hami-scheduler"


# --- environment variables -----------------------------------------------------------------------------------

TASK_PRIORITY_1 = [{"name": "CUDA_TASK_PRIORITY", "value": "1"}]
HIDDEN_GPUS = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
OVERWRITE = with_settings(overwrite_env=True)

ENV_CASES = [
    pytest.param({GPU: "1", PRIORITY: "1"}, None, None, Settings(), TASK_PRIORITY_1, id="priority-sets-env"),
    pytest.param({GPU: "1", PRIORITY: "1"}, None, TASK_PRIORITY_1, Settings(), TASK_PRIORITY_1,
                 id="priority-env-not-added-twice"),
    pytest.param({GPU: "1", PRIORITY: "0"}, None, [{"name": "X", "value": "y"}, *TASK_PRIORITY_1], Settings(),
                 [{"name": "X", "value": "y"}, {"name": "CUDA_TASK_PRIORITY", "value": "0"}],
                 id="priority-env-with-other-value-is-set-to-the-limit"),
    pytest.param({GPU: "1", PRIORITY: "1"}, None,
                 [{"name": "CUDA_TASK_PRIORITY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 Settings(), TASK_PRIORITY_1, id="priority-env-from-field-is-replaced"),
    pytest.param({PRIORITY: "1"}, None, None, Settings(), TASK_PRIORITY_1,
                 id="priority-on-container-without-gpu-sets-env"),
    pytest.param({GPU: "1"}, {GPU: "1", PRIORITY: "1"}, None, Settings(), None,
                 id="priority-in-requests-only-sets-nothing"),
    pytest.param({GPU: "1"}, None, TASK_PRIORITY_1, Settings(), TASK_PRIORITY_1,
                 id="env-without-priority-limit-is-kept"),
    pytest.param({"cpu": "1"}, None, None, OVERWRITE, HIDDEN_GPUS, id="overwrite-env-hides-gpus"),
    # HAMi v2.10 NvidiaGPUDevices.MutateAdmission: a count given, even 0, is a GPU container; only others are hidden.
    pytest.param({GPU: "0"}, None, None, OVERWRITE, None, id="overwrite-env-spares-a-zero-count"),
    pytest.param({"cpu": "1"}, None, [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], OVERWRITE, HIDDEN_GPUS,
                 id="overwrite-env-replaces-all"),
    pytest.param({"cpu": "1"}, None, HIDDEN_GPUS, OVERWRITE, HIDDEN_GPUS, id="overwrite-env-not-added-twice"),
    pytest.param({GPU: "1"}, None, None, OVERWRITE, None, id="overwrite-env-spares-gpu-container"),
    pytest.param({"cpu": "1"}, None, None, Settings(), None, id="no-overwrite-env-by-default"),
]


@pytest.mark.parametrize(("limits", "requests", "env", "config", "expected_env"), ENV_CASES)
def test_container_env_after_patch(limits: dict[str, Any], requests: dict[str, Any] | None,
                                   env: list[dict[str, Any]] | None, config: Settings,
                                   expected_env: list[dict[str, Any]] | None) -> None:
    original = pod(container(limits=limits, requests=requests, env=env))
    decision = review_pod(original, config.admission)
    assert decision.allowed, decision.message
    result = patched(original, decision)
    assert result["spec"]["containers"][0].get("env") == expected_env
    assert review_pod(result, config.admission).patch == []


def test_pod_without_gpu_gets_only_env_patched() -> None:
    original = pod(container("a"), container("b", env=[]))
    decision = review_pod(original, with_settings(overwrite_env=True).admission)
    assert decision.allowed
    assert decision.patch == [
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                                   "value": "none"}]},
        {"op": "add", "path": "/spec/containers/1/env/0", "value": {"name": "NVIDIA_VISIBLE_DEVICES",
                                                                    "value": "none"}},
    ]


def test_overwrite_env_never_touches_a_privileged_container() -> None:
    original = pod(container("exporter", privileged=True), container("app"))
    result = patched(original, review_pod(original, with_settings(overwrite_env=True).admission))
    assert "env" not in result["spec"]["containers"][0]
    assert result["spec"]["containers"][1]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]


# --- privileged policy ---------------------------------------------------------------------------------------

def test_skip_policy_schedules_the_rest_and_leaves_privileged_container_alone() -> None:
    privileged = container("tools", limits={MEM: "1k"}, privileged=True)
    original = pod(container("train", limits={GPU: "1"}), privileged)
    decision = review_pod(original, with_settings(privileged_policy="skip", overwrite_env=True).admission)
    assert decision.allowed
    result = patched(original, decision)
    assert result["spec"]["containers"][1] == privileged
    assert result["spec"]["containers"][0]["resources"]["limits"] == {GPU: "1", CORES: "100"}
    assert result["spec"]["schedulerName"] == "hami-scheduler"


def test_skip_policy_lone_privileged_gpu_container_pod_is_unchanged() -> None:
    original = pod(container(limits={MEM: "1k"}, privileged=True))
    decision = review_pod(original, with_settings(privileged_policy="skip", overwrite_env=True).admission)
    assert (decision.allowed, decision.patch) == (True, [])


def test_deny_policy_validates_a_privileged_container_before_refusing_it() -> None:
    decision = review_pod(pod(container(limits={GPU: "x"}, privileged=True)), Settings().admission)
    assert (decision.allowed, decision.code) == (False, 400)
    assert decision.message == "container c: nvidia.com/gpu: 'x' is not a quantity"


def test_privileged_false_is_not_privileged() -> None:
    decision = review_pod(pod(container(limits={GPU: "1"}, privileged=False)), Settings().admission)
    assert decision.allowed


# --- properties over generated pods --------------------------------------------------------------------------

VALID_VALUES = {
    "count": ["0", "1", "2"],
    "memory": ["0", "1k", "3k", "1024", "2Gi"],
    "memory_percentage": ["0", "50", "100"],
    "cores": ["0", "30", "100"],
    "priority": ["0", "1"],
}
INVALID_VALUES = ["1.5", "-1", "abc", "101", "500m"]
ENV_NAMES = ["CUDA_TASK_PRIORITY", "NVIDIA_VISIBLE_DEVICES", "OTHER"]


@st.composite
def generated_container(draw: st.DrawFn, names: ResourceNames, name: str, allow_invalid: bool) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for field_name, values in VALID_VALUES.items():
        placement = draw(st.sampled_from(["absent", "absent", "limits", "requests", "both"]))
        if placement == "absent":
            continue
        choices = st.sampled_from(values)
        if allow_invalid:
            choices = st.one_of(choices, st.sampled_from(INVALID_VALUES)) if draw(st.booleans()) else choices
        value = draw(choices)
        resource = getattr(names, field_name)
        if placement in ("limits", "both"):
            limits[resource] = value
        if placement in ("requests", "both"):
            requests[resource] = value
    if draw(st.booleans()):
        limits["cpu"] = "1"
    env = draw(st.none() | st.lists(
        st.fixed_dictionaries({"name": st.sampled_from(ENV_NAMES), "value": st.sampled_from(["0", "1", "none",
                                                                                               "all"])}),
        max_size=3))
    privileged = draw(st.sampled_from([None, None, False, True]))
    return container(name, limits=limits or None, requests=requests or None, env=env, privileged=privileged)


@st.composite
def generated_case(draw: st.DrawFn) -> tuple[dict[str, Any], Settings]:
    config = Settings(
        resources=draw(st.sampled_from([ResourceNames(), HAMI_NAMES])),
        overwrite_env=draw(st.booleans()),
        privileged_policy=draw(st.sampled_from(["deny", "skip"])),
        default_gpu=draw(st.integers(min_value=1, max_value=3)),
    )
    allow_invalid = draw(st.integers(min_value=0, max_value=4)) == 0
    init = tuple(draw(generated_container(config.resources, f"i{i}", allow_invalid))
                 for i in range(draw(st.integers(min_value=0, max_value=2))))
    containers = tuple(draw(generated_container(config.resources, f"c{i}", allow_invalid))
                       for i in range(draw(st.sampled_from([0, 1, 1, 2, 2, 3]))))
    scheduler = draw(st.sampled_from([None, "default-scheduler", "default-scheduler", "hami-scheduler", "volcano"]))
    node = draw(st.sampled_from([None, None, "", "node-1"]))
    return pod(*containers, init=init, scheduler=scheduler, node=node), config


@hypothesis_settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated_case())
def test_review_is_idempotent_and_denials_carry_no_patch(case: tuple[dict[str, Any], Settings]) -> None:
    original, config = case
    decision = review_pod(original, config.admission)
    event("denied" if not decision.allowed else "allowed with patch" if decision.patch else "allowed unchanged")
    if not decision.allowed:
        assert decision.patch == []
        assert decision.code in (400, 403)
        return
    result = patched(original, decision)
    again = review_pod(result, config.admission)
    assert again.allowed, again.message
    assert again.patch == []
    for before, after in zip(original["spec"]["containers"], result["spec"]["containers"], strict=True):
        if (before.get("securityContext") or {}).get("privileged"):
            assert before == after, "a privileged container is never mutated"
