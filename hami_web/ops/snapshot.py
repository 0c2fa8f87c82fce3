"""A read-only picture of the cluster's devices (every enabled family's), built from one paginated list of nodes
and one of pods.

The tools must see what the scheduler sees, so every object goes through the cache's own readers
(`node_state` for inventories, handshake and broken annotations; `pod_usage` for what a pod holds) and the
core's `build_node_view`; only the locking and the watches of the live cache are left out. That is also why
``explain`` works while the server is down: it needs nothing but the API.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.devices import AnnotationError
from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.misses import NearMiss, nearest_miss
from hami_web.core.noderules import (
    NodeTraits,
    PodNeeds,
    RuleInputError,
    Screening,
    add_requests,
    pod_occupies_node,
    pod_requests,
    read_node_traits,
    screen_nodes,
)
from hami_web.core.options import PodOptions
from hami_web.core.quota import (
    NamespaceQuota,
    booking_quota_use,
    effective_limits,
    family_quota_names,
    memory_factors,
    parse_resource_quota,
    quota_resources,
)
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView, build_node_view, sum_bookings
from hami_web.kube import LIST_PAGE_SIZE, Kube, KubeError, join_pages
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import PodUsage, pod_key, pod_usage

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the tools show about a node besides its devices (``plugin_gone``: the families whose device plugin
    stopped answering the handshake, so their devices are left out)."""

    name: str
    gpu_node: bool
    cordoned: bool
    error: str = ""
    plugin_gone: tuple[str, ...] = ()


@dataclass(slots=True)
class ClusterSnapshot:
    """Every listed node, the GPU nodes' views, and what each pod holds."""

    nodes: dict[str, NodeFacts] = field(default_factory=dict)
    views: dict[str, NodeView] = field(default_factory=dict)
    broken_nodes: dict[str, str] = field(default_factory=dict)
    usages: list[PodUsage] = field(default_factory=list)
    broken_pods: dict[str, str] = field(default_factory=dict)
    traits: dict[str, NodeTraits] = field(default_factory=dict)
    requested: dict[str, dict[str, int]] = field(default_factory=dict)
    catalog: DeviceCatalog = DEFAULT_CATALOG  # the families the snapshot was read with (their templates, for the tools)
    # Namespace quotas (docs/quotas.md#namespace-quotas): the effective limits and the booked use per namespace and
    # resource, and what could not be read (a malformed value, or no permission to list ResourceQuotas).
    quota_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    quota_used: dict[str, dict[str, int]] = field(default_factory=dict)
    quota_warnings: list[str] = field(default_factory=list)
    quota_factors: dict[str, int] = field(default_factory=dict)  # memory resource -> its family's memory factor
    # Screenings already made on this snapshot, by the pod's needs: the pods of one page mostly ask alike.
    _screenings: dict[str, Screening] = field(default_factory=dict, repr=False, compare=False)
    _misses: dict[tuple[PodRequest, PodOptions, str], NearMiss | None] = field(default_factory=dict, repr=False,
                                                                                compare=False)

    def namespace_quota(self, namespace: str) -> NamespaceQuota:
        """The namespace's device limits and booked use, as the filter would judge them."""
        return NamespaceQuota(namespace, self.quota_limits.get(namespace, {}), self.quota_used.get(namespace, {}))

    def node_traits(self) -> dict[str, NodeTraits]:
        """What the node rules read on each listed node; a node read without them shows only its cordon."""
        traits = self.traits
        return {name: traits.get(name) or NodeTraits(name=name, unschedulable=facts.cordoned)
                for name, facts in self.nodes.items()}

    def nearest_miss(self, request: PodRequest, options: PodOptions, needs: PodNeeds) -> NearMiss | None:
        """`core.misses.nearest_miss` among the nodes offered for ``needs``, remembered for this snapshot (the
        dashboard explains many pods of the same shape on one snapshot)."""
        key = (request, options, repr(needs))
        if key not in self._misses:
            offered = self.screen(needs).offered
            self._misses[key] = nearest_miss(request, (self.views[n] for n in offered if n in self.views), options)
        return self._misses[key]

    def screen(self, needs: PodNeeds, *, extra: dict[str, dict[str, int]] | None = None) -> Screening:
        """The nodes kube-scheduler would offer our filter for a pod with ``needs``, and why it leaves out
        the others; ``extra`` adds requests (of pods planned on top) to what each node's bound pods use."""
        if not extra:
            key = repr(needs)
            known = self._screenings.get(key)
            if known is None:
                known = self._screenings[key] = screen_nodes(needs, sorted(self.nodes), self.node_traits(),
                                                             self.requested)
            return known
        used = self.requested
        if extra:
            used = {**used, **{name: add_requests(used.get(name, {}), more) for name, more in extra.items()}}
        return screen_nodes(needs, sorted(self.nodes), self.node_traits(), used)


def build_snapshot(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *,
                   catalog: DeviceCatalog = DEFAULT_CATALOG, now: float | None = None,
                   leave_out_pod_uid: str = "", node_rules: bool = False,
                   quotas: Iterable[Mapping[str, Any]] = ()) -> ClusterSnapshot:
    """Join node and pod objects (and ResourceQuota objects) as the cache does; ``leave_out_pod_uid`` drops one pod's
    own usage.

    The filter forgets a pod's earlier placement before deciding again
    (docs/scheduling-rules.md#the-filter-step-by-step, step 2); ``explain`` leaves the pod out for the same reason. With
    ``node_rules`` the snapshot also keeps what kube-scheduler's node rules read (each node's traits, what its bound
    pods request); ``inspect`` does not need them and skips their cost.
    """
    now = time.time() if now is None else now
    snapshot = ClusterSnapshot(catalog=catalog)
    by_node: dict[str, list[PodUsage]] = {}
    for pod in pods:
        uid, namespace, name = pod_key(pod)
        if leave_out_pod_uid and uid == leave_out_pod_uid:
            continue
        if node_rules and (occupied := pod_occupies_node(pod)):
            try:
                snapshot.requested[occupied] = add_requests(snapshot.requested.get(occupied, {}),
                                                            pod_requests(pod))
            except RuleInputError as error:
                snapshot.broken_pods[f"{namespace}/{name}"] = f"resource requests not counted: {error}"
        try:
            usage = pod_usage(pod, catalog=catalog)
        except AnnotationError as error:
            snapshot.broken_pods[f"{namespace}/{name}"] = str(error)
            continue
        if usage is not None:
            snapshot.usages.append(usage)
            by_node.setdefault(usage.node, []).append(usage)
    _count_quotas(snapshot, quotas, catalog)
    for node in nodes:
        state = node_state(node_record(node, catalog=catalog), now=now, catalog=catalog)
        spec = node.get("spec") or {}
        gpu_node = state.inventory is not None or bool(state.error)
        snapshot.nodes[state.name] = NodeFacts(name=state.name, gpu_node=gpu_node,
                                               cordoned=bool(spec.get("unschedulable")), error=state.error,
                                               plugin_gone=state.plugin_gone)
        if node_rules:
            try:
                snapshot.traits[state.name] = read_node_traits(node)
            except RuleInputError as error:
                snapshot.broken_nodes.setdefault(state.name, f"unreadable for kube-scheduler's rules: {error}")
        if state.inventory is None:
            if state.error:
                snapshot.broken_nodes[state.name] = state.error
            continue
        totals = sum_bookings(held.booking for held in by_node.get(state.name, ()))
        snapshot.views[state.name] = build_node_view(state.inventory, totals)
    return snapshot


def _count_quotas(snapshot: ClusterSnapshot, quotas: Iterable[Mapping[str, Any]], catalog: DeviceCatalog) -> None:
    """The namespaces' effective limits, and what the snapshot's pods book against them."""
    by_namespace: dict[str, list[Any]] = {}
    for obj in quotas:
        parsed = parse_resource_quota(obj, catalog)
        snapshot.quota_warnings.extend(parsed.warnings)
        by_namespace.setdefault(parsed.namespace, []).append(parsed)
    for namespace, objects in by_namespace.items():
        if limits := effective_limits(objects):
            snapshot.quota_limits[namespace] = limits
    resources, families = quota_resources(catalog), family_quota_names(catalog)
    snapshot.quota_factors = memory_factors(catalog)
    for usage in snapshot.usages:
        for resource, amount in booking_quota_use(usage.booking, usage.grants, resources, families).items():
            used = snapshot.quota_used.setdefault(usage.namespace, {})
            used[resource] = used.get(resource, 0) + amount


def _list_quotas(kube: Kube) -> tuple[list[JsonObject], str]:
    """Every ResourceQuota object, or none and why when the API refuses (the tools' user may not list them)."""
    try:
        quotas, _ = join_pages(kube.list_resource_quotas(page_size=LIST_PAGE_SIZE))
    except KubeError as error:
        if error.status not in (401, 403, 404):
            raise
        return [], f"namespace quotas not shown: cannot list ResourceQuotas ({error})"
    return quotas, ""


def read_snapshot(kube: Kube, *, label_selector: str = "", catalog: DeviceCatalog = DEFAULT_CATALOG,
                  leave_out_pod_uid: str = "", node_rules: bool = False) -> ClusterSnapshot:
    """List nodes (by ``label_selector``) and pods from the API, page by page, and join them.

    The two lists run side by side: while one waits for the API server the other decodes its page.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="list-nodes") as pool:
        listing_nodes = pool.submit(join_pages, kube.list_nodes(label_selector=label_selector,
                                                                page_size=LIST_PAGE_SIZE))
        pods, _ = join_pages(kube.list_pods(page_size=LIST_PAGE_SIZE))
        nodes, _ = listing_nodes.result()
    quotas, refused = _list_quotas(kube)
    snapshot = build_snapshot(nodes, pods, catalog=catalog, leave_out_pod_uid=leave_out_pod_uid,
                              node_rules=node_rules, quotas=quotas)
    if refused:
        snapshot.quota_warnings.append(refused)
    return snapshot
