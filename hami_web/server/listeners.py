"""The listeners of one process, one per audience, and the routes each may serve.

Any pod in the cluster can reach the Service, so the Service's listener serves only what kube-apiserver
needs (the webhook) and what kubelet probes. The extender routes change cluster state (annotate and bind
pods with hami-web's RBAC) and only kube-scheduler, in the same pod, needs them: they live on a loopback
listener. Metrics are plain HTTP on their own port, where Prometheus expects them (HAMi uses ``:9395``).
A route asked for on a listener that does not serve it answers 404, as if it did not exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Response

from hami_web.settings import Settings

# The WSGI environ key the HTTP front sets to the audience of the listener a request arrived on.
LISTENER_ENVIRON_KEY = "hami_web.listener"

WEBHOOK = "webhook"
EXTENDER = "extender"
METRICS = "metrics"

ROUTES_BY_AUDIENCE: dict[str, frozenset[str]] = {
    WEBHOOK: frozenset({"/webhook", "/healthz", "/readyz"}),
    EXTENDER: frozenset({"/filter", "/bind", "/healthz", "/readyz"}),
    METRICS: frozenset({"/metrics"}),
}


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


def plan_listeners(settings: Settings) -> tuple[Listener, ...]:
    """The three listeners from the settings; TLS on the webhook and extender unless ``--insecure-http``."""
    tls = not settings.insecure_http
    return (
        Listener(WEBHOOK, "--bind", *settings.bind_host_port, tls=tls),
        Listener(EXTENDER, "--extender-bind", *settings.extender_host_port, tls=tls),
        Listener(METRICS, "--metrics-bind-address", *settings.metrics_host_port, tls=False),
    )


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
        if audience is not None and environ.get("PATH_INFO", "") not in ROUTES_BY_AUDIENCE.get(audience, ()):
            body = json.dumps({"error": "Not Found", "message": "no such route on this listener"})
            return Response(body, status=404, mimetype="application/json")(environ, start_response)
        return self._app(environ, start_response)
