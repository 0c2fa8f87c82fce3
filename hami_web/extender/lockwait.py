"""Taking a bind's node locks, and the bounded wait of a gang member that finds them held.

Members of a gang (label ``scheduling.x-k8s.io/pod-group`` or ``spec.schedulingGroup``) land on the same nodes at the
same moment and queue for one lock that each holds only briefly; failing them at once would send each back through
kube-scheduler's backoff of seconds. So such a member waits (`NodeLock.acquire_waiting`) for up to
``--node-lock-retry-timeout`` from the start of its bind, which becomes the bind's deadline for the wait and every call
after it; any other pod is answered at once, and so is a member when ``max_lock_waiters`` binds already wait (each
holds one of the server's few request threads).

With ``--binpack-lock-queue`` a bind first waits in its node's line in the process (`state.bindlines`), with no API
call, until it is first and the watch shows the lock free (released, or its owner done), at most that long: binpack then
sends pods to the fullest node while its lock is held, up to ``--binpack-lock-queue-depth`` binds under way
(docs/performance.md, "Binpack's in-process line"). The lock is then taken as always, with a write preconditioned on
the node's version, so the line only orders and delays: no device is promised twice across two servers. Waiting binds
have threads of their own (`server.worker.ThreadLanes`), as many as slots here; a bind that finds none goes on at once.
"""

from __future__ import annotations

import logging
import time

from hami_web.core.nodelocks import LockRule, SeenNode
from hami_web.extender.bindreads import BindReads
from hami_web.extender.collaborators import BindMetrics
from hami_web.extender.deadlines import BindDeadline
from hami_web.extender.nodelock import NodeLock, NodeLockError, NodeLockHeld
from hami_web.kube import KubeError, deadline_left_seconds
from hami_web.state.budget import WaitSlots
from hami_web.state.faces import LockLines, Placements

log = logging.getLogger(__name__)

# A gang member stops looking at a held lock this share of its deadline early (at most LOCK_WAIT_RESERVE_MAX_SECONDS),
# so the last look at the lock, the pod patch and the Binding still have time before the deadline.
LOCK_WAIT_RESERVE_SHARE = 0.2
LOCK_WAIT_RESERVE_MAX_SECONDS = 2.0


class LockWaiter:
    """Takes a bind's node locks; a gang member whose node is locked waits for them, bounded (see the module)."""

    def __init__(self, *, lock: NodeLock, cache: Placements, reads: BindReads, metrics: BindMetrics | None,
                 wait_seconds: float, max_waiters: int, lines: LockLines | None = None, queue_seconds: float = 0.0,
                 max_queued: int = 1) -> None:
        """``wait_seconds`` is ``--node-lock-retry-timeout`` (0: nobody waits); ``queue_seconds``
        ``--binpack-lock-queue`` (0: no bind queues), ``max_queued`` binds at most at once."""
        self._lock = lock
        self._cache = cache
        self._reads = reads
        self._metrics = metrics
        self._wait_seconds = wait_seconds
        self._lines = lines
        self._queue_seconds = queue_seconds
        self._slots = WaitSlots(max_waiters)
        self._queue_slots = WaitSlots(max_queued)

    def acquire(self, uid: str, namespace: str, name: str, node: str, bind_deadline: BindDeadline,
                rules: tuple[LockRule, ...]) -> str:
        """Take the node locks, returning `NodeLock.acquire`'s version; with ``--binpack-lock-queue`` first wait in the
        node's line for the lock's turn; a gang member whose node is locked waits for them, its bind's deadline then
        ``--node-lock-retry-timeout`` from the bind's start, the wait ending a little early so the calls after it
        still have time. The bind leaves the line when it ends (`Placements.leave_line`)."""
        if self._lines is not None and self._queue_seconds > 0 and self._queue_slots.try_take():
            try:
                seen = self._in_line(self._lines, node, uid, namespace, name)
            finally:
                self._queue_slots.give_back()
        else:
            seen = self._cache.seen_node(node)
        try:
            return self._lock.acquire(node, namespace, name, seen=seen, rules=rules)
        except NodeLockHeld as held:
            group = self._reads.pod_group(namespace, name) if self._wait_seconds > 0 else ""
            if not group:
                raise
            if not self._slots.try_take():
                # Every waiting bind holds a request thread; the filter and the webhook must keep some.
                self._count("no_slot")
                raise
            log.info("bind pod=%s/%s node=%s: %s; pod group %s waits, the bind ending within %gs", namespace, name,
                     node, held, group, self._wait_seconds, extra={"pod": f"{namespace}/{name}", "node": node})
        self._count("started")
        bind_deadline.replace(self._wait_seconds)
        reserve = min(self._wait_seconds * LOCK_WAIT_RESERVE_SHARE, LOCK_WAIT_RESERVE_MAX_SECONDS)
        wait_seconds = max(0.0, (deadline_left_seconds() or 0.0) - reserve)
        try:
            looks, locked_at = self._lock.acquire_waiting(node, namespace, name, wait_seconds=wait_seconds,
                                                          rules=rules)
        except NodeLockHeld:
            self._count("timed_out")
            raise
        except (NodeLockError, KubeError):
            self._count("failed")
            raise
        finally:
            self._slots.give_back()
        self._count("acquired")
        log.info("bind pod=%s/%s node=%s: lock taken after waiting (%d more looks)", namespace, name, node, looks,
                 extra={"pod": f"{namespace}/{name}", "node": node})
        return locked_at

    def _in_line(self, lines: LockLines, node: str, uid: str, namespace: str, name: str) -> SeenNode | None:
        """Wait in ``node``'s line for the lock's turn (`Placements.lock_turn`), at most ``--binpack-lock-queue`` and
        within the bind's deadline less the reserve for its calls; the node as last seen."""
        left = deadline_left_seconds()
        wait = self._queue_seconds if left is None else min(self._queue_seconds, left - LOCK_WAIT_RESERVE_MAX_SECONDS)
        until = time.monotonic() + wait
        waited = False
        while True:
            turn, seen, version = lines.lock_turn(node, uid, namespace, name)
            remaining = until - time.monotonic()
            if turn or remaining <= 0:
                break
            if not waited:
                waited = True
                self._count("queued")
            lines.await_lock_turn(node, version, remaining)
        if waited:
            self._count("queue_released" if turn else "queue_timed_out")
        return seen

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_lock_wait(outcome)
