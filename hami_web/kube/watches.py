"""Watch streams: events as plain dicts, a bound on silence, and the client's failures as `KubeError`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes.watch
from kubernetes.client.exceptions import ApiException

from hami_web.kube.errors import WatchSilentError, error_from, is_transport_error, timed_out_reading
from hami_web.kube.transport import JsonObject, Transport
from hami_web.kube.untyped import init_watch, stop_watch, watch_stream

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


class _RawWatch(kubernetes.watch.Watch):
    """A `Watch` whose events keep their objects as dicts.

    The client's own ``deserialize=False`` path leaves out ``raw_object``, which its ERROR handling then
    reads, so a ``410 Expired`` surfaced as ``KeyError('raw_object')`` instead of an `ApiException`. Parsing
    here (the deserialising path, minus the model conversion) keeps both the cheap dicts and the 410.
    """

    def __init__(self) -> None:
        init_watch(self)

    def unmarshal_event(self, data: str, return_type: Any) -> JsonObject | None:
        if not data or data.isspace():
            return None
        event: JsonObject = json.loads(data)
        event["raw_object"] = event.get("object")
        metadata = (event.get("object") or {}).get("metadata") if event.get("type") != "ERROR" else None
        if isinstance(metadata, dict) and metadata.get("resourceVersion"):
            self.resource_version = metadata["resourceVersion"]
        return event


def stream_events(transport: Transport, what: str, method: Any, *, on_open: Callable[[], None] | None,
                  silence_seconds: float, initial_events: bool = False, **kwargs: Any) -> Iterator[WatchEvent]:
    """The events of a watch opened with the generated list ``method`` and ``kwargs`` (which hold
    ``timeout_seconds``); see `Kube.watch_pods`. Nothing is sent before the first event is asked for.

    ``initial_events``: a streaming list (``sendInitialEvents=true``, ``resourceVersionMatch=NotOlderThan``,
    from ``resource_version`` or, when it is empty, a consistent read), whose initial events end with the bookmark
    `WatchEvent.initial_events_end` tells; a server that does not offer it answers an error (`InvalidError`).
    """
    if initial_events:
        kwargs.update(send_initial_events=True, resource_version_match="NotOlderThan",
                      resource_version=kwargs.get("resource_version") or None)
    watch = _RawWatch()
    # The read timeout is the silence bound: the socket read waits at most that long for the next bytes.
    read_seconds = kwargs["timeout_seconds"] + transport.timeout_seconds
    if silence_seconds > 0:
        read_seconds = min(read_seconds, silence_seconds)
    kwargs["_request_timeout"] = (transport.timeout_seconds, read_seconds)
    transport.spend_budget(what, None)

    @functools.wraps(method)  # the client reads the return type from the method's signature
    def open_stream(*args: Any, **call_kwargs: Any) -> Any:
        response = method(*args, **call_kwargs)
        if on_open is not None:
            on_open()
        return response

    try:
        for event in watch_stream(watch, open_stream, allow_watch_bookmarks=True, **kwargs):
            yield WatchEvent(type=str(event.get("type", "")), object=event.get("object") or {})
    except ApiException as error:
        raise error_from(error, what) from error
    except Exception as error:
        if silence_seconds > 0 and timed_out_reading(error):
            raise WatchSilentError(f"{what}: nothing received for {silence_seconds:g}s") from error
        if is_transport_error(error):
            raise error_from(error, what) from error
        raise
    finally:
        stop_watch(watch)
