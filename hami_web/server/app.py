"""Flask application factory.

The app is built from explicit settings and collaborators (cache, extender, metrics) so that the same
code serves production under gunicorn, the demo, and tests against an in-process API server. Nothing is
created at import time.
"""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from hami_web.core.quota import QuotaBook
from hami_web.server.listeners import RoutesByListener
from hami_web.services import EXTENSION_KEY, ExtenderCalls, PodEvents, Readiness, RouteMetrics, Services
from hami_web.settings import Settings

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024


def create_app(settings: Settings, *, readiness: Readiness | None = None, extender: ExtenderCalls | None = None,
               metrics: RouteMetrics | None = None, dashboard: object = None, quotas: QuotaBook | None = None,
               events: PodEvents | None = None) -> Flask:
    """Build the app with its blueprints; collaborators left as None disable the routes that need them (``quotas``
    None: the webhook checks no namespace quota; ``events`` None: admission warnings are not recorded as events)."""
    from hami_web.routes import extender as extender_routes
    from hami_web.routes import health, webhook

    app = Flask("hami_web")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    json_provider = DefaultJSONProvider(app)
    json_provider.sort_keys = False
    app.json = json_provider
    app.extensions[EXTENSION_KEY] = Services(settings=settings, readiness=readiness, extender=extender,
                                             metrics=metrics, dashboard=dashboard, quotas=quotas,
                                             events=events)
    app.register_blueprint(health.blueprint)
    app.register_blueprint(webhook.blueprint)
    app.register_blueprint(extender_routes.blueprint)
    if metrics is not None:
        from hami_web.routes import metrics as metrics_routes

        app.register_blueprint(metrics_routes.blueprint)
    if dashboard is not None:
        from hami_web.dashboard import views as dashboard_views

        app.register_blueprint(dashboard_views.blueprint)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    # Flask's documented way to wrap the WSGI app (middleware); the checker sees a method being replaced.
    app.wsgi_app = RoutesByListener(app.wsgi_app)  # type: ignore[method-assign]
    return app


def _http_error(error: HTTPException) -> tuple[Response, int]:
    log.info("%s %s: HTTP %s: %s", request.method, request.path, error.code, error.description)
    return jsonify(error=error.name, message=error.description), error.code or 500


def _unexpected_error(error: Exception) -> tuple[Response, int]:
    # Logged with the traceback for the operator; the client gets a message, never the stack trace.
    log.exception("%s %s failed", request.method, request.path)
    return jsonify(error="Internal Server Error", message=f"{type(error).__name__}: {error}"), 500
