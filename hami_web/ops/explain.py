"""``explain``: the decision our filter would make for a pod right now, and why.

It runs the filter's own steps on a fresh snapshot — `pod_request`, `pod_options`, `choose_node` with the
pod's own usage left out (SPEC.md §5 step 2) — then, when nothing fits, groups the per-node reasons by cause
and finds the nearest miss. Nothing is booked or written. The snapshot comes from the API, which shows a
booking once `/bind` has written it: a pod filtered but not yet bound is booked only in the serving
hami-web's memory, so its GPUs look free here until it is bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_web.core import names
from hami_web.core.choose import Placement, choose_node
from hami_web.core.devices import AnnotationError
from hami_web.core.grants import PodGrants, decode_pod_devices
from hami_web.core.misses import NearMiss
from hami_web.core.noderules import (
    RuleInputError,
    Screening,
    group_rule_reasons,
    merge_groups,
    read_pod_needs,
)
from hami_web.core.options import OptionsError, PodOptions, pod_options
from hami_web.core.reasons import ReasonGroup, group_reasons
from hami_web.core.requests import PodRequest, RequestDefaults, RequestError, pod_request
from hami_web.ops.snapshot import ClusterSnapshot

# What the verdict says, in one word each.
FITS = "fits"
UNSCHEDULABLE = "unschedulable"
NO_GPU = "no-gpu"
SCHEDULED = "scheduled"
INVALID = "invalid"

NO_GPU_MESSAGE = "this pod does not ask for a GPU; hami-web does not schedule it"


@dataclass(frozen=True, slots=True)
class Policies:
    """The service-wide defaults the pod's annotations override (the server's flags)."""

    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    defaults: RequestDefaults = field(default_factory=RequestDefaults)
    scheduler_name: str = "hami-scheduler"


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """One GPU a container gets (or holds)."""

    index: int
    uuid: str
    type: str
    memory_mib: int
    cores: int


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """What one container asks for, after defaults and clamps."""

    name: str
    init: bool
    gpus: int
    memory: str
    cores: int


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


def _asks(request: PodRequest) -> list[ContainerAsk]:
    return [ContainerAsk(name=c.name, init=c.init, gpus=c.count,
                         memory=f"{c.memory_mib} MiB" if c.memory_mib else f"{c.memory_percent}% memory", cores=c.cores)
            for c in request.containers if c.count]


def _constraints(annotations: Mapping[str, str], options: PodOptions) -> list[str]:
    """The pod's own choices that narrow where it may go, each with where it came from."""
    said = []
    for key, value in ((names.POD_NODE_POLICY, options.node_policy), (names.POD_GPU_POLICY, options.gpu_policy)):
        origin = "pod annotation" if key in annotations else "server default"
        said.append(f"{key.split('/')[-1]}: {value} ({origin})")
    for key in (names.POD_USE_GPU_TYPE, names.POD_NOUSE_GPU_TYPE, names.POD_USE_GPU_UUID,
                names.POD_NOUSE_GPU_UUID):
        if str(annotations.get(key, "")).strip():
            said.append(f"{key}: {annotations[key]}")
    if options.selection(names.VENDOR).numa_bind:
        said.append(f"{names.POD_NUMA_BIND}: true (all GPUs of a container on one NUMA node)")
    return said


def _choices(snapshot: ClusterSnapshot, node: str, grants: PodGrants,
             container_names: list[str]) -> dict[str, list[GpuChoice]]:
    view = snapshot.views.get(node)
    devices = {d.uuid: d for d in view.inventory.devices} if view else {}
    chosen: dict[str, list[GpuChoice]] = {}
    for position, container in enumerate(grants):
        if not container:
            continue
        name = container_names[position] if position < len(container_names) else str(position)
        chosen[name] = [GpuChoice(index=devices[g.uuid].index if g.uuid in devices else -1, uuid=g.uuid,
                                  type=devices[g.uuid].type if g.uuid in devices else "?",
                                  memory_mib=g.memory_mib, cores=g.cores) for g in container]
    return chosen


def _bound(pod: Mapping[str, Any], explanation: Explanation, snapshot: ClusterSnapshot,
           container_names: list[str]) -> Explanation:
    node = str(pod["spec"]["nodeName"])
    annotations = pod["metadata"].get("annotations") or {}
    explanation.verdict, explanation.node = SCHEDULED, node
    explanation.message = f"the pod is already bound to node {node}"
    try:
        grants = decode_pod_devices(str(annotations.get(names.POD_DEVICES_ALLOCATED, "")))
    except AnnotationError as error:
        explanation.message += f"; its {names.POD_DEVICES_ALLOCATED} annotation does not parse: {error}"
        return explanation
    explanation.placement = _choices(snapshot, node, grants, container_names)
    if not explanation.placement:
        explanation.message += " without GPUs assigned by hami-web"
    return explanation


def explain_pod(pod: Mapping[str, Any], snapshot: ClusterSnapshot, policies: Policies) -> Explanation:
    """What the filter would answer for ``pod`` on ``snapshot`` (which must leave the pod's own usage out)."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    key = f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
    explanation = Explanation(pod=key, verdict=INVALID, message="")
    try:
        request = pod_request(pod, policies.defaults)
    except RequestError as error:
        explanation.message = f"the filter refuses this pod: {error}"
        return explanation
    explanation.containers = _asks(request)
    container_names = [c.name for c in request.containers]
    if not request.asks_for_gpu:
        explanation.verdict, explanation.message = NO_GPU, NO_GPU_MESSAGE
        return explanation
    if (pod.get("spec") or {}).get("nodeName"):
        return _bound(pod, explanation, snapshot, container_names)
    try:
        options = pod_options(annotations, node_policy=policies.node_policy, gpu_policy=policies.gpu_policy,
                              catalog=policies.defaults.catalog)
    except OptionsError as error:
        explanation.message = f"the filter refuses this pod: {error}"
        return explanation
    explanation.constraints = _constraints(annotations, options)
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
    result = choose_node(request, options, candidates, snapshot.views, snapshot.broken_nodes)
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
    total = len(candidates) + len(screening.left_out)
    explanation.message = f"no node fits: 0/{total} nodes are available"
    if screening.left_out:
        explanation.message += (f" ({len(screening.left_out)} left out by kube-scheduler's node rules before "
                                f"hami-web's filter)")
    return explanation


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

