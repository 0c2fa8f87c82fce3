"""Admission warnings through the running server (docs/webhook-and-extender.md#the-admission-webhook-post-webhook): each
rule where we are stricter than HAMi v2.10 admits the pod, says so in the AdmissionReview's ``warnings`` and records a
Warning event on the pod.

Covers: ``gpucores`` over 100 (clamped, as every HAMi family's ``Fit`` clamps it), a ``nvidia.com/numa-bind`` Go's
``ParseBool`` cannot read (ignored, as HAMi's ``assertNuma``), an unknown ``nvidia.gpuCorePolicy`` (written as HAMi's
``MutateAdmission`` writes it), an unknown GPU policy (read as ``spread``, as HAMi's ``DeviceUsageList.Less``); a dry
run gets the warnings but no event; a pod without a name yet (generateName) gets the warnings only.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.families import parse_device_config
from hami_web.localcluster import LocalCluster

from .helpers import (
    RuntimeFactory,
    admission_response,
    container,
    events_for,
    gpu_limits,
    gpu_pod,
)

REASON = "AdmittedWithWarnings"


def _plain(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"].pop("schedulerName")
    return pod


CASES = [
    pytest.param(_plain(gpu_pod("cores", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"})), {},
                 "container main: nvidia.com/gpucores 150 is over 100 (100 = one whole device): set to 100, as HAMi "
                 "v2.10's filter clamps it", id="cores-over-100"),
    pytest.param(_plain(gpu_pod("numa", gpu_limits(), annotations={names.POD_NUMA_BIND: "yes"})), {},
                 "nvidia.com/numa-bind 'yes' is not a boolean (true, 1, t, false, 0, f, …): no NUMA binding, as HAMi "
                 "v2.10 reads it", id="numa-bind-not-a-boolean"),
    pytest.param(_plain(gpu_pod("gpu-policy", gpu_limits(), annotations={names.POD_GPU_POLICY: "best"})), {},
                 'unknown hami.io/gpu-scheduler-policy "best" (expected binpack, spread or topology-aware): read as '
                 '"spread", as HAMi v2.10 reads it', id="unknown-gpu-policy"),
    pytest.param(_plain(gpu_pod("policy", gpu_limits())), {"gpuCorePolicy": "strict"},
                 "nvidia.gpuCorePolicy 'strict' of the device config is none of default, force, disable: "
                 "GPU_CORE_UTILIZATION_POLICY=strict is set as HAMi v2.10 sets it, and HAMi-core runs with its default "
                 "policy", id="unknown-core-policy"),
]


@pytest.mark.parametrize(("pod", "nvidia", "warning"), CASES)
def test_each_stricter_rule_admits_with_a_warning_and_an_event(make_runtime: RuntimeFactory,
                                                               apiserver: LocalCluster, pod: dict[str, Any],
                                                               nvidia: dict[str, str], warning: str) -> None:
    runtime = make_runtime(device_config=parse_device_config({"nvidia": nvidia}))
    answer = admission_response(runtime, pod)
    assert (answer["allowed"], answer["warnings"]) == (True, [warning])
    runtime.events.flush()
    events = [event for event in events_for(apiserver, pod["metadata"]["name"]) if event["reason"] == REASON]
    assert [(event["type"], event["message"]) for event in events] == [("Warning", warning)]


def test_a_dry_run_is_warned_but_records_nothing(make_runtime: RuntimeFactory, apiserver: LocalCluster) -> None:
    runtime = make_runtime()
    pod = _plain(gpu_pod("dry", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"}))
    assert admission_response(runtime, pod, dry_run=True)["warnings"]
    runtime.events.flush()
    assert events_for(apiserver, "dry") == []


def test_a_pod_without_a_name_yet_gets_the_warnings_only(make_runtime: RuntimeFactory,
                                                         apiserver: LocalCluster) -> None:
    runtime = make_runtime()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-", "namespace": "default"},
           "spec": {"containers": [container("main", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "120"})]}}
    assert admission_response(runtime, pod)["warnings"]
    runtime.events.flush()
    assert [event for event in events_for(apiserver, "") if event["reason"] == REASON] == []
