"""What ``/bind`` reads from the API to judge a booking: the pod now, where it is bound, the node's other bookings,
and the other bookings of its namespace when a device quota limits what it books (docs/quotas.md#namespace-quotas).

Each read answers one question the bind's steps ask (`extender.binding`); none writes, and none feeds the cache: the
watch brings the same objects in order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hami_web.core import names
from hami_web.core.checks import EXCLUSIVE_CORES
from hami_web.core.devices import AnnotationError
from hami_web.core.families import DeviceCatalog
from hami_web.core.grants import booking_annotations, cleared_annotations
from hami_web.core.quota import NamespaceQuota, booking_quota_use, family_quota_names, quota_resources
from hami_web.core.usage import NO_USAGE, DeviceUsage
from hami_web.core.verify import OtherBookings, other_bookings, placement_conflicts
from hami_web.core.versions import not_older
from hami_web.kube import JsonObject, Kube, KubeError, NotFoundError
from hami_web.state.faces import Placements
from hami_web.state.pods import PodUsage, pod_key, pod_usage

log = logging.getLogger(__name__)

# How long a bind whose lock is newer than the cache's pod stream waits for the stream before it lists the node's pods,
# and how often it looks.
POD_STREAM_WAIT_SECONDS = 0.1
POD_STREAM_POLL_SECONDS = 0.005


class BindReads:
    """The bind's reads of the API, judged against what this process placed."""

    def __init__(self, *, kube: Kube, cache: Placements, catalog: DeviceCatalog,
                 pods_version: Callable[[], str] = str) -> None:
        self._kube = kube
        self._pods_version = pods_version
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

        Called under the node lock taken at the node's resourceVersion ``not_older_than`` (or after our own booking
        was written at that version): the API answers from its watch cache once that has seen the version, so the
        pods read include every booking written before — another binder's booking is written before it gives the
        node lock up, so before we took it. Under the lock every live booking on the node is on a bound pod
        (`Kube.list_pods_on_node`). The pods read are not given to the cache: the watch brings the same objects in
        order, and a snapshot applied after a newer event would put back a booking that was already voided.
        """
        view = self._cache.node_view(node)
        if view is None:
            return f"node {node} is not a node with devices this hami-web knows"
        bookings = []
        pods = self._kube.list_pods_on_node(node, not_older_than=not_older_than)
        for usage in self._other_bookings(pods, placed, f"on node {node}"):
            if usage.node == node:
                bookings.append((usage.booking, usage.grants))
        conflicts = placement_conflicts(view.inventory, other_bookings(bookings), placed.booking, placed.grants,
                                        self._catalog.core_bookings())
        return "; ".join(conflict.describe() for conflict in conflicts)

    def wait_for_pods(self, not_older_than: str, *, timeout_seconds: float = POD_STREAM_WAIT_SECONDS) -> bool:
        """Whether the cache's pod stream reaches ``not_older_than`` within ``timeout_seconds`` (no call: it looks
        every few milliseconds). In a burst other pods' events pass the version of a lock just taken within
        milliseconds; a list of the node's pods is an API call and a read for kube-apiserver."""
        if not not_older_than.isdigit():
            return False  # not an etcd revision: the stream's version cannot be compared with it
        deadline = time.monotonic() + timeout_seconds
        while not not_older(self._pods_version(), not_older_than):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POD_STREAM_POLL_SECONDS)
        return True

    def cached_conflicts(self, placed: PodUsage, node: str, *, not_older_than: str) -> str | None:
        """`conflicts` from the cache, without a call: None when the cache cannot tell.

        The cache can tell once it has applied the pod stream up to ``not_older_than`` (the version the node lock was
        taken at): every booking `conflicts` would read is then in the cache's totals for the node, which also hold
        our own placements not bound yet (stricter than the API). What the others hold is those totals less our
        placement; an exclusive holder is any whose cores fill the card (stricter still). A version that is not a
        number (a resourceVersion is opaque to clients; kube-apiserver's are etcd revisions), or totals that do not
        hold our placement, and the cache cannot tell.
        """
        if not not_older(self._pods_version(), not_older_than):
            return None
        view = self._cache.node_view(node, holding=placed)
        if view is None:
            return None
        theirs: dict[str, DeviceUsage] = {}
        for device, used in zip(view.inventory.devices, view.usage, strict=True):
            left = used - placed.booking.get(device.uuid, NO_USAGE)
            if min(left.tasks, left.memory_mib, left.cores, left.legacy_entries) < 0:
                return None  # our placement is not in these totals
            theirs[device.uuid] = left
        exclusive = frozenset(uuid for uuid, usage in theirs.items() if usage.cores >= EXCLUSIVE_CORES)
        conflicts = placement_conflicts(view.inventory, OtherBookings(theirs, exclusive), placed.booking,
                                        placed.grants)
        return "; ".join(conflict.describe() for conflict in conflicts)

    def quota_applies(self, placed: PodUsage) -> bool:
        """Whether a device quota of ``placed``'s namespace limits something it books (then `quota_excess` reads)."""
        ours = booking_quota_use(placed.booking, placed.grants, self._quota_resources, self._quota_families)
        limits = self._cache.namespace_quota(placed.namespace).limits
        return any(resource in limits for resource in ours)

    def leftovers(self, pod: dict[str, Any], placed: PodUsage) -> bool:
        """Whether ``pod`` carries annotations of an earlier booking that ``placed``'s booking removes (a Binding
        cannot)."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return any(key in annotations for key in cleared_annotations(placed.grants, self._catalog))

    def pod_group(self, namespace: str, name: str) -> str:
        """The pod's gang (PodGroup label or ``spec.schedulingGroup``), or "" for a pod on its own (or unreadable)."""
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

    def quota_excess(self, placed: PodUsage, *, not_older_than: str) -> str:
        """Which device quota of its namespace ``placed`` would pass beside the namespace's other bookings as the API
        shows them at or after ``not_older_than`` ("" when none, or when its namespace limits nothing it books: then
        nothing is read).

        The limits are the cache's (the ResourceQuota watch); the bookings are read, not the cache's, which may not
        have seen another binder's yet. Of two binders racing in one namespace, the later writer reads the earlier
        one's booking. Raises `KubeError` when the API cannot be read.
        """
        if not self.quota_applies(placed):
            return ""
        ours = booking_quota_use(placed.booking, placed.grants, self._quota_resources, self._quota_families)
        limits = self._cache.namespace_quota(placed.namespace).limits
        others: dict[str, int] = {}
        pods = self._kube.list_namespace_pods_at(placed.namespace, not_older_than=not_older_than)
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
