"""``/filter``: choose a node and GPUs for a pod, book them, and write the choice onto the pod (SPEC.md §5).

The decision and the booking happen atomically in the cache; this module does what surrounds it — reading
kube-scheduler's request, patching the pod's annotations (undoing the booking if that fails), events,
metrics and the one log line per decision.

Every API call of one filter shares one deadline (``--extender-deadline``), so the answer reaches
kube-scheduler inside its ``httpTimeout`` even when the API server stalls. The pod patch carries the pod's
uid, so a stale or forged request can never annotate another pod of the same name. When the patch's outcome
is unknown (timeout, connection reset), the pod is read back; unless that shows the patch applied, the
booking is kept as an assumption (the GPUs may be promised to this pod) until a list or watch shows the
truth, and kube-scheduler is told to retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from hami_web.core import names
from hami_web.core.choose import Placement
from hami_web.core.grants import describe_grants, encode_pod_devices
from hami_web.core.options import OptionsError, pod_options
from hami_web.core.requests import RequestDefaults, RequestError, pod_request
from hami_web.extender.deadlines import after_deadline_seconds
from hami_web.extender.events import EventRecorder
from hami_web.extender.wire import ExtenderFilterResult, WireError, filter_candidates, filter_pod, require_object
from hami_web.kube import Kube, KubeError, deadline, deadline_left_seconds
from hami_web.settings import Settings
from hami_web.state.cache import ClusterCache

log = logging.getLogger(__name__)

SYNC_WAIT_SECONDS = 10.0


class Filter:
    """Answers kube-scheduler's filter calls."""

    def __init__(self, *, settings: Settings, cache: ClusterCache, kube: Kube, events: EventRecorder,
                 metrics: Any = None, clock: Callable[[], float] = time.time,
                 sync_wait_seconds: float = SYNC_WAIT_SECONDS) -> None:
        self._deadline_seconds = settings.extender_deadline_seconds
        self._settings = settings
        self._cache = cache
        self._kube = kube
        self._events = events
        self._metrics = metrics
        self._clock = clock
        self._sync_wait_seconds = sync_wait_seconds
        self._defaults = RequestDefaults(resources=settings.resources, default_mem_mib=settings.default_mem_mib,
                                         default_cores=settings.default_cores)

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
        try:
            options = pod_options(metadata.get("annotations") or {},
                                  node_policy=self._settings.node_scheduler_policy,
                                  gpu_policy=self._settings.gpu_scheduler_policy)
        except OptionsError as error:
            return self._refuse(namespace, name, uid, str(error))
        if not self._cache.wait_synced(min(self._sync_wait_seconds, max(0.0, deadline_left_seconds() or 0.0))):
            self._count("error", {})
            return {"NodeNames": None, "FailedNodes": {},
                    "Error": "cluster cache has not completed its first sync yet; retry later"}
        result = self._cache.place(uid=uid, namespace=namespace, name=name, request=request, options=options,
                                   candidates=candidates, container_names=[c.name for c in request.containers])
        if not isinstance(result, Placement):
            return self._unschedulable(namespace, name, uid, dict(result.reasons), node_objects)
        return self._commit(namespace, name, uid, result, node_objects)

    def _commit(self, namespace: str, name: str, uid: str, placement: Placement,
                node_objects: Mapping[str, Any] | None) -> ExtenderFilterResult:
        encoded = encode_pod_devices(placement.grants)
        patch = {"metadata": {
            "uid": uid,  # a precondition: the API refuses the patch when the pod of that name has another uid
            "annotations": {
                names.POD_ASSIGNED_NODE: placement.node,
                names.POD_ASSIGNED_TIME: str(int(self._clock())),
                names.POD_DEVICES_TO_ALLOCATE: encoded,
                names.POD_DEVICES_ALLOCATED: encoded,
                names.POD_BIND_PHASE: None,  # a failure from an earlier attempt no longer applies
            },
            "labels": {names.LABEL_ASSIGNED_NODE: placement.node},
        }}
        try:
            self._kube.patch_pod(namespace, name, patch)
        except KubeError as error:
            if not (error.outcome_unknown and self._patch_applied(namespace, name, uid, encoded, placement.node)):
                return self._patch_failed(namespace, name, uid, placement.node, error)
        devices = describe_grants(placement.grants)
        log.info("filter pod=%s/%s node=%s devices=%s score=%.3f", namespace, name, placement.node, devices,
                 placement.node_score, extra={"pod": f"{namespace}/{name}", "node": placement.node})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="FilteringSucceed",
                            message=f"placed on node {placement.node} with devices {devices}")
        self._count("placed", {})
        return self._answer([placement.node], node_objects, failed={})

    def _patch_applied(self, namespace: str, name: str, uid: str, encoded: str, node: str) -> bool:
        """Read the pod back after a patch whose outcome is unknown: True when it carries our placement.

        The read gets its own budget (`after_deadline_seconds`): the request's may be spent by the patch.
        """
        try:
            with deadline(after_deadline_seconds(self._deadline_seconds)):
                pod = self._kube.get_pod(namespace, name)
        except KubeError as error:
            log.warning("filter pod=%s/%s: cannot read the pod back after an unanswered patch: %s",
                        namespace, name, error)
            return False
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        return (metadata.get("uid") == uid and annotations.get(names.POD_DEVICES_ALLOCATED) == encoded
                and annotations.get(names.POD_ASSIGNED_NODE) == node)

    def _patch_failed(self, namespace: str, name: str, uid: str, node: str,
                      error: KubeError) -> ExtenderFilterResult:
        self._count("error", {})
        if error.outcome_unknown:
            # The patch may still have been applied: the GPUs stay promised to this pod until a list or watch
            # shows the pod (ClusterCache drops an assumption the API does not confirm within its grace period).
            log.warning("filter pod=%s/%s node=%s: outcome of the pod patch unknown, booking kept until the API "
                        "shows the pod: %s", namespace, name, node, error)
            return {"NodeNames": None, "FailedNodes": {},
                    "Error": f"pod {namespace}/{name}: no answer to the patch that records its GPUs ({error}); "
                             f"its GPUs on node {node} stay booked until the API shows the pod; retry later"}
        self._cache.forget(uid)
        log.warning("filter pod=%s/%s node=%s: placement dropped, cannot annotate pod: %s", namespace, name, node,
                    error)
        return {"NodeNames": None, "FailedNodes": {},
                "Error": f"cannot annotate pod {namespace}/{name} with its GPUs: {error}"}

    def _unschedulable(self, namespace: str, name: str, uid: str, reasons: dict[str, str],
                       node_objects: Mapping[str, Any] | None) -> ExtenderFilterResult:
        summary = "; ".join(f"{node}: {reason}" for node, reason in sorted(reasons.items()))
        log.info("filter pod=%s/%s node=- no node fits: %s", namespace, name, summary,
                 extra={"pod": f"{namespace}/{name}"})
        self._events.record(namespace=namespace, name=name, uid=uid, reason="FilteringFailed",
                            message=f"no node fits: {summary}", warning=True)
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
