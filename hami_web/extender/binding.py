"""``/bind``: lock the node, mark the pod allocating, create the Binding (SPEC.md §6).

On failure the pod is marked ``bind-phase=failed``, our lock (only ours) is released and the filter's
booking is dropped, so kube-scheduler's retry starts from a clean slate.

Only a pod this process placed (same uid, namespace, name and node) is bound: ``/bind`` uses hami-web's
RBAC, and must not bind a pod we never chose GPUs for. Anything else is refused before any lock or pod is
touched. The API calls share one deadline (``--extender-deadline``); the cleanup after a failure gets a
third of it again, so the answer always comes inside kube-scheduler's ``httpTimeout``. When the Binding's
outcome is unknown, the pod is read back: bound means success; unreadable means the booking and our lock
stay (the pod may be running on those GPUs) and kube-scheduler is told to retry.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from hami_web.core import names
from hami_web.extender.events import EventRecorder
from hami_web.extender.nodelock import NodeLock, NodeLockError
from hami_web.extender.wire import ExtenderBindingResult, WireError, binding_target, require_object
from hami_web.kube import ConflictError, Kube, KubeError, NotFoundError, deadline
from hami_web.state.cache import ClusterCache

log = logging.getLogger(__name__)


class Binder:
    """Answers kube-scheduler's bind calls."""

    def __init__(self, *, cache: ClusterCache, kube: Kube, events: EventRecorder, node_lock: NodeLock,
                 metrics: Any = None, clock: Callable[[], float] = time.time,
                 deadline_seconds: float = 15.0) -> None:
        self._deadline_seconds = deadline_seconds
        # What a bind may spend after its deadline: reading back, releasing the lock, marking the pod failed.
        self._cleanup_seconds = deadline_seconds / 3
        self._cache = cache
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
        if placed is None or placed[:2] != (namespace, name):
            # Not ours to bind: nothing is touched (no lock, no pod patch, the booking of the real uid stays).
            log.warning("bind pod=%s/%s uid=%s node=%s refused: not placed by this process", namespace, name,
                        uid, node)
            self._count("refused")
            return {"Error": f"pod {namespace}/{name} (uid {uid}) was not placed by this hami-web (or its "
                             f"placement was dropped); kube-scheduler must filter it first"}
        if placed[2] != node:
            message = f"pod {namespace}/{name} was given GPUs on node {placed[2]}, not {node}; filter it again"
            return self._fail(namespace, name, uid, node, message, locked=False)
        with deadline(self._deadline_seconds):
            answer = self._bind_placed(namespace, name, uid, node)
        if answer is not None:
            return answer
        held = self._cache.held_by(uid)
        self._cache.mark_bound(uid)
        devices = held.devices_text if held else "?"
        log.info("bind pod=%s/%s node=%s devices=%s bound", namespace, name, node, devices)
        self._events.record(namespace=namespace, name=name, uid=uid, reason="BindingSucceed",
                            message=f"bound to node {node}")
        self._count("bound")
        return {"Error": ""}

    def _bind_placed(self, namespace: str, name: str, uid: str, node: str) -> ExtenderBindingResult | None:
        """Lock, mark allocating, bind; None when bound, else the answer (failures cleaned up)."""
        try:
            self._lock.acquire(node, namespace, name)
        except NodeLockError as error:
            # Nothing was changed: kube-scheduler retries the pod later, and its booking stays until then.
            log.info("bind pod=%s/%s node=%s: %s", namespace, name, node, error)
            self._count("locked")
            return {"Error": str(error)}
        except KubeError as error:
            # The lock patch may have landed without an answer: release covers it (it only removes ours).
            return self._fail(namespace, name, uid, node, f"cannot lock node {node}: {error}", locked=True)
        try:
            self._kube.patch_pod(namespace, name, {"metadata": {"uid": uid, "annotations": {
                names.POD_BIND_PHASE: "allocating", names.POD_BIND_TIME: str(int(self._clock()))}}})
        except KubeError as error:
            return self._fail(namespace, name, uid, node, str(error), locked=True)
        try:
            self._kube.bind_pod(namespace, name, node, uid=uid)
        except KubeError as error:
            if not (error.outcome_unknown or isinstance(error, ConflictError)):
                return self._fail(namespace, name, uid, node, str(error), locked=True)
            # No answer, or "already assigned" (a retry after a Binding whose answer was lost): ask the API.
            with deadline(self._cleanup_seconds):  # the request's deadline may be spent: the cleanup budget
                with deadline(self._deadline_seconds / 6, within_current=True):
                    bound = self._bound_to(namespace, name, uid)
                if bound == node:
                    return None
                if bound is None and error.outcome_unknown:
                    log.warning("bind pod=%s/%s node=%s: outcome unknown, booking and lock kept: %s", namespace,
                                name, node, error)
                    self._count("unknown")
                    return {"Error": f"pod {namespace}/{name}: no answer to its Binding to {node} ({error}); its "
                                     f"GPUs and the node lock stay until the API shows whether it was bound"}
                return self._fail(namespace, name, uid, node, str(error), locked=True, budget_open=True)
        return None

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

    def _fail(self, namespace: str, name: str, uid: str, node: str, reason: str, *,
              locked: bool, budget_open: bool = False) -> ExtenderBindingResult:
        """Clean up and answer ``reason``; ``budget_open`` when the caller already runs in the cleanup budget."""
        with contextlib.nullcontext() if budget_open else deadline(self._cleanup_seconds):
            self._clean_up(namespace, name, uid, node, locked=locked)
        log.warning("bind pod=%s/%s node=%s failed: %s", namespace, name, node, reason)
        self._events.record(namespace=namespace, name=name, uid=uid, reason="BindingFailed", message=reason,
                            warning=True)
        self._count("failed")
        return {"Error": reason}

    def _clean_up(self, namespace: str, name: str, uid: str, node: str, *, locked: bool) -> None:
        """Release our lock, mark the pod failed, drop its booking, within the cleanup budget.

        The lock goes first and may use at most half of what is left, because a lock left behind blocks every
        bind on that node, and a stalled release must not leave nothing for marking the pod.
        """
        if locked:
            try:
                with deadline(self._deadline_seconds / 6, within_current=True):
                    self._lock.release(node, namespace, name)
            except KubeError as error:
                log.warning("bind pod=%s/%s node=%s: cannot release our lock: %s", namespace, name, node, error)
        try:
            with deadline(self._deadline_seconds / 6, within_current=True):
                self._kube.patch_pod(namespace, name, {"metadata": {"uid": uid, "annotations": {
                    names.POD_BIND_PHASE: "failed"}}})
        except KubeError as error:
            log.warning("bind pod=%s/%s: cannot mark bind-phase=failed: %s", namespace, name, error)
        self._cache.forget(uid)

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_bind(outcome)
