"""The HTTP/1.1 front: reads whole requests on the event loop, with deadlines, then runs the app on a thread.

A worker thread is only taken once a request has fully arrived, so a client that connects and says
nothing, stalls in the TLS handshake, or sends half a header holds a few kilobytes of memory and no
thread, and is dropped when its deadline passes. Parsing is gunicorn's own sans-IO HTTP/1.1 parser (the
one its asyncio worker uses); calling the WSGI app is the stdlib's `wsgiref.handlers`.

Bodies: at most `MAX_BODY_BYTES` are kept. A larger body (declared by Content-Length, or a chunked body
that grows past the limit) is handed to the app truncated, so the app answers its own "too large"; the
front then reads and discards the rest of the body, up to a bound, before closing, so that the client —
still sending — receives that answer instead of a connection reset.

Probes: ``GET /healthz`` and ``GET /readyz`` on a listener that serves them are answered here, on the event loop,
from what the app publishes (`hami_web.routes.health.probe_answers_for`), so they never queue behind app threads
held by binds stalled on the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import wsgiref.handlers
import wsgiref.headers
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes

from gunicorn.asgi.parser import (
    CallbackRequest,
    LimitRequestHeaders,
    LimitRequestLine,
    ParseError,
    PythonProtocol,
)

from hami_web.routes.health import PROBE_PATHS, ProbeAnswers
from hami_web.server.app import MAX_BODY_BYTES
from hami_web.server.listeners import LISTENER_ENVIRON_KEY, ROUTES_BY_AUDIENCE, Listener

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

READ_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Deadlines:
    """How long each phase of a connection may take before the front gives up on the client."""

    handshake_seconds: float = 5.0  # TLS handshake, from accept
    idle_seconds: float = 5.0  # first byte of the first request on a new connection
    # First byte of the next request on a kept-alive connection: longer than the 90 s after which Go's HTTP clients
    # (kube-apiserver calling the webhook, kube-scheduler calling the extender) close an idle connection themselves.
    # A server that closes first races the request the client may be sending on it, and Go does not send a POST again:
    # kube-apiserver saw EOF, and with failurePolicy Ignore admitted a GPU pod unmutated.
    keepalive_seconds: float = 120.0
    header_seconds: float = 5.0  # the whole request header, from its first byte
    body_seconds: float = 10.0  # the whole body, after the header (kube-apiserver gives the webhook 10 s)
    write_seconds: float = 10.0  # the client takes the response
    drain_seconds: float = 5.0  # reading and discarding the rest of an oversized body
    drain_bytes: int = 64 * 1024 * 1024


class _Message:
    """One request being parsed: gunicorn's parser plus the body it delivered, capped."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        self.headers_complete = False
        self.complete = False
        self.body = bytearray()
        self.body_bytes_seen = 0
        self.parser = PythonProtocol(on_headers_complete=self._on_headers_complete, on_body=self._on_body,
                                     on_message_complete=self._on_message_complete)
        self.started = False

    def feed(self, data: bytes) -> None:
        if data:
            self.started = True
            self.parser.feed(data)

    @property
    def over_limit(self) -> bool:
        """More body arrived than the app will ever be given."""
        return self.body_bytes_seen > self.max_body_bytes

    def _on_headers_complete(self) -> bool:
        self.headers_complete = True
        return False

    def _on_body(self, chunk: bytes) -> None:
        self.body_bytes_seen += len(chunk)
        room = self.max_body_bytes + 1 - len(self.body)  # one byte over the limit tells the app it was exceeded
        if room > 0:
            self.body += chunk[:room]

    def _on_message_complete(self) -> None:
        self.complete = True


class _BufferedWsgiHandler(wsgiref.handlers.SimpleHandler):
    """Runs the app once and keeps the whole HTTP response in memory, to be written by the event loop."""

    os_environ: dict[str, str] = {}
    http_version = "1.1"
    server_software = "hami-web"
    # Set by wsgiref's BaseHandler as it runs the app (setup_environ, start_response); its stubs leave them out.
    environ: dict[str, Any]
    headers: wsgiref.headers.Headers

    def __init__(self, environ: dict[str, Any], body: bytes, *, close: bool) -> None:
        self._response = io.BytesIO()
        super().__init__(io.BytesIO(body), self._response, io.StringIO(), environ, multithread=True,
                         multiprocess=False)
        self.close_connection = close

    def cleanup_headers(self) -> None:
        super().cleanup_headers()
        if "Content-Length" not in self.headers:
            self.close_connection = True  # the end of the body is the end of the connection
        if self.close_connection:
            self.headers["Connection"] = "close"

    def log_exception(self, exc_info: Any) -> None:
        log.error("%s %s: the app failed", self.environ.get("REQUEST_METHOD"), self.environ.get("PATH_INFO"),
                  exc_info=exc_info)

    def response_bytes(self) -> bytes:
        return self._response.getvalue()


def run_app(app: WsgiApp, environ: dict[str, Any], body: bytes, *, close: bool) -> tuple[bytes, bool]:
    """Call the WSGI app (on a worker thread); the response bytes and whether to close the connection."""
    handler = _BufferedWsgiHandler(environ, body, close=close)
    handler.run(app)
    return handler.response_bytes(), handler.close_connection


def build_environ(request: CallbackRequest, *, listener: Listener, peer: Any, body_length: int
                  ) -> dict[str, Any]:
    """The CGI part of the WSGI environ of one request (wsgiref adds the ``wsgi.*`` keys)."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(request.raw_path).decode("latin-1"),
        "QUERY_STRING": request.query or "",
        "SERVER_NAME": listener.host,
        "SERVER_PORT": str(listener.port),
        "SERVER_PROTOCOL": "HTTP/{}.{}".format(*request.version),
        "wsgi.input_terminated": True,  # the input ends where the body ends; werkzeug then enforces its limit
        LISTENER_ENVIRON_KEY: listener.audience,
    }
    if isinstance(peer, tuple) and len(peer) >= 2:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(peer[0]), str(peer[1])
    if listener.tls:
        environ["HTTPS"] = "on"
    for raw_name, raw_value in request.headers_bytes:
        name = raw_name.decode("latin-1")
        if "_" in name:
            continue  # X_Forwarded_For would collide with X-Forwarded-For in the environ; drop, as gunicorn does
        key = name.upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
            continue  # framing is the front's business: the app gets the length of what it is given
        if key != "CONTENT_TYPE":
            key = "HTTP_" + key
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    environ["CONTENT_LENGTH"] = str(body_length)
    return environ


def _expects_continue(request: CallbackRequest) -> bool:
    """``Expect: 100-continue`` from an HTTP/1.1 client (RFC 9110 §10.1.1: ignored from HTTP/1.0)."""
    return tuple(request.version) >= (1, 1) and any(
        name == b"expect" and value.strip().lower() == b"100-continue" for name, value in request.headers_bytes)


def _error_response(status: int, reason: str, message: str) -> bytes:
    return _json_response(status, {"error": reason, "message": message}, close=True)


def _json_response(status: int, body: dict[str, str], *, close: bool) -> bytes:
    """A JSON answer written by the front itself, with its length (and ``Connection: close`` if closing)."""
    payload = json.dumps(body).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n")
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode("latin-1") + payload


def _parse_error_response(error: ParseError) -> bytes:
    if isinstance(error, LimitRequestLine):
        return _error_response(414, "URI Too Long", str(error))
    if isinstance(error, LimitRequestHeaders):
        return _error_response(431, "Request Header Fields Too Large", str(error))
    return _error_response(400, "Bad Request", f"malformed HTTP request: {error}")


class Connection:
    """Serves one client connection: request after request while the client keeps it alive."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, listener: Listener,
                 app: WsgiApp, executor_for: Callable[[str], Executor], deadlines: Deadlines,
                 max_body_bytes: int = MAX_BODY_BYTES, probes: ProbeAnswers | None = None) -> None:
        self._reader = reader
        self._writer = writer
        self._listener = listener
        self._app = app
        self._executor_for = executor_for  # the threads that run the app for a path (`server.worker.ThreadLanes`)
        self._deadlines = deadlines
        self._max_body_bytes = max_body_bytes
        self._probes = probes  # answered on the loop when the listener serves them (None: the app answers)
        self._peer = writer.get_extra_info("peername")
        self.busy = False  # a request is being read or answered (graceful stop waits only for those)
        self.closing = False  # set on graceful stop: finish the request in flight, then close

    async def serve(self) -> None:
        """Answer requests until the client closes, a deadline passes, or the answer closes the connection."""
        try:
            await self._serve_requests()
        except ParseError as error:
            with contextlib.suppress(TimeoutError, OSError):
                await self._write(_parse_error_response(error))
                await self._drain(None)  # the client may still be sending what we refused
        except (TimeoutError, OSError):
            pass  # a client too slow or gone: nothing to answer, nothing to log per connection
        except Exception:
            log.exception("connection from %s failed", self._peer)
        finally:
            self._writer.close()

    async def _serve_requests(self) -> None:
        leftover = b""
        wait = self._deadlines.idle_seconds
        while True:
            message = _Message(self._max_body_bytes)
            message.feed(leftover)
            if not message.started:
                first = await self._read(wait)
                if not first:
                    return
                message.feed(first)
            self.busy = True
            keep_open = await self._serve_one(message)
            self.busy = False
            if not keep_open or self.closing:
                return
            leftover = message.parser.remaining()
            wait = self._deadlines.keepalive_seconds

    async def _serve_one(self, message: _Message) -> bool:
        async with asyncio.timeout(self._deadlines.header_seconds):
            while not message.headers_complete:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    return False
                message.feed(data)
        request = CallbackRequest.from_parser(message.parser, is_ssl=self._listener.tls)
        declared_too_large = request.content_length > self._max_body_bytes
        if _expects_continue(request) and not declared_too_large and not message.complete:
            self._writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if not declared_too_large:
            async with asyncio.timeout(self._deadlines.body_seconds):
                while not message.complete and not message.over_limit:
                    data = await self._reader.read(READ_CHUNK_BYTES)
                    if not data:
                        return False
                    message.feed(data)
        too_large = declared_too_large or message.over_limit
        body = bytes(message.body)
        # Over the limit, the app is told the length declared or seen so far (werkzeug then refuses it with a
        # 413 before reading: a truncated stream alone would be read as a short body).
        if declared_too_large:
            body_length = request.content_length
        else:
            body_length = message.body_bytes_seen if too_large else len(body)
        environ = build_environ(request, listener=self._listener, peer=self._peer, body_length=body_length)
        probe = self._probe(environ)
        if probe is not None:
            close = too_large or request.should_close()
            await self._write(_json_response(*probe, close=close))  # as the app would answer
            return not close
        loop = asyncio.get_running_loop()
        response, close = await loop.run_in_executor(
            self._executor_for(environ["PATH_INFO"]),
            lambda: run_app(self._app, environ, body, close=too_large or request.should_close()))
        await self._write(response)
        if too_large:
            await self._drain(message)
            return False
        return not close

    def _probe(self, environ: dict[str, Any]) -> tuple[int, dict[str, str]] | None:
        """The answer to a probe this listener serves, given here on the loop (None: not a probe, the app answers)."""
        path = environ["PATH_INFO"]
        if self._probes is None or environ["REQUEST_METHOD"] != "GET" or path not in PROBE_PATHS \
                or path not in ROUTES_BY_AUDIENCE.get(self._listener.audience, frozenset()):
            return None
        try:
            return self._probes(path)
        except Exception:  # a bug in what the app publishes: the app's own route answers (and logs) instead
            log.exception("answering %s on the event loop failed", path)
            return None

    async def _read(self, timeout_seconds: float) -> bytes:
        async with asyncio.timeout(timeout_seconds):
            return await self._reader.read(READ_CHUNK_BYTES)

    async def _write(self, data: bytes) -> None:
        self._writer.write(data)
        async with asyncio.timeout(self._deadlines.write_seconds):
            await self._writer.drain()

    async def _drain(self, message: _Message | None) -> None:
        """Read and discard what the client is still sending (bounded), so our answer is not lost to a reset.

        With a message, until its body is complete; without (a request we could not parse), until EOF.
        """
        discarded = 0
        try:
            async with asyncio.timeout(self._deadlines.drain_seconds):
                while discarded < self._deadlines.drain_bytes and not (message is not None and message.complete):
                    data = await self._reader.read(READ_CHUNK_BYTES)
                    if not data:
                        return
                    discarded += len(data)
                    if message is not None:
                        message.feed(data)
        except (TimeoutError, ParseError, ConnectionError, OSError):
            return
