"""The webhook's rules for Hygon DCU and Iluvatar containers (`review_pod`, docs/device-families.md#device-families),
with Iluvatar enabled.

Covers: DCU (HAMi ``MutateAdmission``: a count in limits routes the pod to us and mutates nothing else, a count only
in requests or a memory/cores ask without a count leaves the pod alone); Iluvatar (a count in limits routes the pod
and sets ``SOL_CONTINER_NAME=<container>`` once, a count above 1 sets ``limits[<CW>.vCore]`` to 100 × count over
whatever was written, an existing ``SOL_CONTINER_NAME`` is kept, each chip's own resources, nothing while Iluvatar
is disabled); that reviewing the patched pod again yields no patch, and that the extender reads the patched pod
as whole Iluvatar cards (count 2 → cores 100 on each) and exclusive DCUs; the refusals that apply to every family
(privileged containers under ``deny`` and ``skip``, ``spec.nodeName`` set); invalid DCU and Iluvatar quantities in
limits or requests denied with a message naming the container and the resource; a container asking NVIDIA and
DCU at once getting NVIDIA's rewrites only; Cambricon MLU as DCU (a count in limits routes, nothing mutated) and read
as an exclusive whole card unless it says otherwise (vmemory in units of 256 MiB).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jsonpatch
import pytest

from hami_web.admission import AdmissionDecision, review_pod
from hami_web.core.requests import ContainerRequest, RequestDefaults, pod_request
from hami_web.settings import Settings

SETTINGS = Settings.of(enable_iluvatar=True)
SCHEDULED = "scheduled by hami-scheduler: GPU containers"
SOL = "SOL_CONTINER_NAME"


def container(name: str = "c", *, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
              env: list[dict[str, Any]] | None = None, privileged: bool | None = None) -> dict[str, Any]:
    """A container as the API server sends it (only the fields the webhook reads)."""
    built: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits is not None or requests is not None:
        built["resources"] = {}
        if limits is not None:
            built["resources"]["limits"] = dict(limits)
        if requests is not None:
            built["resources"]["requests"] = dict(requests)
    if env is not None:
        built["env"] = env
    if privileged is not None:
        built["securityContext"] = {"privileged": privileged}
    return built


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def patched(original: dict[str, Any], decision: AdmissionDecision) -> dict[str, Any]:
    """The pod kube-apiserver would store after applying the decision's patch."""
    result: dict[str, Any] = jsonpatch.apply_patch(original, decision.patch)
    return result


def review_stored(original: dict[str, Any], settings: Settings | None = None) -> tuple[bool, str, dict[str, Any]]:
    """Whether the webhook (default settings unless given) allows ``original``, its message and the pod then stored;
    the stored pod, reviewed again, changes nothing."""
    policy = (settings or Settings()).admission
    decision = review_pod(original, policy)
    stored = patched(original, decision) if decision.allowed else original
    if decision.allowed:
        assert review_pod(stored, policy).patch == []
    return decision.allowed, decision.message, stored


def only_container(stored: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = stored["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


# --- Hygon DCU and Cambricon MLU: a count in limits, nothing mutated -------------------------------------------------

# (count, memory, cores) resource names of each family whose webhook only routes.
ROUTE_ONLY = {"DCU": ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
              "MLU": ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore")}


@pytest.mark.parametrize("cw", sorted(ROUTE_ONLY))
@pytest.mark.parametrize(("shape", "routed"), [
    # pkg/device/hygon/device_test.go Test_MutateAdmission "set to resource limits"; cambricon's MutateAdmission.
    pytest.param({"limits": {"count": "1"}}, True, id="hami-count-in-limits"),
    pytest.param({"limits": {"count": "2", "memory": "48", "cores": "30"}}, True, id="count-memory-cores-in-limits"),
    pytest.param({"requests": {"count": "1"}}, False, id="count-only-in-requests"),
    pytest.param({"limits": {"memory": "1024"}}, False, id="memory-without-count"),
    pytest.param({"limits": {"cores": "50"}}, False, id="cores-without-count"),
    pytest.param({"limits": {"count": "0"}}, True, id="count-zero-is-given"),
])
def test_a_dcu_or_mlu_count_in_limits_routes_the_pod_without_mutating_it(cw: str, shape: dict[str, dict[str, str]],
                                                                         routed: bool) -> None:
    names = dict(zip(("count", "memory", "cores"), ROUTE_ONLY[cw], strict=True))
    resources = {part: {names[key]: value for key, value in asked.items()} for part, asked in shape.items()}
    original = pod(container(**resources))
    decision = review_pod(original, SETTINGS.admission)
    assert decision.allowed
    if routed:
        assert decision.message == f"{SCHEDULED} c"
        # Only the scheduler name changes: no env, no default cores, no count.
        assert decision.patch == [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]
    else:
        assert (decision.message, decision.patch) == ("pod asks for no GPU", [])


def test_a_dcu_init_container_routes_the_pod() -> None:
    decision = review_pod(pod(container("main"), init=(container("prep", limits={"hygon.com/dcunum": "1"}),)),
                          SETTINGS.admission)
    assert decision.allowed and decision.message == f"{SCHEDULED} prep"


def test_the_extender_reads_an_mlu_container_as_an_exclusive_whole_card_by_default() -> None:
    stored = pod(container(limits={"cambricon.com/vmlu": "2"}))
    request = pod_request(stored, RequestDefaults.of(SETTINGS.devices))
    assert request.containers == (ContainerRequest(name="c", init=False, count=2, memory_mib=0, memory_percent=100,
                                                   cores=100, family="MLU"),)
    sized = pod(container(limits={"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "48",
                                  "cambricon.com/mlu.smlu.vcore": "50"}))
    assert pod_request(sized, RequestDefaults.of(SETTINGS.devices)).containers == (
        ContainerRequest(name="c", init=False, count=1, memory_mib=12288, memory_percent=100, cores=50,
                         family="MLU"),)


# --- Iluvatar -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("limits", "env", "expected_limits", "expected_env"), [
    # pkg/device/iluvatar/device_test.go Test_MutateAdmission: count 2 with vCore 1 → vCore 200.
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "1"}, None,
                 {"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "200"}, [{"name": SOL, "value": "c"}],
                 id="hami-count-2-overwrites-vcore"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "300"}, None,
                 {"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "200"}, [{"name": SOL, "value": "c"}],
                 id="count-2-overwrites-vcore-above-whole-cards-as-hami"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "2"}, None,
                 {"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "200"}, [{"name": SOL, "value": "c"}],
                 id="count-2-sets-vcore-200"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "3", "iluvatar.ai/MR-V100.vMem": "16"}, None,
                 {"iluvatar.ai/MR-V100-vgpu": "3", "iluvatar.ai/MR-V100.vMem": "16",
                  "iluvatar.ai/MR-V100.vCore": "300"}, [{"name": SOL, "value": "c"}], id="count-3-sets-vcore-300"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vCore": "50"}, None,
                 {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vCore": "50"}, [{"name": SOL, "value": "c"}],
                 id="count-1-keeps-its-cores"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "1"}, [{"name": "A", "value": "1"}],
                 {"iluvatar.ai/MR-V100-vgpu": "1"}, [{"name": "A", "value": "1"}, {"name": SOL, "value": "c"}],
                 id="env-appended-after-the-others"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "2"}, [{"name": SOL, "value": "other"}],
                 {"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vCore": "200"},
                 [{"name": SOL, "value": "other"}], id="existing-env-kept"),
    pytest.param({"iluvatar.ai/BI-V150-vgpu": "2"}, None,
                 {"iluvatar.ai/BI-V150-vgpu": "2", "iluvatar.ai/BI-V150.vCore": "200"}, [{"name": SOL, "value": "c"}],
                 id="bi-v150-its-own-vcore"),
])
def test_an_iluvatar_count_sets_whole_cards_and_the_container_name(
        limits: dict[str, str], env: list[dict[str, str]] | None, expected_limits: dict[str, str],
        expected_env: list[dict[str, str]]) -> None:
    original = pod(container(limits=limits, env=env))
    decision = review_pod(original, SETTINGS.admission)
    assert decision.allowed and decision.message == f"{SCHEDULED} c"
    stored = only_container(patched(original, decision))
    assert stored["resources"]["limits"] == expected_limits
    assert stored["env"] == expected_env
    assert patched(original, decision)["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize(("settings", "resources"), [
    pytest.param(SETTINGS, {"requests": {"iluvatar.ai/MR-V100-vgpu": "2"}}, id="count-only-in-requests"),
    pytest.param(SETTINGS, {"limits": {"iluvatar.ai/MR-V100.vMem": "8"}}, id="memory-without-count"),
    pytest.param(Settings(), {"limits": {"iluvatar.ai/MR-V100-vgpu": "2"}}, id="iluvatar-disabled"),
])
def test_an_iluvatar_pod_not_routed_is_left_alone(settings: Settings, resources: dict[str, Any]) -> None:
    decision = review_pod(pod(container(**resources)), settings.admission)
    assert (decision.allowed, decision.message, decision.patch) == (True, "pod asks for no GPU", [])


@pytest.mark.parametrize("original", [
    pytest.param(pod(container(limits={"iluvatar.ai/MR-V100-vgpu": "2"})), id="iluvatar-count-2"),
    pytest.param(pod(container(limits={"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "4"})),
                 id="iluvatar-count-1"),
    pytest.param(pod(container("a", limits={"iluvatar.ai/MR-V100-vgpu": "2"}),
                     container("b", limits={"hygon.com/dcunum": "1"}),
                     init=(container("i", limits={"iluvatar.ai/MR-V50-vgpu": "4"}),)), id="iluvatar-and-dcu"),
    pytest.param(pod(container(limits={"hygon.com/dcunum": "1"})), id="dcu"),
])
def test_reviewing_the_patched_pod_again_changes_nothing(original: dict[str, Any]) -> None:
    first = review_pod(original, SETTINGS.admission)
    assert first.allowed and first.patch
    stored = patched(original, first)
    second = review_pod(stored, SETTINGS.admission)
    assert (second.allowed, second.patch) == (True, [])
    for item in stored["spec"]["containers"] + stored["spec"].get("initContainers", []):
        assert [variable["name"] for variable in item.get("env", [])].count(SOL) <= 1


def test_every_iluvatar_container_gets_its_own_name() -> None:
    original = pod(container("a", limits={"iluvatar.ai/MR-V100-vgpu": "1"}), container("plain"),
                   init=(container("i", limits={"iluvatar.ai/MR-V50-vgpu": "2"}),))
    stored = patched(original, review_pod(original, SETTINGS.admission))
    assert stored["spec"]["initContainers"][0]["env"] == [{"name": SOL, "value": "i"}]
    assert stored["spec"]["initContainers"][0]["resources"]["limits"]["iluvatar.ai/MR-V50.vCore"] == "200"
    assert stored["spec"]["containers"][0]["env"] == [{"name": SOL, "value": "a"}]
    assert "env" not in stored["spec"]["containers"][1]


@pytest.mark.parametrize(("limits", "expected"), [
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "2", "iluvatar.ai/MR-V100.vMem": "8"},
                 ContainerRequest(name="c", init=False, count=2, memory_mib=2048, cores=100, family="MR-V100"),
                 id="iluvatar-count-2-is-two-whole-cards"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "1"},
                 ContainerRequest(name="c", init=False, count=1, memory_percent=100, cores=0, family="MR-V100"),
                 id="iluvatar-count-1-shares-a-card"),
    pytest.param({"hygon.com/dcunum": "1", "hygon.com/dcumem": "4k"},
                 ContainerRequest(name="c", init=False, count=1, memory_mib=4000, cores=100, family="DCU"),
                 id="dcu-without-cores-is-exclusive"),
])
def test_the_extender_reads_the_webhook_output_as_the_family_request(limits: dict[str, str],
                                                                     expected: ContainerRequest) -> None:
    # docs/device-families.md#device-families: 100 × count cores clamp to 100 per device, i.e. whole cards; DCU's
    # default cores are 100.
    original = pod(container(limits=limits))
    stored = patched(original, review_pod(original, SETTINGS.admission))
    assert pod_request(stored, RequestDefaults.of(SETTINGS.devices)).containers == (expected,)


# --- refusals that apply to every family -----------------------------------------------------------------------

FAMILY_LIMITS = [
    pytest.param({"hygon.com/dcunum": "1"}, id="dcu"),
    pytest.param({"iluvatar.ai/MR-V100-vgpu": "2"}, id="iluvatar"),
]


@pytest.mark.parametrize("limits", FAMILY_LIMITS)
def test_a_privileged_container_of_any_family_is_refused(limits: dict[str, str]) -> None:
    decision = review_pod(pod(container(limits=limits, privileged=True)), SETTINGS.admission)
    assert (decision.allowed, decision.code, decision.message, decision.patch) == (
        False, 403, "container c is privileged", [])


@pytest.mark.parametrize("limits", FAMILY_LIMITS)
def test_a_privileged_container_is_left_alone_under_skip(limits: dict[str, str]) -> None:
    settings = dataclasses.replace(SETTINGS, privileged_policy="skip")
    decision = review_pod(pod(container(limits=limits, privileged=True)), settings.admission)
    assert (decision.allowed, decision.patch) == (True, [])
    assert decision.message == "pod asks for no GPU (privileged containers left alone: c)"


@pytest.mark.parametrize("limits", FAMILY_LIMITS)
def test_a_privileged_neighbour_of_a_device_container_refuses_the_pod(limits: dict[str, str]) -> None:
    decision = review_pod(pod(container("dev", limits=limits), container("sidecar", privileged=True)),
                          SETTINGS.admission)
    assert (decision.allowed, decision.code, decision.message) == (False, 403, "container sidecar is privileged")


@pytest.mark.parametrize("limits", FAMILY_LIMITS)
def test_a_pod_of_any_family_with_a_node_name_is_refused(limits: dict[str, str]) -> None:
    decision = review_pod(pod(container(limits=limits), node="node-1"), SETTINGS.admission)
    assert (decision.allowed, decision.code, decision.message, decision.patch) == (
        False, 403, "pod has node assigned", [])


# --- invalid quantities ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("resources", "message"), [
    pytest.param({"limits": {"hygon.com/dcunum": "1.5"}}, "container c: hygon.com/dcunum: '1.5' is not a whole number",
                 id="dcu-fraction-count"),
    pytest.param({"limits": {"hygon.com/dcunum": "-1"}}, "container c: hygon.com/dcunum: '-1' must not be negative",
                 id="dcu-negative-count"),
    pytest.param({"limits": {"hygon.com/dcunum": "1", "hygon.com/dcumem": "abc"}},
                 "container c: hygon.com/dcumem: 'abc' is not a quantity", id="dcu-garbage-memory"),
    pytest.param({"limits": {"hygon.com/dcunum": "1", "hygon.com/dcumem": "16Gi"}},
                 "container c: hygon.com/dcumem: '16Gi' is over the limit", id="dcu-oversized-memory"),
    pytest.param({"limits": {"hygon.com/dcunum": "1"}, "requests": {"hygon.com/dcumem": "1.5"}},
                 "container c: hygon.com/dcumem: '1.5' is not a whole number", id="dcu-bad-value-in-requests"),
    pytest.param({"requests": {"hygon.com/dcunum": "x"}}, "container c: hygon.com/dcunum: 'x' is not a quantity",
                 id="dcu-bad-count-only-in-requests"),
    pytest.param({"limits": {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "1.5"}},
                 "container c: iluvatar.ai/MR-V100.vMem: '1.5' is not a whole number", id="iluvatar-fraction-memory"),
    pytest.param({"limits": {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "16Gi"}},
                 "container c: iluvatar.ai/MR-V100.vMem: '16Gi' is over the limit", id="iluvatar-oversized-memory"),
    pytest.param({"limits": {"iluvatar.ai/MR-V100-vgpu": "two"}},
                 "container c: iluvatar.ai/MR-V100-vgpu: 'two' is not a quantity", id="iluvatar-garbage-count"),
])
def test_an_invalid_quantity_is_denied_naming_container_and_resource(resources: dict[str, Any], message: str) -> None:
    decision = review_pod(pod(container(**resources)), SETTINGS.admission)
    assert (decision.allowed, decision.code, decision.patch) == (False, 400, [])
    assert message in decision.message


# --- several families in one container -------------------------------------------------------------------------

def test_a_container_asking_nvidia_and_dcu_gets_only_nvidia_rewrites() -> None:
    original = pod(container(limits={"nvidia.com/gpu": "1", "hygon.com/dcunum": "1"}))
    decision = review_pod(original, SETTINGS.admission)
    assert decision.allowed and decision.message == f"{SCHEDULED} c"
    stored = only_container(patched(original, decision))
    # NVIDIA's whole-card default adds gpucores 100; nothing is added for the DCU.
    assert stored["resources"]["limits"] == {"nvidia.com/gpu": "1", "hygon.com/dcunum": "1",
                                             "nvidia.com/gpucores": "100"}
    assert "env" not in stored
