"""Time ``hami-web serve`` keeping its cache in step with a large cluster (one command, not a test).

Run: ``python benchmarks/cache_scale.py [--nodes 5000] [--idle-seconds 60] [--filters 300]``.

The API backend is the project's in-process API server (`hami_web.localcluster`) in a child process, holding
``--nodes`` nodes × 8 GPUs, 8 GPU pods per node and 12 ordinary pods per node (5,000 nodes: 40,000 + 60,000
pods), each of realistic size (~4 KB of JSON: containers with env, probes, mounts and resources, status with
conditions and container statuses, managedFields). It serves paginated lists, watches with bookmarks and
patches as kube-apiserver does; to fit 100,000 such pods in memory, the stored objects share their unchanging
parts (safe: the store never mutates a stored object). The first paginated lists are answered from pages
encoded at start-up (`PreencodedLists`), because Python encoding 400 MB of JSON per list would measure the
backend rather than hami-web; ``--plain-backend`` turns that off. hami-web runs as it does in production: gunicorn, TLS,
its own process, reaching the backend through a kubeconfig.

Printed: seconds from start to ``/readyz`` 200; peak and steady RSS of the hami-web processes; CPU seconds per
minute while nothing changes; ``/filter`` p50/p99 over HTTPS (keep-alive, every node a candidate) idle and
while the backend writes ``--event-rate`` pod changes per second (annotation updates as kubelets and
controllers cause, plus GPU pods replaced); the longest cache-lock hold by kind of work, read from
``hami_web_cache_lock_hold_max_seconds``; and the longest single JSON decode of one list page.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zlib
from pathlib import Path
from typing import Any

import requests
import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.certs.command import make_local_certificates
from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.localcluster.httpserver import WsgiHttpServer
from hami_web.localcluster.resources import resource_type
from hami_web.state.sync import LIST_PAGE_SIZE

GPUS_PER_NODE = 8
ORDINARY_PODS_PER_NODE = 12
PENDING_PODS = 20
READY_TIMEOUT_SECONDS = 600
CARD_TYPES = ("NVIDIA-NVIDIA A40", "NVIDIA-NVIDIA A100-SXM4-80GB", "NVIDIA-NVIDIA L4")
PAGE_SECONDS_HZ = os.sysconf("SC_CLK_TCK")

# -- the cluster ---------------------------------------------------------------------------------------------

_ENV: list[dict[str, Any]] = [{"name": f"CONFIG_{i}", "value": f"value-{i}"} for i in range(4)]
_ENV.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}})
_MANAGED_FIELDS = [
    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2025-01-01T00:00:00Z",
     "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                                                           "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                                            "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
                                                ".": {}, "f:env": {".": {}}, "f:image": {}, "f:imagePullPolicy": {},
                                                "f:name": {}, "f:ports": {}, "f:resources": {}, "f:volumeMounts": {}}},
                                                "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                                                "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}},
]
_CONDITIONS = [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2025-01-01T00:00:05Z"}
               for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
_PROBE = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 10,
          "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3}
_MOUNTS = [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
           {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True}]
_VOLUMES = [{"name": "config", "configMap": {"name": "app-config", "defaultMode": 420}},
            {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]
_TOLERATIONS = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300}]


def _namespace(pod_name: str) -> str:
    return f"team-{zlib.crc32(pod_name.encode()) % 20}"


def gpu_uuid(node: int, index: int) -> str:
    return f"GPU-{node:08x}-{index:04x}-4a9d-b226-3518d4{index:06x}"


def node_object(number: int) -> dict[str, Any]:
    name = f"node-{number:05d}"
    card = CARD_TYPES[number % len(CARD_TYPES)]
    devices = [Device(uuid=gpu_uuid(number, i), index=i, count=10, memory_mib=46068, cores=100, type=card,
                      numa=i // 4) for i in range(GPUS_PER_NODE)]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "gpu": "on",
                                 "topology.kubernetes.io/zone": f"zone-{number % 3}"},
        "annotations": {"hami.io/node-nvidia-register": encode_register_json(devices),
                        "hami.io/node-handshake": "Requesting_2099-01-01 00:00:00",
                        "node.alpha.kubernetes.io/ttl": "0"}},
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "80"},
                   "allocatable": {"cpu": "63", "memory": "500Gi", "pods": "110", "nvidia.com/gpu": "80"},
                   "conditions": _CONDITIONS[:2],
                   "addresses": [{"type": "InternalIP", "address": f"10.0.{number // 250}.{number % 250}"}],
                   "nodeInfo": {"kubeletVersion": "v1.31.0", "osImage": "Ubuntu 22.04", "architecture": "amd64",
                                "containerRuntimeVersion": "containerd://1.7.0"}}}


def pod_object(name: str, *, node: int | None, gpu_index: int | None = None) -> dict[str, Any]:
    """A pod of ~3 KB; with ``gpu_index`` it holds 4000 MiB and 25 % of that GPU of ``node``."""
    limits: dict[str, str] = {"cpu": "2", "memory": "4Gi"}
    annotations = {"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"}
    if gpu_index is not None or node is None:
        limits.update({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k", "nvidia.com/gpucores": "25"})
    if gpu_index is not None and node is not None:
        devices = f"{gpu_uuid(node, gpu_index)},NVIDIA,4000,25:;"
        annotations.update({"hami.io/vgpu-node": f"node-{node:05d}", "hami.io/vgpu-devices-allocated": devices,
                            "hami.io/vgpu-devices-to-allocate": devices, "hami.io/bind-phase": "success",
                            "hami.io/vgpu-time": "1735689600"})
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.example.com/team/app:1.2.3", "env": _ENV,
                        "resources": {"limits": limits, "requests": limits}, "volumeMounts": _MOUNTS,
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}], "livenessProbe": _PROBE,
                        "imagePullPolicy": "IfNotPresent",
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "volumes": _VOLUMES, "tolerations": _TOLERATIONS, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
        "schedulerName": "hami-scheduler" if gpu_index is not None or node is None else "default-scheduler",
        "serviceAccountName": "default", "terminationGracePeriodSeconds": 30, "securityContext": {}}
    status: dict[str, Any] = {"phase": "Pending"}
    if node is not None:
        spec["nodeName"] = f"node-{node:05d}"
        status = {"phase": "Running", "conditions": _CONDITIONS, "hostIP": f"10.0.{node // 250}.{node % 250}",
                  "podIP": "10.244.1.17", "podIPs": [{"ip": "10.244.1.17"}], "startTime": "2025-01-01T00:00:01Z",
                  "qosClass": "Guaranteed", "containerStatuses": [{
                      "name": "main", "ready": True, "restartCount": 0, "started": True,
                      "image": "registry.example.com/team/app:1.2.3",
                      "imageID": "registry.example.com/team/app@sha256:" + "3f" * 32,
                      "containerID": "containerd://" + "9a" * 32,
                      "state": {"running": {"startedAt": "2025-01-01T00:00:04Z"}}, "lastState": {}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": _namespace(name), "annotations": annotations,
        "labels": {"app": name.rsplit("-", 1)[0], "pod-template-hash": "7d9c8b6f5d"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-7d9c8b6f5d",
                             "uid": "0f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f", "controller": True,
                             "blockOwnerDeletion": True}],
        "managedFields": _MANAGED_FIELDS}, "spec": spec, "status": status}


def cluster_objects(nodes: int) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [node_object(n) for n in range(nodes)]
    for n in range(nodes):
        objects.extend(pod_object(f"gpu-{n}-{i}", node=n, gpu_index=i) for i in range(GPUS_PER_NODE))
        objects.extend(pod_object(f"web-{n}-{i}", node=n) for i in range(ORDINARY_PODS_PER_NODE))
    objects.extend(pod_object(f"pending-{i}", node=None) for i in range(PENDING_PODS))
    return objects


# -- the backend (child process) -------------------------------------------------------------------------------


class PreencodedLists:
    """WSGI middleware: the first paginated lists of pods and nodes answered from pages encoded at start-up.

    The in-process API server encodes each page with Python's json module, which at 100,000 pods costs more
    than hami-web's own decoding and would be measured instead of it; kube-apiserver (Go) serves a page in a
    fraction of that. Requests that do not match (other page sizes, selectors, watches, a list after a
    write) go to the API server itself, and watches continue from the pre-encoded lists' resourceVersion.
    """

    def __init__(self, app: Any, cluster: LocalCluster, page_size: int) -> None:
        self.app = app
        self.store = cluster._store
        self.version = self.store.resource_version
        self.page_size = page_size
        self.pages: dict[str, list[bytes]] = {}
        for plural, kind in (("pods", "PodList"), ("nodes", "NodeList")):
            items, _ = self.store.list(resource_type(plural), None)
            chunks = [items[start:start + page_size] for start in range(0, len(items), page_size)] or [[]]
            pages = []
            for position, chunk in enumerate(chunks):
                metadata: dict[str, Any] = {"resourceVersion": str(self.version)}
                if position + 1 < len(chunks):
                    metadata["continue"] = f"bench-{position + 1}"
                    metadata["remainingItemCount"] = len(items) - (position + 1) * page_size
                stripped = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in chunk]
                pages.append(json.dumps({"kind": kind, "apiVersion": "v1", "metadata": metadata,
                                         "items": stripped}, separators=(",", ":")).encode())
            self.pages[f"/api/v1/{plural}"] = pages

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        pages = self.pages.get(environ.get("PATH_INFO", "")) if environ["REQUEST_METHOD"] == "GET" else None
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        if pages is not None and set(query) <= {"limit", "continue"} and query.get("limit") == [str(self.page_size)]:
            token = query.get("continue", [""])[0]
            if (token.startswith("bench-") or not token) and self.store.resource_version == self.version:
                body = pages[int(token.removeprefix("bench-") or 0)]
                start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
                return [body]
        return self.app(environ, start_response)


def run_backend(nodes: int, port_file: Path, *, preencoded: bool) -> int:
    """Serve the cluster until stdin closes; ``events <rate>`` on stdin starts writing pod changes."""
    # Lists in pages, as before streaming lists: Python encoding every pod as a watch event would measure the
    # backend; streaming lists are timed against kube-apiserver (benchmarks/streaming_lists.py).
    cluster = LocalCluster(history_size=100_000, bookmark_interval_seconds=30.0, watch_list="refuse")
    store = cluster._store  # objects share their unchanging parts, so load them without the deep copy
    for obj in cluster_objects(nodes):
        rt = resource_type("nodes" if obj["kind"] == "Node" else "pods")
        store.create(rt, obj["metadata"].get("namespace", ""), obj)
    app = PreencodedLists(cluster._api, cluster, LIST_PAGE_SIZE) if preencoded else cluster._api
    server = WsgiHttpServer(("127.0.0.1", 0), app)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port_file.write_text(f"http://127.0.0.1:{server.server_port}")
    rate = [0.0]
    threading.Thread(target=_write_events, args=(cluster, nodes, rate), daemon=True).start()
    for line in sys.stdin:
        command, _, value = line.strip().partition(" ")
        if command == "events":
            rate[0] = float(value)
    cluster._api.stopping.set()
    server.shutdown()
    return 0


def _write_events(cluster: LocalCluster, nodes: int, rate: list[float]) -> None:
    pods = resource_type("pods")
    store = cluster._store
    rng = random.Random(7)
    tick = 0
    next_at = time.monotonic()
    while True:
        if rate[0] <= 0:
            time.sleep(0.05)
            next_at = time.monotonic()
            continue
        next_at += 1 / rate[0]
        time.sleep(max(0.0, next_at - time.monotonic()))
        tick += 1
        node = rng.randrange(nodes)
        if tick % 10 == 0:  # a GPU pod replaced: DELETED, then ADDED with the same GPU
            index = rng.randrange(GPUS_PER_NODE)
            name = f"gpu-{node}-{index}"
            namespace = _namespace(name)
            store.delete(pods, namespace, name)
            store.create(pods, namespace, pod_object(name, node=node, gpu_index=index))
            continue
        name = f"web-{node}-{rng.randrange(ORDINARY_PODS_PER_NODE)}" if tick % 2 else \
            f"gpu-{node}-{rng.randrange(GPUS_PER_NODE)}"
        patch = json.dumps({"metadata": {"annotations": {"example.com/heartbeat": str(tick)}}}).encode()
        store.patch(pods, _namespace(name), name, "application/merge-patch+json", patch)


# -- measuring hami-web ----------------------------------------------------------------------------------------


def _process_tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
    tree, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        tree.extend(children)
        frontier = children
    return tree


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / PAGE_SECONDS_HZ


class RssSampler(threading.Thread):
    """Samples the RSS of hami-web's processes every 100 ms; ``peak_mib`` is the largest sum seen."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peak_mib = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            self.peak_mib = max(self.peak_mib, _rss_mib(_process_tree(self.root)))


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _filter_latencies(session: requests.Session, url: str, pods: list[dict[str, Any]], node_names: list[str],
                      count: int) -> list[float]:
    seconds = []
    for i in range(count):
        body = json.dumps({"Pod": pods[i % len(pods)], "NodeNames": node_names})
        started = time.perf_counter()
        answer = session.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=60).json()
        seconds.append(time.perf_counter() - started)
        if answer.get("Error") or not answer.get("NodeNames"):
            raise SystemExit(f"/filter did not place the pod: {answer}")
    return seconds


def _metric_values(text: str, name: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            values[labels] = float(value)
    return values


def _page_decode_ms() -> tuple[float, float, float, int]:
    """Median and longest json.loads of one list page (wall), its median CPU time, and the bytes per pod.

    The heap is frozen first, as hami-web freezes its own, so the collector does not add its passes.
    """
    pods = [pod_object(f"gpu-{n}-{i}", node=n, gpu_index=i) for n in range(32) for i in range(GPUS_PER_NODE)]
    body = json.dumps({"kind": "PodList", "items": pods[:LIST_PAGE_SIZE]}).encode()
    gc.collect()
    gc.freeze()
    timings, cpu_timings = [], []
    for _ in range(40):
        started, started_cpu = time.perf_counter(), time.thread_time()
        json.loads(body)
        timings.append(time.perf_counter() - started)
        cpu_timings.append(time.thread_time() - started_cpu)
    return statistics.median(timings) * 1000, max(timings) * 1000, statistics.median(cpu_timings) * 1000, \
        len(body) // LIST_PAGE_SIZE


def _serve_flags() -> set[str]:
    text = subprocess.run([sys.executable, "-m", "hami_web", "serve", "--help"], capture_output=True, text=True,
                          check=True).stdout
    return {word.strip(",") for word in text.split() if word.startswith("--")}


def measure(arguments: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="hami-web-bench-"))
    urllib3.disable_warnings()
    print(f"load average before: {os.getloadavg()}", flush=True)
    print(f"building the backend: {arguments.nodes} nodes, {arguments.nodes * GPUS_PER_NODE} GPU pods, "
          f"{arguments.nodes * ORDINARY_PODS_PER_NODE} ordinary pods ...", flush=True)
    port_file = workdir / "backend-url"
    backend_command = [sys.executable, __file__, "--backend", "--nodes", str(arguments.nodes), "--port-file",
                       str(port_file)]
    if arguments.plain_backend:
        backend_command.append("--plain-backend")
    backend = subprocess.Popen(backend_command, stdin=subprocess.PIPE, text=True)
    serve = None
    try:
        while not port_file.exists() or not port_file.read_text():
            if backend.poll() is not None:
                raise SystemExit("the backend failed to start")
            time.sleep(0.2)
        api_url = port_file.read_text()
        certificates = make_local_certificates(workdir / "tls", dns_names=("localhost",))
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": api_url}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
            "users": [{"name": "bench", "user": {}}]}))
        port, extender_port, metrics_port = 18443, 18444, 19395
        command = [sys.executable, "-m", "hami_web", "serve", "--kubeconfig", str(kubeconfig), "--cert-file",
                   str(certificates.cert_path), "--key-file", str(certificates.key_path), "--bind",
                   f"127.0.0.1:{port}", "--log-level", "WARNING"]
        flags = _serve_flags()
        base = f"https://127.0.0.1:{port}"
        extender_url, metrics_url = base, base
        if "--extender-bind" in flags:
            command += ["--extender-bind", f"127.0.0.1:{extender_port}"]
            extender_url = f"https://127.0.0.1:{extender_port}"
        if "--metrics-bind-address" in flags:
            command += ["--metrics-bind-address", f"127.0.0.1:{metrics_port}"]
            metrics_url = f"http://127.0.0.1:{metrics_port}"

        started = time.monotonic()
        serve = subprocess.Popen(command)
        sampler = RssSampler(serve.pid)
        sampler.start()
        session = requests.Session()
        session.trust_env = False  # REQUESTS_CA_BUNDLE would override the CA given here
        session.verify = str(certificates.ca_path)
        while True:
            if serve.poll() is not None:
                raise SystemExit("hami-web serve exited")
            if time.monotonic() - started > READY_TIMEOUT_SECONDS:
                raise SystemExit(f"hami-web was not ready after {READY_TIMEOUT_SECONDS} s")
            try:
                if session.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        ready_seconds = time.monotonic() - started
        ready_cpu_seconds = _cpu_seconds(_process_tree(serve.pid))
        print(f"ready after {ready_seconds:.1f} s", flush=True)

        time.sleep(5)
        tree = _process_tree(serve.pid)
        cpu_before = _cpu_seconds(tree)
        time.sleep(arguments.idle_seconds)
        idle_cpu_per_minute = (_cpu_seconds(_process_tree(serve.pid)) - cpu_before) * 60 / arguments.idle_seconds
        steady_mib = _rss_mib(_process_tree(serve.pid))

        api = requests.Session()
        api.trust_env = False
        node_names = [item["metadata"]["name"] for item in
                      api.get(f"{api_url}/api/v1/nodes", timeout=120).json()["items"]]
        pending = [item for item in api.get(f"{api_url}/api/v1/pods", params={"fieldSelector": "spec.nodeName="},
                                            timeout=120).json()["items"]]
        _filter_latencies(session, f"{extender_url}/filter", pending, node_names, 10)  # warm up
        idle = _filter_latencies(session, f"{extender_url}/filter", pending, node_names, arguments.filters)
        assert backend.stdin is not None
        backend.stdin.write(f"events {arguments.event_rate}\n")
        backend.stdin.flush()
        time.sleep(3)
        busy = _filter_latencies(session, f"{extender_url}/filter", pending, node_names, arguments.filters)
        backend.stdin.write("events 0\n")
        backend.stdin.flush()
        metrics = session.get(f"{metrics_url}/metrics", timeout=30).text
        sampler.stopping.set()
        holds = _metric_values(metrics, "hami_web_cache_lock_hold_max_seconds")
        holds_cpu = _metric_values(metrics, "hami_web_cache_lock_hold_max_cpu_seconds")
        decode_median_ms, decode_max_ms, decode_cpu_ms, pod_bytes = _page_decode_ms()

        print()
        print(f"nodes: {arguments.nodes} x {GPUS_PER_NODE} GPUs; pods: {arguments.nodes * GPUS_PER_NODE} GPU + "
              f"{arguments.nodes * ORDINARY_PODS_PER_NODE} ordinary (~{pod_bytes / 1024:.1f} KB each)")
        print(f"time to /readyz 200:           {ready_seconds:.1f} s "
              f"(hami-web used {ready_cpu_seconds:.1f} CPU seconds by then)")
        print(f"peak RSS:                      {sampler.peak_mib:.0f} MiB")
        print(f"steady RSS:                    {steady_mib:.0f} MiB")
        print(f"CPU while nothing changes:     {idle_cpu_per_minute:.2f} s per minute "
              f"({idle_cpu_per_minute / 60 * 100:.1f} % of a core)")
        print(f"/filter idle:                  p50 {statistics.median(idle) * 1000:.1f} ms, "
              f"p99 {_percentile(idle, 0.99) * 1000:.1f} ms, max {max(idle) * 1000:.1f} ms")
        print(f"/filter at {arguments.event_rate:g} pod events/s:   p50 {statistics.median(busy) * 1000:.1f} ms, "
              f"p99 {_percentile(busy, 0.99) * 1000:.1f} ms, max {max(busy) * 1000:.1f} ms")
        for labels, seconds in sorted(holds.items()):
            print(f"longest lock hold {labels:<14} {seconds * 1000:.2f} ms "
                  f"(most CPU in one hold: {holds_cpu.get(labels, 0) * 1000:.2f} ms)")
        print(f"decode of one page of {LIST_PAGE_SIZE} pods:  median {decode_median_ms:.1f} ms, "
              f"max {decode_max_ms:.1f} ms (median CPU {decode_cpu_ms:.1f} ms)")
        print(f"load average after: {os.getloadavg()}")
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(30)
        if backend.stdin is not None:
            backend.stdin.close()
        backend.wait(60)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="window for the idle CPU figure")
    parser.add_argument("--filters", type=int, default=300, help="/filter calls per phase")
    parser.add_argument("--event-rate", type=float, default=100.0, help="pod events per second while busy")
    parser.add_argument("--plain-backend", action="store_true",
                        help="let the in-process API server encode every list page itself (slower backend)")
    parser.add_argument("--backend", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.backend:
        return run_backend(arguments.nodes, arguments.port_file, preencoded=not arguments.plain_backend)
    measure(arguments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
