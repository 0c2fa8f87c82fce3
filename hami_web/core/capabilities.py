"""The families' capabilities the fit applies beyond the common checks (docs/device-families.md#device-families): a
sharing rule's check of each card and what a grant holds under it (`hami_web.core.families.family.SharingRule`), a
partitioned device's handle, and the group terms' bound.

Kept out of `hami_web.core.fit` so the one fit loop stays one screenful of rules every family shares.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from hami_web.core import names
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import SPREAD, PodOptions
from hami_web.core.ordering import WorkingUsage
from hami_web.core.quota import PodQuota
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView, busy_keys

# The checks a card fails before a sharing rule's, in HAMi's order (Metax sGPU's ``Fit``: type, health, then QoS).
_BEFORE_SHARING = frozenset({names.CARD_TYPE_MISMATCH, names.CARD_NOT_HEALTH})


def sharing_reasons(reasons: list[str], request: ContainerRequest, devices: Sequence[Device], work: WorkingUsage,
                    held: Sequence[tuple[str, ...]] | None, first: int) -> list[str]:
    """``reasons`` with each device's sharing problem (`hami_web.core.families.family.SharingRule.problem`) in place of
    the common checks after type and health; ``held``: what the node's devices hold (the family's start at ``first``),
    None (or a request without a rule) leaves ``reasons`` as they are."""
    rule = request.sharing_rule
    if rule is None or held is None:
        return reasons
    return [reason if reason in _BEFORE_SHARING else
            rule.problem(request.sharing, request.cores, device, row[0], tags) or reason
            for reason, device, row, tags in zip(reasons, devices, work, held[first:first + len(devices)],
                                                 strict=True)]


def sharing_pick(chosen: list[int], pool: Sequence[int], request: ContainerRequest, devices: Sequence[Device],
                 held: Sequence[tuple[str, ...]] | None, first: int) -> list[int]:
    """The positions a container takes: the sharing rule's own pick among the passing ``pool`` when it has one for the
    ask and there is a choice (Metax sGPU: whole cards by MetaLink zone, online pods by the fewest online pods), else
    ``chosen`` (the policy's)."""
    rule = request.sharing_rule
    if rule is None or held is None or len(chosen) < request.count or len(pool) <= request.count:
        return chosen
    picked = rule.pick(request.sharing, request.cores, [devices[position] for position in pool],
                       [held[first + position] for position in pool], request.count)
    return chosen if picked is None else [pool[index] for index in picked]


def sharing_score(containers: Sequence[ContainerRequest], grants: Sequence[Sequence[DeviceGrant]],
                  inventory: NodeInventory, base: Sequence[Sequence[int]],
                  held: Sequence[tuple[str, ...]] | None) -> float:
    """The node-score term of one family's grants under its sharing rule (Metax sGPU's ``ScoreNode`` × 10,000), 0
    when the family has none or the rule does not score the ask; ``base`` and ``held``: the node's usage rows and tags
    before the pod."""
    scored = next((c for c in containers if c.count and c.grouped and c.sharing_rule is not None), None)
    if scored is None or scored.sharing_rule is None or held is None:
        return 0.0
    first, end = inventory.groups.get(scored.family, (0, 0))
    devices = inventory.devices[first:end]
    by_uuid = {device.uuid: device for device in devices}
    granted = [by_uuid[grant.uuid] for container in grants for grant in container if grant.uuid in by_uuid]
    return scored.sharing_rule.score(scored.sharing, scored.cores, granted, devices,
                                     [row[0] == 0 for row in base[first:end]], held[first:end])


def grant_tags(request: ContainerRequest) -> tuple[str, ...]:
    """What a grant of ``request`` holds under its sharing rule (none without one)."""
    rule = request.sharing_rule
    return rule.tags(request.sharing, request.cores) if rule is not None else ()


def device_handle(device: Device) -> str:
    """The device plugin's handle of a partitioned device ("" for another device)."""
    return device.partitions.handle if device.partitions is not None else ""


def group_score_bound(request: PodRequest, view: NodeView, policy: str) -> float:
    """The most `PodFit.group_score` a placement of ``request`` on ``view`` can earn, from the view's aggregates: each
    grouped container keeps at most as many devices in one group as that group has usable devices with the memory it
    asks (docs/device-families.md#ascend-npus); a term that depends on the busy devices, what `busy_term_bound` says
    of the view's shape."""
    bound = 0.0
    stats = view.family_stats
    shared: set[str] = set()
    for container in request.containers:
        if not (container.count and container.grouped) or container.busy_term is not None:
            continue
        if container.sharing_rule is not None:  # one term for the family's cards (`sharing_score`), from their usage
            if container.family not in shared:
                shared.add(container.family)
                bound += _sharing_bound(request, container, view)
            continue
        family = stats.get(container.family)
        if family is None or not family.group_free_memory:
            continue  # no network groups on this node: no term
        wanted = container.memory_mib
        most = max(sum(1 for free in group if free >= wanted) for group in family.group_free_memory)
        bound += container.group_weight * min(container.count, most) / container.count
    return bound + busy_term_bound(request, view.busy_key, policy)


def _sharing_bound(request: PodRequest, scored: ContainerRequest, view: NodeView) -> float:
    """The most `sharing_score` can be on ``view`` for the family of ``scored`` (its first scored container, whose rule
    judges all the pod's cards of the family together)."""
    rule = scored.sharing_rule
    if rule is None:
        return 0.0
    first, end = view.inventory.groups.get(scored.family, (0, 0))
    counts = [c.count for c in request.containers if c.family == scored.family]
    return rule.bound(scored.sharing, scored.cores, counts, [row[0] == 0 for row in view.usage_rows[first:end]],
                      [used.tags for used in view.usage[first:end]])


def busy_term_bound(request: PodRequest, key: str, policy: str, alike: Collection[str] = ()) -> float:
    """The most the terms that depend on the node's busy devices (`hami_web.core.groups.BusyTerm`: Kunlunxin's bubbles)
    can add to `PodFit.group_score` on a node whose view's `busy_key` is ``key``: the top of each family's
    `BusyTerm.term_range` under binpack, its least negated under spread (the fit hands the term back negated there, so
    that the filter adds it under both policies); -inf when the node's devices cannot hold the pod (no fit: the ranking
    puts it last); 0 when the pod asks for no such family or the node has no key for it (then the fit adds no term).
    ``alike``: the families whose devices the pod's selection and quota treat alike (`busy_alike`), judged exactly
    when one container asks for them."""
    keys: dict[str, int] | None = None
    bound = 0.0
    for family, containers in request.blocks():
        scored = [container for container in containers if container.count and container.grouped]
        term = scored[0].busy_term if scored else None
        if term is None:
            continue
        keys = busy_keys(key) if keys is None else keys
        if family not in keys:
            continue
        regular = sum(container.count for container in scored if not container.init)
        inits = [container.count for container in scored if container.init]
        # Init containers fit on the node's usage before the others: their devices may be the others' again.
        sizes = range(max(regular, *inits), regular + sum(inits) + 1) if inits else (regular,)
        terms = term.term_range(keys[family], sizes, len(scored) == 1 and not inits and family in alike)
        if terms is None:
            return -math.inf
        bound += -terms[0] if policy == SPREAD else terms[1]
    return bound


def busy_alike(request: PodRequest, options: PodOptions, quota: PodQuota | None) -> frozenset[str]:
    """The families with a busy-dependent term whose devices the pod's selection and quota treat alike: no type, UUID,
    NUMA or mode selection and no namespace limit on the family (a limit may pass some devices and not others)."""
    return frozenset(container.family for container in request.containers if container.busy_term is not None
                     and not options.selection(container.family).constrained
                     and (quota is None or quota.get(container.family) is None))


def busy_devices(inventory: NodeInventory, rows: Sequence[Sequence[int]], family: str) -> list[Device]:
    """The devices of ``family`` with a task in ``rows`` (the node's usage rows: tasks first), for a grouping whose
    term depends on them (`hami_web.core.groups.Grouping.busy_term`: HAMi's ``previous`` usage of Kunlunxin)."""
    first, end = inventory.groups.get(family, (0, 0))
    return [inventory.devices[position] for position in range(first, end) if rows[position][0] > 0]
