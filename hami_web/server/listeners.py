"""The listeners of one process, one per audience, and the routes each may serve.

Any pod in the cluster can reach the Service, so the Service's listener serves only what kube-apiserver
needs (the webhook) and what kubelet probes. The extender routes change cluster state (annotate and bind
pods with hami-web's RBAC) and only kube-scheduler, in the same pod, needs them: they live on a loopback
listener. Metrics are plain HTTP on their own port, where Prometheus expects them (HAMi uses ``:9395``).
The read-only dashboard (``/ui/…``, `hami_web.dashboard`) has a loopback listener of its own, off with
``--ui-bind off``.
A route asked for on a listener that does not serve it answers 404, as if it did not exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Response

from hami_web.settings import ServingSettings

# The WSGI environ key the HTTP front sets to the audience of the listener a request arrived on.
LISTENER_ENVIRON_KEY = "hami_web.listener"

WEBHOOK = "webhook"
EXTENDER = "extender"
METRICS = "metrics"
UI = "ui"

ROUTES_BY_AUDIENCE: dict[str, frozenset[str]] = {
    WEBHOOK: frozenset({"/webhook", "/healthz", "/readyz"}),
    EXTENDER: frozenset({"/filter", "/bind", "/healthz", "/readyz"}),
    METRICS: frozenset({"/metrics"}),
    UI: frozenset({"/ui"}),
}
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
    tls = not serving.insecure_http
    listeners = (
        Listener(WEBHOOK, "--bind", *serving.bind_host_port, tls=tls),
        Listener(EXTENDER, "--extender-bind", *serving.extender_host_port, tls=tls),
        Listener(METRICS, "--metrics-bind-address", *serving.metrics_host_port, tls=False),
    )
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
        if audience is not None and not serves(audience, environ.get("PATH_INFO", "")):
            body = json.dumps({"error": "Not Found", "message": "no such route on this listener"})
            return Response(body, status=404, mimetype="application/json")(environ, start_response)
        return self._app(environ, start_response)
