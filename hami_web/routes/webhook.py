"""``POST /webhook``: the mutating admission webhook's HTTP shell
(docs/webhook-and-extender.md#the-admission-webhook-post-webhook).

Decode the body, hand it to `review_admission`, log one line per decision, encode. kube-apiserver
appends ``?timeout=10s``; the review is fast and bounded, so it is ignored. A failed webhook call
blocks pod creation cluster-wide (or is silently skipped, depending on ``failurePolicy``), so every
failure here — unreadable body, oversized body, even a bug — answers a JSON message, never an HTML page
or a traceback.
"""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from hami_web.admission import AdmissionAnswer, reject_unreadable_body, review_admission
from hami_web.routes.bodies import BodyError, read_json_body
from hami_web.services import services

log = logging.getLogger(__name__)

blueprint = Blueprint("webhook", __name__)
ADMISSION_WARNING_REASON = "AdmittedWithWarnings"


@blueprint.post("/webhook")
def admission_webhook() -> tuple[Response, int]:
    """Answer one AdmissionReview."""
    g.webhook_started = time.perf_counter()
    try:
        body = read_json_body()
    except BodyError as error:
        answer = reject_unreadable_body(str(error))
    else:
        answer = review_admission(body, services().settings.admission, quotas=services().quotas)
    _log_answer(answer)
    _record_warnings(answer)
    _observe(allowed=answer.allowed)
    return jsonify(answer.body), answer.http_status


@blueprint.errorhandler(RequestEntityTooLarge)
def _body_too_large(error: RequestEntityTooLarge) -> tuple[Response, int]:
    limit = request.max_content_length
    message = f"the AdmissionReview is larger than the {limit} bytes this webhook accepts"
    log.warning("admission rejected: HTTP 413: %s (Content-Length %s)", message, request.content_length)
    _observe(allowed=False)
    return jsonify(error="Request Entity Too Large", message=message), 413


@blueprint.errorhandler(Exception)
def _unexpected_error(error: Exception) -> tuple[Response, int]:
    if isinstance(error, HTTPException):
        log.warning("admission rejected: HTTP %s: %s", error.code, error.description)
        return jsonify(error=error.name, message=error.description), error.code or 400
    # The traceback goes to the operator's log; the API server (and the user) get a one-line message.
    log.exception("admission failed unexpectedly")
    _observe(allowed=False)
    return jsonify(error="Bad Request",
                   message=f"the webhook could not review this request: {type(error).__name__}: {error}"), 400


def _log_answer(answer: AdmissionAnswer) -> None:
    warned = f" (warnings: {'; '.join(answer.warnings)})" if answer.warnings else ""
    log.info("admission %s uid=%s allowed=%s patch_ops=%d http=%d: %s%s", answer.pod or "-", answer.uid or "-",
             answer.allowed, len(answer.patch), answer.http_status, answer.message, warned, extra={"pod": answer.pod})


def _record_warnings(answer: AdmissionAnswer) -> None:
    """An event on the pod naming what admission changed or ignored (the review's warnings reach only the creator's
    terminal). A pod created with generateName has no name yet, and a dry run creates nothing: neither gets one."""
    events = services().events
    if events is None or not answer.warnings or not answer.allowed or not answer.name or answer.dry_run:
        return
    events.record(namespace=answer.namespace, name=answer.name, uid="", reason=ADMISSION_WARNING_REASON,
                  message="; ".join(answer.warnings), warning=True)


def _observe(*, allowed: bool) -> None:
    """Report latency to the metrics collaborator when there is one that knows webhooks."""
    metrics = services().metrics
    observe = getattr(metrics, "observe_webhook", None) if metrics is not None else None
    if observe is None:
        return
    started = g.get("webhook_started")
    observe(time.perf_counter() - started if started is not None else 0.0, allowed)
