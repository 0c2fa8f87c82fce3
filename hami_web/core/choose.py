"""Choosing one node for a pod among kube-scheduler's candidates (SPEC.md §5 steps 3–5, §5.1 node policy).

The node score does not depend on the pod, so candidates are ranked first and tried in rank order; the
first that fits is the answer. Nodes whose aggregates already rule them out are skipped without a fit, and
exact per-GPU reasons are only computed when no node fits, because only then does anyone read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_web.core.fit import PodFit, fit_pod, may_fit
from hami_web.core.grants import PodGrants
from hami_web.core.options import SPREAD, PodOptions
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView

NODE_UNREGISTERED = "node unregistered"
INVALID_REGISTER = "InvalidRegisterAnnotation"


@dataclass(frozen=True, slots=True)
class Placement:
    """The chosen node and the GPUs of each container (init containers first)."""

    node: str
    grants: PodGrants
    node_score: float


@dataclass(frozen=True, slots=True)
class NoPlacement:
    """No candidate fits; ``reasons`` holds one message for every candidate node."""

    reasons: Mapping[str, str]


def rank_nodes(views: Sequence[NodeView], policy: str) -> list[NodeView]:
    """Binpack: highest score first (fill nodes up); spread: lowest first; ties by node name ascending."""
    if policy == SPREAD:
        return sorted(views, key=lambda view: (view.score, view.name))
    return sorted(views, key=lambda view: (-view.score, view.name))


def choose_node(request: PodRequest, options: PodOptions, candidates: Sequence[str],
                nodes: Mapping[str, NodeView], broken: Mapping[str, str] | None = None) -> Placement | NoPlacement:
    """Place ``request`` on the best-ranked candidate that fits, or give a reason for every candidate.

    ``nodes`` are the GPU nodes the cache knows; ``broken`` maps nodes whose register annotation does not
    parse to the parse error.
    """
    broken = broken or {}
    reasons: dict[str, str] = {}
    known: list[NodeView] = []
    for name in dict.fromkeys(candidates):
        view = nodes.get(name)
        if view is not None:
            known.append(view)
        elif name in broken:
            reasons[name] = f"{INVALID_REGISTER}: {broken[name]}"
        else:
            reasons[name] = NODE_UNREGISTERED
    ranked = rank_nodes(known, options.node_policy)
    skipped: list[NodeView] = []
    for view in ranked:
        if not may_fit(request, view, options):
            skipped.append(view)
            continue
        result = fit_pod(request, view, options)
        if isinstance(result, PodFit):
            return Placement(node=view.name, grants=result.grants, node_score=view.score)
        reasons[view.name] = result.summary()
    for view in skipped:
        # The full fit is the authority on the reason (may_fit is only a necessary condition); should it
        # ever disagree, the skipped nodes are still in rank order, so the first fit is the right answer.
        result = fit_pod(request, view, options)
        if isinstance(result, PodFit):
            return Placement(node=view.name, grants=result.grants, node_score=view.score)
        reasons[view.name] = result.summary()
    return NoPlacement(reasons={name: reasons[name] for name in dict.fromkeys(candidates)})
