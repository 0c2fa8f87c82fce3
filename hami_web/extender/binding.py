"""``/bind``: lock the node, mark the pod allocating, create the Binding (SPEC.md §6).

On failure the pod is marked ``bind-phase=failed``, our lock (only ours) is released and the filter's
booking is dropped, so kube-scheduler's retry starts from a clean slate. A member of a gang (label
``scheduling.x-k8s.io/pod-group`` or ``spec.schedulingGroup``) that finds the node locked waits for the lock
for up to ``--node-lock-retry-timeout``; any other pod is answered at once, as before, and so is a member when
``max_lock_waiters`` binds already wait (each holds one of the server's few request threads).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from hami_web.core import names
from hami_web.extender.events import EventRecorder
from hami_web.extender.nodelock import NodeLock, NodeLockError, NodeLockHeld
from hami_web.extender.wire import ExtenderBindingResult, WireError, binding_target, require_object
from hami_web.kube import JsonObject, Kube, KubeError
from hami_web.state.budget import WaitSlots
from hami_web.state.cache import ClusterCache

log = logging.getLogger(__name__)


class Binder:
    """Answers kube-scheduler's bind calls."""

    def __init__(self, *, cache: ClusterCache, kube: Kube, events: EventRecorder, node_lock: NodeLock,
                 metrics: Any = None, clock: Callable[[], float] = time.time,
                 lock_wait_seconds: float = 0.0, max_lock_waiters: int = 1) -> None:
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
        held = self._cache.held_by(uid) if uid else None
        if held is not None and held.node != node:
            message = f"pod {namespace}/{name} was given GPUs on node {held.node}, not {node}; filter it again"
            return self._fail(namespace, name, uid, node, message, locked=False)
        try:
            self._acquire(namespace, name, node)
        except NodeLockError as error:
            # Nothing was changed: kube-scheduler retries the pod later, and its booking stays until then.
            log.info("bind pod=%s/%s node=%s: %s", namespace, name, node, error,
                     extra={"pod": f"{namespace}/{name}", "node": node})
            self._count("locked")
            return {"Error": str(error)}
        except KubeError as error:
            return self._fail(namespace, name, uid, node, f"cannot lock node {node}: {error}", locked=False)
        try:
            self._kube.patch_pod(namespace, name, {"metadata": {"annotations": {
                names.POD_BIND_PHASE: "allocating", names.POD_BIND_TIME: str(int(self._clock()))}}})
            self._kube.bind_pod(namespace, name, node, uid=uid)
        except KubeError as error:
            return self._fail(namespace, name, uid, node, str(error), locked=True)
        devices = held.devices_text if held else "?"
        log.info("bind pod=%s/%s node=%s devices=%s bound", namespace, name, node, devices,
                 extra={"pod": f"{namespace}/{name}", "node": node})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="BindingSucceed",
                            message=f"bound to node {node}")
        self._count("bound")
        return {"Error": ""}

    def _acquire(self, namespace: str, name: str, node: str) -> None:
        """Take the node lock; a gang member whose node is locked waits for it (`NodeLock.acquire_waiting`)."""
        try:
            self._lock.acquire(node, namespace, name)
            return
        except NodeLockHeld as held:
            group = self._pod_group(namespace, name) if self._lock_wait_seconds > 0 else ""
            if not group:
                raise
            if not self._wait_slots.try_take():
                # Every waiting bind holds a request thread; the filter and the webhook must keep some.
                self._count_wait("no_slot")
                raise
            log.info("bind pod=%s/%s node=%s: %s; pod group %s waits up to %gs", namespace, name, node, held,
                     group, self._lock_wait_seconds)
        self._count_wait("started")
        try:
            looks = self._lock.acquire_waiting(node, namespace, name, wait_seconds=self._lock_wait_seconds)
        except NodeLockHeld:
            self._count_wait("timed_out")
            raise
        except (NodeLockError, KubeError):
            self._count_wait("failed")
            raise
        finally:
            self._wait_slots.give_back()
        self._count_wait("acquired")
        log.info("bind pod=%s/%s node=%s: lock taken after waiting (%d more looks)", namespace, name, node, looks)

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

    def _fail(self, namespace: str, name: str, uid: str, node: str, reason: str, *,
              locked: bool) -> ExtenderBindingResult:
        try:
            self._kube.patch_pod(namespace, name, {"metadata": {"annotations": {names.POD_BIND_PHASE: "failed"}}})
        except KubeError as error:
            log.warning("bind pod=%s/%s: cannot mark bind-phase=failed: %s", namespace, name, error)
        if locked:
            try:
                self._lock.release(node, namespace, name)
            except KubeError as error:
                log.warning("bind pod=%s/%s node=%s: cannot release our lock: %s", namespace, name, node, error)
        if uid:
            self._cache.forget(uid)
        log.warning("bind pod=%s/%s node=%s failed: %s", namespace, name, node, reason,
                    extra={"pod": f"{namespace}/{name}", "node": node})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="BindingFailed", message=reason,
                            warning=True)
        self._count("failed")
        return {"Error": reason}

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_bind(outcome)

    def _count_wait(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.observe_lock_wait(outcome)
