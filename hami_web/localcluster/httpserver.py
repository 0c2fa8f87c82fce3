"""A small threaded HTTP/1.1 server for the WSGI `ApiServer`, with keep-alive and ``TCP_NODELAY``.

werkzeug's development server closes every connection after one response, so each client request pays a
new TCP connection and a new thread; with eight threads hammering one node that was most of a test's
run time. Here one thread serves one keep-alive connection (as the official client's urllib3 pool expects),
responses without a length are sent chunked (watch streams), and `stop` closes idle connections too.
"""

from __future__ import annotations

import contextlib
import io
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

# Set in the WSGI environ by the app (an injected fault): drop the connection instead of (finishing) the answer.
RESET_CONNECTION = "hami_web.localcluster.reset_connection"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# Seconds an idle keep-alive connection is kept before its thread gives it up.
IDLE_CONNECTION_SECONDS = 120


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes; don't wait for an ACK
    timeout = IDLE_CONNECTION_SECONDS
    server: WsgiHttpServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, open_=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, open_=False)

    def log_message(self, format: str, *args: Any) -> None:  # no access log: test output stays readable
        pass

    def do_request(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.command, "PATH_INFO": unquote(path), "QUERY_STRING": query,
            "SCRIPT_NAME": "", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": str(self.server.server_address[1]),
            "SERVER_PROTOCOL": self.request_version, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length), "wsgi.input": io.BytesIO(body), "wsgi.errors": io.StringIO(),
            "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.multithread": True,
            "wsgi.multiprocess": False, "wsgi.run_once": False, "REMOTE_ADDR": self.client_address[0],
        }
        for key, value in self.headers.items():
            name = key.upper().replace("-", "_")
            if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[f"HTTP_{name}"] = value
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            started[:] = [status, headers]

        result = self.server.app(environ, start_response)
        try:
            if environ.get(RESET_CONNECTION):  # an injected fault: the request was applied, no answer comes
                self._drop_connection()
                return
            self._send(started[0], started[1], result, environ)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    def _drop_connection(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, status: str, headers: list[tuple[str, str]], result: Iterable[bytes],
              environ: dict[str, Any]) -> None:
        code, _, message = status.partition(" ")
        self.send_response(int(code), message)
        chunked = not any(key.lower() == "content-length" for key, _ in headers)
        for key, value in headers:
            self.send_header(key, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for data in result:
            if not data:
                continue
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
            self.wfile.flush()
        if environ.get(RESET_CONNECTION):  # a watch cut mid-stream: no terminating chunk
            self._drop_connection()
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_request


class WsgiHttpServer(ThreadingHTTPServer):
    """Serves ``app`` on one thread per connection; `close_connections` ends idle keep-alives on stop."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: WsgiApp) -> None:
        super().__init__(address, _Handler)
        self.app = app
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away mid-stream (a watch it stopped reading) is routine, not an error to print.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._connections_lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the peer
                connection.shutdown(socket.SHUT_RDWR)
