"""The in-process API server's pods/binding answers as kube-apiserver v1.32.13's (checked there by
tests/e2e/test_binding.py), so the in-process tests of ``/bind`` see real semantics.

Covers: a Binding's annotations are copied onto the pod in the write that sets ``spec.nodeName`` (one MODIFIED event
carries both, and nothing follows), added to the pod's own; a second Binding is a 409 ``already assigned`` that leaves
the first one's annotations; a Binding preconditioned on a version the pod has moved past, or on another uid, is a 409
that writes nothing; annotations that are not strings are a 400 naming them; the node's bound pods are listed by
``spec.nodeName`` at a resourceVersion.
"""

from __future__ import annotations

import pytest
import requests

from hami_web.core import names
from hami_web.kube import ConflictError, Kube
from hami_web.localcluster import LocalCluster

from .helpers import gpu_pod

NODE = "node1"
DEVICES = "GPU-0,NVIDIA,1000,10:;"
BOOKING = {names.POD_ASSIGNED_NODE: NODE, names.POD_BIND_PHASE: "allocating", names.POD_DEVICES_ALLOCATED: DEVICES,
           names.POD_DEVICES_TO_ALLOCATE: DEVICES}


def _pod(apiserver: LocalCluster, kube: Kube, name: str) -> tuple[str, str]:
    apiserver.load([gpu_pod(name, annotations={"team": "vision"})])
    metadata = kube.get_pod("default", name)["metadata"]
    return metadata["uid"], metadata["resourceVersion"]


def test_a_binding_writes_its_annotations_with_the_node_in_one_write(apiserver: LocalCluster, kube: Kube) -> None:
    uid, version = _pod(apiserver, kube, "first")
    events = kube.watch_pods(resource_version=version, timeout_seconds=1)

    kube.bind_pod("default", "first", NODE, uid=uid, resource_version=version, annotations=BOOKING)

    changes = [event for event in events if event.type != "BOOKMARK"]
    assert [event.type for event in changes] == ["MODIFIED"]
    assert changes[0].object["spec"]["nodeName"] == NODE
    assert changes[0].object["metadata"]["annotations"] == {"team": "vision", **BOOKING}

    with pytest.raises(ConflictError, match='already assigned to node "node1"'):
        kube.bind_pod("default", "first", "elsewhere", uid=uid, annotations={**BOOKING, names.POD_ASSIGNED_NODE: "x"})
    assert kube.get_pod("default", "first")["metadata"]["annotations"][names.POD_ASSIGNED_NODE] == NODE
    assert [pod["metadata"]["name"] for pod in kube.list_pods_on_node(NODE, not_older_than=version)] == ["first"]


@pytest.mark.parametrize("stale", ["version", "uid"])
def test_a_binding_whose_precondition_fails_writes_nothing(apiserver: LocalCluster, kube: Kube, stale: str) -> None:
    uid, version = _pod(apiserver, kube, "second")
    kube.patch_pod("default", "second", {"metadata": {"labels": {"changed": "yes"}}})

    with pytest.raises(ConflictError, match="Precondition failed"):
        kube.bind_pod("default", "second", NODE, uid=uid if stale == "version" else "0000",
                      resource_version=version if stale == "version" else "", annotations=BOOKING)

    pod = kube.get_pod("default", "second")
    assert not pod["spec"].get("nodeName")
    assert pod["metadata"]["annotations"] == {"team": "vision"}


def test_annotations_that_are_not_strings_are_refused(apiserver: LocalCluster, kube: Kube) -> None:
    _pod(apiserver, kube, "third")
    answer = requests.post(f"{apiserver.url}/api/v1/namespaces/default/pods/third/binding", timeout=5, json={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "third", "annotations": {"count": 3}},
        "target": {"kind": "Node", "name": NODE}})
    assert answer.status_code == 400 and "metadata.annotations" in answer.json()["message"]
    assert not kube.get_pod("default", "third")["spec"].get("nodeName")
