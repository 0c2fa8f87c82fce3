"""The operator tools on namespace quotas (docs/quotas.md#namespace-quotas): ``kubectl hami inspect`` lists each
namespace's use against its limits, ``explain`` says a pod waits on its namespace's quota and not on devices,
``capacity`` counts what the quota still allows.

Covers, on ``cluster.yaml`` plus ResourceQuotas for namespace ``ml`` (whose pods book 367,680 MiB and 450 % cores):
the quota table in text and JSON (use, limit, share; only namespaces with a limit in force; ``-n`` keeping
one namespace's rows); a malformed value shown as a warning; a pending pod that devices would take but the quota
does not (verdict, the limit, use and booking named; ``ResourceQuotaNotFit`` the grouped cause); a pod within the
quota placed as before; capacity stopping at the quota with ``ResourceQuotaNotFit`` what runs out, and unchanged
in a namespace without quota.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from hami_web.core import names
from hami_web.localcluster import LocalCluster

from .conftest import CLUSTER, Run


def quota(namespace: str, name: str, hard: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard}}


def pending(name: str, memory: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "main", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": memory, "nvidia.com/gpucores": "10"}}}]}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as api:
        api.load_file(CLUSTER)
        api.load([quota("ml", "gpu", {"limits.nvidia.com/gpumem": "400000", "limits.nvidia.com/gpucores": "1000"}),
                  quota("research", "broken", {"limits.nvidia.com/gpumem": "1.5Gi5"}),
                  pending("waits-on-quota", "40k"), pending("within-quota", "30k")])
        yield api


def test_inspect_lists_each_namespace_against_its_limits(run: Run) -> None:
    outcome = run("inspect")
    assert outcome.code == 0, outcome.err
    lines = outcome.out.splitlines()
    header = next(line for line in lines if line.startswith("NAMESPACE"))
    assert header.split() == ["NAMESPACE", "QUOTA", "USED", "LIMIT", "USE"]
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in lines[lines.index(header) + 1:] if line.strip()
            and not line.startswith(("warning", " ")) and len(line.split()) >= 5}
    assert rows[("ml", "nvidia.com/gpumem")] == ["367680", "400000", "91%"]
    assert rows[("ml", "nvidia.com/gpucores")] == ["450", "1000", "45%"]
    assert ("research", "nvidia.com/gpumem") not in rows  # use, but no limit in force: not a quota row
    assert any(line.startswith("warning: ResourceQuota research/broken: spec.hard limits.nvidia.com/gpumem")
               for line in lines)


def test_inspect_json_and_one_namespace(run: Run) -> None:
    data = json.loads(run("inspect", "-n", "ml", "-o", "json").out)
    assert data["namespaceQuotas"] == [
        {"namespace": "ml", "resource": "nvidia.com/gpucores", "limit": 1000, "used": 450, "limit_mib": None},
        {"namespace": "ml", "resource": "nvidia.com/gpumem", "limit": 400000, "used": 367680, "limit_mib": 400000}]


def test_explain_says_the_pod_waits_on_its_quota(run: Run) -> None:
    outcome = run("explain", "ml/waits-on-quota")
    assert outcome.code == 0, outcome.err
    assert "unschedulable: no node fits because of the namespace's device quota, not for want of devices" in outcome.out
    assert "namespace ml, nvidia.com/gpumem: limit 400000, used 367680, request 40000" in outcome.out
    data = json.loads(run("explain", "ml/waits-on-quota", "-o", "json").out)
    assert data["verdict"] == "unschedulable"
    assert data["groups"][0]["cause"] == names.RESOURCE_QUOTA_NOT_FIT
    assert "limit 400000" in data["quota"]


def test_explain_places_a_pod_within_the_quota(run: Run) -> None:
    data = json.loads(run("explain", "ml/within-quota", "-o", "json").out)
    assert (data["verdict"], data["quota"]) == ("fits", "")


def test_capacity_counts_what_the_quota_still_allows(run: Run) -> None:
    limited = json.loads(run("capacity", "-n", "ml", "--gpumem", "10000", "--gpucores", "10", "-o", "json").out)
    assert limited["fits"] == 3  # 32,320 MiB left: three pods of 10,000
    assert limited["runs_out_first"] == names.RESOURCE_QUOTA_NOT_FIT
    assert limited["quota"] == {"nvidia.com/gpucores": "480/1000", "nvidia.com/gpumem": "397680/400000"}
    text = run("capacity", "-n", "ml", "--gpumem", "10000", "--gpucores", "10").out
    assert "Quota:" in text and "nvidia.com/gpumem 397680/400000 after these pods" in text
    free = json.loads(run("capacity", "-n", "prod", "--gpumem", "10000", "--gpucores", "10", "-o", "json").out)
    assert free["fits"] > 3 and free["quota"] == {}
