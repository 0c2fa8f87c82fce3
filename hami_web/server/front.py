"""The HTTP/1.1 front: reads whole requests on the event loop, with deadlines, then runs the app on a thread.

A worker thread is only taken once a request has fully arrived, so a client that connects and says
nothing, stalls in the TLS handshake, or sends half a header holds a few kilobytes of memory and no
thread, and is dropped when its deadline passes. Parsing is gunicorn's own sans-IO HTTP/1.1 parser (the
one its asyncio worker uses); the app is called on a thread by `hami_web.server.wsgi`, and its whole answer
written in one write. Each connection is an `asyncio.Protocol` with one timer for its deadlines: no task,
stream, future or timeout object per read (`benchmarks/front_cpu.py` measures the CPU per request).

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
import enum
import json
import logging
import math
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Any, cast
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
from hami_web.server.wsgi import WsgiApp, run_app

log = logging.getLogger(__name__)


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

    def feed(self, data: bytes) -> None:
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


def build_environ(request: CallbackRequest, *, listener: Listener, peer: Any, body_length: int
                  ) -> dict[str, Any]:
    """The CGI part of the WSGI environ of one request (`hami_web.server.wsgi` adds the ``wsgi.*`` keys)."""
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


class _Phase(enum.Enum):
    """What a connection waits for, and so which deadline holds."""

    IDLE = "the first byte of a request"
    HEADER = "the rest of the request header"
    BODY = "the rest of the body"
    APP = "the app's answer"  # no deadline: the app bounds its own work
    WRITE = "the client taking our answer"
    DRAIN = "the rest of a body we refused"


class Connection(asyncio.Protocol):
    """Serves one client connection: request after request while the client keeps it alive.

    An `asyncio.Protocol`: the loop hands it the decrypted bytes as they arrive and it feeds them to the parser,
    with no task, stream or future per read. One timer per connection enforces the deadline of the phase it is in:
    moving to a later deadline only moves a number, the timer re-arms itself when it fires early.
    """

    def __init__(self, *, listener: Listener, app: WsgiApp, executor_for: Callable[[str], Executor],
                 deadlines: Deadlines, max_body_bytes: int = MAX_BODY_BYTES, probes: ProbeAnswers | None = None,
                 on_open: Callable[[Connection], bool] = lambda _: True,
                 on_closed: Callable[[Connection], None] = lambda _: None) -> None:
        self._listener = listener
        self._app = app
        self._executor_for = executor_for  # the threads that run the app for a path (`server.worker.ThreadLanes`)
        self._deadlines = deadlines
        self._max_body_bytes = max_body_bytes
        self._probes = probes  # answered on the loop when the listener serves them (None: the app answers)
        self._on_open = on_open  # the worker admits the connection or not (its connection limit, its stop)
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._peer: Any = None
        self._message = _Message(max_body_bytes)
        self._request: CallbackRequest | None = None
        self._declared_too_large = False
        self._too_large = False
        self._draining: _Message | None = None  # the refused message whose body is discarded (None: until EOF)
        self._drained_bytes = 0
        self._phase = _Phase.IDLE
        self._deadline = math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._write_paused = False
        self._after_write: Callable[[], None] | None = None
        self.busy = False  # a request is being read or answered (graceful stop waits only for those)
        self.closing = False  # set on graceful stop: finish the request in flight, then close
        self.closed: asyncio.Future[None] = self._loop.create_future()

    # -- the loop's calls ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a stream transport (uvloop's is not a subclass)
        self._peer = transport.get_extra_info("peername")
        if not self._on_open(self):
            self._transport.close()
            return
        self._expect(_Phase.IDLE, self._deadlines.idle_seconds)

    def data_received(self, data: bytes) -> None:
        try:
            if self._phase is _Phase.DRAIN:
                self._discard(data)
                return
            try:
                self._received(data)
            except ParseError as error:
                self._refuse(error)
        except Exception:
            log.exception("connection from %s failed", self._peer)
            self.abort()

    def eof_received(self) -> bool:
        self.close()  # the client is done sending; a request it left unfinished is not answered
        return False

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        step, self._after_write = self._after_write, None
        if step is not None:
            step()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.busy = False
        self._after_write = None
        if not self.closed.done():
            self.closed.set_result(None)
        self._on_closed(self)

    # -- the worker's calls ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close once what was written is sent (graceful stop closes idle connections so)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now, whatever is unsent."""
        if self._transport is not None:
            self._transport.abort()

    # -- reading a request -----------------------------------------------------------------------------------

    def _received(self, data: bytes) -> None:
        message = self._message
        if self._phase is _Phase.IDLE:
            self.busy = True
            self._expect(_Phase.HEADER, self._deadlines.header_seconds)
        message.feed(data)
        if self._phase is _Phase.HEADER:
            if not message.headers_complete:
                return
            request = self._request = CallbackRequest.from_parser(message.parser, is_ssl=self._listener.tls)
            self._declared_too_large = request.content_length > self._max_body_bytes
            if self._declared_too_large:
                self._dispatch(request)
                return
            if _expects_continue(request) and not message.complete:
                self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._expect(_Phase.BODY, self._deadlines.body_seconds)
        if self._phase is _Phase.BODY and (message.complete or message.over_limit) and self._request is not None:
            self._dispatch(self._request)

    def _dispatch(self, request: CallbackRequest) -> None:
        """The whole request (or as much of an oversized one as the app is given) is here: answer it."""
        assert self._transport is not None
        self._transport.pause_reading()  # the next request waits until this one is answered
        self._phase, self._deadline = _Phase.APP, math.inf
        message = self._message
        too_large = self._too_large = self._declared_too_large or message.over_limit
        body = bytes(message.body)
        # Over the limit, the app is told the length declared or seen so far (werkzeug then refuses it with a
        # 413 before reading: a truncated stream alone would be read as a short body).
        if self._declared_too_large:
            body_length = request.content_length
        else:
            body_length = message.body_bytes_seen if too_large else len(body)
        environ = build_environ(request, listener=self._listener, peer=self._peer, body_length=body_length)
        close = too_large or request.should_close()
        probe = self._probe(environ)
        if probe is not None:
            self._answer(_json_response(*probe, close=close), close=close)  # as the app would answer
            return
        try:
            future = self._executor_for(environ["PATH_INFO"]).submit(run_app, self._app, environ, body, close=close)
        except RuntimeError:  # the pools are shut down: the worker is stopping
            self.abort()
            return
        future.add_done_callback(self._from_thread)

    def _from_thread(self, future: Future[tuple[bytes, bool]]) -> None:
        """On the app's thread: hand the answer to the loop (one callback, no future chained to the loop's)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker has stopped
            self._loop.call_soon_threadsafe(self._answered, future)

    def _answered(self, future: Future[tuple[bytes, bool]]) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # the client left (or the worker dropped it) while the app ran
        if future.cancelled() or future.exception() is not None:
            if not future.cancelled():
                log.error("connection from %s: the app's thread failed", self._peer, exc_info=future.exception())
            self.abort()
            return
        response, close = future.result()
        self._answer(response, close=close)

    def _answer(self, response: bytes, *, close: bool) -> None:
        """Write the answer (status line, headers and body at once), then go on once the client has taken it."""
        self._write(response)
        if self._too_large:
            self._then(partial(self._start_drain, self._message))
        elif close or self.closing:
            self._then(self.close)
        else:
            self._then(self._next_request)

    def _next_request(self) -> None:
        assert self._transport is not None
        if self.closing:
            self.close()
            return
        leftover = self._message.parser.remaining()  # a pipelined request already received
        self._message, self._request = _Message(self._max_body_bytes), None
        self._declared_too_large = self._too_large = False
        self.busy = False
        self._expect(_Phase.IDLE, self._deadlines.keepalive_seconds)
        if leftover:
            self.data_received(leftover)
        if self._phase is not _Phase.APP and not self._transport.is_closing():
            self._transport.resume_reading()

    # -- refusing --------------------------------------------------------------------------------------------

    def _refuse(self, error: ParseError) -> None:
        """A request we cannot parse: say why, then read what the client still sends (until EOF) and close."""
        assert self._transport is not None
        self._transport.pause_reading()
        self._phase, self._deadline = _Phase.APP, math.inf
        self._write(_parse_error_response(error))
        self._then(partial(self._start_drain, None))

    def _start_drain(self, message: _Message | None) -> None:
        """Read and discard what the client is still sending (bounded), so our answer is not lost to a reset.

        With a message, until its body is complete; without (a request we could not parse), until EOF.
        """
        assert self._transport is not None
        if message is not None and message.complete:
            self.close()
            return
        self._draining, self._drained_bytes = message, 0
        self._expect(_Phase.DRAIN, self._deadlines.drain_seconds)
        self._transport.resume_reading()

    def _discard(self, data: bytes) -> None:
        self._drained_bytes += len(data)
        message = self._draining
        if message is not None:
            try:
                message.feed(data)
            except ParseError:
                self.close()
                return
        if self._drained_bytes >= self._deadlines.drain_bytes or (message is not None and message.complete):
            self.close()

    # -- writing and deadlines -------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        assert self._transport is not None
        if not self._transport.is_closing():
            self._transport.write(data)

    def _then(self, step: Callable[[], None]) -> None:
        """Run ``step`` once the client has taken what was written: at once unless the transport's buffer is full,
        else when it drains, within the write deadline."""
        if not self._write_paused:
            step()
            return
        self._after_write = step
        self._expect(_Phase.WRITE, self._deadlines.write_seconds)

    def _expect(self, phase: _Phase, seconds: float) -> None:
        """Enter ``phase``, which must end within ``seconds``."""
        self._phase = phase
        self._deadline = self._loop.time() + seconds
        if self._timer is not None and self._timer.when() <= self._deadline:
            return  # it fires first and re-arms for the later deadline
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(self._deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._deadline == math.inf or self._transport is None or self._transport.is_closing():
            return  # the app is running (no deadline), or the connection is ending anyway
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._on_timer)
            return
        # A client too slow or gone: nothing to answer, nothing to log per connection.
        if self._phase is _Phase.WRITE:
            self.abort()  # it does not read: what we wrote would never be sent
        else:
            self.close()

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
