"""TokenReview and SubjectAccessReview, answered from the stored objects as kube-apiserver answers them.

A token is a ServiceAccount token Secret's ``data.token`` (type ``kubernetes.io/service-account-token``);
access is what the stored ClusterRoleBindings grant through their ClusterRoles (cluster-wide rules only,
enough for delegated authorization of a whole-cluster view). Nothing is configured on the side: add a
Secret or a binding and the next review sees it, remove it and access is gone.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from hami_web.localcluster.errors import bad_request
from hami_web.localcluster.resources import resource_type
from hami_web.localcluster.store import Store

JsonObject = dict[str, Any]
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"


def _decoded(value: object) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def review_token(store: Store, body: Mapping[str, Any]) -> JsonObject:
    """The TokenReview with its ``status``: the ServiceAccount whose token Secret holds ``spec.token``."""
    token = str((body.get("spec") or {}).get("token") or "")
    if not token:
        raise bad_request("TokenReview spec.token is required")
    status: JsonObject = {"authenticated": False, "error": "invalid bearer token"}
    items, _ = store.list(resource_type("secrets"), None)
    for secret in items:
        if secret.get("type") != TOKEN_SECRET_TYPE or _decoded((secret.get("data") or {}).get("token")) != token:
            continue
        metadata = secret["metadata"]
        namespace = metadata.get("namespace", "default")
        account = (metadata.get("annotations") or {}).get("kubernetes.io/service-account.name", "")
        status = {"authenticated": True, "user": {
            "username": f"system:serviceaccount:{namespace}:{account}", "uid": metadata.get("uid", ""),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]}}
        break
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token},
            "status": status}


def _subject_matches(subject: Mapping[str, Any], user: str, groups: list[str]) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace', '')}:{name}"
    return False


def _rule_allows(rule: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    def has(values: object, wanted: str) -> bool:
        return isinstance(values, list) and ("*" in values or wanted in values)

    resource = str(attributes.get("resource", ""))
    if attributes.get("subresource"):
        resource = f"{resource}/{attributes['subresource']}"
    return has(rule.get("verbs"), str(attributes.get("verb", ""))) \
        and has(rule.get("apiGroups"), str(attributes.get("group", ""))) \
        and has(rule.get("resources"), resource)


def review_access(store: Store, body: Mapping[str, Any]) -> JsonObject:
    """The SubjectAccessReview with its ``status``: allowed when a ClusterRoleBinding of the user grants it."""
    spec = body.get("spec") or {}
    attributes = spec.get("resourceAttributes")
    if not isinstance(attributes, Mapping):
        raise bad_request("SubjectAccessReview spec.resourceAttributes is required")
    user, groups = str(spec.get("user") or ""), [str(g) for g in spec.get("groups") or []]
    roles = {role["metadata"]["name"]: role for role in store.list(resource_type("clusterroles"), None)[0]}
    allowed_by = ""
    for binding in store.list(resource_type("clusterrolebindings"), None)[0]:
        if not any(_subject_matches(subject, user, groups) for subject in binding.get("subjects") or []):
            continue
        role = roles.get(str((binding.get("roleRef") or {}).get("name")))
        if role and any(_rule_allows(rule, attributes) for rule in role.get("rules") or []):
            allowed_by = binding["metadata"]["name"]
            break
    status = {"allowed": True, "reason": f'allowed by ClusterRoleBinding "{allowed_by}"'} if allowed_by \
        else {"allowed": False, "reason": "no ClusterRoleBinding grants it"}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec, "status": status}


def review_own_access(store: Store, body: Mapping[str, Any], authorization: str) -> JsonObject:
    """The SelfSubjectAccessReview: the caller is the ServiceAccount whose token the request carries (``Bearer
    <token>``), judged as `review_access` judges it. A request without a token is this server's administrator (every
    request is served without authentication): allowed."""
    spec = body.get("spec") or {}
    if not isinstance(spec.get("resourceAttributes"), Mapping):
        raise bad_request("SelfSubjectAccessReview spec.resourceAttributes is required")
    token = authorization[len("Bearer "):].strip() if authorization.startswith("Bearer ") else ""
    if not token:
        status: JsonObject = {"allowed": True, "reason": "the local API server's administrator"}
    else:
        who = review_token(store, {"spec": {"token": token}})["status"]
        user = who.get("user") or {}
        judged = review_access(store, {"spec": {"user": user.get("username", ""), "groups": user.get("groups") or [],
                                                "resourceAttributes": spec["resourceAttributes"]}})
        status = judged["status"]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec,
            "status": status}
