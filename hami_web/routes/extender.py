"""``/filter``, ``/bind`` and ``/preempt``: kube-scheduler's extender calls, each decode → decide → encode.

The body is decoded into a typed request (`wire.decode_filter_args`, `wire.decode_binding_args`), the extender
decides into an outcome (`extender.outcomes`), and the outcome is encoded as the answer. kube-scheduler expects HTTP
200 with a non-empty ``Error`` for any failure, so every problem — an unreadable body, a body over 4 MiB, an
unexpected exception — is answered that way, with a log line, never a 500.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from hami_web.extender.wire import (
    decode_binding_args,
    decode_filter_args,
    decode_preemption_args,
    encode_binding_result,
    encode_filter_result,
    encode_preemption_result,
)
from hami_web.routes.bodies import BodyError, read_json_body
from hami_web.services import ExtenderCalls, services

log = logging.getLogger(__name__)

blueprint = Blueprint("extender", __name__)


def _serve(route: str, answer_body: Callable[[ExtenderCalls, object], Mapping[str, Any]]) -> Response:
    started = time.perf_counter()
    extender = services().extender
    try:
        answer: Mapping[str, Any]
        if extender is None:
            answer = {"Error": "scheduler extender is not configured in this process"}
        else:
            try:
                body = read_json_body()
            except BodyError as error:
                answer = {"Error": f"/{route}: {error}"}
            else:
                answer = answer_body(extender, body)
    finally:
        metrics = services().metrics
        if metrics is not None:
            metrics.observe_request(route, time.perf_counter() - started)
    return jsonify(answer)


@blueprint.post("/filter")
def filter_nodes() -> Response:
    """ExtenderArgs in, ExtenderFilterResult out."""
    return _serve("filter", lambda extender, body: encode_filter_result(extender.filter(decode_filter_args(body))))


@blueprint.post("/bind")
def bind_pod() -> Response:
    """ExtenderBindingArgs in, ExtenderBindingResult out."""
    return _serve("bind", lambda extender, body: encode_binding_result(extender.bind(decode_binding_args(body))))


@blueprint.post("/preempt")
def preempt_nodes() -> Response:
    """ExtenderPreemptionArgs in, ExtenderPreemptionResult out (docs/preemption.md)."""
    return _serve("preempt", lambda extender, body: encode_preemption_result(
        extender.preempt(decode_preemption_args(body))))


@blueprint.errorhandler(HTTPException)
def _http_error(error: HTTPException) -> tuple[Response, int]:
    log.warning("%s: HTTP %s: %s", request.path, error.code, error.description)
    if isinstance(error, RequestEntityTooLarge):
        limit_mib = (current_app.config.get("MAX_CONTENT_LENGTH") or 0) / (1024 * 1024)
        return jsonify(Error=f"{request.path}: request body is larger than the {limit_mib:g} MiB limit"), 200
    return jsonify(Error=f"{request.path}: {error.description}"), 200


@blueprint.errorhandler(Exception)
def _unexpected(error: Exception) -> tuple[Response, int]:
    log.exception("%s failed", request.path)
    return jsonify(Error=f"{request.path}: internal error: {type(error).__name__}: {error}"), 200
