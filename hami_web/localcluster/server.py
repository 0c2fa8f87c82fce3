"""The WSGI application: kube-apiserver's REST paths over the `Store`, JSON only.

Plain werkzeug rather than Flask: the routes are kube's path grammar (``/api/v1/namespaces/{ns}/{plural}/
{name}/{subresource}``), parsed once, and watches are chunked responses fed by a generator that sleeps on
the store's condition with a short timeout, so it notices new writes, its ``timeoutSeconds`` and the
server stopping without holding a thread forever. A list with ``limit`` keeps its sorted snapshot (references
to immutable objects) for its ``continue`` tokens, which answer 410 once the history has moved past the
snapshot's resourceVersion, as etcd compaction makes them expire on the real server.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from werkzeug.wrappers import Request, Response

from hami_web.localcluster import selectors
from hami_web.localcluster.errors import (
    ApiError,
    bad_request,
    conflict,
    invalid,
    success_status,
    too_large_resource_version,
)
from hami_web.localcluster.faults import cut_after, dripping, silent_for
from hami_web.localcluster.httpserver import RESET_CONNECTION
from hami_web.localcluster.resources import RESOURCE_TYPES, ResourceType, resource_type
from hami_web.localcluster.reviews import review_access, review_own_access, review_token
from hami_web.localcluster.store import Change, Expired, Store

JsonObject = dict[str, Any]

SUBRESOURCES = {"pods": ("binding", "status"), "nodes": ("status",), "poddisruptionbudgets": ("status",)}
# Without timeoutSeconds the real server ends a watch after 30-60 minutes; one bound is enough here.
DEFAULT_WATCH_TIMEOUT_SECONDS = 1800.0
POLL_SECONDS = 0.05
# Reviews are created and answered, never stored (kube-apiserver's TokenReview and SubjectAccessReview).
REVIEWS: dict[tuple[str, ...], Callable[[Store, Mapping[str, Any]], JsonObject]] = {
           ("apis", "authentication.k8s.io", "v1", "tokenreviews"): review_token,
           ("apis", "authorization.k8s.io", "v1", "subjectaccessreviews"): review_access}
SELF_ACCESS_REVIEW = ("apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews")
# Paginated lists whose continue tokens stay valid at once (oldest forgotten first).
MAX_LIST_SNAPSHOTS = 16
SnapshotQuery = tuple[str, str | None, str, str]  # plural, namespace, label selector, field selector
VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-hami-web-localcluster", "platform": "linux/amd64",
           "goVersion": "go1.22", "compiler": "gc", "buildDate": "2024-01-01T00:00:00Z", "gitCommit": "",
           "gitTreeState": "clean"}


@dataclass(frozen=True, slots=True)
class Target:
    """What a request path names: a collection (``name`` None), an object, or an object's subresource."""

    rt: ResourceType
    namespace: str | None
    name: str | None = None
    subresource: str | None = None


# What an injected fault does to a matching request (see `LocalCluster.inject_failure`).
FAULT_STATUS = "status"  # answer a Status with ``status``, change nothing
FAULT_DELAY = "delay"  # wait ``seconds``, then serve the request normally (a stalled API server)
FAULT_DRIP = "drip"  # serve normally, but send the body one byte every ``seconds``
FAULT_RESET = "reset"  # apply the request, then close the connection without answering
FAULT_CUT = "cut"  # a watch: send ``events`` events, then drop the connection mid-stream
# A watch: hold the stream open and send nothing (no event, no bookmark) for ``seconds`` (0: until the watch ends),
# as a proxy that stops forwarding does; the events of that time are sent afterwards, in order.
FAULT_SILENT = "silent"
# A list "not older than" a resourceVersion: 504 Too large resource version, as kube-apiserver answers when its watch
# cache has not caught up with that version within 3 s (no write of the kind since, and no progress notification
# from etcd, as with etcd before 3.4.25/3.5.8). A list without a resourceVersion is served.
FAULT_LAG = "lag"
FAULT_MODES = (FAULT_STATUS, FAULT_DELAY, FAULT_DRIP, FAULT_RESET, FAULT_CUT, FAULT_SILENT, FAULT_LAG)
WATCH_FAULTS = (FAULT_CUT, FAULT_SILENT)

# How the server answers a streaming list (``watch=1&sendInitialEvents=true``), see `ApiServer.watch_list`.
WATCH_LIST_ON = "on"  # kube-apiserver with the WatchList feature: initial events, then the end bookmark
WATCH_LIST_REFUSE = "refuse"  # the feature off: 422 Invalid, as kube-apiserver's validation answers
WATCH_LIST_IGNORE = "ignore"  # a server that predates the parameters: a plain watch, no end bookmark
WATCH_LIST_MODES = (WATCH_LIST_ON, WATCH_LIST_REFUSE, WATCH_LIST_IGNORE)
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(slots=True)
class InjectedFailure:
    """The next ``remaining`` requests matching these fields get the fault ``mode`` (default: ``status``)."""

    method: str
    resource: str
    name: str | None
    subresource: str | None
    status: int
    remaining: int
    mode: str = FAULT_STATUS
    seconds: float = 0.0
    events: int = 0
    skip: int = 0
    watch: bool | None = None


@dataclass
class ApiServer:
    """WSGI callable serving `store`; also keeps the request log and the injected failures."""

    store: Store
    bookmark_interval_seconds: float = 2.0
    watch_list: str = WATCH_LIST_ON
    graceful_pod_deletion: bool = False  # see `Store.delete`
    stopping: threading.Event = field(default_factory=threading.Event)
    request_log: list[tuple[str, str]] = field(default_factory=list)
    request_queries: list[dict[str, str]] = field(default_factory=list)
    failures: list[InjectedFailure] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _snapshots: dict[tuple[SnapshotQuery, int], list[JsonObject]] = field(default_factory=dict)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        with self._lock:
            self.request_log.append((request.method, request.path))
            self.request_queries.append(dict(request.args.items()))
        fault: InjectedFailure | None = None
        try:
            response, fault = self._dispatch(request)
        except ApiError as error:
            response = _json(error.status_body(), error.code)
        if fault is not None and fault.mode == FAULT_RESET:
            environ[RESET_CONNECTION] = True
        elif fault is not None and fault.mode == FAULT_DRIP:
            response = dripping(response, fault.seconds, self.stopping)
        elif fault is not None and fault.mode == FAULT_CUT:
            response.response = cut_after(response.response, fault.events, environ)
        elif fault is not None and fault.mode == FAULT_SILENT:
            response.response = silent_for(response.response, fault.seconds, self.stopping)
        return response(environ, start_response)

    # -- routing ----------------------------------------------------------------------------------

    def _dispatch(self, request: Request) -> tuple[Response, InjectedFailure | None]:
        parts = [part for part in request.path.split("/") if part]
        discovery = _discovery(parts)
        if discovery is not None:
            return _json(discovery, 200), None
        review = REVIEWS.get(tuple(parts))
        if review is not None:
            if request.method != "POST":
                raise ApiError(405, f"the server does not allow this method on the requested resource ({parts[-1]})")
            return _json(review(self.store, _body(request)), 201), None
        if tuple(parts) == SELF_ACCESS_REVIEW:
            if request.method != "POST":
                raise ApiError(405, "the server does not allow this method on the requested resource "
                                    "(selfsubjectaccessreviews)")
            return _json(review_own_access(self.store, _body(request), request.headers.get("Authorization", "")),
                         201), None
        target = _parse_target(parts)
        if target is None:
            raise ApiError(404, "the server could not find the requested resource")
        watch = request.args.get("watch", "").lower() in ("true", "1")
        fault = self._take_fault(request.method, target, watch=watch)
        if fault is not None and fault.mode == FAULT_STATUS:
            self._raise_injected(fault, request.method, target)
        if fault is not None and fault.mode == FAULT_DELAY:
            self.stopping.wait(fault.seconds)
        if fault is not None and fault.mode == FAULT_LAG and request.args.get("resourceVersion", "") not in ("", "0"):
            requested = request.args["resourceVersion"]
            raise too_large_resource_version(requested, int(requested) - 1 if requested.isdigit() else 0)
        if target.subresource == "binding":
            return self._bind(request, target), fault
        if target.name is None:
            return self._collection(request, target), fault
        return self._object(request, target), fault

    def _take_fault(self, method: str, target: Target, *, watch: bool) -> InjectedFailure | None:
        with self._lock:
            for failure in self.failures:
                # A cut or a silence is for watches, everything else for the rest, unless the fault names which.
                for_watch = failure.mode in WATCH_FAULTS if failure.watch is None else failure.watch
                if for_watch != watch:
                    continue
                if failure.remaining > 0 and failure.method == method and failure.resource == target.rt.plural \
                        and failure.name in (None, target.name) and failure.subresource == target.subresource:
                    if failure.skip > 0:
                        failure.skip -= 1
                        return None
                    failure.remaining -= 1
                    return failure
        return None

    def _raise_injected(self, failure: InjectedFailure, method: str, target: Target) -> None:
        name = target.name or ""
        if failure.status == 409:
            raise conflict(target.rt.plural, name, "the object has been modified; please apply your changes to "
                                                   "the latest version and try again (injected)", target.rt.group)
        raise ApiError(failure.status, f"injected failure for {method} {target.rt.plural} {name}".rstrip(),
                       name=name, kind=target.rt.plural, group=target.rt.group)

    def _collection(self, request: Request, target: Target) -> Response:
        rt = target.rt
        if request.method == "GET":
            if request.args.get("watch", "").lower() in ("true", "1"):
                return self._watch(request, target)
            return self._list(request, target)
        if request.method == "POST" and (target.namespace is not None or not rt.namespaced):
            created = self.store.create(rt, target.namespace or "", _body(request))
            return _json(created, 201)
        raise ApiError(405, f"the server does not allow this method on the requested resource ({rt.plural})")

    def _object(self, request: Request, target: Target) -> Response:
        rt, namespace, name = target.rt, target.namespace or "", target.name or ""
        if request.method == "GET":
            return _json(self.store.get(rt, namespace, name), 200)
        if request.method == "PUT":
            body = _body(request)
            return _json(self.store.replace(rt, namespace, name, body, subresource=target.subresource), 200)
        if request.method == "PATCH":
            patched = self.store.patch(rt, namespace, name, request.headers.get("Content-Type"),
                                       request.get_data(), subresource=target.subresource)
            return _json(patched, 200)
        if request.method == "DELETE" and target.subresource is None:
            options = _body(request) if request.get_data() else {}
            if "gracePeriodSeconds" in request.args:
                try:
                    options["gracePeriodSeconds"] = int(request.args["gracePeriodSeconds"])
                except ValueError:
                    raise bad_request(f"gracePeriodSeconds: {request.args['gracePeriodSeconds']!r} is not an "
                                      f"integer") from None
            deleted = self.store.delete(rt, namespace, name, options, graceful_pods=self.graceful_pod_deletion)
            if rt.delete_returns_object:
                return _json(deleted, 200)
            return _json(success_status(200, name=name, kind=rt.plural, uid=deleted["metadata"]["uid"]), 200)
        raise ApiError(405, f"the server does not allow this method on the requested resource ({rt.plural})")

    def _bind(self, request: Request, target: Target) -> Response:
        if request.method != "POST":
            raise ApiError(405, "the server does not allow this method on the requested resource (pods/binding)")
        self.store.bind(target.rt, target.namespace or "", target.name or "", _body(request))
        return _json(success_status(201), 201)

    # -- list and watch ---------------------------------------------------------------------------

    def _list(self, request: Request, target: Target) -> Response:
        rt = target.rt
        limit = _limit(request.args.get("limit", ""))
        token = request.args.get("continue", "")
        query = (rt.plural, target.namespace, request.args.get("labelSelector", ""),
                 request.args.get("fieldSelector", ""))
        if token:
            items, resource_version, start = self._continued(query, token)
        else:
            items, resource_version = self.store.list(rt, target.namespace, _predicate(request, rt))
            start = 0
            if limit:
                self._remember_snapshot(query, resource_version, items)
        page = items[start:start + limit] if limit else items
        metadata: JsonObject = {"resourceVersion": str(resource_version)}
        if limit and start + limit < len(items):
            metadata["continue"] = _encode_continue(resource_version, start + limit)
            metadata["remainingItemCount"] = len(items) - start - limit
        # Items of a typed list carry no kind/apiVersion on the wire; the list does.
        stripped = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in page]
        return _json({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": metadata,
                      "items": stripped}, 200)

    def _remember_snapshot(self, query: SnapshotQuery, resource_version: int, items: list[JsonObject]) -> None:
        """Keep a paginated list's items (references to immutable objects) for its continue tokens."""
        with self._lock:
            self._snapshots[(query, resource_version)] = items
            while len(self._snapshots) > MAX_LIST_SNAPSHOTS:
                del self._snapshots[next(iter(self._snapshots))]

    def _continued(self, query: SnapshotQuery, token: str) -> tuple[list[JsonObject], int, int]:
        """The snapshot a continue token points into; 410 once the history has moved past its version.

        The real server reads the next chunk from etcd at the token's revision, which works until that
        revision is compacted; the kept history plays the role of etcd's uncompacted window here.
        """
        resource_version, start = _decode_continue(token)
        with self._lock:
            items = self._snapshots.get((query, resource_version))
        if items is None or resource_version < self.store.oldest_resource_version:
            raise ApiError(410, "The provided continue parameter is too old to display a consistent list result. "
                                "You can start a new list without the continue parameter.", reason="Expired")
        return items, resource_version, start

    def _watch(self, request: Request, target: Target) -> Response:
        predicate = _predicate(request, target.rt)
        since_text = request.args.get("resourceVersion", "")
        if since_text not in ("", "0") and not since_text.isdigit():
            raise bad_request(f"invalid resource version: {since_text!r}")
        timeout_text = request.args.get("timeoutSeconds", "")
        try:
            timeout_seconds = float(timeout_text) if timeout_text else DEFAULT_WATCH_TIMEOUT_SECONDS
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds: {timeout_text!r}") from None
        bookmarks = request.args.get("allowWatchBookmarks", "").lower() in ("true", "1")
        initial_events = self._initial_events(request)
        since = int(since_text) if since_text not in ("", "0") else None
        stream = self._watch_stream(target, predicate, since=since, timeout_seconds=timeout_seconds,
                                    bookmarks=bookmarks, initial_events=initial_events)
        return Response(stream, status=200, content_type="application/json", direct_passthrough=True)

    def _initial_events(self, request: Request) -> bool:
        """Whether a watch is a streaming list, checked as kube-apiserver v1.32 validates watch options (422 Invalid;
        without ``allowWatchBookmarks`` it accepts one and never sends the end bookmark)."""
        send_text = request.args.get("sendInitialEvents", "").lower()
        match = request.args.get("resourceVersionMatch", "")
        if self.watch_list == WATCH_LIST_IGNORE or (not send_text and not match):
            return False
        causes = []
        if send_text not in ("", "true", "false", "1", "0"):
            raise bad_request(f"invalid sendInitialEvents: {send_text!r}")
        if not send_text:
            causes.append("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
                          "sendInitialEvents is provided")
        elif match != "NotOlderThan":
            causes.append("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch "
                          "to NotOlderThan")
        if send_text and self.watch_list == WATCH_LIST_REFUSE:
            causes.append("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the "
                          "WatchList feature gate is enabled")
        if causes:
            raise invalid("ListOptions.meta.k8s.io", "", causes)
        return send_text in ("true", "1")

    def _watch_stream(self, target: Target, predicate: selectors.Predicate, *, since: int | None,
                      timeout_seconds: float, bookmarks: bool, initial_events: bool = False) -> Iterator[bytes]:
        """Events after ``since``; without it (or with ``initial_events``) the current objects first, as ADDED.

        A streaming list (``initial_events``) ends its initial events with a bookmark annotated
        `INITIAL_EVENTS_END` carrying their resourceVersion; the store is always current, so "not older than"
        any version it has handed out is the current state.
        """
        rt, store = target.rt, self.store
        deadline = time.monotonic() + timeout_seconds
        yield b""  # sends the headers now, as the real server does, so the client's call returns
        if since is None or initial_events:
            items, cursor = store.list(rt, target.namespace, predicate)
            yield b"".join(_event_line("ADDED", item) for item in items)
            if initial_events and bookmarks:
                yield _event_line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {
                    "resourceVersion": str(cursor), "annotations": {INITIAL_EVENTS_END: "true"}}})
        else:
            cursor = since
        last_sent = time.monotonic()
        while not self.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            changes: list[Change] = []
            expired: Expired | None = None
            with store.condition:
                try:
                    changes = store.changes_since(cursor)
                except Expired as error:
                    expired = error
                else:
                    if not changes:
                        store.condition.wait(min(POLL_SECONDS, remaining))
            if expired is not None:
                yield _event_line("ERROR", ApiError(410, str(expired), reason="Expired").status_body())
                return
            if changes:
                cursor = changes[-1].resource_version
                lines = [_event_line(kind, obj) for kind, obj in _visible(changes, target, predicate)]
                if lines:
                    last_sent = time.monotonic()
                    yield b"".join(lines)
                    continue
            if bookmarks and time.monotonic() - last_sent >= self.bookmark_interval_seconds:
                last_sent = time.monotonic()
                yield _event_line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version,
                                               "metadata": {"resourceVersion": str(cursor)}})


def _visible(changes: list[Change], target: Target, predicate: selectors.Predicate) -> Iterator[tuple[str, Any]]:
    """The events a filtered watch reports: moving into the selection is ADDED, out of it DELETED."""
    for change in changes:
        if change.resource != target.rt.plural:
            continue
        if target.namespace is not None and change.object["metadata"].get("namespace") != target.namespace:
            continue
        now = predicate(change.object)
        before = change.previous is not None and predicate(change.previous)
        if change.type == "MODIFIED":
            if now and before:
                yield "MODIFIED", change.object
            elif now:
                yield "ADDED", change.object
            elif before:
                yield "DELETED", change.object
        elif now:
            yield change.type, change.object


def _limit(text: str) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise bad_request(f"invalid limit: {text!r}")
    return int(text)


def _encode_continue(resource_version: int, start: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, int]:
    try:
        body = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(body["rv"]), int(body["start"])
    except (ValueError, KeyError, TypeError):
        raise bad_request(f"continue key is not valid: {token!r}") from None


def _event_line(kind: str, obj: JsonObject) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _predicate(request: Request, rt: ResourceType) -> selectors.Predicate:
    labels = selectors.parse_label_selector(request.args.get("labelSelector"))
    fields = selectors.parse_field_selector(request.args.get("fieldSelector"), rt.field_selectors)
    return lambda obj: labels(obj) and fields(obj)


def _body(request: Request) -> JsonObject:
    try:
        body = json.loads(request.get_data() or b"null")
    except ValueError as error:
        raise bad_request(f"error decoding request body: {error}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body is not a JSON object")
    return body


def _json(body: Any, status: int) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, content_type="application/json")


def _parse_target(parts: list[str]) -> Target | None:
    """Map a path to its target, or None for a path kube-apiserver would not serve (404)."""
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rt = RESOURCE_TYPES.get(rest[0])
    if rt is None or rt.group != group or rt.version != version:
        return None
    if namespace is not None and not rt.namespaced:
        return None
    if len(rest) >= 2 and rt.namespaced and namespace is None:
        return None
    name = rest[1] if len(rest) >= 2 else None
    subresource = rest[2] if len(rest) == 3 else None
    if subresource is not None and subresource not in SUBRESOURCES.get(rt.plural, ()):
        return None
    return Target(rt=resource_type(rt.plural), namespace=namespace, name=name, subresource=subresource)


def _discovery(parts: list[str]) -> JsonObject | None:
    """Minimal discovery documents for ``/api``, ``/apis``, ``/version`` and the group versions."""
    if parts == ["version"]:
        return VERSION
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
    groups = sorted({(rt.group, rt.version) for rt in RESOURCE_TYPES.values() if rt.group})
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": group, "versions": [{"groupVersion": f"{group}/{version}", "version": version}],
             "preferredVersion": {"groupVersion": f"{group}/{version}", "version": version}}
            for group, version in groups]}
    if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis" and (parts[1], parts[2]) in groups):
        group = "" if parts[0] == "api" else parts[1]
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "v1" if not group else f"{parts[1]}/{parts[2]}",
                "resources": [{"name": rt.plural, "singularName": rt.kind.lower(), "namespaced": rt.namespaced,
                               "kind": rt.kind, "verbs": ["create", "delete", "get", "list", "patch", "update",
                                                          "watch"]}
                              for rt in RESOURCE_TYPES.values() if rt.group == group]}
    return None
