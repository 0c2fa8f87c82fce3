"""The extender as one object for the routes: filter and bind sharing a cache, adapter and event recorder.

When a `DecisionLog` is given, every answer is also remembered there (with its latency) for the dashboard;
the filter and the binder themselves stay unaware of it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from hami_web.core.grants import describe_grants
from hami_web.extender.binding import Binder
from hami_web.extender.events import EventRecorder
from hami_web.extender.filtering import Filter
from hami_web.extender.wire import ExtenderBindingResult, ExtenderFilterResult, field
from hami_web.state.cache import ClusterCache
from hami_web.state.decisions import BIND, FILTER, Decision, DecisionLog

# The filter writes nothing: until /bind writes the booking onto the pod, only this replica's memory holds it.
PLACED_MESSAGE = "booked in this server's memory; the API shows it once bound"


@dataclass(slots=True)
class Extender:
    """What ``/filter`` and ``/bind`` call."""

    filterer: Filter
    binder: Binder
    events: EventRecorder
    cache: ClusterCache | None = None
    decisions: DecisionLog | None = None
    # Monotonic time of the last /filter or /bind call: only the replica whose kube-scheduler holds the Lease is
    # called, so this tells an operator which replica is active (see `activity`).
    last_call: float | None = dataclass_field(default=None, compare=False)

    def filter(self, body: object) -> ExtenderFilterResult:
        """See `Filter.filter`."""
        self.last_call = time.monotonic()
        started = time.perf_counter()
        answer = self.filterer.filter(body)
        if self.decisions is not None:
            self._note_filter(body, answer, time.perf_counter() - started)
        return answer

    def bind(self, body: object) -> ExtenderBindingResult:
        """See `Binder.bind`."""
        self.last_call = time.monotonic()
        started = time.perf_counter()
        answer = self.binder.bind(body)
        if self.decisions is not None:
            self._note_bind(body, answer, time.perf_counter() - started)
        return answer

    def activity(self) -> str:
        """``never called`` (a standby, or no GPU pod yet) or ``last called N s ago`` (the active replica)."""
        if self.last_call is None:
            return "never called"
        return f"last called {time.monotonic() - self.last_call:.0f} s ago"

    def _gpus_held(self, uid: str, node: str) -> str:
        held = self.cache.held_by(uid) if self.cache is not None and uid else None
        return describe_grants(held.grants) if held is not None and held.node == node else ""

    def _note_filter(self, body: object, answer: ExtenderFilterResult, latency_seconds: float) -> None:
        assert self.decisions is not None
        pod = field(body, "Pod") if isinstance(body, Mapping) else None
        metadata: Mapping[str, Any] = (pod.get("metadata") if isinstance(pod, Mapping) else None) or {}
        uid = str(metadata.get("uid") or "")
        key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or '?'}"
        chosen = answer.get("NodeNames") or [
            str((item.get("metadata") or {}).get("name")) for item in (answer.get("Nodes") or {}).get("items", [])]
        node, gpus, message = "", "", answer.get("Error") or ""
        if message:
            result = "error"
        elif len(chosen) == 1 and (gpus := self._gpus_held(uid, chosen[0])):
            result, node, message = "placed", chosen[0], PLACED_MESSAGE
        elif chosen:
            result, message = "passthrough", f"no GPU asked: {len(chosen)} nodes passed"
        else:
            result = "unschedulable"
            reasons = answer.get("FailedNodes") or {}
            message = f"0/{len(reasons)} nodes fit"
            if uid and isinstance(pod, Mapping):
                self.decisions.record_refusal(uid=uid, pod=key, reasons=reasons, pod_object=pod)
        if result == "placed" and uid:
            self.decisions.forget_refusal(uid)
        self.decisions.record(Decision(at=self.decisions.now(), kind=FILTER, pod=key, node=node, gpus=gpus,
                                       result=result, latency_seconds=latency_seconds, message=message))

    def _note_bind(self, body: object, answer: ExtenderBindingResult, latency_seconds: float) -> None:
        assert self.decisions is not None
        args: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
        uid, node = str(field(args, "PodUID") or ""), str(field(args, "Node") or "")
        key = f"{field(args, 'PodNamespace') or 'default'}/{field(args, 'PodName') or '?'}"
        error = answer.get("Error") or ""
        if not error and uid:
            self.decisions.forget_refusal(uid)
        self.decisions.record(Decision(at=self.decisions.now(), kind=BIND, pod=key, node=node,
                                       gpus=self._gpus_held(uid, node), result="error" if error else "bound",
                                       latency_seconds=latency_seconds, message=error))
