"""Liveness and readiness never wait for an app thread (docs/observability.md#probes).

Covers, against ``hami-web serve`` (gunicorn, the front worker, TLS) and the in-process API server: with the API
server stalling every node-lock write and binds in flight on every app thread of the extender listener (and more
queued), ``/healthz`` and ``/readyz`` on both TLS listeners still answer, repeatedly, each within a generous bound,
with the app's own answers (readiness with its reason and the extender's activity); a probe on a listener that
does not serve it is still a 404 from the app; probes keep a kept-alive connection open for the next request.
Graceful stop (SIGTERM, as kubelet sends it) with binds stalled on the API: an idle kept-alive connection is closed
at once, the binds in flight are answered, and the server exits 0.
Latency figures come from ``benchmarks/probe_latency.py``, not from here.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.local import LocalServer, run_local_server

APP_THREADS = 2
STALL_SECONDS = 12.0
# A behaviour bound, not a performance figure: kubelet's default probe timeout is 1 s; the app threads stay held
# for STALL_SECONDS, so an answer inside this bound did not wait for one.
PROBE_ANSWER_BOUND_SECONDS = 2.0


def gpu_node(name: str) -> dict[str, Any]:
    """A node with one whole A40 (no sharing), its device plugin's handshake fresh."""
    device = Device(uuid=f"{name}-gpu0", index=0, count=1, memory_mib=8000, cores=100, type="NVIDIA-NVIDIA A40",
                    numa=0)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {
                "hami.io/node-nvidia-register": encode_register_json([device]),
                "hami.io/node-handshake": "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}}}


def gpu_pod(name: str) -> dict[str, Any]:
    """A pending pod for hami-scheduler asking for one GPU."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "hami-scheduler", "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def request(server: LocalServer, url: str, method: str, path: str, body: Any = None, *,
            timeout_seconds: float = 30.0) -> tuple[int, dict[str, Any]]:
    """One HTTPS request on a fresh connection; the status and the JSON answer."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=str(server.ca_path))
    connection = http.client.HTTPSConnection(parts.hostname or "", parts.port, context=context,
                                             timeout=timeout_seconds)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


@contextmanager
def stalled_binds(cluster: LocalCluster, server: LocalServer, pods: int) -> Iterator[list[Future[Any]]]:
    """``pods`` pods filtered onto their own nodes, then bound while the API holds each node-lock write.

    Yields once every app thread of the extender listener is inside a bind waiting on the API.
    """
    placements = []
    for index in range(pods):
        pod = cluster.get("pods", f"pod{index}", "default")
        status, answer = request(server, server.extender_url, "POST", "/filter",
                                 {"Pod": pod, "Nodes": None, "NodeNames": [f"node{index}"]})
        assert status == 200 and answer["NodeNames"] == [f"node{index}"], answer
        placements.append({"PodName": f"pod{index}", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                           "Node": f"node{index}"})
    cluster.inject_failure("PATCH", "nodes", mode="delay", seconds=STALL_SECONDS, count=pods)
    with ThreadPoolExecutor(max_workers=pods) as binders:
        binds = [binders.submit(request, server, server.extender_url, "POST", "/bind", placement)
                 for placement in placements]
        deadline = time.monotonic() + 10
        while sum(path.startswith("/api/v1/nodes/") for method, path in cluster.request_log
                  if method == "PATCH") < APP_THREADS:
            assert time.monotonic() < deadline, "the binds never reached the API"
            time.sleep(0.01)
        yield binds
        cluster.clear_failures()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """An API server holding four one-GPU nodes and a pending GPU pod for each."""
    with LocalCluster(bookmark_interval_seconds=0.5) as local:
        local.load([gpu_node(f"node{index}") for index in range(4)] + [gpu_pod(f"pod{index}") for index in range(4)])
        yield local


@pytest.fixture(scope="module")
def server(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One server with two app threads per listener against `cluster`."""
    with run_local_server(cluster.url, Path(tmp_path_factory.mktemp("probes")), threads=APP_THREADS) as running:
        yield running


def test_probes_answer_while_every_app_thread_waits_on_a_stalled_api(cluster: LocalCluster,
                                                                      server: LocalServer) -> None:
    with stalled_binds(cluster, server, pods=4) as binds:
        started = time.monotonic()
        answers = []
        for _ in range(5):
            for url in (server.extender_url, server.webhook_url):
                for path in ("/healthz", "/readyz"):
                    asked = time.monotonic()
                    status, body = request(server, url, "GET", path, timeout_seconds=PROBE_ANSWER_BOUND_SECONDS)
                    assert time.monotonic() - asked < PROBE_ANSWER_BOUND_SECONDS
                    answers.append((path, status, body))
        # Every probe was answered while the binds still held the threads.
        assert time.monotonic() - started < STALL_SECONDS - 2
        assert not any(bind.done() for bind in binds)
    assert {(path, status) for path, status, _ in answers} == {("/healthz", 200), ("/readyz", 200)}
    readiness = [body for path, _, body in answers if path == "/readyz"]
    assert all(body["status"] == "ready" and body["reason"] == "cluster cache is in sync" for body in readiness)
    assert all(body["extender"].startswith("last called ") for body in readiness)
    assert all(body == {"status": "ok"} for path, _, body in answers if path == "/healthz")
    for bind in binds:  # the stall ends: the binds finish with an answer (bound or an Error), not a hang
        status, _ = bind.result(timeout=30)
        assert status == 200


def test_a_probe_on_a_listener_that_does_not_serve_it_is_not_found(server: LocalServer) -> None:
    parts = urlsplit(server.metrics_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 404
    finally:
        connection.close()


def test_probes_answer_the_same_with_threads_free(server: LocalServer) -> None:
    for url in (server.webhook_url, server.extender_url):
        assert request(server, url, "GET", "/healthz") == (200, {"status": "ok"})
        status, body = request(server, url, "GET", "/readyz")
        assert status == 200 and body["status"] == "ready"


def test_probes_keep_the_connection_alive_for_the_next_request(server: LocalServer) -> None:
    parts = urlsplit(server.webhook_url)
    context = ssl.create_default_context(cafile=str(server.ca_path))
    connection = http.client.HTTPSConnection(parts.hostname or "", parts.port, context=context, timeout=10)
    try:
        for path in ("/healthz", "/readyz", "/healthz"):
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Content-Type") == "application/json"
            assert json.loads(response.read())["status"] in ("ok", "ready")
    finally:
        connection.close()


def test_graceful_stop_answers_the_binds_in_flight_and_closes_idle_connections(tmp_path: Path) -> None:
    with LocalCluster(bookmark_interval_seconds=0.5) as cluster:
        cluster.load([gpu_node(f"node{index}") for index in range(2)] + [gpu_pod(f"pod{index}") for index in range(2)])
        with run_local_server(cluster.url, tmp_path, threads=APP_THREADS) as server:
            parts = urlsplit(server.webhook_url)
            context = ssl.create_default_context(cafile=str(server.ca_path))
            idle = context.wrap_socket(socket.create_connection((parts.hostname, parts.port), timeout=30),
                                       server_hostname="127.0.0.1")
            with idle:
                idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                response = http.client.HTTPResponse(idle)  # type: ignore[arg-type]
                response.begin()
                assert response.status == 200 and json.loads(response.read()) == {"status": "ok"}
                with stalled_binds(cluster, server, pods=2) as binds:
                    server.process.send_signal(signal.SIGTERM)
                    stopping = time.monotonic()
                    assert idle.recv(4096) == b""  # closed by the server (a TLS close_notify, then EOF)
                    assert time.monotonic() - stopping < STALL_SECONDS - 2  # not after the binds
                    assert not any(bind.done() for bind in binds)
                    for bind in binds:  # answered (bound, or the API's timeout as an Error), not dropped
                        status, answer = bind.result(timeout=60)
                        assert status == 200 and "Error" in answer, answer
            assert server.process.wait(30) == 0
