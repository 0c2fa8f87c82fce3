"""The in-process API server, driven through the official client (our `Kube` adapter and raw `CoreV1Api`).

Covers: node/pod CRUD and server-side defaults; merge, strategic and JSON patch (null deletes, failed
``test`` → 422); resourceVersion compare-and-swap on PATCH and PUT (409); AlreadyExists; bindings (201,
second one 409, missing pod 404); pod status only through ``/status``; watches (ADDED/MODIFIED/DELETED in
order, resume from a resourceVersion, 410 through `GoneError`, selectors on watch); paginated lists (``limit``
and ``continue`` from one snapshot, 410 once the history moved past it); label and field selectors on list;
loading multi-document YAML and ``kind: List``; injected failures (``skip``) and the fault modes (reset =
applied then unanswered, delay and drip cut at the caller's deadline, cut watches); secrets;
MutatingWebhookConfiguration JSON patch; events; Status bodies reaching `KubeError` (404, 409, and 422 as
`InvalidError`); concurrent CAS patches.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from hami_web.kube import (
    ConflictError,
    GoneError,
    InvalidError,
    Kube,
    KubeError,
    NotFoundError,
    WatchEvent,
    deadline,
    join_pages,
)
from hami_web.localcluster import LocalCluster


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(name: str, namespace: str = "default", *, node_name: str = "", phase: str = "", **labels: str) -> dict:
    body: dict = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                                  "labels": labels},
                  "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    if node_name:
        body["spec"]["nodeName"] = node_name
    if phase:
        body["status"] = {"phase": phase}
    return body


@pytest.fixture
def core(kube: Kube) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kube._api_client)


def raw(response: object) -> dict:
    """Body of a ``_preload_content=False`` response."""
    return json.loads(response.data)  # type: ignore[attr-defined]


def status_of(error: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(error.value.body)


# -- CRUD and defaults ---------------------------------------------------------------------------------


def test_create_fills_server_side_defaults(core: kubernetes.client.CoreV1Api) -> None:
    created = raw(core.create_namespaced_pod("team-a", {"metadata": {"generateName": "job-"},
                                                        "spec": {"containers": [{"name": "c", "image": "x"}]}},
                                             _preload_content=False))
    metadata = created["metadata"]
    assert metadata["name"].startswith("job-") and len(metadata["name"]) > 4
    assert metadata["namespace"] == "team-a"
    assert len(metadata["uid"]) == 36 and metadata["creationTimestamp"].endswith("Z")
    assert int(metadata["resourceVersion"]) > 0
    assert (created["kind"], created["apiVersion"], created["status"]["phase"]) == ("Pod", "v1", "Pending")


def test_node_and_pod_crud(kube: Kube, core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    core.create_node(node("n1", gpu="on"), _preload_content=False)
    core.create_namespaced_pod("default", pod("p1"), _preload_content=False)
    assert kube.get_node("n1")["metadata"]["labels"] == {"gpu": "on"}
    assert kube.get_pod("default", "p1")["spec"]["containers"][0]["name"] == "main"
    nodes, node_rv = join_pages(kube.list_nodes())
    pods, pod_rv = join_pages(kube.list_pods())
    assert [n["metadata"]["name"] for n in nodes] == ["n1"] and [p["metadata"]["name"] for p in pods] == ["p1"]
    assert node_rv == pod_rv == str(apiserver.resource_version)

    deleted = raw(core.delete_namespaced_pod("p1", "default", _preload_content=False))
    assert deleted["metadata"]["name"] == "p1"  # pods answer the object, as kube's pod registry does
    status = raw(core.delete_node("n1", _preload_content=False))
    assert (status["kind"], status["status"]) == ("Status", "Success")
    assert apiserver.get("pods", "p1", "default") is None and apiserver.list("nodes") == []
    with pytest.raises(NotFoundError):
        kube.get_node("n1")


def test_create_existing_name_is_409_already_exists(core: kubernetes.client.CoreV1Api) -> None:
    core.create_node(node("n1"), _preload_content=False)
    with pytest.raises(ApiException) as error:
        core.create_node(node("n1"), _preload_content=False)
    assert error.value.status == 409
    assert status_of(error)["reason"] == "AlreadyExists"


def test_body_namespace_must_match_the_path(core: kubernetes.client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod("team-a", pod("p1", "team-b"), _preload_content=False)
    assert (error.value.status, status_of(error)["reason"]) == (400, "BadRequest")


def test_not_found_and_conflict_bodies_are_status_objects_whose_message_reaches_kube_error(kube: Kube) -> None:
    with pytest.raises(NotFoundError) as missing:
        kube.get_pod("default", "ghost")
    assert 'pods "ghost" not found' in str(missing.value) and missing.value.status == 404
    kube.create_secret("default", {"metadata": {"name": "s"}})
    with pytest.raises(ConflictError) as exists:
        kube.create_secret("default", {"metadata": {"name": "s"}})
    assert 'secrets "s" already exists' in str(exists.value)


def test_a_write_the_api_finds_invalid_is_an_invalid_error_and_nothing_is_written(
        kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1"), pod("p1")])
    node_rv = apiserver.get("nodes", "n1")["metadata"]["resourceVersion"]
    with pytest.raises(InvalidError) as bad_label:
        kube.patch_node("n1", {"metadata": {"labels": {"gpu": "not a label value!"}}})
    assert bad_label.value.status == 422 and not bad_label.value.outcome_unknown
    assert str(bad_label.value).startswith("patch node n1: HTTP 422: ") and "is invalid" in str(bad_label.value)
    assert isinstance(bad_label.value, KubeError) and not isinstance(bad_label.value, ConflictError)
    assert apiserver.get("nodes", "n1")["metadata"]["resourceVersion"] == node_rv
    # /bind's uid precondition on a pod replaced under the same name: refused as invalid, not as a conflict.
    with pytest.raises(InvalidError) as other_uid:
        kube.patch_pod("default", "p1", {"metadata": {"uid": "not-the-pods-uid"}})
    assert "field is immutable" in str(other_uid.value)


def test_unknown_path_is_a_404_status(core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    client = core.api_client
    response = client.rest_client.request("GET", f"{apiserver.url}/api/v1/widgets")
    assert response.status == 404
    body = json.loads(response.read())
    assert (body["kind"], body["status"], body["code"]) == ("Status", "Failure", 404)


# -- patches and resourceVersion -------------------------------------------------------------------


def test_merge_patch_null_deletes_an_annotation(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    kube.patch_node("n1", {"metadata": {"annotations": {"keep": "1", "drop": "2"}}})
    patched = kube.patch_node("n1", {"metadata": {"annotations": {"drop": None}}})
    assert patched["metadata"]["annotations"] == {"keep": "1"}
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"] == {"keep": "1"}


def test_strategic_merge_patch_merges_maps(core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    apiserver.load([pod("p1", app="x")])
    patched = raw(core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"tier": "gpu"}}},
                                            _content_type="application/strategic-merge-patch+json",
                                            _preload_content=False))
    assert patched["metadata"]["labels"] == {"app": "x", "tier": "gpu"}


def test_json_patch_applies_and_a_failed_test_op_is_422_without_change(
        core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    patch = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}]
    core.patch_node("n1", patch, _content_type="application/json-patch+json", _preload_content=False)
    rv = apiserver.get("nodes", "n1")["metadata"]["resourceVersion"]
    failing = [{"op": "test", "path": "/metadata/annotations/a", "value": "2"},
               {"op": "replace", "path": "/metadata/annotations/a", "value": "3"}]
    with pytest.raises(ApiException) as error:
        core.patch_node("n1", failing, _content_type="application/json-patch+json", _preload_content=False)
    assert (error.value.status, status_of(error)["reason"]) == (422, "Invalid")
    stored = apiserver.get("nodes", "n1")["metadata"]
    assert stored["annotations"] == {"a": "1"} and stored["resourceVersion"] == rv


def test_patch_that_does_not_parse_is_400(core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    response = core.api_client.rest_client.request("PATCH", f"{apiserver.url}/api/v1/nodes/n1",
                                                   headers={"Content-Type": "application/merge-patch+json"},
                                                   body="{not json")
    assert response.status == 400
    assert json.loads(response.read())["reason"] == "BadRequest"


def test_stale_resource_version_in_merge_patch_is_409_and_changes_nothing(
        kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    stale = kube.get_node("n1")["metadata"]["resourceVersion"]
    kube.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
    with pytest.raises(ConflictError) as error:
        kube.patch_node("n1", {"metadata": {"resourceVersion": stale, "annotations": {"a": "2"}}})
    assert "the object has been modified" in str(error.value)
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"] == {"a": "1"}


def test_stale_resource_version_in_put_is_409(kube: Kube, apiserver: LocalCluster) -> None:
    secret = kube.create_secret("default", {"metadata": {"name": "tls"}, "stringData": {"k": "v"}})
    assert secret["data"] == {"k": "dg=="} and "stringData" not in secret
    secret["data"]["k"] = "dzI="
    replaced = kube.replace_secret("default", "tls", secret)
    assert replaced["data"] == {"k": "dzI="}
    assert int(replaced["metadata"]["resourceVersion"]) > int(secret["metadata"]["resourceVersion"])
    with pytest.raises(ConflictError):
        kube.replace_secret("default", "tls", secret)  # still carries the old resourceVersion
    assert kube.get_secret("default", "tls")["data"] == {"k": "dzI="}


def test_patch_cannot_change_identity(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    uid = kube.get_node("n1")["metadata"]["uid"]
    with pytest.raises(KubeError) as renamed:
        kube.patch_node("n1", {"metadata": {"name": "n2"}})
    assert renamed.value.status == 400
    with pytest.raises(KubeError) as new_uid:
        kube.patch_node("n1", {"metadata": {"uid": "other"}})
    assert new_uid.value.status == 422
    assert apiserver.get("nodes", "n1")["metadata"]["uid"] == uid and apiserver.get("nodes", "n2") is None


def test_annotation_values_must_be_strings(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    with pytest.raises(KubeError) as error:
        kube.patch_node("n1", {"metadata": {"annotations": {"count": 3}}})
    assert error.value.status == 422


def test_pod_status_changes_only_through_the_status_subresource(
        kube: Kube, core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    apiserver.load([pod("p1")])
    kube.patch_pod("default", "p1", {"status": {"phase": "Succeeded"}})
    assert apiserver.get("pods", "p1", "default")["status"]["phase"] == "Pending"
    core.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Succeeded"}},
                                     _content_type="application/merge-patch+json", _preload_content=False)
    assert apiserver.get("pods", "p1", "default")["status"]["phase"] == "Succeeded"
    with pytest.raises(KubeError) as error:
        kube.patch_pod("default", "p1", {"spec": {"nodeName": "n1"}})  # binding is the only way
    assert error.value.status == 422


# -- binding ------------------------------------------------------------------------------------------


def test_binding_sets_node_name_once(kube: Kube, core: kubernetes.client.CoreV1Api,
                                     apiserver: LocalCluster) -> None:
    apiserver.load([node("n1"), pod("p1")])
    response = core.create_namespaced_pod_binding(
        "p1", "default", {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False)
    assert response.status == 201 and raw(response)["status"] == "Success"
    assert apiserver.get("pods", "p1", "default")["spec"]["nodeName"] == "n1"
    with pytest.raises(ConflictError) as error:
        kube.bind_pod("default", "p1", "n2")
    assert 'pod p1 is already assigned to node "n1"' in str(error.value)
    with pytest.raises(NotFoundError):
        kube.bind_pod("default", "ghost", "n1")


def test_binding_with_another_uid_is_409(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([pod("p1")])
    with pytest.raises(ConflictError):
        kube.bind_pod("default", "p1", "n1", uid="not-the-pods-uid")
    kube.bind_pod("default", "p1", "n1", uid=apiserver.get("pods", "p1", "default")["metadata"]["uid"])


# -- watch --------------------------------------------------------------------------------------------


def take(events: Iterator[WatchEvent], count: int) -> list[WatchEvent]:
    """The first ``count`` non-bookmark events (fewer if the watch ends first); closes the watch."""
    taken: list[WatchEvent] = []
    for event in events:
        if event.type != "BOOKMARK":
            taken.append(event)
        if len(taken) == count:
            break
    events.close()  # type: ignore[attr-defined]
    return taken


def collect(events: Iterator[WatchEvent], into: list[WatchEvent], count: int) -> threading.Thread:
    def run() -> None:
        into.extend(take(events, count))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_watch_sees_added_modified_deleted_in_order(kube: Kube, core: kubernetes.client.CoreV1Api) -> None:
    _, rv = join_pages(kube.list_pods())
    events: list[WatchEvent] = []
    thread = collect(kube.watch_pods(resource_version=rv, timeout_seconds=5), events, 3)
    time.sleep(0.1)
    core.create_namespaced_pod("default", pod("p1"), _preload_content=False)
    kube.patch_pod("default", "p1", {"metadata": {"annotations": {"hami.io/bind-phase": "allocating"}}})
    core.delete_namespaced_pod("p1", "default", _preload_content=False)
    thread.join(timeout=5)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == \
        [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    assert events[1].object["metadata"]["annotations"] == {"hami.io/bind-phase": "allocating"}
    versions = [int(e.object["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_watch_resumes_after_a_resource_version(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([pod("p1"), pod("p2")])
    resume_from = apiserver.get("pods", "p1", "default")["metadata"]["resourceVersion"]
    apiserver.load([pod("p3")])
    events = take(kube.watch_pods(resource_version=resume_from, timeout_seconds=5), 2)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "p2"), ("ADDED", "p3")]


def test_watch_from_zero_starts_with_the_current_objects(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([pod("p1"), pod("p2")])
    events = take(kube.watch_pods(resource_version="0", timeout_seconds=5), 2)
    assert sorted((e.type, e.object["metadata"]["name"]) for e in events) == [("ADDED", "p1"), ("ADDED", "p2")]


def test_watch_from_a_too_old_resource_version_is_gone() -> None:
    with LocalCluster(history_size=2) as cluster:
        cluster.load([pod(f"p{i}") for i in range(5)])
        kube = Kube.for_url(cluster.url)
        with pytest.raises(GoneError) as error:
            list(kube.watch_pods(resource_version="1", timeout_seconds=1))
        assert error.value.status == 410 and "too old resource version" in str(error.value)
        kube.close()


def test_watch_with_a_label_selector_reports_moves_out_as_deleted(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1", gpu="on"), node("n2")])
    _, rv = join_pages(kube.list_nodes())
    events: list[WatchEvent] = []
    thread = collect(kube.watch_nodes(resource_version=rv, timeout_seconds=5, label_selector="gpu=on"), events, 1)
    time.sleep(0.1)
    kube.patch_node("n2", {"metadata": {"annotations": {"x": "1"}}})  # not selected: no event
    kube.patch_node("n1", {"metadata": {"labels": {"gpu": None}}})
    thread.join(timeout=5)
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("DELETED", "n1")]


def test_stop_ends_open_watches_promptly() -> None:
    cluster = LocalCluster().__enter__()
    watcher = Kube.for_url(cluster.url)
    events: list[WatchEvent] = []
    thread = collect(watcher.watch_pods(resource_version="0", timeout_seconds=60), events, 1)
    time.sleep(0.2)
    started = time.monotonic()
    cluster.stop()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - started < 2
    watcher.close()


# -- pagination ---------------------------------------------------------------------------------------


def test_a_paginated_list_returns_every_object_once_from_one_snapshot(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([pod(f"p{i}") for i in range(7)])
    pages = []
    for page in kube.list_pods(page_size=3):
        pages.append(page)
        if len(pages) == 1:  # a write between two pages belongs to a later list, not this one
            apiserver.load([pod("late")])
    assert [len(page.items) for page in pages] == [3, 3, 1]
    assert [item["metadata"]["name"] for page in pages for item in page.items] == [f"p{i}" for i in range(7)]
    assert len({page.resource_version for page in pages}) == 1
    assert [bool(page.continue_token) for page in pages] == [True, True, False]
    queries = apiserver.requests("GET", "/api/v1/pods")
    assert [q.get("limit") for q in queries] == ["3", "3", "3"]
    assert ["continue" in q for q in queries] == [False, True, True]


def test_a_list_without_limit_is_one_page(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([pod(f"p{i}") for i in range(4)])
    pages = list(kube.list_pods())
    assert len(pages) == 1 and len(pages[0].items) == 4 and not pages[0].continue_token


def test_a_continue_token_older_than_the_history_is_gone() -> None:
    with LocalCluster(history_size=3) as cluster:
        cluster.load([pod(f"p{i}") for i in range(5)])
        kube = Kube.for_url(cluster.url)
        pages = kube.list_pods(page_size=2)
        next(pages)
        cluster.load([node(f"n{i}") for i in range(5)])  # the history moves past the list's version
        with pytest.raises(GoneError) as error:
            next(pages)
        assert error.value.status == 410 and "continue parameter is too old" in str(error.value)
        kube.close()


def test_an_injected_failure_can_skip_the_first_page(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([pod(f"p{i}") for i in range(4)])
    apiserver.inject_failure("GET", "pods", status=500, skip=1)
    pages = kube.list_pods(page_size=2)
    assert len(next(pages).items) == 2
    with pytest.raises(KubeError) as error:
        next(pages)
    assert error.value.status == 500


def test_a_lagging_watch_cache_answers_a_fresh_list_as_kube_apiserver_does(
        kube: Kube, core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    """The ``lag`` fault: a list "not older than" a version is 504 with the cause ``ResourceVersionTooLarge``
    (k8s.io/apiserver storage.NewTooLargeResourceVersionError), which the client tells apart from other 504s; a
    consistent list (no resourceVersion) is served."""
    apiserver.load([pod("p1")])
    apiserver.inject_failure("GET", "pods", mode="lag", count=2)
    with pytest.raises(ApiException) as raw:
        core.list_pod_for_all_namespaces(resource_version="5", resource_version_match="NotOlderThan")
    status = json.loads(raw.value.body)
    assert raw.value.status == 504 and status["reason"] == "Timeout"
    assert status["message"] == "Timeout: Too large resource version: 5, current: 4"
    assert status["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}]
    # The fault's second use: the client's fresh list falls back to one consistent read, which is served.
    before = len(apiserver.logged_requests())
    assert [item["metadata"]["name"] for item in kube.list_pods_on_node("", not_older_than="5")] == ["p1"]
    queries = [query for _method, _path, query in apiserver.logged_requests()[before:]]
    assert [query.get("resourceVersion") for query in queries] == ["5", None]


def test_only_a_too_large_resource_version_is_told_apart_from_other_504s(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.inject_failure("GET", "pods", status=504)
    with pytest.raises(KubeError) as error:
        kube.list_pods_on_node("n1", not_older_than="3")
    assert error.value.status == 504 and type(error.value).__name__ == "KubeError"
    assert error.value.outcome_unknown


# -- selectors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("selector", "expected"), [
    ("gpu=on", ["n1", "n2"]),
    ("gpu==on,zone=a", ["n1"]),
    ("gpu!=on", ["n3", "n4"]),
    ("zone", ["n1", "n3"]),
    ("!zone", ["n2", "n4"]),
    ("zone in (a,b)", ["n1", "n3"]),
    ("zone notin (a),gpu", ["n2", "n3"]),
])
def test_label_selectors_on_list(kube: Kube, apiserver: LocalCluster, selector: str, expected: list[str]) -> None:
    apiserver.load([node("n1", gpu="on", zone="a"), node("n2", gpu="on"), node("n3", gpu="off", zone="b"),
                    node("n4")])
    nodes, _ = join_pages(kube.list_nodes(label_selector=selector))
    assert [n["metadata"]["name"] for n in nodes] == expected


@pytest.mark.parametrize(("selector", "expected"), [
    ("spec.nodeName=n1", ["a"]),
    ("spec.nodeName=", ["c"]),
    ("status.phase!=Succeeded", ["a", "c"]),
    ("metadata.namespace=other,status.phase=Succeeded", ["b"]),
    ("metadata.name=c", ["c"]),
])
def test_field_selectors_on_list(core: kubernetes.client.CoreV1Api, apiserver: LocalCluster, selector: str,
                                 expected: list[str]) -> None:
    apiserver.load([pod("a", node_name="n1", phase="Running"), pod("b", "other", node_name="n2", phase="Succeeded"),
                    pod("c")])
    listed = raw(core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False))
    assert [p["metadata"]["name"] for p in listed["items"]] == expected


def test_bad_selectors_are_400(core: kubernetes.client.CoreV1Api) -> None:
    for kwargs in ({"label_selector": "a in (b"}, {"field_selector": "spec.color=red"}):
        with pytest.raises(ApiException) as error:
            core.list_pod_for_all_namespaces(_preload_content=False, **kwargs)
        assert error.value.status == 400


# -- loading and test helpers -----------------------------------------------------------------------


def test_load_file_reads_multi_document_yaml_and_a_json_list(apiserver: LocalCluster, tmp_path: Path) -> None:
    documents = tmp_path / "seed.yaml"
    documents.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n---\n"
                         "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p1\n  namespace: gpu\n"
                         "spec:\n  containers: [{name: c, image: x}]\nstatus:\n  phase: Running\n")
    listing = tmp_path / "seed.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node("n2"), pod("p2")]}))
    apiserver.load_file(documents)
    apiserver.load_file(listing)
    assert [n["metadata"]["name"] for n in apiserver.list("nodes")] == ["n1", "n2"]
    assert apiserver.get("pods", "p1", "gpu")["status"]["phase"] == "Running"
    assert apiserver.get("pods", "p2")["metadata"]["namespace"] == "default"


def test_load_of_a_yaml_kind_list(tmp_path: Path) -> None:
    seed = tmp_path / "list.yaml"
    seed.write_text("kind: List\nitems:\n- kind: Node\n  metadata: {name: n1}\n")
    cluster = LocalCluster()
    cluster.load_file(seed)
    assert cluster.get("nodes", "n1") is not None


def test_injected_failure_answers_once_then_normal(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1"), pod("p1")])
    apiserver.inject_failure("PATCH", "nodes", name="n1")
    apiserver.inject_failure("POST", "pods", name="p1", status=500, subresource="binding")
    with pytest.raises(ConflictError):
        kube.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
    assert "annotations" not in apiserver.get("nodes", "n1")["metadata"]
    kube.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
    with pytest.raises(KubeError) as error:
        kube.bind_pod("default", "p1", "n1")
    assert error.value.status == 500 and "nodeName" not in apiserver.get("pods", "p1")["spec"]
    kube.bind_pod("default", "p1", "n1")
    assert ("POST", "/api/v1/namespaces/default/pods/p1/binding") in apiserver.request_log


def test_a_reset_applies_the_write_and_drops_the_connection_unanswered(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    apiserver.inject_failure("PATCH", "nodes", name="n1", mode="reset")
    with pytest.raises(KubeError) as lost:
        kube.patch_node("n1", {"metadata": {"annotations": {"a": "1"}}})
    assert lost.value.outcome_unknown and lost.value.status == 0
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"] == {"a": "1"}


def test_a_delay_and_a_drip_are_cut_at_the_callers_deadline(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    for mode in ("delay", "drip"):
        apiserver.inject_failure("GET", "nodes", name="n1", mode=mode, seconds=2.0)
        with deadline(0.3), pytest.raises(KubeError) as slow:
            kube.get_node("n1")
        assert "deadline" in str(slow.value) and slow.value.outcome_unknown
        apiserver.clear_failures()
    assert kube.get_node("n1")["metadata"]["name"] == "n1"


def test_a_cut_watch_ends_with_an_error_after_the_events_it_sent(kube: Kube, apiserver: LocalCluster) -> None:
    apiserver.load([node("n1"), node("n2")])
    apiserver.inject_failure("GET", "nodes", mode="cut", events=1)
    assert len(join_pages(kube.list_nodes())[0]) == 2  # a list is not a watch: the fault waits for the watch
    received = []
    with pytest.raises(KubeError):
        for event in kube.watch_nodes(resource_version="", timeout_seconds=5):
            received.append(event.object["metadata"]["name"])
    assert received == ["n1"]


def test_an_unknown_fault_mode_is_refused(apiserver: LocalCluster) -> None:
    with pytest.raises(ValueError, match="unknown fault mode"):
        apiserver.inject_failure("GET", "nodes", mode="explode")


def test_get_returns_a_copy(apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    apiserver.get("nodes", "n1")["metadata"]["name"] = "changed"
    assert apiserver.get("nodes", "n1")["metadata"]["name"] == "n1"


# -- other types --------------------------------------------------------------------------------------


def test_mutating_webhook_configuration_json_patch_of_the_ca_bundle(kube: Kube, apiserver: LocalCluster) -> None:
    admission = kubernetes.client.AdmissionregistrationV1Api(kube._api_client)
    webhook = {"name": "vgpu.hami.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
               "clientConfig": {"service": {"name": "hami-web", "namespace": "kube-system"}}}
    admission.create_mutating_webhook_configuration(
        {"metadata": {"name": "hami-webhook"}, "webhooks": [webhook]}, _preload_content=False)
    patched = kube.patch_mutating_webhook_configuration(
        "hami-webhook", [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="}])
    assert patched["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    stored = kube.get_mutating_webhook_configuration("hami-webhook")
    assert stored["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert stored["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="


def test_events_create_and_list_by_involved_object(kube: Kube, core: kubernetes.client.CoreV1Api) -> None:
    for pod_name, reason in (("p1", "FilteringFailed"), ("p2", "BindingSucceed")):
        kube.create_event({"metadata": {"generateName": f"{pod_name}.", "namespace": "gpu"},
                           "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": "gpu"},
                           "reason": reason, "message": "m", "type": "Normal"})
    listed = raw(core.list_namespaced_event("gpu", field_selector="involvedObject.name=p1",
                                            _preload_content=False))
    assert [e["reason"] for e in listed["items"]] == ["FilteringFailed"]
    by_reason = raw(core.list_event_for_all_namespaces(field_selector="reason=BindingSucceed",
                                                       _preload_content=False))
    assert [e["involvedObject"]["name"] for e in by_reason["items"]] == ["p2"]


def test_discovery_answers(core: kubernetes.client.CoreV1Api, apiserver: LocalCluster) -> None:
    version = kubernetes.client.VersionApi(core.api_client).get_code(_preload_content=False)
    assert raw(version)["major"] == "1"


# -- concurrency --------------------------------------------------------------------------------------


def test_concurrent_compare_and_swap_patches_lose_no_update(apiserver: LocalCluster) -> None:
    apiserver.load([node("n1")])
    threads_count, rounds = 8, 50
    errors: list[BaseException] = []

    def worker() -> None:
        kube = Kube.for_url(apiserver.url)
        try:
            for _ in range(rounds):
                while True:
                    current = kube.get_node("n1")["metadata"]
                    count = int((current.get("annotations") or {}).get("counter", "0"))
                    try:
                        kube.patch_node("n1", {"metadata": {"resourceVersion": current["resourceVersion"],
                                                            "annotations": {"counter": str(count + 1)}}})
                        break
                    except ConflictError:
                        time.sleep(random.uniform(0, 0.004))  # jittered backoff, as the bind path does
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)
        finally:
            kube.close()

    workers = [threading.Thread(target=worker) for _ in range(threads_count)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    assert errors == []
    assert apiserver.get("nodes", "n1")["metadata"]["annotations"]["counter"] == str(threads_count * rounds)
