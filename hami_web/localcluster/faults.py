"""How the in-process API server misbehaves on purpose: answers dripped byte by byte, watches cut mid-stream or
silent for a while (the injected faults of `hami_web.localcluster.server`).

Each is a wrapper around a normal answer, so the server's request handling stays the same with or without them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from werkzeug.wrappers import Response

from hami_web.localcluster.httpserver import RESET_CONNECTION


def dripping(response: Response, seconds: float, stopping: threading.Event) -> Response:
    """The same answer, its body sent one byte every ``seconds`` (chunked: the length is not announced)."""
    body = response.get_data()

    def drip() -> Iterator[bytes]:
        for position in range(len(body)):
            yield body[position:position + 1]
            if stopping.wait(seconds):
                return

    return Response(drip(), status=response.status_code, content_type=response.content_type,
                    direct_passthrough=True)


def cut_after(stream: Any, events: int, environ: dict[str, Any]) -> Iterator[bytes]:
    """A watch stream that stops after ``events`` event lines and has the connection dropped, unterminated."""
    sent = 0
    for data in stream:
        if sent >= events:
            break
        lines = data.splitlines(keepends=True)
        kept = lines[:events - sent]
        sent += len(kept)
        yield b"".join(kept)
    environ[RESET_CONNECTION] = True


def silent_for(stream: Any, seconds: float, stopping: threading.Event) -> Iterator[bytes]:
    """A watch stream whose headers go out at once, then nothing for ``seconds`` (0: until the server stops).

    The stream underneath is not read meanwhile, so nothing is lost: what happened during the silence follows it,
    in order, as a proxy that stalled and then caught up would deliver it (and as a re-opened watch replays it).
    """
    iterator = iter(stream)
    yield next(iterator, b"")
    stopping.wait(seconds if seconds > 0 else None)
    if not stopping.is_set():
        yield from iterator
