"""The node locks HAMi's device plugins expect: annotation ``hami.io/mutex.lock`` on the node, and a family's own
(Cambricon's ``cambricon.com/dsmlu.lock``, a bare time) for the pods of that family.

Only one pod at a time may be between "bound" and "devices set up" on a node, because the device plugin
matches its Allocate call to the pod that holds the lock. The lock is taken with a merge patch carrying the
node's resourceVersion, i.e. a compare-and-swap: two binders racing for one node cannot both win. The device
plugin releases it once it has set up the container; a lock whose owner is gone, finished, or older than
``--node-lock-timeout`` is stale and may be taken over, so a crashed plugin cannot wedge a node forever. A bare-time
lock names no owner: it is ours only while it shows the value this process wrote for the pod, and it is stale when
unreadable or older than its rule says (docs/device-families.md#device-families, node locks).

Members of a gang (a PodGroup) land on the same nodes at the same moment and queue for one lock that each holds
only briefly; failing them at once would send each back through kube-scheduler's backoff of seconds. So
`NodeLock.acquire_waiting` polls a held lock with backoff instead, for as long as its caller allows (the binder
gives it ``--node-lock-retry-timeout`` less the bind's calls, which share that deadline).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from hami_web.core import names
from hami_web.core.nodelocks import (
    MUTEX_LOCK,
    LockRule,
    Owner,
    SeenNode,
    age_stale_reason,
    bare_lock_live,
    order_rules,
    stale_reason,
)
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


class _BareClaims:
    """The bare-time lock values this process wrote, or may have written: the only proof that such a lock is ours.

    A value is a time to the second, so two binds of this process on one node may write the same text. A claim is
    *pending* from just before its write until the write's answer, and *confirmed* once the write succeeded: only a
    confirmed claim makes a bind re-entrant; a release also clears a pending one (a write whose outcome is unknown
    may have landed), unless another pod's confirmed claim shows the same value.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._confirmed: dict[tuple[str, str], tuple[str, str, str, float]] = {}  # (node, key): value, ns, pod, at
        self._pending: dict[tuple[str, str, str, str], tuple[str, float]] = {}  # (node, key, ns, pod): value, at

    def expect(self, node: str, key: str, value: str, namespace: str, pod: str, *, now: float,
               forget_before: float) -> None:
        """``namespace/pod`` is about to write ``value``; claims older than ``forget_before`` are dropped (stale by any
        binder's judgement long since)."""
        with self._lock:
            self._confirmed = {k: c for k, c in self._confirmed.items() if c[3] >= forget_before}
            self._pending = {k: c for k, c in self._pending.items() if c[1] >= forget_before}
            self._pending[(node, key, namespace, pod)] = (value, now)

    def settle(self, node: str, keys: Iterable[str], namespace: str, pod: str, *, written: bool) -> None:
        """The write of ``keys`` was answered: written (the claims are confirmed) or refused (they are dropped)."""
        with self._lock:
            for key in keys:
                claim = self._pending.pop((node, key, namespace, pod), None)
                if claim is not None and written:
                    self._confirmed[(node, key)] = (claim[0], namespace, pod, claim[1])

    def holds(self, node: str, key: str, value: str, namespace: str, pod: str) -> bool:
        """Whether ``value`` is the one ``namespace/pod``'s successful write put on ``node``."""
        with self._lock:
            return self._confirmed.get((node, key), ("",))[:3] == (value, namespace, pod)

    def may_hold(self, node: str, key: str, value: str, namespace: str, pod: str) -> bool:
        """`holds`, or a pending write of ``namespace/pod`` put ``value`` there as far as anyone can tell."""
        with self._lock:
            confirmed = self._confirmed.get((node, key))
            if confirmed is not None and confirmed[0] == value:
                return confirmed[1:3] == (namespace, pod)
            pending = self._pending.get((node, key, namespace, pod))
            return pending is not None and pending[0] == value

    def forget(self, node: str, key: str, namespace: str, pod: str) -> None:
        """``namespace/pod``'s claims on lock ``key`` of ``node`` are over (the lock was removed)."""
        with self._lock:
            self._pending.pop((node, key, namespace, pod), None)
            if self._confirmed.get((node, key), ("", "", ""))[1:3] == (namespace, pod):
                del self._confirmed[(node, key)]


class NodeLock:
    """Takes and releases node locks through the API with compare-and-swap and stale-lock takeover."""

    def __init__(self, kube: Kube, *, timeout_seconds: float, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic,
                 on_reread: Callable[[], None] | None = None,
                 rules: Sequence[LockRule] = (MUTEX_LOCK,)) -> None:
        """``on_reread`` is called when a lock write preconditioned on the watch's version met a newer node;
        ``rules`` are every lock a bind may take (the catalog's), which a release looks at."""
        self._kube = kube
        self._rules = order_rules(rules)
        self._claims = _BareClaims()
        self._on_reread = on_reread
        self._timeout_seconds = timeout_seconds
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic

    def acquire_waiting(self, node: str, namespace: str, pod: str, *, wait_seconds: float,
                        rules: Sequence[LockRule] = (MUTEX_LOCK,)) -> tuple[int, str]:
        """`acquire`, looking again with backoff while another pod holds a lock, for up to ``wait_seconds``.

        Returns how many times a lock was found held before all were taken, and `acquire`'s version; raises
        `NodeLockHeld` (naming the holder and the time waited) when one is still held at the deadline, other errors at
        once.
        """
        deadline = self._monotonic() + wait_seconds
        pause = WAIT_FIRST_SECONDS
        waits = 0
        while True:
            try:
                return waits, self.acquire(node, namespace, pod, rules=rules)
            except NodeLockHeld as held:
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    raise NodeLockHeld(f"{held} (waited {round(wait_seconds, 1):g}s)") from None
                waits += 1
                self._sleep(min(pause, remaining))
                pause = min(pause * 2, WAIT_MAX_SECONDS)

    def acquire(self, node: str, namespace: str, pod: str, *, seen: SeenNode | None = None,
                rules: Sequence[LockRule] = (MUTEX_LOCK,)) -> str:
        """Lock ``node`` for ``namespace/pod`` with every lock of ``rules`` (re-entrant), or raise `NodeLockError`.

        The locks are judged in key order and written together in one patch: a pod of two families (a GPU and an
        MLU) holds both or neither, and two binders never each hold one while waiting for the other. With ``seen``
        (the node as the watch last showed it) and every lock free there, or stale by its age, they are taken with
        one write preconditioned on that resourceVersion; a conflict (the node changed since) falls back to reading
        the node. Returns the node's resourceVersion at which every lock was seen free (or ours) and taken — the
        write's precondition: every write that happened before the locks were taken (such as another binder's
        booking, made before it gave a lock up) is at most this version.
        """
        ordered = order_rules(rules)
        if seen is not None and seen.resource_version and self._free_as_seen(node, namespace, pod, seen, ordered):
            writes = {rule.key: self._claim(rule, node, namespace, pod) for rule in ordered}
            try:
                return self._write_locks(node, writes, seen.resource_version, namespace, pod)
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
            annotations = metadata.get("annotations") or {}
            writes = {}
            for rule in ordered:
                value = str(annotations.get(rule.key) or "")
                if self._ours(rule, node, namespace, pod, value):
                    continue
                if value:
                    stale_because = self._stale_reason(rule, value)
                    if not stale_because:
                        raise NodeLockHeld(rule.held_message(node, value))
                    log.info("node %s: taking over stale lock %s=%s (%s)", node, rule.key, value, stale_because)
                writes[rule.key] = self._claim(rule, node, namespace, pod)
            try:
                return self._write_locks(node, writes, str(metadata.get("resourceVersion") or ""), namespace, pod)
            except ConflictError as error:
                last_conflict = str(error)
                self._sleep(BACKOFF_BASE_SECONDS * (2 ** attempt) * (1 + random.random()))
        raise NodeLockError(f"node {node}: lock still contended after {MAX_TRIES} tries: {last_conflict}")

    def _free_as_seen(self, node: str, namespace: str, pod: str, seen: SeenNode,
                      rules: Sequence[LockRule]) -> bool:
        """Whether the watch's copy shows every lock unset, stale by its age, or (HAMi's) one whose owner is done."""
        now = self._clock()
        for rule in rules:
            value = seen.value(rule.key)
            if not value:
                continue
            if self._ours(rule, node, namespace, pod, value):
                return False  # a bind again: the API says whether the lock is still ours
            if rule.key == MUTEX_LOCK.key and seen.owner_done:
                continue
            if bare_lock_live(rule, value, now=now, default_timeout_seconds=self._timeout_seconds):
                return False
        return True

    def _ours(self, rule: LockRule, node: str, namespace: str, pod: str, value: str, *,
              maybe: bool = False) -> bool:
        """Whether ``value`` of ``rule`` on ``node`` is ``namespace/pod``'s: named in it, or (a bare time) the value
        this process's write for that pod put there (``maybe``: or may have put there, its outcome unknown)."""
        if not value:
            return False
        if rule.names_owner:
            return rule.parse(value).owned_by(namespace, pod)
        if maybe:
            return self._claims.may_hold(node, rule.key, value, namespace, pod)
        return self._claims.holds(node, rule.key, value, namespace, pod)

    def _claim(self, rule: LockRule, node: str, namespace: str, pod: str) -> str:
        """The value to write for ``namespace/pod``; a bare-time value is remembered (before it is written, so a write
        whose outcome is unknown can still be undone) as the only proof that it is ours (`_BareClaims`)."""
        now = self._clock()
        value = rule.value(now, namespace, pod)
        if not rule.names_owner:
            self._claims.expect(node, rule.key, value, namespace, pod, now=now,
                                forget_before=now - 2 * rule.timeout(self._timeout_seconds))
        return value

    def _write_locks(self, node: str, writes: dict[str, str], resource_version: str, namespace: str,
                     pod: str) -> str:
        """Write ``writes`` with ``resource_version`` as the precondition; that version once written (or when there
        is nothing to write: every lock is ours already)."""
        if not writes:
            return resource_version
        patch = {"metadata": {"resourceVersion": resource_version or None, "annotations": writes}}
        try:
            self._kube.patch_node(node, patch)
        except (ConflictError, NotFoundError):
            self._claims.settle(node, writes, namespace, pod, written=False)
            raise
        self._claims.settle(node, writes, namespace, pod, written=True)
        return resource_version

    def release(self, node: str, namespace: str, pod: str, *, only_binders: bool = False) -> bool:
        """Remove every lock ``namespace/pod`` holds on ``node`` (``only_binders``: only those no device plugin removes,
        `LockRule.released_by_binder`), in one patch; True when removed. Never touches another's lock (a bare-time lock
        is ours only if it still shows the value this process wrote for the pod)."""
        for attempt in range(MAX_TRIES):
            try:
                current = self._kube.get_node(node)
            except NotFoundError:
                return False
            metadata = current.get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            ours = [rule for rule in self._rules if (rule.released_by_binder or not only_binders)
                    and self._ours(rule, node, namespace, pod, str(annotations.get(rule.key) or ""), maybe=True)]
            if not ours:
                return False
            patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                  "annotations": dict.fromkeys((rule.key for rule in ours), None)}}
            try:
                self._kube.patch_node(node, patch)
            except ConflictError:
                self._sleep(BACKOFF_BASE_SECONDS * (2 ** attempt))
                continue
            for rule in ours:
                self._claims.forget(node, rule.key, namespace, pod)
            return True
        return False

    def _stale_reason(self, rule: LockRule, value: str) -> str:
        """`stale_reason` with the owner pod read from the API (only when its age does not decide already)."""
        now = self._clock()
        lock = rule.parse(value)
        by_age = age_stale_reason(lock, now=now, timeout_seconds=rule.timeout(self._timeout_seconds))
        if by_age or not lock.pod:
            return by_age
        try:
            owner = self._kube.get_pod(lock.namespace, lock.pod)
        except NotFoundError:
            return stale_reason(lock, now=now, timeout_seconds=self._timeout_seconds, owner=Owner.GONE)
        phase = ((owner.get("metadata") or {}).get("annotations") or {}).get(names.POD_BIND_PHASE)
        return stale_reason(lock, now=now, timeout_seconds=self._timeout_seconds, owner=Owner.PRESENT,
                            owner_bind_phase=str(phase or ""))
