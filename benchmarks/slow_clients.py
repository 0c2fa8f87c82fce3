"""Latency of ``/webhook`` and ``/filter`` while slow and idle clients hold connections open.

Run from anywhere: ``python benchmarks/slow_clients.py [--requests N] [--slow-per-kind K] [--threads T]``.

Starts ``hami-web serve`` exactly as in production (gunicorn, the front worker, TLS, three listeners) against
the in-process API server with a few GPU nodes. Then, first with no slow clients (baseline) and then with
K idle TCP connections, K stalled TLS handshakes (the first bytes of a ClientHello, then silence) and K TLS
connections that sent half a request header, all open at once and spread over both TLS listeners — an
attacker thread reopens each one as soon as the server drops it, so the K×3 stay open all along — it times
N ``POST /webhook`` (AdmissionReview of a GPU pod) and N ``POST /filter`` (a pending pod, one GPU share),
each on a new TLS connection (handshake included); under attack, for at least ``--min-seconds``, so the
server's deadlines pass several times. Printed: p50 / p99 / max ms per route, how many slow
connections the server dropped and the attacker reopened, and the machine's load. Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import selectors
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.local import LocalServer, run_local_server

PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
HALF_HEADER = b"POST /webhook HTTP/1.1\r\nHost: hami-web\r\nContent-Type: application/json\r\n"
NODES = 4
GPUS_PER_NODE = 8


def _node(name: str) -> dict[str, Any]:
    devices = [Device(uuid=f"{name}-gpu{i}", index=i, count=100, memory_mib=81920, cores=100,
                      type="NVIDIA-NVIDIA A100-SXM4-80GB", numa=0) for i in range(GPUS_PER_NODE)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {
                "hami.io/node-nvidia-register": encode_register_json(devices),
                "hami.io/node-handshake": "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {"nvidia.com/gpu": str(100 * GPUS_PER_NODE)}}}


def _pod(name: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100", "nvidia.com/gpucores": "0"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}]}}


def _review() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": "CREATE", "namespace": "default", "object": pod}}).encode()


class Attacker:
    """Keeps K idle, K stalled-handshake and K half-header connections open, reopening what the server drops."""

    def __init__(self, server: LocalServer, per_kind: int) -> None:
        self._targets = [urlsplit(server.webhook_url), urlsplit(server.extender_url)]
        self._context = ssl.create_default_context(cafile=str(server.ca_path))
        self._per_kind = per_kind
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.reopened = 0

    def _open(self, kind: str, index: int) -> None:
        target = self._targets[index % 2]
        connection = socket.create_connection((target.hostname, target.port), timeout=10)
        if kind == "stalled-handshake":
            connection.sendall(PARTIAL_CLIENT_HELLO)
        elif kind == "half-header":
            connection = self._context.wrap_socket(connection, server_hostname="127.0.0.1")
            connection.sendall(HALF_HEADER)
        connection.setblocking(False)
        self._selector.register(connection, selectors.EVENT_READ, (kind, index))

    def start(self) -> None:
        for kind in ("idle", "stalled-handshake", "half-header"):
            for index in range(self._per_kind):
                self._open(kind, index)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                connection = key.fileobj
                assert isinstance(connection, socket.socket), "only sockets are registered"
                try:
                    data = connection.recv(4096)
                except ssl.SSLWantReadError:
                    continue
                except OSError:
                    data = b""
                if data:
                    continue  # a TLS alert before the close
                self._selector.unregister(connection)
                connection.close()
                if not self._stop.is_set():
                    self._open(*key.data)
                    self.reopened += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            assert isinstance(key.fileobj, socket.socket), "only sockets are registered"
            key.fileobj.close()
        self._selector.close()


def _time_post(url: str, path: str, body: bytes, context: ssl.SSLContext) -> float:
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"{url}: no host to connect to")
    started = time.perf_counter()
    connection = http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=30)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    elapsed = time.perf_counter() - started
    if response.status != 200 or (path == "/filter" and not answer.get("NodeNames")):
        raise RuntimeError(f"{path} answered {response.status}: {answer}")
    return elapsed


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _measure(server: LocalServer, cluster: LocalCluster, *, requests: int, min_seconds: float,
             label: str) -> None:
    """At least ``requests`` of each route, and for at least ``min_seconds`` (past the server's deadlines)."""
    context = ssl.create_default_context(cafile=str(server.ca_path))
    webhook: list[float] = []
    filters: list[float] = []
    started = time.monotonic()
    while len(filters) < requests or time.monotonic() - started < min_seconds:
        name = f"pod-{uuid.uuid4().hex[:10]}"
        cluster.load([_pod(name)])
        webhook.append(_time_post(server.webhook_url, "/webhook", _review(), context))
        args = {"Pod": cluster.get("pods", name, "default"), "NodeNames": [f"node{i}" for i in range(NODES)]}
        filters.append(_time_post(server.extender_url, "/filter", json.dumps(args).encode(), context))
    for route, values in (("/webhook", webhook), ("/filter", filters)):
        print(f"| {label} | {route} | {len(values)} | {statistics.median(values) * 1000:.1f} | "
              f"{_percentile(values, 0.99) * 1000:.1f} | {max(values) * 1000:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests per route and scenario (300)")
    parser.add_argument("--min-seconds", type=float, default=20.0,
                        help="measure each scenario for at least this long (20: several server deadlines)")
    parser.add_argument("--slow-per-kind", type=int, default=64, help="slow connections of each kind (64)")
    parser.add_argument("--threads", type=int, default=8, help="server app threads, as --threads (8)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hami-web-bench-") as scratch, LocalCluster() as cluster:
        cluster.load([_node(f"node{i}") for i in range(NODES)])
        with run_local_server(cluster.url, Path(scratch), threads=arguments.threads) as server:
            print(f"Python {platform.python_version()}, {os.cpu_count()} cores, load average before: "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print("| scenario | route | requests | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|")
            _measure(server, cluster, requests=arguments.requests, min_seconds=0, label="no slow clients")
            attacker = Attacker(server, arguments.slow_per_kind)
            attacker.start()
            try:
                time.sleep(1.0)  # let the slow connections settle in
                _measure(server, cluster, requests=arguments.requests, min_seconds=arguments.min_seconds,
                         label=f"{3 * arguments.slow_per_kind} slow clients")
            finally:
                attacker.stop()
            print(f"slow connections dropped by the server and reopened: {attacker.reopened}; "
                  f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
