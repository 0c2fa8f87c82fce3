"""The collaborators one app instance works with, handed to `create_app` and reached from the routes.

Routes fetch them with `services()` instead of importing globals, so tests can build an app around an
in-process API server, or around no cluster at all. This module sits below `routes`, `dashboard` and `server`
(the layers in README's Architecture, checked by `lint-imports`) so that the blueprints reach the collaborators
without importing the server that assembles them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from flask import current_app

from hami_web.settings import Settings

EXTENSION_KEY = "hami_web"


class Readiness(Protocol):
    """Something that can say whether the service may take scheduling traffic."""

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``; the reason says what is missing when not ready."""
        ...


@dataclass(slots=True)
class Services:
    """Everything the routes need; fields are None when that part is not running (e.g. webhook-only tests)."""

    settings: Settings
    readiness: Readiness | None = None
    extender: Any = None
    metrics: Any = None
    dashboard: Any = None


def services() -> Services:
    """The `Services` of the app handling the current request."""
    return current_app.extensions[EXTENSION_KEY]
