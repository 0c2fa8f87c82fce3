"""``explain``: the decision our filter would make for a pod right now, and why.

It runs the filter's own steps on a fresh snapshot — `SchedulingPolicy.request_of` and `options_of`, `choose_node`
with the pod's own usage left out (docs/scheduling-rules.md#the-filter-step-by-step, step 2) — then, when nothing
fits, groups the per-node reasons by cause and finds the nearest miss. Nothing is booked or written. The snapshot
comes from the API, which shows a booking once `/bind` has written it: a pod filtered but not yet bound is booked
only in the serving hami-web's memory, so its GPUs look free here until it is bound.

Every family of the server's catalog (`SchedulingPolicy.catalog`) is explained alike: each container's ask is
listed per family, the pod's selections are read from each asked family's own annotation keys, and a device
shown carries its family's common word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_web.core import names
from hami_web.core.choose import Placement, choose_node
from hami_web.core.devices import AnnotationError
from hami_web.core.families import DeviceCatalog, Family
from hami_web.core.fit import passing_devices
from hami_web.core.grants import PodGrants
from hami_web.core.mig import candidate_profiles
from hami_web.core.misses import NearMiss
from hami_web.core.noderules import (
    RuleInputError,
    Screening,
    group_rule_reasons,
    merge_groups,
    read_pod_needs,
)
from hami_web.core.options import OptionsError, PodOptions
from hami_web.core.policy import SchedulingPolicy
from hami_web.core.quota import booking_quota_use, family_quota_names, quota_resources
from hami_web.core.reasons import ReasonGroup, group_reasons
from hami_web.core.requests import ContainerRequest, PodRequest, RequestError
from hami_web.core.usage import pod_booking
from hami_web.ops.preemptnote import preemption_note
from hami_web.ops.snapshot import ClusterSnapshot
from hami_web.state.pods import pod_usage

# What the verdict says, in one word each.
FITS = "fits"
UNSCHEDULABLE = "unschedulable"
NO_GPU = "no-gpu"
SCHEDULED = "scheduled"
INVALID = "invalid"

NO_GPU_MESSAGE = "this pod does not ask for a device of an enabled family ({families}); hami-web does not schedule it"


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """One device a container gets (or holds); ``family`` is its family's common word."""

    index: int
    uuid: str
    type: str
    memory_mib: int
    cores: int
    family: str = ""
    mig: str = ""  # the MIG instance it is: ``<profile>@<start>+<size>`` (docs/mig.md#dynamic-mig)


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """What one container asks of one family, after defaults and clamps (``device``: the family's label)."""

    name: str
    init: bool
    gpus: int
    memory: str
    cores: int
    family: str = ""
    device: str = ""
    # For a family with templates: what the memory runs as, and why (docs/device-families.md#ascend-npus).
    template: str = ""


@dataclass(slots=True)
class Explanation:
    """Everything ``explain`` says about one pod (JSON-able through `dataclasses.asdict`)."""

    pod: str
    verdict: str
    message: str
    containers: list[ContainerAsk] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    node: str = ""
    placement: dict[str, list[GpuChoice]] = field(default_factory=dict)
    candidates: int = 0
    groups: list[ReasonGroup] = field(default_factory=list)
    nearest_miss: NearMiss | None = None
    nearest_miss_text: str = ""
    node_reasons: dict[str, str] = field(default_factory=dict)
    left_out: int = 0
    settings_source: str = ""  # where the server-wide policies came from (the command fills it in)
    ruled_out_fit: str = ""  # a node whose GPUs would take the pod, and the node rule that keeps it out
    group_reasons: dict[str, str] = field(default_factory=dict)  # per node: why its device groups could not take it
    mig: list[str] = field(default_factory=list)  # why no MIG GPU takes a container (docs/mig.md#dynamic-mig)
    # The namespace quota the pod waits on, when devices would take it (docs/quotas.md#namespace-quotas).
    quota: str = ""
    preemption: str = ""  # what device-aware preemption would do or does for it (docs/preemption.md)


def _label(catalog: DeviceCatalog, cw: str) -> str:
    family = catalog.get(cw)
    return family.label if family is not None else cw


def _asks(request: PodRequest, catalog: DeviceCatalog, options: PodOptions | None = None) -> list[ContainerAsk]:
    """One line per container and family it asks of (a container of two families has two)."""
    return [ContainerAsk(name=c.name, init=c.init, gpus=c.count,
                         memory=f"{c.memory_mib} MiB" if c.memory_mib else f"{c.memory_percent}% memory", cores=c.cores,
                         family=c.family, device=_label(catalog, c.family),
                         template=_template(catalog.get(c.family), c, options))
            for c in request.containers if c.count]


def _template(family: Family | None, ask: ContainerRequest, options: PodOptions | None) -> str:
    """What a container of a family with templates runs as: the template its memory rounds to and why, the whole
    device, or soft split (no template)."""
    if family is None or family.templates is None:
        return ""
    if options is not None and family.soft_split is not None and options.selection(family.cw).soft_split:
        return f"soft split ({family.soft_split.mode}): memory and cores as asked, no template"
    templates = family.templates
    whole = f"the whole NPU ({templates.allocatable_mib} MiB)"
    if not ask.memory_mib:
        return f"{whole}: no memory asked"
    rounded = templates.round_up(ask.memory_mib)
    if rounded is None:
        return f"none: {ask.memory_mib} MiB is over the NPU's capacity of {templates.capacity_mib} MiB"
    memory, name = rounded
    if not name:
        return f"{whole}: no template of {family.cw} holds {ask.memory_mib} MiB " \
               f"(the largest is {templates.templates[-1].memory_mib} MiB)" if templates.templates else whole
    return f"{name} ({memory} MiB): the smallest template of {family.cw} holding {ask.memory_mib} MiB"


def _group_reasons(request: PodRequest, options: PodOptions, snapshot: ClusterSnapshot,
                   reasons: Mapping[str, str]) -> dict[str, str]:
    """For each node refused for too few devices, where the family picks devices in groups (HCCS, 910C modules):
    what its groups had free."""
    said: dict[str, str] = {}
    for node, reason in reasons.items():
        view = snapshot.views.get(node)
        if view is None or names.ALLOCATED_CARDS_INSUFFICIENT_REQUEST not in reason:
            continue
        for ask in request.containers:
            grouping = view.inventory.grouping.get(ask.family) if ask.count else None
            text = grouping.describe(passing_devices(ask, view, options), ask.count) if grouping else ""
            if text:
                said[node] = f"{ask.family} container {ask.name}: {text}"
                break
    return said


def _constraints(annotations: Mapping[str, str], options: PodOptions, families: Sequence[Family]) -> list[str]:
    """The pod's own choices that narrow where it may go, each with where it came from: the policies, then the
    selections of each family the pod asks for, read from that family's own annotation keys."""
    said = []
    for key, value in ((names.POD_NODE_POLICY, options.node_policy), (names.POD_GPU_POLICY, options.gpu_policy)):
        origin = "pod annotation" if key in annotations else "server default"
        said.append(f"{key.split('/')[-1]}: {value} ({origin})")
    for family in families:
        for key in (family.use_type_key, family.nouse_type_key, family.use_uuid_key, family.nouse_uuid_key,
                    family.mode_key, family.soft_split.key if family.soft_split else ""):
            if key and str(annotations.get(key, "")).strip():
                said.append(f"{key}: {annotations[key]}")
        if family.numa_bind_key and options.selection(family.cw).numa_bind:
            said.append(f"{family.numa_bind_key}: true (all {family.label}s of a container on one NUMA node)")
    return said


def _choices(snapshot: ClusterSnapshot, node: str, grants: PodGrants,
             container_names: Sequence[str]) -> dict[str, list[GpuChoice]]:
    view = snapshot.views.get(node)
    devices = {d.uuid: d for d in view.inventory.devices} if view else {}
    chosen: dict[str, list[GpuChoice]] = {}
    for position, container in enumerate(grants):
        if not container:
            continue
        name = container_names[position] if position < len(container_names) else str(position)
        chosen[name] = [GpuChoice(index=devices[g.uuid].index if g.uuid in devices else -1, uuid=g.uuid,
                                  type=devices[g.uuid].type if g.uuid in devices else "?",
                                  memory_mib=g.memory_mib, cores=g.cores, family=g.vendor,
                                  mig=f"{g.placed.profile}@{g.placed.placement.describe()}" if g.placed else "")
                        for g in container]
    return chosen


def _bound(pod: Mapping[str, Any], explanation: Explanation, snapshot: ClusterSnapshot,
           catalog: DeviceCatalog) -> Explanation:
    """A bound pod: what it holds, read from every enabled family's ``…-devices-allocated`` as the cache reads it."""
    node = str(pod["spec"]["nodeName"])
    explanation.verdict, explanation.node = SCHEDULED, node
    explanation.message = f"the pod is already bound to node {node}"
    try:
        usage = pod_usage(pod, catalog=catalog)
    except AnnotationError as error:
        explanation.message += f"; its device annotation does not parse: {error}"
        return explanation
    if usage is not None:
        explanation.placement = _choices(snapshot, node, usage.grants, usage.container_names)
    if not explanation.placement:
        explanation.message += " without devices assigned by hami-web"
    return explanation


def explain_pod(pod: Mapping[str, Any], snapshot: ClusterSnapshot, policies: SchedulingPolicy, *,
                preemption: bool = True) -> Explanation:
    """What the filter would answer for ``pod`` on ``snapshot`` (which must leave the pod's own usage out);
    ``preemption``: whether the server preempts (its published ``--preemption``)."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
    explanation = Explanation(pod=key, verdict=INVALID, message="")
    try:
        request = policies.request_of(pod)
    except RequestError as error:
        explanation.message = f"the filter refuses this pod: {error}"
        return explanation
    catalog = policies.catalog
    explanation.containers = _asks(request, catalog)
    container_names = request.container_names
    if not request.asks_for_gpu:
        explanation.verdict = NO_GPU
        explanation.message = NO_GPU_MESSAGE.format(families=", ".join(family.cw for family in catalog))
        return explanation
    if (pod.get("spec") or {}).get("nodeName"):
        return _bound(pod, explanation, snapshot, catalog)
    try:
        options = policies.options_of(annotations)
    except OptionsError as error:
        explanation.message = f"the filter refuses this pod: {error}"
        return explanation
    explanation.containers = _asks(request, catalog, options)
    explanation.constraints = _constraints(annotations, options, [catalog[cw] for cw in request.families])
    scheduler = str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")
    if scheduler != policies.scheduler_name:
        # The webhook routes GPU pods to us; one it did not see (created while it was down, or excluded by the
        # webhook's selectors) never reaches this filter, whatever it would decide.
        explanation.constraints.append(f"spec.schedulerName: {scheduler} (not {policies.scheduler_name}: "
                                       f"hami-web's filter never sees this pod)")
    try:
        needs = read_pod_needs(pod)
    except RuleInputError as error:
        explanation.message = f"kube-scheduler cannot read this pod's node constraints: {error}"
        return explanation
    screening = snapshot.screen(needs)
    candidates = list(screening.offered)
    explanation.candidates = len(candidates)
    explanation.left_out = len(screening.left_out)
    namespace = str(metadata.get("namespace") or "default")
    quota = snapshot.namespace_quota(namespace).pod_quota(request, catalog)
    result = choose_node(request, options, candidates, snapshot.views, snapshot.broken_nodes, quota=quota)
    if isinstance(result, Placement):
        explanation.verdict, explanation.node = FITS, result.node
        explanation.message = f"the filter would place the pod on node {result.node} now"
        explanation.placement = _choices(snapshot, result.node, result.grants, container_names)
        return explanation
    explanation.verdict = UNSCHEDULABLE
    rule_reasons = {name: ", ".join(reasons) for name, reasons in screening.left_out.items()}
    explanation.node_reasons = dict(sorted({**result.reasons, **rule_reasons}.items()))
    explanation.groups = merge_groups(group_rule_reasons(screening.left_out), group_reasons(result.reasons))
    explanation.nearest_miss = snapshot.nearest_miss(request, options, needs)
    explanation.nearest_miss_text = explanation.nearest_miss.describe() if explanation.nearest_miss else ""
    explanation.ruled_out_fit = _ruled_out_fit(request, options, snapshot, screening)
    explanation.group_reasons = _group_reasons(request, options, snapshot, result.reasons)
    if any(names.CARD_MIG_TOPOLOGY_INFEASIBLE in reason for reason in result.reasons.values()):
        explanation.mig = _mig_notes(request, snapshot, candidates)
    total = len(candidates) + len(screening.left_out)
    explanation.message = f"no node fits: 0/{total} nodes are available"
    explanation.preemption = preemption_note(pod, request, options, candidates, snapshot, enabled=preemption)
    if quota is not None:
        explanation.quota = _quota_wait(request, options, candidates, snapshot, namespace, catalog)
        if explanation.quota:
            explanation.message = (f"no node fits because of the namespace's device quota, not for want of devices: "
                                   f"{explanation.quota}")
            return explanation
    if screening.left_out:
        explanation.message += (f" ({len(screening.left_out)} left out by kube-scheduler's node rules before "
                                f"hami-web's filter)")
    return explanation


def _quota_wait(request: PodRequest, options: PodOptions, candidates: Sequence[str], snapshot: ClusterSnapshot,
                namespace: str, catalog: DeviceCatalog) -> str:
    """When devices would take the pod but its namespace's quota does not: which limit, its use and what the pod
    would book there ("" when the pod would not fit without the quota either)."""
    free = choose_node(request, options, candidates, snapshot.views, snapshot.broken_nodes)
    if not isinstance(free, Placement):
        return ""
    resources = quota_resources(catalog)
    use = booking_quota_use(pod_booking(free.grants, init_count=request.init_count), free.grants, resources,
                            family_quota_names(catalog))
    excesses = snapshot.namespace_quota(namespace).booking_excess(use, resources)
    return "; ".join(excess.describe() for excess in excesses) or \
        f"namespace {namespace} is at or over a limit it asks for"


def _ruled_out_fit(request: PodRequest, options: PodOptions, snapshot: ClusterSnapshot,
                   screening: Screening) -> str:
    """When a node kube-scheduler leaves out has the GPUs the pod needs now: that node and the rule in the way.

    The closest miss is then not about GPUs at all, and saying so points at the taint, selector or cordon.
    """
    result = choose_node(request, options, sorted(screening.left_out), snapshot.views, snapshot.broken_nodes)
    if not isinstance(result, Placement):
        return ""
    return (f"{result.node}: its GPUs would take the pod now, but kube-scheduler leaves the node out: "
            f"{', '.join(screening.left_out[result.node])}")



def _mig_notes(request: PodRequest, snapshot: ClusterSnapshot, candidates: Sequence[str]) -> list[str]:
    """Per container, the MIG profile it needs and why none is free (``CardMigTopologyInfeasible``): no profile
    large enough on any candidate MIG GPU, or the GPUs that have one hold no free placement for it or a larger one."""
    gpus = [(view.inventory.partitioning[device.family], device, used) for name in candidates
            if (view := snapshot.views.get(name)) is not None
            for position, (device, used) in enumerate(zip(view.inventory.devices, view.usage, strict=True))
            if position in view.inventory.carved]
    notes = []
    for container in request.containers:
        if not container.count or not gpus:
            continue
        profiles = {profile.name: profile for _, device, _ in gpus
                    for profile in candidate_profiles(device.mig_profiles)}
        wanted = max(container.booked_memory_mib(device.memory_mib) for _, device, _ in gpus)
        large = sorted((p for p in profiles.values() if p.memory_mib >= wanted), key=lambda p: p.memory_mib)
        if not large:
            biggest = max(profiles.values(), key=lambda p: p.memory_mib, default=None)
            offered = f"the largest offered is {biggest.name} ({biggest.memory_mib} MiB)" if biggest else "none usable"
            notes.append(f"container {container.name} asks {wanted} MiB: no MIG profile is that large ({offered})")
            continue
        free = sum(1 for partitioning, device, used in gpus
                   if partitioning.place(device, used.occupied, wanted) is not None)
        notes.append(f"container {container.name} asks {wanted} MiB: it needs {large[0].name} ({large[0].memory_mib} "
                     f"MiB) or larger; {free} of {len(gpus)} MIG GPUs have a free placement for one")
    return notes
