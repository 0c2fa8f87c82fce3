"""Keeping the cache in step with the API: one list-then-watch loop per resource (nodes, pods).

Each loop lists, replaces the cache's view of that resource, then watches from the list's resourceVersion
until the refresh period is over, and lists again. Running list and watch of one resource on one thread keeps
their events in order, so a list can never undo a newer watch event. A failed list keeps the previous state,
is counted and logged, and is retried with backoff; ``/readyz`` turns 503 when the last good list of either
resource is older than three refresh periods.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hami_web.core import names
from hami_web.kube import GoneError, Kube, KubeError
from hami_web.state.cache import ClusterCache
from hami_web.state.nodes import handshake_value

log = logging.getLogger(__name__)

STALE_AFTER_PERIODS = 3
MAX_BACKOFF_SECONDS = 30.0


@dataclass(slots=True)
class ResourceSync:
    """Progress of one resource's loop, read by readiness and metrics."""

    resource: str
    last_success: float | None = None
    errors: int = 0
    last_error: str = ""


class ClusterSync:
    """Runs the node and pod loops for a `ClusterCache`; `readiness()` is what ``/readyz`` reports."""

    def __init__(self, cache: ClusterCache, kube: Kube, *, refresh_interval_seconds: float = 15.0,
                 node_label_selector: str = "", clock: Callable[[], float] = time.time) -> None:
        self._cache = cache
        self._kube = kube
        self._interval = refresh_interval_seconds
        self._selector = node_label_selector
        self._clock = clock
        self._stopping = threading.Event()
        self.nodes = ResourceSync("nodes")
        self.pods = ResourceSync("pods")
        self._threads: list[threading.Thread] = []

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start both loops on daemon threads (idempotent)."""
        if self._threads:
            return
        self._stopping.clear()
        for status, body in ((self.nodes, self._sync_nodes_once), (self.pods, self._sync_pods_once)):
            thread = threading.Thread(target=self._run, args=(status, body), name=f"sync-{status.resource}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Ask both loops to end and wait a little for them (watches end at their timeout at worst)."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout_seconds)
        self._threads = []

    def sync_now(self) -> None:
        """One synchronous full list of nodes and pods (start-up in tests and the demo)."""
        self._sync_nodes_once(watch=False)
        self._sync_pods_once(watch=False)

    # -- readiness ----------------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """Ready once both resources have been listed and neither list is older than 3 refresh periods."""
        if not self._cache.synced:
            return False, "cluster cache has not completed its first sync"
        now = self._clock()
        for status in (self.nodes, self.pods):
            if status.last_success is None:
                return False, f"{status.resource} never listed"
            age = now - status.last_success
            if age > STALE_AFTER_PERIODS * self._interval:
                detail = f" (last error: {status.last_error})" if status.last_error else ""
                return False, f"{status.resource} last refreshed {age:.0f}s ago{detail}"
        return True, "cluster cache is in sync"

    def refresh_age_seconds(self, resource: str) -> float | None:
        """Seconds since the last good list of ``resource`` (None before the first)."""
        status = self.nodes if resource == "nodes" else self.pods
        return None if status.last_success is None else self._clock() - status.last_success

    # -- loops --------------------------------------------------------------------------------------

    def _run(self, status: ResourceSync, body: Callable[..., None]) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            try:
                body(watch=True)
                backoff = 1.0
            except KubeError as error:
                status.errors += 1
                status.last_error = str(error)
                log.warning("%s sync failed, keeping the previous state, retrying in %.0fs: %s",
                            status.resource, backoff, error)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS, self._interval)
            except Exception:  # a bug must not silently kill the loop that keeps the cache alive
                status.errors += 1
                log.exception("%s sync crashed; retrying", status.resource)
                self._stopping.wait(backoff)

    def _mark_listed(self, status: ResourceSync) -> None:
        status.last_success = self._clock()
        status.last_error = ""
        if self.nodes.last_success is not None and self.pods.last_success is not None:
            self._cache.mark_synced()

    def _sync_nodes_once(self, *, watch: bool) -> None:
        items, version = self._kube.list_nodes(label_selector=self._selector)
        due = self._cache.replace_nodes(items)
        self._mark_listed(self.nodes)
        self._answer_handshakes(due)
        if watch:
            self._watch_until_refresh("nodes", version)

    def _sync_pods_once(self, *, watch: bool) -> None:
        listed_at = self._clock()
        items, version = self._kube.list_pods()
        self._cache.replace_pods(items, listed_at=listed_at)
        self._mark_listed(self.pods)
        if watch:
            self._watch_until_refresh("pods", version)

    def _watch_until_refresh(self, resource: str, version: str) -> None:
        deadline = time.monotonic() + self._interval
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            remaining = max(1, math.ceil(left))  # the API takes whole seconds
            if resource == "nodes":
                events = self._kube.watch_nodes(resource_version=version, timeout_seconds=remaining,
                                                label_selector=self._selector)
                observe = self._cache.observe_node
            else:
                events = self._kube.watch_pods(resource_version=version, timeout_seconds=remaining)
                observe = self._cache.observe_pod
            try:
                for event in events:
                    version = str((event.object.get("metadata") or {}).get("resourceVersion") or version)
                    if event.type != "BOOKMARK":
                        observe(event.type, event.object)
                    if self._stopping.is_set():
                        return
            except GoneError:
                log.info("%s watch expired; listing again", resource)
                return

    def _answer_handshakes(self, node_names: list[str]) -> None:
        value = handshake_value(self._clock())
        for name in node_names:
            try:
                self._kube.patch_node(name, {"metadata": {"annotations": {names.NODE_HANDSHAKE: value}}})
            except KubeError as error:
                log.warning("node %s: cannot write handshake: %s", name, error)
