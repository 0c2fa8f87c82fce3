"""Text, JSON and YAML output of the operator tools, following kubectl's habits.

Tables are aligned columns separated by three spaces with no borders (kubectl's tabwriter); ``-o json``
and ``-o yaml`` print the reports' plain data with stable keys, for scripts.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

import yaml

from hami_web.core.reasons import ReasonGroup
from hami_web.ops.capacity import CapacityReport
from hami_web.ops.explain import FITS, SCHEDULED, UNSCHEDULABLE, Explanation
from hami_web.ops.inspect import FamilyReport, GpuReport, InspectReport, NodeReport, PodShare, Totals

OUTPUTS = ("text", "wide", "json", "yaml")
PADDING = "   "


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned columns without borders; the last column is not padded. A row of one cell is a note on the row before
    it, indented to the second column and left out of the column widths."""
    widths = [len(header) for header in headers]
    for row in rows:
        if len(row) == 1 and len(headers) > 1:
            continue
        for position, cell in enumerate(row):
            widths[position] = max(widths[position], len(cell))
    lines = []
    for row in (headers, *rows):
        if len(row) == 1 and len(headers) > 1:
            lines.append(" " * (widths[0] + len(PADDING)) + row[0])
            continue
        cells = [cell.ljust(widths[position]) for position, cell in enumerate(row[:-1])]
        lines.append(PADDING.join([*cells, row[-1]]).rstrip())
    return lines


def dump(data: Any, output: str) -> str:
    """``data`` as indented JSON or as YAML (keys in the data's own order)."""
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    return json.dumps(data, indent=2) + "\n"


def _percent(used: int, total: int) -> str:
    # Rounded down, as kubectl top does: 100% only when nothing is left.
    return f"{100 * used // total}%" if total else "-"


@functools.cache
def _short_type(device_type: str, family: str) -> str:
    """A type that repeats its family's common word (``NVIDIA-NVIDIA A40``: HAMi's vendor prefix + the driver's
    name) shown once (``NVIDIA A40``); any other (``DCU-BW100``, ``NVIDIA-Tesla T4``) as registered."""
    prefix = f"{family}-"
    return device_type.removeprefix(prefix) if family and device_type.startswith(prefix + family) else device_type


# -- inspect ---------------------------------------------------------------------------------------------


# The MIG fields are written only for MIG GPUs and shares (docs/mig.md#dynamic-mig).
_MIG_FIELDS = ("mig", "mig_fault", "legacy_mig_entries")
_GPU_FIELDS = tuple(field.name for field in dataclasses.fields(GpuReport) if field.name not in ("pods", *_MIG_FIELDS))
_SHARE_FIELDS = tuple(field.name for field in dataclasses.fields(PodShare))


def _gpu_data(gpu: GpuReport) -> dict[str, Any]:
    # By hand rather than dataclasses.asdict, whose deep copy is most of the time of -o json at 40,000 GPUs. The
    # fields only some families have (a device's group, a share's template or MIG instance) are left out when empty.
    data: dict[str, Any] = {name: getattr(gpu, name) for name in _GPU_FIELDS if name != "group" or gpu.group}
    data["pods"] = [{name: getattr(share, name) for name in _SHARE_FIELDS
                     if name not in ("template", "mig") or getattr(share, name)} for share in gpu.pods]
    data["status"] = gpu.status
    if gpu.mig_fault:
        data["migFault"] = gpu.mig_fault
    if gpu.legacy_mig_entries:
        data["legacyMigEntries"] = gpu.legacy_mig_entries
    if gpu.mig is not None:
        data["mig"] = {"slices": gpu.mig.slices,
                       "instances": [{"profile": i.profile, "start": i.placement.start, "size": i.placement.size,
                                      "pod": i.pod, "migUUID": i.uuid} for i in gpu.mig.instances],
                       "free": {profile: [p.start for p in placements] for profile, placements in gpu.mig.free}}
    return data


def mig_rows(gpu: GpuReport) -> list[list[str]]:
    """Notes under a MIG GPU's row: one per instance (placement, profile, pod), its free placements per profile, and
    why it fails closed (docs/mig.md#dynamic-mig)."""
    texts: list[str] = []
    if gpu.mig is not None:
        texts += [f"mig {i.placement.describe()} {i.profile} {i.pod or '-'}" for i in gpu.mig.instances]
        free = " ".join(f"{profile}@{','.join(str(p.start) for p in placements)}"
                        for profile, placements in gpu.mig.free if placements)
        texts.append(f"free {free or 'none'}")
    if gpu.legacy_mig_entries:
        texts.append(f"pre-2.10 MIG geometry: {gpu.legacy_mig_entries} entries; drain and migrate")
    if gpu.mig_fault:
        texts.append(f"fails closed: {gpu.mig_fault}")
    return [[f"  {text}"] for text in texts]


def _family_data(family: FamilyReport) -> dict[str, Any]:
    return {"status": family.status, "totals": dataclasses.asdict(family.totals)}


def inspect_data(report: InspectReport) -> dict[str, Any]:
    """The report as plain data (statuses included) for ``-o json|yaml``."""
    nodes = []
    for node in report.nodes:
        gpus = [_gpu_data(gpu) for gpu in node.gpus]
        nodes.append({"name": node.name, "status": node.status, "cordoned": node.cordoned, "error": node.error,
                      "totals": dataclasses.asdict(node.totals), "gpus": gpus,
                      "families": {cw: _family_data(family) for cw, family in node.families.items()}})
    families = {cw: {"nodes": family.nodes, **dataclasses.asdict(family.totals)}
                for cw, family in report.families.items()}
    return {"cluster": {"nodes": report.nodes_total, **dataclasses.asdict(report.cluster), "families": families},
            "nodes": nodes, "unreadablePods": report.unreadable_pods,
            "namespaceQuotas": [dataclasses.asdict(quota) for quota in report.quotas],
            "quotaWarnings": report.quota_warnings}


def _quota_rows(report: InspectReport) -> list[list[str]]:
    rows = []
    for quota in report.quotas:
        if quota.limit is None:
            limit, share = "-", "-"
        else:
            limit = str(quota.limit) if quota.limit_mib in (None, quota.limit) else \
                f"{quota.limit} ({quota.limit_mib} MiB)"
            share = _percent(quota.used, quota.limit_mib if quota.limit_mib is not None else quota.limit)
        rows.append([quota.namespace, quota.resource, str(quota.used), limit, share])
    return rows


def _usage(used: int, total: int) -> str:
    return f"{used}/{total} ({_percent(used, total)})"


def _types(gpus: Sequence[GpuReport]) -> str:
    return ",".join(sorted({_short_type(gpu.type, gpu.family) for gpu in gpus})) or "-"


def _summary_row(name: str, families: str, types: str, totals: Totals, status: str, wide: bool) -> list[str]:
    """A node's row, or one family's on a node of several: ``all`` devices in the GPU column."""
    row = [name, "all", families, types, _usage(totals.memory_booked_mib, totals.memory_mib),
           _usage(totals.cores_booked, totals.cores), str(totals.pods)]
    if wide:
        row += ["-", "-", f"{totals.gpus} GPUs"]
    return [*row, status]


def _gpu_row(gpu: GpuReport, wide: bool) -> list[str]:
    device_type = _short_type(gpu.type, gpu.family) + (f" ({gpu.group})" if gpu.group else "")
    row = ["", str(gpu.index), gpu.family, device_type,
           _usage(gpu.memory_booked_mib, gpu.memory_mib), _usage(gpu.cores_booked, gpu.cores),
           str(len({(s.namespace, s.pod) for s in gpu.pods}))]
    if wide:
        row += [str(gpu.numa), gpu.uuid, f"{gpu.tasks}/{gpu.task_slots}"]
    return [*row, gpu.status]


def _cluster_rows(report: InspectReport) -> list[list[str]]:
    """The cluster's totals (``all``), then each family's."""
    rows = []
    for family, nodes, totals in (("all", report.nodes_total, report.cluster),
                                  *((cw, f.nodes, f.totals) for cw, f in report.families.items())):
        rows.append([family, str(nodes), str(totals.gpus), _usage(totals.memory_booked_mib, totals.memory_mib),
                     _usage(totals.cores_booked, totals.cores), str(totals.pods), str(totals.unhealthy_gpus),
                     str(totals.cordoned_gpus)])
    return rows


def _node_rows(node: NodeReport, wide: bool, details: bool) -> list[list[str]]:
    """The node's row, then its devices; on a node of several families each family's row before its devices."""
    rows = [_summary_row(node.name, ",".join(node.families) or "-", _types(node.gpus), node.totals, node.status,
                         wide)]
    if len(node.families) < 2:
        return rows + _device_rows(node.gpus, wide, details)
    by_family: dict[str, list[GpuReport]] = {}
    for gpu in node.gpus:
        by_family.setdefault(gpu.family, []).append(gpu)
    for family in node.families.values():
        gpus = by_family.get(family.family, [])
        rows.append(_summary_row("", family.family, _types(gpus), family.totals, family.status, wide))
        rows += _device_rows(gpus, wide, details)
    return rows


def _device_rows(gpus: Sequence[GpuReport], wide: bool, details: bool) -> list[list[str]]:
    rows = []
    for gpu in gpus:
        rows.append(_gpu_row(gpu, wide))
        rows += mig_rows(gpu)
        if details:
            for share in gpu.pods:
                memory = f"{share.memory_mib} ({share.template})" if share.template else str(share.memory_mib)
                mig = f" {share.mig}" if share.mig else ""
                rows.append(["", "", "", f"- {share.namespace}/{share.pod} [{share.container}]{mig}",
                             memory, str(share.cores), "", *([""] * (3 if wide else 0)), ""])
    return rows


def render_inspect(report: InspectReport, *, wide: bool = False, details: bool = False,
                   sort: str = "name") -> str:
    """Totals of the cluster and of each family, then one row per node followed by one per device (each family's
    row first on a node of several; and per pod with ``details``)."""
    lines = table(["FAMILY", "NODES", "GPUS", "MEMORY(MiB)", "CORES(%)", "PODS", "UNHEALTHY", "CORDONED"],
                  _cluster_rows(report))
    lines.append("")
    if len(report.nodes) < report.nodes_total:
        lines.append(f"showing {len(report.nodes)} of {report.nodes_total} nodes, sorted by {sort}")
    headers = ["NODE", "GPU", "FAMILY", "TYPE", "MEMORY(MiB)", "CORES(%)", "PODS"]
    if wide:
        headers += ["NUMA", "UUID", "TASKS"]
    headers.append("STATUS")
    rows: list[list[str]] = []
    for node in report.nodes:
        rows += _node_rows(node, wide, details)
    lines += table(headers, rows) if rows else ["No device nodes found."]
    if report.quotas:
        lines.append("")
        lines += table(["NAMESPACE", "QUOTA", "USED", "LIMIT", "USE"], _quota_rows(report))
    for warning in report.quota_warnings:
        lines.append(f"warning: {warning}")
    if report.unreadable_pods:
        lines.append("")
        lines.append(f"{len(report.unreadable_pods)} pod(s) with unreadable GPU annotations (usage not counted):")
        lines += [f"  {pod}: {error}" for pod, error in report.unreadable_pods.items()]
    return "\n".join(lines) + "\n"


# -- explain ---------------------------------------------------------------------------------------------


def explain_data(explanation: Explanation) -> dict[str, Any]:
    """The explanation as plain data for ``-o json|yaml``."""
    data = dataclasses.asdict(explanation)
    for container in data["containers"]:
        if not container["template"]:
            del container["template"]  # only a family with templates has one
    if not data["group_reasons"]:
        del data["group_reasons"]
    miss = data.pop("nearest_miss")
    data.pop("nearest_miss_text")
    data["nearest_miss"] = None if miss is None else {**miss, "text": explanation.nearest_miss_text}
    # The MIG fields only where there is MIG (docs/mig.md#dynamic-mig).
    if not data["mig"]:
        del data["mig"]
    for gpus in data["placement"].values():
        for gpu in gpus:
            if not gpu["mig"]:
                del gpu["mig"]
    return data


def _described(key: str, values: Sequence[str]) -> list[str]:
    label = f"{key}:".ljust(14)
    if not values:
        return [f"{label}<none>"]
    return [f"{label if i == 0 else ' ' * 14}{value}" for i, value in enumerate(values)]


def _groups_table(groups: Sequence[ReasonGroup]) -> list[str]:
    return table(["REASON", "NODES", "GPUS", "EXAMPLES"],
                 [[g.cause, str(g.nodes), str(g.gpus) if g.gpus else "-", ", ".join(g.examples)] for g in groups])


def render_explain(explanation: Explanation, *, wide: bool = False) -> str:
    """``kubectl describe``-like fields, then the placement or the grouped reasons and the nearest miss."""
    asks = [f"{'init container' if c.init else 'container'} {c.name}: {c.gpus} {c.device}(s) x {c.memory}, "
            f"{c.cores}% cores" for c in explanation.containers]
    lines = [*_described("Pod", [explanation.pod]),
             *_described("Verdict", [f"{explanation.verdict}: {explanation.message}"]),
             *_described("Asks", asks)]
    templates = [f"container {c.name}: {c.template}" for c in explanation.containers if c.template]
    if templates:
        lines += _described("Template", templates)
    if explanation.constraints:
        lines += _described("Constraints", explanation.constraints)
    if explanation.settings_source:
        lines += _described("Settings", [explanation.settings_source])
    if explanation.quota:
        lines += _described("Quota", [explanation.quota])
    if explanation.preemption:
        lines += _described("Preemption", [explanation.preemption])
    if explanation.verdict in (FITS, SCHEDULED) and explanation.placement:
        lines.append("")
        mig = any(gpu.mig for gpus in explanation.placement.values() for gpu in gpus)
        rows = [[container, str(gpu.index), gpu.family, gpu.uuid, _short_type(gpu.type, gpu.family),
                 str(gpu.memory_mib), str(gpu.cores), *([gpu.mig or "-"] if mig else [])]
                for container, gpus in explanation.placement.items() for gpu in gpus]
        lines += table(["CONTAINER", "GPU", "FAMILY", "UUID", "TYPE", "MEMORY(MiB)", "CORES(%)",
                        *(["MIG"] if mig else [])], rows)
    if explanation.verdict == UNSCHEDULABLE:
        if explanation.groups:
            lines.append("")
            lines += _groups_table(explanation.groups)
        lines.append("")
        misses = [explanation.ruled_out_fit] if explanation.ruled_out_fit else []
        if explanation.nearest_miss_text or not misses:
            misses.append(explanation.nearest_miss_text or "none: no node would fit even with its GPUs' bookings freed")
        lines += _described("Nearest miss", misses)
        if explanation.group_reasons:
            lines += _described("Groups", [f"{node}: {text}" for node, text in explanation.group_reasons.items()])
        if explanation.mig:
            lines += _described("MIG", explanation.mig)
        if wide:
            lines.append("")
            lines += table(["NODE", "REASON"], [[node, reason] for node, reason in explanation.node_reasons.items()])
    return "\n".join(lines) + "\n"


# -- capacity --------------------------------------------------------------------------------------------


def capacity_data(report: CapacityReport) -> dict[str, Any]:
    """The capacity report as plain data for ``-o json|yaml``."""
    return {**dataclasses.asdict(report), "runs_out_first": report.runs_out_first}


def _shape_text(report: CapacityReport) -> str:
    shape = report.shape
    memory = (f"{report.memory_mib_per_device} MiB" if report.memory_mib_per_device
              else f"{shape.memory_percent or 100}% memory")
    text = f"{shape.gpus} {report.device or shape.family}(s) x {memory}, {report.cores_per_device}% cores"
    if shape.gpu_type:
        text += f", type {shape.gpu_type}"
    if shape.numa_bind:
        text += ", numa-bind"
    if shape.mig_profile:
        text += f", MIG profile {shape.mig_profile}"
    for what, values in (("cpu", [shape.cpu] if shape.cpu else []), ("memory", [shape.memory] if shape.memory else []),
                         ("tolerating", shape.tolerations), ("node selector", shape.node_selector)):
        if values:
            text += f", {what} {','.join(values)}"
    for what, policy in (("node", shape.node_policy), ("GPU", shape.gpu_policy)):
        if policy:
            text += f", {what} policy {policy}"
    return text


def render_capacity(report: CapacityReport, *, wide: bool = False) -> str:
    """How many fit, what runs out first, then pods per GPU type (and per node with ``wide``)."""
    fits = (f"at least {report.fits} more pods (stopped at --limit {report.limit})" if report.limited
            else f"{report.fits} more pod{'s' if report.fits != 1 else ''}")
    runs_out = "-"
    if report.runs_out_first:
        runs_out = f"{report.runs_out_first} (on {report.runs_out_first_nodes} of {report.candidates} nodes)"
    lines = [*_described("Shape", [_shape_text(report)]), *_described("Fits now", [fits]),
             *_described("Runs out", [runs_out])]
    if report.settings_source:
        lines += _described("Settings", [report.settings_source])
    if report.quota:
        lines += _described("Quota", [f"namespace {report.shape.namespace}: " + ", ".join(
            f"{resource} {use} after these pods" for resource, use in report.quota.items())])
    if report.left_out:
        lines += _described("Left out", [f"{group.nodes} node(s): {group.cause} (e.g. {', '.join(group.examples)})"
                                         for group in report.left_out])
    if report.by_gpu_type:
        lines.append("")
        lines += table(["GPU TYPE", "PODS"], [[_short_type(t, report.shape.family), str(n)]
                                               for t, n in report.by_gpu_type.items()])
    if report.by_mig_profile:
        lines.append("")
        lines += table(["MIG PROFILE", "INSTANCES"],
                       [[profile, str(n)] for profile, n in report.by_mig_profile.items()])
    if wide and report.by_node:
        lines.append("")
        lines += table(["NODE", "PODS"], [[node, str(n)] for node, n in report.by_node.items()])
    if wide and report.exhausted:
        lines.append("")
        lines += _groups_table(report.exhausted)
    return "\n".join(lines) + "\n"

