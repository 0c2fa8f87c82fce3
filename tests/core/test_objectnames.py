"""Kubernetes object name rules (RFC 1123): pod names are DNS subdomains (<= 253), namespaces DNS labels (<= 63).

Covers: valid names of both kinds; empty, too long (the bound and one past it, and 3 MiB), upper case, a leading
or trailing '-' or '.', characters outside [a-z0-9-.], an empty segment; a dot is allowed in a subdomain only.
"""

from __future__ import annotations

import pytest

from hami_web.core.objectnames import label_problem, subdomain_problem

PATTERN_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                     "and must start and end with an alphanumeric character")
PATTERN_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                 "start and end with an alphanumeric character")


@pytest.mark.parametrize(("name", "problem"), [
    ("pod1", ""),
    ("web-7d4b9c-x2x9z", ""),
    ("a.b-c.d", ""),
    ("0", ""),
    ("a" * 253, ""),
    ("a" * 254, "must be no more than 253 characters"),
    ("a" * (3 * 1024 * 1024), "must be no more than 253 characters"),
    ("", "must not be empty"),
    ("Pod1", PATTERN_SUBDOMAIN),
    ("-pod", PATTERN_SUBDOMAIN),
    ("pod-", PATTERN_SUBDOMAIN),
    (".pod", PATTERN_SUBDOMAIN),
    ("pod..1", PATTERN_SUBDOMAIN),
    ("pod_1", PATTERN_SUBDOMAIN),
    ("pod/1", PATTERN_SUBDOMAIN),
    ("pod 1", PATTERN_SUBDOMAIN),
    ("pod1\n", PATTERN_SUBDOMAIN),
    ("pöd", PATTERN_SUBDOMAIN),
])
def test_a_pod_name_is_a_dns_subdomain(name: str, problem: str) -> None:
    assert subdomain_problem(name) == problem


@pytest.mark.parametrize(("namespace", "problem"), [
    ("default", ""),
    ("kube-system", ""),
    ("a" * 63, ""),
    ("a" * 64, "must be no more than 63 characters"),
    ("", "must not be empty"),
    ("team.a", PATTERN_LABEL),
    ("Team", PATTERN_LABEL),
    ("-team", PATTERN_LABEL),
    ("team-", PATTERN_LABEL),
    ("team_a", PATTERN_LABEL),
])
def test_a_namespace_is_a_dns_label(namespace: str, problem: str) -> None:
    assert label_problem(namespace) == problem
