"""Time the dashboard's pages (HTML and JSON twin) on a generated cluster of 1,000 nodes × 8 GPUs.

Run from anywhere: ``python benchmarks/dashboard_render.py [--nodes 1000] [--gpu-pods 4000] [--pending 500]
[--runs 5]``.

The cluster cache is filled as the list loops fill it (`replace_nodes`, `replace_pods`) with the nodes and
pods of ``inspect_scale.py`` (mixed card types, one or two GPUs per pod); the decision log holds a full ring
of decisions and ``--pending`` pods refused by the cache's own `place` (each asks for two T4s with more
memory than a T4 has, so every node gives a reason; the 25 pods of a page all ask for different amounts,
so nothing computed for one pod serves the next). Every tenth node is tainted ``nvidia.com/gpu=present``
and every 25th cordoned; the dashboard reads them from an in-process API server as it does in
production (`NodeTraitsSink` on a node reflector), so kube-scheduler's node rules run on every page that explains
or counts.
Each page is then requested through the Flask app, as the dashboard listener would run it, and the median
wall time of ``--runs`` requests is printed, with the CPU time of the process over the same requests. Not
a test: no assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from inspect_scale import GPUS_PER_NODE, generate

from hami_web.core.choose import NoPlacement
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.dashboard.data import DashboardSources
from hami_web.dashboard.nodetraits import NodeTraitsSink
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.app import create_app
from hami_web.settings import Settings
from hami_web.state.cache import ClusterCache
from hami_web.state.decisions import DECISION_CAPACITY, Decision, DecisionLog
from hami_web.state.nodes import node_name, node_record
from hami_web.state.pods import pod_record
from hami_web.state.reflector import KubeSource, Reflector, ReflectorOptions


def _pending_pod(number: int) -> dict:
    return {"metadata": {"name": f"waiting-{number:04d}", "namespace": "team-x", "uid": f"pending-{number}",
                         "annotations": {"nvidia.com/use-gputype": "T4"}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {
                "nvidia.com/gpu": "2", "nvidia.com/gpumem": str(16000 + number % 25 * 100)}}}]}}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def build(nodes: int, gpu_pods: int, pending: int, api: LocalCluster) -> DashboardSources:
    objects = generate(nodes, gpu_pods, 0, seed=7)
    node_objects = [o for o in objects if o["kind"] == "Node"]
    for number, node in enumerate(node_objects):  # kube-scheduler's rules get work: some nodes tainted or cordoned
        if number % 10 == 0:
            node.setdefault("spec", {})["taints"] = [GPU_TAINT]
        elif number % 25 == 1:
            node.setdefault("spec", {})["unschedulable"] = True
    api.load(node_objects)
    cache = ClusterCache()
    cache.replace_nodes([node_record(o, catalog=cache.catalog) for o in objects if o["kind"] == "Node"])
    cache.replace_pods([pod_record(o, catalog=cache.catalog) for o in objects if o["kind"] == "Pod"],
                       listed_at=time.time())
    cache.mark_synced()
    decisions = DecisionLog()
    now = time.time()
    for number in range(DECISION_CAPACITY):
        decisions.record(Decision(at=now - 600 + number, kind="filter" if number % 2 else "bind",
                                  pod=f"team-{number % 40}/job-{number}", node=f"gpu-node-{number % nodes:05d}",
                                  gpus=f"GPU-{number % nodes:05d}-0(8000MiB,20%)", result="placed",
                                  latency_seconds=0.002 + (number % 7) / 1000))
    candidates = sorted(cache.node_views())
    for number in range(pending):
        pod = _pending_pod(number)
        result = cache.place(uid=pod["metadata"]["uid"], namespace="team-x", name=pod["metadata"]["name"],
                             request=pod_request(pod, RequestDefaults()),
                             options=pod_options(pod["metadata"]["annotations"], node_policy="binpack",
                                                 gpu_policy="spread"), candidates=candidates)
        assert isinstance(result, NoPlacement), "a pending pod asks for a GPU type no node has"
        decisions.record_refusal(uid=pod["metadata"]["uid"], pod=f"team-x/{pod['metadata']['name']}",
                                 reasons=result.reasons, pod_object=pod)
    kube = Kube.for_url(api.url)
    traits = NodeTraitsSink()
    node_reflector = Reflector(KubeSource("nodes", kube.list_nodes, kube.watch_nodes, node_name),
                               ReflectorOptions(streaming_lists=False))
    node_reflector.add_sink(traits)
    node_reflector.list_once()
    assert traits.traits(wait_seconds=30.0) is not None, "the node traits were not listed"
    return DashboardSources(settings=Settings(), cache=cache, decisions=decisions, kube=kube, node_traits=traits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpu-pods", type=int, default=4000)
    parser.add_argument("--pending", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    api = LocalCluster()
    api.start()
    sources = build(arguments.nodes, arguments.gpu_pods, arguments.pending, api)
    client = create_app(Settings(), dashboard=sources).test_client()
    print(f"load average before: {', '.join(f'{load:.2f}' for load in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{arguments.nodes} nodes x {GPUS_PER_NODE} GPUs, {arguments.gpu_pods} GPU pods, {arguments.pending} "
          f"pending pods, {DECISION_CAPACITY} decisions; median of {arguments.runs} requests:")
    pages = [("overview (50 nodes a page)", "/ui/"), ("overview, 500 nodes a page", "/ui/?per_page=500"),
             ("overview, cores, A40 only", "/ui/?metric=cores&type=NVIDIA-NVIDIA%20A40"),
             ("pending (25 a page, explained now)", "/ui/pending"), ("decisions", "/ui/decisions"),
             ("what-if 1 GPU x 8000 MiB (10,000 limit)", "/ui/whatif?gpus=1&memory_mib=8000"),
             ("what-if 2 GPUs x 40000 MiB", "/ui/whatif?gpus=2&memory_mib=40000")]
    for label, path in pages:
        for twin, url in (("HTML", path), ("JSON", path.replace("/ui/", "/ui/api/overview", 1)
                                           if path.startswith("/ui/?") or path == "/ui/"
                                           else path.replace("/ui/", "/ui/api/", 1))):
            walls, cpu_started = [], time.process_time()
            size = 0
            for _ in range(arguments.runs):
                started = time.perf_counter()
                response = client.get(url)
                walls.append(time.perf_counter() - started)
                assert response.status_code == 200, (url, response.get_data(as_text=True)[:300])
                size = len(response.data)
            cpu = (time.process_time() - cpu_started) / arguments.runs
            print(f"  {label:<42} {twin}  {statistics.median(walls) * 1000:7.0f} ms wall  {cpu * 1000:7.0f} ms CPU"
                  f"  ({size / 1024:,.0f} KB)")
    print(f"load average afterwards: {', '.join(f'{load:.2f}' for load in os.getloadavg())} on {os.cpu_count()} CPUs")
    api.stop()


if __name__ == "__main__":
    main()
