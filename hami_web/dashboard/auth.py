"""Who may see the exposed dashboard: a Kubernetes bearer token allowed to list pods and nodes.

The pages show namespaces, pod and node names. On loopback (the default) `kubectl port-forward` already
checks RBAC; exposed with ``--ui-expose``, the dashboard checks it itself the way kube-rbac-proxy does: a
TokenReview says who the token belongs to, SubjectAccessReviews say whether that user may list pods and
nodes cluster-wide. A page loads its CSS and script too, and a browser reloads often, so each answer is
remembered for `ANSWER_SECONDS` (as kube-rbac-proxy's token and authorization caches do), keyed by a hash
of the token, never the token itself: revoking a token or an RBAC binding takes effect within that time.
An answer the API could not give (an error) is never remembered.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from hami_web.kube import Kube, KubeError

# What a user must be allowed to do to see what the dashboard shows.
REQUIRED_ACCESS = (("list", "pods"), ("list", "nodes"))
ANSWER_SECONDS = 10.0
MAX_REMEMBERED = 1024


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request may not see the dashboard: 401 (who are you?) or 403 (not allowed)."""

    status: int
    message: str


class AnswerCache:
    """The last answers for tokens, for `ANSWER_SECONDS`, at most `MAX_REMEMBERED` of them.

    Without a lock: a lookup or store is one dict operation (atomic in CPython), and two requests racing on
    the same token only both ask the API, which is what happens without a cache.
    """

    def __init__(self, *, seconds: float = ANSWER_SECONDS, capacity: int = MAX_REMEMBERED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._capacity = capacity
        self._clock = clock
        self._answers: dict[str, tuple[float, Refusal | None]] = {}
        self.api_checks = 0  # how many times the API was asked (tests and metrics read it)

    @property
    def remembered(self) -> int:
        """How many answers are held now."""
        return len(self._answers)

    def check(self, kube: Kube, token: str) -> Refusal | None:
        """The remembered answer for ``token``, or a fresh one from the API (remembered unless it failed)."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        remembered = self._answers.get(key)
        if remembered is not None and remembered[0] > now:
            return remembered[1]
        self.api_checks += 1
        answer, definite = _ask_api(kube, token)
        if definite:
            if len(self._answers) >= self._capacity:
                for stale in list(self._answers)[: max(1, self._capacity // 4)]:  # the oldest inserted
                    self._answers.pop(stale, None)
            self._answers[key] = (now + self._seconds, answer)
        return answer


def _ask_api(kube: Kube, token: str) -> tuple[Refusal | None, bool]:
    """(the answer, whether it is the API's verdict rather than a failure to ask)."""
    try:
        review = kube.review_token(token)
    except KubeError as error:
        return Refusal(403, f"cannot check the token (TokenReview): {error}"), False
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return Refusal(401, f"the token is not valid: {status.get('error') or 'not authenticated'}"), True
    user = status.get("user") or {}
    for verb, resource in REQUIRED_ACCESS:
        try:
            answer = kube.review_access(user=user, verb=verb, resource=resource)
        except KubeError as error:
            return Refusal(403, f"cannot check access (SubjectAccessReview): {error}"), False
        if not (answer.get("status") or {}).get("allowed"):
            return Refusal(403, f"user {user.get('username', '?')!r} may not {verb} {resource} cluster-wide"), True
    return None, True


def check_bearer(kube: Kube | None, authorization: str, answers: AnswerCache | None = None) -> Refusal | None:
    """None when the ``Authorization`` header carries a token allowed to see the dashboard, else why not."""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return Refusal(401, "the dashboard needs a Kubernetes bearer token: Authorization: Bearer <token>")
    if kube is None:
        return Refusal(403, "no Kubernetes client to check the token with")
    if answers is None:
        return _ask_api(kube, token.strip())[0]
    return answers.check(kube, token.strip())
