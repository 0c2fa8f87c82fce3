"""``capacity``: how many more pods of one shape fit now, where they would go, and what runs out first.

The shape becomes a real pod spec and annotations, read with the filter's own `SchedulingPolicy` (its
`request_of` and `options_of`, so defaults, clamps and type matching are the filter's), and pods are fitted one
after another with `fit_pod` (the GPU policy, NUMA binding, every check), each booked into its node's view
(`with_booking`) before the next, as the cache books placements.

A placement changes only its own node, so how many pods a node takes one after another does not depend on
which other nodes were filled first: the node policy decides the order, not the count. So each node is
filled on its own, in the node policy's rank order (`rank_nodes`), which is exact when the whole capacity is
counted and, when ``limit`` cuts the count, gives the first nodes the policy would fill. That costs one fit
per pod instead of one ranking of every node per pod. At the end `choose_node` over every candidate gives
the reasons nothing more fits, grouped by cause: what ran out.

Only the nodes kube-scheduler would offer the extender count (`core.noderules`): a cordoned node, one whose
taints the shape does not tolerate or that its node selector does not pick is left out with the reason, and
a shape that requests cpu or memory stops filling a node when its allocatable runs out.

The shape asks devices of one family (NVIDIA unless ``family`` names another enabled one): its count, memory
and cores resources and its selection keys come from that family's record, so a node of another family is
simply one the shape does not fit (``NodeInsufficientDevice``).

In a namespace (``namespace``) whose ResourceQuotas limit the family's memory or cores
(docs/quotas.md#namespace-quotas), each pod placed counts against the limits as the filter counts it, so the count stops
where the quota does, and ``ResourceQuotaNotFit`` is what runs out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hami_web.core import names
from hami_web.core.choose import INVALID_REGISTER, Placement, choose_node, rank_nodes
from hami_web.core.families import NVIDIA, DeviceCatalog, Family
from hami_web.core.fit import PodFit, fit_pod, may_fit
from hami_web.core.mig import MIG_MODE, candidate_profiles
from hami_web.core.misses import CAPACITY_REASONS
from hami_web.core.noderules import (
    CPU,
    MEMORY,
    TOO_MANY_PODS,
    RuleInputError,
    add_requests,
    group_rule_reasons,
    merge_groups,
    read_pod_needs,
    room_for,
)
from hami_web.core.options import OptionsError
from hami_web.core.policy import SchedulingPolicy
from hami_web.core.quota import NamespaceQuota, booking_quota_use, family_quota_names, quota_resources
from hami_web.core.reasons import NODE_UNREGISTERED_CAUSE, ReasonGroup, group_reasons
from hami_web.core.requests import RequestError
from hami_web.core.usage import NodeView, build_node_view, pod_booking, with_booking
from hami_web.ops.snapshot import ClusterSnapshot

DEFAULT_LIMIT = 10_000
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
# What runs out when a node's cpu, memory or pod count stops the filling, besides the GPU capacities.
NODE_CAPACITY_REASONS = frozenset({TOO_MANY_PODS, f"Insufficient {CPU}", f"Insufficient {MEMORY}",
                                   names.RESOURCE_QUOTA_NOT_FIT})
# Nodes that never had room for a GPU pod: nothing "ran out" there.
NOT_GPU_NODES = frozenset({NODE_UNREGISTERED_CAUSE, INVALID_REGISTER})


class ShapeError(ValueError):
    """The pod shape cannot be scheduled as given; the message says which part."""


@dataclass(frozen=True, slots=True)
class PodShape:
    """One pod with one container asking for ``gpus`` devices of ``family`` of this size (the command's flags).

    ``memory_mib`` is the value of the family's memory resource: MiB times the family's memory factor (1 unless
    the device config says otherwise; 256 MiB units for Iluvatar).
    """

    gpus: int = 1
    memory_mib: int = 0
    memory_percent: int = 0
    cores: int = 0
    gpu_type: str = ""
    node_policy: str = ""
    gpu_policy: str = ""
    numa_bind: bool = False
    tolerations: tuple[str, ...] = ()
    node_selector: tuple[str, ...] = ()
    cpu: str = ""
    memory: str = ""
    family: str = NVIDIA
    mig_profile: str = ""  # ask for this dynamic MIG profile: its memory, on MIG GPUs only (docs/mig.md#dynamic-mig)
    namespace: str = "default"  # whose device quotas the pods count against

    def device_family(self, catalog: DeviceCatalog) -> Family:
        """The shape's family in ``catalog``; `ShapeError` when it is not enabled or cannot express the shape."""
        family = catalog.get(self.family)
        if family is None:
            raise ShapeError(f"family {self.family!r} is not enabled (enabled: "
                             f"{', '.join(enabled.cw for enabled in catalog)})")
        for wanted, key, what in ((self.memory_percent, family.resources.memory_percentage, "memory percentage"),
                                  (self.gpu_type, family.use_type_key, "type selection"),
                                  (self.numa_bind, family.numa_bind_key, "NUMA binding"),
                                  (self.mig_profile, family.partitioning.reservations_key
                                   if family.partitioning is not None else "", "dynamic MIG")):
            if wanted and not key:
                raise ShapeError(f"{family.label} ({family.cw}) has no {what}")
        return family

    def as_pod(self, policies: SchedulingPolicy) -> dict[str, Any]:
        """The pod object the webhook would have let through for this shape."""
        family = self.device_family(policies.catalog)
        resources = family.resources
        # A partitioned family's count is a partition's slices, asked instead of memory and cores (Enflame DRS).
        by_size = family.partitioning is not None and family.partitioning.asks_profiles \
            and bool(self.memory_mib or self.cores)
        limits = {} if by_size else {resources.count: str(self.gpus)}
        if self.memory_mib:
            limits[resources.memory] = str(self.memory_mib)
        if self.memory_percent:
            limits[resources.memory_percentage] = str(self.memory_percent)
        if self.cores:
            limits[resources.cores] = str(self.cores)
        annotations = {}
        if self.gpu_type:
            annotations[family.use_type_key] = self.gpu_type
        if self.node_policy:
            annotations[names.POD_NODE_POLICY] = self.node_policy
        if self.gpu_policy:
            annotations[names.POD_GPU_POLICY] = self.gpu_policy
        if self.numa_bind:
            annotations[family.numa_bind_key] = "true"
        if self.mig_profile and family.mode_key:
            annotations[family.mode_key] = MIG_MODE
        requests = {name: value for name, value in ((CPU, self.cpu), (MEMORY, self.memory)) if value}
        spec: dict[str, Any] = {"containers": [{"name": "probe", "resources": {"limits": limits,
                                                                              "requests": requests}}]}
        if self.tolerations:
            spec["tolerations"] = [parse_toleration(text) for text in self.tolerations]
        if self.node_selector:
            spec["nodeSelector"] = dict(parse_label(text) for text in self.node_selector)
        return {"metadata": {"name": "capacity-probe", "namespace": self.namespace, "annotations": annotations},
                "spec": spec}


def parse_toleration(text: str) -> dict[str, str]:
    """``KEY[=VALUE][:EFFECT]`` (kubectl taint's syntax) as a toleration: without ``=VALUE`` any value of
    the key is tolerated (``Exists``); ``*`` as the key tolerates every taint."""
    rest, _, effect = text.partition(":")
    key, equals, value = rest.partition("=")
    key = key.strip()
    if effect and effect not in EFFECTS:
        raise ShapeError(f"toleration {text!r}: effect must be one of {', '.join(EFFECTS)}")
    if not key:
        raise ShapeError(f"toleration {text!r}: KEY[=VALUE][:EFFECT] needs a key (or * for every taint)")
    toleration = {"operator": "Equal" if equals else "Exists"}
    if key != "*":
        toleration["key"] = key
    if equals:
        toleration["value"] = value
    if effect:
        toleration["effect"] = effect
    return toleration


def parse_label(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a node selector."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise ShapeError(f"node selector {text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


@dataclass(slots=True)
class CapacityReport:
    """How many pods of ``shape`` fit now, by device type and by node, and what stopped the count.

    ``device`` is the shape family's label; ``memory_mib_per_device`` and ``cores_per_device`` are what one device
    books as the filter reads the shape, the family's defaults and units applied (memory 0: a percentage, or the
    whole device).
    """

    shape: PodShape
    fits: int
    limit: int
    limited: bool
    device: str = ""
    memory_mib_per_device: int = 0
    cores_per_device: int = 0
    by_gpu_type: dict[str, int] = field(default_factory=dict)
    by_mig_profile: dict[str, int] = field(default_factory=dict)  # the MIG instances the pods would get
    by_node: dict[str, int] = field(default_factory=dict)
    candidates: int = 0
    exhausted: list[ReasonGroup] = field(default_factory=list)
    left_out: list[ReasonGroup] = field(default_factory=list)
    settings_source: str = ""  # where the server-wide policies came from (the command fills it in)
    quota: dict[str, str] = field(default_factory=dict)  # per quota resource of the namespace: "used/limit" at the end

    @property
    def runs_out_first(self) -> str:
        """The capacity (memory, cores, task slots…) that refused the most nodes once nothing fitted.

        Causes that are consequences (too few GPUs passed) or fixed facts (type, health) only answer when no
        capacity cause is left. Empty when the count was cut by the limit.
        """
        exhausted = [group for group in self.exhausted
                     if group.cause in CAPACITY_REASONS or group.cause in NODE_CAPACITY_REASONS] or [
            group for group in self.exhausted if group.cause not in NOT_GPU_NODES]
        return exhausted[0].cause if exhausted else ""

    @property
    def runs_out_first_nodes(self) -> int:
        """How many nodes `runs_out_first` refused."""
        return next((group.nodes for group in self.exhausted if group.cause == self.runs_out_first), 0)


def plan_capacity(snapshot: ClusterSnapshot, shape: PodShape, policies: SchedulingPolicy, *,
                  limit: int = DEFAULT_LIMIT) -> CapacityReport:
    """Place pods of ``shape`` one after another on ``snapshot`` until none fits or ``limit`` is reached."""
    if shape.gpus < 1:
        raise ShapeError("--gpus must be at least 1")
    family = shape.device_family(policies.catalog)
    if shape.mig_profile:
        shape = replace(shape, memory_mib=mig_profile_memory(snapshot, shape.mig_profile), memory_percent=0)
    pod = shape.as_pod(policies)
    try:
        request = policies.request_of(pod)
        options = policies.options_of(pod["metadata"]["annotations"])
        needs = read_pod_needs(pod)
    except (RequestError, OptionsError, RuleInputError) as error:
        raise ShapeError(str(error)) from None
    views = dict(snapshot.views)
    if shape.mig_profile:
        views = {name: _mig_only(view) for name, view in views.items()}
    screening = snapshot.screen(needs)
    candidates = list(screening.offered)
    traits = snapshot.node_traits()
    report = CapacityReport(shape=shape, fits=0, limit=limit, limited=False, candidates=len(candidates),
                            left_out=list(group_rule_reasons(screening.left_out)), device=family.label,
                            memory_mib_per_device=max((c.memory_mib for c in request.containers), default=0),
                            cores_per_device=max((c.cores for c in request.containers), default=0))
    catalog = policies.catalog
    namespace = snapshot.namespace_quota(shape.namespace)
    used = dict(namespace.used)
    resources, families = quota_resources(catalog), family_quota_names(catalog)
    for view in rank_nodes([views[name] for name in candidates if name in views], options.node_policy):
        room = room_for(needs, traits[view.name], snapshot.requested.get(view.name)) if view.name in traits else None
        while may_fit(request, view, options) and (room is None or report.by_node.get(view.name, 0) < room):
            if report.fits >= limit:
                report.limited = True
                break
            quota = NamespaceQuota(shape.namespace, namespace.limits, used).pod_quota(request, catalog)
            result = fit_pod(request, view, options, quota)
            if not isinstance(result, PodFit):
                break
            types = {device.uuid: device.type for device in view.inventory.devices}
            gpu_type = "+".join(sorted({types[g.uuid] for container in result.grants for g in container}))
            booking = pod_booking(result.grants, init_count=request.init_count)
            for resource, amount in booking_quota_use(booking, result.grants, resources, families).items():
                used[resource] = used.get(resource, 0) + amount
            view = views[view.name] = with_booking(view, booking)
            report.fits += 1
            report.by_gpu_type[gpu_type] = report.by_gpu_type.get(gpu_type, 0) + 1
            for grant in (g for container in result.grants for g in container if g.placed is not None):
                profile = grant.placed.profile if grant.placed else ""
                report.by_mig_profile[profile] = report.by_mig_profile.get(profile, 0) + 1
            report.by_node[view.name] = report.by_node.get(view.name, 0) + 1
        if report.limited:
            break
    if not report.limited:
        placed = {name: add_requests({}, needs.requests, count) for name, count in report.by_node.items()}
        after = snapshot.screen(needs, extra=placed)
        final = choose_node(request, options, list(after.offered), views, snapshot.broken_nodes,
                            quota=NamespaceQuota(shape.namespace, namespace.limits, used).pod_quota(request, catalog))
        if isinstance(final, Placement):  # cannot happen: every node was filled until its fit failed
            raise ShapeError(f"internal error: node {final.node} still takes a pod after it was filled")
        filled = {name: reasons for name, reasons in after.left_out.items() if name not in screening.left_out}
        report.exhausted = merge_groups(group_rule_reasons(filled), group_reasons(final.reasons))
    report.quota = {resource: f"{used.get(resource, 0)}/{limit}" for resource, limit in sorted(namespace.limits.items())
                    if resource in (family.resources.memory, family.resources.cores)}
    report.by_gpu_type = dict(sorted(report.by_gpu_type.items(), key=lambda item: (-item[1], item[0])))
    report.by_node = dict(sorted(report.by_node.items(), key=lambda item: (-item[1], item[0])))
    report.by_mig_profile = dict(sorted(report.by_mig_profile.items(), key=lambda item: (-item[1], item[0])))
    return report


def _mig_only(view: NodeView) -> NodeView:
    """``view`` with every GPU but the dynamic MIG ones out of use (unhealthy): ``--mig-profile`` counts MIG instances,
    and a GPU without a mode would take a ``vgpu-mode: mig`` pod as a slice."""
    carved = view.inventory.carved  # what the families' partitioning carves per grant: the MIG GPUs
    if len(carved) == len(view.inventory.devices):
        return view
    devices = tuple(device if position in carved else replace(device, healthy=False)
                    for position, device in enumerate(view.inventory.devices))
    usage = {device.uuid: used for device, used in zip(view.inventory.devices, view.usage, strict=True)}
    return build_node_view(replace(view.inventory, devices=devices), usage)


def mig_profile_memory(snapshot: ClusterSnapshot, profile: str) -> int:
    """The memory (MiB) a pod asks to get ``profile``: the profile's own on the cluster's MIG GPUs (the largest,
    should models differ); `ShapeError` when no GPU offers it, naming the profiles that are offered."""
    offered = [candidate for view in snapshot.views.values() for position in sorted(view.inventory.carved)
               for candidate in candidate_profiles(view.inventory.devices[position].mig_profiles)]
    sizes = [candidate.memory_mib for candidate in offered if candidate.name == profile]
    if not sizes:
        names_offered = ", ".join(sorted({candidate.name for candidate in offered})) or "none"
        raise ShapeError(f"no MIG GPU offers profile {profile!r} (offered: {names_offered})")
    return max(sizes)
