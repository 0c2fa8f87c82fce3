"""The listeners of one process, one per audience, and the routes each may serve.

Any pod in the cluster can reach the Service, so the Service's listener serves only what kube-apiserver
needs (the webhook) and what kubelet probes. The extender routes change cluster state (annotate and bind
pods with hami-web's RBAC) and only kube-scheduler, in the same pod, needs them: they live on a loopback
listener. Metrics are plain HTTP on their own port, where Prometheus expects them (HAMi uses ``:9395``).
The read-only dashboard (``/ui/…``, `hami_web.dashboard`) has a loopback listener of its own, off with
``--ui-bind off``.
A route asked for on a listener that does not serve it answers 404, as if it did not exist.

HAMi's command line has one listener for everything (``--http_bind``, the chart's port 443, exposed by its Service to
the whole cluster): there ``/filter`` and ``/bind`` answer only loopback peers — kube-scheduler in the same pod —
and every other peer gets 403 with the reason, so the routes that book devices stay as private as on our loopback
extender listener.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Response

from hami_web.settings import ServingSettings
from hami_web.settings.values import is_loopback

log = logging.getLogger(__name__)

# The WSGI environ key the HTTP front sets to the audience of the listener a request arrived on.
LISTENER_ENVIRON_KEY = "hami_web.listener"

WEBHOOK = "webhook"
EXTENDER = "extender"
METRICS = "metrics"
UI = "ui"
SHARED = "shared"  # HAMi's --http_bind: the webhook's and the extender's routes on one listener

ROUTES_BY_AUDIENCE: dict[str, frozenset[str]] = {
    WEBHOOK: frozenset({"/webhook", "/healthz", "/readyz"}),
    EXTENDER: frozenset({"/filter", "/bind", "/preempt", "/healthz", "/readyz"}),
    METRICS: frozenset({"/metrics"}),
    UI: frozenset({"/ui"}),
    SHARED: frozenset({"/webhook", "/filter", "/bind", "/preempt", "/healthz", "/readyz"}),
}
# Routes a listener of these audiences answers only to a loopback peer.
LOOPBACK_ONLY_BY_AUDIENCE: dict[str, frozenset[str]] = {SHARED: frozenset({"/filter", "/bind", "/preempt"})}
# Audiences that also serve every path under one of these prefixes.
ROUTE_PREFIXES_BY_AUDIENCE: dict[str, tuple[str, ...]] = {UI: ("/ui/",)}


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening address, who it is for, and whether it speaks TLS."""

    audience: str
    flag: str
    host: str
    port: int
    tls: bool

    @property
    def address(self) -> str:
        """``host:port`` as gunicorn's ``bind`` takes it (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def scheme(self) -> str:
        """``https`` or ``http``."""
        return "https" if self.tls else "http"


def plan_listeners(serving: ServingSettings) -> tuple[Listener, ...]:
    """The listeners from the settings; TLS on the webhook and extender unless ``--insecure-http``.

    The dashboard's is plain HTTP on loopback; exposed (``--ui-expose``) it speaks TLS like the others.
    """
    tls = not serving.plain_http
    served = (Listener(SHARED, "--http-bind", *serving.http_host_port, tls=tls),) if serving.http_host_port else (
        Listener(WEBHOOK, "--bind", *serving.bind_host_port, tls=tls),
        Listener(EXTENDER, "--extender-bind", *serving.extender_host_port, tls=tls))
    listeners = (*served, Listener(METRICS, "--metrics-bind-address", *serving.metrics_host_port, tls=False))
    if serving.ui_host_port is None:
        return listeners
    return (*listeners, Listener(UI, "--ui-bind", *serving.ui_host_port, tls=tls and serving.ui_expose))


def serves(audience: str, path: str) -> bool:
    """Whether the listener of ``audience`` serves ``path``."""
    prefixes = ROUTE_PREFIXES_BY_AUDIENCE.get(audience, ())
    return path in ROUTES_BY_AUDIENCE.get(audience, ()) or path.startswith(prefixes)


class RoutesByListener:
    """WSGI middleware: a request whose listener does not serve its path gets a plain 404.

    It sits in front of Flask so that no blueprint's error handler can turn the refusal into something
    else (the extender's would answer 200 with an ``Error``). Requests with no listener mark come from an
    in-process test client and reach every route.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        audience = environ.get(LISTENER_ENVIRON_KEY)
        path = environ.get("PATH_INFO", "")
        if audience is not None and not serves(audience, path):
            body = json.dumps({"error": "Not Found", "message": "no such route on this listener"})
            return Response(body, status=404, mimetype="application/json")(environ, start_response)
        peer = str(environ.get("REMOTE_ADDR", ""))
        if audience is not None and path in LOOPBACK_ONLY_BY_AUDIENCE.get(audience, ()) and not is_loopback(peer):
            log.warning("%s refused to %s: only kube-scheduler in the same pod (a loopback peer) may call it here",
                        path, peer or "an unknown peer")
            body = json.dumps({"error": "Forbidden", "message": (
                f"{path} is answered only to loopback peers on this listener (kube-scheduler in the same pod); "
                f"refused for {peer or 'an unknown peer'}")})
            return Response(body, status=403, mimetype="application/json")(environ, start_response)
        return self._app(environ, start_response)
