"""``/bind``: lock the node, check the placement, create the Binding carrying the booking
(docs/deployment.md#high-availability-active-and-standby).

The filter writes nothing: this is the one place that writes a booking, and it is checked before it reaches a device.
The happy path is two calls (docs/webhook-and-extender.md#the-scheduler-extender; ``hami_web_bind_api_calls`` counts
them): the node lock (one write preconditioned on the node's resourceVersion from the watch), then the Binding, whose
annotations kube-apiserver copies onto the pod in the same write that sets ``spec.nodeName`` (pods/binding storage,
``setPodHostAndAnnotations``): HAMi's device annotations, ``bind-phase=allocating``, ``hami.io/vgpu-node``. The Binding
carries the pod's uid and the resourceVersion kube-scheduler sent to ``/filter`` as preconditions, so a pod bound or
booked by another binder since (409) is read and judged before anything of ours is written, and a pod is never bound
without its booking. kube-scheduler's leader election is not a fence: a second extender may have booked the same devices
from a cache that had not seen ours. Between the two calls the placement is checked against every other booking on the
node, all written before the lock we hold was taken: from the cache when its pod stream has applied everything up to
that version, else from one list of the node's pods at that version (a third call). A placement that no longer fits
is refused before anything is written: the lock released, the placement dropped, a ``BindingFailed`` event;
kube-scheduler filters the pod again.

A pod whose namespace has a device quota on what it books (docs/quotas.md#namespace-quotas) is booked apart: the quota
spans nodes, so the booking is patched onto the pod first, the node's and the namespace's bookings read at or after that
write, and only then the Binding created (four calls or five); of two binders racing in one namespace, the later writer
reads the earlier one's booking. A placement that no longer fits then is voided (``bind-phase=failed``: an unbound pod
so marked holds nothing); HAMi's device plugin acts on bound pods only, so a voided booking never reaches a device.

Each step of `Binder` either returns or raises `_Abort` naming the failure's `BindFailure` kind and what it may have
left; `_abort` cleans that up, and the answer is a `BindOutcome` (`extender.outcomes`). A member of a gang that finds
the node locked waits for the lock (at most ``max_lock_waiters`` at once); any other pod is answered at once. Only a pod
this process placed (same uid, namespace, name and node) is bound; the one exception is a pod that asks for no device
of ours (a count of 0, which the webhook routes to us as HAMi v2.10 does): read back, it is bound as HAMi binds it,
with no lock and no booking. Anything else is refused before any lock or pod is touched. A bind's calls share one
deadline (``--extender-deadline``, or ``--node-lock-retry-timeout`` for a gang member that waits) so the answer beats
kube-scheduler's 30 s; the cleanup after a failure gets ``min(deadline/3, 3 s)`` more. When the Binding's outcome is
unknown, the pod is read back: bound means success; unreadable means the booking and our lock stay and kube-scheduler
is told to retry.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import NoReturn

from hami_web.core import names
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.grants import bind_annotations, booking_locks, cleared_annotations
from hami_web.core.nodelocks import LockRule
from hami_web.core.requests import RequestDefaults, RequestError, pod_request
from hami_web.extender.bindreads import BindReads
from hami_web.extender.collaborators import BindMetrics, EventSink
from hami_web.extender.deadlines import BindDeadline, after_deadline_seconds
from hami_web.extender.lockwait import LockWaiter
from hami_web.extender.nodelock import NodeLock, NodeLockError
from hami_web.extender.outcomes import BindFailure, BindOutcome, BindRefused, BindRequest, Bound, UnreadableArgs
from hami_web.kube import (
    ConflictError,
    InvalidError,
    JsonObject,
    Kube,
    KubeError,
    NotFoundError,
    counting_calls,
    deadline,
)
from hami_web.state.faces import LockLines, Placements
from hami_web.state.pods import PodUsage

log = logging.getLogger(__name__)



class _Abort(Exception):
    """A step of the bind cannot go on: the bind answers ``message``.

    For a ``kind`` that cleans up (`BindFailure.cleaned_up`), ``locked`` says our node lock may stand (it is
    released), ``annotated`` that our booking may stand on the pod (it is voided); ``in_cleanup_budget`` that the
    step already runs in the budget after the deadline (`BindDeadline.enter_cleanup`).
    """

    def __init__(self, message: str, *, kind: BindFailure = BindFailure.FAILED, locked: bool = True,
                 annotated: bool = True, in_cleanup_budget: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.locked = locked
        self.annotated = annotated
        self.in_cleanup_budget = in_cleanup_budget


class _AlreadyBound(Exception):
    """The pod is bound to the node with our booking: an earlier bind of it landed, its answer was lost."""


class Binder:
    """Answers kube-scheduler's bind calls: a `BindRequest` in, a `BindOutcome` out, reported once (log, event,
    metrics)."""

    def __init__(self, *, cache: Placements, kube: Kube, events: EventSink, node_lock: NodeLock,
                 metrics: BindMetrics | None = None, clock: Callable[[], float] = time.time,
                 deadline_seconds: float = 15.0, lock_wait_seconds: float = 0.0, max_lock_waiters: int = 1,
                 catalog: DeviceCatalog = DEFAULT_CATALOG, pods_version: Callable[[], str] = str,
                 lock_queue_seconds: float = 0.0, max_queued: int = 1, lines: LockLines | None = None) -> None:
        """``deadline_seconds`` is ``--extender-deadline``; ``lock_wait_seconds`` (``--node-lock-retry-timeout``)
        is the whole deadline of a gang member's bind that waits for a held lock (0: nobody waits);
        ``lock_queue_seconds`` (``--binpack-lock-queue``) how long a bind waits in its node's line (``lines``; None: no
        line) for the lock, ``max_queued`` binds at once;
        ``pods_version`` the resourceVersion up to which the cache has applied the pod stream ("" unknown: every
        placement is then checked against a list of the node's pods)."""
        self._deadline_seconds = deadline_seconds
        self._catalog = catalog
        self._cache = cache
        self._kube = kube
        self._events = events
        self._lock = node_lock
        self._metrics = metrics
        self._clock = clock
        self._reads = BindReads(kube=kube, cache=cache, catalog=catalog, pods_version=pods_version)
        lines = lines if lock_queue_seconds > 0 else None  # no line: no bind joins or leaves one
        self._waiter = LockWaiter(lock=node_lock, cache=cache, reads=self._reads, metrics=metrics,
                                  wait_seconds=lock_wait_seconds, max_waiters=max_lock_waiters,
                                  lines=lines, queue_seconds=lock_queue_seconds, max_queued=max_queued)
        self._lines = lines
        self._request_defaults = RequestDefaults.of(catalog)

    def bind(self, request: BindRequest | UnreadableArgs) -> BindOutcome:
        """Bind one pod to the node kube-scheduler picked; every failure is an outcome (`BindRefused`)."""
        outcome = self._decide(request)
        self._report(outcome)
        return outcome

    def _decide(self, request: BindRequest | UnreadableArgs) -> BindOutcome:
        if isinstance(request, UnreadableArgs):
            return BindRefused(BindFailure.BAD_REQUEST, request.error, request)
        ref, node = request.ref, request.node
        placed = self._cache.placed(ref.uid)
        if placed is None or (placed.namespace, placed.name) != (ref.namespace, ref.name):
            # Not ours to bind, unless it asks for no device at all: nothing is touched (no lock, no pod patch, the
            # booking of the real uid stays).
            return self._bind_deviceless(request)
        if placed.node != node:
            return self._abort(request, _Abort(f"pod {ref.key} was given devices on node {placed.node}, not {node}; "
                                               f"filter it again", locked=False, annotated=False),
                               budget=self._deadline_seconds)
        with counting_calls() as calls:
            outcome = self._bind_placed(request, placed)
        if self._metrics is not None:
            self._metrics.observe_bind_calls(calls.calls)
        return outcome

    def _bind_deviceless(self, request: BindRequest) -> BindOutcome:
        """Bind a pod that asks for no device of ours, as HAMi v2.10's ``Bind`` binds any pod its filter passed: a
        count of 0 (``nvidia.com/gpu: 0``) is routed to us by the webhook as HAMi routes it, and ``/filter`` passes it
        on every node. The pod is read first: the same uid, unbound, asking for nothing we book; else it is refused
        as not placed by us, and nothing is touched."""
        ref, node = request.ref, request.node
        refusal = BindRefused(BindFailure.NOT_OURS, f"pod {ref.key} (uid {ref.uid}) was not placed by this hami-web "
                              f"(or its placement was dropped); kube-scheduler must filter it first", request)
        with deadline(self._deadline_seconds):
            try:
                pod = self._kube.get_pod(ref.namespace, ref.name)
            except KubeError:
                return refusal
            try:
                asks = pod_request(pod, self._request_defaults).asks_for_gpu
            except RequestError:
                return refusal
            if (pod.get("metadata") or {}).get("uid") != ref.uid or asks:
                return refusal
            if (pod.get("spec") or {}).get("nodeName"):
                return Bound(request, devices="") if pod["spec"]["nodeName"] == node else refusal
            try:
                self._kube.bind_pod(ref.namespace, ref.name, node, uid=ref.uid)
            except KubeError as error:
                return BindRefused(BindFailure.FAILED, f"pod {ref.key} asks for no device: its Binding to {node} "
                                   f"failed: {error}", request)
        return Bound(request, devices="")

    def _bind_placed(self, request: BindRequest, placed: PodUsage) -> BindOutcome:
        """The saga, step by step under the bind's deadline. On the happy path two calls: lock the node, check the
        placement against the other bookings on the node (the cache, when its pod stream has caught up with the
        lock; else one list), create the Binding carrying the booking. A pod whose namespace has a device quota on
        what it books, or that carries an earlier booking's MIG reservations a Binding cannot remove, is booked apart
        first (`_books_apart`). A step that cannot go on raises `_Abort`; what it may have left (our lock, our
        booking, the placement) is cleaned up before the answer."""
        node = request.node
        locked_at = ""
        with contextlib.ExitStack() as scope:
            bind_deadline = BindDeadline(scope, self._deadline_seconds)
            if self._lines is not None:  # binpack's in-process line (`extender.lockwait`)
                scope.callback(self._lines.leave_line, node, placed.uid)
            try:
                locked_at = self._lock_node(placed, node, bind_deadline)
                self._cache.reassume(placed)  # written from here on; the watch confirms it
                if self._books_apart(placed):
                    written = self._book(placed, node)
                    self._verify_booking(placed, node, written)
                    self._create_binding(placed, node, bind_deadline)
                else:
                    self._verify_placement(placed, node, locked_at)
                    self._bind_with_booking(placed, node, bind_deadline)
            except _AlreadyBound:
                pass  # a retry after a Binding whose answer was lost: done; our lock stays as after a bind
            except _Abort as abort:
                return self._abort(request, abort, budget=bind_deadline.seconds)
            self._cache.mark_bound(placed.uid, locked_at=locked_at)
            self._release_binders_locks(placed, node)
        return Bound(request, devices=placed.devices_text)

    def _books_apart(self, placed: PodUsage) -> bool:
        """Whether the booking is patched before the Binding (four calls) instead of riding on it: a namespace's device
        quota spans nodes, which the node lock does not serialise, so the booking must stand before the read that
        checks it (docs/quotas.md#namespace-quotas); and a Binding cannot remove the MIG reservations of an earlier
        booking (`cleared_annotations`)."""
        return bool(placed.leftover_keys.intersection(cleared_annotations(placed.grants, self._catalog))) \
            or self._reads.quota_applies(placed)

    def _release_binders_locks(self, placed: PodUsage, node: str) -> None:
        """Once bound, remove the locks no device plugin removes (`BIND_LOCK`, taken for the families HAMi binds
        without a lock); the others stay for the device plugin, as HAMi leaves them. A failed removal is logged: the
        lock is stale within a minute."""
        if not any(rule.released_by_binder for rule in self._locks(placed)):
            return
        try:
            self._lock.release(node, placed.namespace, placed.name, only_binders=True)
        except KubeError as error:
            log.warning("bind pod=%s/%s node=%s: cannot remove the bind lock: %s", placed.namespace, placed.name,
                        node, error)

    # -- the steps -----------------------------------------------------------------------------------

    def _lock_node(self, placed: PodUsage, node: str, bind_deadline: BindDeadline) -> str:
        """Step 1: take the node locks of the families the pod holds devices of (`_locks`; `_acquire`); the node's
        resourceVersion at which they were taken (`NodeLock.acquire`).

        A lock held by another pod answers at once (kube-scheduler retries; nothing changed, the booking stays). A
        failed lock write may still have landed: the cleanup releases it (release only removes ours).
        """
        try:
            return self._waiter.acquire(placed.uid, placed.namespace, placed.name, node, bind_deadline,
                                        self._locks(placed))
        except NodeLockError as error:
            raise _Abort(str(error), kind=BindFailure.LOCKED) from None
        except KubeError as error:
            raise _Abort(f"cannot lock node {node}: {error}", annotated=False) from None

    def _book(self, placed: PodUsage, node: str) -> JsonObject:
        """Step 2: write the booking onto the pod; the pod as written.

        The pod as kube-scheduler sent it to /filter is the precondition: unchanged since, it is still ours and
        unbound, so no read is needed. Changed (409), replaced (the uid precondition fails as "uid is immutable",
        422) or sent without a version, it is read and judged (`_pod_still_unbound`) and written at the version read.
        """
        where = f"pod {placed.namespace}/{placed.name}"
        if placed.resource_version:
            try:
                return self._write_booking(placed, node, placed.resource_version)
            except ConflictError:
                log.debug("bind %s: changed since kube-scheduler sent version %s; reading it", where,
                          placed.resource_version)
            except NotFoundError:
                raise _Abort(f"{where} no longer exists", annotated=False) from None
            except InvalidError:
                pass  # refused, nothing written: the read below says why
            except KubeError as error:
                raise _Abort(f"cannot write the device booking onto the pod: {error}") from None
        pod = self._reread_pod(placed, node)
        try:
            return self._write_booking(placed, node, str((pod.get("metadata") or {}).get("resourceVersion") or ""))
        except ConflictError as error:  # changed meanwhile: nothing of ours was written
            raise _Abort(f"{where} changed while its devices were being booked ({error}); filter it again",
                         annotated=False) from None
        except KubeError as error:
            raise _Abort(f"cannot write the device booking onto the pod: {error}") from None

    def _verify_booking(self, placed: PodUsage, node: str, written: JsonObject) -> None:
        """Step 3: the placement must still fit beside every other booking the API shows on the node (`verify`), and
        its namespace's device quota beside the namespace's other bookings (`BindReads.quota_excess`)."""
        version = str((written.get("metadata") or {}).get("resourceVersion") or "")
        try:
            conflicts = self.verify(placed, node, not_older_than=version)
        except KubeError as error:
            raise _Abort(f"cannot read node {node}'s pods to verify the placement: {error}") from None
        if conflicts:
            raise _Abort(f"devices given to pod {placed.namespace}/{placed.name} on node {node} are no longer free "
                         f"({conflicts}); another scheduler booked them first; filter it again",
                         kind=BindFailure.CONFLICT)
        try:
            excess = self._reads.quota_excess(placed, not_older_than=version)
        except KubeError as error:
            raise _Abort(f"cannot read namespace {placed.namespace}'s pods to verify its device quota: {error}") \
                from None
        if excess:
            raise _Abort(f"pod {placed.namespace}/{placed.name} would take its namespace past its device quota "
                         f"({excess}); another scheduler booked first or the quota was lowered; filter it again",
                         kind=BindFailure.CONFLICT)

    def _verify_placement(self, placed: PodUsage, node: str, locked_at: str) -> None:
        """Step 2 of the two-call bind: the placement must fit beside every other booking on the node, all written
        before ``locked_at`` (`BindReads.conflicts`): the cache tells when it has caught up with that version
        (`BindReads.cached_conflicts`, no call), given `bindreads.POD_STREAM_WAIT_SECONDS` to do so (a bind that
        took a lock just released, as binpack's line does, is often a few milliseconds ahead of the pod stream);
        otherwise, or when it sees a conflict, one list decides."""
        cached = self._reads.cached_conflicts(placed, node, not_older_than=locked_at)
        if cached is None and self._reads.wait_for_pods(locked_at):  # the cache could not tell: wait, then ask again
            cached = self._reads.cached_conflicts(placed, node, not_older_than=locked_at)
        if cached == "":
            return
        if self._metrics is not None:
            self._metrics.observe_bind_reread("node_pods")
        try:
            conflicts = self.verify(placed, node, not_older_than=locked_at)
        except KubeError as error:
            raise _Abort(f"cannot read node {node}'s pods to verify the placement: {error}", annotated=False) \
                from None
        if conflicts:
            raise _Abort(f"devices given to pod {placed.namespace}/{placed.name} on node {node} are no longer free "
                         f"({conflicts}); another scheduler booked them first; filter it again",
                         kind=BindFailure.CONFLICT, annotated=False)

    def _bind_with_booking(self, placed: PodUsage, node: str, bind_deadline: BindDeadline) -> None:
        """Step 3 of the two-call bind: the Binding carrying the booking, preconditioned on the uid and the version
        kube-scheduler sent to /filter: bound and booked in one write, or neither. A pod changed since (409) is read,
        judged (`BindReads.pod_still_unbound`) and bound once more at the version read (one sent without a version is
        read first). An unknown outcome is settled as `_create_binding` settles it."""
        namespace, name, uid = placed.namespace, placed.name, placed.uid
        where = f"pod {namespace}/{name}"
        annotations = self._booking_annotations(placed, node)
        version = placed.resource_version
        if not version:  # sent without one: the pod is read and judged first, and bound at the version read
            pod = self._reread_pod(placed, node)
            if self._reads.leftovers(pod, placed):
                raise _Abort(f"{where} changed while its devices were being bound; filter it again", annotated=False)
            version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        for attempt in range(2):
            try:
                self._kube.bind_pod(namespace, name, node, uid=uid, resource_version=version, annotations=annotations)
                return
            except NotFoundError:
                raise _Abort(f"{where} no longer exists", annotated=False) from None
            except ConflictError:
                pass
            except KubeError as error:
                if error.outcome_unknown:
                    self._settle_unknown_binding(placed, node, error, bind_deadline)
                raise _Abort(str(error), annotated=False) from None
            pod = self._reread_pod(placed, node)
            if attempt or self._reads.leftovers(pod, placed):
                break
            version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        raise _Abort(f"{where} changed while its devices were being bound; filter it again", annotated=False)

    def _reread_pod(self, placed: PodUsage, node: str) -> JsonObject:
        """The pod as the API has it now, after a write preconditioned on an older version met a newer one: still ours
        and unbound, or the bind ends (`_AlreadyBound` when an earlier bind of it landed here)."""
        if self._metrics is not None:
            self._metrics.observe_bind_reread("pod")
        try:
            pod, refusal = self._reads.pod_still_unbound(placed)
        except KubeError as error:
            raise _Abort(f"cannot read pod {placed.namespace}/{placed.name}: {error}", annotated=False) from None
        if refusal and pod is not None and self._reads.bound_here(pod, placed, node):
            raise _AlreadyBound
        if refusal or pod is None:
            raise _Abort(refusal, kind=BindFailure.CONFLICT, annotated=False)
        return pod

    def _create_binding(self, placed: PodUsage, node: str, bind_deadline: BindDeadline) -> None:
        """Step 4 of a booking written apart: create the Binding. When its outcome is unknown (no answer, or "already
        assigned" on a retry), the pod is read back (`_settle_unknown_binding`)."""
        try:
            self._kube.bind_pod(placed.namespace, placed.name, node, uid=placed.uid)
            return
        except KubeError as failed:
            error = failed
        if not (error.outcome_unknown or isinstance(error, ConflictError)):
            raise _Abort(str(error))
        self._settle_unknown_binding(placed, node, error, bind_deadline)

    def _settle_unknown_binding(self, placed: PodUsage, node: str, error: KubeError,
                                bind_deadline: BindDeadline) -> NoReturn:
        """A Binding whose outcome is unknown: the pod is read back in the cleanup budget. Bound here is success;
        unreadable keeps the booking and our lock (the pod may be running on those devices) and tells kube-scheduler
        to retry; unbound voids the booking (a Binding still on its way then meets a changed pod)."""
        namespace, name, uid = placed.namespace, placed.name, placed.uid
        cleanup = bind_deadline.enter_cleanup()  # the request's deadline may be spent
        with deadline(cleanup / 2, within_current=True):
            bound = self._reads.bound_to(namespace, name, uid)
        if bound == node:
            raise _AlreadyBound
        if bound is None and error.outcome_unknown:
            raise _Abort(f"pod {namespace}/{name}: no answer to its Binding to {node} ({error}); its devices and the "
                         f"node lock stay until the API shows whether it was bound", kind=BindFailure.UNKNOWN)
        raise _Abort(str(error), in_cleanup_budget=True)

    def _write_booking(self, placed: PodUsage, node: str, resource_version: str) -> JsonObject:
        """Write the booking onto the pod in one patch; `ConflictError` when the pod is not at ``resource_version``.

        Preconditions: the pod of that name has our uid, and nobody (another extender binding the same pod, a Binding)
        changed it since that version was read. No label, as on the Binding (which cannot write one).
        """
        return self._kube.patch_pod(placed.namespace, placed.name, {"metadata": {
            "uid": placed.uid, "resourceVersion": resource_version or None,
            "annotations": {**cleared_annotations(placed.grants, self._catalog),
                            **self._booking_annotations(placed, node)}}})

    def _booking_annotations(self, placed: PodUsage, node: str) -> dict[str, str]:
        """The booking as pod annotations: HAMi's device annotations, ``vgpu-node``, ``bind-phase=allocating`` and
        the times."""
        clock = self._clock()
        now = str(int(clock))
        return {names.POD_ASSIGNED_NODE: node, names.POD_ASSIGNED_TIME: now,
                **bind_annotations(placed.grants, self._catalog, now_seconds=int(now), node=node,
                                   now_ns=int(clock * 10**9), containers=placed.container_names),
                names.POD_BIND_PHASE: "allocating", names.POD_BIND_TIME: now}

    def verify(self, placed: PodUsage, node: str, *, not_older_than: str) -> str:
        """What of ``placed`` no longer fits on ``node`` beside the other pods' bookings ("" when all fits); see
        `BindReads.conflicts`."""
        return self._reads.conflicts(placed, node, not_older_than=not_older_than)

    def _locks(self, placed: PodUsage) -> tuple[LockRule, ...]:
        """The node locks this bind takes: those of exactly the families the pod holds devices of (HAMi's
        ``hami.io/mutex.lock`` once, Cambricon's own for MLUs), in the one order every binder uses."""
        return booking_locks(placed.grants, self._catalog)

    def _abort(self, request: BindRequest, abort: _Abort, *, budget: float) -> BindRefused:
        """The answer to a step that could not go on, after cleaning up what the failure may have left.

        ``budget`` is the deadline the bind ran under: the cleanup gets `after_deadline_seconds` of it (unless the
        step already runs in that budget).
        """
        if abort.kind.cleaned_up:
            cleanup = after_deadline_seconds(budget)
            with contextlib.nullcontext() if abort.in_cleanup_budget else deadline(cleanup):
                self._clean_up(request.ref.namespace, request.ref.name, request.ref.uid, request.node,
                               locked=abort.locked, annotated=abort.annotated, step_seconds=cleanup / 2)
        return BindRefused(abort.kind, abort.message, request)

    def _clean_up(self, namespace: str, name: str, uid: str, node: str, *, locked: bool, annotated: bool,
                  step_seconds: float) -> None:
        """Release our lock, void our booking (``bind-phase=failed``), drop the placement, within the cleanup budget.

        The lock goes first and may use at most half of what is left, because a lock left behind blocks every
        bind on that node, and a stalled release must not leave nothing for voiding the booking.
        """
        if locked:
            try:
                with deadline(step_seconds, within_current=True):
                    self._lock.release(node, namespace, name)
            except KubeError as error:
                log.warning("bind pod=%s/%s node=%s: cannot release our lock: %s", namespace, name, node, error)
        voided = True
        if annotated:  # an unbound pod marked bind-phase=failed holds nothing
            try:
                with deadline(step_seconds, within_current=True):
                    self._kube.patch_pod(namespace, name, {"metadata": {"uid": uid, "annotations": {
                        names.POD_BIND_PHASE: "failed"}}})
            except KubeError as error:
                voided = False
                log.warning("bind pod=%s/%s: cannot mark bind-phase=failed, its booking is kept until the API "
                            "shows it: %s", namespace, name, error)
        # A booking that may stand in the API, not voided, still counts: the next filter must not hand its GPUs
        # out (a list or the watch shows the truth later); only the placement goes, so the pod is filtered again.
        self._cache.forget(uid, keep_booking=not voided)

    def _report(self, outcome: BindOutcome) -> None:
        """The one log line of the answer, the pod's event and the metrics, read from the outcome."""
        if isinstance(outcome, Bound):
            ref, node = outcome.request.ref, outcome.request.node
            log.info("bind pod=%s node=%s devices=%s bound", ref.key, node, outcome.devices,
                     extra={"pod": ref.key, "node": node})
            self._events.record(namespace=ref.namespace, name=ref.name, uid=ref.uid, reason="BindingSucceed",
                                message=f"bound to node {node}")
            self._count("bound")
            return
        if not isinstance(outcome.request, BindRequest):
            log.warning("bind: %s", outcome.message)
            return
        ref, node, kind = outcome.request.ref, outcome.request.node, outcome.kind
        where = {"pod": ref.key, "node": node}
        if kind is BindFailure.NOT_OURS:
            log.warning("bind pod=%s uid=%s node=%s refused: not placed by this process", ref.key, ref.uid, node)
        elif kind is BindFailure.LOCKED:
            log.info("bind pod=%s node=%s: %s", ref.key, node, outcome.message, extra=where)
        elif kind is BindFailure.UNKNOWN:
            log.warning("bind pod=%s node=%s: outcome unknown, booking and lock kept: %s", ref.key, node,
                        outcome.message, extra=where)
        else:  # cleaned up (`BindFailure.cleaned_up`): the pod's owner is told
            log.warning("bind pod=%s node=%s failed: %s", ref.key, node, outcome.message, extra=where)
            self._events.record(namespace=ref.namespace, name=ref.name, uid=ref.uid, reason="BindingFailed",
                                message=outcome.message, warning=True)
        self._count(kind.value)
        if kind is BindFailure.CONFLICT:
            self._count(BindFailure.FAILED.value)  # a conflict is counted as a failure too

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_bind(result)
