"""``POST /webhook`` through the Flask test client, with the AdmissionReview kube-apiserver really sends.

Covers: the captured v1 request (``tests/fixtures/admission-review-v1.json``) and the same as v1beta1 —
echoed apiVersion/kind/uid, the base64 JSONPatch applied to the pod; a denial as a review with the uid;
requests for other kinds and operations passed through; and every bad body answered clearly without a
500 (not JSON, wrong shape, missing request/uid/object, object not a pod, oversized body, a crash
inside the review); plus the log line and the metrics hook.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from flask import Flask
from flask.testing import FlaskClient

import hami_web.routes.webhook as webhook_route
from hami_web.services import EXTENSION_KEY

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "admission-review-v1.json"
UID = "18178cdb-1bf3-446d-9e4f-123a1260a8c6"


@pytest.fixture
def review() -> dict[str, Any]:
    """The captured AdmissionReview for a pod asking ``nvidia.com/gpu: 1`` and ``gpumem: 3k``."""
    return json.loads(FIXTURE.read_text())


def post(client: FlaskClient, body: object) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = client.post("/webhook?timeout=10s", data=raw, content_type="application/json")
    assert answer.is_json, answer.get_data(as_text=True)
    return answer.status_code, answer.get_json()


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_captured_gpu_pod_is_sent_to_our_scheduler(client: FlaskClient, review: dict[str, Any],
                                                   api_version: str) -> None:
    review["apiVersion"] = api_version
    status, answer = post(client, review)
    assert status == 200
    assert (answer["apiVersion"], answer["kind"], answer["response"]["uid"]) == (api_version, "AdmissionReview",
                                                                                 UID)
    assert answer["response"]["allowed"] is True
    pod = jsonpatch.apply_patch(review["request"]["object"], decoded_patch(answer["response"]))
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"}, "gpumem 3k given: no gpucores added"


def test_patched_pod_sent_again_gets_no_patch(client: FlaskClient, review: dict[str, Any]) -> None:
    _, first = post(client, review)
    review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"],
                                                        decoded_patch(first["response"]))
    _, second = post(client, review)
    assert second["response"]["allowed"] is True
    assert "patch" not in second["response"] and "patchType" not in second["response"]


def test_whole_card_pod_gets_exclusive_cores(client: FlaskClient, review: dict[str, Any]) -> None:
    resources = review["request"]["object"]["spec"]["containers"][0]["resources"]
    resources["limits"] = {"nvidia.com/gpu": "1"}
    resources["requests"] = {"nvidia.com/gpu": "1"}
    _, answer = post(client, review)
    operations = sorted(decoded_patch(answer["response"]), key=lambda operation: operation["path"])
    assert operations == [
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"},
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]


def test_denied_pod_answers_a_review_with_uid_and_403(client: FlaskClient, review: dict[str, Any]) -> None:
    review["request"]["object"]["spec"]["nodeName"] = "gpu-node-1"
    status, answer = post(client, review)
    assert status == 200
    assert answer["response"] == {"uid": UID, "allowed": False,
                                  "status": {"code": 403, "message": "pod has node assigned", "reason": "Forbidden"}}


def test_invalid_quantity_answers_400_status_naming_container(client: FlaskClient, review: dict[str, Any]) -> None:
    review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "1.5"
    _, answer = post(client, review)
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 400
    assert answer["response"]["status"]["message"] == "container c: nvidia.com/gpumem: '1.5' is not a whole number"


@pytest.mark.parametrize(("kind", "operation", "sub_resource"), [
    pytest.param({"group": "apps", "version": "v1", "kind": "Deployment"}, "CREATE", None, id="deployment"),
    pytest.param({"group": "", "version": "v1", "kind": "Pod"}, "UPDATE", None, id="pod-update"),
    pytest.param({"group": "", "version": "v1", "kind": "Pod"}, "DELETE", None, id="pod-delete"),
    pytest.param({"group": "example.com", "version": "v1", "kind": "Pod"}, "CREATE", None, id="custom-pod-kind"),
    pytest.param({"group": "", "version": "v1", "kind": "Pod"}, "CREATE", "status", id="subresource"),
])
def test_other_objects_and_operations_are_allowed_unchanged(client: FlaskClient, review: dict[str, Any],
                                                            kind: dict[str, str], operation: str,
                                                            sub_resource: str | None) -> None:
    review["request"]["kind"] = kind
    review["request"]["operation"] = operation
    if sub_resource:
        review["request"]["subResource"] = sub_resource
    status, answer = post(client, review)
    assert status == 200
    assert answer["response"]["uid"] == UID
    assert answer["response"]["allowed"] is True
    assert "patch" not in answer["response"]


def without(review: dict[str, Any], *path: str) -> dict[str, Any]:
    trimmed = copy.deepcopy(review)
    parent = trimmed
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return trimmed


def replaced(review: dict[str, Any], value: object, *path: str) -> dict[str, Any]:
    changed = copy.deepcopy(review)
    parent = changed
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return changed


BAD_BODY_CASES = [
    pytest.param(lambda r: b"{not json", "the body is not JSON", id="not-json"),
    pytest.param(lambda r: b"", "the body is not JSON", id="empty-body"),
    pytest.param(lambda r: b"\xff\xfe\x00garbage", "the body is not JSON", id="not-utf8"),
    pytest.param(lambda r: b"[" * 100_000 + b"]" * 100_000, "the body is nested too deeply",
                 id="nested-too-deep"),
    pytest.param(lambda r: [r], "the body must be an AdmissionReview object, got list", id="json-list"),
    pytest.param(lambda r: replaced(r, "ConfigMap", "kind"), "kind must be 'AdmissionReview', got 'ConfigMap'",
                 id="not-an-admission-review"),
    pytest.param(lambda r: replaced(r, "admission.k8s.io/v2", "apiVersion"),
                 "apiVersion must be one of admission.k8s.io/v1, admission.k8s.io/v1beta1, got "
                 "'admission.k8s.io/v2'", id="unknown-version"),
    pytest.param(lambda r: without(r, "request"), "request is missing", id="missing-request"),
    pytest.param(lambda r: replaced(r, "pod", "request"), "request must be an object, got string",
                 id="request-not-object"),
    pytest.param(lambda r: without(r, "request", "uid"), "request.uid is missing (it must be a non-empty string)",
                 id="missing-uid"),
]


@pytest.mark.parametrize(("make_body", "message"), BAD_BODY_CASES)
def test_unanswerable_body_is_http_400_with_message(client: FlaskClient, review: dict[str, Any],
                                                    make_body: Any, message: str) -> None:
    status, answer = post(client, make_body(review))
    assert status == 400
    assert answer["error"] == "Bad Request"
    assert answer["message"].startswith(message)


BAD_OBJECT_CASES = [
    pytest.param(lambda r: without(r, "request", "object"),
                 "request.object is missing: a pod CREATE must carry the pod", id="missing-object"),
    pytest.param(lambda r: replaced(r, None, "request", "object"),
                 "request.object is missing: a pod CREATE must carry the pod", id="null-object"),
    pytest.param(lambda r: replaced(r, ["pod"], "request", "object"), "request.object must be a Pod object, got list",
                 id="object-list"),
    pytest.param(lambda r: replaced(r, {"kind": "Service", "spec": {}}, "request", "object"),
                 "object is not a valid pod: kind is 'Service', not 'Pod'", id="object-not-a-pod"),
    pytest.param(lambda r: replaced(r, "c", "request", "object", "spec", "containers"),
                 "object is not a valid pod: spec.containers must be a list, got string", id="containers-not-list"),
    pytest.param(lambda r: replaced(r, [], "request", "object", "spec", "containers"), "pod has no containers",
                 id="no-containers"),
    pytest.param(lambda r: replaced(r, "Pod", "request", "kind"), "request.kind must be an object with a string kind",
                 id="request-kind-not-object"),
    pytest.param(lambda r: without(r, "request", "operation"), "request.operation must be a string",
                 id="missing-operation"),
    pytest.param(lambda r: replaced(r, json.loads("[" * 900 + "]" * 900), "request", "object", "metadata",
                                    "labels"), "request.object is nested too deeply to be a pod",
                 id="object-nested-too-deep"),
]


@pytest.mark.parametrize(("make_body", "message"), BAD_OBJECT_CASES)
def test_bad_pod_object_is_a_non_allowed_review_with_uid(client: FlaskClient, review: dict[str, Any],
                                                         make_body: Any, message: str) -> None:
    status, answer = post(client, make_body(review))
    assert status == 200
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == UID
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"] == {"code": 400, "message": message, "reason": "BadRequest"}


def test_body_over_4_mib_is_json_413(client: FlaskClient, review: dict[str, Any]) -> None:
    review["request"]["object"]["metadata"]["annotations"] = {"padding": "x" * (5 * 1024 * 1024)}
    status, answer = post(client, review)
    assert status == 413
    assert answer["message"] == "the AdmissionReview is larger than the 4194304 bytes this webhook accepts"


def test_unexpected_failure_is_json_400_without_traceback(client: FlaskClient, review: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    def explode(body: object, settings: object, quotas: object = None) -> None:
        raise KeyError("spec")

    monkeypatch.setattr(webhook_route, "review_admission", explode)
    status, answer = post(client, review)
    assert status == 400
    assert answer == {"error": "Bad Request",
                      "message": "the webhook could not review this request: KeyError: 'spec'"}
    assert "Traceback" not in json.dumps(answer)
    assert any(record.exc_info for record in caplog.records), "the operator's log keeps the traceback"


def test_get_is_not_allowed_and_answers_json(client: FlaskClient) -> None:
    answer = client.get("/webhook")
    assert answer.status_code == 405
    assert answer.is_json


def test_one_log_line_per_decision(client: FlaskClient, review: dict[str, Any],
                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="hami_web.routes.webhook"):
        post(client, review)
    lines = [r.getMessage() for r in caplog.records if r.name == "hami_web.routes.webhook"]
    assert lines == [f"admission default/plain-pod uid={UID} allowed=True patch_ops=1 http=200: "
                     "scheduled by hami-scheduler: GPU containers c"]


class RecordingMetrics:
    """Stands in for the metrics collaborator: remembers what the webhook reported."""

    def __init__(self) -> None:
        self.observed: list[tuple[float, bool]] = []

    def observe_webhook(self, seconds: float, allowed: bool) -> None:
        self.observed.append((seconds, allowed))


def test_metrics_hook_sees_each_decision(app: Flask, client: FlaskClient, review: dict[str, Any]) -> None:
    metrics = RecordingMetrics()
    app.extensions[EXTENSION_KEY].metrics = metrics
    post(client, review)
    post(client, b"nope")
    assert [allowed for _, allowed in metrics.observed] == [True, False]
    assert all(seconds >= 0 for seconds, _ in metrics.observed)


def test_metrics_object_without_webhook_hook_is_ignored(app: Flask, client: FlaskClient,
                                                        review: dict[str, Any]) -> None:
    app.extensions[EXTENSION_KEY].metrics = object()
    status, _ = post(client, review)
    assert status == 200
