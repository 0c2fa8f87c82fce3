"""``inspect``: who uses which device, and how full each card, node and the cluster is, per device family.

The numbers are the scheduler's own: the booked usage per device of `NodeView` (with the init-container rule),
the health and cordon of the device plugins' annotations. Every device carries its family (the common word of
the register annotation that listed it, `Device.family`), and each node and the cluster are also summed per
family (`FamilyReport`), with a family whose register annotation does not parse or whose device plugin is gone
named on its node. The report is plain dataclasses so a dashboard can serve the same data; text rendering
lives in `ops.render`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.grants import families_of
from hami_web.core.mig import MigLayout, mig_layout
from hami_web.core.quota import quota_usage_rows
from hami_web.core.usage import NodeView
from hami_web.ops.snapshot import ClusterSnapshot, NodeFacts

SORT_KEYS = ("name", "memory", "cores", "pods")


class InspectError(LookupError):
    """A node named on the command line does not exist (or has no devices)."""


@dataclass(frozen=True, slots=True)
class PodShare:
    """One container's share of one GPU."""

    namespace: str
    pod: str
    container: str
    memory_mib: int
    cores: int
    template: str = ""  # the vNPU template the share runs as (Ascend hard split; "" = whole device or none)
    mig: str = ""  # the MIG instance the share is, ``<profile>@<start>+<size>`` (docs/mig.md#dynamic-mig)


@dataclass(slots=True)
class GpuReport:
    """One device: its family, capacity, what is booked on it, and who shares it."""

    index: int
    uuid: str
    family: str
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
    group: str = ""  # the device group a multi-device container is kept in (``HCCS 0``, ``module 1``)
    pods: list[PodShare] = field(default_factory=list)
    # A dynamic MIG GPU's instances and free placements; why it fails closed (docs/mig.md#dynamic-mig); for a pre-2.10
    # geometry MIG GPU, how many old suffixed entries count on it.
    mig: MigLayout | None = None
    mig_fault: str = ""
    legacy_mig_entries: int = 0

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
        """Count another set of totals in (family into node, node into cluster); field by field, as it runs a few
        times per node."""
        self.gpus += other.gpus
        self.unhealthy_gpus += other.unhealthy_gpus
        self.cordoned_gpus += other.cordoned_gpus
        self.memory_mib += other.memory_mib
        self.memory_booked_mib += other.memory_booked_mib
        self.cores += other.cores
        self.cores_booked += other.cores_booked
        self.pods += other.pods


READY = "Ready"
NO_DEVICE_PLUGIN = "NoDevicePlugin"
INVALID_REGISTER = "InvalidRegisterAnnotation"


@dataclass(slots=True)
class FamilyReport:
    """One family's devices on a node, or in the cluster (``nodes``: how many nodes have the family).

    ``error`` is why the family's register annotation does not parse, ``plugin_gone`` that its device plugin
    stopped answering the handshake: either leaves the family without devices while the node's others work.
    """

    family: str
    totals: Totals
    nodes: int = 1
    error: str = ""
    plugin_gone: bool = False

    @property
    def status(self) -> str:
        """``Ready``, ``InvalidRegisterAnnotation: …`` or ``NoDevicePlugin``."""
        if self.error:
            return f"{INVALID_REGISTER}: {self.error}"
        return NO_DEVICE_PLUGIN if self.plugin_gone else READY


@dataclass(slots=True)
class NodeReport:
    """One device node: its devices, totals (of all and of each family), and anything that keeps it from taking
    pods."""

    name: str
    cordoned: bool
    error: str
    totals: Totals
    gpus: list[GpuReport] = field(default_factory=list)
    families: dict[str, FamilyReport] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``Ready``, ``SchedulingDisabled``, ``NoDevicePlugin`` or the annotation error."""
        if self.error and not self.totals.gpus:
            return f"{INVALID_REGISTER}: {self.error}"
        if self.cordoned:
            return "SchedulingDisabled"
        if not self.totals.gpus:
            return NO_DEVICE_PLUGIN
        return READY


@dataclass(frozen=True, slots=True)
class QuotaReport:
    """One namespace's use of one quota resource against its limit (docs/quotas.md#namespace-quotas); ``limit`` None: no
    limit set (the use is shown all the same). A memory limit is in the resource's unit, its use in MiB: ``limit_mib``
    is the limit in MiB (the limit times the family's memory factor)."""

    namespace: str
    resource: str
    limit: int | None
    used: int
    limit_mib: int | None = None


@dataclass(slots=True)
class InspectReport:
    """The cluster totals (of all devices and of each family) and the nodes shown (sorted, maybe cut to
    ``--top``)."""

    cluster: Totals
    nodes_total: int
    nodes: list[NodeReport]
    unreadable_pods: dict[str, str]
    families: dict[str, FamilyReport] = field(default_factory=dict)
    quotas: list[QuotaReport] = field(default_factory=list)
    quota_warnings: list[str] = field(default_factory=list)


def _ratio(used: int, total: int) -> float:
    return used / total if total else 0.0


def _device_totals(view: NodeView, first: int, end: int, pods: int) -> Totals:
    totals = Totals(pods=pods)
    cordoned = view.inventory.cordoned
    for position in range(first, end):
        device, used = view.inventory.devices[position], view.usage[position]
        totals.gpus += 1
        totals.unhealthy_gpus += not device.healthy
        totals.cordoned_gpus += device.healthy and device.uuid in cordoned
        totals.memory_mib += device.memory_mib
        totals.memory_booked_mib += used.memory_mib
        totals.cores += device.cores
        totals.cores_booked += used.cores
    return totals


def _node_families(view: NodeView | None, facts: NodeFacts, pods: dict[str, int]) -> dict[str, FamilyReport]:
    """Per family on the node: its devices' totals; a family without devices when its annotation is broken or
    its device plugin gone."""
    if view is None:
        return {}
    broken = view.inventory.broken
    families = sorted({*view.inventory.groups, *broken, *facts.plugin_gone})
    reports = {}
    for family in families:
        first, end = view.inventory.groups.get(family, (0, 0))
        reports[family] = FamilyReport(family=family, totals=_device_totals(view, first, end, pods.get(family, 0)),
                                       error=broken.get(family, ""), plugin_gone=family in facts.plugin_gone)
    return reports


def _cluster_families(reports: Sequence[NodeReport]) -> dict[str, FamilyReport]:
    cluster: dict[str, FamilyReport] = {}
    for report in reports:
        for family, on_node in report.families.items():
            summed = cluster.setdefault(family, FamilyReport(family=family, totals=Totals(), nodes=0))
            summed.nodes += 1
            summed.totals.add(on_node.totals)
    return dict(sorted(cluster.items()))


def _gpu_reports(view: NodeView | None, shares: dict[str, list[PodShare]]) -> list[GpuReport]:
    if view is None:
        return []
    cordoned = view.inventory.cordoned
    grouping = view.inventory.grouping
    faults = {fault.uuid: fault.describe() for fault in view.partition_faults}
    return [GpuReport(index=device.index, uuid=device.uuid, family=device.family, type=device.type, numa=device.numa,
                      healthy=device.healthy, cordoned=device.uuid in cordoned, memory_mib=device.memory_mib,
                      memory_booked_mib=used.memory_mib, cores=device.cores, cores_booked=used.cores,
                      tasks=used.tasks, task_slots=device.count,
                      group=grouping[device.family].label(device) if device.family in grouping else "",
                      pods=shares.get(device.uuid, []),
                      mig=mig_layout(device.mig_profiles, used.placed) if position in view.inventory.carved
                      else None,
                      mig_fault=faults.get(device.uuid, ""), legacy_mig_entries=used.legacy_entries)
            for position, (device, used) in enumerate(zip(view.inventory.devices, view.usage, strict=True))]


def _pod_shares(snapshot: ClusterSnapshot, node_names: set[str]) -> dict[str, list[PodShare]]:
    shares: dict[str, list[PodShare]] = {}
    for usage in snapshot.usages:
        if usage.node not in node_names:
            continue
        for position, container in enumerate(usage.grants):
            container_name = usage.container_names[position] if position < len(usage.container_names) else ""
            for grant in container:
                family = snapshot.catalog.get(grant.vendor)
                instance = grant.placed
                shares.setdefault(grant.uuid, []).append(PodShare(
                    namespace=usage.namespace, pod=usage.name, container=container_name or str(position),
                    memory_mib=grant.memory_mib, cores=grant.cores,
                    template=family.templates.name_for(grant.memory_mib) if family and family.templates else "",
                    mig=f"{instance.profile}@{instance.placement.describe()}" if instance else ""))
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
    """Report the device nodes (or the named ``nodes``), cluster totals over all of them first, and the namespaces'
    quotas.

    ``top`` keeps the first N nodes after sorting; totals always cover every node. Raises `InspectError`
    for a named node that does not exist or has no devices.
    """
    if sort not in SORT_KEYS:
        raise InspectError(f"unknown sort {sort!r} (expected {', '.join(SORT_KEYS)})")
    for name in nodes:
        facts = snapshot.nodes.get(name)
        if facts is None:
            raise InspectError(f'node "{name}" not found')
        if not facts.gpu_node:
            raise InspectError(f'node "{name}" has no devices registered by HAMi\'s device plugins')
    wanted = sorted(set(nodes)) if nodes else sorted(name for name, facts in snapshot.nodes.items() if facts.gpu_node)
    pods_on: dict[str, int] = {}
    family_pods_on: dict[str, dict[str, int]] = {}
    for usage in snapshot.usages:
        pods_on[usage.node] = pods_on.get(usage.node, 0) + 1
        on_node = family_pods_on.setdefault(usage.node, {})
        for cw in families_of(usage.grants):
            on_node[cw] = on_node.get(cw, 0) + 1
    reports = []
    for name in wanted:
        facts = snapshot.nodes[name]
        families = _node_families(snapshot.views.get(name), facts, family_pods_on.get(name, {}))
        totals = Totals()
        for on_node_family in families.values():  # the families' groups hold every device of the node once
            totals.add(on_node_family.totals)
        totals.pods = pods_on.get(name, 0)  # a pod holding two families is one pod on the node
        reports.append(NodeReport(name=name, cordoned=facts.cordoned, error=facts.error, totals=totals,
                                  families=families))
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
                         unreadable_pods=dict(sorted(snapshot.broken_pods.items())),
                         families=_cluster_families(reports), quotas=quota_reports(snapshot),
                         quota_warnings=list(snapshot.quota_warnings))


def quota_reports(snapshot: ClusterSnapshot) -> list[QuotaReport]:
    """Each namespace under a device quota: its use against its limits, per quota resource with a limit or a use."""
    factors = snapshot.quota_factors
    limited = {namespace: snapshot.quota_used.get(namespace, {}) for namespace in snapshot.quota_limits}
    return [QuotaReport(namespace=namespace, resource=resource, limit=limit, used=used,
                        limit_mib=None if limit is None or resource not in factors else limit * factors[resource])
            for namespace, resource, limit, used in quota_usage_rows(snapshot.quota_limits, limited)]


def only_namespace(report: InspectReport, namespace: str) -> InspectReport:
    """The report with only ``namespace``'s pods listed on each GPU; the totals still count every pod, as
    every pod's booking takes room on the GPU."""
    for node in report.nodes:
        for gpu in node.gpus:
            gpu.pods = [share for share in gpu.pods if share.namespace == namespace]
    report.unreadable_pods = {pod: error for pod, error in report.unreadable_pods.items()
                              if pod.startswith(f"{namespace}/")}
    report.quotas = [quota for quota in report.quotas if quota.namespace == namespace]
    return report
