"""The dashboard applies kube-scheduler's node rules and forgets pods that stopped waiting.

Covers: what-if leaves out a cordoned node and a node whose taint the shape does not tolerate, each with
kube-scheduler's reason, and counts the tainted node again once the shape tolerates the taint; a node
selector in the form leaves out the nodes it does not match; the node facts follow the API within seconds
(a watch, started by the first page that needs it); the pending page shows the reasons kube-scheduler
leaves nodes out for; a pending pod deleted from the API leaves the pending page within seconds (the cache's
pod watch tells the decision log), not after the 15 minutes a silent pod is remembered.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from typing import Any

import kubernetes.client
import pytest
from flask.testing import FlaskClient

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from tests.integration.helpers import SYNC_TIMEOUT_SECONDS, wait_for

from .conftest import play_demo

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNTOLERATED = "node(s) had untolerated taint {nvidia.com/gpu: present}"


@pytest.fixture
def cluster() -> Iterator[tuple[LocalCluster, Runtime]]:
    """The demo cluster played through a running runtime; each test may change it."""
    with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
        apiserver.load_file(str(resources.files("hami_web").joinpath("examples/cluster.yaml")))
        runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0), kube=Kube.for_url(apiserver.url))
        runtime.start()
        try:
            assert runtime.cache.wait_synced(SYNC_TIMEOUT_SECONDS)
            play_demo(apiserver, runtime)
            yield apiserver, runtime
        finally:
            runtime.stop()


def _whatif(client: FlaskClient, **query: str) -> dict[str, Any]:
    response = client.get("/ui/api/whatif", query_string={"gpus": "1", "memory_mib": "1000", **query})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _left_out(answer: dict[str, Any]) -> dict[str, list[str]]:
    return {group["cause"]: list(group["examples"]) for group in answer["answer"]["left_out"]}


def test_whatif_leaves_out_cordoned_and_tainted_nodes_with_the_reason(
        cluster: tuple[LocalCluster, Runtime]) -> None:
    _, runtime = cluster
    client = runtime.app.test_client()
    before = _whatif(client)
    assert before["answer"]["left_out"] == [] and before["node_rules_note"] == ""
    runtime.kube.patch_node("gpu-a40-1", {"spec": {"unschedulable": True}})
    runtime.kube.patch_node("gpu-a100-1", {"spec": {"taints": [GPU_TAINT]}})

    def both_left_out() -> dict[str, Any] | None:
        answer = _whatif(client)
        return answer if len(answer["answer"]["left_out"]) == 2 else None

    after = wait_for(both_left_out, timeout_seconds=5.0, what="the node changes to reach the dashboard")
    assert _left_out(after) == {"node(s) were unschedulable": ["gpu-a40-1"], UNTOLERATED: ["gpu-a100-1"]}
    assert after["answer"]["fits"] < before["answer"]["fits"]
    assert not {"gpu-a40-1", "gpu-a100-1"} & {row["node"] for row in after["answer"]["by_node"]}

    tolerating = _whatif(client, tolerations="nvidia.com/gpu:NoSchedule")
    assert _left_out(tolerating) == {"node(s) were unschedulable": ["gpu-a40-1"]}
    assert "gpu-a100-1" in {row["node"] for row in tolerating["answer"]["by_node"]}

    page = client.get("/ui/whatif", query_string={"gpus": "1", "memory_mib": "1000"}).get_data(as_text=True)
    assert "Left out by kube-scheduler" in page and "node(s) had untolerated taint" in page


def test_whatif_node_selector_leaves_out_unselected_nodes(cluster: tuple[LocalCluster, Runtime]) -> None:
    _, runtime = cluster
    answer = _whatif(runtime.app.test_client(), node_selector="kubernetes.io/hostname=gpu-t4-1")
    unselected = _left_out(answer)["node(s) didn't match Pod's node affinity/selector"]
    assert "gpu-t4-1" not in unselected and len(unselected) == 3
    assert [row["node"] for row in answer["answer"]["by_node"]] == ["gpu-t4-1"]


def test_a_bad_toleration_is_a_400_naming_it(cluster: tuple[LocalCluster, Runtime]) -> None:
    response = cluster[1].app.test_client().get("/ui/api/whatif", query_string={
        "gpus": "1", "tolerations": "nvidia.com/gpu:Sometimes"})
    assert response.status_code == 400
    assert "toleration 'nvidia.com/gpu:Sometimes': effect must be one of" in response.get_json()["message"]


def test_the_pending_page_shows_nodes_kube_scheduler_leaves_out(cluster: tuple[LocalCluster, Runtime]) -> None:
    _, runtime = cluster
    runtime.kube.patch_node("gpu-t4-1", {"spec": {"taints": [GPU_TAINT]}})
    client = runtime.app.test_client()

    def shown() -> dict[str, Any] | None:
        pods = {pod["pod"]: pod for pod in client.get("/ui/api/pending").get_json()["pods"]}
        return pods["ml/too-big"] if pods["ml/too-big"]["now"]["node_rules"] else None

    pod = wait_for(shown, timeout_seconds=5.0, what="the taint to reach the pending page")
    assert pod["pod"] == "ml/too-big"
    assert [(g["cause"], g["examples"]) for g in pod["now"]["node_rules"]] == [(UNTOLERATED, ["gpu-t4-1"])]
    assert "Left out by kube-scheduler" in client.get("/ui/pending").get_data(as_text=True)


def test_a_deleted_pending_pod_leaves_the_pending_page_within_seconds(
        cluster: tuple[LocalCluster, Runtime]) -> None:
    apiserver, runtime = cluster
    client = runtime.app.test_client()
    def pending() -> list[str]:
        return [pod["pod"] for pod in client.get("/ui/api/pending").get_json()["pods"]]

    assert "ml/too-big" in pending()
    configuration = kubernetes.client.Configuration()
    configuration.host = apiserver.url
    with kubernetes.client.ApiClient(configuration) as api_client:  # as kubectl delete would
        kubernetes.client.CoreV1Api(api_client).delete_namespaced_pod("too-big", "ml")
    wait_for(lambda: "ml/too-big" not in pending(), timeout_seconds=5.0,
             what="the deleted pod to leave the pending page")
    assert 'data-pod="ml/too-big"' not in client.get("/ui/pending").get_data(as_text=True)
