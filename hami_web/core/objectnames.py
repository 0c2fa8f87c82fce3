"""Kubernetes object name rules (RFC 1123, as kube-apiserver validates them): a pod name is a DNS subdomain, a
namespace a DNS label.

A pod whose name breaks them cannot exist, so a request naming one is forged or broken: it is refused before
anything is looked up or booked (a 3 MiB "name" once got a placement and a GPU booked in memory). The messages
are kube-apiserver's, so an operator recognises them.
"""

from __future__ import annotations

import re

MAX_SUBDOMAIN_CHARS = 253
MAX_LABEL_CHARS = 63

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_PATTERN = re.compile(_LABEL)
_SUBDOMAIN_PATTERN = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def subdomain_problem(value: str) -> str:
    """Why ``value`` is not a lowercase RFC 1123 subdomain (a pod's or a node's name), or "" when it is."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_SUBDOMAIN_CHARS:
        return f"must be no more than {MAX_SUBDOMAIN_CHARS} characters"
    if not _SUBDOMAIN_PATTERN.fullmatch(value):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character")
    return ""


def label_problem(value: str) -> str:
    """Why ``value`` is not a lowercase RFC 1123 label (a namespace), or "" when it is."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_LABEL_CHARS:
        return f"must be no more than {MAX_LABEL_CHARS} characters"
    if not _LABEL_PATTERN.fullmatch(value):
        return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character")
    return ""
