"""``explain``: the decision the filter would make for a pod right now, and why.

Covers: an unschedulable pod gets its reasons grouped by cause with example nodes, its constraints and the nearest
miss (golden, JSON); the per-node reasons and the placement are exactly what the running filter answers, pod after
pod, for shapes that exercise every rule (NUMA binding, topology-aware, an init container, type exclusion, an
exclusive card, pod-level policies; checked against ``/filter`` of a real runtime on the same API server, each
fitting pod bound so its booking reaches the API); a pod that fits gets its node and GPUs (golden); a pod asking for
no GPU, a pod with an unknown policy (read as HAMi v2.10 reads it), a pod already bound (its GPUs from its
annotation); the pod's own booking is left out, as the filter forgets it; a GPU pod not routed to hami-scheduler is
flagged.
"""

from __future__ import annotations

import json

from hami_web.core import names
from hami_web.core.grants import decode_pod_devices
from hami_web.core.noderules import read_pod_needs
from hami_web.core.policy import SchedulingPolicy
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.ops.explain import explain_pod
from hami_web.ops.snapshot import read_snapshot
from hami_web.server.runtime import build_runtime
from hami_web.settings import Settings

from .conftest import CLUSTER, Run, assert_golden


def test_an_unschedulable_pod_gets_grouped_reasons_and_the_nearest_miss(run: Run) -> None:
    outcome = run("explain", "ml/big-train")
    assert (outcome.code, outcome.err) == (0, "")
    assert_golden("explain-unschedulable.txt", outcome.out)


def test_unschedulable_json(run: Run) -> None:
    data = json.loads(run("explain", "big-train", "-n", "ml", "-o", "json").out)
    assert data["verdict"] == "unschedulable"
    assert data["candidates"] == 7
    assert [(g["cause"], g["nodes"], g["gpus"]) for g in data["groups"]][:2] == [
        ("CardTypeMismatch", 2, 8), ("CardInsufficientMemory", 2, 7)]
    miss = data["nearest_miss"]
    assert (miss["node"], miss["fitting_gpus"], miss["asked_gpus"]) == ("gpu-a40-1", 1, 2)
    [shortfall] = miss["shortfalls"]
    assert (shortfall["index"], shortfall["free"], shortfall["asked"]) == (0, 38_068, 40_000)
    assert "nvidia.com/use-gputype: A40" in data["constraints"]
    assert data["node_reasons"]["gpu-gone"] == "NVIDIA: 2/0 NodeInsufficientDevice"


def test_a_pod_that_fits_gets_its_node_and_gpus(run: Run) -> None:
    outcome = run("explain", "prod/small-infer")
    assert outcome.code == 0
    assert_golden("explain-fits.txt", outcome.out)


def _pending(name: str, containers: list[dict], *, init: list[dict] | None = None,
             annotations: dict[str, str] | None = None) -> dict:
    spec: dict = {"schedulerName": "hami-scheduler", "containers": containers}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "lab", "annotations": annotations or {}},
            "spec": spec, "status": {"phase": "Pending"}}


def _gpu(name: str, count: int, **limits: str) -> dict:
    return {"name": name, "resources": {"limits": {"nvidia.com/gpu": str(count),
                                                   **{f"nvidia.com/{k}": v for k, v in limits.items()}}}}


# Pods of different shapes, explained, filtered and bound one after another (each placement stays booked).
AGREEMENT_PODS = [
    ("ml", "big-train"), ("prod", "small-infer"),
    _pending("numa-pair", [_gpu("main", 2, gpumem="10k", gpucores="10")], annotations={names.POD_NUMA_BIND: "true"}),
    _pending("topology", [_gpu("main", 2, gpumem="20k")],
             annotations={names.POD_GPU_POLICY: "topology-aware", names.POD_USE_GPU_TYPE: "A100"}),
    _pending("with-init", [_gpu("main", 1, gpumem="5k", gpucores="10"), {"name": "sidecar"}],
             init=[_gpu("fetch", 1, gpumem="30k", gpucores="50")]),
    _pending("not-a40-a100", [_gpu("main", 1, gpumem="8k")], annotations={names.POD_NOUSE_GPU_TYPE: "A100,A40"}),
    _pending("whole-t4", [_gpu("main", 1, gpucores="100")], annotations={names.POD_USE_GPU_TYPE: "T4"}),
    _pending("spread-binpack", [_gpu("main", 1, **{"gpumem-percentage": "25"})],
             annotations={names.POD_NODE_POLICY: "spread", names.POD_GPU_POLICY: "binpack"}),
]


def test_explain_agrees_with_the_running_filter() -> None:
    with LocalCluster(bookmark_interval_seconds=0.1) as api:
        api.load_file(CLUSTER)
        api.load([pod for pod in AGREEMENT_PODS if isinstance(pod, dict)])
        kube = Kube.for_url(api.url)
        runtime = build_runtime(Settings.of(refresh_interval_seconds=300.0), kube=kube)
        runtime.start()
        verdicts = []
        try:
            assert runtime.cache.wait_synced(5.0)
            client = runtime.app.test_client()
            for entry in AGREEMENT_PODS:
                namespace, name = entry if isinstance(entry, tuple) else ("lab", entry["metadata"]["name"])
                pod = api.get("pods", name, namespace)
                assert pod is not None
                snapshot = read_snapshot(kube, leave_out_pod_uid=pod["metadata"]["uid"], node_rules=True)
                explanation = explain_pod(pod, snapshot, SchedulingPolicy())
                candidates = list(snapshot.screen(read_pod_needs(pod)).offered)
                answer = client.post("/filter", json={"Pod": pod, "NodeNames": candidates}).get_json()
                assert answer["Error"] == ""
                verdicts.append((name, explanation.verdict))
                if explanation.verdict == "unschedulable":
                    offered_reasons = {n: r for n, r in explanation.node_reasons.items() if n in candidates}
                    assert answer["FailedNodes"] == offered_reasons, name
                    continue
                assert answer["NodeNames"] == [explanation.node], name
                # The filter books in the server's memory only; the API shows the booking once /bind wrote it,
                # and only then does the next pod's explain (which reads the API) count it.
                unbound = (api.get("pods", name, namespace) or {})["metadata"].get("annotations") or {}
                assert names.POD_DEVICES_ALLOCATED not in unbound, name
                bound = client.post("/bind", json={"PodName": name, "PodNamespace": namespace,
                                                   "PodUID": pod["metadata"]["uid"], "Node": explanation.node})
                assert bound.get_json()["Error"] == "", name
                # HAMi's device plugin then sets the pod up: node lock removed, bind-phase success.
                kube.patch_node(explanation.node, {"metadata": {"annotations": {names.NODE_LOCK: None}}})
                kube.patch_pod(namespace, name, {"metadata": {"annotations": {names.POD_BIND_PHASE: "success"}}})
                stored = api.get("pods", name, namespace) or {}
                booked = decode_pod_devices(stored["metadata"]["annotations"][names.POD_DEVICES_ALLOCATED])
                filtered = [[(g.uuid, g.memory_mib, g.cores) for g in container] for container in booked if container]
                explained = [[(g.uuid, g.memory_mib, g.cores) for g in gpus] for gpus in explanation.placement.values()]
                assert filtered == explained, name
        finally:
            runtime.stop()
            kube.close()
    assert dict(verdicts) == {"big-train": "unschedulable", "small-infer": "fits", "numa-pair": "fits",
                              "topology": "fits", "with-init": "fits", "not-a40-a100": "fits",
                              "whole-t4": "unschedulable", "spread-binpack": "fits"}


def test_a_pod_without_gpus_is_not_ours(run: Run) -> None:
    data = json.loads(run("explain", "default/web", "-o", "json").out)
    assert (data["verdict"], data["message"]) == (
        "no-gpu", "this pod does not ask for a device of an enabled family (AMD, AWSNeuron, Biren, DCU, Enflame, GCU, "
                  "MLU, Metax-GPU, Metax-SGPU, Mthreads, NVIDIA, Vastai, XPU, kunlun); "
                  "hami-web does not "
                  "schedule it")


def test_an_unknown_policy_is_read_as_hami_reads_it(run: Run) -> None:
    """``binpak`` is read as ``spread`` (HAMi v2.10's ``DeviceUsageList.Less``) and the pod fits, as the filter
    places it."""
    outcome = run("explain", "typo")
    assert outcome.code == 0
    assert_golden("explain-unknown-policy.txt", outcome.out)


def test_a_bound_pod_shows_the_gpus_it_holds(run: Run) -> None:
    data = json.loads(run("explain", "prod/infer-a", "-o", "json").out)
    assert (data["verdict"], data["node"]) == ("scheduled", "gpu-a40-1")
    assert data["placement"] == {"server": [{"index": 0, "uuid": "GPU-a40-1-0", "type": "NVIDIA-NVIDIA A40",
                                             "memory_mib": 8000, "cores": 10, "family": "NVIDIA"}]}


def test_the_pods_own_booking_is_left_out(run: Run) -> None:
    # A pending pod the filter already booked (annotations written, bind not done) must not block itself: the
    # only free A40 is the one it booked.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "half-placed", "namespace": "ml", "annotations": {
               names.POD_USE_GPU_TYPE: "A40", names.POD_ASSIGNED_NODE: "gpu-a40-1",
               names.POD_DEVICES_ALLOCATED: "GPU-a40-1-1,NVIDIA,46068,100:;"}},
           "spec": {"schedulerName": "hami-scheduler", "containers": [
               {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}}}]},
           "status": {"phase": "Pending"}}
    with LocalCluster() as api:
        api.load_file(CLUSTER)
        api.load([pod])
        data = json.loads(run("explain", "ml/half-placed", "-o", "json", server=api.url).out)
    assert (data["verdict"], data["node"]) == ("fits", "gpu-a40-1")
    assert data["placement"]["main"][0]["uuid"] == "GPU-a40-1-1"


def test_a_gpu_pod_the_webhook_never_routed_is_flagged(run: Run) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unrouted", "namespace": "ml"},
           "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1",
                                                                            "nvidia.com/gpumem": "1k"}}}]},
           "status": {"phase": "Pending"}}
    with LocalCluster() as api:
        api.load_file(CLUSTER)
        api.load([pod])
        data = json.loads(run("explain", "ml/unrouted", "-o", "json", server=api.url).out)
    assert data["verdict"] == "fits"
    assert ("spec.schedulerName: default-scheduler (not hami-scheduler: hami-web's filter never sees this pod)"
            in data["constraints"])
