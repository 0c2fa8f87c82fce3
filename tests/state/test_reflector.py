"""The reflector's list/watch loop against a scripted source (docs/performance.md#scale, "One reflector per resource").

Covers: a streaming list delivers its initial events as one list and goes on as the watch (one request); a
server that refuses or fails a streaming list (422 Invalid, 500 from an etcd without progress notify, a plain
watch that sends a non-ADDED event or a bookmark without the end annotation, a stream that ends or falls silent
before the end) gets a paginated list at once, no error counted, and paginated lists until streaming is tried
again after the retry interval; a busy one (429, 503, 504, or no answer before the stream was accepted) is streamed
again after the backoff, one error, no pages; a list that fails both ways is one error, retried; a half-delivered
list never reaches the sinks; a watch resumes from the
resourceVersion of its last event or bookmark; 410 Gone lists again at once without counting an error; a silent
watch is re-opened from the last version, and the second silence in a row lists; three failed watches in a row
list; every sink receives the list and the events; `current` is told when the stream is current.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hami_web.kube import INITIAL_EVENTS_END, GoneError, InvalidError, KubeError, ListPage, WatchEvent, WatchSilentError
from hami_web.state.reflector import PAGINATED, STREAMING, STREAMING_RETRY_SECONDS, Reflector, ReflectorOptions

Script = list[Any]  # per call: a list of WatchEvents (and at most one exception, raised when reached)


def obj(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


def added(name: str, version: int) -> WatchEvent:
    return WatchEvent("ADDED", obj(name, version))


def modified(name: str, version: int) -> WatchEvent:
    return WatchEvent("MODIFIED", obj(name, version))


def bookmark(version: int, *, end: bool = False) -> WatchEvent:
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if end:
        metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
    return WatchEvent("BOOKMARK", {"metadata": metadata})


@dataclass
class FakeSource:
    """Lists and watches from scripts; once the watch script is used up, stops the loop."""

    lists: list[Script]  # each list: pages (lists of objects) and at most one exception
    watches: list[Script]
    stopping: threading.Event
    name: str = "things"
    list_calls: int = 0
    watch_calls: list[tuple[str, bool]] = field(default_factory=list)  # (resourceVersion, initial events)

    def list(self, *, page_size: int) -> Iterator[ListPage]:
        script = self.lists.pop(0)
        self.list_calls += 1
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield ListPage(items=step[1], resource_version=str(step[0]))

    def watch(self, *, resource_version: str, timeout_seconds: int, silence_seconds: float,
              on_open: Callable[[], None], initial_events: bool) -> Iterator[WatchEvent]:
        self.watch_calls.append((resource_version, initial_events))
        if not self.watches:
            self.stopping.set()
            return iter(())
        script = self.watches.pop(0)
        if script and isinstance(script[0], KubeError) and not isinstance(script[0], WatchSilentError):
            raise script[0]  # refused before the stream opened
        on_open()
        return self._events(script)

    @staticmethod
    def _events(script: Script) -> Iterator[WatchEvent]:
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield step

    def key(self, item: dict[str, Any]) -> str:
        return str(item["metadata"]["name"])


@dataclass
class RecordingSink:
    """What a sink was told: every completed list, every event, how many times the stream was current."""

    lists: list[list[str]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    currents: int = 0

    def listing(self) -> RecordingListing:
        return RecordingListing(self)

    def apply(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, key))

    def current(self, at: float) -> None:
        self.currents += 1


@dataclass
class RecordingListing:
    sink: RecordingSink
    keys: list[str] = field(default_factory=list)

    def add(self, key: str, obj: dict[str, Any]) -> None:
        self.keys.append(key)

    def done(self) -> None:
        self.sink.lists.append(self.keys)


def run(lists: list[Script], watches: list[Script], *, streaming: bool = True,
        sinks: int = 1) -> tuple[Reflector, FakeSource, list[RecordingSink]]:
    """Run a reflector over the scripts until the watch script is used up (backoff 0.01 s)."""
    stopping = threading.Event()
    source = FakeSource(lists, watches, stopping)
    reflector = Reflector(source, ReflectorOptions(refresh_interval_seconds=0.01, streaming_lists=streaming))
    recorders = [RecordingSink() for _ in range(sinks)]
    for sink in recorders:
        reflector.add_sink(sink)
    worker = threading.Thread(target=reflector.run, args=(stopping,), daemon=True)
    worker.start()
    worker.join(10)
    stopping.set()
    assert not worker.is_alive(), "the reflector did not stop"
    return reflector, source, recorders


# -- streaming lists ------------------------------------------------------------------------------------------


def test_a_streaming_list_is_one_request_that_goes_on_as_the_watch() -> None:
    stream = [added("a", 3), added("b", 5), bookmark(7, end=True), modified("a", 8), bookmark(9)]
    reflector, source, (sink,) = run(lists=[], watches=[stream], sinks=1)

    assert sink.lists == [["a", "b"]]
    assert sink.events == [("MODIFIED", "a")]
    assert source.list_calls == 0
    assert source.watch_calls[0] == ("", True)
    assert source.watch_calls[1] == ("9", False)  # the stream ended: resumed from its last bookmark
    status = reflector.status
    assert (status.lists, status.errors, status.list_mode, status.streaming_refused) == (1, 0, STREAMING, "")


def test_every_sink_gets_the_list_and_the_events() -> None:
    stream = [added("a", 3), bookmark(4, end=True), WatchEvent("DELETED", obj("a", 5))]
    _, _, sinks = run(lists=[], watches=[stream], sinks=2)

    for sink in sinks:
        assert sink.lists == [["a"]] and sink.events == [("DELETED", "a")]
        assert sink.currents >= 2  # the list, then the event


REFUSALS = [
    pytest.param([InvalidError("sendInitialEvents is forbidden for watch unless the WatchList feature gate is "
                               "enabled", status=422)], "forbidden", id="422-invalid"),
    pytest.param([KubeError("HTTP 500: InternalError: a watch stream was requested by the client but the required "
                            "storage feature RequestWatchProgress is disabled", status=500)], "RequestWatchProgress",
                 id="etcd-without-progress-notify"),
    pytest.param([added("a", 1), modified("a", 2)], "MODIFIED event came before", id="plain-watch-event"),
    pytest.param([added("a", 1), bookmark(2)], "BOOKMARK event came before", id="plain-watch-bookmark"),
    pytest.param([added("a", 1)], "ended before the end", id="stream-ended"),
    pytest.param([added("a", 1), WatchSilentError("nothing received for 90s")], "no end of the initial events",
                 id="stream-silent"),
]


@pytest.mark.parametrize(("answer", "why"), REFUSALS)
def test_a_refused_streaming_list_falls_back_to_pages_at_once(answer: Script, why: str) -> None:
    pages = [(4, [obj("a", 1), obj("b", 2)]), (4, [obj("c", 3)])]
    reflector, source, (sink,) = run(lists=[pages, pages], watches=[answer, [GoneError("expired", status=410)]])

    assert sink.lists == [["a", "b", "c"], ["a", "b", "c"]]  # the half-streamed "a" never reached the sink
    assert source.watch_calls[:3] == [("", True), ("4", False), ("4", False)]  # then pages only, also after 410
    status = reflector.status
    assert why in status.streaming_refused
    assert (status.lists, status.errors, status.list_mode) == (2, 0, PAGINATED)


BUSY = [
    pytest.param([added("a", 1), KubeError("Too large resource version: 9, current: 8", status=504)],
                 id="504-mid-way"),  # kube-apiserver's watch cache not yet as fresh as etcd
    pytest.param([KubeError("storage is (re)initializing", status=429)], id="429-cache-initialising"),
    pytest.param([KubeError("HTTP 503: the server is currently unable to handle the request", status=503)],
                 id="503"),
    pytest.param([KubeError("watch things: Read timed out", status=0)], id="no-answer-before-accepted"),
]


@pytest.mark.parametrize("answer", BUSY)
def test_a_busy_answer_to_a_streaming_list_is_streamed_again_after_the_backoff(answer: Script) -> None:
    """A busy API server (docs/performance.md#scale): the streaming list is not replaced by pages read from etcd, the
    heaviest list there is, while the server is too busy to answer; it is tried again after the backoff."""
    stream = [added("a", 3), added("b", 5), bookmark(7, end=True)]
    reflector, source, (sink,) = run(lists=[], watches=[answer, stream])

    assert sink.lists == [["a", "b"]]  # the half-streamed "a" of a failed try never reached the sink
    assert source.list_calls == 0
    assert source.watch_calls[:2] == [("", True), ("", True)]
    status = reflector.status
    assert (status.lists, status.errors, status.list_mode, status.streaming_refused) == (1, 1, STREAMING, "")


def test_streaming_is_tried_again_after_the_retry_interval() -> None:
    stopping = threading.Event()
    stream = [added("a", 3), bookmark(4, end=True)]
    source = FakeSource([[(2, [obj("a", 1)])]], [[KubeError("HTTP 500: etcd is busy", status=500)], stream], stopping)
    now = [1000.0]
    reflector = Reflector(source, ReflectorOptions(), clock=lambda: now[0])
    sink = RecordingSink()
    reflector.add_sink(sink)

    assert reflector.list_once() is None  # failed: pages at once, no error (the list worked)
    assert (reflector.status.list_mode, reflector.status.errors) == (PAGINATED, 0)
    assert "etcd is busy" in reflector.status.streaming_refused
    now[0] += STREAMING_RETRY_SECONDS
    assert reflector.list_once() is not None  # the stream, going on as the watch
    assert sink.lists == [["a"], ["a"]]
    assert (reflector.status.list_mode, reflector.status.streaming_refused) == (STREAMING, "")
    assert source.watch_calls == [("", True), ("", True)]


def test_a_list_failing_both_ways_is_an_error_and_retried() -> None:
    failure = KubeError("HTTP 500", status=500)
    stream = [added("a", 3), bookmark(4, end=True)]
    lists = [[failure], [(2, [obj("a", 1)])]]
    reflector, source, (sink,) = run(lists=lists, watches=[[failure], stream])

    assert sink.lists == [["a"]]
    assert source.list_calls == 2 and source.watch_calls[0] == ("", True)
    assert (reflector.status.errors, reflector.status.lists, reflector.status.list_mode) == (1, 1, PAGINATED)


# -- lists in pages and watches -------------------------------------------------------------------------------


def test_a_list_that_fails_part_way_never_reaches_the_sinks() -> None:
    failing = [(4, [obj("a", 1)]), KubeError("HTTP 500", status=500)]
    whole = [(5, [obj("a", 1), obj("b", 5)])]
    reflector, _, (sink,) = run(lists=[failing, whole], watches=[[]], streaming=False)

    assert sink.lists == [["a", "b"]]
    assert (reflector.status.errors, reflector.status.lists, reflector.status.resource_version) == (1, 1, "5")


def test_a_watch_resumes_from_its_last_event_or_bookmark() -> None:
    watches = [[modified("a", 6), bookmark(9)], [modified("a", 10)], []]
    reflector, source, (sink,) = run(lists=[[(5, [obj("a", 1)])]], watches=watches, streaming=False)

    assert [call[0] for call in source.watch_calls] == ["5", "9", "10", "10"]
    assert sink.events == [("MODIFIED", "a"), ("MODIFIED", "a")]
    assert (reflector.status.lists, reflector.status.errors) == (1, 0)


def test_a_watch_answered_410_lists_again_without_an_error() -> None:
    lists = [[(5, [obj("a", 1)])], [(12, [obj("b", 12)])]]
    reflector, source, (sink,) = run(lists=lists, watches=[[GoneError("too old", status=410)]], streaming=False)

    assert sink.lists == [["a"], ["b"]]
    assert source.watch_calls[-1][0] == "12"
    assert (reflector.status.lists, reflector.status.errors) == (2, 0)


def test_a_silent_watch_is_reopened_and_a_second_silence_lists() -> None:
    silent = WatchSilentError("nothing received for 90s")
    lists = [[(5, [obj("a", 1)])], [(8, [obj("a", 8)])]]
    watches = [[modified("a", 6), silent], [silent]]
    reflector, source, (sink,) = run(lists=lists, watches=watches, streaming=False)

    assert [call[0] for call in source.watch_calls] == ["5", "6", "8"]  # re-opened from 6, then listed at 8
    assert len(sink.lists) == 2
    assert (reflector.status.reopens, reflector.status.errors) == (2, 0)


def test_three_failed_watches_in_a_row_list_again() -> None:
    failure = KubeError("HTTP 500", status=500)
    lists = [[(5, [obj("a", 1)])], [(7, [obj("a", 7)])]]
    reflector, source, _ = run(lists=lists, watches=[[failure], [failure], [failure]], streaming=False)

    assert source.list_calls == 2
    assert (reflector.status.errors, reflector.status.lists, source.watch_calls[-1][0]) == (3, 2, "7")


def test_hooks_run_after_each_list_and_the_status_tells_its_duration() -> None:
    stopping = threading.Event()
    source = FakeSource([[(5, [obj("a", 1)])]], [], stopping)
    reflector = Reflector(source, ReflectorOptions(streaming_lists=False))
    sink = RecordingSink()
    reflector.add_sink(sink)
    seen: list[list[list[str]]] = []
    reflector.on_listed(lambda: seen.append(list(sink.lists)))

    assert reflector.list_once() is None
    assert seen == [[["a"]]]
    assert reflector.status.list_seconds is not None and reflector.status.list_seconds >= 0
