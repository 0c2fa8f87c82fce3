"""The nearest miss: the node that comes closest to taking a pod, and what its GPUs lack.

Covers: the measure per failing check (memory and cores in their units, a full task list, an exclusive ask
on a shared card, cores all booked); a node needing fewer GPUs freed beats one needing more, then the
smaller gap wins, then the name; misses that freeing capacity cannot fix (type, UUID, health, cordon, too
few GPUs, a GPU smaller than the ask) are not near misses; multi-GPU containers report how many GPUs fit;
a node where every container fits alone gives no near miss (its refusal is about NUMA or the containers
together).
"""

from __future__ import annotations

import pytest

from hami_web.core.misses import GpuShortfall, nearest_miss, node_near_miss
from hami_web.core.options import PodOptions
from hami_web.core.usage import DeviceUsage

from .builders import ask, gpu, inventory, pod, view

ANY = PodOptions()


@pytest.mark.parametrize(("used", "request_", "expected"), [
    pytest.param(DeviceUsage(1, 6000, 0), ask(memory_mib=4000),
                 "GPU 0 has 2000 of 8000 MiB free, the pod asks 4000 MiB", id="memory"),
    pytest.param(DeviceUsage(1, 0, 70), ask(memory_mib=1000, cores=50),
                 "GPU 0 has 30% of its 100% cores free, the pod asks 50%", id="cores"),
    pytest.param(DeviceUsage(10, 1000, 10), ask(memory_mib=1000),
                 "GPU 0 has no task slot free (10 of 10 in use)", id="task-slots"),
    pytest.param(DeviceUsage(1, 1000, 0), ask(memory_mib=1000, cores=100),
                 "GPU 0 already runs a task, the pod asks for the whole card", id="exclusive"),
    pytest.param(DeviceUsage(1, 1000, 100), ask(memory_mib=1000),
                 "GPU 0 has all its cores booked (the pod asks 0% cores, i.e. a share of them)", id="compute-units"),
])
def test_a_single_gpu_miss_says_what_the_gpu_lacks(used: DeviceUsage, request_: object, expected: str) -> None:
    node = view(inventory("n", [gpu(0)]), {"GPU-0": used})
    miss = node_near_miss(pod(request_), node, ANY)  # type: ignore[arg-type]
    assert miss is not None
    assert miss.describe() == f"n: {expected}"


@pytest.mark.parametrize("options", [
    pytest.param(PodOptions(use_types=("T4",)), id="type"),
    pytest.param(PodOptions(use_uuids=frozenset({"GPU-9"})), id="uuid"),
])
def test_selection_misses_are_not_near_misses(options: PodOptions) -> None:
    node = view(inventory("n", [gpu(0)]))
    assert node_near_miss(pod(ask(memory_mib=1000)), node, options) is None


def test_unhealthy_cordoned_too_few_and_too_small_gpus_are_not_near_misses() -> None:
    sick = view(inventory("sick", [gpu(0, healthy=False), gpu(1)], cordoned=["GPU-1"]))
    small = view(inventory("small", [gpu(0)]))
    busy_small = view(inventory("busy-small", [gpu(0, memory_mib=8000)]), {"GPU-0": DeviceUsage(1, 1000, 0)})
    assert node_near_miss(pod(ask(memory_mib=1000)), sick, ANY) is None
    assert node_near_miss(pod(ask(2, memory_mib=1000)), small, ANY) is None
    assert node_near_miss(pod(ask(memory_mib=9000)), busy_small, ANY) is None  # even empty it is too small


def test_a_multi_gpu_container_reports_how_many_fit_and_the_closest_missing_gpus() -> None:
    node = view(inventory("n", [gpu(0), gpu(1), gpu(2)]),
                {"GPU-1": DeviceUsage(1, 5000, 0), "GPU-2": DeviceUsage(1, 7000, 0)})
    miss = node_near_miss(pod(ask(2, memory_mib=4000, name="main")), node, ANY)
    assert miss is not None
    assert (miss.asked_gpus, miss.fitting_gpus) == (2, 1)
    assert miss.shortfalls == (GpuShortfall(index=1, uuid="GPU-1", reason="CardInsufficientMemory", free=3000,
                                            total=8000, asked=4000, unit="MiB", gap=1000 / 8000),)
    assert miss.describe() == ("n (container main needs 2 GPUs, 1 of them fit now): "
                               "GPU 1 has 3000 of 8000 MiB free, the pod asks 4000 MiB")


def test_the_nearest_node_needs_fewest_gpus_freed_then_the_smallest_gap() -> None:
    devices = [gpu(0), gpu(1)]
    far = view(inventory("far", devices), {"GPU-0": DeviceUsage(1, 7000, 0), "GPU-1": DeviceUsage(1, 7000, 0)})
    close = view(inventory("close", devices), {"GPU-0": DeviceUsage(1, 5000, 0)})
    closer = view(inventory("closer", devices), {"GPU-0": DeviceUsage(1, 4500, 0)})
    two_short = view(inventory("a-two-short", devices),
                     {"GPU-0": DeviceUsage(1, 4100, 0), "GPU-1": DeviceUsage(1, 4100, 0)})
    request = pod(ask(2, memory_mib=4000))
    miss = nearest_miss(request, [far, two_short, close, closer], ANY)
    assert miss is not None and miss.node == "closer"


def test_a_node_where_every_container_fits_alone_gives_no_near_miss() -> None:
    numa_split = view(inventory("n", [gpu(0, numa=0), gpu(1, numa=1)]))
    assert node_near_miss(pod(ask(2, memory_mib=1000)), numa_split, PodOptions(numa_bind=True)) is None


def test_no_views_no_near_miss() -> None:
    assert nearest_miss(pod(ask()), [], ANY) is None
