"""Checking a placement against a node's current usage again, as ``/bind`` does before it writes the booking.

Why: kube-scheduler's leader election is not a fence. During a Lease hand-over, or with a second scheduler by
mistake, two extenders can each choose GPUs from a cache that has not seen the other's booking yet. The node
lock serialises the binds of one node, so re-checking the chosen GPUs under that lock, against the bookings of
the pods the API shows on the node, turns such a race into a refused bind (kube-scheduler then filters the pod
again) instead of a GPU promised twice.

What is checked is the capacity invariant itself, which does not depend on the order in which pods were placed:
together with the others, the pod's booking fits each GPU's task slots, memory and cores, and an exclusive booking
(all cores of a 100-core card) shares its GPU with nobody. A device its family carves per grant is judged by the
family's partitioning (`hami_web.core.partitions.Partitioning.conflict`): on a dynamic MIG GPU the invariant is the
hardware's, task slots and no two instances on one memory slice (docs/mig.md#dynamic-mig), since the profiles' memory
and cores may add up to more than the card reports (three 2g.10gb and a 1g.5gb book 101 cores).
The filter's other checks are preferences of the moment
of choice (a 0-core ask avoids a card whose cores are taken; type and UUID selection) and are not repeated: binds
arrive in another order than filters, and re-applying them would refuse placements that overbook nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami_web.core import names
from hami_web.core.checks import EXCLUSIVE_CORES, core_capacity
from hami_web.core.devices import NodeInventory
from hami_web.core.families.family import CoreBooking
from hami_web.core.grants import PodGrants
from hami_web.core.usage import NO_USAGE, DeviceUsage


@dataclass(frozen=True, slots=True)
class Conflict:
    """One GPU of the placement that no longer fits, and why (a reason name of
    docs/scheduling-rules.md#checks-for-one-device, or a sentence)."""

    uuid: str
    reason: str

    def describe(self) -> str:
        """``device <uuid>: <reason>``."""
        return f"device {self.uuid}: {self.reason}"


@dataclass(frozen=True, slots=True)
class OtherBookings:
    """What the other pods on a node hold: per GPU UUID the summed usage, and the GPUs one of them holds exclusively."""

    usage: Mapping[str, DeviceUsage]
    exclusive: frozenset[str]


def other_bookings(pods: Iterable[tuple[Mapping[str, DeviceUsage], PodGrants]]) -> OtherBookings:
    """Sum the bookings of other pods (each as its per-GPU booking and its grants)."""
    totals: dict[str, DeviceUsage] = {}
    exclusive: set[str] = set()
    for booking, grants in pods:
        for uuid, amount in booking.items():
            totals[uuid] = totals.get(uuid, NO_USAGE) + amount
        exclusive.update(grant.uuid for container in grants for grant in container if grant.cores >= EXCLUSIVE_CORES)
    return OtherBookings(usage=totals, exclusive=frozenset(exclusive))


def placement_conflicts(inventory: NodeInventory, others: OtherBookings, booking: Mapping[str, DeviceUsage],
                        grants: PodGrants, bookings: Mapping[str, CoreBooking] | None = None) -> list[Conflict]:
    """The GPUs of a pod's ``booking`` (with its ``grants``) that do not fit beside ``others``; empty when all fit.
    ``bookings``: the families whose cores are booked their own way (`DeviceCatalog.core_bookings`), whose
    `CoreBooking` judges the cores (AMD's compute units, Neuron's core bitmask)."""
    bookings = bookings or {}
    devices = {device.uuid: device for device in inventory.devices}
    ours_exclusive = {grant.uuid for container in grants for grant in container if grant.cores >= EXCLUSIVE_CORES}
    conflicts: list[Conflict] = []
    for uuid, ours in sorted(booking.items()):
        device = devices.get(uuid)
        if device is None:
            conflicts.append(Conflict(uuid, "no longer in the node's inventory"))
            continue
        theirs = others.usage.get(uuid, NO_USAGE)
        exclusive_card = device.cores == EXCLUSIVE_CORES
        if not device.healthy:
            reason = names.CARD_NOT_HEALTH
        elif (partitioning := inventory.partitioning.get(device.family)) is not None and partitioning.carves(device):
            reason = partitioning.conflict(device, theirs, ours)
            if not reason:
                continue
        elif theirs.tasks + ours.tasks > device.count:
            reason = names.CARD_TIME_SLICING_EXHAUSTED
        elif theirs.memory_mib + ours.memory_mib > device.memory_mib:
            reason = names.CARD_INSUFFICIENT_MEMORY
        elif (theirs.cores + ours.cores > core_capacity(device, inventory)
              if (own := bookings.get(device.family)) is None
              else own.overbooked(device, theirs.cores, ours.cores)):
            reason = names.CARD_INSUFFICIENT_CORE
        elif exclusive_card and theirs.tasks > 0 and (uuid in ours_exclusive or uuid in others.exclusive):
            reason = names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        else:
            continue
        conflicts.append(Conflict(uuid, reason))
    return conflicts
