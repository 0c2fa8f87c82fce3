"""Scores (docs/scheduling-rules.md#scores-and-policies) and the per-node aggregates of `NodeView`.

Covers: node score ``10 × (Σused/Σcount + Σusedcores/Σtotalcore + Σusedmem/Σtotalmem)`` over healthy,
uncordoned GPUs, 0 when any total is 0; "a more used node scores higher"; GPU score
``10 × ((1+used)/count + (cores+usedcores)/totalcore + (mem+usedmem)/totalmem)`` with worked 6.75 / 17.75
core+memory terms, a percentage request's memory term, and GPUs with zero totals; `build_node_view`
aggregates (usable GPUs, largest free memory and cores, types) and usage of unknown UUIDs ignored.
"""

from __future__ import annotations

import pytest

from hami_web.core.checks import device_score
from hami_web.core.devices import Device
from hami_web.core.requests import ContainerRequest
from hami_web.core.usage import DeviceUsage, node_score

from .builders import ask, gpu, inventory, view


@pytest.mark.parametrize(("devices", "usage", "cordoned", "expected"), [
    pytest.param([gpu(0), gpu(1)], {}, (), 0.0, id="idle-node-scores-zero"),
    pytest.param([gpu(0, count=4, memory_mib=8000), gpu(1, count=4, memory_mib=8000)],
                 {"GPU-0": DeviceUsage(2, 4000, 50)}, (), 10 * (2 / 8 + 50 / 200 + 4000 / 16000),
                 id="formula-over-all-gpus"),
    pytest.param([gpu(0, count=4), gpu(1, count=4, healthy=False)],
                 {"GPU-0": DeviceUsage(1, 2000, 25), "GPU-1": DeviceUsage(3, 8000, 100)}, (),
                 10 * (1 / 4 + 25 / 100 + 2000 / 8000), id="unhealthy-gpu-left-out"),
    pytest.param([gpu(0, count=4), gpu(1, count=4)],
                 {"GPU-0": DeviceUsage(1, 2000, 25), "GPU-1": DeviceUsage(3, 8000, 100)}, ("GPU-1",),
                 10 * (1 / 4 + 25 / 100 + 2000 / 8000), id="cordoned-gpu-left-out"),
    pytest.param([gpu(0, cores=0)], {"GPU-0": DeviceUsage(1, 100, 0)}, (), 0.0, id="zero-total-cores-scores-zero"),
    pytest.param([gpu(0, healthy=False)], {"GPU-0": DeviceUsage(1, 100, 10)}, (), 0.0, id="no-usable-gpu-scores-zero"),
])
def test_node_score(devices: list[Device], usage: dict[str, DeviceUsage], cordoned: tuple[str, ...],
                    expected: float) -> None:
    node = inventory("n", devices, cordoned=cordoned)
    assert view(node, usage).score == pytest.approx(expected)
    assert node_score(node, view(node, usage).usage) == pytest.approx(expected)


def test_seed_node_with_more_used_gpus_scores_higher() -> None:
    """A node1 with 3 of 4 used outranks a node2 with 2 of 4 used on the count term."""
    devices = [gpu(i, count=1) for i in range(4)]
    node1 = view(inventory("node1", devices), {f"GPU-{i}": DeviceUsage(1, 0, 0) for i in range(3)})
    node2 = view(inventory("node2", devices), {f"GPU-{i}": DeviceUsage(1, 0, 0) for i in range(2)})
    assert node1.score == pytest.approx(7.5)
    assert node2.score == pytest.approx(5.0)


@pytest.mark.parametrize(("device", "used", "request_", "core_and_memory_terms"), [
    pytest.param(gpu(1, count=10, memory_mib=8000), (1, 2000, 10), ask(memory_mib=1000, cores=20), 6.75,
                 id="seed-gpu1-6.75"),
    pytest.param(gpu(2, count=10, memory_mib=8000), (1, 6000, 70), ask(memory_mib=1000, cores=20), 17.75,
                 id="seed-gpu2-17.75"),
    pytest.param(gpu(0, count=10, memory_mib=8000), (1, 2000, 0), ask(memory_percent=50), 10 * (4000 + 2000) / 8000,
                 id="percentage-request-books-half-the-card"),
    pytest.param(gpu(0, count=10, memory_mib=46068), (0, 0, 0), ask(memory_percent=30),
                 10 * (46068 * 30 // 100) / 46068, id="percentage-rounded-down-like-the-booking"),
])
def test_gpu_score(device: Device, used: tuple[int, int, int], request_: ContainerRequest,
                   core_and_memory_terms: float) -> None:
    tasks_term = 10 * (1 + used[0]) / device.count
    assert device_score(device, list(used), request_) == pytest.approx(tasks_term + core_and_memory_terms)


def test_gpu_score_skips_terms_with_zero_totals() -> None:
    device = gpu(0, count=0, memory_mib=0, cores=0)
    assert device_score(device, [0, 0, 0], ask(memory_mib=10, cores=10)) == 0.0


def test_node_view_aggregates_usable_gpus_only() -> None:
    node = inventory("n", [
        gpu(0, memory_mib=8000, cores=100, count=2),
        gpu(1, memory_mib=16000, cores=100, count=2, healthy=False),
        gpu(2, memory_mib=24000, cores=200, count=2),
        gpu(3, memory_mib=32000, cores=300, count=2, type="NVIDIA-NVIDIA H100"),
        gpu(4, memory_mib=40000, cores=400, count=2),
    ], cordoned=("GPU-2",))
    node_view = view(node, {"GPU-0": DeviceUsage(1, 1000, 30), "GPU-3": DeviceUsage(1, 2000, 50),
                            "GPU-4": DeviceUsage(2, 0, 0), "GPU-gone": DeviceUsage(5, 5, 5)})
    assert node_view.usable_devices == 2  # GPU-0 and GPU-3: one unhealthy, one cordoned, one out of slots
    assert node_view.max_free_memory_mib == 30000
    assert node_view.max_free_cores == 250
    assert node_view.device_types == frozenset({"NVIDIA-NVIDIA A40", "NVIDIA-NVIDIA H100"})
    assert node_view.usage[4] == DeviceUsage(2, 0, 0)
    assert node_view.usage[1] == DeviceUsage()
    assert node_view.name == "n"
