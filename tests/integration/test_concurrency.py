"""Concurrent scheduling through a real threaded HTTP server (docs/architecture.md#why-one-worker-with-threads: one
cache, atomic booking).

Covers: 8 client threads run filter+bind for 400 pods of mixed sizes onto 4 nodes × 4 GPUs (10 tasks, 16000
MiB, 100 cores each) over HTTP; the device plugin is simulated by releasing each lock right after a bind, and
a bind refused on a held (or five times contended) lock is retried. Afterwards, from the pods as stored in the
API server (not the cache): no GPU has more tasks, memory or cores booked than it has; every pod that was given
a node has its annotations and its Binding to that node; a refused pod really did not fit (usage only grew
during the run, so it must not fit the final state either); and the cache agrees with the API.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from hami_web.core import names
from hami_web.core.choose import NoPlacement, choose_node
from hami_web.core.grants import decode_pod_devices
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.core.usage import pod_booking
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import gpu_limits, gpu_node, gpu_pod, gpus, release_lock, usage_by_gpu

NODES = [f"node{i}" for i in range(4)]
GPUS_PER_NODE = 4
TASKS_PER_GPU = 10
MEMORY_MIB = 16000
PODS = 400
THREADS = 8
BIND_TRIES = 200



def _pods() -> list[dict]:
    chooser = random.Random(4)
    pods = []
    for number in range(PODS):
        limits = gpu_limits(chooser.choice([1, 1, 1, 2]), memory_mib=chooser.choice([500, 1000, 2500, 4000]),
                            cores=chooser.choice([0, 5, 10, 30]))
        pods.append(gpu_pod(f"job-{number:03d}", limits))
    return pods


def _schedule(url: str, session: requests.Session, kube: Kube, pod: dict) -> str:
    """Filter, then bind (retrying while the node is locked); the node, or "" when unschedulable."""
    name = pod["metadata"]["name"]
    answer = session.post(f"{url}/filter", json={"Pod": pod, "NodeNames": NODES}, timeout=30).json()
    assert answer["Error"] == "", answer
    if not answer["NodeNames"]:
        assert set(answer["FailedNodes"]) == set(NODES)
        return ""
    [node] = answer["NodeNames"]
    for _ in range(BIND_TRIES):
        bound = session.post(f"{url}/bind", json={"PodName": name, "PodNamespace": "default",
                                                  "PodUID": pod["metadata"]["uid"], "Node": node}, timeout=30).json()
        if bound["Error"] == "":
            release_lock(kube, name, node)
            return node
        # Held by another pod, or lost five compare-and-swaps in a row: kube-scheduler would retry later.
        assert "is locked by" in bound["Error"] or "lock still contended" in bound["Error"], bound
        time.sleep(0.002)
    raise AssertionError(f"pod {name} could not bind to {node}: {bound}")


def test_eight_threads_schedule_400_pods_without_overbooking(apiserver: LocalCluster, runtime: Runtime,
                                                              server_url: str) -> None:
    apiserver.load([gpu_node(node, gpus(node, GPUS_PER_NODE, count=TASKS_PER_GPU, memory_mib=MEMORY_MIB))
                    for node in NODES])
    apiserver.load(_pods())
    runtime.sync.sync_now()
    stored_pods = apiserver.list("pods", "default")
    local = threading.local()

    def schedule(pod: dict) -> str:
        if not hasattr(local, "session"):
            local.session = requests.Session()
            local.kube = Kube.for_url(apiserver.url)
        return _schedule(server_url, local.session, local.kube, pod)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        chosen = dict(zip([p["metadata"]["name"] for p in stored_pods], pool.map(schedule, stored_pods),
                          strict=True))
    elapsed = time.monotonic() - started

    placed = {name: node for name, node in chosen.items() if node}
    booked: dict[str, list[int]] = {}
    for pod in apiserver.list("pods", "default"):
        name, annotations = pod["metadata"]["name"], pod["metadata"].get("annotations") or {}
        if name not in placed:
            assert names.POD_ASSIGNED_NODE not in annotations and not pod["spec"].get("nodeName"), name
            continue
        assert pod["spec"].get("nodeName") == annotations[names.POD_ASSIGNED_NODE] == placed[name], name
        assert annotations[names.POD_DEVICES_TO_ALLOCATE] == annotations[names.POD_DEVICES_ALLOCATED]
        assert annotations[names.POD_BIND_PHASE] == "success"
        grants = decode_pod_devices(annotations[names.POD_DEVICES_ALLOCATED])
        for uuid, usage in pod_booking(grants, init_count=0).items():
            assert uuid.startswith(placed[name] + "-"), (name, uuid)
            total = booked.setdefault(uuid, [0, 0, 0])
            total[0] += usage.tasks
            total[1] += usage.memory_mib
            total[2] += usage.cores

    overbooked = {uuid: used for uuid, used in booked.items()
                  if used[0] > TASKS_PER_GPU or used[1] > MEMORY_MIB or used[2] > 100}
    assert overbooked == {}
    # The cluster was filled: many pods fit, and a refused pod really had nowhere to go.
    assert 50 <= len(placed) < PODS
    views = runtime.cache.node_views()
    for pod in stored_pods:
        if pod["metadata"]["name"] not in placed:
            request = pod_request(pod, RequestDefaults())
            options = pod_options({}, node_policy="binpack", gpu_policy="spread")
            assert isinstance(choose_node(request, options, NODES, views), NoPlacement), pod["metadata"]["name"]
    assert usage_by_gpu(runtime) == {uuid: tuple(used) for uuid, used in booked.items()}
    assert elapsed < 30, f"took {elapsed:.1f}s"
