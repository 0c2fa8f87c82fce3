"""The webhook as kube-apiserver calls it, registered as ``k8s/webhook.yaml`` registers it.

Covers: a privileged GPU pod and a GPU pod with ``nodeName`` are refused by the API with our message; a pod in a
namespace labelled ``hami.io/webhook: ignore`` (and a pod labelled so) is not sent to us; a pod without GPUs is
allowed unchanged; the registration's ``failurePolicy`` is the shipped one.
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from .controlplane import ControlPlane, gpu_container, load_manifests, pod_manifest

ONE_GPU = {"nvidia.com/gpu": "1"}
WEBHOOK = "vgpu.hami-web.hami.io"


def _refusal(control_plane: ControlPlane, namespace: str, manifest: dict) -> tuple[int, str]:
    """The HTTP status and the Status message kube-apiserver answers a refused create with."""
    with pytest.raises(ApiException) as refused:
        control_plane.core.create_namespaced_pod(namespace, manifest)
    return refused.value.status, json.loads(refused.value.body)["message"]


def test_a_privileged_gpu_pod_is_refused_with_our_message(control_plane: ControlPlane, namespace: str) -> None:
    manifest = pod_manifest("root", [gpu_container("cuda", ONE_GPU, securityContext={"privileged": True})])
    status, message = _refusal(control_plane, namespace, manifest)
    assert (status, message) == (403, f'admission webhook "{WEBHOOK}" denied the request: container cuda is privileged')


def test_a_gpu_pod_with_a_node_name_is_refused_with_our_message(control_plane: ControlPlane, namespace: str) -> None:
    manifest = pod_manifest("pinned", [gpu_container("cuda", ONE_GPU)], nodeName="somewhere")
    status, message = _refusal(control_plane, namespace, manifest)
    assert (status, message) == (403, f'admission webhook "{WEBHOOK}" denied the request: pod has node assigned')


def test_an_invalid_quantity_is_refused_naming_the_container_and_resource(control_plane: ControlPlane,
                                                                         namespace: str) -> None:
    manifest = pod_manifest("too-much-memory", [gpu_container("cuda", {"nvidia.com/gpu": "1",
                                                                       "nvidia.com/gpumem-percentage": "150"})])
    status, message = _refusal(control_plane, namespace, manifest)
    assert status == 400
    assert message.startswith(f'admission webhook "{WEBHOOK}" denied the request: container cuda: '
                              "nvidia.com/gpumem-percentage")


def test_a_pod_without_gpus_is_left_to_the_default_scheduler(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.core.create_namespaced_pod(namespace, pod_manifest("web", [gpu_container("nginx")]))
    assert control_plane.pod(namespace, "web").spec.scheduler_name == "default-scheduler"


def test_an_excluded_namespace_and_an_excluded_pod_are_never_sent_to_the_webhook(control_plane: ControlPlane,
                                                                                namespace: str) -> None:
    ignored = control_plane.create_namespace(f"{namespace}-ignored", labels={"hami.io/webhook": "ignore"})
    # Refused if it reached us (privileged); created unchanged because the namespaceSelector keeps it away.
    manifest = pod_manifest("agent", [gpu_container("cuda", ONE_GPU, securityContext={"privileged": True})])
    control_plane.core.create_namespaced_pod(ignored, manifest)
    assert control_plane.pod(ignored, "agent").spec.scheduler_name == "default-scheduler"

    labelled = pod_manifest("labelled", [gpu_container("cuda", ONE_GPU, securityContext={"privileged": True})])
    labelled["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    control_plane.core.create_namespaced_pod(namespace, labelled)
    assert control_plane.pod(namespace, "labelled").spec.scheduler_name == "default-scheduler"


def test_the_registration_is_the_shipped_one(control_plane: ControlPlane) -> None:
    api = __import__("kubernetes").client.AdmissionregistrationV1Api(control_plane.api_client)
    registered = api.read_mutating_webhook_configuration("hami-web")
    (shipped,) = load_manifests("webhook.yaml")
    (webhook,) = registered.webhooks
    assert webhook.failure_policy == shipped["webhooks"][0]["failurePolicy"]
    assert webhook.client_config.ca_bundle  # set by `hami-web certs`, running as the certificate job's identity
    assert webhook.timeout_seconds == shipped["webhooks"][0]["timeoutSeconds"]
