"""Liveness and readiness probes.

``/healthz`` only says the process answers; ``/readyz`` says the cluster cache is synced and fresh, so
kube-scheduler is never sent to an extender that would decide from stale or empty state.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from hami_web.server.services import services

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    """200 while the process is alive."""
    return jsonify(status="ok")


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    """200 once the cache has synced and its last refresh is recent, 503 otherwise (with the reason)."""
    readiness = services().readiness
    if readiness is None:
        return jsonify(status="not ready", reason="no cluster cache configured"), 503
    ready, reason = readiness.readiness()
    # Which replica is active: only the one whose kube-scheduler holds the Lease gets extender calls.
    extender = services().extender
    activity = extender.activity() if extender is not None else "not configured"
    return jsonify(status="ready" if ready else "not ready", reason=reason, extender=activity), 200 if ready else 503
