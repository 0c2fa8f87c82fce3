"""Bind-time verification of a placement against the other bookings of its node (`core.verify`,
docs/deployment.md#high-availability-active-and-standby).

Covers: each capacity reason (slots, memory, cores, exclusivity both ways, health, a GPU gone from the inventory);
placements that only fit in another order than they were chosen are accepted (the check is the capacity invariant,
not the filter's order-dependent preferences); init containers count by their peak, as the booking rule says;
several GPUs with several conflicts are all named.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hami_web.core import names
from hami_web.core.grants import DeviceGrant
from hami_web.core.usage import DeviceUsage, pod_booking
from hami_web.core.verify import Conflict, OtherBookings, other_bookings, placement_conflicts

from .builders import gpu, grant, inventory

NODE = inventory("node1", [gpu(0, uuid="g0", count=4, memory_mib=10000), gpu(1, uuid="g1", count=4, memory_mib=10000)])


def _others(*pods: tuple[tuple[DeviceGrant, ...], ...]) -> OtherBookings:
    return other_bookings((pod_booking(grants, init_count=0), grants) for grants in pods)


def _conflicts(others: OtherBookings, grants: tuple[tuple[DeviceGrant, ...], ...], *, init_count: int = 0,
               node=NODE) -> list[Conflict]:
    return placement_conflicts(node, others, pod_booking(grants, init_count=init_count), grants)


@pytest.mark.parametrize(("others", "ours", "reason"), [
    # four tasks already share g0 (count 4): a fifth does not fit
    ([((grant("g0", 100, 0),),)] * 4, ((grant("g0", 100, 0),),), names.CARD_TIME_SLICING_EXHAUSTED),
    ([((grant("g0", 6000, 0),),)], ((grant("g0", 5000, 0),),), names.CARD_INSUFFICIENT_MEMORY),
    ([((grant("g0", 1000, 60),),)], ((grant("g0", 1000, 50),),), names.CARD_INSUFFICIENT_CORE),
    # an exclusive booking next to anybody, or anybody next to an exclusive booking
    ([((grant("g0", 1000, 0),),)], ((grant("g0", 1000, 100),),), names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT),
    ([((grant("g0", 1000, 100),),)], ((grant("g0", 1000, 0),),), names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT),
])
def test_a_placement_that_overbooks_a_gpu_is_named_with_the_reason(others: list, ours: tuple, reason: str) -> None:
    assert _conflicts(_others(*others), ours) == [Conflict("g0", reason)]


@pytest.mark.parametrize(("others", "ours"), [
    ([], ((grant("g0", 10000, 100),),)),                                          # a whole card, alone
    ([((grant("g0", 4000, 30),),)] * 2, ((grant("g0", 2000, 40),),)),             # exactly full memory and cores
    ([((grant("g0", 1000, 60),),), ((grant("g0", 1000, 40),),)], ((grant("g0", 1000, 0),),)),
    ([((grant("g1", 10000, 100),),)], ((grant("g0", 10000, 100),),)),             # another GPU's booking
])
def test_a_placement_within_capacity_passes(others: list, ours: tuple) -> None:
    # The third case was chosen first (0 cores while cores were free) and bound last: the filter's
    # "compute units exhausted" preference would refuse it now, but nothing is overbooked.
    assert _conflicts(_others(*others), ours) == []


def test_init_containers_count_by_their_peak_not_their_sum() -> None:
    others = _others(((grant("g0", 4000, 0),),))
    # init 5000 then container 5000 on g0: the booking is max(5000, 5000) = 5000 ≤ 6000 free
    ours = ((grant("g0", 5000, 0),), (grant("g0", 5000, 0),))
    assert _conflicts(others, ours, init_count=1) == []
    assert _conflicts(others, ours, init_count=0) == [Conflict("g0", names.CARD_INSUFFICIENT_MEMORY)]


def test_an_unhealthy_or_vanished_gpu_is_a_conflict() -> None:
    sick = inventory("node1", [replace(gpu(0, uuid="g0"), healthy=False)])
    assert _conflicts(_others(), ((grant("g0", 100, 0),),), node=sick) == [Conflict("g0", names.CARD_NOT_HEALTH)]
    gone = _conflicts(_others(), ((grant("g9", 100, 0),),))
    assert [conflict.uuid for conflict in gone] == ["g9"] and "inventory" in gone[0].reason


def test_every_conflicting_gpu_is_named_in_uuid_order() -> None:
    others = _others(((grant("g0", 9000, 0), grant("g1", 9000, 0)),))
    ours = ((grant("g1", 2000, 0), grant("g0", 2000, 0)),)
    conflicts = _conflicts(others, ours)
    assert conflicts == [Conflict("g0", names.CARD_INSUFFICIENT_MEMORY), Conflict("g1", names.CARD_INSUFFICIENT_MEMORY)]
    assert conflicts[0].describe() == "device g0: CardInsufficientMemory"


def test_other_bookings_sum_usage_and_remember_exclusive_gpus() -> None:
    summed = _others(((grant("g0", 1000, 20),),), ((grant("g0", 2000, 100), grant("g1", 500, 0)),))
    assert summed.usage == {"g0": DeviceUsage(2, 3000, 120), "g1": DeviceUsage(1, 500, 0)}
    assert summed.exclusive == frozenset({"g0"})
