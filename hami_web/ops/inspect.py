"""``inspect``: who uses which GPU, and how full each card, node and the cluster is.

The numbers are the scheduler's own: the booked usage per GPU of `NodeView` (with the init-container rule),
the health and cordon of the device plugin's annotations. The report is plain dataclasses so a dashboard
can serve the same data; text rendering lives in `ops.render`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.usage import NodeView
from hami_web.ops.snapshot import ClusterSnapshot

SORT_KEYS = ("name", "memory", "cores", "pods")


class InspectError(LookupError):
    """A node named on the command line does not exist (or is not a GPU node)."""


@dataclass(frozen=True, slots=True)
class PodShare:
    """One container's share of one GPU."""

    namespace: str
    pod: str
    container: str
    memory_mib: int
    cores: int


@dataclass(slots=True)
class GpuReport:
    """One GPU: capacity, what is booked on it, and who shares it."""

    index: int
    uuid: str
    type: str
    numa: int
    healthy: bool
    cordoned: bool
    memory_mib: int
    memory_booked_mib: int
    cores: int
    cores_booked: int
    tasks: int
    task_slots: int
    pods: list[PodShare] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``ok``, ``unhealthy`` or ``cordoned``."""
        return "unhealthy" if not self.healthy else "cordoned" if self.cordoned else "ok"


@dataclass(slots=True)
class Totals:
    """Sums over GPUs (of a node or of the cluster)."""

    gpus: int = 0
    unhealthy_gpus: int = 0
    cordoned_gpus: int = 0
    memory_mib: int = 0
    memory_booked_mib: int = 0
    cores: int = 0
    cores_booked: int = 0
    pods: int = 0

    def add(self, other: Totals) -> None:
        """Count another set of totals in (node into cluster)."""
        for name in Totals.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class NodeReport:
    """One GPU node: its GPUs, totals, and anything that keeps it from taking pods."""

    name: str
    cordoned: bool
    error: str
    totals: Totals
    gpus: list[GpuReport] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``Ready``, ``SchedulingDisabled``, ``NoDevicePlugin`` or the annotation error."""
        if self.error and not self.gpus:
            return f"InvalidRegisterAnnotation: {self.error}"
        if self.cordoned:
            return "SchedulingDisabled"
        if not self.gpus:
            return "NoDevicePlugin"
        return "Ready"


@dataclass(slots=True)
class InspectReport:
    """The cluster totals and the nodes shown (sorted, maybe cut to ``--top``)."""

    cluster: Totals
    nodes_total: int
    nodes: list[NodeReport]
    unreadable_pods: dict[str, str]


def _ratio(used: int, total: int) -> float:
    return used / total if total else 0.0


def _node_totals(view: NodeView | None, pods: int) -> Totals:
    totals = Totals(pods=pods)
    if view is None:
        return totals
    cordoned = view.inventory.cordoned
    for device, used in zip(view.inventory.devices, view.usage, strict=True):
        totals.gpus += 1
        totals.unhealthy_gpus += not device.healthy
        totals.cordoned_gpus += device.healthy and device.uuid in cordoned
        totals.memory_mib += device.memory_mib
        totals.memory_booked_mib += used.memory_mib
        totals.cores += device.cores
        totals.cores_booked += used.cores
    return totals


def _gpu_reports(view: NodeView | None, shares: dict[str, list[PodShare]]) -> list[GpuReport]:
    if view is None:
        return []
    cordoned = view.inventory.cordoned
    return [GpuReport(index=device.index, uuid=device.uuid, type=device.type, numa=device.numa,
                      healthy=device.healthy, cordoned=device.uuid in cordoned, memory_mib=device.memory_mib,
                      memory_booked_mib=used.memory_mib, cores=device.cores, cores_booked=used.cores,
                      tasks=used.tasks, task_slots=device.count, pods=shares.get(device.uuid, []))
            for device, used in zip(view.inventory.devices, view.usage, strict=True)]


def _pod_shares(snapshot: ClusterSnapshot, node_names: set[str]) -> dict[str, list[PodShare]]:
    shares: dict[str, list[PodShare]] = {}
    for usage in snapshot.usages:
        if usage.node not in node_names:
            continue
        for position, container in enumerate(usage.grants):
            container_name = usage.container_names[position] if position < len(usage.container_names) else ""
            for grant in container:
                shares.setdefault(grant.uuid, []).append(PodShare(
                    namespace=usage.namespace, pod=usage.name, container=container_name or str(position),
                    memory_mib=grant.memory_mib, cores=grant.cores))
    for listed in shares.values():
        listed.sort(key=lambda share: (share.namespace, share.pod, share.container))
    return shares


def _sort_key(sort: str) -> Callable[[NodeReport], Any]:
    if sort == "memory":
        return lambda node: (-_ratio(node.totals.memory_booked_mib, node.totals.memory_mib), node.name)
    if sort == "cores":
        return lambda node: (-_ratio(node.totals.cores_booked, node.totals.cores), node.name)
    if sort == "pods":
        return lambda node: (-node.totals.pods, node.name)
    return lambda node: node.name


def inspect_cluster(snapshot: ClusterSnapshot, *, nodes: Sequence[str] = (), sort: str = "name",
                    top: int = 0) -> InspectReport:
    """Report the GPU nodes (or the named ``nodes``), cluster totals over all of them first.

    ``top`` keeps the first N nodes after sorting; totals always cover every node. Raises `InspectError`
    for a named node that does not exist or has no GPUs.
    """
    if sort not in SORT_KEYS:
        raise InspectError(f"unknown sort {sort!r} (expected {', '.join(SORT_KEYS)})")
    for name in nodes:
        facts = snapshot.nodes.get(name)
        if facts is None:
            raise InspectError(f'node "{name}" not found')
        if not facts.gpu_node:
            raise InspectError(f'node "{name}" has no GPUs registered by HAMi\'s device plugin')
    wanted = sorted(set(nodes)) if nodes else sorted(name for name, facts in snapshot.nodes.items() if facts.gpu_node)
    pods_on: dict[str, int] = {}
    for usage in snapshot.usages:
        pods_on[usage.node] = pods_on.get(usage.node, 0) + 1
    reports = [NodeReport(name=name, cordoned=snapshot.nodes[name].cordoned, error=snapshot.nodes[name].error,
                          totals=_node_totals(snapshot.views.get(name), pods_on.get(name, 0))) for name in wanted]
    cluster = Totals()
    for report in reports:
        cluster.add(report.totals)
    reports.sort(key=_sort_key(sort))
    shown = reports[:top] if top > 0 else reports
    # Per-GPU detail only for the nodes shown: at thousands of nodes, --top is what keeps inspect quick.
    shares = _pod_shares(snapshot, {report.name for report in shown})
    for report in shown:
        report.gpus = _gpu_reports(snapshot.views.get(report.name), shares)
    return InspectReport(cluster=cluster, nodes_total=len(reports), nodes=shown,
                         unreadable_pods=dict(sorted(snapshot.broken_pods.items())))


def only_namespace(report: InspectReport, namespace: str) -> InspectReport:
    """The report with only ``namespace``'s pods listed on each GPU; the totals still count every pod, as
    every pod's booking takes room on the GPU."""
    for node in report.nodes:
        for gpu in node.gpus:
            gpu.pods = [share for share in gpu.pods if share.namespace == namespace]
    report.unreadable_pods = {pod: error for pod, error in report.unreadable_pods.items()
                              if pod.startswith(f"{namespace}/")}
    return report
