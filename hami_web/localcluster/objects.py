"""Per-object rules the real registries apply on create and update, as pure functions over wire dicts.

These are the rules whose absence would let code pass here and fail against kube-apiserver: defaults filled
on create (uid, creationTimestamp, namespace, ``Pending`` pods), identity fields that cannot change, labels
and annotations that must be string maps, status that only the status subresource writes (and spec that it
cannot), and pod specs that are immutable after creation apart from a few fields.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from hami_web.localcluster.errors import ApiError, bad_request, invalid
from hami_web.localcluster.resources import ResourceType

JsonObject = dict[str, Any]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
# The pod spec fields an update may change (k8s.io/kubernetes/pkg/apis/core/validation ValidatePodUpdate).
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")
_SYSTEM_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp")


def clone_json(obj: JsonObject) -> JsonObject:
    """Deep copy of a JSON object (faster than `copy.deepcopy` for plain JSON)."""
    copied: JsonObject = json.loads(json.dumps(obj))
    return copied


def now_rfc3339() -> str:
    """The current time as kube writes timestamps (RFC 3339, UTC, seconds, ``Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_after(seconds: int) -> str:
    """The time ``seconds`` from now as kube writes timestamps (a pod's ``deletionTimestamp``)."""
    return datetime.fromtimestamp(datetime.now(UTC).timestamp() + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_name(rt: ResourceType, name: str) -> None:
    if not name:
        raise invalid(rt.kind, "", ["metadata.name: Required value: name or generateName is required"])
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise invalid(rt.kind, name, [f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
                                      "subdomain must consist of lower case alphanumeric characters, '-' or '.'"])


def _check_string_map(rt: ResourceType, obj: JsonObject, field: str, *, code: int) -> None:
    values = (obj.get("metadata") or {}).get(field)
    if values is None:
        return
    message = f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of type map[string]string"
    if not isinstance(values, dict):
        raise ApiError(code, message)
    for key, value in values.items():
        if not isinstance(value, str):
            raise ApiError(code, f"{message} (key {key!r} has a {type(value).__name__} value)")
    if field == "labels":
        name = obj["metadata"].get("name", "")
        for key, value in values.items():
            prefix, _, label = key.rpartition("/")
            if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or len(label) > 63 or not _LABEL_NAME.match(label):
                raise invalid(rt.kind, name, [f'metadata.labels: Invalid value: "{key}": name part must '
                                              "consist of alphanumeric characters, '-', '_' or '.'"])
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise invalid(rt.kind, name, [f'metadata.labels: Invalid value: "{value}": a valid label '
                                              "must be 63 characters or less, alphanumeric, '-', '_' or '.'"])


def check_shape(rt: ResourceType, obj: Any, *, code: int = 400) -> None:
    """A body must be an object whose labels/annotations are string maps (``code`` 400 body, 422 patch)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        raise ApiError(code, f"the body of the request is not a {rt.kind} object")
    _check_string_map(rt, obj, "annotations", code=code)
    _check_string_map(rt, obj, "labels", code=code)


def _fold_string_data(rt: ResourceType, obj: JsonObject) -> None:
    """Secrets: ``stringData`` is write-only; the server folds it into base64 ``data``."""
    if rt.plural != "secrets":
        return
    string_data = obj.pop("stringData", None) or {}
    data = dict(obj.get("data") or {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            raise bad_request(f"illegal base64 data in Secret data[{key!r}]") from None
    if data:
        obj["data"] = data
    obj.setdefault("type", "Opaque")


def prepare_create(rt: ResourceType, obj: JsonObject, namespace: str) -> JsonObject:
    """Fill server-side defaults on a new object; raises `ApiError` for what the real server refuses."""
    check_shape(rt, obj)
    metadata = obj.setdefault("metadata", {})
    if rt.namespaced:
        body_namespace = metadata.get("namespace")
        if body_namespace and body_namespace != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on "
                              "the request")
        metadata["namespace"] = namespace
    else:
        metadata.pop("namespace", None)
    if not metadata.get("name") and metadata.get("generateName"):
        metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
    _check_name(rt, metadata.get("name", ""))
    for key in _SYSTEM_METADATA:
        metadata.pop(key, None)
    metadata["uid"] = str(uuid.uuid4())
    metadata["creationTimestamp"] = now_rfc3339()
    obj["kind"] = rt.kind
    obj["apiVersion"] = rt.api_version
    if rt.plural == "pods":
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
    _fold_string_data(rt, obj)
    return obj


def _pod_spec_without_mutable(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    trimmed = {key: value for key, value in spec.items() if key not in _MUTABLE_POD_SPEC}
    for field in ("containers", "initContainers"):
        if isinstance(trimmed.get(field), list):
            trimmed[field] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                              for c in trimmed[field]]
    return trimmed


def prepare_update(rt: ResourceType, new: JsonObject, old: JsonObject, *, subresource: str | None,
                   patched: bool) -> JsonObject:
    """Apply the update rules to ``new`` (a fresh dict) given the stored ``old``; returns ``new``.

    Checks, in kube's order: shape, name/namespace match the URL (400), uid and creationTimestamp
    carried over or immutable (422), status only through ``/status`` and spec never through it, immutable
    pod spec (422). The resourceVersion precondition is the caller's (it needs the lock).
    """
    check_shape(rt, new, code=422 if patched else 400)
    metadata = new.setdefault("metadata", {})
    old_metadata = old["metadata"]
    name = old_metadata["name"]
    if metadata.get("name", name) != name:
        raise bad_request(f"the name of the object ({metadata.get('name')}) does not match the name on the "
                          f"URL ({name})")
    if rt.namespaced and metadata.get("namespace", old_metadata["namespace"]) != old_metadata["namespace"]:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                          "request")
    if metadata.get("uid") and metadata["uid"] != old_metadata["uid"]:
        raise invalid(rt.kind, name, [f'metadata.uid: Invalid value: "{metadata["uid"]}": field is immutable'])
    metadata["name"] = name
    if rt.namespaced:
        metadata["namespace"] = old_metadata["namespace"]
    for key in ("uid", "creationTimestamp", "generateName"):
        if key in old_metadata:
            metadata[key] = old_metadata[key]
    new["kind"] = rt.kind
    new["apiVersion"] = rt.api_version
    if rt.has_status:
        if subresource == "status":
            # The status subresource writes status (and metadata), never spec.
            _copy_field(new, old, "spec")
        else:
            _copy_field(new, old, "status")
    if rt.plural == "pods" and subresource is None and \
            _pod_spec_without_mutable(new.get("spec")) != _pod_spec_without_mutable(old.get("spec")):
        raise invalid("Pod", name, ["spec: Forbidden: pod updates may not change fields other than "
                                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                                    "existing tolerations), `spec.terminationGracePeriodSeconds`"])
    _fold_string_data(rt, new)
    return new


def _copy_field(new: JsonObject, old: JsonObject, field: str) -> None:
    if field in old:
        new[field] = old[field]
    else:
        new.pop(field, None)
