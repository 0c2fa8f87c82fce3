"""Time ``kubectl hami inspect`` (and ``capacity``, ``explain``) on a generated cluster of 5,000 nodes × 8 GPUs.

Run from anywhere: ``python benchmarks/inspect_scale.py [--nodes 5000] [--gpu-pods 20000] [--other-pods 0]
[--runs 3]``.

An in-process API server (`LocalCluster`, in its own process so that serving the lists does not share the
command's interpreter) is seeded with nodes as HAMi's device plugin registers them (JSON register annotation,
mixed card types) and pods of realistic size (labels, owner, env, resources, conditions and container statuses,
about 2.5 KB of JSON each), each GPU pod holding one to two GPUs. Then the installed ``kubectl-hami`` command
runs as a separate process, as a user would run it, and the wall time from start to exit is printed: start-up,
the paginated lists, the join and the rendering; with its CPU time, which does not depend on how busy the
machine is. Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster

GPUS_PER_NODE = 8
CARD_MODELS = (("NVIDIA-NVIDIA A40", 46068), ("NVIDIA-NVIDIA A100-SXM4-80GB", 81920), ("NVIDIA-Tesla T4", 15360),
               ("NVIDIA-NVIDIA L4", 23034))


def _node(number: int, rng: random.Random) -> tuple[dict[str, Any], list[Device]]:
    name = f"gpu-node-{number:05d}"
    card_type, memory_mib = rng.choice(CARD_MODELS)
    devices = [Device(uuid=f"GPU-{number:05d}-{index}", index=index, count=10, memory_mib=memory_mib, cores=100,
                      type=card_type, numa=index // 4) for index in range(GPUS_PER_NODE)]
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu": "on"},
                         "annotations": {"hami.io/node-nvidia-register": encode_register_json(devices),
                                         "hami.io/node-handshake": "Reported_2026-11-21 09:00:00"}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "80"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    return node, devices


def _pod(number: int, node: str | None, grants: str, rng: random.Random) -> dict[str, Any]:
    name = f"job-{number:06d}-{rng.randrange(16 ** 5):05x}"
    limits = {"cpu": "4", "memory": "16Gi"}
    annotations: dict[str, str] = {"kubectl.kubernetes.io/default-container": "main"}
    labels = {"app": f"team-{number % 40}", "pod-template-hash": "5d4e6daa"}
    if node:
        limits.update({"nvidia.com/gpu": str(grants.count(":")), "nvidia.com/gpumem": "8k"})
        annotations.update({"hami.io/vgpu-node": node, "hami.io/vgpu-time": "1795250000",
                            "hami.io/vgpu-devices-to-allocate": grants, "hami.io/vgpu-devices-allocated": grants,
                            "hami.io/bind-phase": "success"})
        labels["hami.io/vgpu-node"] = node
    env = [{"name": f"SETTING_{i}", "value": f"value-{i}-{number}"} for i in range(6)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": f"team-{number % 40}", "labels": labels,
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs",
                                              "uid": f"{number:08d}-0000-0000-0000-000000000000",
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": node or f"cpu-node-{number % 100}", "schedulerName": "hami-scheduler",
                     "containers": [{"name": "main", "image": "registry.example/team/app:1.2.3", "env": env,
                                     "resources": {"limits": limits, "requests": limits},
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data", "emptyDir": {}}], "restartPolicy": "Always"},
            "status": {"phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1",
                       "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-11-21T09:00:00Z"}
                                      for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                       "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                              "image": "registry.example/team/app:1.2.3",
                                              "state": {"running": {"startedAt": "2026-11-21T09:00:00Z"}}}]}}


def generate(nodes: int, gpu_pods: int, other_pods: int, seed: int) -> list[dict[str, Any]]:
    """Node and pod objects: GPU pods spread at random, each on one or two GPUs with 8000 MiB and 20 % each."""
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    inventories = []
    for number in range(nodes):
        node, devices = _node(number, rng)
        objects.append(node)
        inventories.append((node["metadata"]["name"], devices))
    for number in range(gpu_pods):
        node, devices = rng.choice(inventories)
        chosen = rng.sample(devices, rng.choice((1, 1, 1, 2)))
        grants = "".join(f"{d.uuid},NVIDIA,{min(8000, d.memory_mib // 2)},20:" for d in chosen) + ";"
        objects.append(_pod(number, node, grants, rng))
    for number in range(other_pods):
        objects.append(_pod(gpu_pods + number, None, "", rng))
    return objects


def _serve(objects: list[dict[str, Any]], url_out: Any, stop: Any) -> None:
    with LocalCluster(objects) as cluster:
        url_out.send(cluster.url)
        stop.wait()


def _process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _time_command(argv: list[str], runs: int, server_pid: int) -> tuple[float, float, float, int]:
    """Medians over ``runs`` runs of: wall seconds, the command's CPU seconds, the API server's CPU seconds;
    and the lines of output.

    CPU time is what each side costs; wall time also holds, on a shared machine, the time spent waiting for a
    core.
    """
    walls, cpus, server_cpus = [], [], []
    lines = 0
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        server_before = _process_cpu_seconds(server_pid)
        started = time.perf_counter()
        result = subprocess.run(argv, capture_output=True, check=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        server_cpus.append(_process_cpu_seconds(server_pid) - server_before)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        lines = result.stdout.count(b"\n")
    return statistics.median(walls), statistics.median(cpus), statistics.median(server_cpus), lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpu-pods", type=int, default=20_000)
    parser.add_argument("--other-pods", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    arguments = parser.parse_args()

    objects = generate(arguments.nodes, arguments.gpu_pods, arguments.other_pods, arguments.seed)
    pod_bytes = [len(json.dumps(o)) for o in objects if o["kind"] == "Pod"]
    receive, send = multiprocessing.Pipe(duplex=False)
    stop = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(objects, send, stop), daemon=True)
    server.start()
    assert server.pid is not None, "a started process has a pid"
    url = receive.recv()
    command = str(Path(sys.executable).with_name("kubectl-hami"))
    print(f"load average before: {', '.join(f'{load:.2f}' for load in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{arguments.nodes} nodes x {GPUS_PER_NODE} GPUs, {arguments.gpu_pods} GPU pods + {arguments.other_pods} "
          f"other pods (median {statistics.median(pod_bytes) / 1024:.1f} KB of JSON each); "
          f"median of {arguments.runs} runs of the whole command (start-up, lists, join, output):")
    try:
        for label, extra in (("inspect --top 20", ["inspect", "--top", "20"]),
                             ("inspect (every node and GPU)", ["inspect"]),
                             ("inspect -o json", ["inspect", "-o", "json"]),
                             ("capacity --gpumem 8000 --gpucores 20 --limit 1000",
                              ["capacity", "--gpumem", "8000", "--gpucores", "20", "--limit", "1000"])):
            wall, cpu, server_cpu, lines = _time_command([command, *extra, "--server", url], arguments.runs,
                                                         server.pid)
            print(f"  {label:<52} {wall:6.2f} s wall   {cpu:5.2f} s CPU (API server {server_cpu:5.2f} s)   "
                  f"{lines:,} lines")
        print(f"load average afterwards: {', '.join(f'{load:.2f}' for load in os.getloadavg())} "
              f"on {os.cpu_count()} CPUs")
    finally:
        stop.set()
        server.join(10)


if __name__ == "__main__":
    main()
