"""The extender as one object for the routes: filter and bind sharing a cache, adapter and event recorder.

The routes hand it a decoded request and encode the outcome it returns. When a `DecisionLog` is given, every
outcome is also remembered there (with its latency) for the dashboard; the filter and the binder themselves stay
unaware of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from hami_web.core.grants import describe_grants
from hami_web.extender.binding import Binder
from hami_web.extender.events import EventRecorder
from hami_web.extender.filtering import Filter
from hami_web.extender.outcomes import (
    BindFailure,
    BindOutcome,
    BindRefused,
    BindRequest,
    FilterOutcome,
    FilterRefusal,
    FilterRefused,
    FilterRequest,
    Passthrough,
    Placed,
    PreemptAnswer,
    PreemptOutcome,
    PreemptRefused,
    PreemptRequest,
    UnreadableArgs,
    Unschedulable,
)
from hami_web.extender.preemptverb import PreemptVerb
from hami_web.state.decisions import BIND, FILTER, Decision, DecisionLog
from hami_web.state.faces import CacheReads

# The filter writes nothing: until /bind writes the booking onto the pod, only this replica's memory holds it.
PLACED_MESSAGE = "booked in this server's memory; the API shows it once bound"


@dataclass(slots=True)
class Extender:
    """What ``/filter`` and ``/bind`` call."""

    filterer: Filter
    binder: Binder
    events: EventRecorder
    preempter: PreemptVerb | None = None
    cache: CacheReads | None = None
    decisions: DecisionLog | None = None
    # Monotonic time of the last /filter or /bind call: only the replica whose kube-scheduler holds the Lease is
    # called, so this tells an operator which replica is active (see `activity`).
    last_call: float | None = dataclass_field(default=None, compare=False)
    # HAMi's --leader-elect (`state.leadership.Leadership.standby_reason`): None while this replica may book, else
    # why not. A standby refuses before deciding anything, so it never promises a device.
    standby: Callable[[], str | None] | None = None
    describe_leadership: Callable[[], str] | None = None

    def filter(self, request: FilterRequest | UnreadableArgs) -> FilterOutcome:
        """See `Filter.filter`; a standby (``--leader-elect``) refuses, and kube-scheduler retries the pod."""
        self.last_call = time.monotonic()
        started = time.perf_counter()
        reason = self.standby() if self.standby is not None else None
        if reason is not None:
            return FilterRefused(FilterRefusal.NOT_SYNCED, reason, request)
        outcome = self.filterer.filter(request)
        if self.decisions is not None:
            self._note_filter(outcome, time.perf_counter() - started)
        return outcome

    def bind(self, request: BindRequest | UnreadableArgs) -> BindOutcome:
        """See `Binder.bind`; a standby refuses without touching anything."""
        self.last_call = time.monotonic()
        started = time.perf_counter()
        reason = self.standby() if self.standby is not None else None
        if reason is not None:
            return BindRefused(BindFailure.NOT_OURS, reason, request)
        outcome = self.binder.bind(request)
        if self.decisions is not None:
            self._note_bind(outcome, time.perf_counter() - started)
        return outcome

    def preempt(self, request: PreemptRequest | UnreadableArgs) -> PreemptOutcome:
        """See `PreemptVerb.process`; without one (``--preemption=off``) kube-scheduler's choice stands."""
        self.last_call = time.monotonic()
        if self.preempter is None:
            if isinstance(request, UnreadableArgs):
                return PreemptRefused(request.error, request)
            return PreemptAnswer(request, dict(request.proposals), {})
        return self.preempter.process(request)

    def activity(self) -> str:
        """``never called`` (a standby, or no GPU pod yet) or ``last called N s ago`` (the active replica)."""
        if self.last_call is None:
            return "never called"
        return f"last called {time.monotonic() - self.last_call:.0f} s ago"

    def leadership(self) -> str | None:
        """Under ``--leader-elect``: leader or standby, and who holds the Lease; else None."""
        return self.describe_leadership() if self.describe_leadership is not None else None

    def _gpus_held(self, uid: str, node: str) -> str:
        held = self.cache.held_by(uid) if self.cache is not None and uid else None
        return describe_grants(held.grants) if held is not None and held.node == node else ""

    def _note_filter(self, outcome: FilterOutcome, latency_seconds: float) -> None:
        assert self.decisions is not None
        node, gpus = "", ""
        if isinstance(outcome, FilterRefused):
            key, result, message = outcome.pod_key, "error", outcome.message
        else:
            key = outcome.request.ref.key
            if isinstance(outcome, Placed):
                result, node, gpus, message = "placed", outcome.placement.node, outcome.devices, PLACED_MESSAGE
                self.decisions.forget_refusal(outcome.request.ref.uid)
            elif isinstance(outcome, Passthrough):
                result, message = "passthrough", f"no device asked: {len(outcome.request.candidates)} nodes passed"
            else:
                assert isinstance(outcome, Unschedulable)
                result, message = "unschedulable", f"0/{len(outcome.reasons)} nodes fit"
                self.decisions.record_refusal(uid=outcome.request.ref.uid, pod=key, reasons=outcome.reasons,
                                              pod_object=outcome.request.pod)
        self.decisions.record(Decision(at=self.decisions.now(), kind=FILTER, pod=key, node=node, gpus=gpus,
                                       result=result, latency_seconds=latency_seconds, message=message))

    def _note_bind(self, outcome: BindOutcome, latency_seconds: float) -> None:
        assert self.decisions is not None
        request = outcome.request
        uid, node = (request.ref.uid, request.node) if isinstance(request, BindRequest) else ("", "")
        if isinstance(outcome, BindRefused):
            key, result, message = outcome.pod_key, "error", outcome.message
        else:
            key, result, message = outcome.request.ref.key, "bound", ""
            self.decisions.forget_refusal(uid)
        self.decisions.record(Decision(at=self.decisions.now(), kind=BIND, pod=key, node=node,
                                       gpus=self._gpus_held(uid, node), result=result,
                                       latency_seconds=latency_seconds, message=message))
