"""Time to the first sync (what ``/readyz`` waits for) with streaming lists and with lists in pages, against the
real kube-apiserver.

Starts etcd and kube-apiserver (the e2e tier's binaries, ``KUBEBUILDER_ASSETS``; put etcd 3.5.16 there for
streaming lists: kube-apiserver v1.32 serves them from its watch cache only when etcd supports progress
notifications, see docs/performance.md#scale), creates ``--nodes`` GPU nodes (8 GPUs each) and ``--pods`` pods (one in
``--gpu-share`` holding a GPU, the others ordinary; ~3 KB each, with env, probes and resources as real pods
have), then runs hami-web's `ClusterSync` (the node and pod reflectors, as ``serve`` runs them) until the cache is
synced, ``--rounds`` times per mode, alternating: ``streaming`` (``sendInitialEvents``, falling back to pages if
the server refuses: the output says which path was taken) and ``paginated``. Printed per run: seconds to the
first sync, CPU seconds this process spent, the mode each resource was listed in, and the pods held. With
``--idle-seconds``, one more sync then polls its readiness every second while nothing changes and prints every "not
ready" (a quiet cluster must not make ``/readyz`` flap). Not a test: no assertions.

Run: ``KUBEBUILDER_ASSETS=/tmp/kube-assets python benchmarks/streaming_lists.py [--nodes 500] [--pods 5000]``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the e2e harness, as the other benchmarks

from e2e.controlplane import ControlPlane, find_assets

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.grants import DeviceGrant, encode_pod_devices
from hami_web.kube import Kube
from hami_web.state.cache import ClusterCache
from hami_web.state.sync import ClusterSync

GPUS_PER_NODE = 8
A40 = "NVIDIA-NVIDIA A40"
NAMESPACE = "default"


def _pod(index: int, nodes: int, gpu_share: float) -> dict[str, Any]:
    node = f"node-{index % nodes:05d}"
    container: dict[str, Any] = {
        "name": "main", "image": "registry.example.com/team/trainer:1.4.2", "command": ["python", "-m", "train"],
        "args": ["--epochs", "20", "--data", "/data/set-a", "--checkpoint", "/ckpt"],
        "env": [{"name": f"SETTING_{n}", "value": f"value-{n}-{index}"} for n in range(12)],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}},
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "ckpt", "mountPath": "/ckpt"}]}
    annotations = {"team.example.com/owner": f"owner-{index % 97}", "team.example.com/cost-centre": "research"}
    if index % round(1 / gpu_share) == 0 if gpu_share > 0 else False:
        uuid = f"GPU-{node}-{index % GPUS_PER_NODE}"
        devices = encode_pod_devices(((DeviceGrant(uuid, 2000, 10),),))
        container["resources"]["limits"].update({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000",
                                                 "nvidia.com/gpucores": "10"})
        annotations.update({names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: devices,
                            names.POD_DEVICES_TO_ALLOCATE: devices, names.POD_BIND_PHASE: "success"})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{index:06d}", "annotations": annotations,
                         "labels": {"app": f"app-{index % 50}", "tier": "batch"}},
            "spec": {"nodeName": node, "containers": [container], "terminationGracePeriodSeconds": 0,
                     "volumes": [{"name": "data", "emptyDir": {}}, {"name": "ckpt", "emptyDir": {}}]}}


def populate(plane: ControlPlane, nodes: int, pods: int, gpu_share: float, threads: int) -> None:
    """The nodes, then the pods, created through the API by ``threads`` threads."""
    started = time.monotonic()

    def node(index: int) -> None:
        name = f"node-{index:05d}"
        plane.create_gpu_node(name, [Device(uuid=f"GPU-{name}-{i}", index=i, count=10, memory_mib=46068,
                                            cores=100, type=A40, numa=0) for i in range(GPUS_PER_NODE)])

    def pod(index: int) -> None:
        plane.core.create_namespaced_pod(NAMESPACE, _pod(index, nodes, gpu_share))  # type: ignore[arg-type]

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(node, range(nodes)))
        print(f"created {nodes} nodes in {time.monotonic() - started:.0f}s", flush=True)
        for start in range(0, pods, 10_000):
            list(pool.map(pod, range(start, min(pods, start + 10_000))))
            print(f"created {min(pods, start + 10_000)} pods in {time.monotonic() - started:.0f}s", flush=True)


def first_sync(kubeconfig: str, *, streaming: bool, timeout_seconds: float) -> dict[str, Any]:
    """One `ClusterSync` from nothing to synced; what it took."""
    gc.collect()
    kube = Kube.from_kubeconfig(kubeconfig, timeout_seconds=60.0)
    cache = ClusterCache()
    sync = ClusterSync(cache, kube, refresh_interval_seconds=15.0, streaming_lists=streaming)
    cpu, started = time.process_time(), time.monotonic()
    sync.start()
    synced = cache.wait_synced(timeout_seconds)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    result = {"seconds": seconds if synced else float("nan"), "cpu": cpu,
              "modes": f"nodes {sync.nodes.list_mode or '-'} in {sync.nodes.list_seconds or 0:.1f}s, pods "
                       f"{sync.pods.list_mode or '-'} in {sync.pods.list_seconds or 0:.1f}s",
              "refused": sync.pods.streaming_refused, "pods_held": len(cache.pod_usages()),
              "nodes": len(cache.node_views())}
    sync.stop()
    kube.close()
    gc.unfreeze()  # the next run starts from a clean heap
    return result


def idle_readiness(kubeconfig: str, seconds: float, silence_bound_seconds: float) -> None:
    """Poll `ClusterSync.readiness` every second for ``seconds`` while nothing changes; print every "not ready"."""
    kube = Kube.from_kubeconfig(kubeconfig, timeout_seconds=60.0)
    cache = ClusterCache()
    sync = ClusterSync(cache, kube, watch_silence_bound_seconds=silence_bound_seconds)
    sync.start()
    try:
        assert cache.wait_synced(600), "no first sync"
        started, polls, refusals = time.monotonic(), 0, []
        while time.monotonic() - started < seconds:
            ready, reason = sync.readiness()
            polls += 1
            if not ready:
                refusals.append(f"{time.monotonic() - started:.0f}s: {reason}")
            time.sleep(1.0)
        print(f"idle {seconds:.0f}s (silence bound {silence_bound_seconds:g}s): {polls} readiness polls, "
              f"{len(refusals)} not ready; watches re-opened for silence: nodes {sync.nodes.reopens}, pods "
              f"{sync.pods.reopens}; lists: nodes {sync.nodes.lists}, pods {sync.pods.lists}", flush=True)
        for refusal in refusals:
            print(f"  not ready at {refusal}")
    finally:
        sync.stop()
        kube.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gpu-share", type=float, default=0.4, help="share of pods holding a GPU (0.4)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode, alternating (3)")
    parser.add_argument("--threads", type=int, default=16, help="threads creating the objects (16)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a first sync may take (600)")
    parser.add_argument("--idle-seconds", type=float, default=0.0,
                        help="then poll readiness this long while nothing changes (0: skip)")
    parser.add_argument("--silence-bound", type=float, default=90.0, help="--watch-silence-bound for the idle run")
    arguments = parser.parse_args()
    assets = find_assets()
    if assets is None:
        print("set KUBEBUILDER_ASSETS to the folder of etcd, kube-apiserver and kube-scheduler", file=sys.stderr)
        return 2
    versions = {name: subprocess.run([str(assets[name]), "--version"], capture_output=True, text=True)
                .stdout.splitlines()[0] for name in ("etcd", "kube-apiserver")}
    print(f"{versions['kube-apiserver']}; {versions['etcd']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hami-web-streaming-") as workdir:
        plane = ControlPlane(Path(workdir), assets)
        try:
            plane.start_api()
            plane.core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})  # type: ignore[arg-type]
            populate(plane, arguments.nodes, arguments.pods, arguments.gpu_share, arguments.threads)
            runs: dict[str, list[float]] = {"streaming": [], "paginated": []}
            for _ in range(arguments.rounds):
                for mode in ("streaming", "paginated"):
                    load_at_start = " ".join(Path("/proc/loadavg").read_text().split()[:3])
                    result = first_sync(str(plane.admin_kubeconfig), streaming=mode == "streaming",
                                        timeout_seconds=arguments.timeout)
                    runs[mode].append(result["seconds"])
                    refused = f" (streaming refused: {result['refused']})" if result["refused"] else ""
                    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
                    print(f"{mode:>9}: first sync after {result['seconds']:6.2f}s, {result['cpu']:6.2f} CPU s; "
                          f"{result['modes']}; {result['nodes']} GPU nodes, {result['pods_held']} pods holding "
                          f"GPUs; peak RSS of this process so far {peak} MiB; load average at the start "
                          f"{load_at_start}{refused}", flush=True)
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            for mode, seconds in runs.items():
                print(f"{mode}: median {statistics.median(seconds):.2f}s, best {min(seconds):.2f}s "
                      f"({arguments.nodes} nodes, {arguments.pods} pods; load average {load})")
            if arguments.idle_seconds > 0:
                idle_readiness(str(plane.admin_kubeconfig), arguments.idle_seconds, arguments.silence_bound)
        finally:
            logging.getLogger("hami_web").setLevel(logging.ERROR)  # the stopped syncs' watches break: expected
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
