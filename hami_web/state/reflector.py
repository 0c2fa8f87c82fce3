"""One reflector per watched resource, client-go's shape in Python: list, then watch, feeding sinks.

A `Reflector` runs a list/watch loop over a `Source` (what to list and watch: nodes, pods, ...) and hands every
object it learns to its `Sink`s (the cluster cache, the dashboard's node traits, ...). Everything a resource's
loop must get right lives here once: resuming a watch from the last resourceVersion received (events and
bookmarks), listing again on 410 Gone, after `RELIST_AFTER_FAILURES` failed watches or two silent ones, or every
``--relist-interval``; closing a watch silent for the silence bound; backing off; and the `ResourceSync` record
that readiness and metrics read.

**Initial lists stream where the API server offers it.** A list is first asked as a watch with
``sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true``: kube-apiserver answers from
its watch cache, one ADDED event per object, then a bookmark annotated ``k8s.io/initial-events-end: "true"`` that
carries the list's resourceVersion, and the same stream goes on as the watch (one request per resource). A server
that refuses or fails (an older one or the WatchList feature off: 422; an etcd without progress notify: 500
"the required storage feature RequestWatchProgress is disabled"; any other error status or ERROR event; a plain
watch: any event but ADDED, or the stream ending or falling silent, before that bookmark) gets a paginated list at
once instead (`LIST_PAGE_SIZE` objects per consistent page), and paginated lists for `STREAMING_RETRY_SECONDS` before
streaming is tried again. A streaming list with no answer within the silence bound, or a busy one (429, 503, 504: a
cache still initialising or not fresh yet), is no refusal: it is streamed again after the usual backoff, never
replaced at once by pages read from etcd, which would add the heaviest list to a server already too busy to answer
(docs/performance.md#scale). A list that fails part-way leaves the sinks' previous state untouched.

**A sink** is told of a full list through a `Listing` (`Sink.listing` when the list starts, ``add`` per object,
``done`` once it is complete: only then may it replace its state), of each watch event (`Sink.apply`), and of the
moments when everything up to then has been delivered (`Sink.current`). Sinks run on the reflector's thread, in
event order; they must not block for long.

**Adding a resource** is one small registration: a `Source` (`KubeSource.collection` for any collection path,
with a key function), a sink for it, and `ClusterSync.register`::

    quotas = Reflector(KubeSource.collection(kube, "resourcequotas", "/api/v1/resourcequotas", object_uid),
                       sync.options)
    quotas.add_sink(QuotaSink(cache))
    sync.register(quotas)  # ClusterSync runs it, waits for its first list, and reports it in /readyz and metrics

(``tests/state/test_list_paths.py`` registers a third resource this way.)
"""

from __future__ import annotations

import functools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from hami_web.kube import (
    GoneError,
    JsonObject,
    Kube,
    KubeError,
    ListPage,
    WatchEvent,
    WatchSilentError,
)
from hami_web.state.pages import collector_paused, each_page

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 30.0
# Objects per list request. A page is decoded by one json.loads call that holds the GIL throughout; 250
# realistic pods (~3 KB each) decode in about 10-20 ms on the build machine, so no page stalls filters for long.
LIST_PAGE_SIZE = 250
# Watches end after 5-10 minutes (randomised, as client-go's reflector does) and resume from the last version.
WATCH_TIMEOUT_SECONDS = 300.0
# Failed watch requests in a row after which the resource is listed again.
RELIST_AFTER_FAILURES = 3
# Longest silence (no event, no bookmark) a watch may keep before it is re-opened. kube-apiserver v1.32 of the
# e2e tier sends a bookmark 60 s after a watch opened, then every 60 s, once the resource has changed
# (benchmarks/watch_bookmarks.py): 90 s never closes a stream of a changing resource, and bounds how long a held
# stream can hide changes.
WATCH_SILENCE_BOUND_SECONDS = 90.0
# Silent watches in a row after which the resource is listed, not only re-opened.
RELIST_AFTER_SILENCES = 2
# After a streaming list failed or was refused, lists are paginated for this long before streaming is tried again
# (a server's features rarely change while it runs, and a transient failure should not cost streaming for good).
STREAMING_RETRY_SECONDS = 600.0

STREAMING = "streaming"
PAGINATED = "paginated"


@dataclass(slots=True)
class ResourceSync:
    """Progress of one resource's loop, read by readiness and metrics."""

    resource: str
    last_success: float | None = None
    last_list: float | None = None
    lists: int = 0
    errors: int = 0
    last_error: str = ""
    resource_version: str = ""
    watching: bool = False
    last_event: float | None = None  # the last list, event, bookmark, or stream the server ended (the gauge)
    last_heard: float | None = None  # the same, or a watch the server accepted (readiness)
    reopens: int = 0  # watches closed for silence and re-opened
    list_mode: str = ""  # how the last list was read: STREAMING or PAGINATED
    list_seconds: float | None = None  # how long the last list took
    streaming_refused: str = ""  # why the last streaming list was refused or failed ("" when it worked or is untried)


class Source(Protocol):
    """What a reflector lists and watches: one kind of object, through `hami_web.kube`."""

    @property
    def name(self) -> str:
        """The resource's plural, for logs, metrics and readiness ("nodes")."""
        ...

    def list(self, *, page_size: int) -> Iterator[ListPage]:
        """Every object, in consistent pages of at most ``page_size``."""
        ...

    def watch(self, *, resource_version: str, timeout_seconds: int, silence_seconds: float,
              on_open: Callable[[], None], initial_events: bool) -> Iterator[WatchEvent]:
        """Events after ``resource_version``; with ``initial_events``, a streaming list first (see the module)."""
        ...

    def key(self, obj: JsonObject) -> str:
        """The object's identity for the sinks (a node's name, a pod's UID)."""
        ...


@dataclass(frozen=True, slots=True)
class KubeSource:
    """A `Source` from a `Kube` list method and watch method (the usual case)."""

    name: str
    list_pages: Callable[..., Iterator[ListPage]]
    watch_events: Callable[..., Iterator[WatchEvent]]
    key_of: Callable[[JsonObject], str]

    @classmethod
    def collection(cls, kube: Kube, name: str, path: str, key: Callable[[JsonObject], str], *,
                   label_selector: str = "") -> KubeSource:
        """The source of any collection ``path`` (``/api/v1/resourcequotas``), named ``name`` in logs and metrics."""
        return cls(name, functools.partial(kube.list_collection, path, label_selector=label_selector),
                   functools.partial(kube.watch_collection, path, label_selector=label_selector), key)

    def list(self, *, page_size: int) -> Iterator[ListPage]:
        return self.list_pages(page_size=page_size)

    def watch(self, *, resource_version: str, timeout_seconds: int, silence_seconds: float,
              on_open: Callable[[], None], initial_events: bool) -> Iterator[WatchEvent]:
        return self.watch_events(resource_version=resource_version, timeout_seconds=timeout_seconds,
                                 silence_seconds=silence_seconds, on_open=on_open, initial_events=initial_events)

    def key(self, obj: JsonObject) -> str:
        return self.key_of(obj)


class Listing(Protocol):
    """One full list as a sink receives it: objects one by one, then ``done`` when the list is complete."""

    def add(self, key: str, obj: JsonObject) -> None:
        """One listed object (reduce it now: the whole list is never held as objects)."""
        ...

    def done(self) -> None:
        """The list is complete: replace the sink's state with it. Never called for a list that failed."""
        ...


class Sink(Protocol):
    """Where a reflector delivers what it learns (see the module docstring)."""

    def listing(self) -> Listing:
        """A full list starts now."""
        ...

    def apply(self, kind: str, key: str, obj: JsonObject) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED`` (bookmarks are not passed on)."""
        ...

    def current(self, at: float) -> None:
        """Everything the API had up to about ``at`` (clock seconds) has been delivered."""
        ...


@dataclass(frozen=True, slots=True)
class ReflectorOptions:
    """How a reflector paces itself (shared by every resource of a process)."""

    refresh_interval_seconds: float = 15.0  # the longest backoff, and the readiness staleness unit
    relist_interval_seconds: float = 0.0  # 0: list only when needed
    page_size: int = LIST_PAGE_SIZE
    watch_timeout_seconds: float = WATCH_TIMEOUT_SECONDS
    silence_bound_seconds: float = WATCH_SILENCE_BOUND_SECONDS
    streaming_lists: bool = True  # try a streaming list first (falls back to pages when refused)


class StreamingRefused(Exception):
    """The API server does not offer a streaming list (the message says how it answered)."""


# Answers of a busy API server: too many requests, unavailable, and 504 (kube-apiserver's "Too large resource
# version" when its watch cache is not yet as fresh as etcd, or a request it gave up on).
BUSY_STATUSES = frozenset({429, 503, 504})


def busy_answer(error: KubeError, *, accepted: bool) -> bool:
    """Whether a failed streaming list says the server is busy rather than that it does not offer streaming: a busy
    status, or no answer at all before the server accepted the watch (no status; silent past the bound)."""
    return error.status in BUSY_STATUSES or (not accepted and error.status == 0)


def event_version(event: WatchEvent) -> str:
    """The resourceVersion an event or bookmark carries ("" when none)."""
    metadata = event.object.get("metadata") if isinstance(event.object, dict) else None
    return str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""


def error_of(resource: str, event: WatchEvent) -> KubeError:
    """The `KubeError` an ERROR event stands for (410 becomes `GoneError`)."""
    status = int(event.object.get("code") or 0) if isinstance(event.object, dict) else 0
    message = f"watch {resource}: {event.object.get('message') or event.object}"
    return GoneError(message, status=status) if status == 410 else KubeError(message, status=status)


@dataclass
class Reflector:
    """The list/watch loop of one resource, feeding its sinks (see the module docstring)."""

    source: Source
    options: ReflectorOptions = field(default_factory=ReflectorOptions)
    clock: Callable[[], float] = time.time
    sinks: list[Sink] = field(default_factory=list)
    status: ResourceSync = field(init=False)
    _listed_hooks: list[Callable[[], None]] = field(default_factory=list)
    _streaming_again_at: float = 0.0  # clock seconds: no streaming list before then (after a refusal)

    def __post_init__(self) -> None:
        self.status = ResourceSync(self.source.name)

    @property
    def name(self) -> str:
        """The resource's name ("nodes")."""
        return self.source.name

    def add_sink(self, sink: Sink) -> None:
        """Deliver to ``sink`` too; register before the loop starts, or the sink misses the first list."""
        self.sinks.append(sink)

    def on_listed(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (on the loop's thread) after each full list has reached every sink."""
        self._listed_hooks.append(hook)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, stopping: threading.Event) -> None:
        """List, then watch, until ``stopping`` is set (the body of the resource's thread)."""
        status = self.status
        first_backoff = min(1.0, self.options.refresh_interval_seconds)
        must_list, failures, silences, backoff = "first sync", 0, 0, first_backoff
        while not stopping.is_set():
            reason = must_list or self._relist_due()
            listing = bool(reason)
            try:
                stream = None
                if reason:
                    log.info("%s: listing (%s)", status.resource, reason)
                    stream = self.list_once()
                    must_list, listing = "", False
                self._watch(stream, stopping)
                failures, silences, backoff = 0, 0, first_backoff
                continue
            except WatchSilentError as error:
                # Connected but silent past the bound: re-open from the last version received, which replays
                # what the silence hid; a stream silent again after that is not trusted and the resource listed.
                silences += 1
                status.reopens += 1
                if silences >= RELIST_AFTER_SILENCES:
                    must_list = f"watch silent {silences} times in a row"
                    silences = 0
                else:
                    log.info("%s: re-opening the watch from resourceVersion %s (%s)", status.resource,
                             status.resource_version, error)
                continue
            except GoneError as error:
                if not listing:  # the watch's version expired: list again at once, as client-go does
                    must_list = f"watch from resourceVersion {status.resource_version} expired: {error}"
                    continue
                self._failed(error, backoff)  # a continue token expired mid-list
            except KubeError as error:
                failures += 1
                if failures >= RELIST_AFTER_FAILURES:
                    must_list = f"{failures} failed watches in a row"
                self._failed(error, backoff)
            except Exception as error:  # a bug must not silently kill the loop that keeps the cache alive
                log.exception("%s sync crashed; retrying", status.resource)
                self._failed(error, backoff)
            status.watching = False
            stopping.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS, self.options.refresh_interval_seconds)

    def list_once(self) -> Iterator[WatchEvent] | None:
        """One full list into every sink: streamed when the server offers it, else in pages.

        Returns the rest of a streaming list's stream (it goes on as the watch), or None after a paginated list.
        """
        if self.options.streaming_lists and self.clock() >= self._streaming_again_at:
            try:
                stream = self._stream_list()
            except StreamingRefused as refusal:
                self.status.streaming_refused = str(refusal)
                self._streaming_again_at = self.clock() + STREAMING_RETRY_SECONDS
                log.info("%s: no streaming list (%s); listing in pages, streaming tried again in %.0fs",
                         self.status.resource, refusal, STREAMING_RETRY_SECONDS)
            else:
                self.status.streaming_refused = ""
                return stream
        self._paginated_list()
        return None

    def _paginated_list(self) -> None:
        started = self.clock()
        listings = [sink.listing() for sink in self.sinks]
        version = ""
        for page in each_page(self.source.list(page_size=self.options.page_size)):
            for obj in page.items:
                key = self.source.key(obj)
                for listing in listings:
                    listing.add(key, obj)
            version = page.resource_version
        self._listed(listings, version, started, PAGINATED)

    def _stream_list(self) -> Iterator[WatchEvent]:
        """Open a watch with initial events and deliver them as a list, up to the end bookmark.

        `StreamingRefused` when the server does not offer it; the stream, positioned after the bookmark, is
        returned for the watch to go on with.
        """
        status, started = self.status, self.clock()
        timeout = self._watch_seconds(listing=True)
        listings = [sink.listing() for sink in self.sinks]
        accepted = False

        def opened() -> None:
            nonlocal accepted
            accepted = True
            self._opened()

        try:
            stream = iter(self.source.watch(resource_version="", timeout_seconds=max(1, math.ceil(timeout)),
                                            silence_seconds=self.options.silence_bound_seconds,
                                            on_open=opened, initial_events=True))
            with collector_paused():
                for event in stream:
                    if event.type == "ADDED":
                        key = self.source.key(event.object)
                        for listing in listings:
                            listing.add(key, event.object)
                    elif event.type == "BOOKMARK" and event.initial_events_end:
                        self._listed(listings, event_version(event), started, STREAMING)
                        return stream
                    elif event.type == "ERROR":
                        raise error_of(status.resource, event)
                    else:  # a plain watch: the server ignored sendInitialEvents
                        raise StreamingRefused(f"a {event.type} event came before the end of the initial events")
        except KubeError as error:
            if busy_answer(error, accepted=accepted):  # streamed again after the backoff (see the module)
                raise KubeError(f"streaming list: the API server is busy ({error}); streaming again, not listing "
                                f"in pages", status=error.status) from error
            if isinstance(error, WatchSilentError):
                raise StreamingRefused(f"no end of the initial events: {error}") from error
            raise StreamingRefused(str(error)) from error  # refused (422, 500 from an etcd without progress notify)
        finally:
            status.watching = False
        raise StreamingRefused("the stream ended before the end of the initial events")

    def _listed(self, listings: list[Listing], version: str, started: float, mode: str) -> None:
        for listing in listings:
            listing.done()
        status = self.status
        status.resource_version = version
        status.last_list = self.clock()
        status.list_seconds = status.last_list - started
        status.list_mode = mode
        status.lists += 1
        self._heard()
        for hook in self._listed_hooks:
            hook()

    # -- the watch --------------------------------------------------------------------------------

    def _watch_seconds(self, *, listing: bool = False) -> float:
        """How long the next watch may stay open: until its random timeout, or until the periodic list is due
        (``listing``: the stream starts with a list, so that is due one interval from now)."""
        timeout = self.options.watch_timeout_seconds * (1 + random.random())
        relist = self.options.relist_interval_seconds
        if relist and listing:
            timeout = min(timeout, relist)
        elif relist and self.status.last_list is not None:
            timeout = min(timeout, self.status.last_list + relist - self.clock())
        return timeout

    def _opened(self) -> None:
        self.status.watching = True
        self._heard(current=False)  # events from before this moment may still be on their way

    def _watch(self, stream: Iterator[WatchEvent] | None, stopping: threading.Event) -> None:
        """Apply events until the stream ends; ``stream``: one already open (a streaming list's), else a new one."""
        status = self.status
        if stream is None:
            timeout = self._watch_seconds()
            if timeout <= 0:
                return
            stream = self.source.watch(resource_version=status.resource_version,
                                       timeout_seconds=max(1, math.ceil(timeout)),  # the API takes whole seconds
                                       silence_seconds=self.options.silence_bound_seconds, on_open=self._opened,
                                       initial_events=False)
        else:
            status.watching = True
        try:
            for event in stream:
                self._observe(event)
                if stopping.is_set():
                    return
            # The server ended the stream at its timeout: everything up to now was delivered.
            status.last_event = status.last_heard = status.last_success = self.clock()
        except WatchSilentError:
            # We close it for silence; the server had accepted it and kept it open until now.
            status.last_heard = self.clock()
            raise
        except KubeError:
            # An open stream, heard from within the silence bound, was in step until it broke: the 3 refresh
            # periods of readiness count from the break, not from whenever the last event happened to come; and,
            # as an accepted watch counts as heard while open, it was heard until it broke.
            if status.watching:
                status.last_success = status.last_heard = self.clock()
            raise
        finally:
            status.watching = False

    def _observe(self, event: WatchEvent) -> None:
        if event.type == "ERROR":
            raise error_of(self.status.resource, event)
        if event.type != "BOOKMARK":
            key = self.source.key(event.object)
            for sink in self.sinks:
                sink.apply(event.type, key, event.object)
        self.status.resource_version = event_version(event) or self.status.resource_version
        self._heard()

    # -- bookkeeping ------------------------------------------------------------------------------

    def _heard(self, *, current: bool = True) -> None:
        """The API answered; ``current`` when everything up to now has been delivered (not a watch just opened)."""
        status = self.status
        now = self.clock()
        status.last_success = status.last_heard = now
        status.last_error = ""
        if current:  # a stream just opened has delivered nothing yet
            status.last_event = now
            for sink in self.sinks:
                sink.current(now)

    def _failed(self, error: Exception, backoff: float) -> None:
        status = self.status
        status.errors += 1
        status.last_error = str(error) or type(error).__name__
        log.warning("%s sync failed, keeping the previous state, retrying in %.0fs: %s",
                    status.resource, backoff, status.last_error)

    def _relist_due(self) -> str:
        """Why the periodic list is due ("" when it is not)."""
        relist = self.options.relist_interval_seconds
        if relist and self.status.last_list is not None and self.clock() - self.status.last_list >= relist:
            return f"--relist-interval {relist:g}s"
        return ""
