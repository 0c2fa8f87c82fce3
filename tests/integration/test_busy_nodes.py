"""Issue 19 through the routes and the in-process API server: binds in few round trips, filters that steer around
nodes busy binding.

Covers: a bind on the happy path sends exactly two requests (the lock, the Binding carrying the booking), asserted
against the API server's request log and ``hami_web_bind_api_calls``; a bind whose lock the cache has not caught up
with lists the node's bound pods once; a bind in a namespace with a device quota books apart (lock, booking, node's
and namespace's pods, Binding); a pod changed since kube-scheduler sent it, or a node changed since the watch showed
it, costs one read and one more write, not a failure (``hami_web_bind_rereads``); a lock whose owner already succeeded
keeps its node busy for a moment (the device plugin removes it next), then is stale and taken with one write. Under
binpack the filter sends the next pod to the fullest node that is not busy: one with a placement not yet bound, or
whose lock a live owner holds, is tried last — until the lock is released, stale by age, or its owner succeeded; with
``--busy-nodes-last=false`` it keeps HAMi's strict order; a pod that fits only on a busy node still gets it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import Placement
from hami_web.core.nodelocks import SeenNode, format_lock
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.cache import ASSUMPTION_GRACE_SECONDS, LOCK_RELEASE_GRACE_SECONDS, ClusterCache

from .helpers import (
    NAMESPACE,
    FakeClock,
    RuntimeFactory,
    Scheduler,
    booking_apart_quota,
    bound_gpu_pod,
    busy_nodes,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    make_runtime_refusing_locked_binds,  # noqa: F401  (the fixture: make_runtime, and so runtime, here)
    metric_value,
    observe_node,
    release_lock,
    wait_for,
)

SMALL = gpu_limits(1, memory_mib=1000, cores=10)


@pytest.fixture
def cluster(apiserver: LocalCluster) -> None:
    """``full`` (one GPU half booked by ``resident``), ``empty`` (one GPU), and pending pods ``pod1``…``pod4``."""
    resident = bound_gpu_pod("resident", "full", "full-gpu0,NVIDIA,4000,10:;", SMALL)
    apiserver.load([gpu_node("full", gpus("full", 1)), gpu_node("empty", gpus("empty", 1)), resident,
                    *(gpu_pod(f"pod{index}", SMALL) for index in range(1, 5))])


def _api_requests(apiserver: LocalCluster, since: int) -> list[tuple[str, str, dict[str, str]]]:
    """Requests after the first ``since``, without watches, events and the settings ConfigMap (sent by other threads:
    the publication at start-up lands during the test's bind on a loaded machine)."""
    return [(method, path, query) for method, path, query in apiserver.logged_requests()[since:]
            if query.get("watch") not in ("true", "1") and "/events" not in path and "/configmaps" not in path]


def _busy(runtime: Runtime, *nodes: str) -> None:
    wait_for(lambda: busy_nodes(runtime.cache) == frozenset(nodes), what=f"busy nodes to be {set(nodes) or '{}'}")


# -- round trips -------------------------------------------------------------------------------------------------


def test_a_bind_on_the_happy_path_sends_two_requests(cluster: None, apiserver: LocalCluster, runtime: Runtime,
                                                      scheduler: Scheduler) -> None:
    """The lock and the Binding, whose annotations kube-apiserver copies onto the pod in the same write that binds it
    (pods/binding storage, ``setPodHostAndAnnotations``); the placement is checked against the cache, whose pod
    stream has seen everything up to the node's version the lock was taken at."""
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod1", "full") == {"Error": ""}

    sent = _api_requests(apiserver, before)
    assert [(method, path) for method, path, _query in sent] == [
        ("PATCH", "/api/v1/nodes/full"),  # the lock, preconditioned on the node's version from the watch
        ("POST", "/api/v1/namespaces/default/pods/pod1/binding"),  # the booking on the pod's version from /filter
    ]
    pod = scheduler.pod("pod1")
    annotations = pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == annotations[names.POD_ASSIGNED_NODE] == "full"
    assert annotations[names.POD_BIND_PHASE] == "allocating"
    assert annotations[names.POD_DEVICES_ALLOCATED] == annotations[names.POD_DEVICES_TO_ALLOCATE] != ""
    assert metric_value(runtime, "hami_web_bind_api_calls_sum") == 2
    assert metric_value(runtime, "hami_web_bind_api_calls_count") == 1


def test_a_bind_the_cache_cannot_vouch_for_lists_the_nodes_pods_once(
        cluster: None, apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler) -> None:
    """The cache's pod stream is behind the version the lock was taken at (the watches stopped, the node changed):
    the node's bound pods are read at that version, from kube-apiserver's watch cache."""
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    runtime.sync.stop()
    kube.patch_node("full", {"metadata": {"annotations": {"example.com/touched": "yes"}}})
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod1", "full") == {"Error": ""}

    sent = _api_requests(apiserver, before)
    assert [(method, path) for method, path, _query in sent] == [
        ("PATCH", "/api/v1/nodes/full"),  # 409: the watch's version is stale
        ("GET", "/api/v1/nodes/full"),
        ("PATCH", "/api/v1/nodes/full"),
        ("GET", "/api/v1/pods"),  # the node's bound pods, at the version the lock was taken at
        ("POST", "/api/v1/namespaces/default/pods/pod1/binding"),
    ]
    listed = sent[3][2]
    assert listed["fieldSelector"] == "spec.nodeName=full"
    assert listed["resourceVersionMatch"] == "NotOlderThan" and listed["resourceVersion"]
    assert metric_value(runtime, "hami_web_bind_rereads_total", what="node_pods") == 1


def test_a_bind_ahead_of_the_pod_stream_waits_for_it_instead_of_listing(
        cluster: None, apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler) -> None:
    """The node changed after the pod stream's last event (as when binpack's line takes a lock the device plugin just
    released): the lock is newer than the cache's pods, and the bind gives the pod stream ``POD_STREAM_WAIT_SECONDS``
    to pass it (other pods' events, every few milliseconds in a burst) before it lists the node's pods."""
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    touched = kube.patch_node("full", {"metadata": {"annotations": {"example.com/touched": "yes"}}})
    version = touched["metadata"]["resourceVersion"]
    wait_for(lambda: (runtime.cache.seen_node("full") or SeenNode("", "")).resource_version == version,
             what="the node watch to show the touched node")
    done = threading.Event()

    def other_pods_change() -> None:  # a burst's other pods: their events move the pod stream on
        count = 0
        while not done.wait(0.02):
            count += 1
            kube.patch_pod(NAMESPACE, "pod4", {"metadata": {"annotations": {"example.com/beat": str(count)}}})

    beats = threading.Thread(target=other_pods_change, daemon=True)
    before = len(apiserver.logged_requests())
    beats.start()
    try:
        assert scheduler.bind("pod1", "full") == {"Error": ""}
    finally:
        done.set()
        beats.join(5)

    sent = [(method, path) for method, path, _query in _api_requests(apiserver, before) if "/pods/pod4" not in path]
    assert sent == [("PATCH", "/api/v1/nodes/full"), ("POST", "/api/v1/namespaces/default/pods/pod1/binding")]
    assert metric_value(runtime, "hami_web_bind_rereads_total", what="node_pods") == 0


def test_a_bind_whose_list_the_watch_cache_cannot_serve_reads_once_more_consistently(
        cluster: None, apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler) -> None:
    """kube-apiserver's watch cache of pods is behind the lock's version and answers 504 Too large resource version
    (no pod written since, no progress notification from etcd: what failed an e2e takeover for 100 s): the node's
    pods are read once more as a consistent read, after the first answer, and the bind goes through."""
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    runtime.sync.stop()
    kube.patch_node("full", {"metadata": {"annotations": {"example.com/touched": "yes"}}})
    apiserver.inject_failure("GET", "pods", mode="lag")
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod1", "full") == {"Error": ""}

    sent = _api_requests(apiserver, before)
    assert [(method, path) for method, path, _query in sent][3:] == [
        ("GET", "/api/v1/pods"),  # at the lock's version: 504 from the lagging watch cache
        ("GET", "/api/v1/pods"),  # a consistent read
        ("POST", "/api/v1/namespaces/default/pods/pod1/binding"),
    ]
    assert sent[3][2]["resourceVersionMatch"] == "NotOlderThan"
    assert "resourceVersion" not in sent[4][2] and sent[4][2]["fieldSelector"] == "spec.nodeName=full"
    assert scheduler.pod("pod1")["spec"]["nodeName"] == "full"


def test_a_bind_whose_consistent_read_fails_too_is_refused_and_nothing_is_bound(
        cluster: None, apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler) -> None:
    """The fallback read is made once, not in a loop: when it fails as well the bind says why and binds nothing."""
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    runtime.sync.stop()
    kube.patch_node("full", {"metadata": {"annotations": {"example.com/touched": "yes"}}})
    apiserver.inject_failure("GET", "pods", mode="lag")
    apiserver.inject_failure("GET", "pods", status=503)  # after the lag fault is used up: the second read

    error = scheduler.bind("pod1", "full")["Error"]

    assert "cannot read node full's pods to verify the placement" in error and "HTTP 503" in error
    assert not scheduler.pod("pod1")["spec"].get("nodeName")


def test_a_bind_booked_apart_sends_its_booking_before_the_binding(cluster: None, apiserver: LocalCluster,
                                                                  runtime: Runtime, scheduler: Scheduler) -> None:
    """A namespace with a device quota: the booking patch, the node's and the namespace's pods read at our write's
    version, then the Binding (docs/quotas.md#namespace-quotas)."""
    apiserver.load([booking_apart_quota()])
    wait_for(lambda: runtime.cache.namespace_quota("default").limits, what="the quota")
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod1", "full") == {"Error": ""}

    sent = _api_requests(apiserver, before)
    assert [(method, path) for method, path, _query in sent] == [
        ("PATCH", "/api/v1/nodes/full"),
        ("PATCH", "/api/v1/namespaces/default/pods/pod1"),  # the booking, on the pod's version from /filter
        ("GET", "/api/v1/pods"),  # the node's bound pods, at our write's version
        ("GET", "/api/v1/namespaces/default/pods"),  # the namespace's pods, at our write's version
        ("POST", "/api/v1/namespaces/default/pods/pod1/binding"),
    ]
    assert all(query["resourceVersionMatch"] == "NotOlderThan" for _, _, query in sent[2:4])
    assert metric_value(runtime, "hami_web_bind_api_calls_sum") == 5


def test_a_pod_changed_since_the_filter_is_read_once_and_bound(cluster: None, apiserver: LocalCluster, kube: Kube,
                                                                runtime: Runtime, scheduler: Scheduler) -> None:
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    kube.patch_pod("default", "pod1", {"metadata": {"labels": {"team": "vision"}}})  # after kube-scheduler read it
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod1", "full") == {"Error": ""}

    sent = [(method, path) for method, path, _query in _api_requests(apiserver, before)]
    assert sent[1:] == [("POST", "/api/v1/namespaces/default/pods/pod1/binding"),  # 409: the pod changed
                        ("GET", "/api/v1/namespaces/default/pods/pod1"),
                        ("POST", "/api/v1/namespaces/default/pods/pod1/binding")]
    assert metric_value(runtime, "hami_web_bind_rereads_total", what="pod") == 1
    pod = scheduler.pod("pod1")
    assert pod["metadata"]["labels"] == {"team": "vision"}
    assert pod["metadata"]["annotations"][names.POD_ASSIGNED_NODE] == pod["spec"]["nodeName"] == "full"


def test_a_node_changed_since_the_watch_is_read_once_and_locked(cluster: None, apiserver: LocalCluster,
                                                                 runtime: Runtime, scheduler: Scheduler) -> None:
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    apiserver.inject_failure("PATCH", "nodes", name="full", status=409)  # as if written just before our lock
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod1", "full") == {"Error": ""}

    sent = [(method, path) for method, path, _query in _api_requests(apiserver, before)]
    # The node did not really change (the 409 was injected): the cache's pod stream has seen its version.
    assert sent == [("PATCH", "/api/v1/nodes/full"), ("GET", "/api/v1/nodes/full"), ("PATCH", "/api/v1/nodes/full"),
                    ("POST", "/api/v1/namespaces/default/pods/pod1/binding")]
    assert metric_value(runtime, "hami_web_bind_rereads_total", what="node") == 1


def test_a_lock_whose_owner_succeeded_is_busy_a_moment_then_taken_with_one_write(
        cluster: None, apiserver: LocalCluster, kube: Kube, make_runtime: RuntimeFactory) -> None:
    clock = FakeClock()
    runtime = make_runtime(clock=clock)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    scheduler.schedule("pod1", ["full", "empty"])
    # The device plugin marked pod1 done but has not removed its lock yet (HAMi writes the two one after the other).
    kube.patch_pod("default", "pod1", {"metadata": {"annotations": {names.POD_BIND_PHASE: "success"}}})
    wait_for(lambda: (held := runtime.cache.held_by(scheduler.pod("pod1")["metadata"]["uid"])) is not None
             and held.bind_phase == "success", what="the cache to see pod1 succeeded")
    assert busy_nodes(runtime.cache) == {"full"}  # its lock goes next: wait for that rather than race it

    clock.advance(LOCK_RELEASE_GRACE_SECONDS + 1)  # the lock was left behind: stale, as /bind would judge it
    assert busy_nodes(runtime.cache) == frozenset()
    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["full"]
    before = len(apiserver.logged_requests())

    assert scheduler.bind("pod2", "full") == {"Error": ""}

    assert len(_api_requests(apiserver, before)) == 2
    assert apiserver.get("nodes", "full")["metadata"]["annotations"][names.NODE_LOCK].endswith(",default,pod2")


# -- steering around busy nodes ----------------------------------------------------------------------------------


def test_a_placement_not_yet_bound_makes_its_node_busy(cluster: None, runtime: Runtime, scheduler: Scheduler) -> None:
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]
    assert busy_nodes(runtime.cache) == {"full"}

    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["empty"]  # binpack's fullest free node
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == ["full"]  # its own placement does not count


def test_a_pod_just_bound_keeps_its_node_busy_until_the_node_stream_shows_its_lock() -> None:
    """Regression (e2e burst under binpack, 4 lock refusals in 40 binds): the two-call bind creates the Binding a moment
    after its lock write, often before the node watch brings the lock; a pod bound is no placement any more, so the
    node looked free and binpack sent the next pod there, into our lock. It stays busy until the node stream shows a
    version newer than the one the lock write was preconditioned on (the lock, then its release), or for the grace."""
    clock = FakeClock()
    cache = ClusterCache(clock=clock)
    for name, version in (("full", "10"), ("empty", "11")):
        node = gpu_node(name, gpus(name, 1))
        node["metadata"]["resourceVersion"] = version
        observe_node(cache, "ADDED", node)
    options = pod_options({}, node_policy="binpack", gpu_policy="spread")

    def place(name: str, candidates: list[str]) -> str:
        pod = gpu_pod(name, SMALL)
        placed = cache.place(uid=f"uid-{name}", namespace=NAMESPACE, name=name, options=options,
                             request=pod_request(pod, RequestDefaults()), candidates=candidates)
        assert isinstance(placed, Placement), placed
        return placed.node

    assert place("pod1", ["full"]) == "full"
    cache.mark_bound("uid-pod1", locked_at="10")  # the lock written on version 10; the watch has not shown it
    assert busy_nodes(cache) == {"full"}
    assert place("pod2", ["full", "empty"]) == "empty"  # not into pod1's lock
    cache.forget("uid-pod2")

    locked = gpu_node("full", gpus("full", 1), annotations={
        names.NODE_LOCK: format_lock(clock(), NAMESPACE, "pod1")})
    locked["metadata"]["resourceVersion"] = "12"
    observe_node(cache, "MODIFIED", locked)
    assert busy_nodes(cache) == {"full"}  # now by the lock itself
    released = gpu_node("full", gpus("full", 1))
    released["metadata"]["resourceVersion"] = "13"
    observe_node(cache, "MODIFIED", released)
    assert busy_nodes(cache) == frozenset()
    assert place("pod2", ["full", "empty"]) == "full"  # packs the fullest free node again
    cache.forget("uid-pod2")

    assert place("pod3", ["full"]) == "full"
    cache.mark_bound("uid-pod3", locked_at="13")
    assert busy_nodes(cache) == {"full"}
    clock.advance(ASSUMPTION_GRACE_SECONDS + 1)  # a lock the node stream never shows: a bind that lost it
    assert busy_nodes(cache) == frozenset()


def test_a_lock_held_by_an_allocating_pod_makes_its_node_busy_until_released(
        cluster: None, kube: Kube, runtime: Runtime, scheduler: Scheduler) -> None:
    scheduler.schedule("pod1", ["full", "empty"])
    _busy(runtime, "full")  # the lock, as the watch shows it; pod1 is bound, so no placement is pending

    assert scheduler.schedule("pod2", ["full", "empty"]) == "empty"
    _busy(runtime, "full", "empty")
    release_lock(kube, "pod1", "full")
    _busy(runtime, "empty")

    assert scheduler.filter("pod3", ["full", "empty"])["NodeNames"] == ["full"]  # packs the fullest free node again


def test_a_lock_older_than_the_timeout_does_not_make_a_node_busy(cluster: None, apiserver: LocalCluster,
                                                                 make_runtime: RuntimeFactory) -> None:
    clock = FakeClock()
    runtime = make_runtime(clock=clock, node_lock_timeout_seconds=60.0)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    scheduler.schedule("pod1", ["full", "empty"])
    _busy(runtime, "full")

    clock.advance(61)
    assert busy_nodes(runtime.cache) == frozenset()
    assert scheduler.schedule("pod2", ["full", "empty"]) == "full"  # the bind takes the stale lock over


def test_strict_hami_order_ignores_busy_nodes(cluster: None, apiserver: LocalCluster,
                                              make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(busy_nodes_last=False)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    scheduler.schedule("pod1", ["full", "empty"])
    _busy(runtime, "full")

    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["full"]
    assert scheduler.bind("pod2", "full") == {"Error": "node full is locked by default/pod1"}


def test_a_pod_that_fits_only_on_a_busy_node_is_still_placed_there(cluster: None, apiserver: LocalCluster,
                                                                     runtime: Runtime, scheduler: Scheduler) -> None:
    pinned: dict[str, Any] = gpu_pod("pinned", SMALL, annotations={names.POD_USE_GPU_UUID: "full-gpu0"})
    apiserver.load([pinned])
    scheduler.schedule("pod1", ["full", "empty"])
    _busy(runtime, "full")

    answer = scheduler.filter("pinned", ["full", "empty"])

    assert answer["NodeNames"] == ["full"] and answer["Error"] == ""  # the only node whose GPU it may use
    assert scheduler.bind("pinned", "full") == {"Error": "node full is locked by default/pod1"}  # bind as before
