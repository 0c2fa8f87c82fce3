"""``/metrics``: Prometheus text exposition of the app's registry."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST

from hami_web.services import services

blueprint = Blueprint("metrics", __name__)


@blueprint.get("/metrics")
def metrics() -> Response:
    """Current metrics; cluster gauges are computed from the cache now."""
    registry = services().metrics
    assert registry is not None, "the blueprint is registered only with metrics"
    return Response(registry.exposition(), mimetype=None, content_type=CONTENT_TYPE_LATEST)
