"""The production server over real sockets: listeners by audience, slow clients, bodies, HTTP framing.

Covers, against ``hami-web serve`` (gunicorn, the front worker, TLS) and the in-process API server: each
route answers only on its listener (404 elsewhere); with idle TCP connections, stalled TLS handshakes and
half-sent headers open on both TLS listeners, ``/webhook`` and ``/filter`` still answer (two app threads),
and the server drops those clients on its own; an oversized body — by Content-Length or chunked — is
answered (413 on the webhook, a "larger than" ``Error`` on the extender) and the client reads that answer
instead of a reset; ``Expect: 100-continue``; keep-alive with pipelined requests; a malformed request line,
Content-Length with chunked, or a bad chunk size gets a 400, a header too large a 431, an absurd
Content-Length a 413 without the server waiting for the body. Timings are measured by
``benchmarks/slow_clients.py``, not here.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.local import LocalServer, run_local_server

FIVE_MIB = 5 * 1024 * 1024
SLOW_CLIENTS_PER_KIND = 64
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # record + handshake header, no more


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """An API server holding one GPU node (two A40s, ten shares each)."""
    devices = [Device(uuid=f"node1-gpu{i}", index=i, count=10, memory_mib=8000, cores=100,
                      type="NVIDIA-NVIDIA A40", numa=0) for i in range(2)]
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node1", "annotations": {
                "hami.io/node-nvidia-register": encode_register_json(devices),
                "hami.io/node-handshake": "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {"nvidia.com/gpu": "20"}}}
    with LocalCluster() as local:
        local.load([node])
        yield local


@pytest.fixture(scope="module")
def server(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One server with two app threads against `cluster`."""
    with run_local_server(cluster.url, Path(tmp_path_factory.mktemp("front")), threads=2) as running:
        yield running


def _tls_context(server: LocalServer) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.ca_path))


def _connection(server: LocalServer, url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, parts.port, context=_tls_context(server), timeout=20)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)


def _request(server: LocalServer, url: str, method: str, path: str, body: Any = None,
             **options: Any) -> tuple[int, bytes]:
    connection = _connection(server, url)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"}, **options)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _review() -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "namespace": "default", "object": pod}}


def _filter_args(cluster: LocalCluster) -> dict[str, Any]:
    """A pending pod asking for a small share of one GPU, created in `cluster`, as kube-scheduler sends it."""
    name = f"pod-{uuid.uuid4().hex[:8]}"
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100", "nvidia.com/gpucores": "1"}
    cluster.load([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                   "spec": {"schedulerName": "hami-scheduler",
                            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}]}}])
    return {"Pod": cluster.get("pods", name, "default"), "NodeNames": ["node1"]}


# -- listeners by audience ---------------------------------------------------------------------------------

ROUTES = [("POST", "/webhook"), ("POST", "/filter"), ("POST", "/bind"), ("POST", "/preempt"), ("GET", "/healthz"),
          ("GET", "/readyz"), ("GET", "/metrics")]
SERVED = {
    "webhook": {"/webhook", "/healthz", "/readyz"},
    "extender": {"/filter", "/bind", "/preempt", "/healthz", "/readyz"},
    "metrics": {"/metrics"},
}


@pytest.mark.parametrize("listener", sorted(SERVED))
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_each_route_answers_only_on_its_listener(server: LocalServer, listener: str, method: str,
                                                 path: str) -> None:
    url = {"webhook": server.webhook_url, "extender": server.extender_url, "metrics": server.metrics_url}[listener]
    status, body = _request(server, url, method, path, b"{}" if method == "POST" else None)
    if path in SERVED[listener]:
        assert status != 404, body
    else:
        assert status == 404
        assert json.loads(body)["error"] == "Not Found"


def test_metrics_listener_is_plain_http_with_prometheus_text(server: LocalServer) -> None:
    status, body = _request(server, server.metrics_url, "GET", "/metrics")
    assert status == 200 and b"hami_gpu_memory_limit_bytes" in body


# -- slow and idle clients ------------------------------------------------------------------------------------


def _open_slow_clients(server: LocalServer) -> list[socket.socket]:
    """Idle TCP, stalled TLS handshakes and half-sent headers, on both TLS listeners."""
    context = _tls_context(server)
    opened: list[socket.socket] = []
    for index in range(SLOW_CLIENTS_PER_KIND):
        target = urlsplit(server.webhook_url if index % 2 else server.extender_url)
        address = (target.hostname, target.port)
        opened.append(socket.create_connection(address, timeout=20))  # says nothing
        stalled = socket.create_connection(address, timeout=20)
        stalled.sendall(PARTIAL_CLIENT_HELLO)  # the start of a ClientHello, then silence
        opened.append(stalled)
        half = context.wrap_socket(socket.create_connection(address, timeout=20), server_hostname="127.0.0.1")
        half.sendall(b"POST /webhook HTTP/1.1\r\nHost: hami-web\r\nContent-Type: application/json\r\n")
        opened.append(half)
    return opened


def _closed_by_server(client: socket.socket) -> bool:
    try:
        for _ in range(10):  # a TLS alert may come first
            if not client.recv(4096):
                return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    return False


def test_slow_and_idle_clients_do_not_stop_the_webhook_or_the_filter(server: LocalServer,
                                                                    cluster: LocalCluster) -> None:
    slow = _open_slow_clients(server)
    try:
        for _ in range(3):
            status, body = _request(server, server.webhook_url, "POST", "/webhook", json.dumps(_review()))
            assert status == 200 and json.loads(body)["response"]["allowed"] is True
            status, body = _request(server, server.extender_url, "POST", "/filter", json.dumps(_filter_args(cluster)))
            assert status == 200 and json.loads(body)["NodeNames"] == ["node1"], body
        for client in slow:  # the server gives up on each of them (its deadlines are a few seconds)
            assert _closed_by_server(client)
    finally:
        for client in slow:
            client.close()


# -- bodies -------------------------------------------------------------------------------------------------


def test_an_oversized_body_is_answered_413_and_the_client_reads_it(server: LocalServer) -> None:
    status, body = _request(server, server.webhook_url, "POST", "/webhook", b"x" * FIVE_MIB)
    assert status == 413
    assert "larger than" in json.loads(body)["message"]


def test_an_oversized_body_to_the_extender_is_an_error_it_can_read(server: LocalServer) -> None:
    status, body = _request(server, server.extender_url, "POST", "/filter", b"x" * FIVE_MIB)
    assert status == 200
    assert json.loads(body)["Error"] == "/filter: request body is larger than the 4 MiB limit"


@pytest.mark.parametrize(("url_of", "route"), [(lambda s: s.webhook_url, "/webhook"),
                                               (lambda s: s.extender_url, "/filter")], ids=["webhook", "filter"])
def test_a_chunked_body_over_the_limit_is_too_large_not_unreadable(server: LocalServer, url_of: Any,
                                                                   route: str) -> None:
    chunks = (b"y" * (256 * 1024) for _ in range(20))  # 5 MiB, no Content-Length
    status, body = _request(server, url_of(server), "POST", route, chunks, encode_chunked=True)
    answer = json.loads(body)
    message = answer["Error"] if route == "/filter" else answer["message"]
    assert "larger than" in message and "not JSON" not in message
    assert status == (200 if route == "/filter" else 413)


def test_a_chunked_body_within_the_limit_is_read_whole(server: LocalServer) -> None:
    raw = json.dumps(_review()).encode()
    chunks = (raw[i:i + 100] for i in range(0, len(raw), 100))
    status, body = _request(server, server.webhook_url, "POST", "/webhook", chunks, encode_chunked=True)
    assert status == 200 and json.loads(body)["response"]["allowed"] is True


# -- HTTP framing --------------------------------------------------------------------------------------------


def _raw_tls(server: LocalServer, url: str) -> ssl.SSLSocket:
    target = urlsplit(url)
    raw = socket.create_connection((target.hostname, target.port), timeout=20)
    return _tls_context(server).wrap_socket(raw, server_hostname="127.0.0.1")


def _read_response(connection: ssl.SSLSocket) -> tuple[int, bytes]:
    response = http.client.HTTPResponse(connection)  # type: ignore[arg-type]
    response.begin()
    return response.status, response.read()


def test_expect_100_continue_is_answered_before_the_body(server: LocalServer) -> None:
    body = json.dumps(_review()).encode()
    with _raw_tls(server, server.webhook_url) as connection:
        connection.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = connection.recv(64)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        connection.sendall(body)
        assert _read_response(connection)[0] == 200


def test_pipelined_requests_on_one_kept_alive_connection(server: LocalServer) -> None:
    with _raw_tls(server, server.extender_url) as connection:
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while received.count(b"HTTP/1.1 ") < 2 or not received.rstrip().endswith(b"}"):
            chunk = connection.recv(4096)
            assert chunk, received
            received += chunk
        statuses = [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", received)]
        assert statuses == [200, 200]


def test_a_kept_alive_connection_outlasts_the_first_requests_idle_deadline(server: LocalServer) -> None:
    """Go's HTTP clients (kube-apiserver's webhook client, kube-scheduler's extender client) keep an idle connection
    90 s and close it themselves; a server that closed it after 5 s raced a POST sent on it (EOF, not resent). A new
    connection that says nothing is still dropped within seconds (`test_slow_and_idle_clients_...`)."""
    with _raw_tls(server, server.webhook_url) as connection:
        for _ in range(2):
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            received = b""
            while not received.rstrip().endswith(b"}"):
                chunk = connection.recv(4096)
                assert chunk, "the server closed the kept-alive connection"
                received += chunk
            assert received.startswith(b"HTTP/1.1 200 ")
            time.sleep(6.5)  # past the 5 s a new connection gets for its first request


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"NOT A REQUEST\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    (b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"POST /webhook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    (b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 413),
], ids=["malformed-request-line", "header-too-large", "length-and-chunked", "bad-chunk-size", "absurd-length"])
def test_a_malformed_request_gets_a_clear_status(server: LocalServer, request_bytes: bytes, status: int) -> None:
    with _raw_tls(server, server.webhook_url) as connection:
        connection.sendall(request_bytes)
        assert _read_response(connection)[0] == status


def _read_until_closed(connection: ssl.SSLSocket) -> bytes:
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def test_a_kept_alive_connection_carries_app_answers_in_turn_and_closes_when_the_client_asks(
        server: LocalServer) -> None:
    """The app's answer is written in one write with its Content-Length, so the next request on the connection is
    read; ``Connection: close`` from the client is honoured: the answer says so and the server closes."""
    body = json.dumps(_review()).encode()
    request = (b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
               % (len(body), b"%s")) + body
    with _raw_tls(server, server.webhook_url) as connection:
        for _ in range(2):
            connection.sendall(request.replace(b"%s", b"", 1))
            response = http.client.HTTPResponse(connection)  # type: ignore[arg-type]
            response.begin()
            assert response.status == 200 and json.loads(response.read())["response"]["allowed"] is True
            assert response.getheader("Content-Length") and response.getheader("Connection") is None
        connection.sendall(request.replace(b"%s", b"Connection: close\r\n", 1))
        answer = _read_until_closed(connection)  # returns only because the server closed
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"\r\nConnection: close" in head
    assert json.loads(payload)["response"]["allowed"] is True


def test_head_is_answered_without_a_body_on_a_connection_that_stays_open(server: LocalServer) -> None:
    """A HEAD answer ends with its header: a body written after it would be read as the next answer."""
    with _raw_tls(server, server.extender_url) as connection:
        connection.sendall(b"HEAD /filter HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = http.client.HTTPResponse(connection, method="HEAD")  # type: ignore[arg-type]
        head.begin()
        assert head.status == 405 and head.read() == b""
        status, payload = _read_response(connection)
        assert status == 200 and json.loads(payload)


def test_an_http_1_0_request_is_answered_then_closed(server: LocalServer) -> None:
    with _raw_tls(server, server.webhook_url) as connection:
        connection.sendall(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
        answer = _read_until_closed(connection)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"\r\nConnection: close" in answer
