"""Picking a multi-device container inside device groups (README.md#ascend-npus): HCCS networks and module pairs.

Some accelerators are wired in groups that a job spanning several devices should stay inside. Ascend 910A/910B NPUs
report their HCCS group (``custominfo.NetworkID``): a container asking for several is filled from the largest group of
passing NPUs, then the next, and the node earns a score term for how much of each container sits in one group. An
Ascend 910C module carries two NPUs (index ÷ 2) that only run together, so a multi-NPU container takes whole modules.
HAMi breaks ties between groups at random; we take the lower group (or module) id, so placements are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_web.core.devices import Device
from hami_web.core.families import MODULE_PAIRS, NETWORK_GROUPS

# Node-score weight of a container kept inside one HCCS group (HAMi's ``Ascend910NetworkWeight``).
GROUP_SCORE_WEIGHT = 10
MODULE_SIZE = 2


def pick_in_groups(grouping: str, ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
    """``count`` of the passing positions ``ordered`` (policy order) as ``grouping`` wants them, or fewer when the
    groups cannot hold the request (the caller reports ``AllocatedCardsInsufficientRequest``)."""
    if grouping == NETWORK_GROUPS:
        return _fill_networks(ordered, devices, count)
    if grouping == MODULE_PAIRS and count > 1:
        return _whole_modules(ordered, devices, count)
    return list(ordered[:count])


def _fill_networks(ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
    """One device: the first in policy order. Several: from the largest group (ties: lower id), then the next, each
    group's devices in policy order."""
    if count == 1:
        return list(ordered[:1])
    groups: dict[int, list[int]] = {}
    for position in ordered:
        groups.setdefault(devices[position].network, []).append(position)
    chosen: list[int] = []
    for network in sorted(groups, key=lambda network: (-len(groups[network]), network)):
        chosen.extend(groups[network][:count - len(chosen)])
        if len(chosen) == count:
            break
    return chosen


def _whole_modules(ordered: Sequence[int], devices: Sequence[Device], count: int) -> list[int]:
    """Modules whose two devices both pass, lowest module first, until ``count``; an odd count cannot be whole
    modules and gets none."""
    if count % MODULE_SIZE:
        return []
    modules: dict[int, list[int]] = {}
    for position in ordered:
        modules.setdefault(devices[position].index // MODULE_SIZE, []).append(position)
    chosen: list[int] = []
    for module in sorted(modules):
        members = modules[module]
        if len(members) == MODULE_SIZE:
            chosen.extend(sorted(members, key=lambda position: devices[position].index))
            if len(chosen) == count:
                break
    return chosen


def group_share(networks: Sequence[int]) -> float:
    """The share of one container's devices that sit in its largest group (1.0 = all in one)."""
    if not networks:
        return 0.0
    sizes: dict[int, int] = {}
    for network in networks:
        sizes[network] = sizes.get(network, 0) + 1
    return max(sizes.values()) / len(networks)


def describe_groups(grouping: str, passing: Sequence[Device], count: int) -> str:
    """Why the devices that pass cannot hold ``count`` in ``grouping``'s way (for ``explain``), "" when they can."""
    if grouping == NETWORK_GROUPS:
        sizes: dict[int, int] = {}
        for device in passing:
            sizes[device.network] = sizes.get(device.network, 0) + 1
        if len(passing) >= count:
            return ""
        listed = ", ".join(f"group {network}: {sizes[network]}" for network in sorted(sizes)) or "none"
        return f"HCCS groups with a free NPU ({listed}) hold {len(passing)} of the {count} asked"
    if grouping == MODULE_PAIRS and count > 1:
        modules: dict[int, int] = {}
        for device in passing:
            modules[device.index // MODULE_SIZE] = modules.get(device.index // MODULE_SIZE, 0) + 1
        whole = sorted(module for module, free in modules.items() if free == MODULE_SIZE)
        if count % MODULE_SIZE == 0 and len(whole) * MODULE_SIZE >= count:
            return ""
        halves = sorted(module for module, free in modules.items() if free < MODULE_SIZE)
        text = f"{len(whole)} whole module(s) free ({', '.join(map(str, whole)) or 'none'}) for {count} NPUs"
        if halves:
            text += f"; modules with one NPU free: {', '.join(map(str, halves))}"
        if count % MODULE_SIZE:
            text += "; an odd count is never whole modules"
        return text
    return ""


def group_label(grouping: str, device: Device) -> str:
    """The group a device belongs to, for the tools: ``HCCS <id>``, ``module <n>``, or ""."""
    if grouping == NETWORK_GROUPS:
        return f"HCCS {device.network}"
    if grouping == MODULE_PAIRS:
        return f"module {device.index // MODULE_SIZE}"
    return ""
