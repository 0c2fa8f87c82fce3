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
from hami_web.core.grants import describe_grants
from hami_web.core.options import OptionsError, pod_options
from hami_web.core.reasons import causes_key, group_reasons
from hami_web.core.requests import RequestDefaults, RequestError, pod_request
from hami_web.extender.events import EventRecorder
from hami_web.extender.wire import ExtenderFilterResult, WireError, filter_candidates, filter_pod, require_object
from hami_web.kube import deadline, deadline_left_seconds
from hami_web.settings import Settings
from hami_web.state.cache import AlreadyBooked, ClusterCache

log = logging.getLogger(__name__)

SYNC_WAIT_SECONDS = 10.0


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
    """Answers kube-scheduler's filter calls."""

    def __init__(self, *, settings: Settings, cache: ClusterCache, events: EventRecorder,
                 metrics: Any = None, sync_wait_seconds: float = SYNC_WAIT_SECONDS) -> None:
        self._deadline_seconds = settings.extender_deadline_seconds
        self._settings = settings
        self._cache = cache
        self._events = events
        self._metrics = metrics
        self._sync_wait_seconds = sync_wait_seconds
        self._defaults = RequestDefaults.of(settings.devices)

    def filter(self, body: object) -> ExtenderFilterResult:
        """One scheduling cycle's filter for one pod; errors are answered in ``Error``, never raised."""
        with deadline(self._deadline_seconds):
            return self._filter(body)

    def _filter(self, body: object) -> ExtenderFilterResult:
        try:
            args = require_object(body, "ExtenderArgs")
            pod = filter_pod(args)
            candidates, node_objects = filter_candidates(args)
        except WireError as error:
            log.warning("filter: bad request: %s", error)
            self._count("error", {})
            return {"NodeNames": None, "FailedNodes": {}, "Error": f"bad ExtenderArgs: {error}"}
        metadata = pod["metadata"]
        namespace, name, uid = str(metadata.get("namespace") or "default"), str(metadata["name"]), str(metadata["uid"])
        try:
            request = pod_request(pod, self._defaults)
        except RequestError as error:
            return self._refuse(namespace, name, uid, f"pod {namespace}/{name}: {error}")
        if not request.asks_for_gpu:
            self._count("passthrough", {})
            return self._answer(candidates, node_objects, failed={})
        taken, replaces = self._already_taken(pod, f"pod {namespace}/{name}")
        if taken:
            # Step 2 of docs/scheduling-rules.md#the-filter-step-by-step holds for a refused pod too: an earlier
            # placement of ours must not keep its devices while another binder's booking (or the Binding) is the truth;
            # what the API shows stays.
            self._cache.forget(uid)
            return self._refuse(namespace, name, uid, taken)
        try:
            options = pod_options(metadata.get("annotations") or {},
                                  node_policy=self._settings.node_scheduler_policy,
                                  gpu_policy=self._settings.gpu_scheduler_policy, catalog=self._settings.devices)
        except OptionsError as error:
            return self._refuse(namespace, name, uid, str(error))
        if not self._cache.wait_synced(min(self._sync_wait_seconds, max(0.0, deadline_left_seconds() or 0.0))):
            self._count("error", {})
            return {"NodeNames": None, "FailedNodes": {},
                    "Error": "cluster cache has not completed its first sync yet; retry later"}
        try:
            result = self._cache.place(uid=uid, namespace=namespace, name=name, request=request, options=options,
                                       candidates=candidates, container_names=request.container_names,
                                       resource_version=str(metadata.get("resourceVersion") or ""), replaces=replaces)
        except AlreadyBooked as error:
            return self._refuse(namespace, name, uid, str(error))
        if not isinstance(result, Placement):
            return self._unschedulable(namespace, name, uid, dict(result.reasons), node_objects)
        return self._commit(namespace, name, uid, result, node_objects)

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
        return (f"{where} already holds GPUs on node {standing.node} ({standing.devices_text}); it is not placed "
                f"again"), ""

    def _commit(self, namespace: str, name: str, uid: str, placement: Placement,
                node_objects: Mapping[str, Any] | None) -> ExtenderFilterResult:
        # Nothing is written here: the booking is an assumption in the cache until /bind verifies it against
        # the API under the node lock and writes it onto the pod (see `extender.binding`).
        devices = describe_grants(placement.grants)
        log.info("filter pod=%s/%s node=%s devices=%s score=%.3f%s", namespace, name, placement.node, devices,
                 placement.node_score, " (busy binding: no free node fits)" if placement.node_busy else "",
                 extra={"pod": f"{namespace}/{name}", "node": placement.node})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="FilteringSucceed",
                            message=f"placed on node {placement.node} with devices {devices}")
        self._count("placed", {})
        return self._answer([placement.node], node_objects, failed={})

    def _unschedulable(self, namespace: str, name: str, uid: str, reasons: dict[str, str],
                       node_objects: Mapping[str, Any] | None) -> ExtenderFilterResult:
        summary = "; ".join(f"{node}: {reason}" for node, reason in sorted(reasons.items()))
        log.info("filter pod=%s/%s node=- no node fits: %s", namespace, name, summary,
                 extra={"pod": f"{namespace}/{name}"})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="FilteringFailed",
                            message=unschedulable_message(namespace, name, reasons), warning=True,
                            series=causes_key(reasons))
        self._count("unschedulable", reasons)
        return self._answer([], node_objects, failed=reasons)

    def _refuse(self, namespace: str, name: str, uid: str, message: str) -> ExtenderFilterResult:
        log.warning("filter pod=%s/%s node=- refused: %s", namespace, name, message,
                    extra={"pod": f"{namespace}/{name}"})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="FilteringFailed", message=message,
                            warning=True)
        self._count("error", {})
        return {"NodeNames": None, "FailedNodes": {}, "Error": message}

    @staticmethod
    def _answer(chosen: list[str], node_objects: Mapping[str, Any] | None,
                failed: dict[str, str]) -> ExtenderFilterResult:
        if node_objects is None:
            return {"NodeNames": chosen, "FailedNodes": failed, "Error": ""}
        items = [node_objects[node] for node in chosen]
        return {"Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items},
                "NodeNames": None, "FailedNodes": failed, "Error": ""}

    def _count(self, outcome: str, reasons: Mapping[str, str]) -> None:
        if self._metrics is not None:
            self._metrics.observe_filter(outcome, reasons)
