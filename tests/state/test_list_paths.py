"""Both list paths against the in-process API server, through the real client (docs/performance.md#scale).

Covers: with streaming lists offered, each resource is listed and watched by one request (``sendInitialEvents``
with ``resourceVersionMatch=NotOlderThan`` and bookmarks), the cache holds what the initial events showed and
later changes come on the same stream; a server that refuses them (422, as with the WatchList feature off) or
ignores them (a plain watch) is listed in pages instead and its cache is the same; a busy server (429, 504, or no
answer within the silence bound) is streamed again after the backoff, never listed in pages at once; a page slower
than ``--kube-timeout`` is waited for and sent once, and no request whose answer is late is sent again by the
transport (urllib3 would send it three more times); the in-process server checks
the options as kube-apiserver does (a table of good and bad queries); with the dashboard on, the process makes one
node watch and one pod watch in all, and the dashboard's node traits follow the node reflector (a cordon shows); a
third resource is one registration (a reflector over ConfigMaps: listed before the cache is synced, its events
delivered, reported with the others).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from hami_web.core import names
from hami_web.dashboard.nodetraits import NodeTraitsSink
from hami_web.kube import Kube, KubeError
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import build_runtime
from hami_web.settings import Settings
from hami_web.state.cache import ClusterCache
from hami_web.state.reflector import PAGINATED, STREAMING, KubeSource, Reflector
from hami_web.state.sync import ClusterSync
from tests.integration.helpers import delete_pod, gpu_limits, gpu_node, gpu_pod, gpus, wait_for

POD_PATH = "/api/v1/pods"
NODE_PATH = "/api/v1/nodes"


def _running_pod(name: str, node: str, gpu: str) -> dict[str, Any]:
    return gpu_pod(name, gpu_limits(1, memory_mib=1000), annotations={
        names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: f"{gpu},NVIDIA,1000,0:;"})


def _objects() -> list[dict[str, Any]]:
    nodes = [gpu_node(f"node{i}", gpus(f"node{i}", 2)) for i in range(3)]
    pods = [_running_pod(f"pod{i}", f"node{i % 3}", f"node{i % 3}-gpu{i % 2}") for i in range(5)]
    return [*nodes, *pods]


def _is_watch(query: dict[str, str]) -> bool:
    return query.get("watch") in ("true", "1", "True")


def _held(sync: ClusterSync) -> set[str]:
    return {usage.name for usage in sync._cache.pod_usages()}


@pytest.fixture
def synced() -> Iterator[Any]:
    """``synced(watch_list, faults=..., kube_timeout=..., **options)``: an API server answering streaming lists so
    (with ``faults`` injected before the first list), and a started `ClusterSync` with ``options`` on it."""
    made: list[tuple[LocalCluster, ClusterSync, Kube]] = []

    def make(watch_list: str, *, faults: Callable[[LocalCluster], None] | None = None, kube_timeout: float = 10.0,
             **options: Any) -> tuple[LocalCluster, ClusterSync]:
        apiserver = LocalCluster(_objects(), bookmark_interval_seconds=0.1, watch_list=watch_list)
        apiserver.start()
        if faults is not None:
            faults(apiserver)
        kube = Kube.for_url(apiserver.url, timeout_seconds=kube_timeout)
        sync = ClusterSync(ClusterCache(), kube, page_size=2, **options)
        made.append((apiserver, sync, kube))
        sync.start()
        assert sync._cache.wait_synced(5), "no first sync"
        return apiserver, sync

    yield make
    for apiserver, sync, kube in made:
        sync.stop()
        kube.close()
        apiserver.stop()


def test_a_streaming_list_lists_and_watches_each_resource_in_one_request(synced: Any) -> None:
    apiserver, sync = synced("on")

    assert _held(sync) == {f"pod{i}" for i in range(5)}
    assert len(sync._cache.node_views()) == 3
    for path in (POD_PATH, NODE_PATH):
        (query,) = apiserver.requests("GET", path)
        assert _is_watch(query)
        assert (query.get("sendInitialEvents"), query.get("resourceVersionMatch"), query.get("allowWatchBookmarks")) \
            == ("true", "NotOlderThan", "true")
        assert "resourceVersion" not in query  # a consistent read: at least as new as the request
    assert (sync.pods.list_mode, sync.nodes.list_mode) == (STREAMING, STREAMING)

    delete_pod(apiserver, "pod0")
    wait_for(lambda: "pod0" not in _held(sync), what="the deletion on the streaming list's own stream")
    assert len(apiserver.requests("GET", POD_PATH)) == 1
    assert sync.pods.resource_version == str(apiserver.resource_version)


@pytest.mark.parametrize(("mode", "why"), [("refuse", "WatchList feature gate"),
                                           ("ignore", "BOOKMARK event came before")])
def test_a_server_without_streaming_lists_is_listed_in_pages(synced: Any, mode: str, why: str) -> None:
    apiserver, sync = synced(mode)

    assert _held(sync) == {f"pod{i}" for i in range(5)}
    assert len(sync._cache.node_views()) == 3
    queries = apiserver.requests("GET", POD_PATH)
    assert queries[0].get("sendInitialEvents") == "true"  # tried once
    pages = [query for query in queries if not _is_watch(query)]
    assert [query.get("limit") for query in pages] == ["2", "2", "2"]
    assert all("sendInitialEvents" not in query for query in queries[1:])
    assert (sync.pods.list_mode, sync.pods.errors) == (PAGINATED, 0)
    assert why in sync.pods.streaming_refused

    delete_pod(apiserver, "pod1")
    wait_for(lambda: "pod1" not in _held(sync), what="the deletion on the watch after the pages")


@pytest.mark.parametrize(("fault", "says"), [
    ({"status": 504}, "HTTP 504"),  # kube-apiserver's "Too large resource version": its watch cache is behind etcd
    ({"status": 429}, "HTTP 429"),  # its cache still initialising after a restart
    ({"mode": "delay", "seconds": 1.5}, "nothing received for 0.5s"),  # no answer within the silence bound
])
def test_a_busy_server_is_streamed_again_not_listed_in_pages(synced: Any, fault: dict[str, Any], says: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A restart on a loaded API server (docs/performance.md#scale): the streaming list's busy answer, or none, is
    followed after the backoff by the same streaming list, never at once by pages read from etcd, which would add the
    heaviest list to a server already too busy to answer; the API server sees one request at a time."""
    def busy(apiserver: LocalCluster) -> None:
        apiserver.inject_failure("GET", "pods", watch=True, **fault)

    apiserver, sync = synced("on", faults=busy, watch_silence_bound_seconds=0.5)

    queries = apiserver.requests("GET", POD_PATH)
    assert [query.get("sendInitialEvents") for query in queries] == ["true", "true"]  # no page, no third request
    assert (sync.pods.list_mode, sync.pods.errors, sync.pods.streaming_refused) == (STREAMING, 1, "")
    assert any(says in record.getMessage() and "streaming again, not listing in pages" in record.getMessage()
               for record in caplog.records)
    assert _held(sync) == {f"pod{i}" for i in range(5)}


def test_a_page_slower_than_the_kube_timeout_is_waited_for_and_sent_once(synced: Any) -> None:
    """``--kube-timeout`` (0.5 s here) bounds a bind's calls, not a list's pages: a page may take the API server's own
    request timeout, so a slow one is read once instead of being sent again while the server still works on it."""
    def slow_second_page(apiserver: LocalCluster) -> None:
        apiserver.inject_failure("GET", "pods", mode="delay", seconds=1.5, skip=1, watch=False)

    apiserver, sync = synced("refuse", faults=slow_second_page, kube_timeout=0.5)

    pages = [query for query in apiserver.requests("GET", POD_PATH) if not _is_watch(query)]
    assert [(query.get("limit"), bool(query.get("continue"))) for query in pages] == [
        ("2", False), ("2", True), ("2", True)]
    assert (sync.pods.list_mode, sync.pods.errors) == (PAGINATED, 0)


def test_a_request_answered_after_the_kube_timeout_is_sent_once() -> None:
    """urllib3's default retries would send a GET whose answer is late three more times (four requests for one
    read, each abandoned while the server still works on it); the transport sends it once and says it timed out."""
    apiserver = LocalCluster(_objects())
    apiserver.start()
    kube = Kube.for_url(apiserver.url, timeout_seconds=0.3)
    try:
        apiserver.inject_failure("GET", "nodes", name="node0", mode="delay", seconds=1.0, count=4)
        with pytest.raises(KubeError, match="Read timed out"):
            kube.get_node("node0")
        assert len(apiserver.requests("GET", f"{NODE_PATH}/node0")) == 1
    finally:
        kube.close()
        apiserver.stop()


WATCH_OPTIONS = [  # query, the in-process server's streaming mode, HTTP status, what the answer says
    ("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "on", 200,
     INITIAL_END := "k8s.io/initial-events-end"),
    ("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=1", "on",
     200, INITIAL_END),
    ("sendInitialEvents=true&allowWatchBookmarks=true", "on", 422, "requires setting resourceVersionMatch"),
    ("sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true", "on", 422, "NotOlderThan"),
    ("sendInitialEvents=true&resourceVersionMatch=NotOlderThan", "on", 200, "ADDED"),  # no end bookmark, as v1.32
    ("resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "on", 422, "unless sendInitialEvents"),
    ("sendInitialEvents=maybe&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "on", 400, "invalid"),
    ("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "refuse", 422,
     "WatchList feature gate"),
    ("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "ignore", 200, "ADDED"),
]


@pytest.mark.parametrize(("query", "mode", "status", "says"), WATCH_OPTIONS)
def test_the_in_process_server_checks_watch_options_as_kube_apiserver(query: str, mode: str, status: int,
                                                                       says: str) -> None:
    with LocalCluster(_objects()[:1], watch_list=mode) as apiserver:
        answer = requests.get(f"{apiserver.url}{NODE_PATH}?watch=true&timeoutSeconds=1&{query}", timeout=10)
        assert answer.status_code == status
        assert says in answer.text
        if status == 200:
            events = [json.loads(line) for line in answer.text.splitlines() if line]
            assert events[0]["type"] == "ADDED"
            ends = [event for event in events if event["type"] == "BOOKMARK"
                    and INITIAL_END in (event["object"]["metadata"].get("annotations") or {})]
            if says == INITIAL_END:
                versions = [end["object"]["metadata"]["resourceVersion"] for end in ends]
                assert versions == [str(apiserver.resource_version)]
            else:  # a plain watch, or a streaming list without bookmarks: never an end
                assert ends == []


def test_one_node_watch_and_one_pod_watch_per_process_with_the_dashboard_on() -> None:
    with LocalCluster(_objects(), bookmark_interval_seconds=0.1) as apiserver:
        settings = Settings.of(refresh_interval_seconds=300.0, ui_bind="127.0.0.1:9396")
        runtime = build_runtime(settings, kube=Kube.for_url(apiserver.url))
        runtime.start()
        try:
            assert runtime.cache.wait_synced(5)
            client = runtime.app.test_client()
            overview = client.get("/ui/api/overview")
            assert overview.status_code == 200, overview.text
            (traits,) = [sink for sink in runtime.sync.reflector("nodes").sinks if isinstance(sink, NodeTraitsSink)]
            assert set(traits.traits() or {}) == {"node0", "node1", "node2"}

            runtime.kube.patch_node("node1", {"spec": {"unschedulable": True}})
            wait_for(lambda: (traits.traits() or {})["node1"].unschedulable, what="the cordon in the node traits")
            assert client.get("/ui/api/overview").status_code == 200
            time.sleep(0.3)  # a few bookmark intervals: a second watch, if any, would be open by now
        finally:
            runtime.stop()
        for path in (NODE_PATH, POD_PATH):
            queries = apiserver.requests("GET", path)
            assert [_is_watch(query) for query in queries] == [True], f"{path}: {queries}"


class _Names:
    """A sink that keeps the names of the objects it is told about."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def listing(self) -> _Names:
        self.pending: set[str] = set()
        return self

    def add(self, key: str, obj: dict[str, Any]) -> None:
        self.pending.add(obj["metadata"]["name"])

    def done(self) -> None:
        self.names = self.pending

    def apply(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        (self.names.discard if kind == "DELETED" else self.names.add)(obj["metadata"]["name"])

    def current(self, at: float) -> None:
        pass


def test_a_third_resource_is_one_registration() -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "quota-a", "namespace": "team"}}
    with LocalCluster([*_objects(), config_map], bookmark_interval_seconds=0.1) as apiserver:
        kube = Kube.for_url(apiserver.url)
        sync = ClusterSync(ClusterCache(), kube)
        names = _Names()
        third = Reflector(KubeSource.collection(kube, "configmaps", "/api/v1/configmaps",
                                                lambda obj: obj["metadata"]["uid"]), sync.options)
        third.add_sink(names)
        sync.register(third)
        sync.start()
        try:
            assert sync._cache.wait_synced(5)
            assert names.names == {"quota-a"}
            assert [status.resource for status in sync.statuses()] == ["nodes", "pods", "resourcequotas", "configmaps"]
            assert third.status.list_mode == STREAMING and sync.readiness() == (True, "cluster cache is in sync")
            apiserver.load([{**config_map, "metadata": {"name": "quota-b", "namespace": "team"}}])
            wait_for(lambda: names.names == {"quota-a", "quota-b"}, what="the new ConfigMap's event")
            assert len(apiserver.requests("GET", "/api/v1/configmaps")) == 1  # listed and watched by one request
        finally:
            sync.stop()
            kube.close()
