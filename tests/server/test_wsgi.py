"""Calling the WSGI app for the front: the response bytes it writes in one write, and when it closes.

Covers `hami_web.server.wsgi`: the status line and the app's headers as given, ``Date`` and ``Server`` added
unless the app set them, the body's ``Content-Length`` added when the app gave none (never for HEAD, 1xx, 204 or
304, which have no body; a HEAD keeps the app's own length and sends no body), ``Connection: close`` exactly when
closing, ``wsgi.*`` keys of PEP 3333 in the environ, a body the app writes through ``write`` or returns as an
iterable (closed afterwards), and an app that raises, or answers a header or status the wire cannot carry, answered
500 with the connection closed. The front over real
sockets is tests/server/test_front.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from hami_web.server.wsgi import encode_response, run_app


def _split(response: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, dict(line.split(": ", 1) for line in lines), body


@pytest.mark.parametrize(("status", "headers", "head", "close", "expected_length", "expected_body"), [
    ("200 OK", [("Content-Type", "application/json")], False, False, "2", b"{}"),
    ("200 OK", [("Content-Length", "2")], False, False, "2", b"{}"),
    ("200 OK", [("Content-Length", "2")], True, False, "2", b""),
    ("200 OK", [], True, False, None, b""),
    ("204 No Content", [], False, False, None, b""),
    ("304 Not Modified", [], False, True, None, b""),
    ("413 Request Entity Too Large", [], False, True, "2", b"{}"),
], ids=["length-added", "app-length-kept", "head-keeps-app-length", "head-without-length", "204", "304-closing",
        "closing"])
def test_the_response_is_framed_by_its_length_or_has_no_body(status: str, headers: list[tuple[str, str]], head: bool,
                                                            close: bool, expected_length: str | None,
                                                            expected_body: bytes) -> None:
    response, closes = encode_response(status, headers, b"{}", head=head, close=close)
    line, written, body = _split(response)
    assert line == f"HTTP/1.1 {status}" and closes is close
    assert written.get("Content-Length") == expected_length and body == expected_body
    assert written.get("Connection") == ("close" if close else None)
    assert written["Server"] == "hami-web" and written["Date"].endswith(" GMT")


def test_date_and_server_of_the_app_are_kept() -> None:
    response, _ = encode_response("200 OK", [("Date", "x"), ("Server", "y")], b"", head=False, close=False)
    _, written, _ = _split(response)
    assert (written["Date"], written["Server"]) == ("x", "y")


class _Result:
    """A response iterable that notes it was closed (PEP 3333: the server calls ``close``)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.chunks)

    def close(self) -> None:
        self.closed = True


def test_the_app_gets_the_body_and_the_wsgi_keys_and_its_writes_and_chunks_are_sent_in_order() -> None:
    seen: dict[str, Any] = {}
    result = _Result([b"b", b"c"])

    def app(environ: dict[str, Any], start_response: Callable[..., Callable[[bytes], None]]) -> Iterable[bytes]:
        seen.update(environ, body=environ["wsgi.input"].read())
        start_response("200 OK", [("Content-Type", "text/plain")])(b"a")
        return result

    response, closes = run_app(app, {"REQUEST_METHOD": "POST", "PATH_INFO": "/x", "HTTPS": "on"}, b"payload",
                               close=False)
    _, written, body = _split(response)
    assert (body, written["Content-Length"], closes, result.closed) == (b"abc", "3", False, True)
    assert seen["body"] == b"payload" and seen["wsgi.url_scheme"] == "https" and seen["wsgi.version"] == (1, 0)
    assert seen["wsgi.multithread"] is True and seen["wsgi.multiprocess"] is False and seen["wsgi.run_once"] is False
    assert seen["SERVER_SOFTWARE"] == "hami-web" and isinstance(seen["wsgi.input"], io.BytesIO)


def test_an_app_that_raises_is_answered_500_and_the_connection_closed(caplog: pytest.LogCaptureFixture) -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        raise ValueError("boom")

    response, closes = run_app(app, {"REQUEST_METHOD": "GET", "PATH_INFO": "/x"}, b"", close=False)
    line, written, body = _split(response)
    assert line == "HTTP/1.1 500 Internal Server Error" and closes is True and written["Connection"] == "close"
    assert int(written["Content-Length"]) == len(body) and b"server log" in body
    assert "GET /x: the app failed" in caplog.text and "boom" in caplog.text


@pytest.mark.parametrize(("status", "headers"), [
    ("200 OK", [("X-Owner", "gpu-team-\u5f20")]),  # not latin-1: http.client would refuse it too
    ("OK", [("Content-Type", "text/plain")]),  # no status code
])
def test_a_response_the_wire_cannot_carry_is_answered_500(status: str, headers: list[tuple[str, str]],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response(status, headers)
        return [b"hello"]

    response, closes = run_app(app, {"REQUEST_METHOD": "GET", "PATH_INFO": "/y"}, b"", close=False)
    line, written, _ = _split(response)
    assert line == "HTTP/1.1 500 Internal Server Error" and closes is True and written["Connection"] == "close"
    assert "GET /y: the app failed" in caplog.text
