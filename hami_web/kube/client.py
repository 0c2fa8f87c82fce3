"""`Kube`: the requests hami-web makes, built here and carried by `Transport`.

The only place that uses the official ``kubernetes`` client. Objects travel as plain JSON dicts (see
`hami_web.kube.transport`), and every list, paged or not, goes through one loop over ``continue`` tokens. The
calls a burst makes per pod (node and pod reads and patches, the Binding, Events) go through the client's request
layer directly (`Transport.get`, `Transport.send`); the rarer ones through its generated API classes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import kubernetes.client

from hami_web.kube.config import load_client_configuration, throttle_token_refresh
from hami_web.kube.errors import TooLargeResourceVersionError
from hami_web.kube.transport import (
    LIST_PAGE_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    JsonObject,
    LateAnswersNotResent,
    Throttle,
    Transport,
)
from hami_web.kube.watches import WatchEvent, stream_events, watch_query

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Objects per page of a paginated list (what kubectl uses).
LIST_PAGE_SIZE = 500


@dataclass(frozen=True, slots=True)
class ListPage:
    """One chunk of a paginated list: its items, the list's resourceVersion, and whether more follow."""

    items: list[JsonObject]
    resource_version: str
    continue_token: str = ""


def join_pages(pages: Iterable[ListPage]) -> tuple[list[JsonObject], str]:
    """Every item of a list's pages, and the list's resourceVersion (the last page's)."""
    items: list[JsonObject] = []
    version = ""
    for page in pages:
        items.extend(page.items)
        version = page.resource_version
    return items, version


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}"


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


class Kube:
    """Thin, typed wrapper over the official client for exactly the calls hami-web makes."""

    def __init__(self, configuration: kubernetes.client.Configuration, *,
                 timeout_seconds: float = REQUEST_TIMEOUT_SECONDS, throttle: Throttle | None = None) -> None:
        """``timeout_seconds`` bounds each request (``--kube-timeout``); ``throttle`` is called before each
        request and may sleep (``--kube-qps`` / ``--kube-burst``): it gets the most it may wait (the time left
        before the request's deadline, or None) and answers None when its wait would be longer. A request whose
        answer is late is never sent again by the transport (`LateAnswersNotResent`)."""
        configuration.retries = LateAnswersNotResent(3)
        throttle_token_refresh(configuration)
        self._api_client = kubernetes.client.ApiClient(configuration)
        self._transport = Transport(self._api_client, timeout_seconds=timeout_seconds, throttle=throttle)

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
        self._transport.close()

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> JsonObject:
        return self._transport.call(what, method, *args, **kwargs)

    # -- lists: one loop over ``continue`` tokens ----------------------------------------------------

    def list_nodes(self, *, label_selector: str = "", page_size: int = 0) -> Iterator[ListPage]:
        """Nodes (optionally by label selector) in pages of at most ``page_size`` (0: one page), all from one
        consistent snapshot; `join_pages` gathers them with the list's resourceVersion.

        The informers reduce page by page; the operator tools ask for `LIST_PAGE_SIZE`, as kubectl does. A
        `GoneError` means the snapshot expired between two pages; the list must start again.
        """
        return self.list_collection("/api/v1/nodes", label_selector=label_selector, page_size=page_size)

    def list_pods(self, *, page_size: int = 0) -> Iterator[ListPage]:
        """Pods of every namespace in pages of at most ``page_size`` (0: one page); see `list_nodes`."""
        return self.list_collection("/api/v1/pods", page_size=page_size)

    def list_collection(self, path: str, *, label_selector: str = "", page_size: int = 0) -> Iterator[ListPage]:
        """The objects of any collection (``/api/v1/resourcequotas``: every namespace's) in pages; see `list_nodes`."""
        query = [("labelSelector", label_selector)] if label_selector else []
        return self._pages(f"list {path.rsplit('/', 1)[-1]}", path, query, page_size=page_size)

    def list_resource_quotas(self, *, page_size: int = 0) -> Iterator[ListPage]:
        """ResourceQuota objects of every namespace in pages (docs/quotas.md#namespace-quotas); see `list_nodes`."""
        return self.list_collection("/api/v1/resourcequotas", page_size=page_size)

    def list_namespace_pods_at(self, namespace: str, *, not_older_than: str = "") -> list[JsonObject]:
        """Every pod of ``namespace``, at least as fresh as the resourceVersion ``not_older_than``: what ``/bind``
        checks a namespace's device quota against (see `list_pods_on_node`). No selector: a booking that rode on its
        Binding carries no label, and the bookings are told apart by their annotations."""
        return self._list_fresh(f"list pods in namespace {namespace}", f"/api/v1/namespaces/{namespace}/pods", [],
                                not_older_than)

    def list_pods_on_node(self, node: str, *, not_older_than: str = "") -> list[JsonObject]:
        """Pods bound to ``node`` (``spec.nodeName``): what ``/bind`` checks a placement against, in one request.

        Under the node lock every live booking on the node is on a bound pod: a binder writes its booking with or
        before its Binding while it holds the lock, and the lock is given up only after the Binding (or after the
        booking was voided). With ``not_older_than`` (a resourceVersion) the API answers from its watch cache once
        that has caught up with the version — as fresh as needed, without reading every pod of the cluster from
        etcd, which a plain (quorum) list with a selector does.
        """
        return self._list_fresh(f"list pods bound to node {node}", "/api/v1/pods",
                                [("fieldSelector", f"spec.nodeName={node}")], not_older_than)

    def _list_fresh(self, what: str, path: str, query: list[tuple[str, str]], not_older_than: str) -> list[JsonObject]:
        """One list at least as fresh as ``not_older_than`` (a consistent read without it).

        When the watch cache has not reached the version (`TooLargeResourceVersionError`, after kube-apiserver's own
        3 s wait) the list is made once more as a consistent read: on a kind nobody writes, the cache may not move
        until a progress notification from etcd, which older etcd releases never send, and a bind would fail at every
        try meanwhile. The second read comes after the first has ended, so it adds no load while one is in flight.
        """
        if not_older_than:
            try:
                pods, _ = join_pages(self._pages(what, path, [*query, ("resourceVersion", not_older_than),
                                                             ("resourceVersionMatch", "NotOlderThan")], page_size=0))
                return pods
            except TooLargeResourceVersionError:
                pass
        pods, _ = join_pages(self._pages(what, path, query, page_size=0))
        return pods

    def _pages(self, what: str, path: str, query: list[tuple[str, str]], *, page_size: int) -> Iterator[ListPage]:
        """The pages of the list at ``path``, fetched through the raw request layer, one request per page.

        Pages keep each response (and each JSON decode) small, which a big cluster's API server asks of clients.
        Without a resourceVersion in ``query`` the list is a consistent read (from etcd on a real server), which
        honours ``limit``; a list at resourceVersion "0" is served whole from the watch cache, the one big decode
        to avoid. A page may take `LIST_PAGE_TIMEOUT_SECONDS` (the API server's own bound) unless a deadline is
        shorter: one slower than ``--kube-timeout`` on a busy server is waited for, not asked for again.
        """
        page_timeout = max(self._transport.timeout_seconds, LIST_PAGE_TIMEOUT_SECONDS)
        limit = [("limit", str(page_size))] if page_size else []
        token = ""
        while True:
            body = self._transport.get(what, path, [*query, *limit, *([("continue", token)] if token else [])],
                                       timeout_seconds=page_timeout)
            metadata = body.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            yield ListPage(items=body.get("items") or [], resource_version=str(metadata.get("resourceVersion", "")),
                           continue_token=token)
            if not token:
                return

    # -- nodes ------------------------------------------------------------------------------------

    def get_node(self, name: str) -> JsonObject:
        """One node; `NotFoundError` when it does not exist."""
        return self._transport.get(f"get node {name}", _node_path(name), [])

    def patch_node(self, name: str, patch: JsonObject) -> JsonObject:
        """JSON merge patch a node; a ``metadata.resourceVersion`` in ``patch`` makes it a compare-and-swap."""
        return self._transport.send(f"patch node {name}", "PATCH", _node_path(name), patch, content_type=MERGE_PATCH)

    # -- pods -------------------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> JsonObject:
        """One pod; `NotFoundError` when it does not exist."""
        return self._transport.get(f"get pod {namespace}/{name}", _pod_path(namespace, name), [])

    def patch_pod(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        """JSON merge patch a pod (annotations and labels)."""
        return self._transport.send(f"patch pod {namespace}/{name}", "PATCH", _pod_path(namespace, name), patch,
                                    content_type=MERGE_PATCH)

    def patch_pod_status(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        """JSON merge patch a pod's ``status`` subresource (conditions, ``nominatedNodeName``); a
        ``metadata.resourceVersion`` in ``patch`` makes it a compare-and-swap."""
        return self._transport.send(f"patch pod {namespace}/{name} status", "PATCH",
                                    f"{_pod_path(namespace, name)}/status", patch, content_type=MERGE_PATCH)

    def delete_pod(self, namespace: str, name: str, *, uid: str) -> JsonObject:
        """Delete a pod with its own grace period, only while it is still the pod ``uid`` (409 otherwise)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        return self._call(f"delete pod {namespace}/{name}", self._core.delete_namespaced_pod, name, namespace,
                          body=options)

    def bind_pod(self, namespace: str, name: str, node: str, *, uid: str = "", resource_version: str = "",
                 annotations: Mapping[str, str] | None = None) -> None:
        """Create the pod's Binding to ``node``. The API answers a Status, which nobody reads: drained, not decoded.

        ``uid`` and ``resource_version`` are preconditions on the pod (409 when it is another pod, or changed since
        that version); ``annotations`` are written onto the pod in the same write that sets ``spec.nodeName``
        (kube-apiserver's pods/binding storage, ``setPodHostAndAnnotations``): added or replaced, never removed.
        """
        metadata: JsonObject = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        if resource_version:
            metadata["resourceVersion"] = resource_version
        if annotations:
            metadata["annotations"] = dict(annotations)
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self._transport.send(f"bind pod {namespace}/{name} to {node}", "POST",
                             f"{_pod_path(namespace, name)}/binding", binding, read_answer=False)

    # -- watches ----------------------------------------------------------------------------------

    def watch_pods(self, *, resource_version: str, timeout_seconds: int, silence_seconds: float = 0.0,
                   on_open: Callable[[], None] | None = None, initial_events: bool = False) -> Iterator[WatchEvent]:
        """Pod events after ``resource_version``; ends after ``timeout_seconds``; `GoneError` when too old.

        ``on_open`` runs once the server has accepted the watch (before any event), so a caller can tell a
        quiet healthy watch from one that cannot connect. BOOKMARK events carry only a resourceVersion.
        ``silence_seconds`` (0: no bound) closes a stream that sends nothing for that long: `WatchSilentError`.
        ``initial_events``: a streaming list first, which goes on as the watch (see `watch_query`).
        """
        return self.watch_collection("/api/v1/pods", resource_version=resource_version,
                                     timeout_seconds=timeout_seconds, silence_seconds=silence_seconds,
                                     on_open=on_open, initial_events=initial_events)

    def watch_nodes(self, *, resource_version: str, timeout_seconds: int, label_selector: str = "",
                    silence_seconds: float = 0.0, on_open: Callable[[], None] | None = None,
                    initial_events: bool = False) -> Iterator[WatchEvent]:
        """Node events after ``resource_version``; see `watch_pods`."""
        return self.watch_collection("/api/v1/nodes", resource_version=resource_version,
                                     timeout_seconds=timeout_seconds, label_selector=label_selector,
                                     silence_seconds=silence_seconds, on_open=on_open, initial_events=initial_events)

    def watch_collection(self, path: str, *, resource_version: str, timeout_seconds: int, label_selector: str = "",
                         silence_seconds: float = 0.0, on_open: Callable[[], None] | None = None,
                         initial_events: bool = False) -> Iterator[WatchEvent]:
        """Events of any collection (``/api/v1/resourcequotas``) after ``resource_version``; see `watch_pods`."""
        query = watch_query(resource_version=resource_version, timeout_seconds=timeout_seconds,
                            initial_events=initial_events, label_selector=label_selector)
        return stream_events(self._transport, f"watch {path.rsplit('/', 1)[-1]}", path, query,
                             timeout_seconds=timeout_seconds, silence_seconds=silence_seconds, on_open=on_open)

    # -- events -----------------------------------------------------------------------------------

    def create_event(self, event: JsonObject) -> None:
        """Record a core/v1 Event in the event's namespace."""
        namespace = event.get("metadata", {}).get("namespace") or "default"
        self._transport.send("create event", "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", event,
                             read_answer=False)

    def patch_event(self, namespace: str, name: str, patch: JsonObject) -> None:
        """JSON merge patch an Event (a repeat of it: count, lastTimestamp, message); `NotFoundError` if gone."""
        self._transport.send(f"patch event {namespace}/{name}", "PATCH",
                             f"/api/v1/namespaces/{quote(namespace, safe='')}/events/{quote(name, safe='')}", patch,
                             content_type=MERGE_PATCH, read_answer=False)

    def list_pods_in_namespace(self, namespace: str, *, label_selector: str) -> list[JsonObject]:
        """The pods of ``namespace`` matching ``label_selector`` (the scheduler's own pods, for HAMi's role label)."""
        pods, _ = join_pages(self.list_collection(f"/api/v1/namespaces/{quote(namespace, safe='')}/pods",
                                                  label_selector=label_selector))
        return pods

    # -- leases ---------------------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> JsonObject:
        """One coordination.k8s.io/v1 Lease (kube-scheduler's leader election); `NotFoundError` when absent."""
        path = (f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases/"
                f"{quote(name, safe='')}")
        return self._transport.get(f"get lease {namespace}/{name}", path, [])

    # -- the published settings ConfigMap -------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> JsonObject:
        """One ConfigMap; `NotFoundError` when it does not exist.

        Through the raw request layer, as the lists: the operator tools read the published settings before their
        lists, and building the generated API classes for this one GET would cost them 0.4 s of CPU.
        """
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps/{quote(name, safe='')}"
        return self._transport.get(f"get configmap {namespace}/{name}", path, [])

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

    def may(self, verb: str, resource: str, *, subresource: str = "", group: str = "") -> bool:
        """SelfSubjectAccessReview: may this client ``verb`` ``resource`` (``subresource``) in every namespace."""
        attributes = {"verb": verb, "resource": resource, "subresource": subresource, "group": group}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}}
        answer = self._call(f"create selfsubjectaccessreview ({verb} {resource})",
                            self._authorization.create_self_subject_access_review, body)
        return bool((answer.get("status") or {}).get("allowed"))

    def review_access(self, *, user: JsonObject, verb: str, resource: str) -> JsonObject:
        """SubjectAccessReview: may ``user`` (a TokenReview's ``status.user``) ``verb`` ``resource`` cluster-wide."""
        spec: JsonObject = {"user": user.get("username", ""), "groups": user.get("groups") or [],
                            "uid": user.get("uid", ""), "extra": user.get("extra") or {},
                            "resourceAttributes": {"verb": verb, "resource": resource, "group": ""}}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return self._call("create subjectaccessreview", self._authorization.create_subject_access_review, body)
