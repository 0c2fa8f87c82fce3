"""The errors of an API request, and the translation of the client's and urllib3's exceptions into them.

Callers tell a 409 from a 404 from a 422 by the class of a `KubeError`, never by importing the client; and
``outcome_unknown`` says whether a failed write may still have been applied, which only the transport can know.
"""

from __future__ import annotations

import contextlib
import json

import urllib3
from kubernetes.client.exceptions import ApiException


class KubeError(Exception):
    """An API request failed; ``status`` is the HTTP status (0 when the server was not reached).

    ``outcome_unknown`` is True when a write may have been applied although no answer came back (a read
    timeout, a connection reset after the request was sent, the deadline, HTTP 504): the caller must treat
    the write as possibly done until the API shows otherwise.
    """

    def __init__(self, message: str, *, status: int = 0, reason: str = "", outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.outcome_unknown = outcome_unknown


class NotFoundError(KubeError):
    """The object does not exist (HTTP 404)."""


class ConflictError(KubeError):
    """The write lost a race: stale resourceVersion or already exists (HTTP 409)."""


class GoneError(KubeError):
    """A watch asked for a resourceVersion the server no longer has (HTTP 410)."""


class InvalidError(KubeError):
    """The API refused the object or the patch as invalid and wrote nothing (HTTP 422, reason ``Invalid``).

    Unlike a 409 it does not go away on a retry with a fresh read: the request itself is wrong (a label value
    kube-apiserver rejects, a JSON patch whose ``test`` fails, a changed immutable field such as ``uid``).
    """


class TooLargeResourceVersionError(KubeError):
    """A read "not older than" a resourceVersion timed out because the API server's watch cache had not reached it
    (HTTP 504, cause ``ResourceVersionTooLarge``). The cache moves on a write of that kind or a progress notification
    from etcd, so on a quiet kind it can stay behind for good: a consistent read (no resourceVersion) is fresh at once.
    """


class WatchSilentError(KubeError):
    """A watch stream stayed open but delivered nothing (no event, no bookmark) for its silence bound.

    kube-apiserver sends a bookmark about every minute to a watch that asks for them, so a longer silence
    means something between us and the API (a proxy, a half-open connection) holds the stream.
    """


_ERROR_BY_STATUS: dict[int, type[KubeError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError,
                                                422: InvalidError}


def error_from(error: Exception, what: str) -> KubeError:
    """The `KubeError` for ``error`` raised by the request ``what``, with the API's own message when it sent one."""
    if isinstance(error, ApiException):
        status = int(error.status or 0)
        message = error.reason or ""
        body = getattr(error, "body", None)
        if body:
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(body).get("message") or message
        kind = _ERROR_BY_STATUS.get(status, KubeError)
        if status == 504 and _too_large_resource_version(body):
            kind = TooLargeResourceVersionError
        # 504: kube-apiserver gave up waiting for etcd; the write may still land.
        return kind(f"{what}: HTTP {status}: {message}", status=status, reason=error.reason or "",
                    outcome_unknown=status == 504)
    return KubeError(f"{what}: {error}", outcome_unknown=sent_without_answer(error))


def _too_large_resource_version(body: object) -> bool:
    """Whether a 504's Status names the cause ``ResourceVersionTooLarge``."""
    try:
        causes = json.loads(body).get("details", {}).get("causes") or []  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError):
        return False
    return any(isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge" for cause in causes)


def timed_out_reading(error: BaseException) -> bool:
    """Whether a transport error is a socket read that timed out (directly or as the cause of a wrapper)."""
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return True
        reason = getattr(seen, "reason", None)
        seen = reason if isinstance(reason, BaseException) else seen.__context__
    return False


def sent_without_answer(error: BaseException) -> bool:
    """Whether a transport error happened after the request may have reached the server.

    A refused or timed-out connection never carried the request; a read timeout or a connection reset
    while waiting for the answer may have followed a write that was applied.
    """
    reason = getattr(error, "reason", None)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and isinstance(reason, BaseException):
        return sent_without_answer(reason)
    if isinstance(error, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError):
        return False
    return isinstance(error, urllib3.exceptions.ReadTimeoutError | urllib3.exceptions.ProtocolError
                      | ConnectionError | TimeoutError)


def is_transport_error(error: BaseException) -> bool:
    """Whether ``error`` is a failure to talk to the API (socket, bad bytes, urllib3's own hierarchy), not a bug."""
    return isinstance(error, OSError | ValueError) or type(error).__module__.startswith("urllib3")
