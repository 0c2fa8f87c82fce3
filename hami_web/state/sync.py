"""Keeping the cache in step with the API as client-go's informers do: list once, then watch.

One thread per resource (nodes, pods) lists in pages (`LIST_PAGE_SIZE` objects per request, one consistent
snapshot), reconciles the cache with the result, then watches from the list's resourceVersion with bookmarks,
remembering the resourceVersion of every event and bookmark. A watch that ends (its timeout, a dropped
connection) resumes from that version without a list; the resource is listed again only when the API answers
410 Gone (the version is no longer kept), after `RELIST_AFTER_FAILURES` failed watches in a row, or every
``--relist-interval`` when an operator asks for that belt-and-braces reconciliation (off by default).

A watch can also stay connected and deliver nothing (a proxy that stopped forwarding, a half-open connection).
kube-apiserver v1.32 sends a bookmark on the minute to a watch that asked for them, but only once its resource
has changed since the watch began (a bookmark carries a newer resourceVersion, or nothing): so silence alone does
not tell a held stream from a quiet resource. A stream silent for ``--watch-silence-bound`` (90 s) is therefore
closed and re-opened from the last version received — cheap, and it replays whatever a held stream hid (or
answers 410, and the resource is listed) — and a stream silent twice in a row is followed by a list, which is
the truth whatever holds the streams. Every re-open and list is logged at INFO with its reason. ``/readyz``
fails while a resource has heard nothing from the API (no list, event, bookmark, nor a watch accepted) beyond
the bound: that is, while re-opening and listing fail. Keeping
list and watch of one resource on one thread keeps their events in order, so a list never undoes a newer event.

Each page and each event is reduced at once to what scheduling needs (`state.pods.PodRecord`,
`state.nodes.NodeRecord`), so no decode is larger than one page and no whole object outlives its page. A page
that fails mid-list leaves the previous state untouched; the list is retried with backoff.

A third thread resyncs every ``--refresh-interval`` from the local state alone (no API request): it
re-judges handshake deadlines and device-plugin-gone decisions, drops assumptions the API never confirmed,
and answers due handshakes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from hami_web.kube import GoneError, Kube, KubeError, ListPage, WatchEvent, WatchSilentError
from hami_web.state.cache import ClusterCache
from hami_web.state.nodes import NodeRecord, handshake_value, node_record
from hami_web.state.pods import PodRecord, holds_nothing, pod_finished, pod_key, pod_record

log = logging.getLogger(__name__)

STALE_AFTER_PERIODS = 3
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


_collector_lock = threading.Lock()
_collector_pauses = 0


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector from running while a page is fetched and decoded.

    Decoding a page allocates tens of thousands of containers that all survive the decode, so the collector
    would promote them and run full collections over the whole heap, several per page, each holding the GIL
    (measured: a 1.4 MB page took 90 ms instead of 12). Collection only waits; the page's objects are freed by
    reference counting as soon as the page has been reduced to records.
    """
    global _collector_pauses
    with _collector_lock:
        _collector_pauses += 1
        if _collector_pauses == 1:
            gc.disable()
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0:
                gc.enable()


def _each_page(pages: Iterable[ListPage]) -> Iterator[ListPage]:
    """The pages of a list, the next one fetched on a helper thread while the caller reduces this one.

    Overlapping the two keeps the API server encoding page N+1 while we decode page N, instead of each side
    waiting for the other; each fetch and decode runs with the collector paused.
    """
    iterator = iter(pages)

    def fetch() -> ListPage | None:
        with _collector_paused():
            return next(iterator, None)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="list-page") as pool:
        upcoming = pool.submit(fetch)
        while True:
            page = upcoming.result()
            if page is None:
                return
            upcoming = pool.submit(fetch)
            yield page


class ClusterSync:
    """Runs the node and pod loops and the resync for a `ClusterCache`; `readiness()` is what ``/readyz`` says."""

    def __init__(self, cache: ClusterCache, kube: Kube, *, refresh_interval_seconds: float = 15.0,
                 relist_interval_seconds: float = 0.0, node_label_selector: str = "",
                 clock: Callable[[], float] = time.time, page_size: int = LIST_PAGE_SIZE,
                 watch_timeout_seconds: float = WATCH_TIMEOUT_SECONDS,
                 watch_silence_bound_seconds: float = WATCH_SILENCE_BOUND_SECONDS) -> None:
        self._cache = cache
        self._kube = kube
        self._interval = refresh_interval_seconds
        self._relist_interval = relist_interval_seconds
        self._selector = node_label_selector
        self._clock = clock
        self._page_size = page_size
        self._watch_timeout = watch_timeout_seconds
        self.silence_bound_seconds = watch_silence_bound_seconds
        self.resyncs = 0
        self._stopping = threading.Event()
        self.nodes = ResourceSync("nodes")
        self.pods = ResourceSync("pods")
        self._threads: list[threading.Thread] = []

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the two list/watch loops and the resync on daemon threads (idempotent)."""
        if self._threads:
            return
        self._stopping.clear()
        targets: list[tuple[str, Callable[..., None], tuple[ResourceSync, ...]]] = [
            (f"sync-{status.resource}", self._run, (status,)) for status in (self.nodes, self.pods)]
        targets.append(("sync-resync", self._resync_loop, ()))
        for name, target, args in targets:
            thread = threading.Thread(target=target, args=args, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Ask the loops to end and wait a little for them (an open watch ends at its next event at worst)."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout_seconds)
        self._threads = []

    def sync_now(self) -> None:
        """One synchronous full list of nodes and pods, then a resync (start-up in tests and the demo)."""
        self._list(self.nodes)
        self._list(self.pods)
        self._cache.resync()

    def resync(self) -> None:
        """Re-judge the local state (no API list) and answer due handshakes."""
        if not self._cache.synced:
            return
        self._answer_handshakes(self._cache.resync())
        self.resyncs += 1
        for status in (self.nodes, self.pods):
            if status.watching and not status.last_error:
                status.last_success = self._clock()

    # -- readiness ----------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """Ready once both resources are listed, unless one has failed to reach the API for 3 refresh periods
        or has had no accepted watch open and heard nothing (no list, event or bookmark) beyond the silence bound."""
        if not self._cache.synced:
            return False, "cluster cache has not completed its first sync"
        now = self._clock()
        for status in (self.nodes, self.pods):
            if status.last_success is None:
                return False, f"{status.resource} never listed"
            # An accepted watch that is open is heard: it closes itself after the silence bound, and kube-apiserver
            # sends nothing on a resource that does not change (a quiet cluster's nodes for minutes), so only the
            # time without any accepted watch counts (/readyz used to flap at every re-open of a silent watch).
            silence = None if status.watching or status.last_heard is None else now - status.last_heard
            if silence is not None and silence > self.silence_bound_seconds:
                return False, f"{status.resource}: nothing heard from the API for {silence:.0f}s (no event, " \
                              f"bookmark or watch accepted; bound {self.silence_bound_seconds:g}s)"
            age = now - status.last_success
            if status.last_error and age > STALE_AFTER_PERIODS * self._interval:
                return False, f"{status.resource} last in step with the API {age:.0f}s ago " \
                              f"(last error: {status.last_error})"
        return True, "cluster cache is in sync"

    def refresh_age_seconds(self, resource: str) -> float | None:
        """Seconds since ``resource`` was last known in step with the API (None before the first list)."""
        status = self.nodes if resource == "nodes" else self.pods
        return None if status.last_success is None else self._clock() - status.last_success

    def silence_seconds(self, resource: str) -> float | None:
        """Seconds since ``resource``'s last list, event, bookmark or watch the server ended (None before a list).

        On a resource that does not change this grows past the bound on a healthy watch (no bookmark is sent).
        """
        status = self.nodes if resource == "nodes" else self.pods
        return None if status.last_event is None else max(0.0, self._clock() - status.last_event)

    # -- loops --------------------------------------------------------------------------------------

    def _run(self, status: ResourceSync) -> None:
        must_list, failures, silences, backoff = "first sync", 0, 0, 1.0
        while not self._stopping.is_set():
            reason = must_list or self._relist_due(status)
            listing = bool(reason)
            try:
                if reason:
                    log.info("%s: listing (%s)", status.resource, reason)
                    self._list(status)
                    must_list, listing = "", False
                self._watch(status)
                failures, silences, backoff = 0, 0, 1.0
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
                self._failed(status, error, backoff)  # a continue token expired mid-list
            except KubeError as error:
                failures += 1
                if failures >= RELIST_AFTER_FAILURES:
                    must_list = f"{failures} failed watches in a row"
                self._failed(status, error, backoff)
            except Exception as error:  # a bug must not silently kill the loop that keeps the cache alive
                log.exception("%s sync crashed; retrying", status.resource)
                self._failed(status, error, backoff)
            status.watching = False
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS, self._interval)

    def _failed(self, status: ResourceSync, error: Exception, backoff: float) -> None:
        status.errors += 1
        status.last_error = str(error) or type(error).__name__
        log.warning("%s sync failed, keeping the previous state, retrying in %.0fs: %s",
                    status.resource, backoff, status.last_error)

    def _resync_loop(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.resync()
            except Exception:
                log.exception("resync failed; trying again in %.0fs", self._interval)

    def _relist_due(self, status: ResourceSync) -> str:
        """Why the periodic list is due ("" when it is not)."""
        if self._relist_interval and status.last_list is not None \
                and self._clock() - status.last_list >= self._relist_interval:
            return f"--relist-interval {self._relist_interval:g}s"
        return ""

    def _heard(self, status: ResourceSync, *, current: bool = True) -> None:
        """The API answered; ``current`` when everything up to now has been delivered (not a watch just opened)."""
        now = self._clock()
        status.last_success = status.last_heard = now
        status.last_error = ""
        if current:  # a stream just opened has delivered nothing yet
            status.last_event = now
        if status is self.pods and current:
            self._cache.note_pods_current(now)

    def _list(self, status: ResourceSync) -> None:
        listed_at = self._clock()
        version = ""
        if status is self.nodes:
            node_records: list[NodeRecord] = []
            for page in _each_page(self._kube.list_nodes(label_selector=self._selector,
                                                          page_size=self._page_size)):
                node_records.extend(node_record(item, catalog=self._cache.catalog)
                                    for item in page.items)
                version = page.resource_version
            due = self._cache.replace_nodes(node_records)
        else:
            pod_records: list[PodRecord] = []
            listed: set[str] = set()  # every pod's UID: an assumption for a pod not among them is dropped
            ended: set[str] = set()
            catalog = self._cache.catalog
            for page in _each_page(self._kube.list_pods(page_size=self._page_size)):
                for item in page.items:
                    uid = pod_key(item)[0]
                    listed.add(uid)
                    if pod_finished(item):
                        ended.add(uid)
                    # Pods that hold nothing and read fine (most of a cluster) are not kept at all.
                    if not holds_nothing(item):
                        record = pod_record(item, catalog=catalog)
                        if record.usage is not None or record.error:
                            pod_records.append(record)
                version = page.resource_version
            self._cache.replace_pods(pod_records, listed_at=listed_at, listed=listed, ended=ended)
            due = []
        status.resource_version = version
        status.last_list = self._clock()
        status.lists += 1
        self._heard(status)
        if self.nodes.last_list is not None and self.pods.last_list is not None:
            self._cache.mark_synced()
            # The cache now holds hundreds of thousands of long-lived objects; left in the collector's
            # generations, every full collection (triggered by the allocations of a page decode) would walk
            # them all while holding the GIL for tens of milliseconds. Frozen, they are still freed by
            # reference counting when replaced; only cycles among them would stay, and the cache makes none.
            gc.freeze()
        self._answer_handshakes(due)

    def _watch(self, status: ResourceSync) -> None:
        timeout = self._watch_timeout * (1 + random.random())
        if self._relist_interval and status.last_list is not None:
            timeout = min(timeout, status.last_list + self._relist_interval - self._clock())
            if timeout <= 0:
                return

        def opened() -> None:
            status.watching = True
            self._heard(status, current=False)  # events from before this moment may still be on their way

        seconds = max(1, math.ceil(timeout))  # the API takes whole seconds
        if status is self.nodes:
            events = self._kube.watch_nodes(resource_version=status.resource_version, timeout_seconds=seconds,
                                            label_selector=self._selector, on_open=opened,
                                            silence_seconds=self.silence_bound_seconds)
        else:
            events = self._kube.watch_pods(resource_version=status.resource_version, timeout_seconds=seconds,
                                           on_open=opened, silence_seconds=self.silence_bound_seconds)
        try:
            for event in events:
                self._observe(status, event)
                if self._stopping.is_set():
                    return
            # The server ended the stream at its timeout: everything up to now was delivered.
            status.last_event = status.last_heard = status.last_success = self._clock()
        except WatchSilentError:
            # We close it for silence; the server had accepted it and kept it open until now.
            status.last_heard = self._clock()
            raise
        except KubeError:
            # An open stream, heard from within the silence bound, was in step until it broke: the 3 refresh
            # periods of readiness count from the break, not from whenever the last event happened to come.
            if status.watching:
                status.last_success = self._clock()
            raise
        finally:
            status.watching = False

    def _observe(self, status: ResourceSync, event: WatchEvent) -> None:
        metadata = event.object.get("metadata") if isinstance(event.object, dict) else None
        metadata = metadata if isinstance(metadata, dict) else {}
        if event.type == "ERROR":
            raise KubeError(f"watch {status.resource}: {event.object.get('message') or event.object}",
                            status=int(event.object.get("code") or 0))
        if event.type != "BOOKMARK":
            if status is self.nodes:
                node = node_record(event.object, catalog=self._cache.catalog)
                self._cache.apply_node_events([(event.type, node)])
            else:
                pod = pod_record(event.object, catalog=self._cache.catalog)
                self._cache.apply_pod_events([(event.type, pod)])
        status.resource_version = str(metadata.get("resourceVersion") or status.resource_version)
        self._heard(status)

    def _answer_handshakes(self, due: list[tuple[str, tuple[str, ...]]]) -> None:
        if not due:
            return
        value = handshake_value(self._clock())
        for name, keys in due:
            try:
                self._kube.patch_node(name, {"metadata": {"annotations": dict.fromkeys(keys, value)}})
            except KubeError as error:
                log.warning("node %s: cannot write handshake: %s", name, error)
