"""``/bind``: lock the node, write the booking, verify it, create the Binding
(README.md#high-availability-active-and-standby).

The filter writes nothing: this is the one place that writes a booking, and it is checked when it is written. Under the
node lock, the booking is written onto the pod in one patch (HAMi's device annotations, ``bind-phase=allocating``, the
``hami.io/vgpu-node`` label) with the pod's uid and resourceVersion as preconditions — the version kube-scheduler sent
to ``/filter``, so an unchanged pod is not read first; a pod that changed since (409) is read: it must still be ours and
unbound (another extender may have bound it elsewhere) — and then checked against the bookings of the other pods the API
shows on the node. The happy path is four round trips (README.md#the-scheduler-extender): the lock (one write
preconditioned on the node's resourceVersion from the watch), the booking, one read of the node's booked pods, the
Binding; ``hami_web_bind_api_calls`` counts them per bind. kube-scheduler's leader election is not a fence: a second
extender may have booked the same GPUs from a cache that had not seen ours. Reading the node's pods *after* our own
write lets the API answer from its watch cache at our write's version (fresh, and cheap: no read of every pod from
etcd), and any other booking on this node was written before ours, under the same lock. A placement that no longer fits
is voided (``bind-phase=failed``: an unbound pod so marked holds nothing), the lock released and the assumption dropped,
with a ``BindingFailed`` event; kube-scheduler then filters the pod again (by then the watch has usually brought the
other booking into the cache). Only then is the Binding created: HAMi's device plugin acts on bound pods only, so a
voided booking never reaches a GPU.

A member of a gang (label ``scheduling.x-k8s.io/pod-group`` or ``spec.schedulingGroup``) that finds the node
locked waits for the lock; any other pod is answered at once, and so is a member when ``max_lock_waiters`` binds
already wait (each holds one of the server's few request threads).

Only a pod this process placed (same uid, namespace, name and node) is bound: ``/bind`` uses hami-web's
RBAC, and must not bind a pod we never chose GPUs for. Anything else is refused before any lock or pod is
touched. The answer must always reach kube-scheduler inside its ``httpTimeout`` (30 s), so a bind's API calls
share one deadline: ``--extender-deadline``, or for a gang member that waits, ``--node-lock-retry-timeout``
counted from the start of the bind, which the lock wait and the calls after it share. The cleanup after a
failure gets ``min(deadline/3, 3 s)`` more. When the Binding's outcome is unknown, the pod is read back: bound
means success; unreadable means the booking and our lock stay (the pod may be running on those GPUs) and
kube-scheduler is told to retry.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from hami_web.core import names
from hami_web.core.devices import AnnotationError
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.grants import booking_annotations, booking_locks
from hami_web.core.nodelocks import LockRule
from hami_web.core.verify import other_bookings, placement_conflicts
from hami_web.extender.deadlines import after_deadline_seconds
from hami_web.extender.events import EventRecorder
from hami_web.extender.nodelock import NodeLock, NodeLockError, NodeLockHeld
from hami_web.extender.wire import ExtenderBindingResult, WireError, binding_target, require_object
from hami_web.kube import (
    ConflictError,
    InvalidError,
    JsonObject,
    Kube,
    KubeError,
    NotFoundError,
    counting_calls,
    deadline,
    deadline_left_seconds,
)
from hami_web.state.budget import WaitSlots
from hami_web.state.cache import ClusterCache
from hami_web.state.pods import PodUsage, pod_key, pod_usage

log = logging.getLogger(__name__)

# A gang member stops looking at a held lock this share of its deadline early (at most LOCK_WAIT_RESERVE_MAX_SECONDS),
# so the last look at the lock, the pod patch and the Binding still have time before the deadline.
LOCK_WAIT_RESERVE_SHARE = 0.2
LOCK_WAIT_RESERVE_MAX_SECONDS = 2.0


class _BindDeadline:
    """The deadline one bind's API calls run under; a gang member that waits for a lock replaces it."""

    def __init__(self, scope: contextlib.ExitStack, seconds: float) -> None:
        self._scope = scope
        self._started = time.monotonic()
        self.seconds = seconds
        scope.enter_context(deadline(seconds))

    def replace(self, seconds: float) -> None:
        """From now on the deadline is ``seconds`` after the bind's start (for every call until the answer)."""
        self.seconds = seconds
        self._scope.enter_context(deadline(seconds - (time.monotonic() - self._started)))


class Binder:
    """Answers kube-scheduler's bind calls."""

    def __init__(self, *, cache: ClusterCache, kube: Kube, events: EventRecorder, node_lock: NodeLock,
                 metrics: Any = None, clock: Callable[[], float] = time.time,
                 deadline_seconds: float = 15.0, lock_wait_seconds: float = 0.0, max_lock_waiters: int = 1,
                 catalog: DeviceCatalog = DEFAULT_CATALOG) -> None:
        """``deadline_seconds`` is ``--extender-deadline``; ``lock_wait_seconds`` (``--node-lock-retry-timeout``)
        is the whole deadline of a gang member's bind that waits for a held lock (0: nobody waits)."""
        self._deadline_seconds = deadline_seconds
        self._catalog = catalog
        self._cache = cache
        self._lock_wait_seconds = lock_wait_seconds
        self._wait_slots = WaitSlots(max_lock_waiters)
        self._kube = kube
        self._events = events
        self._lock = node_lock
        self._metrics = metrics
        self._clock = clock

    def bind(self, body: object) -> ExtenderBindingResult:
        """Bind one pod to the node kube-scheduler picked; failures come back in ``Error``."""
        try:
            namespace, name, uid, node = binding_target(require_object(body, "ExtenderBindingArgs"))
        except WireError as error:
            log.warning("bind: bad request: %s", error)
            return {"Error": f"bad ExtenderBindingArgs: {error}"}
        placed = self._cache.placed(uid)
        if placed is None or (placed.namespace, placed.name) != (namespace, name):
            # Not ours to bind: nothing is touched (no lock, no pod patch, the booking of the real uid stays).
            log.warning("bind pod=%s/%s uid=%s node=%s refused: not placed by this process", namespace, name,
                        uid, node)
            self._count("refused")
            return {"Error": f"pod {namespace}/{name} (uid {uid}) was not placed by this hami-web (or its "
                             f"placement was dropped); kube-scheduler must filter it first"}
        if placed.node != node:
            message = f"pod {namespace}/{name} was given GPUs on node {placed.node}, not {node}; filter it again"
            return self._fail(namespace, name, uid, node, message, locked=False, annotated=False)
        with counting_calls() as calls:
            answer = self._bind_placed(placed, node)
        if self._metrics is not None:
            self._metrics.observe_bind_calls(calls.calls)
        if answer is not None:
            return answer
        self._cache.mark_bound(uid)
        log.info("bind pod=%s/%s node=%s devices=%s bound", namespace, name, node, placed.devices_text,
                 extra={"pod": f"{namespace}/{name}", "node": node})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="BindingSucceed",
                            message=f"bound to node {node}")
        self._count("bound")
        return {"Error": ""}

    def _bind_placed(self, placed: PodUsage, node: str) -> ExtenderBindingResult | None:
        """Lock, write the booking, verify it, bind; None when bound, else the answer (failures cleaned up).

        Everything runs under the bind's deadline, which `_acquire` replaces when a gang member waits.
        """
        namespace, name, uid = placed.namespace, placed.name, placed.uid
        with contextlib.ExitStack() as scope:
            bind_deadline = _BindDeadline(scope, self._deadline_seconds)
            try:
                self._acquire(namespace, name, node, bind_deadline, self._locks(placed))
            except NodeLockError as error:
                # Nothing was changed: kube-scheduler retries the pod later, and its booking stays until then.
                log.info("bind pod=%s/%s node=%s: %s", namespace, name, node, error,
                         extra={"pod": f"{namespace}/{name}", "node": node})
                self._count("locked")
                return {"Error": str(error)}
            except KubeError as error:
                # The lock patch may have landed without an answer: release covers it (it only removes ours).
                return self._fail(namespace, name, uid, node, f"cannot lock node {node}: {error}", locked=True,
                                  annotated=False, budget=bind_deadline.seconds)
            self._cache.reassume(placed)  # written from here on; the watch confirms it
            written: JsonObject | None = None
            if placed.resource_version:
                # The pod as kube-scheduler sent it to /filter is the precondition: unchanged since, it is still ours
                # and unbound, so no read is needed; changed (409), it is read and judged below.
                try:
                    written = self._write_booking(placed, node, placed.resource_version)
                except ConflictError:
                    written = None
                    log.debug("bind pod=%s/%s: changed since kube-scheduler sent version %s; reading it", namespace,
                              name, placed.resource_version)
                except NotFoundError:
                    return self._fail(namespace, name, uid, node, f"pod {namespace}/{name} no longer exists",
                                      locked=True, annotated=False, budget=bind_deadline.seconds)
                except InvalidError:
                    # Refused, nothing written: the uid precondition fails as "uid is immutable" (422) when the pod
                    # was replaced by one of the same name; the read below says so.
                    written = None
                except KubeError as error:
                    return self._fail(namespace, name, uid, node, f"cannot write the GPU booking onto the pod: "
                                      f"{error}", locked=True, budget=bind_deadline.seconds)
            if written is None:
                if self._metrics is not None:
                    self._metrics.observe_bind_reread("pod")
                try:
                    pod, refusal = self._pod_still_unbound(placed)
                except KubeError as error:
                    return self._fail(namespace, name, uid, node, f"cannot read pod {namespace}/{name}: {error}",
                                      locked=True, annotated=False, budget=bind_deadline.seconds)
                if refusal and pod is not None and self._bound_here(pod, placed, node):
                    return None  # a retry after a Binding whose answer was lost: done; our lock stays as after a bind
                if refusal:
                    self._count("conflict")
                    return self._fail(namespace, name, uid, node, refusal, locked=True, annotated=False,
                                      budget=bind_deadline.seconds)
                try:
                    written = self._write_booking(placed, node, str(
                        ((pod or {}).get("metadata") or {}).get("resourceVersion") or ""))
                except ConflictError as error:  # changed meanwhile: nothing of ours was written
                    return self._fail(namespace, name, uid, node, f"pod {namespace}/{name} changed while its GPUs "
                                      f"were being booked ({error}); filter it again", locked=True, annotated=False,
                                      budget=bind_deadline.seconds)
                except KubeError as error:
                    return self._fail(namespace, name, uid, node, f"cannot write the GPU booking onto the pod: "
                                      f"{error}", locked=True, budget=bind_deadline.seconds)
            try:
                conflicts = self.verify(placed, node, not_older_than=str(
                    (written.get("metadata") or {}).get("resourceVersion") or ""))
            except KubeError as error:
                return self._fail(namespace, name, uid, node, f"cannot read node {node}'s pods to verify the "
                                  f"placement: {error}", locked=True, budget=bind_deadline.seconds)
            if conflicts:
                self._count("conflict")
                return self._fail(namespace, name, uid, node, f"GPUs given to pod {namespace}/{name} on node {node} "
                                  f"are no longer free ({conflicts}); another scheduler booked them first; filter it "
                                  f"again", locked=True, budget=bind_deadline.seconds)
            try:
                self._kube.bind_pod(namespace, name, node, uid=uid)
            except KubeError as error:
                return self._after_failed_binding(namespace, name, uid, node, error, bind_deadline.seconds)
        return None

    def _write_booking(self, placed: PodUsage, node: str, resource_version: str) -> JsonObject:
        """Write the booking onto the pod in one patch; `ConflictError` when the pod is not at ``resource_version``.

        Preconditions: the pod of that name has our uid, and nobody (another extender binding the same pod, a Binding)
        changed it since that version was read.
        """
        now = str(int(self._clock()))
        return self._kube.patch_pod(placed.namespace, placed.name, {"metadata": {
            "uid": placed.uid, "resourceVersion": resource_version or None,
            "annotations": {
                names.POD_ASSIGNED_NODE: node, names.POD_ASSIGNED_TIME: now,
                **booking_annotations(placed.grants, self._catalog),
                names.POD_BIND_PHASE: "allocating", names.POD_BIND_TIME: now},
            "labels": {names.LABEL_ASSIGNED_NODE: node}}})

    def _after_failed_binding(self, namespace: str, name: str, uid: str, node: str, error: KubeError,
                              budget: float) -> ExtenderBindingResult | None:
        if not (error.outcome_unknown or isinstance(error, ConflictError)):
            return self._fail(namespace, name, uid, node, str(error), locked=True, budget=budget)
        # No answer, or "already assigned" (a retry after a Binding whose answer was lost): ask the API.
        cleanup = after_deadline_seconds(budget)
        with deadline(cleanup):  # the request's deadline may be spent: the cleanup budget
            with deadline(cleanup / 2, within_current=True):
                bound = self._bound_to(namespace, name, uid)
            if bound == node:
                return None
            if bound is None and error.outcome_unknown:
                log.warning("bind pod=%s/%s node=%s: outcome unknown, booking and lock kept: %s", namespace,
                            name, node, error, extra={"pod": f"{namespace}/{name}", "node": node})
                self._count("unknown")
                return {"Error": f"pod {namespace}/{name}: no answer to its Binding to {node} ({error}); its "
                                 f"GPUs and the node lock stay until the API shows whether it was bound"}
            return self._fail(namespace, name, uid, node, str(error), locked=True, budget=budget, budget_open=True)

    def verify(self, placed: PodUsage, node: str, *, not_older_than: str) -> str:
        """What of ``placed`` no longer fits on ``node`` beside the other pods' bookings ("" when all fits).

        Called under the node lock, right after our own booking was written at resourceVersion ``not_older_than``:
        the API answers from its watch cache once that has seen our write, so the pods read include every booking
        written before — another binder's booking is written before it gives the node lock up, so before ours.
        Raises `KubeError` when the API cannot be read.
        """
        return self._conflicts(placed, node, not_older_than)

    def _pod_still_unbound(self, placed: PodUsage) -> tuple[dict[str, Any] | None, str]:
        """The pod as the API has it now, and a refusal ("" when none) if it is gone, replaced or already bound.

        Another extender (a second replica during a Lease hand-over) may have bound the same pod elsewhere, or booked it
        and be about to: its booking must not be overwritten, so a bound pod, or one carrying another live booking, is
        refused before anything is written.
        """
        try:
            pod = self._kube.get_pod(placed.namespace, placed.name)
        except NotFoundError:
            return None, f"pod {placed.namespace}/{placed.name} no longer exists"
        metadata = pod.get("metadata") or {}
        if metadata.get("uid") != placed.uid:
            return None, f"pod {placed.namespace}/{placed.name} was replaced (uid {metadata.get('uid')})"
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            return pod, f"pod {placed.namespace}/{placed.name} is already bound to node {bound_to}"
        standing, may_overwrite = self._cache.standing_booking(pod)
        ours = (standing.node, standing.devices_text) == (placed.node, placed.devices_text) if standing else True
        if standing is not None and not may_overwrite and not ours:
            return pod, (f"pod {placed.namespace}/{placed.name} already holds GPUs on node {standing.node} "
                         f"({standing.devices_text}), booked by another scheduler; filter it again")
        return pod, ""

    def _bound_here(self, pod: dict[str, Any], placed: PodUsage, node: str) -> bool:
        """Whether ``pod`` is bound to ``node`` with ``placed``'s booking written: an earlier bind of it landed."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        written = booking_annotations(placed.grants, self._catalog)
        return ((pod.get("spec") or {}).get("nodeName") == node and annotations.get(names.POD_ASSIGNED_NODE) == node
                and all(annotations.get(key) == value for key, value in written.items()))

    def _conflicts(self, placed: PodUsage, node: str, not_older_than: str) -> str:
        """What no longer fits of ``placed`` on ``node`` per the API's pods there ("" when all fits).

        The pods read are not given to the cache: the watch brings the same objects in order, and a snapshot
        applied after a newer event would put back a booking that was already voided.
        """
        view = self._cache.node_view(node)
        if view is None:
            return f"node {node} is not a GPU node this hami-web knows"
        bookings = []
        for pod in self._kube.list_pods_on_node(node, assigned_label=names.LABEL_ASSIGNED_NODE,
                                                not_older_than=not_older_than):
            uid, pod_namespace, pod_name = pod_key(pod)
            if uid == placed.uid:
                continue
            try:
                usage = pod_usage(pod, catalog=self._catalog)
            except AnnotationError as error:  # as in the cache: a garbage booking is unknown usage, not a veto
                log.warning("bind: pod %s/%s on node %s: unreadable booking ignored: %s", pod_namespace, pod_name,
                            node, error)
                continue
            if usage is not None and usage.node == node:
                bookings.append((usage.booking, usage.grants))
        conflicts = placement_conflicts(view.inventory, other_bookings(bookings), placed.booking, placed.grants)
        return "; ".join(conflict.describe() for conflict in conflicts)

    def _bound_to(self, namespace: str, name: str, uid: str) -> str | None:
        """The node the pod is bound to ("" when unbound or gone), or None when the API cannot tell us now."""
        try:
            pod = self._kube.get_pod(namespace, name)
        except NotFoundError:
            return ""
        except KubeError:
            return None
        if (pod.get("metadata") or {}).get("uid") != uid:
            return ""
        return str((pod.get("spec") or {}).get("nodeName") or "")

    def _locks(self, placed: PodUsage) -> tuple[LockRule, ...]:
        """The node locks this bind takes: those of exactly the families the pod holds devices of (HAMi's
        ``hami.io/mutex.lock`` once, Cambricon's own for MLUs), in the one order every binder uses."""
        return booking_locks(placed.grants, self._catalog)

    def _acquire(self, namespace: str, name: str, node: str, bind_deadline: _BindDeadline,
                 rules: tuple[LockRule, ...]) -> None:
        """Take the node locks; a gang member whose node is locked waits for them (`NodeLock.acquire_waiting`).

        A member that waits gets ``--node-lock-retry-timeout`` (from the bind's start) as the bind's deadline,
        for the wait and every call after it; the wait ends a little early so those calls still have time.
        """
        try:
            self._lock.acquire(node, namespace, name, seen=self._cache.seen_node(node), rules=rules)
            return
        except NodeLockHeld as held:
            group = self._pod_group(namespace, name) if self._lock_wait_seconds > 0 else ""
            if not group:
                raise
            if not self._wait_slots.try_take():
                # Every waiting bind holds a request thread; the filter and the webhook must keep some.
                self._count_wait("no_slot")
                raise
            log.info("bind pod=%s/%s node=%s: %s; pod group %s waits, the bind ending within %gs", namespace, name,
                     node, held, group, self._lock_wait_seconds, extra={"pod": f"{namespace}/{name}", "node": node})
        self._count_wait("started")
        bind_deadline.replace(self._lock_wait_seconds)
        reserve = min(self._lock_wait_seconds * LOCK_WAIT_RESERVE_SHARE, LOCK_WAIT_RESERVE_MAX_SECONDS)
        wait_seconds = max(0.0, (deadline_left_seconds() or 0.0) - reserve)
        try:
            looks = self._lock.acquire_waiting(node, namespace, name, wait_seconds=wait_seconds, rules=rules)
        except NodeLockHeld:
            self._count_wait("timed_out")
            raise
        except (NodeLockError, KubeError):
            self._count_wait("failed")
            raise
        finally:
            self._wait_slots.give_back()
        self._count_wait("acquired")
        log.info("bind pod=%s/%s node=%s: lock taken after waiting (%d more looks)", namespace, name, node, looks,
                 extra={"pod": f"{namespace}/{name}", "node": node})

    def _pod_group(self, namespace: str, name: str) -> str:
        """The pod's gang (PodGroup label or ``spec.schedulingGroup``), or "" for a pod on its own."""
        try:
            pod: JsonObject = self._kube.get_pod(namespace, name)
        except KubeError as error:
            log.warning("bind pod=%s/%s: cannot read the pod to see if it belongs to a gang: %s", namespace, name,
                        error)
            return ""
        group = ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_POD_GROUP)
        if isinstance(group, str) and group.strip():
            return group.strip()
        scheduling_group = (pod.get("spec") or {}).get("schedulingGroup")
        if isinstance(scheduling_group, str) and scheduling_group.strip():
            return scheduling_group.strip()
        if isinstance(scheduling_group, dict) and scheduling_group:
            return str(scheduling_group.get("name") or scheduling_group.get("podGroupName") or "spec.schedulingGroup")
        return ""

    def _fail(self, namespace: str, name: str, uid: str, node: str, reason: str, *, locked: bool,
              annotated: bool = True, budget: float | None = None, budget_open: bool = False) -> ExtenderBindingResult:
        """Clean up and answer ``reason``.

        ``annotated`` when our booking may stand on the pod (it is then voided); ``budget`` is the deadline the
        bind ran under (the cleanup gets `after_deadline_seconds` of it); ``budget_open`` when the caller already
        runs in the cleanup budget.
        """
        cleanup = after_deadline_seconds(self._deadline_seconds if budget is None else budget)
        with contextlib.nullcontext() if budget_open else deadline(cleanup):
            self._clean_up(namespace, name, uid, node, locked=locked, annotated=annotated, step_seconds=cleanup / 2)
        log.warning("bind pod=%s/%s node=%s failed: %s", namespace, name, node, reason,
                    extra={"pod": f"{namespace}/{name}", "node": node})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="BindingFailed", message=reason,
                            warning=True)
        self._count("failed")
        return {"Error": reason}

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

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_bind(outcome)

    def _count_wait(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_lock_wait(outcome)
