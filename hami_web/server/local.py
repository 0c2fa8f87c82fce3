"""``hami-web serve`` as a child process on this machine, against a given API server, on free local ports.

The demo, the end-to-end tests and the benchmarks all need the production server exactly as it runs in a
pod (gunicorn, the front worker, TLS, its listeners); this starts it with a throwaway certificate and a
kubeconfig, waits until ``/readyz`` answers 200, and stops it with SIGTERM as kubelet would.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hami_web.certs.command import make_local_certificates

READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class LocalServer:
    """A running server: its process, the listeners' base URLs, and the CA that signed its certificate."""

    process: subprocess.Popen[bytes]
    webhook_url: str
    extender_url: str
    metrics_url: str
    ca_path: Path
    log_path: Path
    ui_url: str = ""

    @property
    def dashboard_url(self) -> str:
        """The dashboard's overview page."""
        return f"{self.ui_url}/ui/"

    def log_tail(self, characters: int = 3000) -> str:
        """The end of the server's log (for error messages)."""
        return self.log_path.read_text(errors="replace")[-characters:]


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nobody listens on right now (127.0.0.1): the probes stay bound until all are
    chosen, so the kernel cannot hand one port out twice (four probes one after another once drew the same port for
    two listeners)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def write_kubeconfig(directory: Path, server: str) -> Path:
    """A kubeconfig for an API server with no authentication (the in-process one)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": server}}],
        "users": [{"name": "local", "user": {"token": "unused"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}],
    }
    path = directory / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def _ready(url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            status: int = response.status
            return status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def run_local_server(api_url: str, directory: Path, *, threads: int = 4, extra_args: Sequence[str] = ()
                     ) -> Iterator[LocalServer]:
    """Start ``hami-web serve`` talking to ``api_url``; files (certificates, kubeconfig, log) go to ``directory``.

    Raises RuntimeError with the end of the server's log when it exits or is not ready in time.
    """
    certificates = make_local_certificates(directory / "certs")
    kubeconfig = write_kubeconfig(directory, api_url)
    webhook, extender, metrics, ui = free_ports(4)
    log_path = directory / "server.log"
    command = [sys.executable, "-m", "hami_web", "serve", "--kubeconfig", str(kubeconfig),
               "--cert-file", str(certificates.cert_path), "--key-file", str(certificates.key_path),
               "--bind", f"127.0.0.1:{webhook}", "--extender-bind", f"127.0.0.1:{extender}",
               "--metrics-bind-address", f"127.0.0.1:{metrics}", "--ui-bind", f"127.0.0.1:{ui}",
               "--threads", str(threads), *extra_args]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    server = LocalServer(process=process, webhook_url=f"https://127.0.0.1:{webhook}",
                         extender_url=f"https://127.0.0.1:{extender}", metrics_url=f"http://127.0.0.1:{metrics}",
                         ca_path=certificates.ca_path, log_path=log_path, ui_url=f"http://127.0.0.1:{ui}")
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: LocalServer) -> None:
    context = ssl.create_default_context(cafile=str(server.ca_path))
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log_tail()}")
        if _ready(server.webhook_url + "/readyz", context):
            return
        time.sleep(0.2)
    raise RuntimeError(f"server not ready after {READY_TIMEOUT_SECONDS:.0f}s:\n{server.log_tail()}")
