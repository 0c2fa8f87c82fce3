"""The act of a preemption, as kube-scheduler acts (docs/preemption.md), off the ``/filter`` request's path.

`/filter` decides (`state.holds`) and queues the act here; one worker thread then, for each preemption:

1. **claims the preemptor**: reads it and writes ``status.nominatedNodeName`` with its resourceVersion as a
   precondition, unless a node is named there already that this process did not write (or the pod is gone or bound).
   Of two servers that decided for one pod (a hand-over between active and standby), only one write lands on the
   version both read; the other reads again, finds a node named by someone else and stands down, dropping its hold
   (its next filter of the pod waits for the other's victims, which are terminating by then). kube-scheduler writes
   the nominated node after deleting the victims; writing it first is what makes it a fence.
2. **each victim** (``prepareCandidate`` in kube-scheduler v1.32 ``pkg/scheduler/framework/preemption``): the
   ``DisruptionTarget`` condition (reason ``PreemptionByScheduler``, written on the status with the victim's
   resourceVersion as a precondition, so no other condition is lost), then a delete with the victim's own grace period
   and its uid as a precondition (a pod recreated under the same name is not deleted); a victim already gone is
   done; a ``Preempted`` event on it naming the preemptor and the node.
3. an event on the preemptor (``Preempting``) naming the victims and the node.

Each API step is tried `ATTEMPTS` times with a growing pause; a preemption whose steps still fail is reported (log
line, warning event on the preemptor, ``hami_web_preemptions_total{result="failed"}``) and its hold dropped, so the
preemptor's next filter decides again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from hami_web.core.preemption import Preemptor
from hami_web.extender.collaborators import EventSink
from hami_web.extender.outcomes import PodRef
from hami_web.kube import ConflictError, JsonObject, Kube, KubeError, NotFoundError
from hami_web.state.faces import Preemption
from hami_web.state.holds import Hold, Preempting, PreemptionDecision

log = logging.getLogger(__name__)

ATTEMPTS = 3
PAUSE_SECONDS = 0.5
QUEUE_SIZE = 1000
CLAIMS_KEPT = 10_000
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

T = TypeVar("T")


class PreemptionMetrics(Protocol):
    """Counts preemptions (`Metrics.observe_preemption`)."""

    def observe_preemption(self, result: str, victims: int) -> None:
        """Count one preemption by result (``done``, ``failed``, ``fenced``, ``abandoned``) with its victims."""
        ...


@dataclass(frozen=True, slots=True)
class PreemptionAct:
    """One preemption to carry out: the preemptor (with the hold its filter recorded) and its victims."""

    hold: Hold
    victims: tuple[PodRef, ...]  # the pods to delete
    scheduler_name: str


class _StandDown(Exception):
    """The preemption must not go on (the pod is gone or bound, or another preemption named another node)."""

    def __init__(self, result: str, why: str) -> None:
        super().__init__(why)
        self.result = result


class Preempter:
    """Carries out preemptions on a worker thread (see the module)."""

    def __init__(self, *, kube: Kube, events: EventSink, cache: Preemption, metrics: PreemptionMetrics | None = None,
                 attempts: int = ATTEMPTS, pause_seconds: float = PAUSE_SECONDS,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """``cache`` decides and holds (`state.holds`); ``attempts`` and ``pause_seconds`` bound each API step's
        retries."""
        self._kube = kube
        self._events = events
        self._cache = cache
        self._metrics = metrics
        self._attempts = max(1, attempts)
        self._pause_seconds = pause_seconds
        self._sleep = sleep
        self._queue: queue.Queue[PreemptionAct | None] = queue.Queue(QUEUE_SIZE)
        self._thread: threading.Thread | None = None
        # The nominatedNodeName this process wrote, by preemptor uid: a node named by anyone else fences it off.
        self._claimed: dict[str, str] = {}
        self.idle = threading.Event()
        self.idle.set()

    def start(self) -> None:
        """Start the worker (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="preempter", daemon=True)
            self._thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Finish the queued acts and stop."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout_seconds)
            self._thread = None

    def decide(self, preemptor: Preemptor, candidates: Sequence[str], *, nominated: str,
               scheduler_name: str) -> PreemptionDecision:
        """The cache's decision for a pod no candidate takes (``nominated``: its ``status.nominatedNodeName``); a new
        preemption's act is queued here, so the filter that decided answers at once."""
        decision = self._cache.preempt(preemptor, candidates, nominated=nominated)
        if isinstance(decision, Preempting):
            victims = tuple(PodRef(uid=pod.uid, namespace=pod.namespace, name=pod.name)
                            for pod in decision.plan.victims)
            self.submit(PreemptionAct(hold=decision.hold, victims=victims, scheduler_name=scheduler_name))
        return decision

    def submit(self, act: PreemptionAct) -> None:
        """Queue a preemption; a full queue drops it (and its hold: the preemptor's next filter decides again)."""
        try:
            self.idle.clear()
            self._queue.put_nowait(act)
        except queue.Full:
            self._cache.drop_hold(act.hold.uid, "the preemption queue is full")
            self._count("failed", act)

    def _run(self) -> None:
        while True:
            act = self._queue.get()
            if act is None:
                return
            try:
                self.carry_out(act)
            except Exception:  # one act's surprise must not stop the worker
                log.exception("preemption for pod %s failed unexpectedly", act.hold.key)
                self._cache.drop_hold(act.hold.uid, "its preemption failed")
                self._count("failed", act)
            finally:
                if self._queue.empty():
                    self.idle.set()

    def carry_out(self, act: PreemptionAct) -> str:
        """Claim, delete, report one preemption; returns its result (``done``, ``failed``, ``fenced``,
        ``abandoned``)."""
        hold = act.hold
        try:
            self._claim(hold)
        except _StandDown as stand_down:
            log.info("preemption for pod %s on node %s not carried out: %s", hold.key, hold.node, stand_down,
                     extra={"pod": hold.key, "node": hold.node})
            self._cache.drop_hold(hold.uid, str(stand_down))
            return self._count(stand_down.result, act)
        except KubeError as error:
            return self._failed(act, f"cannot set its nominatedNodeName: {error}")
        failures = []
        for victim in act.victims:
            try:
                self._retried(partial(self._preempt_victim, victim, act), conflicts=True)
            except KubeError as error:
                failures.append(f"{victim.key}: {error}")
                continue
            self._events.record(namespace=victim.namespace, name=victim.name, uid=victim.uid, reason="Preempted",
                                message=f"Preempted by pod {hold.key} ({hold.uid}) on node {hold.node}")
        if failures:
            return self._failed(act, "; ".join(failures))
        names = ", ".join(victim.key for victim in act.victims)
        log.info("preemption pod=%s node=%s victims=%s", hold.key, hold.node, names,
                 extra={"pod": hold.key, "node": hold.node})
        self._events.record(namespace=hold.namespace, name=hold.name, uid=hold.uid, reason="Preempting",
                            message=f"preempted {names} on node {hold.node}; devices held until it is placed")
        return self._count("done", act)

    def _claim(self, hold: Hold) -> None:
        """Write the preemptor's ``status.nominatedNodeName`` on the version read (the fence; see the module)."""
        for _ in range(self._attempts):
            try:
                pod = self._retried(lambda: self._kube.get_pod(hold.namespace, hold.name))
            except NotFoundError:
                raise _StandDown("abandoned", "the pod is gone") from None
            metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
            if metadata.get("uid") != hold.uid:
                raise _StandDown("abandoned", "the pod is gone (another pod has its name)")
            if spec.get("nodeName"):
                raise _StandDown("abandoned", f"the pod is bound to node {spec['nodeName']}")
            named = status.get("nominatedNodeName") or ""
            if named and self._claimed.get(hold.uid) != named:
                raise _StandDown("fenced", f"another preemption (another server, or this one before a restart) "
                                           f"nominated node {named} for it")
            if named == hold.node:
                return
            patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion")},
                     "status": {"nominatedNodeName": hold.node}}
            try:
                self._retried(partial(self._kube.patch_pod_status, hold.namespace, hold.name, patch))
                self._claimed[hold.uid] = hold.node
                if len(self._claimed) > CLAIMS_KEPT:
                    del self._claimed[next(iter(self._claimed))]  # the oldest claim
                return
            except ConflictError:
                continue  # the pod changed since it was read: read it again
        raise KubeError(f"pod {hold.key} kept changing while its nominatedNodeName was written")

    def _preempt_victim(self, victim: PodRef, act: PreemptionAct) -> None:
        """The DisruptionTarget condition, then the delete with the victim's own grace period."""
        try:
            pod = self._kube.get_pod(victim.namespace, victim.name)
        except NotFoundError:
            return
        metadata = pod.get("metadata") or {}
        if metadata.get("uid") != victim.uid:
            return  # the victim is gone; a new pod took its name
        if not metadata.get("deletionTimestamp"):
            conditions = [condition for condition in (pod.get("status") or {}).get("conditions") or []
                          if isinstance(condition, dict) and condition.get("type") != DISRUPTION_TARGET]
            conditions.append(disruption_condition(act.scheduler_name))
            try:
                self._kube.patch_pod_status(victim.namespace, victim.name, {
                    "metadata": {"resourceVersion": metadata.get("resourceVersion")},
                    "status": {"conditions": conditions}})
            except NotFoundError:
                return
        try:
            self._kube.delete_pod(victim.namespace, victim.name, uid=victim.uid)
        except NotFoundError:
            return
        except ConflictError:
            if not _gone(self._kube, victim):
                raise

    def _retried(self, call: Callable[[], T], *, conflicts: bool = False) -> T:
        """``call``, again after a pause on an error a retry may cure: never a 404; a 409 only when ``conflicts``
        (``call`` reads the object again), else the caller answers it."""
        for attempt in range(1, self._attempts + 1):
            try:
                return call()
            except NotFoundError:
                raise
            except ConflictError:
                if not conflicts or attempt == self._attempts:
                    raise
                self._sleep(self._pause_seconds * attempt)
            except KubeError:
                if attempt == self._attempts:
                    raise
                self._sleep(self._pause_seconds * attempt)
        raise AssertionError("unreachable")

    def _failed(self, act: PreemptionAct, why: str) -> str:
        hold = act.hold
        log.error("preemption for pod %s on node %s failed after %d attempts: %s", hold.key, hold.node,
                  self._attempts, why, extra={"pod": hold.key, "node": hold.node})
        self._events.record(namespace=hold.namespace, name=hold.name, uid=hold.uid, reason="PreemptionFailed",
                            message=f"preemption on node {hold.node} failed: {why}", warning=True)
        self._cache.drop_hold(hold.uid, "its preemption failed")
        return self._count("failed", act)

    def _count(self, result: str, act: PreemptionAct) -> str:
        if self._metrics is not None:
            self._metrics.observe_preemption(result, len(act.victims) if result == "done" else 0)
        return result


# What preemption needs beyond the server's other rights: (verb, resource, subresource, API group).
RIGHTS = (("delete", "pods", "", ""), ("patch", "pods", "status", ""),
          ("list", "poddisruptionbudgets", "", "policy"), ("watch", "poddisruptionbudgets", "", "policy"))


def missing_rights(kube: Kube) -> str:
    """Which of `RIGHTS` this server's identity lacks ("" when it has them all), asked with SelfSubjectAccessReviews;
    an API that does not answer counts as lacking them (said in the text)."""
    missing = []
    for verb, resource, subresource, group in RIGHTS:
        try:
            allowed = kube.may(verb, resource, subresource=subresource, group=group)
        except KubeError as error:
            return f"cannot check the rights it needs ({error})"
        if not allowed:
            missing.append(f"{resource}{'/' + subresource if subresource else ''} {verb}")
    return f"the server may not {', '.join(missing)}" if missing else ""


def _gone(kube: Kube, victim: PodRef) -> bool:
    try:
        pod: JsonObject = kube.get_pod(victim.namespace, victim.name)
    except NotFoundError:
        return True
    metadata: dict[str, Any] = pod.get("metadata") or {}
    return metadata.get("uid") != victim.uid


def disruption_condition(scheduler_name: str) -> JsonObject:
    """The condition kube-scheduler writes on a victim before deleting it."""
    return {"type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER,
            "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
