"""Serving: gunicorn over TLS, certificate hot reload, and the rules for plain HTTP.

Covers: a real gunicorn (one gthread worker, in a subprocess) answering /healthz over HTTPS; a certificate
replaced on disk served to the next connection without a restart (new serial); plain HTTP only with
``--insecure-http`` (and a TLS port refusing it); start-up errors naming ``--cert-file``/``--key-file``;
the gunicorn options (one worker, threads, keep-alive); `ReloadingTLSContext` on its own — the SNI swap
for servers that keep one context, the re-check interval, and a broken renewal keeping the old certificate;
``hami-web serve`` end to end against the in-process API server (runtime started in the worker: /readyz 200,
clean exit on SIGTERM); with ``--log-format json`` every line it writes, gunicorn's included, is one JSON object
(a decision carries its pod, control characters in it escaped), and HAMi's metrics are on the metrics listener.
"""

from __future__ import annotations

import http.client
import importlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pytest
from cryptography import x509

from hami_web.certs import KeyPair, ServingIdentity, make_local_certificates
from hami_web.certs.pki import create_serving_certificate
from hami_web.certs.stores import write_file_atomically
from hami_web.cli import main
from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.local import free_ports, run_local_server
from hami_web.server.logs import GunicornLogger
from hami_web.server.serving import gunicorn_options, load_tls
from hami_web.server.tlsreload import ReloadingTLSContext
from hami_web.server.worker import FrontWorker
from hami_web.settings import Settings, SettingsError

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_IDENTITY = ServingIdentity(common_name="localhost", dns_names=("localhost",), ip_addresses=("127.0.0.1",))

SERVER_SCRIPT = """
import sys
from dataclasses import replace
from hami_web.server.app import create_app
from hami_web.server.serving import run_gunicorn
from hami_web.settings import Settings
from hami_web.server.tlsreload import ReloadingTLSContext
from hami_web.server.worker import FrontWorker

cert_file, key_file, bind, extender_bind, metrics_bind, insecure = sys.argv[1:7]
settings = Settings.of(bind=bind, extender_bind=extender_bind, metrics_bind_address=metrics_bind,
                   threads=2, insecure_http=insecure == "1", cert_file=cert_file, key_file=key_file, ui_bind="")
tls = None if settings.serving.insecure_http else ReloadingTLSContext(cert_file, key_file, check_interval_seconds=0.2)
sys.exit(run_gunicorn(create_app(settings), settings.serving, tls=tls))
"""


def _wait_for_port(port: int, process: subprocess.Popen, timeout_seconds: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}: {process.stderr.read().decode()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"server did not listen on {port} within {timeout_seconds} s")


class Ports(NamedTuple):
    """The three listeners of a started server."""

    webhook: int
    extender: int
    metrics: int


@pytest.fixture
def start_server() -> Iterator[Callable[..., Ports]]:
    """Start ``run_gunicorn`` in a subprocess; returns its ports. Stopped with SIGTERM, as kubelet does."""
    processes: list[subprocess.Popen] = []

    def start(cert_file: str = "", key_file: str = "", *, insecure: bool = False) -> Ports:
        ports = Ports(*free_ports(3))
        environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER_SCRIPT, cert_file, key_file, *(f"127.0.0.1:{port}" for port in ports),
             "1" if insecure else "0"],
            env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        processes.append(process)
        for port in ports:
            _wait_for_port(port, process)
        return ports

    yield start
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def _get_over_https(port: int, ca_path: Path, path: str = "/healthz") -> tuple[int, bytes, int]:
    """(status, body, serial of the certificate the server presented) on a brand-new connection."""
    context = ssl.create_default_context(cafile=str(ca_path))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        der = connection.sock.getpeercert(binary_form=True)
        return response.status, response.read(), x509.load_der_x509_certificate(der).serial_number
    finally:
        connection.close()


def _renew_in_place(directory: Path) -> int:
    """Replace tls.crt/tls.key with a new certificate from the same CA, as the cert job would; its serial."""
    ca = KeyPair((directory / "ca.crt").read_bytes(), (directory / "ca.key").read_bytes())
    serving = create_serving_certificate(ca, LOCAL_IDENTITY, now=datetime.now(UTC), days=2)
    write_file_atomically(directory / "tls.key", serving.key_pem, mode=0o600)
    write_file_atomically(directory / "tls.crt", serving.cert_pem, mode=0o644)
    return serving.certificate().serial_number


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


# -- gunicorn ---------------------------------------------------------------------------------------------


def test_healthz_over_https_then_a_renewed_certificate_without_restart(tmp_path: Path,
                                                                        start_server: Callable[..., Ports]) -> None:
    ca_path, cert_path, key_path = make_local_certificates(tmp_path)
    port = start_server(str(cert_path), str(key_path)).webhook

    status, body, serial = _get_over_https(port, ca_path)
    assert (status, serial) == (200, _serial(cert_path))
    assert b'"ok"' in body

    new_serial = _renew_in_place(tmp_path)
    deadline = time.monotonic() + 10
    while serial != new_serial and time.monotonic() < deadline:
        time.sleep(0.1)
        status, _, serial = _get_over_https(port, ca_path)
        assert status == 200
    assert serial == new_serial


def test_plain_http_is_served_only_with_insecure_http(tmp_path: Path, start_server: Callable[..., Ports]) -> None:
    _, cert_path, key_path = make_local_certificates(tmp_path)
    plain_port = start_server(insecure=True).webhook
    tls_port = start_server(str(cert_path), str(key_path)).webhook

    connection = http.client.HTTPConnection("127.0.0.1", plain_port, timeout=5)
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    connection.close()

    refused = http.client.HTTPConnection("127.0.0.1", tls_port, timeout=5)
    with pytest.raises((http.client.HTTPException, OSError)):
        refused.request("GET", "/healthz")
        refused.getresponse()
    refused.close()


# -- start-up errors ----------------------------------------------------------------------------------------


def test_missing_certificate_file_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, key_path = make_local_certificates(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--cert-file", str(tmp_path / "missing.crt"), "--key-file", str(key_path)])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "--cert-file" in error and "missing.crt" in error


def test_unreadable_key_file_names_the_flag(tmp_path: Path) -> None:
    _, cert_path, _ = make_local_certificates(tmp_path)
    settings = Settings.of(cert_file=str(cert_path), key_file=str(tmp_path / "absent.key"))
    with pytest.raises(SettingsError, match="--key-file"):
        load_tls(settings.serving)


def test_certificate_that_does_not_load_names_both_flags(tmp_path: Path) -> None:
    _, cert_path, _ = make_local_certificates(tmp_path)
    (tmp_path / "other.key").write_bytes((tmp_path / "ca.key").read_bytes())
    settings = Settings.of(cert_file=str(cert_path), key_file=str(tmp_path / "other.key"))
    with pytest.raises(SettingsError, match="--cert-file/--key-file"):
        load_tls(settings.serving)


def test_no_certificate_and_no_insecure_flag_is_refused() -> None:
    with pytest.raises(SettingsError, match="--insecure-http"):
        load_tls(Settings().serving)


def test_insecure_http_needs_no_certificate() -> None:
    assert load_tls(Settings.of(insecure_http=True).serving) is None


# -- options ----------------------------------------------------------------------------------------------


def test_one_front_worker_with_threads_keepalive_and_three_listeners(tmp_path: Path) -> None:
    _, cert_path, key_path = make_local_certificates(tmp_path)
    settings = Settings.of(cert_file=str(cert_path), key_file=str(key_path), threads=12,
                       bind="[::1]:9443")
    tls = load_tls(settings.serving)

    options = gunicorn_options(settings.serving, tls=tls)

    assert (options["workers"], options["threads"]) == (1, 12)
    assert issubclass(options["worker_class"], FrontWorker)
    assert options["worker_class"].tls is tls
    assert options["keepalive"] > 0 and options["max_requests"] == 0
    assert options["bind"] == ["[::1]:9443", "127.0.0.1:8444", "0.0.0.0:9395", "127.0.0.1:9396"]
    assert "certfile" not in options and "ssl_context" not in options  # TLS is the worker's, per listener
    assert options["logger_class"] is GunicornLogger and options["accesslog"] is None


def test_gunicorn_config_file_has_the_serve_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_INSECURE_HTTP", "true")
    monkeypatch.setenv("HAMI_THREADS", "3")
    monkeypatch.setenv("HAMI_EXTENDER_BIND", "127.0.0.1:9444")
    import hami_web.server.gunicorn_conf as conf

    conf = importlib.reload(conf)
    assert (conf.workers, conf.threads) == (1, 3)
    assert issubclass(conf.worker_class, FrontWorker)
    assert conf.bind == ["0.0.0.0:8443", "127.0.0.1:9444", "0.0.0.0:9395", "127.0.0.1:9396"]
    assert conf.wsgi_app == "hami_web.server.gunicorn_conf:application"


# -- the reloading context on its own ------------------------------------------------------------------------


class _FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _serve_handshakes(context: ssl.SSLContext) -> tuple[int, threading.Thread]:
    """A TLS server that wraps every connection with this one context object (never asks for a new one)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept_loop() -> None:
        with listener:
            for _ in range(2):
                connection, _ = listener.accept()
                try:
                    with context.wrap_socket(connection, server_side=True) as tls:
                        tls.recv(1)
                except (ssl.SSLError, OSError):
                    pass

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def _peer_serial(port: int, ca_path: Path) -> int:
    context = ssl.create_default_context(cafile=str(ca_path))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_a_server_holding_one_context_still_gets_the_renewed_certificate(tmp_path: Path) -> None:
    ca_path, cert_path, key_path = make_local_certificates(tmp_path)
    clock = _FakeClock()
    reloading = ReloadingTLSContext(str(cert_path), str(key_path), check_interval_seconds=5, clock=clock)
    port, thread = _serve_handshakes(reloading.current())

    assert _peer_serial(port, ca_path) == _serial(cert_path)
    new_serial = _renew_in_place(tmp_path)
    clock.now += 6
    assert _peer_serial(port, ca_path) == new_serial
    thread.join(timeout=5)


def test_files_are_looked_at_no_more_than_once_per_interval(tmp_path: Path) -> None:
    _, cert_path, key_path = make_local_certificates(tmp_path)
    clock = _FakeClock()
    reloading = ReloadingTLSContext(str(cert_path), str(key_path), check_interval_seconds=5, clock=clock)
    before = reloading.current()

    _renew_in_place(tmp_path)
    clock.now += 4
    assert reloading.current() is before
    clock.now += 2
    assert reloading.current() is not before


def test_unchanged_files_keep_the_same_context(tmp_path: Path) -> None:
    _, cert_path, key_path = make_local_certificates(tmp_path)
    clock = _FakeClock()
    reloading = ReloadingTLSContext(str(cert_path), str(key_path), check_interval_seconds=1, clock=clock)
    before = reloading.current()
    clock.now += 10
    assert reloading.current() is before


def test_a_broken_renewal_keeps_serving_the_previous_certificate(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    _, cert_path, key_path = make_local_certificates(tmp_path)
    clock = _FakeClock()
    reloading = ReloadingTLSContext(str(cert_path), str(key_path), check_interval_seconds=1, clock=clock)
    before = reloading.current()

    write_file_atomically(cert_path, b"half a certificate", mode=0o644)
    clock.now += 2
    assert reloading.current() is before
    clock.now += 2
    assert reloading.current() is before
    warnings = [r for r in caplog.records if "previous" in r.getMessage()]
    assert len(warnings) == 1  # logged once per broken version, not at every look

    _renew_in_place(tmp_path)
    clock.now += 2
    assert reloading.current() is not before  # the next good renewal is picked up


# -- the production command end to end --------------------------------------------------------------------------


def test_serve_starts_the_runtime_in_the_worker_and_becomes_ready(tmp_path: Path, apiserver: LocalCluster) -> None:
    with run_local_server(apiserver.url, tmp_path, threads=2) as server:  # waits for /readyz 200 (cache synced)
        port = int(server.webhook_url.rsplit(":", 1)[1])
        status, _, _ = _get_over_https(port, server.ca_path, "/readyz")
        assert status == 200
    # Stopped with SIGTERM, as kubelet does: graceful stop, runtime stopped in the worker, exit status 0.
    assert server.process.returncode == 0


def _post_over_https(url: str, ca_path: Path, path: str, body: object) -> int:
    parts = url.removeprefix("https://").rsplit(":", 1)
    connection = http.client.HTTPSConnection(parts[0], int(parts[1]), timeout=10,
                                             context=ssl.create_default_context(cafile=str(ca_path)))
    try:
        connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        return connection.getresponse().status
    finally:
        connection.close()


def test_serve_with_json_logs_writes_only_json_lines_and_serves_hami_metrics(tmp_path: Path,
                                                                              apiserver: LocalCluster) -> None:
    devices = [Device(uuid="node1-gpu0", index=0, count=10, memory_mib=8000, cores=100, type="NVIDIA-NVIDIA A40",
                      numa=0)]
    apiserver.load([{"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": "node1", "annotations": {
                         "hami.io/node-nvidia-register": encode_register_json(devices),
                         "hami.io/node-handshake": "Requesting_2099-01-01 00:00:00"}},
                     "status": {"allocatable": {"nvidia.com/gpu": "10"}}}])
    pod_name = "evil\nINFO forged\u2028"
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                          "object": {"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"name": pod_name, "namespace": "default"},
                                     "spec": {"containers": [{"name": "c"}]}}}}
    with run_local_server(apiserver.url, tmp_path, threads=2, extra_args=("--log-format", "json")) as server:
        assert _post_over_https(server.webhook_url, server.ca_path, "/webhook", review) == 200
        connection = http.client.HTTPConnection(*server.metrics_url.removeprefix("http://").rsplit(":", 1),
                                                timeout=10)
        try:
            connection.request("GET", "/metrics")
            metrics = connection.getresponse().read().decode()
        finally:
            connection.close()
    assert server.process.returncode == 0
    assert 'hami_gpu_memory_limit_bytes{device_index="0",device_type="NVIDIA-NVIDIA A40",device_uuid="node1-gpu0",' \
           'node="node1",zone="vGPU"} 8.388608e+09' in metrics
    assert "hami_build_info{" in metrics
    raw = server.log_path.read_text()
    assert "\u2028" not in raw
    lines = [json.loads(line) for line in raw.splitlines()]  # every line is JSON
    gunicorn_messages = [line["message"] for line in lines if line["logger"] == "gunicorn.error"]
    assert any(message.startswith("Booting worker") for message in gunicorn_messages)
    assert "Shutting down: Master" in gunicorn_messages
    decisions = [line for line in lines if line["logger"] == "hami_web.routes.webhook"]
    assert [line["pod"] for line in decisions] == [f"default/{pod_name}"]
