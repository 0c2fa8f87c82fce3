"""Scheduling throughput through the real kube-scheduler: with hami-web as its extender, and without.

Starts the end-to-end tier's control plane (``tests/e2e/controlplane.py``: etcd, kube-apiserver, hami-web,
kube-scheduler with ``k8s/scheduler-config.yaml``), creates GPU nodes, then

1. creates N GPU pods (through the webhook) for ``hami-scheduler`` — kube-scheduler calls ``/filter`` and
   ``/bind`` for each — and times first create → last pod bound;
2. starts a second kube-scheduler with the same configuration minus the extender (profile ``plain-scheduler``)
   and times N pods without GPUs through it on the same nodes.

Prints pods per second both ways and their ratio, and hami-web's own filter / bind latency from its metrics.
Needs ``KUBEBUILDER_ASSETS`` (see the README's "End-to-end tests").

    python benchmarks/e2e_throughput.py [--nodes 200] [--pods 300]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kubernetes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e.controlplane import (
    SKIP_REASON,
    ControlPlane,
    find_assets,
    gpu_container,
    pod_manifest,
)

from hami_web.core.devices import Device

A40 = "NVIDIA-NVIDIA A40"
CREATE_THREADS = 8


def create_nodes(plane: ControlPlane, how_many: int, gpus_per_node: int) -> None:
    def create(index: int) -> None:
        name = f"bench-node-{index:04d}"
        plane.create_gpu_node(name, [Device(uuid=f"GPU-{name}-{i}", index=i, count=10, memory_mib=46068, cores=100,
                                            type=A40, numa=0) for i in range(gpus_per_node)])

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(create, range(how_many)))


def time_pods(plane: ControlPlane, namespace: str, manifests: list[dict], *, timeout_seconds: float) -> float:
    """Seconds from the first create to the last pod bound (a watch on the namespace counts bindings)."""
    bound: set[str] = set()
    done = threading.Event()
    core = kubernetes.client.CoreV1Api(plane.api_client)
    listing = core.list_namespaced_pod(namespace)

    def watch() -> None:
        stream = kubernetes.watch.Watch()
        for event in stream.stream(core.list_namespaced_pod, namespace,
                                   resource_version=listing.metadata.resource_version,
                                   timeout_seconds=int(timeout_seconds)):
            pod = event["object"]
            if pod.spec.node_name:
                bound.add(pod.metadata.name)
                if len(bound) == len(manifests):
                    done.set()
                    stream.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(lambda manifest: core.create_namespaced_pod(namespace, manifest), manifests))
    created = time.monotonic() - started
    if not done.wait(timeout_seconds):
        raise SystemExit(f"only {len(bound)}/{len(manifests)} pods bound within {timeout_seconds:.0f} s")
    elapsed = time.monotonic() - started
    print(f"  created {len(manifests)} pods in {created:.1f} s; all bound after {elapsed:.1f} s")
    return elapsed


def extender_latency(plane: ControlPlane) -> str:
    """Mean filter and bind latency from hami-web's request-duration histogram."""
    text = ""
    for url in (f"http://127.0.0.1:{plane.metrics_port}/metrics", f"https://127.0.0.1:{plane.webhook_port}/metrics"):
        try:
            if url.startswith("https"):
                text = plane.hami_web_get("/metrics")[1]
            else:
                with urllib.request.urlopen(url, timeout=5) as response:
                    text = response.read().decode()
            break
        except OSError:
            continue
    parts = []
    for route in ("filter", "bind", "webhook"):
        sums = re.search(rf'hami_web_request_duration_seconds_sum{{route="/?{route}"}} ([0-9.e+-]+)', text)
        counts = re.search(rf'hami_web_request_duration_seconds_count{{route="/?{route}"}} ([0-9.e+-]+)', text)
        if sums and counts and float(counts.group(1)):
            parts.append(f"{route} {1000 * float(sums.group(1)) / float(counts.group(1)):.1f} ms "
                         f"(n={int(float(counts.group(1)))})")
    return ", ".join(parts) or "no latency series found"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--node-policy", choices=("binpack", "spread"), default="binpack",
                        help="hami.io/node-scheduler-policy of the GPU pods (binpack is hami-web's default)")
    parser.add_argument("--timeout", type=float, default=300.0)
    arguments = parser.parse_args()
    assets = find_assets()
    if assets is None:
        print(SKIP_REASON, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hami-web-e2e-bench-") as workdir:
        plane = ControlPlane(Path(workdir), assets).start()
        try:
            create_nodes(plane, arguments.nodes, arguments.gpus_per_node)
            time.sleep(2)  # let hami-web's cache and kube-scheduler's informer see every node
            gpu_namespace = plane.create_namespace("bench-gpu")
            plain_namespace = plane.create_namespace("bench-plain")
            print(f"{arguments.nodes} nodes x {arguments.gpus_per_node} GPUs, {arguments.pods} pods each way, "
                  f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")

            print(f"with the extender (hami-scheduler -> /filter, /bind; node policy {arguments.node_policy}):")
            gpu_pods = [pod_manifest(f"gpu-{i:04d}", [gpu_container("cuda", {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "10"})],
                annotations={"hami.io/node-scheduler-policy": arguments.node_policy})
                for i in range(arguments.pods)]
            with_extender = time_pods(plane, gpu_namespace, gpu_pods, timeout_seconds=arguments.timeout)
            print(f"  hami-web latency (mean): {extender_latency(plane)}")

            plane.start_scheduler("plain-scheduler", with_extender=False, profile_name="plain-scheduler",
                                  leader_elect=False)
            print("without the extender (plain-scheduler, pods without GPUs):")
            plain_pods = [pod_manifest(f"plain-{i:04d}", [gpu_container("app")], schedulerName="plain-scheduler")
                          for i in range(arguments.pods)]
            without_extender = time_pods(plane, plain_namespace, plain_pods, timeout_seconds=arguments.timeout)

            with_rate = arguments.pods / with_extender
            without_rate = arguments.pods / without_extender
            print(f"\nwith extender:    {with_rate:6.1f} pods/s")
            print(f"without extender: {without_rate:6.1f} pods/s")
            print(f"ratio:            {with_rate / without_rate:.2f} (the extender adds "
                  f"{100 * (with_extender / without_extender - 1):.0f} % to the time)")
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
