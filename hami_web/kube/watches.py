"""Watch streams: events as plain dicts, a bound on silence, and the client's failures as `KubeError`.

A watch is sent through the client's request layer (auth, TLS, connection pool) like the lists, not through the
generated API classes and the client's `Watch` helper: building those classes costs about 0.6 s of CPU, which a
streaming list would put on the path to the first sync, and the helper splits a chunk into lines by copying the
rest of its buffer once per line (quadratic in the chunk, and one chunk may carry thousands of initial events).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from hami_web.kube.errors import WatchSilentError, error_from, is_transport_error, timed_out_reading
from hami_web.kube.transport import JsonObject, Transport

# The annotation of the bookmark that ends a streaming list's initial events (its resourceVersion is the list's).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK`` (or ``ERROR``)."""

    type: str
    object: JsonObject

    @property
    def initial_events_end(self) -> bool:
        """Whether this is the bookmark that ends a streaming list (``k8s.io/initial-events-end: "true"``)."""
        if self.type != "BOOKMARK":
            return False
        annotations = (self.object.get("metadata") or {}).get("annotations")
        return isinstance(annotations, dict) and annotations.get(INITIAL_EVENTS_END) == "true"


def watch_query(*, resource_version: str, timeout_seconds: int, initial_events: bool,
                label_selector: str = "") -> list[tuple[str, str]]:
    """The query of a watch with bookmarks from ``resource_version``; with ``initial_events``, a streaming list
    (``sendInitialEvents=true&resourceVersionMatch=NotOlderThan``, from ``resource_version`` or, when it is
    empty, a consistent read), whose initial events end with the bookmark `WatchEvent.initial_events_end` tells."""
    query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
    if label_selector:
        query.append(("labelSelector", label_selector))
    if initial_events:
        query += [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
    else:
        query.append(("resourceVersion", resource_version))
    return query


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-blank lines of a stream of chunks, each byte copied once."""
    parts: list[bytes] = []
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            parts.append(chunk[start:end])
            line = b"".join(parts)
            parts = []
            if line.strip():
                yield line
            start = end + 1
        if start < len(chunk):
            parts.append(chunk[start:])
    line = b"".join(parts)
    if line.strip():
        yield line


def stream_events(transport: Transport, what: str, path: str, query: list[tuple[str, str]], *,
                  timeout_seconds: int, silence_seconds: float,
                  on_open: Callable[[], None] | None) -> Iterator[WatchEvent]:
    """The events of the watch at ``path`` with ``query`` (see `watch_query`); see `Kube.watch_pods`. Nothing is
    sent before the first event is asked for; ``on_open`` runs once the server has accepted the watch.

    An ERROR event, or an error status, leaves as a `KubeError` (410: `GoneError`; a streaming list the server
    does not offer: its 422 or 500); a stream silent for ``silence_seconds`` as `WatchSilentError`.
    """
    # The read timeout is the silence bound: the socket read waits at most that long for the next bytes.
    read_seconds = timeout_seconds + transport.timeout_seconds
    if silence_seconds > 0:
        read_seconds = min(read_seconds, silence_seconds)
    transport.spend_budget(what, None)
    response: Any = None
    try:
        response = transport.open_stream(path, query, connect_seconds=transport.timeout_seconds,
                                         read_seconds=read_seconds)
        if on_open is not None:
            on_open()
        for line in _lines(response.stream(amt=None, decode_content=False)):
            event = json.loads(line)
            kind, obj = str(event.get("type", "")), event.get("object") or {}
            if kind == "ERROR":
                reason = f"{obj.get('reason')}: {obj.get('message')}"
                raise ApiException(status=int(obj.get("code") or 0), reason=reason)
            yield WatchEvent(type=kind, object=obj)
    except ApiException as error:
        raise error_from(error, what) from error
    except Exception as error:
        if silence_seconds > 0 and timed_out_reading(error):
            raise WatchSilentError(f"{what}: nothing received for {silence_seconds:g}s") from error
        if is_transport_error(error):
            raise error_from(error, what) from error
        raise
    finally:
        if response is not None:
            response.close()
            response.release_conn()
