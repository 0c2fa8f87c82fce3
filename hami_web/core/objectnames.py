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
    return _problem(value, MAX_SUBDOMAIN_CHARS, _SUBDOMAIN_PATTERN,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                    "and must start and end with an alphanumeric character")


def label_problem(value: str) -> str:
    """Why ``value`` is not a lowercase RFC 1123 label (a namespace), or "" when it is."""
    return _problem(value, MAX_LABEL_CHARS, _LABEL_PATTERN,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                    "start and end with an alphanumeric character")


def _problem(value: str, max_chars: int, pattern: re.Pattern[str], malformed: str) -> str:
    if not value:
        return "must not be empty"
    if len(value) > max_chars:
        return f"must be no more than {max_chars} characters"
    if not pattern.fullmatch(value):
        return malformed
    return ""
