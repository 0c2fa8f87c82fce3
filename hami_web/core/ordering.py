"""The order a container takes the devices that passed its checks: the GPU policy's keys, HAMi's topology-aware pick
over pair scores, network groups (docs/scheduling-rules.md#checks-for-one-device).

Apart from `fit.py` because which devices a container takes, once the checks have said which may, is a question of
its own that the ordinary fit and the dynamic MIG fill both ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from hami_web.core.checks import device_score
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.options import BINPACK, SPREAD, PodOptions
from hami_web.core.requests import ContainerRequest

# Working usage per GPU position: (tasks, memory MiB, cores). Booking replaces an entry with a new tuple, so a
# working copy is one list of references and a node that fails allocates nothing more.
WorkingUsage = list[Sequence[int]]


def policy_order(positions: list[int], devices: Sequence[Device], work: WorkingUsage,
                 request: ContainerRequest, options: PodOptions) -> list[int]:
    """``positions`` sorted by the policy's keys in the order written, then device index, then UUID."""
    sort_keys = options.gpu.sort_keys
    weights = options.scoring_weights
    scored = BINPACK in sort_keys or SPREAD in sort_keys

    def order(p: int) -> tuple[float | int | str, ...]:
        device = devices[p]
        score = device_score(device, work[p], request, weights) if scored else 0.0
        parts: list[float | int | str] = [-score if key == BINPACK else score if key == SPREAD else device.numa
                                          for key in sort_keys]
        return (*parts, device.index, device.uuid)

    return sorted(positions, key=order)


def _pair_score(inventory: NodeInventory, first: str, second: str) -> int:
    return inventory.pair_scores.get(first, {}).get(second, 0)


def topology_aware(request: ContainerRequest, inventory: NodeInventory, options: PodOptions) -> bool:
    """Whether the pod's topology-aware policy applies to this family: the families without pair scores
    (``inventory.topology``) read it as spread (docs/compatibility.md#device-families)."""
    return options.gpu.topology_aware and (inventory.topology is None or request.family in inventory.topology)


def topology_pick(positions: list[int], devices: Sequence[Device], inventory: NodeInventory,
                  count: int) -> list[int]:
    """HAMi's topology-aware choice; candidates visited from the highest GPU index down, first best wins."""
    ordered = sorted(positions, key=lambda p: (-devices[p].index, devices[p].uuid))
    if len(ordered) == count:
        return ordered
    uuids = {p: devices[p].uuid for p in ordered}
    if count == 1:
        # One GPU: the one with the weakest links to the others, keeping well-linked groups free.
        def links(p: int) -> int:
            return sum(_pair_score(inventory, uuids[p], uuids[q]) for q in ordered if q != p)

        best = ordered[0]
        best_links = links(best)
        for p in ordered[1:]:
            if (candidate := links(p)) < best_links:
                best, best_links = p, candidate
        return [best]
    best_group: tuple[int, ...] = ()
    best_total = -1
    for group in combinations(ordered, count):
        total = sum(_pair_score(inventory, uuids[a], uuids[b]) for a, b in combinations(group, 2))
        if total > best_total:
            best_group, best_total = group, total
    return list(best_group)


def choose_positions(pool: list[int], devices: Sequence[Device], work: WorkingUsage, inventory: NodeInventory,
                     request: ContainerRequest, options: PodOptions) -> list[int]:
    """The ``request.count`` positions of ``pool`` the container takes, or fewer when the family's network groups
    cannot hold it: by network groups when the family has them, else HAMi's topology-aware pick (alone in its own
    mode, or choosing the GPUs the policy's keys then order in a chain), else the policy's order."""
    grouping = inventory.grouping.get(request.family) if inventory.grouping else None
    if grouping:
        return grouping.pick(policy_order(pool, devices, work, request, options), devices, request.count)
    if not topology_aware(request, inventory, options):
        return policy_order(pool, devices, work, request, options)[:request.count]
    if options.gpu.spec_topology:
        return topology_pick(pool, devices, inventory, request.count)
    # In a chain topology-aware only filters: it picks the GPUs, the sort keys order them.
    return policy_order(topology_pick(pool, devices, inventory, request.count), devices, work, request, options)
