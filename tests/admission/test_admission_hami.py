"""The webhook and HAMi v2.10's ``hami.io/device-scoring-weights``: refused at admission, as HAMi does.

Covers: a GPU pod with a malformed weights annotation is denied (400) with the parser's message and no patch;
well-formed weights pass and the pod is scheduled by us; a pod asking for no GPU is not judged on it (the
annotation means nothing without our scheduler); ``--force-overwrite-default-scheduler`` true and false against pods
naming default-scheduler, ours, another scheduler or none.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.admission import review_pod
from hami_web.core import names
from hami_web.settings import Settings

KEY = names.POD_SCORING_WEIGHTS


def _pod(weights: str, *, gpu: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1k"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                                                            "annotations": {KEY: weights}},
            "spec": {"containers": [container]}}


@pytest.mark.parametrize(("weights", "message"), [
    pytest.param("slot=1,core=1", f'{KEY} "slot=1,core=1": missing memory (expected slot=<n>,core=<n>,memory=<n>)',
                 id="missing-key"),
    pytest.param("slot=0,core=0,memory=0", f'{KEY} "slot=0,core=0,memory=0": the weights must not all be zero',
                 id="all-zero"),
    pytest.param("slot=1,core=x,memory=1", f'{KEY} "slot=1,core=x,memory=1": core "x" is not a whole number >= 0',
                 id="not-a-number"),
])
def test_gpu_pod_with_malformed_weights_is_denied(weights: str, message: str) -> None:
    decision = review_pod(_pod(weights), Settings().admission)
    assert (decision.allowed, decision.code, decision.message, decision.patch) == (False, 400, message, [])


def test_gpu_pod_with_good_weights_is_scheduled_by_us() -> None:
    decision = review_pod(_pod("slot=1,core=1,memory=3"), Settings().admission)
    assert decision.allowed
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in decision.patch \
        or {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in decision.patch


def test_pod_without_gpu_is_not_judged_on_the_weights() -> None:
    decision = review_pod(_pod("nonsense", gpu=False), Settings().admission)
    assert decision.allowed


@pytest.mark.parametrize(("force", "scheduler_name", "ours"), [
    pytest.param(True, "default-scheduler", True, id="force-default"),
    pytest.param(True, None, True, id="force-unnamed"),
    pytest.param(True, "hami-scheduler", True, id="force-ours"),
    pytest.param(True, "volcano", False, id="force-other"),
    pytest.param(False, "default-scheduler", False, id="no-force-default"),
    pytest.param(False, None, True, id="no-force-unnamed"),
    pytest.param(False, "hami-scheduler", True, id="no-force-ours"),
    pytest.param(False, "volcano", False, id="no-force-other"),
])
def test_force_overwrite_default_scheduler(force: bool, scheduler_name: str | None, ours: bool) -> None:
    """HAMi v2.10 pkg/scheduler/webhook.go Handle: a pod naming another scheduler is allowed untouched, and so is one
    naming default-scheduler under --force-overwrite-default-scheduler=false; a pod naming none is processed."""
    pod = _pod("slot=1,core=1,memory=3")
    if scheduler_name is not None:
        pod["spec"]["schedulerName"] = scheduler_name
    decision = review_pod(pod, Settings.of(force_overwrite_default_scheduler=force).admission)
    assert decision.allowed
    assert (decision.message == "pod already has different scheduler assigned") is not ours
    if not ours:
        assert decision.patch == []
    elif scheduler_name != "hami-scheduler":
        assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in decision.patch \
            or {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in decision.patch
