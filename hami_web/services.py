"""The collaborators one app instance works with, handed to `create_app` and reached from the routes.

Routes fetch them with `services()` instead of importing globals, so tests can build an app around an
in-process API server, or around no cluster at all. This module sits below `routes`, `dashboard` and `server`
(the layers in docs/architecture.md#layers, checked by `lint-imports`) so that the blueprints reach the collaborators
without importing the server that assembles them; each collaborator is typed by a protocol of what the routes call,
so a route never imports the cache or the Kubernetes client behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

from flask import current_app

from hami_web.core.quota import QuotaBook
from hami_web.extender.outcomes import (
    BindOutcome,
    BindRequest,
    FilterOutcome,
    FilterRequest,
    PreemptOutcome,
    PreemptRequest,
    UnreadableArgs,
)
from hami_web.settings import Settings

EXTENSION_KEY = "hami_web"


class Readiness(Protocol):
    """Something that can say whether the service may take scheduling traffic."""

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``; the reason says what is missing when not ready."""
        ...


class ExtenderCalls(Protocol):
    """What ``/filter``, ``/bind`` and the health routes call (`hami_web.extender.service.Extender`)."""

    def filter(self, request: FilterRequest | UnreadableArgs) -> FilterOutcome:
        """Decide one filter."""
        ...

    def bind(self, request: BindRequest | UnreadableArgs) -> BindOutcome:
        """Decide one bind."""
        ...

    def preempt(self, request: PreemptRequest | UnreadableArgs) -> PreemptOutcome:
        """Answer one preempt call (``ProcessPreemption``)."""
        ...

    def activity(self) -> str:
        """When the extender was last called (which replica is active)."""
        ...

    def leadership(self) -> str | None:
        """Under ``--leader-elect``, leader or standby and who holds the Lease (no API call); else None."""
        ...


class RouteMetrics(Protocol):
    """What the routes report to and serve from the metrics (`hami_web.metrics.Metrics`)."""

    def observe_request(self, route: str, seconds: float) -> None:
        """Record one call's latency."""
        ...

    def observe_webhook(self, seconds: float, allowed: bool) -> None:
        """Count an admission review and its latency."""
        ...

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        ...


class PodEvents(Protocol):
    """Records an Event about a pod off the request path (the extender's `EventRecorder`): the webhook's face of it."""

    def record(self, *, namespace: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False, series: str = "") -> None:
        """Queue the event."""
        ...


@dataclass(slots=True)
class Services:
    """Everything the routes need; fields are None when that part is not running (e.g. webhook-only tests)."""

    settings: Settings
    readiness: Readiness | None = None
    extender: ExtenderCalls | None = None
    metrics: RouteMetrics | None = None
    # The dashboard's sources (`hami_web.dashboard.data.DashboardSources`: the dashboard is a layer above this one).
    dashboard: object = None
    quotas: QuotaBook | None = None  # the namespaces' device quotas the webhook checks (the cache)
    events: PodEvents | None = None  # where the webhook records an event about a pod admitted with warnings


def services() -> Services:
    """The `Services` of the app handling the current request."""
    return cast(Services, current_app.extensions[EXTENSION_KEY])
