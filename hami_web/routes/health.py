"""Liveness and readiness probes.

``/healthz`` says the process answers HTTP: its event loop runs. ``/readyz`` says the cluster cache has synced
and is in step with the API (no resource silent beyond ``--watch-silence-bound``, none failing for three refresh
periods), so kube-scheduler is never sent to an extender that would decide from stale or empty state.

Both are answered on the HTTP front's event loop (`hami_web.server.front`) from state the app publishes
(`probe_answers_for`), never on an app thread: a stalled API server can hold every app thread in a bind, and a
liveness probe that waited for one would have kubelet restart the container and throw a warm cache away exactly
when the API is in trouble. The routes below give the same answers to a caller that reaches the app directly
(the Flask test client, a listener without the front).
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Blueprint, Response, jsonify

from hami_web.services import EXTENSION_KEY, Services, services

blueprint = Blueprint("health", __name__)

ProbeAnswer = tuple[int, dict[str, str]]
# ``path`` → the probe's status and JSON body, or None when ``path`` is not a probe.
ProbeAnswers = Callable[[str], ProbeAnswer | None]
PROBE_PATHS = frozenset({"/healthz", "/readyz"})


def health_answer() -> ProbeAnswer:
    """200 while the process is alive (nothing else is looked at: liveness must not depend on the API)."""
    return 200, {"status": "ok"}


def readiness_answer(found: Services) -> ProbeAnswer:
    """200 once the cache has synced and is in step with the API, 503 otherwise (with the reason).

    Reads only fields the sync loops publish (no lock, no API call), so it is safe on the event loop.
    """
    readiness = found.readiness
    if readiness is None:
        return 503, {"status": "not ready", "reason": "no cluster cache configured"}
    ready, reason = readiness.readiness()
    # Which replica is active: only the one whose kube-scheduler holds the Lease gets extender calls.
    extender = found.extender
    activity = extender.activity() if extender is not None else "not configured"
    body = {"status": "ready" if ready else "not ready", "reason": reason, "extender": activity}
    # --leader-elect: a standby stays ready (a rollout waits for readiness) but books nothing; say which it is.
    leadership = extender.leadership() if extender is not None else None
    if leadership is not None:
        body["leader_election"] = leadership
    return 200 if ready else 503, body


def probe_answers_for(app: object) -> ProbeAnswers | None:
    """The probe answers of a `create_app` app, for the front to give without an app thread (None: not ours)."""
    extensions = getattr(app, "extensions", None)
    found = extensions.get(EXTENSION_KEY) if isinstance(extensions, dict) else None
    if not isinstance(found, Services):
        return None
    published: Services = found

    def answer(path: str) -> ProbeAnswer | None:
        if path == "/healthz":
            return health_answer()
        if path == "/readyz":
            return readiness_answer(published)
        return None

    return answer


@blueprint.get("/healthz")
def healthz() -> tuple[Response, int]:
    """200 while the process is alive."""
    status, body = health_answer()
    return jsonify(body), status


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    """200 once the cache has synced and is in step with the API, 503 otherwise (with the reason)."""
    status, body = readiness_answer(services())
    return jsonify(body), status
