"""`LocalCluster`: the in-process Kubernetes API server that tests, the demo and the simulator start.

It owns the `Store` and serves `ApiServer` on 127.0.0.1 with a threaded keep-alive server (one thread per
connection, so an open watch never blocks other requests). The methods besides start/stop are for tests:
seeding state, reading it back without going through HTTP, failing chosen requests to exercise retry paths,
and a log of what was called.
"""

from __future__ import annotations

import builtins  # a class below has a method named `list`, which shadows the builtin in its annotations
import json
import logging
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from hami_web.localcluster.errors import ApiError
from hami_web.localcluster.httpserver import WsgiHttpServer
from hami_web.localcluster.objects import clone_json
from hami_web.localcluster.resources import resource_for_kind, resource_type
from hami_web.localcluster.server import (
    FAULT_MODES,
    FAULT_STATUS,
    WATCH_LIST_MODES,
    WATCH_LIST_ON,
    ApiServer,
    InjectedFailure,
)
from hami_web.localcluster.store import Store

JsonObject = dict[str, Any]

log = logging.getLogger(__name__)

DEFAULT_HISTORY_SIZE = 10_000


class LocalCluster:
    """A kube-apiserver stand-in with real state: ``with LocalCluster() as cluster: Kube.for_url(cluster.url)``."""

    def __init__(self, objects: list[JsonObject] | None = None, *, history_size: int = DEFAULT_HISTORY_SIZE,
                 bookmark_interval_seconds: float = 2.0, watch_list: str = WATCH_LIST_ON,
                 graceful_pod_deletion: bool = False) -> None:
        """``watch_list``: how streaming lists are answered (``on``; ``refuse``: 422 as with the WatchList feature
        off; ``ignore``: a plain watch, as a server that predates them); `watch_list` changes it later.
        ``graceful_pod_deletion``: deleting a pod on a node with a grace period only marks it terminating, as
        kube-apiserver does (no kubelet here: a delete with grace 0 ends it); off, every delete is at once."""
        if watch_list not in WATCH_LIST_MODES:
            raise ValueError(f"unknown watch_list {watch_list!r} (expected one of {', '.join(WATCH_LIST_MODES)})")
        self._store = Store(history_size=history_size)
        self._api = ApiServer(self._store, bookmark_interval_seconds=bookmark_interval_seconds,
                              watch_list=watch_list, graceful_pod_deletion=graceful_pod_deletion)
        self._server: WsgiHttpServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        if objects:
            self.load(objects)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> str:
        """Serve on a free 127.0.0.1 port from a daemon thread; returns the base URL."""
        if self._server is not None:
            return self.url
        self._api.stopping.clear()
        server = WsgiHttpServer(("127.0.0.1", 0), self._api)
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_port}"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"localcluster-{server.server_port}", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving; open watch streams end within a poll interval."""
        if self._server is None:
            return
        self._api.stopping.set()
        with self._store.condition:
            self._store.condition.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- seeding and inspection -------------------------------------------------------------------

    def load(self, objects: list[JsonObject]) -> None:
        """Create each object (wire JSON with ``kind``) as a POST would, keeping a given pod status."""
        for obj in objects:
            rt = resource_for_kind(str(obj.get("kind", "")))
            namespace = (obj.get("metadata") or {}).get("namespace") or ("default" if rt.namespaced else "")
            self._store.create(rt, namespace, clone_json(obj))

    def load_file(self, path: str | Path) -> None:
        """Load a JSON or YAML file: a ``kind: List`` with ``items``, or (YAML) several documents."""
        text = Path(path).read_text()
        if str(path).endswith(".json"):
            documents = [json.loads(text)]
        else:
            documents = [doc for doc in yaml.safe_load_all(text) if doc]
        objects: list[JsonObject] = []
        for document in documents:
            if str(document.get("kind", "")).endswith("List") and "items" in document:
                objects.extend(document["items"] or [])
            else:
                objects.append(document)
        self.load(objects)

    def get(self, resource: str, name: str, namespace: str | None = None) -> JsonObject | None:
        """A deep copy of the stored object, or None."""
        rt = resource_type(resource)
        key_namespace = (namespace or "default") if rt.namespaced else ""
        try:
            return clone_json(self._store.get(rt, key_namespace, name))
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    def list(self, resource: str, namespace: str | None = None) -> list[JsonObject]:
        """Deep copies of the stored objects of a type (one namespace, or all when None)."""
        items, _ = self._store.list(resource_type(resource), namespace)
        return [clone_json(item) for item in items]

    @property
    def watch_list(self) -> str:
        """How streaming lists are answered now (``on``, ``refuse`` or ``ignore``; see the constructor)."""
        return self._api.watch_list

    @watch_list.setter
    def watch_list(self, mode: str) -> None:
        if mode not in WATCH_LIST_MODES:
            raise ValueError(f"unknown watch_list {mode!r} (expected one of {', '.join(WATCH_LIST_MODES)})")
        self._api.watch_list = mode

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return self._store.resource_version

    def inject_failure(self, method: str, resource: str, *, name: str | None = None, status: int = 409,
                       count: int = 1, subresource: str | None = None, mode: str = FAULT_STATUS,
                       seconds: float = 0.0, events: int = 0, skip: int = 0, watch: bool | None = None) -> None:
        """Give the next ``count`` matching requests a fault; by default a ``Status`` of ``status``, changing nothing.

        The first ``skip`` matching requests are served normally (fail the second page of a list with
        ``skip=1``). ``subresource`` None matches requests to the object or collection itself, not its subresources
        (fail a binding with ``subresource="binding"``). Other modes: ``delay`` (wait ``seconds``, then serve),
        ``drip`` (the body one byte every ``seconds``), ``reset`` (apply, then drop the connection unanswered),
        ``cut`` (a watch: ``events`` events, then the connection drops mid-stream), ``silent`` (a watch: held open
        with nothing sent for ``seconds``, 0 for good; what happened meanwhile follows). A cut or a silence matches
        watch requests only and every other mode requests that are not watches, unless ``watch`` says which.
        """
        resource_type(resource)
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {mode!r} (expected one of {', '.join(FAULT_MODES)})")
        with self._api._lock:
            self._api.failures.append(InjectedFailure(method.upper(), resource, name, subresource, status, count,
                                                      mode=mode, seconds=seconds, events=events, skip=skip,
                                                      watch=watch))

    def clear_failures(self) -> None:
        """Forget every injected fault that has not been used up (the API server is healthy again)."""
        with self._api._lock:
            self._api.failures.clear()

    @property
    def request_log(self) -> builtins.list[tuple[str, str]]:
        """``(method, path)`` of every request served so far (path without the query string)."""
        with self._api._lock:
            return list(self._api.request_log)

    def logged_requests(self) -> builtins.list[tuple[str, str, dict[str, str]]]:
        """``(method, path, query)`` of every request served so far, in order (watches carry ``watch`` in query)."""
        with self._api._lock:
            return list(zip(*zip(*self._api.request_log, strict=True), self._api.request_queries, strict=True))

    def requests(self, method: str, path: str) -> builtins.list[dict[str, str]]:
        """The query parameters of every ``method path`` request so far, in order (e.g. ``limit``, ``watch``)."""
        with self._api._lock:
            return [query for (logged_method, logged_path), query
                    in zip(self._api.request_log, self._api.request_queries, strict=True)
                    if (logged_method, logged_path) == (method.upper(), path)]
