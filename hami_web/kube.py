"""Kubernetes adapter: the only module that uses the official ``kubernetes`` client.

Objects travel as plain JSON dicts (the wire form): deserialising thousands of nodes and pods into the
client's models on every refresh would cost more than the scheduling itself, and our code reads
annotations, not typed fields. Errors from the API become `KubeError` subclasses so callers never import
the client to tell a 409 from a 404.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Seconds: a request to the API server that takes longer than this is a failure, not a hang.
REQUEST_TIMEOUT_SECONDS = 10.0
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Objects per page of a paginated list (what kubectl uses).
LIST_PAGE_SIZE = 500
# Threads that carry API calls made under a deadline (see `deadline`); more calls than this wait their turn.
DEADLINE_CALL_THREADS = 16
# Bytes read from a response at a time, so a response dripped slowly is cut at the deadline.
READ_CHUNK_BYTES = 64 * 1024

# The monotonic time by which the API calls of the current request must be answered (None: no deadline).
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("hami_web_kube_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float, *, within_current: bool = False) -> Iterator[None]:
    """Make every API call inside this block share one deadline ``seconds`` from now.

    The client's own timeout is per socket read, so a slow server (or one dripping its answer a byte at a
    time) could hold a call far longer. Under a deadline each call runs on a helper thread the caller stops
    waiting for at the deadline, and a response body still arriving then is cut off. A nested block sets a
    new deadline (a cleanup after a failure gets its own small budget), or with ``within_current`` one that
    never ends later than the enclosing block's (one step of that budget).
    """
    end = time.monotonic() + seconds
    current = _deadline.get()
    if within_current and current is not None:
        end = min(end, current)
    token = _deadline.set(end)
    try:
        yield
    finally:
        _deadline.reset(token)


@dataclass(slots=True)
class CallCount:
    """API requests sent inside a `counting_calls` block (a bind's round trips, for its metric)."""

    calls: int = 0


_call_count: contextvars.ContextVar[CallCount | None] = contextvars.ContextVar("hami_web_kube_calls", default=None)


@contextlib.contextmanager
def counting_calls() -> Iterator[CallCount]:
    """Count every API request this thread sends inside the block (requests refused before sending do not count).

    A bind's latency is mostly its round trips to kube-apiserver in a row, so their number per bind is the figure
    to watch (``hami_web_bind_api_calls``).
    """
    count = CallCount()
    token = _call_count.set(count)
    try:
        yield count
    finally:
        _call_count.reset(token)


def deadline_left_seconds() -> float | None:
    """Seconds left before the current deadline (may be negative), or None outside `deadline`."""
    end = _deadline.get()
    return None if end is None else end - time.monotonic()


class KubeError(Exception):
    """An API request failed; ``status`` is the HTTP status (0 when the server was not reached).

    ``outcome_unknown`` is True when a write may have been applied although no answer came back (a read
    timeout, a connection reset after the request was sent, the deadline, HTTP 504): the caller must treat
    the write as possibly done until the API shows otherwise.
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "", outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.outcome_unknown = outcome_unknown


class NotFoundError(KubeError):
    """The object does not exist (HTTP 404)."""


class ConflictError(KubeError):
    """The write lost a race: stale resourceVersion or already exists (HTTP 409)."""


class GoneError(KubeError):
    """A watch asked for a resourceVersion the server no longer has (HTTP 410)."""


class WatchSilentError(KubeError):
    """A watch stream stayed open but delivered nothing (no event, no bookmark) for its silence bound.

    kube-apiserver sends a bookmark about every minute to a watch that asks for them, so a longer silence
    means something between us and the API (a proxy, a half-open connection) holds the stream.
    """


def _error_from(error: Exception, what: str) -> KubeError:
    if isinstance(error, ApiException):
        status = int(error.status or 0)
        message = error.reason or ""
        body = getattr(error, "body", None)
        if body:
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(body).get("message") or message
        kind = {404: NotFoundError, 409: ConflictError, 410: GoneError}.get(status, KubeError)
        # 504: kube-apiserver gave up waiting for etcd; the write may still land.
        return kind(f"{what}: HTTP {status}: {message}", status=status, reason=error.reason or "",
                    outcome_unknown=status == 504)
    return KubeError(f"{what}: {error}", outcome_unknown=_sent_without_answer(error))


def _timed_out_reading(error: BaseException) -> bool:
    """Whether a transport error is a socket read that timed out (directly or as the cause of a wrapper)."""
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return True
        reason = getattr(seen, "reason", None)
        seen = reason if isinstance(reason, BaseException) else seen.__context__
    return False


def _sent_without_answer(error: BaseException) -> bool:
    """Whether a transport error happened after the request may have reached the server.

    A refused or timed-out connection never carried the request; a read timeout or a connection reset
    while waiting for the answer may have followed a write that was applied.
    """
    reason = getattr(error, "reason", None)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and isinstance(reason, BaseException):
        return _sent_without_answer(reason)
    if isinstance(error, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError):
        return False
    return isinstance(error, urllib3.exceptions.ReadTimeoutError | urllib3.exceptions.ProtocolError
                      | ConnectionError | TimeoutError)


class _DeadlineExceeded(Exception):
    """The body of a response was still arriving at the request's deadline."""


@dataclass(frozen=True, slots=True)
class ListPage:
    """One chunk of a paginated list: its items, the list's resourceVersion, and whether more follow."""

    items: list[JsonObject]
    resource_version: str
    continue_token: str = ""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``."""

    type: str
    object: JsonObject


class _RawWatch(kubernetes.watch.Watch):
    """A `Watch` whose events keep their objects as dicts.

    The client's own ``deserialize=False`` path leaves out ``raw_object``, which its ERROR handling then
    reads, so a ``410 Expired`` surfaced as ``KeyError('raw_object')`` instead of an `ApiException`. Parsing
    here (the deserialising path, minus the model conversion) keeps both the cheap dicts and the 410.
    """

    def unmarshal_event(self, data: str, return_type: Any) -> JsonObject | None:
        if not data or data.isspace():
            return None
        event = json.loads(data)
        event["raw_object"] = event.get("object")
        metadata = (event.get("object") or {}).get("metadata") if event.get("type") != "ERROR" else None
        if isinstance(metadata, dict) and metadata.get("resourceVersion"):
            self.resource_version = metadata["resourceVersion"]
        return event


def _joined(pages: Iterator[ListPage]) -> tuple[list[JsonObject], str]:
    items: list[JsonObject] = []
    version = ""
    for page in pages:
        items.extend(page.items)
        version = page.resource_version
    return items, version


@dataclass(frozen=True, slots=True)
class ClientTarget:
    """Where a client connects and how it got there: the configuration, the context's default namespace
    (``""`` when it sets none) and a few words on the source, for messages."""

    configuration: kubernetes.client.Configuration
    namespace: str
    source: str


def kubeconfig_paths(kubeconfig: str = "", environ: Mapping[str, str] | None = None) -> list[str]:
    """The kubeconfig files kubectl would read: ``--kubeconfig``, else every existing file of ``KUBECONFIG``
    (a list separated by the OS's path separator), else ``~/.kube/config`` if it exists."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        return [kubeconfig]
    listed = [os.path.expanduser(p) for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        existing = [path for path in listed if os.path.exists(path)]
        if not existing:
            raise KubeError(f"KUBECONFIG={environ['KUBECONFIG']}: none of these files exists")
        return existing
    default_path = os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION)
    return [default_path] if os.path.exists(default_path) else []


def _read_kubeconfig_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as stream:
            content = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError) as error:
        raise KubeError(f"cannot use kubeconfig {path}: {error}".replace("\n", " ")) from None
    if not isinstance(content, dict):
        raise KubeError(f"cannot use kubeconfig {path}: not a kubeconfig (no map at the top)")
    return content


def _merged_view(paths: Sequence[str]) -> tuple[str, dict[str, dict[str, Any]]]:
    """kubectl's merge of several files: the first file that sets ``current-context`` wins, and so does the
    first file that defines a context of a given name (the official client's merger lets the last file's
    ``current-context`` win, so it is decided here)."""
    current = ""
    contexts: dict[str, dict[str, Any]] = {}
    for path in paths:
        content = _read_kubeconfig_file(path)
        current = current or str(content.get("current-context") or "")
        for entry in content.get("contexts") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                contexts.setdefault(entry["name"], {**(entry.get("context") or {}), "file": path})
    return current, contexts


def resolve_client(kubeconfig: str = "", *, context: str = "",
                   environ: Mapping[str, str] | None = None) -> ClientTarget:
    """How to reach the API as kubectl resolves it, for the operator tools and the server alike.

    ``--kubeconfig``, else ``KUBECONFIG`` (several files merged as kubectl merges them), else in-cluster,
    else ``~/.kube/config``; ``context`` picks a context instead of ``current-context``. Token, client
    certificate and exec credentials go through the official client's loader. Errors name the file or the
    context that failed.
    """
    configuration = kubernetes.client.Configuration()
    environ = os.environ if environ is None else environ
    explicit = bool(kubeconfig or environ.get("KUBECONFIG"))
    paths = kubeconfig_paths(kubeconfig, environ)
    if not explicit and not context and _in_cluster(configuration):
        return ClientTarget(configuration, namespace=_in_cluster_namespace(), source="in-cluster")
    if not paths:
        raise KubeError("no Kubernetes API configured: not in a cluster, no --kubeconfig, no KUBECONFIG, "
                        "no ~/.kube/config")
    files = ":".join(paths)
    current, contexts = _merged_view(paths)
    chosen = context or current
    if not chosen:
        raise KubeError(f"kubeconfig {files}: no current-context set; give --context "
                        f"({', '.join(sorted(contexts)) or 'no contexts defined'})")
    if chosen not in contexts:
        raise KubeError(f"kubeconfig {files}: context {chosen!r} not found "
                        f"(contexts: {', '.join(sorted(contexts)) or 'none'})")
    try:
        kubernetes.config.load_kube_config(config_file=os.pathsep.join(paths), context=chosen,
                                           client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError, yaml.YAMLError, ValueError) as error:
        raise KubeError(f"cannot use context {chosen!r} of kubeconfig {contexts[chosen]['file']}: {error}"
                        .replace("\n", " ")) from None
    return ClientTarget(configuration, namespace=str(contexts[chosen].get("namespace") or ""),
                        source=f"context {chosen} of {contexts[chosen]['file']}")


def _in_cluster(configuration: kubernetes.client.Configuration) -> bool:
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        return False
    return True


def _in_cluster_namespace() -> str:
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE, encoding="utf-8") as stream:
            return stream.read().strip()
    except OSError:
        return ""


def load_client_configuration(kubeconfig: str = "", *, context: str = "") -> kubernetes.client.Configuration:
    """The configuration of `resolve_client` (the server needs nothing else)."""
    return resolve_client(kubeconfig, context=context).configuration


class Kube:
    """Thin, typed wrapper over the official client for exactly the calls hami-web makes."""

    def __init__(self, configuration: kubernetes.client.Configuration, *,
                 timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 throttle: Callable[[float | None], float | None] | None = None) -> None:
        """``timeout_seconds`` bounds each request (``--kube-timeout``); ``throttle`` is called before each
        request and may sleep (``--kube-qps`` / ``--kube-burst``): it gets the most it may wait (the time left
        before the request's deadline, or None) and answers None when its wait would be longer."""
        self._timeout_seconds = timeout_seconds
        self._throttle = throttle
        self._api_client = kubernetes.client.ApiClient(configuration)
        self._call_threads: ThreadPoolExecutor | None = None
        self._call_threads_lock = threading.Lock()

    # The generated API classes are built on first use: importing CoreV1Api costs about 0.6 s of CPU (hundreds
    # of pydantic models), more than a whole `inspect` of a small cluster, whose lists do without it.

    @functools.cached_property
    def _core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self._api_client)

    @functools.cached_property
    def _admission(self) -> kubernetes.client.AdmissionregistrationV1Api:
        return kubernetes.client.AdmissionregistrationV1Api(self._api_client)

    @functools.cached_property
    def _authentication(self) -> kubernetes.client.AuthenticationV1Api:
        return kubernetes.client.AuthenticationV1Api(self._api_client)

    @functools.cached_property
    def _authorization(self) -> kubernetes.client.AuthorizationV1Api:
        return kubernetes.client.AuthorizationV1Api(self._api_client)

    @classmethod
    def for_url(cls, url: str, **options: Any) -> Kube:
        """Client for a plain-HTTP API server at ``url`` (the in-process test/demo server)."""
        configuration = kubernetes.client.Configuration()
        configuration.host = url
        return cls(configuration, **options)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str = "", *, context: str = "", **options: Any) -> Kube:
        """Client configured as `resolve_client` resolves it."""
        return cls(load_client_configuration(kubeconfig, context=context), **options)

    def close(self) -> None:
        """Release the client's connection pool (and the helper threads of calls under a deadline)."""
        if self._call_threads is not None:
            self._call_threads.shutdown(wait=False, cancel_futures=True)
        self._api_client.close()

    # -- plumbing ---------------------------------------------------------------------------------

    @staticmethod
    def _read(response: Any, end: float | None) -> JsonObject:
        try:
            if end is None:
                return json.loads(response.data or b"{}")
            chunks = []
            while chunk := response.read1(READ_CHUNK_BYTES):  # whatever has arrived, not a full chunk
                chunks.append(chunk)
                if time.monotonic() > end:
                    raise _DeadlineExceeded
            return json.loads(b"".join(chunks) or b"{}")
        finally:
            response.release_conn()

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> JsonObject:
        end = _deadline.get()
        count = _call_count.get()
        if end is None:
            self._spend_budget(what, None)
            if count is not None:
                count.calls += 1
            kwargs.setdefault("_request_timeout", self._timeout_seconds)
            return self._request(what, method, args, kwargs, end=None)
        # A wait for the request budget counts against the deadline: it happens here, in the caller's thread,
        # and is refused up front when it would end after the deadline.
        self._spend_budget(what, end - time.monotonic())
        left = end - time.monotonic()
        if left <= 0:
            raise KubeError(f"{what}: not sent, the request's deadline has passed")
        # The helper's own read timeout runs a little past the deadline: the caller stops waiting first, and
        # the helper thread still ends soon after.
        kwargs["_request_timeout"] = min(self._timeout_seconds, left + 1.0)
        if count is not None:
            count.calls += 1
        responses: list[Any] = []
        future = self._helpers().submit(self._request, what, method, args, kwargs, end=end, responses=responses)
        try:
            return future.result(timeout=left)
        except FutureTimeout:
            if future.cancel():  # never started: nothing was sent
                raise KubeError(f"{what}: not sent within the request's deadline (API calls are queued)") from None
            for response in list(responses):  # a body still dripping in: cut it so the helper thread is freed
                with contextlib.suppress(Exception):
                    response.shutdown()
            raise KubeError(f"{what}: no answer within the request's deadline of {left:.1f}s",
                            outcome_unknown=True) from None

    def _spend_budget(self, what: str, max_wait_seconds: float | None) -> None:
        if self._throttle is None:
            return
        if max_wait_seconds is not None and max_wait_seconds <= 0:
            raise KubeError(f"{what}: not sent, the request's deadline has passed")
        if self._throttle(max_wait_seconds) is None:
            raise KubeError(f"{what}: not sent, the request budget (--kube-qps) has no slot before the request's "
                            f"deadline")

    def _helpers(self) -> ThreadPoolExecutor:
        with self._call_threads_lock:
            if self._call_threads is None:
                self._call_threads = ThreadPoolExecutor(DEADLINE_CALL_THREADS, thread_name_prefix="kube-call")
            return self._call_threads

    def _request(self, what: str, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                 end: float | None, responses: list[Any] | None = None) -> JsonObject:
        try:
            response = method(*args, _preload_content=False, **kwargs)
            if responses is not None:
                responses.append(response)
            return self._read(response, end)
        except _DeadlineExceeded:
            raise KubeError(f"{what}: the answer was still arriving at the request's deadline",
                            outcome_unknown=True) from None
        except (ApiException, OSError, ValueError) as error:
            raise _error_from(error, what) from error
        except Exception as error:  # urllib3 raises its own hierarchy for connection problems
            if type(error).__module__.startswith("urllib3"):
                raise _error_from(error, what) from error
            raise

    # -- nodes ------------------------------------------------------------------------------------

    def list_nodes(self, *, label_selector: str = "") -> tuple[list[JsonObject], str]:
        """All nodes (optionally by label selector) and the list's resourceVersion."""
        return _joined(self.list_node_pages(label_selector=label_selector))

    def list_node_pages(self, *, label_selector: str = "", limit: int = 0) -> Iterator[ListPage]:
        """Nodes in pages of at most ``limit`` (0: one page), all from one consistent snapshot.

        A `GoneError` means the snapshot expired between two pages; the list must start again.
        """
        return self._pages("list nodes", self._core.list_node, limit=limit, label_selector=label_selector or None)

    def get_node(self, name: str) -> JsonObject:
        """One node; `NotFoundError` when it does not exist."""
        return self._call(f"get node {name}", self._core.read_node, name)

    def patch_node(self, name: str, patch: JsonObject) -> JsonObject:
        """JSON merge patch a node; a ``metadata.resourceVersion`` in ``patch`` makes it a compare-and-swap."""
        return self._call(f"patch node {name}", self._core.patch_node, name, patch, _content_type=MERGE_PATCH)

    # -- pods -------------------------------------------------------------------------------------

    def list_pods(self) -> tuple[list[JsonObject], str]:
        """Pods of every namespace and the list's resourceVersion."""
        return _joined(self.list_pod_pages())

    def list_pod_pages(self, *, limit: int = 0) -> Iterator[ListPage]:
        """Pods of every namespace in pages of at most ``limit`` (0: one page); see `list_node_pages`."""
        return self._pages("list pods", self._core.list_pod_for_all_namespaces, limit=limit)

    def _pages(self, what: str, method: Any, *, limit: int, **kwargs: Any) -> Iterator[ListPage]:
        # resourceVersion unset: a consistent read (from etcd on a real server), which honours limit; a
        # list at resourceVersion "0" is served whole from the watch cache, the one big decode to avoid.
        token = ""
        while True:
            body = self._call(what, method, limit=limit or None, _continue=token or None, **kwargs)
            metadata = body.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            yield ListPage(items=body.get("items") or [], resource_version=str(metadata.get("resourceVersion", "")),
                           continue_token=token)
            if not token:
                return

    def list_pods_on_node(self, node: str, *, assigned_label: str, not_older_than: str = "") -> list[JsonObject]:
        """Pods labelled ``assigned_label=node``: every pod given GPUs there, bound or not (our booking sets it).

        What ``/bind`` checks a placement against, in one request. With ``not_older_than`` (a resourceVersion) the
        API answers from its watch cache once that has caught up with the version — as fresh as needed, without
        reading every pod of the cluster from etcd, which a plain (quorum) list with a selector does.
        """
        fresh: dict[str, Any] = {}
        if not_older_than:
            fresh = {"resource_version": not_older_than, "resource_version_match": "NotOlderThan"}
        booked = self._call(f"list pods given GPUs on node {node}", self._core.list_pod_for_all_namespaces,
                            label_selector=f"{assigned_label}={node}", **fresh)
        return list(booked.get("items") or [])

    def get_pod(self, namespace: str, name: str) -> JsonObject:
        """One pod; `NotFoundError` when it does not exist."""
        return self._call(f"get pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace)

    def patch_pod(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        """JSON merge patch a pod (annotations and labels)."""
        return self._call(f"patch pod {namespace}/{name}", self._core.patch_namespaced_pod, name, namespace,
                          patch, _content_type=MERGE_PATCH)

    def bind_pod(self, namespace: str, name: str, node: str, *, uid: str = "") -> None:
        """Create the pod's Binding to ``node``. The API answers a Status, so the body is read raw."""
        metadata: JsonObject = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self._call(f"bind pod {namespace}/{name} to {node}", self._core.create_namespaced_pod_binding,
                   name, namespace, binding)

    # -- paginated reads (operator tools) ----------------------------------------------------------

    def list_nodes_paged(self, *, label_selector: str = "", page_size: int = LIST_PAGE_SIZE) -> list[JsonObject]:
        """All nodes (optionally by label selector), fetched ``page_size`` at a time."""
        query = [("labelSelector", label_selector)] if label_selector else []
        return self._list_paged("list nodes", "/api/v1/nodes", page_size, query)

    def list_pods_paged(self, *, page_size: int = LIST_PAGE_SIZE) -> list[JsonObject]:
        """Pods of every namespace, fetched ``page_size`` at a time."""
        return self._list_paged("list pods", "/api/v1/pods", page_size, [])

    def _list_paged(self, what: str, path: str, page_size: int, query: list[tuple[str, str]]) -> list[JsonObject]:
        # Pages keep each response (and each JSON decode) small, which a big cluster's API server asks of clients.
        items: list[JsonObject] = []
        token = ""
        while True:
            page = [*query, ("limit", str(page_size)), *([("continue", token)] if token else [])]
            body = self._call(what, self._get_raw, path, page)
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def _get_raw(self, path: str, query: list[tuple[str, str]], *, _preload_content: bool = False,
                 _request_timeout: float = REQUEST_TIMEOUT_SECONDS) -> Any:
        """GET through the client's request layer (auth, TLS, pool) without the generated API classes.

        A non-2xx answer raises `ApiException`, as the generated methods do with ``_preload_content=False``.
        """
        request = self._api_client.param_serialize(method="GET", resource_path=path, query_params=query,
                                                   header_params={"Accept": "application/json"},
                                                   auth_settings=["BearerToken"])
        response = self._api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    # -- watches ----------------------------------------------------------------------------------

    def watch_pods(self, *, resource_version: str, timeout_seconds: int, silence_seconds: float = 0.0,
                   on_open: Callable[[], None] | None = None) -> Iterator[WatchEvent]:
        """Pod events after ``resource_version``; ends after ``timeout_seconds``; `GoneError` when too old.

        ``on_open`` runs once the server has accepted the watch (before any event), so a caller can tell a
        quiet healthy watch from one that cannot connect. BOOKMARK events carry only a resourceVersion.
        ``silence_seconds`` (0: no bound) closes a stream that sends nothing for that long: `WatchSilentError`.
        """
        return self._watch("watch pods", self._core.list_pod_for_all_namespaces, on_open, silence_seconds,
                           resource_version=resource_version, timeout_seconds=timeout_seconds)

    def watch_nodes(self, *, resource_version: str, timeout_seconds: int, label_selector: str = "",
                    silence_seconds: float = 0.0, on_open: Callable[[], None] | None = None) -> Iterator[WatchEvent]:
        """Node events after ``resource_version``; see `watch_pods`."""
        return self._watch("watch nodes", self._core.list_node, on_open, silence_seconds,
                           resource_version=resource_version, timeout_seconds=timeout_seconds,
                           label_selector=label_selector or None)

    def _watch(self, what: str, method: Any, on_open: Callable[[], None] | None, silence_seconds: float,
               **kwargs: Any) -> Iterator[WatchEvent]:
        watch = _RawWatch()
        # The read timeout is the silence bound: the socket read waits at most that long for the next bytes.
        read_seconds = kwargs["timeout_seconds"] + self._timeout_seconds
        if silence_seconds > 0:
            read_seconds = min(read_seconds, silence_seconds)
        kwargs["_request_timeout"] = (self._timeout_seconds, read_seconds)
        self._spend_budget(what, None)

        @functools.wraps(method)  # the client reads the return type from the method's signature
        def open_stream(*args: Any, **call_kwargs: Any) -> Any:
            response = method(*args, **call_kwargs)
            if on_open is not None:
                on_open()
            return response

        try:
            for event in watch.stream(open_stream, allow_watch_bookmarks=True, **kwargs):
                yield WatchEvent(type=str(event.get("type", "")), object=event.get("object") or {})
        except ApiException as error:
            raise _error_from(error, what) from error
        except Exception as error:
            if silence_seconds > 0 and _timed_out_reading(error):
                raise WatchSilentError(f"{what}: nothing received for {silence_seconds:g}s") from error
            if isinstance(error, OSError | ValueError) or type(error).__module__.startswith("urllib3"):
                raise _error_from(error, what) from error
            raise
        finally:
            watch.stop()

    # -- events -----------------------------------------------------------------------------------

    def create_event(self, event: JsonObject) -> None:
        """Record a core/v1 Event in the event's namespace."""
        namespace = event.get("metadata", {}).get("namespace") or "default"
        self._call("create event", self._core.create_namespaced_event, namespace, event)

    def patch_event(self, namespace: str, name: str, patch: JsonObject) -> None:
        """JSON merge patch an Event (a repeat of it: count, lastTimestamp, message); `NotFoundError` if gone."""
        self._call(f"patch event {namespace}/{name}", self._core.patch_namespaced_event, name, namespace, patch,
                   _content_type=MERGE_PATCH)

    # -- the published settings ConfigMap -------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> JsonObject:
        """One ConfigMap; `NotFoundError` when it does not exist.

        Through the raw request layer, as the lists: the operator tools read the published settings before their
        lists, and building the generated API classes for this one GET would cost them 0.4 s of CPU.
        """
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps/{quote(name, safe='')}"
        return self._call(f"get configmap {namespace}/{name}", self._get_raw, path, [])

    def create_config_map(self, namespace: str, config_map: JsonObject) -> JsonObject:
        """Create a ConfigMap; `ConflictError` when it already exists."""
        return self._call(f"create configmap in {namespace}", self._core.create_namespaced_config_map, namespace,
                          config_map)

    def replace_config_map(self, namespace: str, name: str, config_map: JsonObject) -> JsonObject:
        """Replace a ConfigMap (its ``metadata.resourceVersion`` makes it a compare-and-swap)."""
        return self._call(f"replace configmap {namespace}/{name}", self._core.replace_namespaced_config_map,
                          name, namespace, config_map)

    # -- secrets and webhook configuration (certificate bootstrap) -----------------------------------

    def get_secret(self, namespace: str, name: str) -> JsonObject:
        """One Secret; `NotFoundError` when it does not exist."""
        return self._call(f"get secret {namespace}/{name}", self._core.read_namespaced_secret, name, namespace)

    def create_secret(self, namespace: str, secret: JsonObject) -> JsonObject:
        """Create a Secret; `ConflictError` when it already exists."""
        return self._call(f"create secret in {namespace}", self._core.create_namespaced_secret, namespace, secret)

    def replace_secret(self, namespace: str, name: str, secret: JsonObject) -> JsonObject:
        """Replace a Secret (its ``metadata.resourceVersion`` makes it a compare-and-swap)."""
        return self._call(f"replace secret {namespace}/{name}", self._core.replace_namespaced_secret,
                          name, namespace, secret)

    def get_mutating_webhook_configuration(self, name: str) -> JsonObject:
        """One MutatingWebhookConfiguration; `NotFoundError` when it does not exist."""
        return self._call(f"get mutatingwebhookconfiguration {name}",
                          self._admission.read_mutating_webhook_configuration, name)

    def patch_mutating_webhook_configuration(self, name: str, patch: list[JsonObject]) -> JsonObject:
        """JSON patch (RFC 6902) a MutatingWebhookConfiguration, e.g. to set each webhook's caBundle."""
        return self._call(f"patch mutatingwebhookconfiguration {name}",
                          self._admission.patch_mutating_webhook_configuration, name, patch,
                          _content_type=JSON_PATCH)

    # -- delegated authentication and authorization (the exposed dashboard) ------------------------------

    def review_token(self, token: str) -> JsonObject:
        """TokenReview ``token``; the answer's ``status`` says whether it is authenticated, and as whom."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        return self._call("create tokenreview", self._authentication.create_token_review, body)

    def review_access(self, *, user: JsonObject, verb: str, resource: str) -> JsonObject:
        """SubjectAccessReview: may ``user`` (a TokenReview's ``status.user``) ``verb`` ``resource`` cluster-wide."""
        spec: JsonObject = {"user": user.get("username", ""), "groups": user.get("groups") or [],
                            "uid": user.get("uid", ""), "extra": user.get("extra") or {},
                            "resourceAttributes": {"verb": verb, "resource": resource, "group": ""}}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return self._call("create subjectaccessreview", self._authorization.create_subject_access_review, body)
