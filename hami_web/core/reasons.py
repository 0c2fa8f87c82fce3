"""Reading and grouping the per-node filter reasons (docs/scheduling-rules.md#filter-reasons) by cause.

kube-scheduler shows one reason per node, which is unreadable at thousands of nodes; people need "3,812
nodes: CardInsufficientMemory; 120 nodes: CardTypeMismatch". The per-node reason strings are the wire format
(``"<n>/<total> <Reason>"`` joined with ``", "``, or a node-level message), so this module reads that format
and nothing else, for the FilteringFailed event, the metrics and ``explain`` alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hami_web.core import names
from hami_web.core.choose import INVALID_REGISTER, NODE_UNREGISTERED

NODE_UNREGISTERED_CAUSE = "NodeUnregistered"
OTHER_CAUSE = "Other"
EXAMPLE_NODES = 3

_PART = re.compile(r"^(\d+)/\d+ (\w+)$")
# ``"<family>: <reason>"``: on a node or for a pod of several families the fit names the family (a common word has
# no space or colon).
_FAMILY_PREFIX = re.compile(r"^[^\s:]+: ")


def reason_causes(reason: str) -> tuple[tuple[str, int], ...]:
    """The causes in one node's reason with the number of GPUs each counts (0 for node-level causes).

    ``NodeInsufficientDevice`` counts the GPUs asked, not GPUs that failed, so it reports 0 GPUs. A reason that
    names its family (``"DCU: 2/2 CardInsufficientMemory"``) has the causes of the reason after the name.
    """
    if not reason.startswith(INVALID_REGISTER):
        reason = _FAMILY_PREFIX.sub("", reason, count=1)
    if reason.startswith(INVALID_REGISTER):
        return ((INVALID_REGISTER, 0),)
    if reason == NODE_UNREGISTERED:
        return ((NODE_UNREGISTERED_CAUSE, 0),)
    causes = []
    for part in reason.split(", "):
        match = _PART.match(part)
        if match:
            gpus = 0 if match.group(2) == names.NODE_INSUFFICIENT_DEVICE else int(match.group(1))
            causes.append((match.group(2), gpus))
    return tuple(causes) or ((OTHER_CAUSE, 0),)


@dataclass(frozen=True, slots=True)
class ReasonGroup:
    """One cause: how many nodes had a GPU (or the node itself) fail for it, how many GPUs, a few nodes."""

    cause: str
    nodes: int
    gpus: int
    examples: tuple[str, ...]


def group_reasons(reasons: Mapping[str, str], *, examples: int = EXAMPLE_NODES) -> tuple[ReasonGroup, ...]:
    """Group per-node reasons by cause, most nodes first (then most GPUs, then by cause name).

    A node counts under every cause one of its GPUs failed for, as kube-scheduler counts a node under each
    of its failed predicates, so the node counts of the groups may add up to more than the nodes.
    """
    nodes: dict[str, int] = {}
    gpus: dict[str, int] = {}
    shown: dict[str, list[str]] = {}
    for node in sorted(reasons):
        for cause, failed_gpus in reason_causes(reasons[node]):
            nodes[cause] = nodes.get(cause, 0) + 1
            gpus[cause] = gpus.get(cause, 0) + failed_gpus
            listed = shown.setdefault(cause, [])
            if len(listed) < examples:
                listed.append(node)
    order = sorted(nodes, key=lambda cause: (-nodes[cause], -gpus[cause], cause))
    return tuple(ReasonGroup(cause=cause, nodes=nodes[cause], gpus=gpus[cause], examples=tuple(shown[cause]))
                 for cause in order)


def causes_key(reasons: Mapping[str, str]) -> str:
    """The set of causes behind a refusal, e.g. ``"CardInsufficientMemory,CardTypeMismatch"``.

    Two refusals with the same key are the same story with different counts: the FilteringFailed event of a
    pod is updated, not re-created, while its key stays the same.
    """
    return ",".join(sorted({cause for reason in reasons.values() for cause, _ in reason_causes(reason)}))
