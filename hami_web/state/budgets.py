"""PodDisruptionBudgets into the cache (docs/preemption.md): the sink of the policy/v1 list/watch.

Device-aware preemption puts back first the victims whose removal would take a budget below zero, and prefers nodes
with fewer such victims, as kube-scheduler does; so the budgets are watched like nodes and pods, each reduced at once
to its selector and status (`core.preemption.parse_disruption_budget`). The reflector runs only while preemption is
on (it needs ``poddisruptionbudgets`` list/watch, which preemption's start-up check asks for).
"""

from __future__ import annotations

from hami_web.core.preemption import DisruptionBudget, parse_disruption_budget
from hami_web.state.faces import BudgetFeed
from hami_web.state.reduced import ReducedSink

RESOURCE = "poddisruptionbudgets"
PATH = "/apis/policy/v1/poddisruptionbudgets"


def budget_sink(cache: BudgetFeed) -> ReducedSink[DisruptionBudget]:
    """PodDisruptionBudgets into the cache: a full list replaces them all, an event one."""
    return ReducedSink(parse_disruption_budget, cache.replace_budgets, cache.apply_budget_events)
