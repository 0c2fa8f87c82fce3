"""What ``explain`` says about device-aware preemption for a pod no node takes (docs/preemption.md).

The same decision the filter takes (`core.preemption.plan_preemption`) on the tool's snapshot: ``would preempt a, b on
node n``; or, for a pod already nominated, ``waiting for 2 preempted pods on n`` (its victims terminating there); or
why not: ``preemptionPolicy: Never``, preemption off on the server (``--preemption=off`` or turned off at start-up
for want of rights: the published settings say ``off``), or no node where lower-priority pods free enough. The
snapshot has no PodDisruptionBudgets (the tools do not read them), so a budget the filter would spare is not spared
here; the text says so when it names victims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_web.core.options import PodOptions
from hami_web.core.preemption import Holder, NoPreemption, Preemptor, plan_preemption, preemption_terms
from hami_web.core.quota import booking_quota_use, family_quota_names, quota_resources
from hami_web.core.requests import PodRequest
from hami_web.ops.snapshot import ClusterSnapshot
from hami_web.state.pods import preemption_holder


def preemption_note(pod: Mapping[str, Any], request: PodRequest, options: PodOptions, candidates: Sequence[str],
                    snapshot: ClusterSnapshot, *, enabled: bool) -> str:
    """One sentence on preemption for the unschedulable ``pod`` (see the module)."""
    if not enabled:
        return "device-aware preemption is off on the server (its published settings say --preemption=off)"
    priority, may_preempt = preemption_terms(pod)
    if not may_preempt:
        return "preemptionPolicy: Never: the pod waits for room and preempts nobody"
    metadata = pod.get("metadata") or {}
    uid, namespace = str(metadata.get("uid") or ""), str(metadata.get("namespace") or "default")
    holders = _holders(snapshot, uid)
    nominated = str((pod.get("status") or {}).get("nominatedNodeName") or "")
    leaving = [holder.key for holder in holders.get(nominated, ()) if holder.terminating and holder.priority < priority]
    if nominated and leaving:
        return f"waiting for {len(leaving)} preempted pod{'s' if len(leaving) != 1 else ''} on {nominated} " \
               f"({', '.join(leaving)})"
    quota = snapshot.namespace_quota(namespace)
    preemptor = Preemptor(uid=uid, namespace=namespace, name=str(metadata.get("name") or ""), priority=priority,
                          request=request, options=options, quota=quota if quota.limits else None)
    plan = plan_preemption(preemptor, candidates, snapshot.views, holders, [], snapshot.catalog)
    if isinstance(plan, NoPreemption):
        return f"no preemption would help (priority {priority}): no node where pods of lower priority free enough"
    chosen = plan.chosen
    if not chosen.victims:
        leaving = [holder.key for holder in chosen.waiting_for]
        return f"waiting for {len(leaving)} terminating pod{'s' if len(leaving) != 1 else ''} on {chosen.node} " \
               f"({', '.join(leaving)})"
    return f"would preempt {', '.join(victim.key for victim in chosen.victims)} on node {chosen.node} " \
           f"(PodDisruptionBudgets not read by this tool)"


def _holders(snapshot: ClusterSnapshot, preemptor_uid: str) -> dict[str, list[Holder]]:
    resources = quota_resources(snapshot.catalog)
    families = family_quota_names(snapshot.catalog)
    by_node: dict[str, list[Holder]] = {}
    for usage in snapshot.usages:
        if usage.uid == preemptor_uid:
            continue
        by_node.setdefault(usage.node, []).append(preemption_holder(
            usage, booking_quota_use(usage.booking, usage.grants, resources, families)))
    return by_node
