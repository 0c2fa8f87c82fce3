"""Kubernetes adapter: the only package that uses the official ``kubernetes`` client.

Split by concern: `errors` (typed `KubeError`s, so callers never import the client to tell a 409 from a 404
or a 422), `deadlines` (one budget shared by the API calls of a request), `config` (kubeconfig merged as kubectl
does, or in-cluster), `transport` (sending a request and decoding its answer), `watches` and `client` (`Kube`,
the requests we make). Import from here; the modules are the layout, not the interface.
"""

from hami_web.kube.client import LIST_PAGE_SIZE, Kube, ListPage, join_pages
from hami_web.kube.config import resolve_client
from hami_web.kube.deadlines import counting_calls, deadline, deadline_left_seconds
from hami_web.kube.errors import (
    ConflictError,
    GoneError,
    InvalidError,
    KubeError,
    NotFoundError,
    WatchSilentError,
)
from hami_web.kube.transport import JsonObject
from hami_web.kube.watches import INITIAL_EVENTS_END, WatchEvent

__all__ = [
    "INITIAL_EVENTS_END",
    "LIST_PAGE_SIZE",
    "ConflictError",
    "GoneError",
    "InvalidError",
    "JsonObject",
    "Kube",
    "KubeError",
    "ListPage",
    "NotFoundError",
    "WatchEvent",
    "WatchSilentError",
    "counting_calls",
    "deadline",
    "deadline_left_seconds",
    "join_pages",
    "resolve_client",
]
