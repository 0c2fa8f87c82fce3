"""Paginated lists on the in-process API server (``limit`` and ``continue``), as kube-apiserver serves them.

Covers: pages of ``limit`` items in order with ``remainingItemCount`` and a ``continue`` token, the last page
without one; every page of one list comes from the first page's snapshot (an object created in between is
not in it, and the resourceVersion stays the first page's); a token used for another list is a 400, a
malformed one a 400, one whose snapshot was dropped a 410 Expired (a fresh list still works); no ``limit``
gives everything.
"""

from __future__ import annotations

import pytest
import requests

from hami_web.kube import Kube, join_pages
from hami_web.localcluster import LocalCluster
from hami_web.localcluster.server import MAX_LIST_SNAPSHOTS as LIST_SNAPSHOTS


def _nodes(count: int) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:02d}"}} for i in range(count)]


def _get(cluster: LocalCluster, path: str, **params: str) -> requests.Response:
    return requests.get(f"{cluster.url}{path}", params=params, timeout=5)


def test_pages_come_in_order_from_one_snapshot() -> None:
    with LocalCluster(_nodes(5)) as cluster:
        first = _get(cluster, "/api/v1/nodes", limit="2").json()
        cluster.load([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-01a"}}])
        second = _get(cluster, "/api/v1/nodes", limit="2", **{"continue": first["metadata"]["continue"]}).json()
        third = _get(cluster, "/api/v1/nodes", limit="2", **{"continue": second["metadata"]["continue"]}).json()

    names = [[item["metadata"]["name"] for item in page["items"]] for page in (first, second, third)]
    assert names == [["node-00", "node-01"], ["node-02", "node-03"], ["node-04"]]
    assert (first["metadata"]["remainingItemCount"], second["metadata"]["remainingItemCount"]) == (3, 1)
    assert "continue" not in third["metadata"]
    assert first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"] \
        == third["metadata"]["resourceVersion"]


def test_no_limit_gives_everything() -> None:
    with LocalCluster(_nodes(3)) as cluster:
        body = _get(cluster, "/api/v1/nodes").json()
    assert len(body["items"]) == 3 and "continue" not in body["metadata"]


@pytest.mark.parametrize(("params", "message"), [
    pytest.param({"limit": "x"}, "invalid limit", id="limit"),
    pytest.param({"limit": "2", "continue": "not-a-token"}, "continue key is not valid", id="token"),
])
def test_malformed_paging_parameters_are_bad_requests(params: dict[str, str], message: str) -> None:
    with LocalCluster(_nodes(3)) as cluster:
        response = _get(cluster, "/api/v1/nodes", **params)
    assert response.status_code == 400
    assert message in response.json()["message"]


def test_a_token_for_another_list_is_refused() -> None:
    # A token names a snapshot of one list (resource, namespace, selectors); another list has none: the client is
    # told to start again (410 Expired), never given pages of the wrong list.
    with LocalCluster(_nodes(3)) as cluster:
        token = _get(cluster, "/api/v1/nodes", limit="1").json()["metadata"]["continue"]
        response = _get(cluster, "/api/v1/pods", limit="1", **{"continue": token})
    assert (response.status_code, response.json()["reason"]) == (410, "Expired")


def test_an_expired_snapshot_is_410_for_the_client() -> None:
    with LocalCluster(_nodes(3)) as cluster:
        token = _get(cluster, "/api/v1/nodes", limit="1").json()["metadata"]["continue"]
        for index in range(LIST_SNAPSHOTS):  # newer unfinished lists push the first snapshot out
            _get(cluster, "/api/v1/nodes", limit="1", labelSelector=f"unrelated-{index}!=x")
        response = _get(cluster, "/api/v1/nodes", limit="1", **{"continue": token})
        assert (response.status_code, response.json()["reason"]) == (410, "Expired")
        kube = Kube.for_url(cluster.url)
        try:  # a fresh list still works, page by page
            assert len(join_pages(kube.list_nodes(page_size=1))[0]) == 3
        finally:
            kube.close()
