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

from hami_web.core import names
from hami_web.core.nodelocks import LockValue, Owner, SeenNode, age_stale_reason, format_lock, parse_lock, stale_reason
from hami_web.kube import ConflictError, Kube, NotFoundError

log = logging.getLogger(__name__)

MAX_TRIES = 5
BACKOFF_BASE_SECONDS = 0.02
# Waiting for a held lock: first look again after 100 ms (as HAMi polls), then up to every second.
WAIT_FIRST_SECONDS = 0.1
WAIT_MAX_SECONDS = 1.0


class NodeLockError(RuntimeError):
    """The lock could not be taken; the message says who holds it or what failed."""


class NodeLockHeld(NodeLockError):
    """Another pod holds a fresh lock on the node (the only failure worth waiting out)."""


class NodeLock:
    """Takes and releases node locks through the API with compare-and-swap and stale-lock takeover."""

    def __init__(self, kube: Kube, *, timeout_seconds: float, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic,
                 on_reread: Callable[[], None] | None = None) -> None:
        """``on_reread`` is called when a lock write preconditioned on the watch's version met a newer node."""
        self._kube = kube
        self._on_reread = on_reread
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

    def acquire(self, node: str, namespace: str, pod: str, *, seen: SeenNode | None = None) -> str:
        """Lock ``node`` for ``namespace/pod`` (re-entrant), or raise `NodeLockError`.

        With ``seen`` (the node as the watch last showed it) and the lock free there, or stale by its age, the
        lock is taken with one write preconditioned on that resourceVersion; a conflict (the node changed since)
        falls back to reading the node. Returns the node's resourceVersion once locked: every write that happened
        before the lock was taken (such as another binder's booking, made before it gave the lock up) is at most
        this version.
        """
        if seen is not None and seen.resource_version and self._free_as_seen(seen):
            try:
                return self._write_lock(node, namespace, pod, seen.resource_version)
            except ConflictError:
                # The node changed since the watch showed it: read it, as without ``seen``.
                log.debug("node %s: changed since the watch showed version %s; reading it to lock it", node,
                          seen.resource_version)
                if self._on_reread is not None:
                    self._on_reread()
            except NotFoundError:
                raise NodeLockError(f"node {node} does not exist") from None
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
                    owner = lock.owner or f"an unnamed owner since {value}"
                    raise NodeLockHeld(f"node {node} is locked by {owner}")
                log.info("node %s: taking over stale lock of %s/%s (%s)", node, lock.namespace, lock.pod,
                         stale_because)
            try:
                return self._write_lock(node, namespace, pod, str(metadata.get("resourceVersion") or ""))
            except ConflictError as error:
                last_conflict = str(error)
                self._sleep(BACKOFF_BASE_SECONDS * (2 ** attempt) * (1 + random.random()))
        raise NodeLockError(f"node {node}: lock still contended after {MAX_TRIES} tries: {last_conflict}")

    def _free_as_seen(self, seen: SeenNode) -> bool:
        """Whether the watch's copy shows no lock, one whose owner succeeded, or one stale by its age."""
        if not seen.lock or seen.owner_done:
            return True
        return bool(age_stale_reason(parse_lock(seen.lock), now=self._clock(), timeout_seconds=self._timeout_seconds))

    def _write_lock(self, node: str, namespace: str, pod: str, resource_version: str) -> str:
        """Write our lock with ``resource_version`` as the precondition; the node's new resourceVersion."""
        patch = {"metadata": {"resourceVersion": resource_version or None,
                              "annotations": {names.NODE_LOCK: format_lock(self._clock(), namespace, pod)}}}
        locked = self._kube.patch_node(node, patch)
        return str((locked.get("metadata") or {}).get("resourceVersion") or "")

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
        """`stale_reason` with the owner pod read from the API (only when its age does not decide already)."""
        now = self._clock()
        by_age = age_stale_reason(lock, now=now, timeout_seconds=self._timeout_seconds)
        if by_age or not lock.pod:
            return by_age
        try:
            owner = self._kube.get_pod(lock.namespace, lock.pod)
        except NotFoundError:
            return stale_reason(lock, now=now, timeout_seconds=self._timeout_seconds, owner=Owner.GONE)
        phase = ((owner.get("metadata") or {}).get("annotations") or {}).get(names.POD_BIND_PHASE)
        return stale_reason(lock, now=now, timeout_seconds=self._timeout_seconds, owner=Owner.PRESENT,
                            owner_bind_phase=str(phase or ""))
