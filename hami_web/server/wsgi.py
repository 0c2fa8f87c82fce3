"""Calling the WSGI app for one whole request, on a worker thread, and keeping its whole response in memory.

The front (`hami_web.server.front`) reads a request completely before a thread is taken and writes the answer
from the event loop, so the app's response is buffered, never streamed: the status line, the headers and the
body become one ``bytes`` the loop writes at once. Knowing the whole body, the front always sends its
``Content-Length`` (the connection then stays open for the next request) except where HTTP has no body: a
HEAD (whose length is the app's to state), 1xx, 204 and 304. The environ is the CGI part built from the
request plus the ``wsgi.*`` keys of PEP 3333; the app is called directly (stdlib's ``wsgiref.handlers`` did the
same job with several method calls and two extra buffers per request, measured by ``benchmarks/front_cpu.py``).
"""

from __future__ import annotations

import io
import logging
import sys
import time
import wsgiref.util
from collections.abc import Callable, Iterable
from email.utils import formatdate
from typing import Any

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

SERVER_SOFTWARE = "hami-web"
# Statuses that never carry a body (RFC 9110 §6.4.1): no Content-Length is made up for them.
_BODILESS_STATUSES = frozenset({204, 304})
_SERVER_ERROR_BODY = b'{"error": "Internal Server Error", "message": "the request failed; see the server log"}'
_SERVER_ERROR = (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_SERVER_ERROR_BODY), _SERVER_ERROR_BODY))


class _DateHeader:
    """The ``Date`` header's value, formatted once per second (every response carries one)."""

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._value, self._second = formatdate(now, usegmt=True), now
        return self._value


_date_header = _DateHeader()


class _Response:
    """What the app gave ``start_response`` and ``write``."""

    __slots__ = ("chunks", "headers", "status")

    def __init__(self) -> None:
        self.status = ""
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
                       ) -> Callable[[bytes], None]:
        # Nothing is sent before the app returns, so a second call (with exc_info, from an error handler) simply
        # replaces the first (PEP 3333 lets a server do so while the headers are unsent).
        self.status, self.headers = status, list(headers)
        return self.chunks.append


def complete_environ(environ: dict[str, Any], body: bytes) -> dict[str, Any]:
    """``environ`` with the ``wsgi.*`` keys of PEP 3333 for a request whose whole body is ``body``."""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["wsgi.errors"] = sys.stderr
    environ["wsgi.version"] = (1, 0)
    environ["wsgi.url_scheme"] = "https" if environ.get("HTTPS") == "on" else "http"
    environ["wsgi.multithread"] = True
    environ["wsgi.multiprocess"] = False
    environ["wsgi.run_once"] = False
    environ["wsgi.file_wrapper"] = wsgiref.util.FileWrapper
    environ["SERVER_SOFTWARE"] = SERVER_SOFTWARE
    return environ


def run_app(app: WsgiApp, environ: dict[str, Any], body: bytes, *, close: bool) -> tuple[bytes, bool]:
    """Call the WSGI app (on a worker thread); the whole response as bytes, and whether to close the connection.

    An app that raises, or answers a status or header the wire cannot carry, is logged and answered 500, and the
    connection closed (the same as a crash half-way).
    """
    response = _Response()
    try:
        result = app(complete_environ(environ, body), response.start_response)
        try:
            response.chunks.extend(result)
        finally:
            closer = getattr(result, "close", None)
            if closer is not None:
                closer()
        if not response.status:
            raise RuntimeError("the app returned without calling start_response")
        # Encoded inside the try: a status or header the wire cannot carry (not latin-1, no code) is the app's failure.
        return encode_response(response.status, response.headers, b"".join(response.chunks),
                               head=environ.get("REQUEST_METHOD") == "HEAD", close=close)
    except Exception:
        log.error("%s %s: the app failed", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), exc_info=True)
        return _SERVER_ERROR, True


def encode_response(status: str, headers: list[tuple[str, str]], body: bytes, *, head: bool, close: bool
                    ) -> tuple[bytes, bool]:
    """Status line, headers and body as written on the wire, and whether the connection closes after it.

    The front adds ``Date`` and ``Server`` when the app did not, the body's ``Content-Length`` when the app did
    not and the response has a body, and ``Connection: close`` when closing; without a length it cannot state
    (a HEAD the app gave none), it keeps the connection open: a HEAD answer ends with its header.
    """
    names = {name.lower() for name, _ in headers}
    lines = [f"HTTP/1.1 {status}\r\n"]
    if "date" not in names:
        lines.append(f"Date: {_date_header()}\r\n")
    if "server" not in names:
        lines.append(f"Server: {SERVER_SOFTWARE}\r\n")
    lines.extend(f"{name}: {value}\r\n" for name, value in headers)
    code = int(status[:3])
    bodiless = head or code < 200 or code in _BODILESS_STATUSES
    if "content-length" not in names and not bodiless:
        lines.append(f"Content-Length: {len(body)}\r\n")
    if close:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1") + (b"" if bodiless else body), close
