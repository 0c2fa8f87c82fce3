"""A bounded concurrency soak (docs/security.md#hardening): ``hami-web serve`` under load, killed with ``kill -9`` and
restarted.

Covers: several threads create pods, call ``/filter`` and ``/bind`` (playing kube-scheduler), release node
locks (playing HAMi's device plugin) and delete pods, against a real ``hami-web serve`` subprocess whose cache
refreshes every second from the in-process API server; halfway through the server is killed with SIGKILL and
started again. At the end no GPU is over-booked according to the pods in the API, and the usage the server
reports on ``/metrics`` equals the usage recomputed from the API.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.kube import Kube, KubeError
from hami_web.localcluster import LocalCluster
from hami_web.server.local import free_ports, write_kubeconfig
from hami_web.state.pods import pod_usage

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES = ("node1", "node2", "node3")
GPUS_PER_NODE, SHARES, MEMORY_MIB, CORES = 2, 4, 8000, 100
WORKERS = 4
SOAK_SECONDS = 12.0
KILL_AFTER_SECONDS = 5.0
SETTLE_SECONDS = 40.0  # an assumption the API never confirms is dropped after ASSUMPTION_GRACE_SECONDS


def _devices(node: str) -> list[Device]:
    return [Device(uuid=f"{node}-gpu{i}", index=i, count=SHARES, memory_mib=MEMORY_MIB, cores=CORES,
                   type="NVIDIA-NVIDIA A40") for i in range(GPUS_PER_NODE)]


def _node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {names.NODE_REGISTER: encode_register_json(_devices(name)),
                                                       names.NODE_HANDSHAKE: "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {"nvidia.com/gpu": str(GPUS_PER_NODE)}}}


def _pod(name: str, rng: random.Random) -> dict:
    limits = rng.choice([{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"},  # a whole card
                         {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": "30"},
                         {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2k", "nvidia.com/gpucores": "20"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}]}}


class Server:
    """``hami-web serve`` in a subprocess on fixed ports, so a restart is found where the old one was.

    Not `hami_web.server.local.run_local_server`: that one picks new ports per start and stops with SIGTERM,
    while the soak must ``kill -9`` the whole process group and find the restarted server on the same ports.
    """

    def __init__(self, apiserver: LocalCluster, tmp_path: Path) -> None:
        kubeconfig = write_kubeconfig(tmp_path, apiserver.url)
        service, extender, metrics = free_ports(3)
        # The three listeners agreed for this round, in plain HTTP.
        self.arguments = ["serve", "--insecure-http", "--bind", f"127.0.0.1:{service}",
                          "--extender-bind", f"127.0.0.1:{extender}", "--metrics-bind-address", f"127.0.0.1:{metrics}",
                          "--kubeconfig", str(kubeconfig), "--threads", "8", "--refresh-interval", "1s",
                          "--log-level", "WARNING", "--ui-bind", "off"]  # 9396 may be another test's now
        self.service_url = f"http://127.0.0.1:{service}"
        self.extender_url = f"http://127.0.0.1:{extender}"
        self.metrics_url = f"http://127.0.0.1:{metrics}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "hami_web", *self.arguments],
                                        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"hami-web serve exited with {self.process.returncode}"
            try:
                if requests.get(f"{self.service_url}/readyz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError("hami-web serve did not become ready within 20 s")

    def kill(self) -> None:
        """SIGKILL the whole process group (gunicorn's arbiter and its worker): nothing is flushed or saved."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def server(apiserver: LocalCluster, tmp_path: Path) -> Iterator[Server]:
    apiserver.load([_node(name) for name in NODES])
    running = Server(apiserver, tmp_path)
    running.start()
    yield running
    running.stop()


def _release_lock(kube: Kube, pod: str, node: str) -> None:
    """What HAMi's device plugin does after setting the pod up: our lock removed, bind-phase success."""
    for _ in range(20):
        current = kube.get_node(node)
        lock = (current["metadata"].get("annotations") or {}).get(names.NODE_LOCK) or ""
        if not lock.endswith(f",default,{pod}"):
            break
        try:
            kube.patch_node(node, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"],
                                                "annotations": {names.NODE_LOCK: None}}})
            break
        except KubeError:
            continue
    kube.patch_pod("default", pod, {"metadata": {"annotations": {names.POD_BIND_PHASE: "success"}}})


def _work(worker: int, server: Server, apiserver: LocalCluster, stop: threading.Event, outcomes: Counter,
          lock: threading.Lock) -> None:
    rng = random.Random(worker)
    session = requests.Session()
    kube = Kube.for_url(apiserver.url)
    mine: list[str] = []
    try:
        for step in range(10_000):
            if stop.is_set():
                return
            if mine and rng.random() < 0.4:
                _delete(apiserver, mine.pop(rng.randrange(len(mine))))
                outcome = "deleted"
            else:
                name = f"soak-{worker}-{step}"
                apiserver.load([_pod(name, rng)])
                outcome = _schedule(name, server, apiserver, session, kube)
                if outcome in ("bound", "bind-error"):
                    mine.append(name)  # holds GPUs (a failed bind until kube-scheduler would retry it)
                else:
                    _delete(apiserver, name)  # kube-scheduler would retry it later; keep the pod count small
                if outcome == "server-down":
                    stop.wait(0.2)
            with lock:
                outcomes[outcome] += 1
    finally:
        kube.close()


def _delete(apiserver: LocalCluster, name: str) -> None:
    requests.delete(f"{apiserver.url}/api/v1/namespaces/default/pods/{name}", timeout=5)


def _schedule(name: str, server: Server, apiserver: LocalCluster, session: requests.Session, kube: Kube) -> str:
    pod = apiserver.get("pods", name, "default")
    try:
        answer = session.post(f"{server.extender_url}/filter", json={"Pod": pod, "NodeNames": list(NODES)},
                              timeout=30).json()
        if answer["Error"] or not answer["NodeNames"]:
            return "filter-error" if answer["Error"] else "unschedulable"
        node = answer["NodeNames"][0]
        uid = pod["metadata"]["uid"]
        bound = session.post(f"{server.extender_url}/bind", timeout=30,
                             json={"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": node}).json()
    except requests.RequestException:
        return "server-down"
    if bound["Error"]:
        return "bind-error"
    _release_lock(kube, name, node)
    return "bound"


def _usage_from_api(apiserver: LocalCluster) -> dict[str, tuple[int, int, int]]:
    """Per GPU ``(tasks, MiB, cores)`` recomputed from the pods stored in the API server."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in apiserver.list("pods"):
        usage = pod_usage(pod)
        if usage is None:
            continue
        for uuid, booked in usage.booking.items():
            total = totals[uuid]
            total[0] += booked.tasks
            total[1] += booked.memory_mib
            total[2] += booked.cores
    return {uuid: (tasks, memory, cores) for uuid, (tasks, memory, cores) in totals.items() if tasks}


def _usage_from_metrics(server: Server) -> dict[str, tuple[int, int, int]]:
    """Per GPU ``(tasks, MiB, cores)`` as the server reports it on ``/metrics``."""
    text = requests.get(f"{server.metrics_url}/metrics", timeout=5).text
    values: dict[str, dict[str, float]] = defaultdict(dict)
    for line in text.splitlines():
        for metric in ("hami_gpu_shared_count", "hami_gpu_memory_allocated_bytes", "hami_gpu_core_allocated_ratio"):
            if line.startswith(metric + "{"):
                labels, value = line[len(metric) + 1:].rsplit("} ", 1)
                uuid = labels.split('device_uuid="', 1)[1].split('"', 1)[0]
                values[uuid][metric] = float(value)
    # HAMi's unit: booked cores in percent of the device (its devcore is CORES).
    return {uuid: (int(v["hami_gpu_shared_count"]), int(v["hami_gpu_memory_allocated_bytes"]) // (1024 * 1024),
                   round(v["hami_gpu_core_allocated_ratio"] * CORES / 100))
            for uuid, v in values.items() if v.get("hami_gpu_shared_count")}


def test_no_gpu_is_over_booked_across_concurrent_scheduling_and_a_kill_9(server: Server,
                                                                         apiserver: LocalCluster) -> None:
    stop, lock, outcomes = threading.Event(), threading.Lock(), Counter()
    workers = [threading.Thread(target=_work, args=(worker, server, apiserver, stop, outcomes, lock), daemon=True)
               for worker in range(WORKERS)]
    for worker in workers:
        worker.start()
    time.sleep(KILL_AFTER_SECONDS)
    bound_before_kill = outcomes["bound"]
    server.kill()
    server.start()
    time.sleep(SOAK_SECONDS - KILL_AFTER_SECONDS)
    stop.set()
    for worker in workers:
        worker.join(timeout=60)

    assert bound_before_kill > 0 and outcomes["bound"] > bound_before_kill, outcomes
    assert outcomes["unschedulable"] > 0, outcomes  # the GPUs were contended, so over-booking was possible
    from_api = _usage_from_api(apiserver)
    for uuid, (tasks, memory, cores) in from_api.items():
        assert tasks <= SHARES and memory <= MEMORY_MIB and cores <= CORES, (uuid, tasks, memory, cores)
    deadline = time.monotonic() + SETTLE_SECONDS
    while _usage_from_metrics(server) != from_api and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _usage_from_metrics(server) == from_api, outcomes
