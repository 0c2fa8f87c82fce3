"""The node lock HAMi's device plugin expects: annotation ``hami.io/mutex.lock`` on the node.

Only one pod at a time may be between "bound" and "devices set up" on a node, because the device plugin
matches its Allocate call to the pod that holds the lock. The lock is taken with a merge patch carrying the
node's resourceVersion, i.e. a compare-and-swap: two binders racing for one node cannot both win. The device
plugin releases it once it has set up the container; a lock whose owner is gone, finished, or older than
``--node-lock-timeout`` is stale and may be taken over, so a crashed plugin cannot wedge a node forever.

Members of a gang (a PodGroup) land on the same nodes at the same moment and queue for one lock that each holds
only briefly; failing them at once would send each back through kube-scheduler's backoff of seconds. So
`NodeLock.acquire_waiting` polls a held lock with backoff instead, for as long as its caller allows (the binder
gives it ``--node-lock-retry-timeout`` less the bind's calls, which share that deadline).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from hami_web.core import names
from hami_web.kube import ConflictError, Kube, NotFoundError

log = logging.getLogger(__name__)

MAX_TRIES = 5
BACKOFF_BASE_SECONDS = 0.02
# Waiting for a held lock: first look again after 100 ms (as HAMi polls), then up to every second.
WAIT_FIRST_SECONDS = 0.1
WAIT_MAX_SECONDS = 1.0
FINISHED_BIND_PHASES = frozenset({"success", "failed"})


class NodeLockError(RuntimeError):
    """The lock could not be taken; the message says who holds it or what failed."""


class NodeLockHeld(NodeLockError):
    """Another pod holds a fresh lock on the node (the only failure worth waiting out)."""


@dataclass(frozen=True, slots=True)
class LockValue:
    """A parsed lock annotation. ``namespace``/``pod`` are empty for HAMi's old owner-less format."""

    taken_at: float | None
    namespace: str
    pod: str

    def owned_by(self, namespace: str, pod: str) -> bool:
        """Whether this lock belongs to ``namespace/pod``."""
        return (self.namespace, self.pod) == (namespace, pod)


def format_lock(now: float, namespace: str, pod: str) -> str:
    """``<RFC3339 UTC>,<namespace>,<pod>``, as newer HAMi writes it."""
    return f"{datetime.fromtimestamp(now, tz=UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{pod}"


def parse_lock(value: str) -> LockValue:
    """Parse a lock annotation; an unreadable time gives ``taken_at=None`` (treated as stale)."""
    parts = value.split(",")
    try:
        taken_at = datetime.fromisoformat(parts[0].strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        taken_at = None
    namespace = parts[1].strip() if len(parts) > 1 else ""
    pod = parts[2].strip() if len(parts) > 2 else ""
    return LockValue(taken_at=taken_at, namespace=namespace, pod=pod)


class NodeLock:
    """Takes and releases node locks through the API with compare-and-swap and stale-lock takeover."""

    def __init__(self, kube: Kube, *, timeout_seconds: float, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._timeout_seconds = timeout_seconds
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic

    def acquire_waiting(self, node: str, namespace: str, pod: str, *, wait_seconds: float) -> int:
        """`acquire`, looking again with backoff while another pod holds the lock, for up to ``wait_seconds``.

        Returns how many times the lock was found held before it was taken; raises `NodeLockHeld` (naming
        the holder and the time waited) when it is still held at the deadline, other errors at once.
        """
        deadline = self._monotonic() + wait_seconds
        pause = WAIT_FIRST_SECONDS
        waits = 0
        while True:
            try:
                self.acquire(node, namespace, pod)
                return waits
            except NodeLockHeld as held:
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    raise NodeLockHeld(f"{held} (waited {round(wait_seconds, 1):g}s)") from None
                waits += 1
                self._sleep(min(pause, remaining))
                pause = min(pause * 2, WAIT_MAX_SECONDS)

    def acquire(self, node: str, namespace: str, pod: str) -> str:
        """Lock ``node`` for ``namespace/pod`` (re-entrant), or raise `NodeLockError`.

        Returns the node's resourceVersion once locked: every write that happened before the lock was taken
        (such as another binder's booking, made before it gave the lock up) is at most this version.
        """
        last_conflict = ""
        for attempt in range(MAX_TRIES):
            try:
                current = self._kube.get_node(node)
            except NotFoundError:
                raise NodeLockError(f"node {node} does not exist") from None
            metadata = current.get("metadata") or {}
            value = (metadata.get("annotations") or {}).get(names.NODE_LOCK)
            if value:
                lock = parse_lock(str(value))
                if lock.owned_by(namespace, pod):
                    return str(metadata.get("resourceVersion") or "")
                stale_because = self._stale_reason(lock)
                if not stale_because:
                    owner = f"{lock.namespace}/{lock.pod}" if lock.pod else f"an unnamed owner since {value}"
                    raise NodeLockHeld(f"node {node} is locked by {owner}")
                log.info("node %s: taking over stale lock of %s/%s (%s)", node, lock.namespace, lock.pod,
                         stale_because)
            patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                  "annotations": {names.NODE_LOCK: format_lock(self._clock(), namespace, pod)}}}
            try:
                locked = self._kube.patch_node(node, patch)
                return str((locked.get("metadata") or {}).get("resourceVersion") or "")
            except ConflictError as error:
                last_conflict = str(error)
                self._sleep(BACKOFF_BASE_SECONDS * (2 ** attempt) * (1 + random.random()))
        raise NodeLockError(f"node {node}: lock still contended after {MAX_TRIES} tries: {last_conflict}")

    def release(self, node: str, namespace: str, pod: str) -> bool:
        """Remove the lock if ``namespace/pod`` holds it; True when removed. Never touches another's lock."""
        for attempt in range(MAX_TRIES):
            try:
                current = self._kube.get_node(node)
            except NotFoundError:
                return False
            metadata = current.get("metadata") or {}
            value = (metadata.get("annotations") or {}).get(names.NODE_LOCK)
            if not value or not parse_lock(str(value)).owned_by(namespace, pod):
                return False
            patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                  "annotations": {names.NODE_LOCK: None}}}
            try:
                self._kube.patch_node(node, patch)
                return True
            except ConflictError:
                self._sleep(BACKOFF_BASE_SECONDS * (2 ** attempt))
        return False

    def _stale_reason(self, lock: LockValue) -> str:
        if lock.taken_at is None:
            return "unreadable lock time"
        age = self._clock() - lock.taken_at
        if age > self._timeout_seconds:
            return f"{age:.0f}s old"
        if not lock.pod:
            return ""
        try:
            owner = self._kube.get_pod(lock.namespace, lock.pod)
        except NotFoundError:
            return "owner pod no longer exists"
        phase = ((owner.get("metadata") or {}).get("annotations") or {}).get(names.POD_BIND_PHASE)
        if phase in FINISHED_BIND_PHASES:
            return f"owner pod bind-phase is {phase}"
        return ""
