"""The dashboard on device-aware preemption (docs/preemption.md), from the running server's memory.

Covers: the overview's JSON twin and page list a preemptor's hold (pod, priority, node, the victim it still waits for,
when it lapses) while its victim terminates, and nothing once the preemptor is placed; the pending page's explanation
of the preemptor says it waits for the terminating pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from tests.dashboard.conftest import ui_get
from tests.integration.helpers import (
    SYNC_TIMEOUT_SECONDS,
    Scheduler,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    release_lock,
    wait_for,
)


def _pod(name: str, priority: int) -> dict[str, Any]:
    body = gpu_pod(name, gpu_limits(memory_mib=8000))
    body["spec"]["priority"] = priority
    return body


@pytest.fixture
def preempting() -> Iterator[tuple[LocalCluster, Runtime, Scheduler]]:
    with LocalCluster(bookmark_interval_seconds=0.1, graceful_pod_deletion=True) as apiserver:
        apiserver.load([gpu_node("node1", gpus("node1", 1)), _pod("low", 1), _pod("urgent", 100)])
        runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0), kube=Kube.for_url(apiserver.url))
        runtime.start()
        try:
            assert runtime.cache.wait_synced(SYNC_TIMEOUT_SECONDS)
            scheduler = Scheduler(runtime.app.test_client(), apiserver)
            release_lock(runtime.kube, "low", scheduler.schedule("low", ["node1"]))
            scheduler.filter("urgent", ["node1"])
            assert runtime.preempter is not None
            wait_for(lambda: (apiserver.get("pods", "low", "default") or {}).get("metadata", {})
                     .get("deletionTimestamp"), what="low terminating")
            wait_for(runtime.preempter.idle.is_set, what="the act done")
            yield apiserver, runtime, scheduler
        finally:
            runtime.stop()


def test_the_overview_lists_the_hold_until_the_preemptor_is_placed(
        preempting: tuple[LocalCluster, Runtime, Scheduler]) -> None:
    apiserver, runtime, scheduler = preempting
    [hold] = ui_get(runtime, "/ui/api/overview")["holds"]
    assert {key: hold[key] for key in ("pod", "priority", "node", "preempted", "waiting_for")} == {
        "pod": "default/urgent", "priority": 100, "node": "node1", "preempted": True, "waiting_for": ["default/low"]}
    assert 0 < hold["expires_in_seconds"] <= 300
    page = ui_get(runtime, "/ui/")
    assert 'id="preemption-holds"' in page and "waiting for 1 preempted pod: default/low" in page
    requests.delete(f"{apiserver.url}/api/v1/namespaces/default/pods/low", params={"gracePeriodSeconds": "0"},
                    timeout=5)
    wait_for(lambda: not runtime.cache.holds()[0].remaining, what="the victim gone")
    assert scheduler.filter("urgent", ["node1"])["NodeNames"] == ["node1"]
    assert ui_get(runtime, "/ui/api/overview")["holds"] == []


def test_the_pending_page_says_the_preemptor_waits_for_its_victim(
        preempting: tuple[LocalCluster, Runtime, Scheduler]) -> None:
    _, runtime, _ = preempting
    [pending] = ui_get(runtime, "/ui/api/pending")["pods"]
    assert pending["pod"] == "default/urgent"
    # The pod as its last filter saw it, before its nomination: its victim is a terminating pod there.
    assert pending["now"]["preemption"] == "waiting for 1 terminating pod on node1 (default/low)"
