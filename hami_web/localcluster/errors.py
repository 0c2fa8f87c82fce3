"""API errors as kube-apiserver answers them: a ``Status`` object with the HTTP code, reason and details.

Code that passes against the local server must read the same fields it would read from a real one
(``code``, ``reason``, ``message``), so every failure is raised as `ApiError` and rendered in one place.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]

# HTTP code → the StatusReason kube-apiserver sends with it (k8s.io/apimachinery/pkg/api/errors).
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request failed; `status_body` is the wire ``Status``."""

    def __init__(self, code: int, message: str, *, reason: str = "", name: str = "", kind: str = "",
                 group: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details: JsonObject = {}
        if name:
            self.details["name"] = name
        if group:
            self.details["group"] = group
        if kind:
            self.details["kind"] = kind

    def status_body(self) -> JsonObject:
        """The ``Status`` object kube-apiserver would send."""
        body: JsonObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": self.message, "reason": self.reason}
        if self.details:
            body["details"] = dict(self.details)
        body["code"] = self.code
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(404, f'{qualified} "{name}" not found', name=name, kind=resource, group=group)


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(409, f'{qualified} "{name}" already exists', reason="AlreadyExists", name=name,
                    kind=resource, group=group)


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(409, f'Operation cannot be fulfilled on {qualified} "{name}": {why}', name=name,
                    kind=resource, group=group)


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, name: str, causes: list[str], group: str = "") -> ApiError:
    return ApiError(422, f'{kind} "{name}" is invalid: {", ".join(causes)}', name=name, kind=kind, group=group)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def success_status(code: int = 200, *, name: str = "", kind: str = "", uid: str = "") -> JsonObject:
    """The ``Status`` of a request that succeeded without returning an object (binding, delete)."""
    body: JsonObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    details = {key: value for key, value in (("name", name), ("kind", kind), ("uid", uid)) if value}
    if details:
        body["details"] = details
    body["code"] = code
    return body


def too_large_resource_version(requested: str, current: int) -> ApiError:
    """kube-apiserver's answer to a read "not older than" a version its watch cache has not reached within 3 s
    (k8s.io/apiserver storage.NewTooLargeResourceVersionError): 504 Timeout, cause ``ResourceVersionTooLarge``."""
    error = ApiError(504, f"Timeout: Too large resource version: {requested}, current: {current}", reason="Timeout")
    error.details["causes"] = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    error.details["retryAfterSeconds"] = 1
    return error
