"""``/filter``: choose a node and GPUs for a pod and book them in memory
(docs/scheduling-rules.md#the-filter-step-by-step).

The decision and the booking happen atomically in the cache; this module does what surrounds it — reading
kube-scheduler's request, events, metrics and the one log line per decision. It makes no API call:
kube-scheduler's scheduling cycle is serial and waits for every filter, so a pod PATCH here would cap the
whole cluster's scheduling rate. The booking is written onto the pod by ``/bind``, under the node lock, after
checking it against the API's current state of the node — one place that writes a booking, checked when it is
written. HAMi's device plugin reads the annotations only after the Binding, so it sees no difference.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hami_web.core.choose import Placement
from hami_web.core.options import OptionsError
from hami_web.core.policy import SchedulingPolicy
from hami_web.core.preemption import NoPreemption, Preemptor, preemption_terms
from hami_web.core.reasons import causes_key, group_reasons
from hami_web.core.requests import RequestError
from hami_web.extender.collaborators import EventSink, FilterMetrics
from hami_web.extender.outcomes import (
    FilterOutcome,
    FilterRefusal,
    FilterRefused,
    FilterRequest,
    Passthrough,
    Placed,
    UnreadableArgs,
    Unschedulable,
)
from hami_web.extender.preempting import Preempter
from hami_web.kube import deadline, deadline_left_seconds
from hami_web.state.cache import AlreadyBooked
from hami_web.state.faces import Placements

log = logging.getLogger(__name__)

SYNC_WAIT_SECONDS = 10.0
NOT_SYNCED_MESSAGE = "cluster cache has not completed its first sync yet; retry later"


def unschedulable_message(namespace: str, name: str, reasons: Mapping[str, str]) -> str:
    """The FilteringFailed message: nodes grouped by cause, a few examples each, and where to see every node.

    ``0/3 nodes fit: 2 nodes: CardInsufficientMemory (node-a, node-b); 1 node: NodeUnregistered (cpu-1). …``
    """
    groups = "; ".join(f"{group.nodes:,} node{'s' if group.nodes != 1 else ''}: {group.cause} "
                       f"({', '.join(group.examples)}{', …' if group.nodes > len(group.examples) else ''})"
                       for group in group_reasons(reasons))
    return (f"0/{len(reasons):,} nodes fit: {groups}. "
            f"Every node's reason: kubectl hami explain {namespace}/{name}")


class Filter:
    """Answers kube-scheduler's filter calls: decides into a `FilterOutcome`, then reports it (log, event, metric)."""

    def __init__(self, *, policy: SchedulingPolicy, cache: Placements, events: EventSink,
                 metrics: FilterMetrics | None = None, deadline_seconds: float = 15.0,
                 sync_wait_seconds: float = SYNC_WAIT_SECONDS, preempter: Preempter | None = None) -> None:
        """``policy`` is the server's scheduling policy; ``deadline_seconds`` is ``--extender-deadline``;
        ``preempter`` carries out device-aware preemptions (None: preemption is off; docs/preemption.md)."""
        self._preempter = preempter
        self._deadline_seconds = deadline_seconds
        self._policy = policy
        self._cache = cache
        self._events = events
        self._metrics = metrics
        self._sync_wait_seconds = sync_wait_seconds

    def filter(self, request: FilterRequest | UnreadableArgs) -> FilterOutcome:
        """One scheduling cycle's filter for one pod; every problem is an outcome (`FilterRefused`), never raised."""
        with deadline(self._deadline_seconds):
            outcome = self._decide(request)
        self._report(outcome)
        return outcome

    def _decide(self, request: FilterRequest | UnreadableArgs) -> FilterOutcome:
        if isinstance(request, UnreadableArgs):
            return FilterRefused(FilterRefusal.BAD_REQUEST, request.error, request)
        ref = request.ref
        try:
            pod_request = self._policy.request_of(request.pod)
        except RequestError as error:
            return self._refused(request, f"pod {ref.key}: {error}")
        if not pod_request.asks_for_gpu:
            return Passthrough(request)
        taken, replaces = self._already_taken(request.pod, f"pod {ref.key}")
        if taken:
            # Step 2 of docs/scheduling-rules.md#the-filter-step-by-step holds for a refused pod too: an earlier
            # placement of ours must not keep its devices while another binder's booking (or the Binding) is the truth;
            # what the API shows stays.
            self._cache.forget(ref.uid)
            return self._refused(request, taken)
        try:
            options = self._policy.options_of(request.annotations)
        except OptionsError as error:
            return self._refused(request, str(error))
        if not self._cache.wait_synced(min(self._sync_wait_seconds, max(0.0, deadline_left_seconds() or 0.0))):
            return FilterRefused(FilterRefusal.NOT_SYNCED, NOT_SYNCED_MESSAGE, request)
        priority, may_preempt = preemption_terms(request.pod)
        try:
            result = self._cache.place(uid=ref.uid, namespace=ref.namespace, name=ref.name, request=pod_request,
                                       options=options, candidates=request.candidates,
                                       container_names=pod_request.container_names,
                                       resource_version=request.resource_version, replaces=replaces,
                                       priority=priority,
                                       leftover_keys=self._leftover_keys(request.annotations))
        except AlreadyBooked as error:
            return self._refused(request, str(error))
        if isinstance(result, Placement):
            # Nothing is written here: the booking is an assumption in the cache until /bind verifies it against
            # the API under the node lock and writes it onto the pod (see `extender.binding`).
            return Placed(request, result)
        if self._preempter is None or not may_preempt:
            return Unschedulable(request, dict(result.reasons))
        preemptor = Preemptor(uid=ref.uid, namespace=ref.namespace, name=ref.name, priority=priority,
                              request=pod_request, options=options)
        return self._preempt(self._preempter, request, preemptor, dict(result.reasons))

    def _preempt(self, preempter: Preempter, request: FilterRequest, preemptor: Preemptor,
                 reasons: dict[str, str]) -> Unschedulable:
        """Device-aware preemption for a pod no node takes (docs/preemption.md): decided in the cache, the act queued
        for ``preempter``; the answer stays "no node" (the pod fits once its victims are gone)."""
        nominated = str((request.pod.get("status") or {}).get("nominatedNodeName") or "")
        scheduler = str((request.pod.get("spec") or {}).get("schedulerName") or self._policy.scheduler_name)
        decision = preempter.decide(preemptor, request.candidates, nominated=nominated, scheduler_name=scheduler)
        if isinstance(decision, NoPreemption):
            return Unschedulable(request, reasons)
        # The other nodes keep their own reasons (what their devices lack); FailedNodes names only the nodes
        # kube-scheduler sent, and a hold's node may not be among them this time.
        note = decision.reasons[decision.hold.node]
        if decision.hold.node in reasons:
            reasons[decision.hold.node] = note
        return Unschedulable(request, reasons, preemption=note)

    def _leftover_keys(self, annotations: Mapping[str, str]) -> frozenset[str]:
        """The annotations of an earlier booking the pod carries that a new booking may have to remove (MIG
        reservations; `cleared_annotations`)."""
        keys = (family.partitioning.reservations_key for family in self._policy.catalog
                if family.partitioning is not None)
        return frozenset(key for key in keys if key and key in annotations)

    @staticmethod
    def _refused(request: FilterRequest, message: str) -> FilterRefused:
        return FilterRefused(FilterRefusal.POD, message, request)

    def _already_taken(self, pod: Mapping[str, Any], where: str) -> tuple[str, str]:
        """Why the pod as sent must not be placed ("" when it may): it is bound, or carries another binder's booking;
        and the devices of a booking it carries that a placement may overwrite (abandoned, or expired). ``where``
        names the pod in the refusal.

        kube-scheduler never filters a bound pod, but a second replica's scheduler may send one its informer saw
        after the other replica booked or bound it; `/bind` writes on top of the version sent here, so a placement of
        that version would overwrite the other booking (`ClusterCache.standing_booking`; the cache refuses the same
        once its watch shows it).
        """
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            return f"{where} is already bound to node {bound_to}; it is not placed again", ""
        standing, may_overwrite = self._cache.standing_booking(pod)
        if standing is None:
            return "", ""
        if may_overwrite:
            return "", standing.devices_text
        return (f"{where} already holds devices on node {standing.node} ({standing.devices_text}); it is not placed "
                f"again"), ""

    def _report(self, outcome: FilterOutcome) -> None:
        """The one log line of the decision, the pod's event and the metrics, read from the outcome."""
        if isinstance(outcome, Placed):
            ref, placement = outcome.request.ref, outcome.placement
            log.info("filter pod=%s node=%s devices=%s score=%.3f%s", ref.key, placement.node, outcome.devices,
                     placement.node_score, " (busy binding: no free node fits)" if placement.node_busy else "",
                     extra={"pod": ref.key, "node": placement.node})
            self._events.record(namespace=ref.namespace, name=ref.name, uid=ref.uid, reason="FilteringSucceed",
                                message=f"placed on node {placement.node} with devices {outcome.devices}")
            self._count("placed", {})
        elif isinstance(outcome, Unschedulable):
            ref, reasons = outcome.request.ref, outcome.reasons
            summary = "; ".join(f"{node}: {reason}" for node, reason in sorted(reasons.items()))
            if outcome.preemption:
                summary = f"{outcome.preemption}; {summary}"
            log.info("filter pod=%s node=- no node fits: %s", ref.key, summary, extra={"pod": ref.key})
            self._events.record(namespace=ref.namespace, name=ref.name, uid=ref.uid, reason="FilteringFailed",
                                message=unschedulable_message(ref.namespace, ref.name, reasons), warning=True,
                                series=causes_key(reasons))
            self._count("unschedulable", reasons)
        elif isinstance(outcome, Passthrough):
            self._count("passthrough", {})
        else:
            if outcome.kind is FilterRefusal.BAD_REQUEST:
                log.warning("filter: %s", outcome.message)
            elif outcome.kind is FilterRefusal.POD and isinstance(outcome.request, FilterRequest):
                ref = outcome.request.ref
                log.warning("filter pod=%s node=- refused: %s", ref.key, outcome.message, extra={"pod": ref.key})
                self._events.record(namespace=ref.namespace, name=ref.name, uid=ref.uid, reason="FilteringFailed",
                                    message=outcome.message, warning=True)
            self._count("error", {})

    def _count(self, result: str, reasons: Mapping[str, str]) -> None:
        if self._metrics is not None:
            self._metrics.observe_filter(result, reasons)
