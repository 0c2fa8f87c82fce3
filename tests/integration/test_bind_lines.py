"""Binpack's in-process line (``--binpack-lock-queue``, here 10 s, the default depth of 7), through the routes and
the in-process API server.

Covers: under binpack a node whose HAMi lock an allocating pod holds still takes pods until ``depth`` binds are under
way there (the lock and the placements not yet bound), then the next goes elsewhere; spread is unchanged; a lock held
longer than the line's wait (another scheduler's, or a stuck owner's) makes its node busy at once. Binds in a node's
line go first come first served, each only once the watch has shown the previous one's lock come and go, and send no
API call while they wait: the lock and the Binding of each, nothing refused, nothing retried. A bind whose lock is not
released within the line's wait tries it and is refused, as without the line; with the line off the rule of
`test_busy_nodes` holds (a locked node is tried last).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.nodelocks import SeenNode, format_lock
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    annotations_of,
    bound_gpu_pod,
    busy_nodes,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    lock_waits,
    release_lock,
    wait_for,
    with_defaults,
)

SMALL = gpu_limits(1, memory_mib=1000, cores=10)


@pytest.fixture
def make_runtime(make_runtime: RuntimeFactory) -> RuntimeFactory:
    """Runtimes with binpack's line at 10 s (the default) unless a test says otherwise."""
    return with_defaults(make_runtime, binpack_lock_queue_seconds=10.0)


@pytest.fixture
def cluster(apiserver: LocalCluster) -> None:
    """``full`` (one GPU half booked by ``resident``), ``empty`` (one GPU), pending binpack pods ``pod1``…``pod5`` and
    a spread pod ``spread1``."""
    apiserver.load([gpu_node("full", gpus("full", 1)), gpu_node("empty", gpus("empty", 1)),
                    bound_gpu_pod("resident", "full", "full-gpu0,NVIDIA,4000,10:;", SMALL),
                    *(gpu_pod(f"pod{index}", SMALL) for index in range(1, 6)),
                    gpu_pod("spread1", SMALL, annotations={names.POD_NODE_POLICY: "spread"})])


def _lock_seen(runtime: Runtime, node: str, pod: str) -> None:
    wait_for(lambda: (runtime.cache.seen_node(node) or SeenNode("", "")).lock.endswith(f",default,{pod}"),
             what=f"the watch to show {pod}'s lock on {node}")


def _pod1_allocating_on_full(runtime: Runtime, scheduler: Scheduler) -> None:
    """pod1 bound to ``full``; its lock held, as while HAMi's device plugin allocates."""
    assert scheduler.schedule("pod1", ["full", "empty"]) == "full"
    _lock_seen(runtime, "full", "pod1")


def _node_writes(apiserver: LocalCluster, since: int) -> list[str]:
    return [method for method, path, query in apiserver.logged_requests()[since:]
            if path == "/api/v1/nodes/full" and method != "GET" and query.get("watch") not in ("true", "1")]


def test_binpack_sends_pods_to_a_locked_node_until_depth_binds_are_under_way(
        cluster: None, apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(binpack_lock_queue_depth=3)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    _pod1_allocating_on_full(runtime, scheduler)
    assert busy_nodes(runtime.cache) == {"full"}  # at depth 1, the rule of the other policies

    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["full"]  # the lock and pod2: two under way
    assert scheduler.filter("pod3", ["full", "empty"])["NodeNames"] == ["full"]  # three: the depth
    assert scheduler.filter("pod4", ["full", "empty"])["NodeNames"] == ["empty"]
    assert scheduler.filter("spread1", ["full", "empty"])["NodeNames"] == ["empty"]  # spread: the emptiest anyway


def test_spread_keeps_trying_a_locked_node_last(cluster: None, apiserver: LocalCluster, runtime: Runtime,
                                                 scheduler: Scheduler) -> None:
    """The line serves binpack only: a spread pod that would rank ``full`` first still goes around its lock."""
    # now "empty" is the fuller node: spread ranks "full" first
    apiserver.load([bound_gpu_pod("resident2", "empty", "empty-gpu0,NVIDIA,6000,10:;", SMALL)])

    def booked() -> bool:
        view = runtime.cache.node_view("empty")
        return view is not None and any(memory >= 6000 for _tasks, memory, _cores in view.usage_rows)

    wait_for(booked, what="resident2's booking in the cache")
    assert scheduler.schedule("pod1", ["full"]) == "full"
    _lock_seen(runtime, "full", "pod1")
    assert scheduler.filter("spread1", ["full", "empty"])["NodeNames"] == ["empty"]


@pytest.mark.parametrize(("age_seconds", "chosen"),
                         [(0.0, "full"), (5.0, "full"), (15.0, "empty"), (25.0, "empty"), (60.0, "full")])
def test_a_lock_held_longer_than_the_lines_wait_makes_its_node_busy(
        cluster: None, apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler,
        age_seconds: float, chosen: str) -> None:
    """Another scheduler's lock (its owner unknown here, younger than the grace after which it would count as gone):
    a young one is waited for in line; one older than the line's 10 s will not be released in time — its owner is
    stuck, or slow — so binpack goes around it rather than send pods to wait and be refused. Past the grace (30 s)
    with its owner still unknown the lock is stale (`test_busy_nodes`): free again, its bind takes it over."""
    kube.patch_node("full", {"metadata": {"annotations": {
        names.NODE_LOCK: format_lock(time.time() - age_seconds, "elsewhere", "foreign")}}})
    wait_for(lambda: (runtime.cache.seen_node("full") or SeenNode("", "")).lock != "", what="the foreign lock")
    assert scheduler.filter("pod1", ["full", "empty"])["NodeNames"] == [chosen]


def test_binds_in_line_go_first_come_first_served_and_send_nothing_while_they_wait(
        cluster: None, apiserver: LocalCluster, kube: Kube, runtime: Runtime, scheduler: Scheduler) -> None:
    _pod1_allocating_on_full(runtime, scheduler)
    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["full"]
    assert scheduler.filter("pod3", ["full", "empty"])["NodeNames"] == ["full"]
    before = len(apiserver.logged_requests())
    answers: dict[str, Any] = {}

    def bind(pod: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.__setitem__(pod, scheduler.bind(pod, "full")))
        thread.start()
        return thread

    second = bind("pod2")
    wait_for(lambda: lock_waits(runtime, "queued") == 1, what="pod2 in line")
    third = bind("pod3")
    wait_for(lambda: lock_waits(runtime, "queued") == 2, what="pod3 in line")
    time.sleep(0.3)
    assert _node_writes(apiserver, before) == []  # waiting in line sends nothing

    release_lock(kube, "pod1", "full")  # pod1's device plugin is done: pod2, first in line, goes
    second.join(5)
    assert answers.get("pod2") == {"Error": ""}
    _lock_seen(runtime, "full", "pod2")
    time.sleep(0.3)
    assert third.is_alive()  # pod3 waits for pod2's lock to be released
    assert "pod3" not in answers

    release_lock(kube, "pod2", "full")
    third.join(5)
    assert answers.get("pod3") == {"Error": ""}
    assert annotations_of(apiserver, "nodes", "full")[names.NODE_LOCK].endswith(",default,pod3")
    # Each bind wrote the lock once, each release once: no write refused for a stale version, none retried.
    assert _node_writes(apiserver, before) == ["PATCH"] * 4
    assert lock_waits(runtime, "queue_released") == 2
    assert lock_waits(runtime, "queue_timed_out") == 0


def test_a_bind_whose_lock_is_not_released_within_the_lines_wait_is_refused(
        cluster: None, apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    """A 2 s line with locks held 1 s (the estimate before any release was seen) lets one bind wait behind the lock."""
    runtime = make_runtime(binpack_lock_queue_seconds=2.0)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    _pod1_allocating_on_full(runtime, scheduler)

    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["full"]
    assert scheduler.filter("pod3", ["full", "empty"])["NodeNames"] == ["empty"]  # a second would not get it in time
    started = time.monotonic()
    assert scheduler.bind("pod2", "full") == {"Error": "node full is locked by default/pod1"}
    assert time.monotonic() - started >= 2.0
    assert lock_waits(runtime, "queue_timed_out") == 1
    assert scheduler.pod("pod2")["spec"].get("nodeName") is None


def test_with_the_line_off_a_locked_node_is_tried_last_and_its_bind_refused_at_once(
        cluster: None, apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(binpack_lock_queue_seconds=0.0)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    _pod1_allocating_on_full(runtime, scheduler)

    assert scheduler.filter("pod2", ["full", "empty"])["NodeNames"] == ["empty"]
    assert scheduler.filter("pod3", ["full"])["NodeNames"] == ["full"]  # the only candidate: still placed there
    assert scheduler.bind("pod3", "full") == {"Error": "node full is locked by default/pod1"}
    assert lock_waits(runtime, "queued") == 0
