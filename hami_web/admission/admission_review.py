"""The AdmissionReview envelope: validate the request, call `review_pod`, build the response.

kube-apiserver sends ``admission.k8s.io/v1`` or ``v1beta1`` (whichever the webhook configuration lists
first that it supports) and only accepts an answer in the same version carrying the request's uid, so
both are echoed. What cannot be answered as a review — a body that is not an AdmissionReview, or one
whose uid cannot be read — is an HTTP 400; anything after the uid is known is answered as a review
(HTTP 200, ``allowed: false`` and a message), because that message is what the user creating the pod
sees in ``kubectl``'s error.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from hami_web.admission.pod_review import MALFORMED, AdmissionDecision, review_pod
from hami_web.core.limits import json_type_name
from hami_web.core.policy import AdmissionPolicy
from hami_web.core.quota import QuotaBook

REVIEW_KIND = "AdmissionReview"
SUPPORTED_API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
_STATUS_REASONS = {400: "BadRequest", 403: "Forbidden"}


class ReviewStatus(TypedDict):
    """The ``metav1.Status`` subset a review response carries."""

    code: int
    message: str
    reason: NotRequired[str]


class ReviewResponse(TypedDict):
    """``AdmissionReview.response`` (identical in v1 and v1beta1)."""

    uid: str
    allowed: bool
    status: NotRequired[ReviewStatus]
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]


@dataclass(frozen=True, slots=True)
class AdmissionAnswer:
    """What the route sends back, plus what it logs and counts.

    ``body`` is an AdmissionReview when ``http_status`` is 200, else a ``{"error", "message"}`` object.
    ``pod`` is ``namespace/name`` (or ``namespace/generateName*``) when known, for the log line.
    """

    body: dict[str, Any]
    http_status: int
    allowed: bool
    message: str
    uid: str = ""
    pod: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    # The pod's namespace and name as the request gives them ("" when it has only a generateName): what an event
    # about the warnings names.
    namespace: str = ""
    name: str = ""
    dry_run: bool = False


def review_admission(body: object, policy: AdmissionPolicy, quotas: QuotaBook | None = None) -> AdmissionAnswer:
    """Answer one decoded AdmissionReview request body (docs/scheduling-rules.md#admission-in-order, including step 1).

    Never raises for bad input: every malformed shape becomes an HTTP 400 answer or a non-allowed
    review whose message says what is wrong.
    """
    if not isinstance(body, dict):
        return reject_unreadable_body(f"the body must be an AdmissionReview object, got {json_type_name(body)}")
    if body.get("kind") != REVIEW_KIND:
        return reject_unreadable_body(f"kind must be {REVIEW_KIND!r}, got {body.get('kind')!r}")
    api_version = body.get("apiVersion")
    if api_version not in SUPPORTED_API_VERSIONS:
        return reject_unreadable_body(
            f"apiVersion must be one of {', '.join(SUPPORTED_API_VERSIONS)}, got {api_version!r}")
    request = body.get("request")
    if request is None:
        return reject_unreadable_body("request is missing")
    if not isinstance(request, dict):
        return reject_unreadable_body(f"request must be an object, got {json_type_name(request)}")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return reject_unreadable_body("request.uid is missing (it must be a non-empty string)")

    pod_label = _pod_label(request)
    decision = _review_request(request, policy, quotas)
    response: ReviewResponse = {"uid": uid, "allowed": decision.allowed}
    if decision.message:
        status: ReviewStatus = {"code": decision.code, "message": decision.message}
        if decision.code in _STATUS_REASONS:
            status["reason"] = _STATUS_REASONS[decision.code]
        response["status"] = status
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch).encode()).decode("ascii")
    if decision.warnings:
        # kube-apiserver caps each warning at 120 characters only in its own header; kubectl prints them whole.
        response["warnings"] = list(decision.warnings)
    review = {"apiVersion": api_version, "kind": REVIEW_KIND, "response": response}
    namespace, name = _pod_names(request)
    return AdmissionAnswer(body=review, http_status=200, allowed=decision.allowed, message=decision.message,
                           uid=uid, pod=pod_label, patch=decision.patch, warnings=decision.warnings,
                           namespace=namespace, name=name, dry_run=request.get("dryRun") is True)


def reject_unreadable_body(message: str) -> AdmissionAnswer:
    """An HTTP 400 answer for a body that cannot be answered as a review (no uid to echo)."""
    return AdmissionAnswer(body={"error": "Bad Request", "message": message}, http_status=400, allowed=False,
                           message=message)


def _review_request(request: dict[str, Any], policy: AdmissionPolicy, quotas: QuotaBook | None) -> AdmissionDecision:
    kind = request.get("kind")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        return AdmissionDecision(allowed=False, message="request.kind must be an object with a string kind",
                                 code=MALFORMED)
    operation = request.get("operation")
    if not isinstance(operation, str):
        return AdmissionDecision(allowed=False, message="request.operation must be a string", code=MALFORMED)
    is_core_pod = kind["kind"] == "Pod" and not kind.get("group")
    if not is_core_pod or operation != "CREATE" or request.get("subResource"):
        # A webhook registered more widely than pods/CREATE must not get in the way of other objects.
        what = f"{kind.get('group') or 'core'}/{kind['kind']} {operation}"
        if request.get("subResource"):
            what += f" of subresource {request['subResource']}"
        return AdmissionDecision(allowed=True, message=f"not a pod CREATE ({what}): nothing to do")
    pod = request.get("object")
    if pod is None:
        return AdmissionDecision(allowed=False, message="request.object is missing: a pod CREATE must carry the pod",
                                 code=MALFORMED)
    if not isinstance(pod, dict):
        return AdmissionDecision(allowed=False, code=MALFORMED,
                                 message=f"request.object must be a Pod object, got {json_type_name(pod)}")
    try:
        namespace = request.get("namespace")
        return review_pod(pod, policy, quotas=quotas, namespace=namespace if isinstance(namespace, str) else "")
    except RecursionError:
        # Deep-copying or diffing a pathologically nested object; a real pod is a few levels deep.
        return AdmissionDecision(allowed=False, message="request.object is nested too deeply to be a pod",
                                 code=MALFORMED)


def _pod_label(request: dict[str, Any]) -> str:
    """``namespace/name`` for logs; pods created with generateName have no name yet."""
    namespace, name = _pod_names(request)
    if not name:
        pod = request.get("object")
        metadata = pod.get("metadata") if isinstance(pod, dict) else None
        if isinstance(metadata, dict) and isinstance(metadata.get("generateName"), str) and metadata["generateName"]:
            name = f"{metadata['generateName']}*"
    return f"{namespace}/{name or '?'}"


def _pod_names(request: dict[str, Any]) -> tuple[str, str]:
    """The pod's namespace and name from the object, else the request ("" when unknown)."""
    pod = request.get("object")
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    namespace = metadata.get("namespace") or request.get("namespace") or ""
    name = metadata.get("name") or request.get("name") or ""
    return (namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")

