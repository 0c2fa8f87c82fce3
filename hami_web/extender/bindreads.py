"""What ``/bind`` reads from the API to judge a booking: the pod now, where it is bound, the node's other bookings,
and the other bookings of its namespace when a device quota limits what it books (docs/quotas.md#namespace-quotas).

Each read answers one question the bind's steps ask (`extender.binding`); none writes, and none feeds the cache: the
watch brings the same objects in order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from hami_web.core import names
from hami_web.core.devices import AnnotationError
from hami_web.core.families import DeviceCatalog
from hami_web.core.grants import booking_annotations
from hami_web.core.quota import NamespaceQuota, booking_quota_use, family_quota_names, quota_resources
from hami_web.core.verify import other_bookings, placement_conflicts
from hami_web.kube import Kube, KubeError, NotFoundError
from hami_web.state.faces import Placements
from hami_web.state.pods import PodUsage, pod_key, pod_usage

log = logging.getLogger(__name__)


class BindReads:
    """The bind's reads of the API, judged against what this process placed."""

    def __init__(self, *, kube: Kube, cache: Placements, catalog: DeviceCatalog) -> None:
        self._kube = kube
        self._cache = cache
        self._catalog = catalog
        self._quota_resources = quota_resources(catalog)
        self._quota_families = family_quota_names(catalog)

    def pod_still_unbound(self, placed: PodUsage) -> tuple[dict[str, Any] | None, str]:
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
            return pod, (f"pod {placed.namespace}/{placed.name} already holds devices on node {standing.node} "
                         f"({standing.devices_text}), booked by another scheduler; filter it again")
        return pod, ""

    def bound_here(self, pod: dict[str, Any], placed: PodUsage, node: str) -> bool:
        """Whether ``pod`` is bound to ``node`` with ``placed``'s booking written: an earlier bind of it landed."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        written = booking_annotations(placed.grants, self._catalog)
        return ((pod.get("spec") or {}).get("nodeName") == node and annotations.get(names.POD_ASSIGNED_NODE) == node
                and all(annotations.get(key) == value for key, value in written.items()))

    def conflicts(self, placed: PodUsage, node: str, *, not_older_than: str) -> str:
        """What of ``placed`` no longer fits on ``node`` beside the other pods' bookings the API shows there ("" when
        all fits); `KubeError` when the API cannot be read.

        Called under the node lock, right after our own booking was written at resourceVersion ``not_older_than``:
        the API answers from its watch cache once that has seen our write, so the pods read include every booking
        written before — another binder's booking is written before it gives the node lock up, so before ours. The pods
        read are not given to the cache: the watch brings the same objects in order, and a snapshot
        applied after a newer event would put back a booking that was already voided.
        """
        view = self._cache.node_view(node)
        if view is None:
            return f"node {node} is not a node with devices this hami-web knows"
        bookings = []
        pods = self._kube.list_pods_on_node(node, assigned_label=names.LABEL_ASSIGNED_NODE,
                                            not_older_than=not_older_than)
        for usage in self._other_bookings(pods, placed, f"on node {node}"):
            if usage.node == node:
                bookings.append((usage.booking, usage.grants))
        conflicts = placement_conflicts(view.inventory, other_bookings(bookings), placed.booking, placed.grants,
                                        self._catalog.core_bookings())
        return "; ".join(conflict.describe() for conflict in conflicts)

    def quota_excess(self, placed: PodUsage, *, not_older_than: str) -> str:
        """Which device quota of its namespace ``placed`` would pass beside the namespace's other bookings as the API
        shows them at or after ``not_older_than`` ("" when none, or when its namespace limits nothing it books: then
        nothing is read).

        The limits are the cache's (the ResourceQuota watch); the bookings are read, not the cache's, which may not
        have seen another binder's yet. Of two binders racing in one namespace, the later writer reads the earlier
        one's booking. Raises `KubeError` when the API cannot be read.
        """
        ours = booking_quota_use(placed.booking, placed.grants, self._quota_resources, self._quota_families)
        limits = self._cache.namespace_quota(placed.namespace).limits
        if not any(resource in limits for resource in ours):
            return ""
        others: dict[str, int] = {}
        pods = self._kube.list_booked_pods_in_namespace(placed.namespace, assigned_label=names.LABEL_ASSIGNED_NODE,
                                                        not_older_than=not_older_than)
        for usage in self._other_bookings(pods, placed, f"in namespace {placed.namespace}"):
            for resource, amount in booking_quota_use(usage.booking, usage.grants, self._quota_resources,
                                                      self._quota_families).items():
                others[resource] = others.get(resource, 0) + amount
        excesses = NamespaceQuota(placed.namespace, limits, others).booking_excess(ours, self._quota_resources)
        return "; ".join(excess.describe() for excess in excesses)

    def _other_bookings(self, pods: Iterable[dict[str, Any]], placed: PodUsage, where: str) -> Iterator[PodUsage]:
        """What each of ``pods`` but ``placed`` itself holds; as in the cache, a garbage booking is unknown usage, not a
        veto (logged with ``where`` the pods were read)."""
        for pod in pods:
            uid, pod_namespace, pod_name = pod_key(pod)
            if uid == placed.uid:
                continue
            try:
                usage = pod_usage(pod, catalog=self._catalog)
            except AnnotationError as error:
                log.warning("bind: pod %s/%s %s: unreadable booking ignored: %s", pod_namespace, pod_name, where,
                            error)
                continue
            if usage is not None:
                yield usage

    def bound_to(self, namespace: str, name: str, uid: str) -> str | None:
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
