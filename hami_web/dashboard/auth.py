"""Who may see the exposed dashboard: a Kubernetes bearer token allowed to list pods and nodes.

The pages show namespaces, pod and node names. On loopback (the default) `kubectl port-forward` already
checks RBAC; exposed with ``--ui-expose``, the dashboard checks it itself the way kube-rbac-proxy does: a
TokenReview says who the token belongs to, SubjectAccessReviews say whether that user may list pods and
nodes cluster-wide. Nothing is cached: every request is checked against the API server's current answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_web.kube import Kube, KubeError

# What a user must be allowed to do to see what the dashboard shows.
REQUIRED_ACCESS = (("list", "pods"), ("list", "nodes"))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request may not see the dashboard: 401 (who are you?) or 403 (not allowed)."""

    status: int
    message: str


def check_bearer(kube: Kube | None, authorization: str) -> Refusal | None:
    """None when the ``Authorization`` header carries a token allowed to see the dashboard, else why not."""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return Refusal(401, "the dashboard needs a Kubernetes bearer token: Authorization: Bearer <token>")
    if kube is None:
        return Refusal(403, "no Kubernetes client to check the token with")
    try:
        review = kube.review_token(token.strip())
    except KubeError as error:
        return Refusal(403, f"cannot check the token (TokenReview): {error}")
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return Refusal(401, f"the token is not valid: {status.get('error') or 'not authenticated'}")
    user = status.get("user") or {}
    for verb, resource in REQUIRED_ACCESS:
        try:
            answer = kube.review_access(user=user, verb=verb, resource=resource)
        except KubeError as error:
            return Refusal(403, f"cannot check access (SubjectAccessReview): {error}")
        if not (answer.get("status") or {}).get("allowed"):
            return Refusal(403, f"user {user.get('username', '?')!r} may not {verb} {resource} cluster-wide")
    return None
