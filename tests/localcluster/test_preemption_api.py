"""What the in-process API server serves for preemption (docs/preemption.md), through the official client.

Covers: DeleteOptions preconditions (a uid or resourceVersion that does not match is a 409 and deletes nothing);
graceful pod deletion when asked for (a pod on a node with a grace period gets ``deletionTimestamp`` and
``deletionGracePeriodSeconds``, a watch sees it MODIFIED, a delete with grace 0 ends it; a pod on no node, or with
grace 0 in its spec, goes at once) and every delete at once without it; PodDisruptionBudgets (policy/v1) created,
listed, their status written through ``/status``; SelfSubjectAccessReview answering for the caller's
ServiceAccount token (its ClusterRoleBindings, subresources named ``pods/status``) and allowing the tokenless
administrator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import requests

from hami_web.kube import ConflictError, Kube
from hami_web.localcluster import LocalCluster


@pytest.fixture
def graceful() -> Iterator[LocalCluster]:
    with LocalCluster(graceful_pod_deletion=True) as cluster:
        yield cluster


def pod(name: str, *, node: str = "n1", grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_delete_preconditions(graceful: LocalCluster) -> None:
    graceful.load([pod("p1", node="")])
    kube = Kube.for_url(graceful.url)
    try:
        with pytest.raises(ConflictError, match="Precondition failed: UID in precondition: other"):
            kube.delete_pod("default", "p1", uid="other")
        assert graceful.get("pods", "p1", "default") is not None
        uid = graceful.get("pods", "p1", "default")["metadata"]["uid"]  # type: ignore[index]
        kube.delete_pod("default", "p1", uid=uid)
        assert graceful.get("pods", "p1", "default") is None
    finally:
        kube.close()


def test_graceful_deletion_of_a_pod_on_a_node(graceful: LocalCluster) -> None:
    graceful.load([pod("running"), pod("pending", node=""), pod("quick", grace=0)])
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(_configuration(graceful)))
    core.delete_namespaced_pod("running", "default")
    stored = graceful.get("pods", "running", "default")
    assert stored is not None and stored["metadata"]["deletionGracePeriodSeconds"] == 30
    assert stored["metadata"]["deletionTimestamp"]
    core.delete_namespaced_pod("pending", "default")
    core.delete_namespaced_pod("quick", "default")
    assert graceful.get("pods", "pending", "default") is None and graceful.get("pods", "quick", "default") is None
    core.delete_namespaced_pod("running", "default", grace_period_seconds=0)  # the kubelet's last word
    assert graceful.get("pods", "running", "default") is None


def test_without_graceful_deletion_every_delete_is_at_once() -> None:
    with LocalCluster([pod("running")]) as cluster:
        core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(_configuration(cluster)))
        core.delete_namespaced_pod("running", "default")
        assert cluster.get("pods", "running", "default") is None


def test_pod_disruption_budgets(graceful: LocalCluster) -> None:
    policy = kubernetes.client.PolicyV1Api(kubernetes.client.ApiClient(_configuration(graceful)))
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    policy.patch_namespaced_pod_disruption_budget_status("db", "default", {"status": {"disruptionsAllowed": 1}})
    [listed] = policy.list_pod_disruption_budget_for_all_namespaces().items
    assert (listed.metadata.name, listed.status.disruptions_allowed) == ("db", 1)


def test_self_subject_access_review(graceful: LocalCluster) -> None:
    graceful.load([
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": "sa-token", "namespace": "kube-system",
                      "annotations": {"kubernetes.io/service-account.name": "sa"}}, "stringData": {"token": "t0k"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "status"},
         "rules": [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "status"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "status"},
         "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "kube-system"}]}])
    admin = Kube.for_url(graceful.url)
    configuration = _configuration(graceful)
    configuration.api_key = {"authorization": "Bearer t0k"}
    restricted = Kube(configuration)
    try:
        assert admin.may("delete", "pods") is True
        assert restricted.may("patch", "pods", subresource="status") is True
        assert restricted.may("delete", "pods") is False
        assert restricted.may("patch", "pods") is False
    finally:
        admin.close()
        restricted.close()


def test_bad_delete_options_are_refused_and_delete_nothing(graceful: LocalCluster) -> None:
    graceful.load([pod("p1")])
    url = f"{graceful.url}/api/v1/namespaces/default/pods/p1"
    assert requests.delete(url, json={"preconditions": "nope"}, timeout=5).status_code == 422
    answer = requests.delete(url, params={"gracePeriodSeconds": "soon"}, timeout=5)
    assert answer.status_code == 400 and "gracePeriodSeconds" in answer.json()["message"]
    assert graceful.get("pods", "p1", "default") is not None


def _configuration(cluster: LocalCluster) -> kubernetes.client.Configuration:
    configuration = kubernetes.client.Configuration()
    configuration.host = cluster.url
    return configuration
