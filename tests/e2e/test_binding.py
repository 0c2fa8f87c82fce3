"""What ``/bind``'s two calls rely on in kube-apiserver v1.32.13 (docs/webhook-and-extender.md#the-scheduler-extender),
through hami-web's own client and RBAC.

Covers: a Binding's ``metadata.annotations`` are copied onto the pod in the same write that sets ``spec.nodeName``
(pods/binding storage, ``setPodHostAndAnnotations``: one MODIFIED event carries both), added to the pod's own, never
removing one; a Binding preconditioned on a resourceVersion the pod has moved past is a 409 that writes nothing; one on
another uid is a 409; a second Binding is a 409 (``already assigned``) that leaves the first one's annotations; and the
node's bound pods are listed by ``spec.nodeName`` at a resourceVersion (``NotOlderThan``, kube-apiserver's watch cache).
The in-process API server answers the same (tests/integration/test_binding_api.py).
"""

from __future__ import annotations

import kubernetes

from hami_web.core import names
from hami_web.kube import ConflictError, Kube

from .controlplane import ControlPlane, gpu_container, pod_manifest

DEVICES = "GPU-0,NVIDIA,1000,10:;"
BOOKING = {names.POD_ASSIGNED_NODE: "", names.POD_BIND_PHASE: "allocating", names.POD_DEVICES_ALLOCATED: DEVICES,
           names.POD_DEVICES_TO_ALLOCATE: DEVICES}


def _pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, str]:
    """A pod nobody schedules, carrying an annotation of its own; its uid and resourceVersion."""
    manifest = pod_manifest(name, [gpu_container("main")], annotations={"team": "vision"},
                            schedulerName="nobody-schedules-this")
    created = plane.core.create_namespaced_pod(namespace, manifest)
    return {"uid": created.metadata.uid, "version": created.metadata.resource_version}


def test_a_binding_writes_its_annotations_with_the_node_in_one_write(control_plane: ControlPlane) -> None:
    namespace = control_plane.create_namespace("e2e-binding", labels={"hami.io/webhook": "ignore"})
    node = "binding-node"
    control_plane.create_gpu_node(node, [])
    kube = Kube.from_kubeconfig(str(control_plane.hami_web_kubeconfig))
    booking = {**BOOKING, names.POD_ASSIGNED_NODE: node}
    first = _pod(control_plane, namespace, "first")
    watch = kubernetes.watch.Watch()
    events = watch.stream(control_plane.core.list_namespaced_pod, namespace, field_selector="metadata.name=first",
                          resource_version=first["version"], timeout_seconds=10)
    assert control_plane.device_plugin is not None

    with control_plane.device_plugin.paused():  # the stand-in would mark the pod done: a write of its own
        kube.bind_pod(namespace, "first", node, uid=first["uid"], resource_version=first["version"],
                      annotations=booking)
        event = next(events)
        watch.stop()
        pod = kube.get_pod(namespace, "first")
    assert event["type"] == "MODIFIED"
    bound = event["object"]
    assert bound.spec.node_name == node
    assert bound.metadata.annotations == {"team": "vision", **booking}
    assert pod["metadata"]["resourceVersion"] == bound.metadata.resource_version  # no second write followed

    # A second Binding: 409 "already assigned", the first one's booking untouched.
    try:
        kube.bind_pod(namespace, "first", "elsewhere", uid=first["uid"], annotations={**booking,
                                                                                      names.POD_ASSIGNED_NODE: "x"})
        raise AssertionError("a second Binding was accepted")
    except ConflictError as error:
        assert "already assigned to node" in str(error)
    assert kube.get_pod(namespace, "first")["metadata"]["annotations"][names.POD_ASSIGNED_NODE] == node

    # Preconditions: a pod changed since the version given, or another uid, is a 409 that writes nothing.
    second = _pod(control_plane, namespace, "second")
    control_plane.core.patch_namespaced_pod("second", namespace, {"metadata": {"labels": {"changed": "yes"}}})
    for uid, version in ((second["uid"], second["version"]), ("00000000-0000-0000-0000-000000000000", "")):
        try:
            kube.bind_pod(namespace, "second", node, uid=uid, resource_version=version, annotations=booking)
            raise AssertionError("a Binding whose precondition fails was accepted")
        except ConflictError as error:
            assert "Precondition failed" in str(error) or "the object has been modified" in str(error), str(error)
    unbound = kube.get_pod(namespace, "second")
    assert not unbound["spec"].get("nodeName")
    assert unbound["metadata"]["annotations"] == {"team": "vision"}

    # The node's bound pods, at a version at least as new as the Binding's: what /bind checks a placement against.
    listed = kube.list_pods_on_node(node, not_older_than=bound.metadata.resource_version)
    assert [item["metadata"]["name"] for item in listed] == ["first"]
