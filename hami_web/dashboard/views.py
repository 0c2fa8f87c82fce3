"""The ``ui`` blueprint: four read-only pages under ``/ui/`` and their JSON twins under ``/ui/api/``.

Each page and its twin call the same builder in `hami_web.dashboard.data`, so a script reading the JSON sees
exactly what a person sees. Only GET exists: no page changes anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from flask import Blueprint, Response, jsonify, redirect, render_template, request
from werkzeug.wrappers import Response as BaseResponse

from hami_web.dashboard import auth, data
from hami_web.services import services

blueprint = Blueprint("ui", __name__, url_prefix="/ui", template_folder="templates", static_folder="static")

Builder = Callable[[data.DashboardSources, Any], dict[str, Any]]

# The pages: URL path under /ui/, template, builder, and the title in the navigation bar.
PAGES: dict[str, tuple[str, Builder, str]] = {
    "overview": ("overview.html", data.overview, "Overview"),
    "pending": ("pending.html", data.pending, "Pending GPU pods"),
    "decisions": ("decisions.html", data.decisions, "Decisions"),
    "whatif": ("whatif.html", data.whatif, "What-if"),
}

# No script, style or image from anywhere but the dashboard itself; no framing by other sites.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _sources() -> data.DashboardSources:
    return cast(data.DashboardSources, services().dashboard)


@blueprint.before_request
def _check_token() -> tuple[Response, int] | None:
    """When the dashboard is exposed beyond loopback, only a bearer token allowed to see pods and nodes passes."""
    sources = _sources()
    if not sources.settings.serving.ui_expose:
        return None
    refusal = auth.check_bearer(sources.kube, request.headers.get("Authorization", ""), sources.answers)
    if refusal is None:
        return None
    response = jsonify(error="Unauthorized" if refusal.status == 401 else "Forbidden", message=refusal.message)
    if refusal.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="hami-web dashboard"'
    return response, refusal.status


@blueprint.after_request
def _secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


@blueprint.get("")
def root() -> BaseResponse:
    """``/ui`` → ``/ui/``."""
    return redirect("/ui/", code=308)


def _page(name: str) -> tuple[str, int]:
    template, builder, _ = PAGES[name]
    try:
        page = builder(_sources(), request.args)
    except data.QueryError as error:
        return render_template("error.html", page=name, pages=PAGES, message=str(error)), 400
    return render_template(template, page=name, pages=PAGES, data=page, args=request.args), 200


def _api(name: str) -> tuple[Response, int]:
    _, builder, _ = PAGES[name]
    try:
        return jsonify(builder(_sources(), request.args)), 200
    except data.QueryError as error:
        return jsonify(error="Bad Request", message=str(error)), 400


@blueprint.get("/")
def overview_page() -> tuple[str, int]:
    """Totals, the GPU heatmap and the free-memory histograms."""
    return _page("overview")


@blueprint.get("/pending")
def pending_page() -> tuple[str, int]:
    """GPU pods that fit no node, and why."""
    return _page("pending")


@blueprint.get("/decisions")
def decisions_page() -> tuple[str, int]:
    """The last filter and bind decisions and their latency."""
    return _page("decisions")


@blueprint.get("/whatif")
def whatif_page() -> tuple[str, int]:
    """How many pods of a shape fit now, and where."""
    return _page("whatif")


@blueprint.get("/api/<name>")
def api(name: str) -> tuple[Response, int]:
    """The JSON twin of page ``name``, with the same query parameters."""
    if name not in PAGES:
        return jsonify(error="Not Found", message=f"no dashboard API {name!r} (try {', '.join(PAGES)})"), 404
    return _api(name)


@blueprint.app_template_filter("mib")
def _mib(value: int) -> str:
    """``81920`` → ``80 GiB``; small values stay in MiB."""
    return f"{value / 1024:,.0f} GiB" if value >= 10 * 1024 else f"{value:,} MiB"


@blueprint.app_template_filter("percent")
def _percent(used: int, total: int) -> str:
    return f"{used / total:.0%}" if total else "-"


@blueprint.app_template_filter("duration")
def _duration(seconds: float) -> str:
    """``75`` → ``1m15s``, as kubectl shows ages."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
