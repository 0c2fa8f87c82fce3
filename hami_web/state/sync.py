"""Keeping the cache in step with the API as client-go's informers do: one reflector per resource.

`ClusterSync` runs a `state.reflector.Reflector` for nodes, one for pods and one for ResourceQuotas (list once,
streamed where the API server offers it, else in pages; then watch from the list's resourceVersion with bookmarks;
list again on 410 Gone, repeated failures, silent watches or ``--relist-interval``; see that module) and feeds them
into the `ClusterCache` through three sinks (`state.quotas` for the quotas), and one for PodDisruptionBudgets while
device-aware preemption is on (`state.budgets`). Other sinks may ride on the same
reflectors (the dashboard's node traits): one watch per resource per process. A further resource is one `register`
call (see the reflector module).

Each object is reduced at once to what scheduling needs (`state.pods.PodRecord`, `state.nodes.NodeRecord`), so no
whole object outlives its page or event. A list that fails part-way leaves the previous state untouched; the
list is retried with backoff. Keeping list and watch of one resource on one thread keeps their events in order,
so a list never undoes a newer event.

``/readyz`` (`readiness`) fails until every registered resource has been listed, and afterwards while a resource
has heard nothing from the API (no list, event, bookmark, nor a watch accepted) beyond the silence bound — that
is, while re-opening and listing fail — or has failed to reach it for 3 refresh periods. An accepted watch that
stays open counts as heard: kube-apiserver sends nothing on a resource that does not change, and the watch is
re-opened at the silence bound anyway (docs/observability.md#probes).

A further thread resyncs every ``--refresh-interval`` from the local state alone (no API request): it
re-judges handshake deadlines and device-plugin-gone decisions, drops assumptions the API never confirmed,
and answers due handshakes. It is also woken once the first sync is complete, and after a node list that showed
handshakes due: a list does not write them itself, one patch per node (5,000 after a restart of a large cluster,
whose device plugins have all reported) on the node reflector's thread would hold up the end of the list, and so
``/readyz`` and the node watch, by tens of seconds, and load the API server while the pod list still streams.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hami_web.kube import JsonObject, Kube, KubeError
from hami_web.state.budgets import PATH as BUDGETS_PATH
from hami_web.state.budgets import RESOURCE as BUDGETS
from hami_web.state.budgets import budget_sink
from hami_web.state.faces import BudgetFeed, CacheFeed, ClusterFeed
from hami_web.state.nodes import NodeRecord, handshake_value, node_name, node_record
from hami_web.state.pods import PodRecord, holds_nothing, pod_finished, pod_key, pod_record
from hami_web.state.quotas import RESOURCE as QUOTAS
from hami_web.state.quotas import quota_key, quota_sink
from hami_web.state.reduced import namespaced_key
from hami_web.state.reflector import (
    LIST_PAGE_SIZE,
    WATCH_SILENCE_BOUND_SECONDS,
    WATCH_TIMEOUT_SECONDS,
    KubeSource,
    Reflector,
    ReflectorOptions,
    ResourceSync,
)

__all__ = ["LIST_PAGE_SIZE", "ClusterSync", "ResourceSync"]

log = logging.getLogger(__name__)

STALE_AFTER_PERIODS = 3

HandshakesDue = list[tuple[str, tuple[str, ...]]]


@dataclass(slots=True)
class _NodeListing:
    sink: NodeCacheSink
    records: list[NodeRecord] = field(default_factory=list)

    def add(self, key: str, obj: JsonObject) -> None:
        self.records.append(node_record(obj, catalog=self.sink.cache.catalog))

    def done(self) -> None:
        self.sink.answer(self.sink.cache.replace_nodes(self.records))


@dataclass(slots=True)
class NodeCacheSink:
    """Nodes into the cache; the handshakes a list shows due are handed to ``answer``."""

    cache: CacheFeed
    answer: Callable[[HandshakesDue], None]  # handed the handshakes a list shows due (ClusterSync defers them)

    def listing(self) -> _NodeListing:
        return _NodeListing(self)

    def apply(self, kind: str, key: str, obj: JsonObject) -> None:
        self.cache.apply_node_events([(kind, node_record(obj, catalog=self.cache.catalog))])

    def current(self, at: float) -> None:
        pass


@dataclass(slots=True)
class _PodListing:
    cache: CacheFeed
    listed_at: float
    records: list[PodRecord] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # every pod's UID: an assumption for a pod not among them is dropped
    ended: set[str] = field(default_factory=set)

    def add(self, key: str, obj: JsonObject) -> None:
        self.listed.add(key)
        if pod_finished(obj):
            self.ended.add(key)
        # Pods that hold nothing and read fine (most of a cluster) are not kept at all.
        if not holds_nothing(obj):
            record = pod_record(obj, catalog=self.cache.catalog)
            if record.usage is not None or record.error:
                self.records.append(record)

    def done(self) -> None:
        self.cache.replace_pods(self.records, listed_at=self.listed_at, listed=self.listed, ended=self.ended)


@dataclass(slots=True)
class PodCacheSink:
    """Pods into the cache, and how current the pod stream is (assumptions expire against it)."""

    cache: CacheFeed
    clock: Callable[[], float]

    def listing(self) -> _PodListing:
        return _PodListing(self.cache, listed_at=self.clock())

    def apply(self, kind: str, key: str, obj: JsonObject) -> None:
        self.cache.apply_pod_events([(kind, pod_record(obj, catalog=self.cache.catalog))])

    def current(self, at: float) -> None:
        self.cache.note_pods_current(at)


class ClusterSync:
    """Runs the reflectors (nodes, pods, any registered) and the resync; `readiness()` is what ``/readyz`` says."""

    def __init__(self, cache: ClusterFeed, kube: Kube, *, refresh_interval_seconds: float = 15.0,
                 relist_interval_seconds: float = 0.0, node_label_selector: str = "",
                 clock: Callable[[], float] = time.time, page_size: int = LIST_PAGE_SIZE,
                 watch_timeout_seconds: float = WATCH_TIMEOUT_SECONDS,
                 watch_silence_bound_seconds: float = WATCH_SILENCE_BOUND_SECONDS,
                 streaming_lists: bool = True, budgets: BudgetFeed | None = None) -> None:
        """``budgets``: also watch PodDisruptionBudgets into it, for device-aware preemption (docs/preemption.md)."""
        self._cache = cache
        self._kube = kube
        self._interval = refresh_interval_seconds
        self._clock = clock
        self.silence_bound_seconds = watch_silence_bound_seconds
        self.options = ReflectorOptions(refresh_interval_seconds=refresh_interval_seconds,
                                        relist_interval_seconds=relist_interval_seconds, page_size=page_size,
                                        watch_timeout_seconds=watch_timeout_seconds,
                                        silence_bound_seconds=watch_silence_bound_seconds,
                                        streaming_lists=streaming_lists)
        self.resyncs = 0
        self._stopping = threading.Event()
        self._resync_due = threading.Event()  # wakes the resync before its interval (see the module)
        self._threads: list[threading.Thread] = []
        self.reflectors: dict[str, Reflector] = {}
        nodes = self.register(Reflector(KubeSource.collection(kube, "nodes", "/api/v1/nodes", node_name,
                                                              label_selector=node_label_selector), self.options, clock))
        nodes.add_sink(NodeCacheSink(cache, self._listed_handshakes))
        pods = self.register(Reflector(KubeSource.collection(kube, "pods", "/api/v1/pods", lambda pod: pod_key(pod)[0]),
                                       self.options, clock))
        pods.add_sink(PodCacheSink(cache, clock))
        # ResourceQuota objects: the namespaces' device limits (docs/quotas.md#namespace-quotas).
        quotas = self.register(Reflector(KubeSource.collection(kube, QUOTAS, "/api/v1/resourcequotas", quota_key),
                                         self.options, clock))
        quotas.add_sink(quota_sink(cache))
        if budgets is not None:
            self.register(Reflector(KubeSource.collection(kube, BUDGETS, BUDGETS_PATH, namespaced_key), self.options,
                                    clock)).add_sink(budget_sink(budgets))
        self.nodes = nodes.status
        self.pods = pods.status
        self.quotas = quotas.status

    def register(self, reflector: Reflector) -> Reflector:
        """Run ``reflector`` with the others: the cache is synced once all have listed, and readiness and metrics
        report each. Register before `start`."""
        self.reflectors[reflector.name] = reflector
        reflector.on_listed(self._listed)
        return reflector

    def reflector(self, resource: str) -> Reflector:
        """The reflector of ``resource`` ("nodes", "pods"), to add a sink to it before `start`."""
        return self.reflectors[resource]

    def statuses(self) -> list[ResourceSync]:
        """Every resource's progress, in registration order (metrics)."""
        return [reflector.status for reflector in self.reflectors.values()]

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the list/watch loops and the resync on daemon threads (idempotent)."""
        if self._threads:
            return
        self._stopping.clear()
        self._resync_due.clear()
        targets: list[tuple[str, Callable[..., None], tuple[object, ...]]] = [
            (f"sync-{name}", reflector.run, (self._stopping,)) for name, reflector in self.reflectors.items()]
        targets.append(("sync-resync", self._resync_loop, ()))
        for name, target, args in targets:
            thread = threading.Thread(target=target, args=args, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Ask the loops to end and wait a little for them (an open watch ends at its next event at worst)."""
        self._stopping.set()
        self._resync_due.set()
        for thread in self._threads:
            thread.join(timeout_seconds)
        self._threads = []

    def sync_now(self) -> None:
        """One synchronous full list of every resource, then a resync that answers the due handshakes (start-up in
        tests and the demo)."""
        for reflector in self.reflectors.values():
            stream = reflector.list_once()
            if stream is not None:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        self._answer_handshakes(self._cache.resync())

    def resync(self) -> None:
        """Re-judge the local state (no API list) and answer due handshakes."""
        if not self._cache.synced:
            return
        self._answer_handshakes(self._cache.resync())
        self.resyncs += 1
        for status in self.statuses():
            if status.watching and not status.last_error:
                status.last_success = self._clock()

    # -- readiness ----------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """Ready once every resource is listed, unless one has failed to reach the API for 3 refresh periods
        or has had no accepted watch open and heard nothing (no list, event or bookmark) beyond the silence bound."""
        if not self._cache.synced:
            return False, "cluster cache has not completed its first sync"
        now = self._clock()
        for status in self.statuses():
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
        status = self.reflectors[resource].status
        return None if status.last_success is None else self._clock() - status.last_success

    def silence_seconds(self, resource: str) -> float | None:
        """Seconds since ``resource``'s last list, event, bookmark or watch the server ended (None before a list).

        On a resource that does not change this grows past the bound on a healthy watch (no bookmark is sent).
        """
        status = self.reflectors[resource].status
        return None if status.last_event is None else max(0.0, self._clock() - status.last_event)

    # -- loops --------------------------------------------------------------------------------------

    def _listed(self) -> None:
        """A reflector finished a list: once every resource has been listed, the cache is synced."""
        if all(status.last_list is not None for status in self.statuses()):
            self._cache.mark_synced()
            # The cache now holds hundreds of thousands of long-lived objects; left in the collector's
            # generations, every full collection (triggered by the allocations of a page decode) would walk
            # them all while holding the GIL for tens of milliseconds. Frozen, they are still freed by
            # reference counting when replaced; only cycles among them would stay, and the cache makes none.
            gc.freeze()
            self._resync_due.set()  # the handshakes the lists showed due are answered now, on the resync's thread

    def _listed_handshakes(self, due: HandshakesDue) -> None:
        """A node list showed handshakes due: the resync answers them (it finds them due again in the cache), once
        the first sync is complete; not this list's thread (see the module)."""
        if due:
            self._resync_due.set()

    def _resync_loop(self) -> None:
        while not self._stopping.is_set():
            self._resync_due.wait(self._interval)
            self._resync_due.clear()
            if self._stopping.is_set():
                return
            try:
                self.resync()
            except Exception:
                log.exception("resync failed; trying again in %.0fs", self._interval)

    def _answer_handshakes(self, due: HandshakesDue) -> None:
        if not due:
            return
        value = handshake_value(self._clock())
        for name, keys in due:
            try:
                self._kube.patch_node(name, {"metadata": {"annotations": dict.fromkeys(keys, value)}})
            except KubeError as error:
                log.warning("node %s: cannot write handshake: %s", name, error)
