"""What each dashboard page shows, as plain JSON-able data: the page's template and its ``/ui/api`` twin read it.

Everything comes from the running server's memory — one consistent read of the cluster cache
(`ClusterCache.read_consistent`) and the extender's `DecisionLog` — never from extra API lists, and goes
through the operator tools' logic (`ops.inspect`, `ops.explain`, `ops.capacity`), so the dashboard, the
``kubectl hami`` commands and the filter agree on every number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_web.core.noderules import is_rule_reason
from hami_web.core.options import GPU_POLICIES, NODE_POLICIES
from hami_web.core.policy import SchedulingPolicy
from hami_web.core.quota import memory_factors
from hami_web.core.reasons import group_reasons
from hami_web.core.usage import NodeView
from hami_web.dashboard import charts
from hami_web.dashboard.auth import AnswerCache
from hami_web.dashboard.nodetraits import NodeTraitsSink
from hami_web.kube import Kube
from hami_web.ops.capacity import PodShape, ShapeError, plan_capacity
from hami_web.ops.explain import explain_pod
from hami_web.ops.inspect import FamilyReport, GpuReport, inspect_cluster
from hami_web.ops.render import explain_data
from hami_web.ops.shape import form_bounds, shape_from_form
from hami_web.ops.snapshot import ClusterSnapshot, NodeFacts
from hami_web.settings import Settings
from hami_web.settings.values import whole
from hami_web.state.decisions import BIND, FILTER, DecisionLog
from hami_web.state.faces import CacheReads

METRICS = ("memory", "cores")
SORTS = ("fullness", "name", "pods")
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500
MAX_PAGE = 1_000_000
PENDING_PER_PAGE = 25
LATENCY_WINDOW_SECONDS = 600.0
LATENCY_MIN_WINDOW_SECONDS = 10.0
WHATIF_NODES_SHOWN = 50


class QueryError(ValueError):
    """A page parameter is invalid; the message names it."""


@dataclass(slots=True)
class DashboardSources:
    """What the dashboard reads: the settings (policies), the cache, the decision log (and who may read it)."""

    settings: Settings
    cache: CacheReads
    decisions: DecisionLog
    kube: Kube | None = None  # checks bearer tokens when the dashboard is exposed (``--ui-expose``)
    answers: AnswerCache = dataclasses.field(default_factory=AnswerCache)  # the token checks' recent answers
    node_traits: NodeTraitsSink | None = None  # cordon, taints, labels of each node (kube-scheduler's rules)

    def policies(self) -> SchedulingPolicy:
        """The server's own defaults, as the filter applies them."""
        return self.settings.policy

    def snapshot(self) -> ClusterSnapshot:
        """The cache's views, broken nodes and usages, read together, in the operator tools' form, with each
        node's cordon, taints and labels from `NodeTraitsSink` (kube-scheduler's node rules then apply).

        Until the first list of node traits has arrived, or without the watch, no node rule is known and
        every GPU node counts as schedulable (`node_rules_known` says which).
        """
        views, broken, usages = self.cache.read_consistent()
        quota_limits, quota_used = self.cache.quota_usage()
        traits = (self.node_traits.traits() if self.node_traits else None) or {}
        nodes = {}
        for name in (*views, *broken):
            node = traits.get(name)
            nodes[name] = NodeFacts(name=name, gpu_node=True, cordoned=bool(node and node.unschedulable),
                                    error=broken.get(name, ""))
        return ClusterSnapshot(nodes=nodes, views=views, broken_nodes=broken, usages=usages, traits=traits,
                               catalog=self.settings.devices,
                               quota_limits=quota_limits, quota_used=quota_used,
                               quota_factors=memory_factors(self.settings.devices))

    def node_rules_note(self) -> str:
        """Empty when kube-scheduler's node rules are applied; else what the pages cannot tell yet."""
        if self.node_traits is None:
            return "node rules (cordon, taints, selectors) are not read: every GPU node counts as schedulable"
        if self.node_traits.traits(wait_seconds=0) is None:
            error = f" ({self.node_traits.error})" if self.node_traits.error else ""
            return f"nodes' cordon, taints and labels not read yet{error}: every GPU node counts as schedulable"
        return ""


# -- parameters -------------------------------------------------------------------------------------------


def _whole(args: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = str(args.get(name, "") or "").strip()
    if not raw:
        return default
    try:
        return whole(low, high)(raw)
    except ValueError as error:
        raise QueryError(f"{name} {error}") from None


def _one_of(args: Mapping[str, str], name: str, options: tuple[str, ...], default: str) -> str:
    value = str(args.get(name, "") or "").strip() or default
    if value not in options:
        raise QueryError(f"{name} must be one of {', '.join(options)}, got {value!r}")
    return value


def _paging(total: int, page: int, per_page: int) -> dict[str, int]:
    pages = max((total + per_page - 1) // per_page, 1)
    if page > pages:
        raise QueryError(f"page must be at most {pages}, got {page}")
    return {"page": page, "pages": pages, "per_page": per_page, "total": total}


# -- overview ---------------------------------------------------------------------------------------------


def _fill(used: int, total: int) -> float:
    return round(used / total, 4) if total else 0.0


def _gpu_cell(gpu: GpuReport, metric: str) -> dict[str, Any]:
    """One heatmap cell; a device's group and a share's template only where the family has them (Ascend)."""
    fill = _fill(gpu.memory_booked_mib, gpu.memory_mib) if metric == "memory" else _fill(gpu.cores_booked, gpu.cores)
    cell = {"index": gpu.index, "uuid": gpu.uuid, "family": gpu.family, "type": gpu.type, "status": gpu.status,
            "fill": fill,
            "level": min(int(fill * 10), 10), "memory_mib": gpu.memory_mib, "memory_booked_mib": gpu.memory_booked_mib,
            "cores": gpu.cores, "cores_booked": gpu.cores_booked, "tasks": gpu.tasks, "task_slots": gpu.task_slots,
            "pods": [{"pod": f"{share.namespace}/{share.pod}", "container": share.container,
                      "memory_mib": share.memory_mib, "cores": share.cores,
                      **({"template": share.template} if share.template else {}),
                      **({"mig": share.mig} if share.mig else {})} for share in gpu.pods],
            "mig": _mig_slices(gpu)}
    if gpu.group:
        cell["group"] = gpu.group
    return cell


def _mig_slices(gpu: GpuReport) -> dict[str, Any] | None:
    """A dynamic MIG GPU as its memory slices (docs/mig.md#dynamic-mig): each slice free or part of an instance
    (``first`` on an instance's first slice, so the drawing separates neighbours), and the instances listed."""
    if gpu.mig is None:
        return None
    owner: dict[int, tuple[int, str]] = {}
    for number, instance in enumerate(gpu.mig.instances):
        for slice_index in range(instance.placement.start, instance.placement.end):
            owner.setdefault(slice_index, (number, instance.profile))
    slices = [{"used": index in owner, "first": index in owner and (index == 0 or owner.get(index - 1) != owner[index]),
               "profile": owner[index][1] if index in owner else ""} for index in range(gpu.mig.slices)]
    instances = [{"profile": i.profile, "placement": i.placement.describe(), "pod": i.pod} for i in gpu.mig.instances]
    return {"slices": slices, "instances": instances,
            "free": [f"{profile}@{','.join(str(p.start) for p in placements)}"
                     for profile, placements in gpu.mig.free if placements]}


def _histograms(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    """Per device type, how free memory is spread over its usable devices (unhealthy and cordoned ones excluded)."""
    free: dict[str, list[int]] = {}
    largest: dict[str, int] = {}
    families: dict[str, str] = {}
    for view in snapshot.views.values():
        for device, used in zip(view.inventory.devices, view.usage, strict=True):
            if not device.healthy or device.uuid in view.inventory.cordoned:
                continue
            free.setdefault(device.type, []).append(device.memory_mib - used.memory_mib)
            largest[device.type] = max(largest.get(device.type, 0), device.memory_mib)
            families[device.type] = device.family
    return [{"type": gpu_type, "family": families[gpu_type], "gpus": len(values),
             **charts.histogram(values, top=largest[gpu_type])}
            for gpu_type, values in sorted(free.items())]


def _only_nodes(snapshot: ClusterSnapshot, keep: Callable[[NodeView], bool]) -> ClusterSnapshot:
    views = {name: view for name, view in snapshot.views.items() if keep(view)}
    return ClusterSnapshot(nodes={name: snapshot.nodes[name] for name in views}, views=views,
                           usages=[usage for usage in snapshot.usages if usage.node in views], catalog=snapshot.catalog)


def _family_totals(family: FamilyReport) -> dict[str, Any]:
    return {"nodes": family.nodes, **dataclasses.asdict(family.totals)}


def overview(sources: DashboardSources, args: Mapping[str, str]) -> dict[str, Any]:
    """Cluster totals (of all devices and per family), one page of the heatmap (rows = nodes, cells = devices,
    grouped by family) and the free-memory histograms.

    Parameters: ``metric`` (memory|cores: what colours a cell and what ``fullness`` sorts by), ``sort``
    (fullness|name|pods), ``family`` (only nodes with a device of this family, by its common word), ``type``
    (only nodes with a device of this type), ``node`` (name contains), ``page`` and ``per_page``.
    """
    metric = _one_of(args, "metric", METRICS, "memory")
    sort = _one_of(args, "sort", SORTS, "fullness")
    families = tuple(family.cw for family in sources.settings.devices)
    family = _one_of(args, "family", ("", *families), "")
    gpu_type = str(args.get("type", "") or "").strip()
    node_filter = str(args.get("node", "") or "").strip()
    page = _whole(args, "page", 1, low=1, high=MAX_PAGE)
    per_page = _whole(args, "per_page", DEFAULT_PER_PAGE, low=1, high=MAX_PER_PAGE)
    snapshot = sources.snapshot()
    whole = inspect_cluster(snapshot, top=1)
    cluster = whole.cluster
    shown = _only_nodes(snapshot, lambda view: family in view.inventory.groups) if family else snapshot
    if gpu_type:
        shown = _only_nodes(shown, lambda view: gpu_type in view.device_types)
    if node_filter:
        shown = ClusterSnapshot(nodes={n: f for n, f in shown.nodes.items() if node_filter in n},
                                views={n: v for n, v in shown.views.items() if node_filter in n}, usages=shown.usages)
    inspect_sort = {"fullness": metric, "name": "name", "pods": "pods"}[sort]
    report = inspect_cluster(shown, sort=inspect_sort, top=page * per_page)
    paging = _paging(report.nodes_total, page, per_page)
    rows = [{"name": node.name, "status": node.status, "pods": node.totals.pods,
             "fill": _fill(node.totals.memory_booked_mib, node.totals.memory_mib) if metric == "memory"
             else _fill(node.totals.cores_booked, node.totals.cores),
             "families": {cw: {"status": on_node.status, "gpus": on_node.totals.gpus}
                          for cw, on_node in node.families.items()},
             "gpus": [_gpu_cell(gpu, metric) for gpu in node.gpus]}
            for node in report.nodes[(page - 1) * per_page:]]
    shared_gpus = {device.uuid for view in snapshot.views.values()
                   for device, held in zip(view.inventory.devices, view.usage, strict=True) if held.tasks > 1}
    sharing = [usage for usage in snapshot.usages if shared_gpus.intersection(usage.booking)]
    types = sorted({t for view in snapshot.views.values() for t in view.device_types})
    return {
        "totals": {"nodes": len(snapshot.views), "broken_nodes": len(snapshot.broken_nodes),
                   **dataclasses.asdict(cluster), "shared_gpus": len(shared_gpus), "pods_sharing": len(sharing),
                   "unreadable_pods": len(sources.cache.stats.broken_pods),
                   "families": {cw: _family_totals(f) for cw, f in whole.families.items()}},
        "query": {"metric": metric, "sort": sort, "family": family, "type": gpu_type, "node": node_filter},
        "paging": paging, "families": list(families), "gpu_types": types, "nodes": rows,
        "histograms": _histograms(snapshot),
        "broken_nodes": dict(sorted(snapshot.broken_nodes.items())),
        "quotas": [dataclasses.asdict(quota) for quota in whole.quotas],
        "holds": [{"pod": state.hold.key, "priority": state.hold.priority, "node": state.hold.node,
                   "preempted": state.hold.preempted, "waiting_for": list(state.remaining),
                   "expires_in_seconds": round(max(0.0, state.hold.expires_at - sources.decisions.now()), 1)}
                  for state in sorted(sources.cache.holds(), key=lambda state: state.hold.key)],
    }


# -- pending ----------------------------------------------------------------------------------------------


def pending(sources: DashboardSources, args: Mapping[str, str]) -> dict[str, Any]:
    """The GPU pods whose last filter found no node: the filter's reasons grouped, and ``explain`` now.

    ``last_filter`` is what the filter answered (its own per-node reasons, grouped by cause); ``now`` is
    `explain_pod` on the current cache, with the nearest miss — it may already fit if capacity was freed.
    """
    page = _whole(args, "page", 1, low=1, high=MAX_PAGE)
    now = sources.decisions.now()
    snapshot = sources.snapshot()
    placed = {usage.uid for usage in snapshot.usages}
    refusals = [refusal for refusal in sources.decisions.refusals() if refusal.uid not in placed]
    paging = _paging(len(refusals), page, PENDING_PER_PAGE)
    policies = sources.policies()
    pods = []
    for refusal in refusals[(page - 1) * PENDING_PER_PAGE: page * PENDING_PER_PAGE]:
        explained = explain_pod(refusal.pod_object, snapshot, policies,
                                preemption=sources.settings.preemption == "on")
        explained.node_reasons = {}  # one per node: the page shows the groups (and asdict would copy them all)
        explanation = explain_data(explained)
        explanation.pop("node_reasons")
        explanation["node_rules"] = [group for group in explanation["groups"] if is_rule_reason(group["cause"])]
        pods.append({
            "pod": refusal.pod, "uid": refusal.uid, "age_seconds": round(now - refusal.first_at, 1),
            "last_filter_seconds_ago": round(now - refusal.last_at, 1), "attempts": refusal.attempts,
            "last_filter": {"nodes": len(refusal.reasons),
                            "groups": [dataclasses.asdict(g) for g in group_reasons(refusal.reasons)]},
            "now": explanation,
        })
    return {"paging": paging, "pods": pods, "node_rules_note": sources.node_rules_note()}


# -- decisions --------------------------------------------------------------------------------------------


def decisions(sources: DashboardSources, args: Mapping[str, str]) -> dict[str, Any]:
    """The last decisions (newest first; ``kind`` filter|bind narrows them) and the latency chart."""
    kind = _one_of(args, "kind", ("all", FILTER, BIND), "all")
    now = sources.decisions.now()
    remembered = sources.decisions.decisions()
    shown = [d for d in remembered if kind == "all" or d.kind == kind]
    # The last ten minutes, or less when the log is younger, so a fresh server's few decisions spread out.
    oldest = min((d.at for d in remembered), default=now)
    start = min(max(now - LATENCY_WINDOW_SECONDS, oldest), now - LATENCY_MIN_WINDOW_SECONDS)
    series = {name: [(d.at, d.latency_seconds) for d in remembered if d.kind == name and d.at >= start]
              for name in (FILTER, BIND)}
    summary = {}
    for name, points in series.items():
        latencies = sorted(latency for _, latency in points)
        summary[name] = {"count": len(latencies),
                         "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2) if latencies else None,
                         "max_ms": round(latencies[-1] * 1000, 2) if latencies else None}
    return {
        "query": {"kind": kind}, "count": len(shown), "latency": summary,
        "chart": charts.latency_chart(series, start=start, end=now),
        "decisions": [{**dataclasses.asdict(d), "seconds_ago": round(now - d.at, 1),
                       "latency_ms": round(d.latency_seconds * 1000, 2)} for d in shown],
    }


# -- what-if ----------------------------------------------------------------------------------------------


def parse_shape(args: Mapping[str, str]) -> PodShape | None:
    """The pod shape of the what-if form (`ops.shape`, the table capacity's flags come from too), or None when the
    form was not submitted (no ``gpus``)."""
    try:
        return shape_from_form(args)
    except ShapeError as error:
        raise QueryError(str(error)) from None


def whatif(sources: DashboardSources, args: Mapping[str, str]) -> dict[str, Any]:
    """How many pods of the asked shape fit now and where, by `ops.capacity` on the cache's state."""
    shape = parse_shape(args)
    types = sorted({t for view in sources.cache.node_views().values() for t in view.device_types})
    families = [{"cw": family.cw, "label": family.label} for family in sources.settings.devices]
    form = {"bounds": form_bounds(), "node_policies": list(NODE_POLICIES), "gpu_policies": list(GPU_POLICIES)}
    if shape is None:
        return {"shape": None, "answer": None, "gpu_types": types, "families": families, "form": form}
    try:
        report = plan_capacity(sources.snapshot(), shape, sources.policies())
    except ShapeError as error:
        raise QueryError(str(error)) from None
    by_node = list(report.by_node.items())
    return {
        "shape": dataclasses.asdict(shape), "gpu_types": types, "families": families, "form": form,
        "answer": {"fits": report.fits, "limited": report.limited, "limit": report.limit,
                   "device": report.device, "memory_mib_per_device": report.memory_mib_per_device,
                   "cores_per_device": report.cores_per_device,
                   "candidates": report.candidates, "by_gpu_type": report.by_gpu_type,
                   "by_mig_profile": report.by_mig_profile,
                   "nodes_used": len(by_node),
                   "by_node": [{"node": node, "pods": count} for node, count in by_node[:WHATIF_NODES_SHOWN]],
                   "runs_out_first": report.runs_out_first, "runs_out_first_nodes": report.runs_out_first_nodes,
                   "exhausted": [dataclasses.asdict(group) for group in report.exhausted],
                   "left_out": [dataclasses.asdict(group) for group in report.left_out]},
        "node_rules_note": sources.node_rules_note(),
    }
