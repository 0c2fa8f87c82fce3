"""The cache's namespace quota book (docs/quotas.md#namespace-quotas; `ClusterCache` without an API server).

Covers: a namespace's use follows its pods' watch events (a booking added, changed, shrunk to the containers once
the init containers finished, freed when the pod finishes or is deleted, and a full list replacing it all); a
filter's placement counts at once and a second placement of the same pod replaces the first rather than adding to
it; the ResourceQuota objects' limits follow list and events (smallest wins, a deleted object's limit gone), and a
malformed value is logged once per change, not at every status update.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.options import PodOptions
from hami_web.core.quota import parse_resource_quota
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.state.cache import ClusterCache
from hami_web.state.nodes import node_record
from hami_web.state.pods import pod_record

GPU = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}


def pod(uid: str, devices: str, *, namespace: str = "ns", init: int = 0, phase: str = "Running",
        initialized: bool = False) -> dict[str, Any]:
    spec = {"initContainers": [{"name": f"i{n}", **GPU} for n in range(init)], "containers": [{"name": "c", **GPU}]}
    return {"metadata": {"uid": uid, "namespace": namespace, "name": uid, "annotations": {
        names.POD_ASSIGNED_NODE: "n1", names.POD_DEVICES_ALLOCATED: devices}},
        "spec": {**spec, "nodeName": "n1"},
        "status": {"phase": phase, "conditions": [{"type": "Initialized", "status": str(initialized)}]}}


def quota(name: str, hard: dict[str, str], namespace: str = "ns") -> Any:
    return parse_resource_quota({"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": hard}},
                                DEFAULT_CATALOG)


def used(cache: ClusterCache, namespace: str = "ns") -> dict[str, int]:
    return dict(cache.namespace_quota(namespace).used)


def test_use_follows_the_pods_events() -> None:
    cache = ClusterCache()
    cache.apply_pod_events([("ADDED", pod_record(pod("a", "g0,NVIDIA,1000,10:;")))])
    cache.apply_pod_events([("ADDED", pod_record(pod("b", "g1,NVIDIA,3000,0:;g1,NVIDIA,500,20:;", init=1)))])
    assert used(cache) == {"nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 30}  # b: max(3000, 500), max(0, 20)
    cache.apply_pod_events([("MODIFIED", pod_record(pod("b", "g1,NVIDIA,3000,0:;g1,NVIDIA,500,20:;", init=1,
                                                        initialized=True)))])
    assert used(cache) == {"nvidia.com/gpumem": 1500, "nvidia.com/gpucores": 30}  # init finished: containers only
    cache.apply_pod_events([("MODIFIED", pod_record(pod("a", "g0,NVIDIA,1000,10:;", phase="Succeeded")))])
    assert used(cache) == {"nvidia.com/gpumem": 500, "nvidia.com/gpucores": 20}
    cache.apply_pod_events([("DELETED", pod_record(pod("b", "g1,NVIDIA,3000,0:;g1,NVIDIA,500,20:;", init=1)))])
    assert used(cache) == {}
    cache.replace_pods([pod_record(pod("c", "g0,NVIDIA,700,0:;", namespace="other"))], listed_at=0.0)
    assert (used(cache), used(cache, "other")) == ({}, {"nvidia.com/gpumem": 700})


def test_a_placement_counts_at_once_and_a_second_one_replaces_it() -> None:
    cache = ClusterCache()
    devices = [Device(uuid="g0", index=0, count=10, memory_mib=8000, cores=100, type="NVIDIA-A40")]
    cache.replace_nodes([node_record({"metadata": {"name": "n1", "annotations": {
        names.NODE_REGISTER: encode_register_json(devices), names.NODE_HANDSHAKE: "Requesting_2099-01-01 00:00:00"}},
        "status": {"allocatable": {"nvidia.com/gpu": "1"}}})])
    cache.replace_quotas([quota("gpu", {"limits.nvidia.com/gpumem": "5000"})])
    request = PodRequest(containers=(ContainerRequest("c", False, 1, memory_mib=3000),))
    for _ in range(2):
        placed = cache.place(uid="p", namespace="ns", name="p", request=request, options=PodOptions(),
                             candidates=["n1"])
        assert getattr(placed, "node", None) == "n1"
        assert used(cache) == {"nvidia.com/gpumem": 3000}
    second = cache.place(uid="q", namespace="ns", name="q", request=request, options=PodOptions(), candidates=["n1"])
    assert getattr(second, "reasons", None) == {"n1": f"1/1 {names.RESOURCE_QUOTA_NOT_FIT}"}
    cache.forget("p")
    assert used(cache) == {}


def test_limits_follow_the_quota_objects(caplog: pytest.LogCaptureFixture) -> None:
    cache = ClusterCache()
    cache.replace_quotas([quota("a", {"limits.nvidia.com/gpumem": "8000"}),
                          quota("b", {"limits.nvidia.com/gpumem": "6000", "limits.nvidia.com/gpucores": "50"}),
                          quota("c", {"limits.nvidia.com/gpumem": "100"}, namespace="other")])
    assert cache.namespace_quota("ns").limits == {"nvidia.com/gpumem": 6000, "nvidia.com/gpucores": 50}
    cache.apply_quota_events([("DELETED", quota("b", {}))])
    assert cache.namespace_quota("ns").limits == {"nvidia.com/gpumem": 8000}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # the quota controller rewrites the object's status on every pod change
            cache.apply_quota_events([("MODIFIED", quota("a", {"limits.nvidia.com/gpumem": "8.5"}))])
    assert [record.getMessage() for record in caplog.records] == [
        "ResourceQuota ns/a: spec.hard limits.nvidia.com/gpumem: '8.5' is not a whole number; this limit is ignored"]
    assert cache.namespace_quota("ns").limits == {}
    cache.replace_quotas([])
    assert cache.quota_usage() == ({}, {})
