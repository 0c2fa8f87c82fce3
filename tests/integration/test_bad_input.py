"""Bad input on ``/filter`` and ``/bind`` (docs/wire-formats.md#extender-requests-and-answers): always HTTP 200 with a
clear ``Error``, never a 500.

Covers: a body that is not JSON, JSON null, a JSON list, a missing Pod, a Pod that is not an object or has
no uid/name/spec, NodeNames that is not a list of strings, neither NodeNames nor Nodes, Nodes items that
are not a list or lack names, unreadable GPU quantities, a body over 4 MiB; for ``/bind``: not JSON, a list,
a missing or non-string PodName, a missing Node. After each, nothing changed: no write reached the API
server, the cache holds nothing, and a valid request still works.
"""

from __future__ import annotations

import json

import pytest

from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import Scheduler, gpu_limits, gpu_node, gpu_pod, usage_by_gpu

OVER_4_MIB = b'{"Pod": "' + b"x" * (4 * 1024 * 1024) + b'"}'


@pytest.fixture
def ready(apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> dict:
    """``node1`` and a GPU pod ``pod1``; returns the pod as stored."""
    apiserver.load([gpu_node("node1"), gpu_pod("pod1")])
    runtime.sync.sync_now()
    return scheduler.pod("pod1")


def _writes(apiserver: LocalCluster) -> list[tuple[str, str]]:
    """The writes the API saw, without events and the published settings ConfigMap: other threads send those (the
    publication at start-up can land inside the test's window on a loaded machine), and neither is a pod or node."""
    return [(method, path) for method, path in apiserver.request_log
            if method != "GET" and "/events" not in path and "/configmaps" not in path]


def _filter_bodies(pod: dict) -> list[tuple[str, bytes]]:
    no_uid = {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "uid"}}
    no_spec = {k: v for k, v in pod.items() if k != "spec"}
    bad_quantity = json.loads(json.dumps(pod))
    bad_quantity["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "one"
    cases = {
        "not JSON": b"{this is not json",
        "JSON null": b"null",
        "JSON list": b"[1, 2, 3]",
        "missing Pod": json.dumps({"NodeNames": ["node1"]}).encode(),
        "Pod not an object": json.dumps({"Pod": "pod1", "NodeNames": ["node1"]}).encode(),
        "Pod without uid": json.dumps({"Pod": no_uid, "NodeNames": ["node1"]}).encode(),
        "Pod without spec": json.dumps({"Pod": no_spec, "NodeNames": ["node1"]}).encode(),
        "NodeNames not a list": json.dumps({"Pod": pod, "NodeNames": "node1"}).encode(),
        "NodeNames of numbers": json.dumps({"Pod": pod, "NodeNames": [1]}).encode(),
        "no candidates": json.dumps({"Pod": pod}).encode(),
        "Nodes items not a list": json.dumps({"Pod": pod, "Nodes": {"items": "node1"}}).encode(),
        "Nodes item without name": json.dumps({"Pod": pod, "Nodes": {"items": [{"metadata": {}}]}}).encode(),
        "unreadable quantity": json.dumps({"Pod": bad_quantity, "NodeNames": ["node1"]}).encode(),
        "over 4 MiB": OVER_4_MIB,
    }
    return list(cases.items())


def _bind_bodies(pod: dict) -> list[tuple[str, bytes]]:
    valid = {"PodName": "pod1", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "node1"}
    cases = {
        "not JSON": b"PodName=pod1",
        "JSON list": json.dumps([valid]).encode(),
        "missing PodName": json.dumps({k: v for k, v in valid.items() if k != "PodName"}).encode(),
        "PodName not a string": json.dumps({**valid, "PodName": 7}).encode(),
        "missing Node": json.dumps({k: v for k, v in valid.items() if k != "Node"}).encode(),
        "over 4 MiB": OVER_4_MIB,
    }
    return list(cases.items())


@pytest.mark.parametrize("route", ["/filter", "/bind"])
def test_bad_input_is_answered_with_an_error_and_changes_nothing(ready: dict, scheduler: Scheduler,
                                                                 apiserver: LocalCluster, runtime: Runtime,
                                                                 route: str) -> None:
    bodies = _filter_bodies(ready) if route == "/filter" else _bind_bodies(ready)
    writes_before = _writes(apiserver)
    for case, body in bodies:
        response = scheduler.client.post(route, data=body, content_type="application/json")
        assert response.status_code == 200, (case, response.status_code)
        answer = response.get_json()
        assert isinstance(answer, dict) and isinstance(answer.get("Error"), str), case
        assert answer["Error"].strip(), case
        assert "Traceback" not in answer["Error"], case
    # The unreadable quantity is refused with a FilteringFailed event; nothing else writes anything.
    assert _writes(apiserver)[len(writes_before):] == []
    assert scheduler.pod("pod1") == ready
    assert usage_by_gpu(runtime) == {}
    assert scheduler.filter("pod1", ["node1"])["NodeNames"] == ["node1"]


def test_errors_say_what_is_wrong(ready: dict, scheduler: Scheduler) -> None:
    def error(route: str, body: bytes) -> str:
        return scheduler.client.post(route, data=body, content_type="application/json").get_json()["Error"]

    assert "not JSON" in error("/filter", b"{oops")
    assert "must be a JSON object" in error("/filter", b"[]")
    assert "no Pod" in error("/filter", b"{}")
    assert "uid" in error("/filter", json.dumps({"Pod": {"metadata": {"name": "p"}, "spec": {}},
                                                  "NodeNames": []}).encode())
    assert "NodeNames must be a list" in error("/filter", json.dumps({"Pod": ready, "NodeNames": "n"}).encode())
    assert "PodName" in error("/bind", json.dumps({"PodNamespace": "default", "Node": "node1"}).encode())
    too_large = error("/filter", OVER_4_MIB)
    assert too_large == "/filter: request body is larger than the 4 MiB limit"


def test_an_unreadable_gpu_quantity_names_the_container_and_resource(ready: dict, scheduler: Scheduler) -> None:
    pod = gpu_pod("pod1", gpu_limits(1, memory_mib="3.5"))
    pod["metadata"]["uid"] = ready["metadata"]["uid"]
    answer = scheduler.post("/filter", {"Pod": pod, "NodeNames": ["node1"]})
    assert "main" in answer["Error"] and "nvidia.com/gpumem" in answer["Error"]
