"""The resource types the local API server knows, with the facts kube-apiserver keeps per type.

One table instead of per-type branches spread over the server: the URL prefix, whether the type is
namespaced, its kind, which field selectors it accepts, whether it has a status subresource, and whether
DELETE answers the object (pods) or a ``Status`` (everything else), as the real registries do.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_web.localcluster.errors import ApiError

COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True, slots=True)
class ResourceType:
    """What the server needs to know about one resource type."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    field_selectors: tuple[str, ...] = COMMON_FIELDS
    has_status: bool = False
    delete_returns_object: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """URL prefix of the group version: ``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


RESOURCE_TYPES: dict[str, ResourceType] = {
    rt.plural: rt
    for rt in (
        ResourceType("nodes", "Node", "", "v1", namespaced=False, has_status=True,
                     field_selectors=(*COMMON_FIELDS, "spec.unschedulable")),
        ResourceType("pods", "Pod", "", "v1", namespaced=True, has_status=True, delete_returns_object=True,
                     field_selectors=(*COMMON_FIELDS, "spec.nodeName", "spec.schedulerName",
                                      "spec.restartPolicy", "spec.serviceAccountName", "status.phase",
                                      "status.podIP", "status.nominatedNodeName")),
        ResourceType("events", "Event", "", "v1", namespaced=True,
                     field_selectors=(*COMMON_FIELDS, "involvedObject.kind", "involvedObject.namespace",
                                      "involvedObject.name", "involvedObject.uid",
                                      "involvedObject.apiVersion", "involvedObject.resourceVersion",
                                      "involvedObject.fieldPath", "reason", "reportingComponent", "source",
                                      "type")),
        ResourceType("secrets", "Secret", "", "v1", namespaced=True, field_selectors=(*COMMON_FIELDS, "type")),
        ResourceType("configmaps", "ConfigMap", "", "v1", namespaced=True),
        ResourceType("resourcequotas", "ResourceQuota", "", "v1", namespaced=True, has_status=True),
        ResourceType("poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1", namespaced=True, has_status=True),
        ResourceType("mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
                     "admissionregistration.k8s.io", "v1", namespaced=False),
        ResourceType("leases", "Lease", "coordination.k8s.io", "v1", namespaced=True),
        ResourceType("clusterroles", "ClusterRole", "rbac.authorization.k8s.io", "v1", namespaced=False),
        ResourceType("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1",
                     namespaced=False),
    )
}

KIND_TO_PLURAL: dict[str, str] = {rt.kind: rt.plural for rt in RESOURCE_TYPES.values()}


def resource_type(plural: str) -> ResourceType:
    """The type for a plural name; `ApiError` 404 for one the server does not serve."""
    try:
        return RESOURCE_TYPES[plural]
    except KeyError:
        raise ApiError(404, f"the server could not find the requested resource ({plural})") from None


def resource_for_kind(kind: str) -> ResourceType:
    """The type of a wire object's ``kind`` (for loading seed files)."""
    try:
        return RESOURCE_TYPES[KIND_TO_PLURAL[kind]]
    except KeyError:
        known = ", ".join(sorted(KIND_TO_PLURAL))
        raise ValueError(f"cannot load kind {kind!r}: the local cluster serves {known}") from None
