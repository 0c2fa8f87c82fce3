"""Fitting a pod on one node's GPUs (docs/scheduling-rules.md#checks-for-one-device) and what the pod then books
(`pod_booking`).

Covers: every per-GPU check in order with its reason name, each alone and paired with the next check so the
first failing one wins; boundaries (exactly enough memory / cores, exclusive use only on 100-core cards);
multi-GPU containers; several containers booking cumulatively on one working copy; init containers fitted
alone; containers without GPUs getting empty entries; node-level reasons (``NodeInsufficientDevice`` alone,
``NumaNotFit``, ``AllocatedCardsInsufficientRequest``) and the ``"<n>/<total> <Reason>"`` summary sorted by
name; ``pod_booking`` = max(init peak, container sum) per resource, tasks = max(1 if any init, containers),
and only containers once the init containers finished.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from hami_web.core import names
from hami_web.core.checks import check_device
from hami_web.core.devices import Device
from hami_web.core.fit import FitFailure, PodFit, fit_pod
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import PodOptions
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import DeviceUsage, pod_booking

from .builders import ask, gpu, grant, inventory, pod, view

SMALL = ask(memory_mib=1000, cores=10)
EXCLUSIVE = ask(memory_mib=1000, cores=100)
ZERO_CORES = ask(memory_mib=1000, cores=0)
USE_A100 = PodOptions(use_types=("A100",))
ONLY_GPU_9 = PodOptions(use_uuids=frozenset({"GPU-9"}))


@pytest.mark.parametrize(("device", "used", "request_", "options", "cordoned", "reason"), [
    pytest.param(gpu(0), (0, 0, 0), SMALL, PodOptions(), (), "", id="idle-gpu-fits"),
    pytest.param(gpu(0, healthy=False), (0, 0, 0), SMALL, PodOptions(), ("GPU-0",), names.CARD_NOT_HEALTH,
                 id="unhealthy-before-cordoned"),
    pytest.param(gpu(0), (0, 0, 0), SMALL, USE_A100, ("GPU-0",), names.CARD_CORDONED, id="cordoned-before-type"),
    pytest.param(gpu(0), (0, 0, 0), SMALL, PodOptions(use_types=("A100",), nouse_uuids=frozenset({"GPU-0"})), (),
                 names.CARD_TYPE_MISMATCH, id="type-before-uuid"),
    pytest.param(gpu(0, type="AMD-MI100"), (0, 0, 0), SMALL, PodOptions(), (), names.CARD_TYPE_MISMATCH,
                 id="non-nvidia-card-is-type-mismatch"),
    pytest.param(gpu(0, count=2), (2, 0, 0), SMALL, ONLY_GPU_9, (), names.CARD_UUID_MISMATCH,
                 id="uuid-before-time-slicing"),
    pytest.param(gpu(0, count=2), (2, 8000, 100), SMALL, PodOptions(), (), names.CARD_TIME_SLICING_EXHAUSTED,
                 id="time-slicing-before-memory"),
    pytest.param(gpu(0), (1, 7500, 95), SMALL, PodOptions(), (), names.CARD_INSUFFICIENT_MEMORY,
                 id="memory-before-cores"),
    pytest.param(gpu(0), (1, 7000, 0), SMALL, PodOptions(), (), "", id="exactly-enough-memory-fits"),
    pytest.param(gpu(0), (1, 5000, 0), ask(memory_percent=50), PodOptions(), (), names.CARD_INSUFFICIENT_MEMORY,
                 id="percentage-books-share-of-card"),
    pytest.param(gpu(0), (1, 10, 10), EXCLUSIVE, PodOptions(), (), names.CARD_INSUFFICIENT_CORE,
                 id="cores-before-exclusive"),
    pytest.param(gpu(0), (1, 0, 90), SMALL, PodOptions(), (), "", id="exactly-enough-cores-fits"),
    pytest.param(gpu(0), (1, 1000, 0), EXCLUSIVE, PodOptions(), (), names.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
                 id="exclusive-on-shared-card"),
    pytest.param(gpu(0), (0, 0, 0), EXCLUSIVE, PodOptions(), (), "", id="exclusive-on-idle-card-fits"),
    pytest.param(gpu(0, cores=200), (1, 1000, 0), EXCLUSIVE, PodOptions(), (), "",
                 id="exclusive-only-on-100-core-cards"),
    pytest.param(gpu(0), (1, 1000, 100), ZERO_CORES, PodOptions(), (), names.CARD_COMPUTE_UNITS_EXHAUSTED,
                 id="zero-cores-on-fully-taken-card"),
    pytest.param(gpu(0), (1, 1000, 60), ZERO_CORES, PodOptions(), (), "", id="zero-cores-on-partly-taken-card"),
])
def test_check_device_first_failing_check_wins(device: Device, used: tuple[int, int, int],
                                               request_: ContainerRequest, options: PodOptions,
                                               cordoned: tuple[str, ...], reason: str) -> None:
    booked = request_.booked_memory_mib(device.memory_mib)
    assert check_device(device, list(used), request_, booked, options, frozenset(cordoned)) == reason


def test_summary_sorts_reasons_by_name() -> None:
    failure = FitFailure(reasons=((names.CARD_UUID_MISMATCH, 1), (names.CARD_INSUFFICIENT_CORE, 1)), total=2)
    assert failure.summary() == "1/2 CardInsufficientCore, 1/2 CardUuidMismatch"


FULL = DeviceUsage(10, 0, 0)


@pytest.mark.parametrize(("devices", "usage", "request_", "options", "summary"), [
    pytest.param([gpu(0), gpu(1)], {"GPU-1": DeviceUsage(1, 0, 95)}, pod(SMALL),
                 PodOptions(nouse_uuids=frozenset({"GPU-0"})), "1/2 CardInsufficientCore, 1/2 CardUuidMismatch",
                 id="spec-example-summary"),
    pytest.param([gpu(0, healthy=False), gpu(1)], {}, pod(ask(3)), PodOptions(), "3/2 NodeInsufficientDevice",
                 id="more-gpus-than-node-has-is-the-only-reason"),
    pytest.param([gpu(0, healthy=False), gpu(1), gpu(2)], {}, pod(ask(3)), PodOptions(),
                 "2/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth", id="some-fit-but-not-enough"),
    pytest.param([gpu(0, healthy=False), gpu(1, healthy=False)], {}, pod(SMALL), PodOptions(), "2/2 CardNotHealth",
                 id="none-fit-no-insufficient-request-reason"),
    pytest.param([gpu(0, numa=0), gpu(1, numa=0), gpu(2, numa=1), gpu(3, numa=1)], {"GPU-1": FULL, "GPU-3": FULL},
                 pod(ask(2)), PodOptions(numa_bind=True), "2/4 CardTimeSlicingExhausted, 2/4 NumaNotFit",
                 id="numa-groups-too-small"),
    pytest.param([gpu(0, numa=0), gpu(1, numa=0), gpu(2, numa=1), gpu(3, numa=1)],
                 {"GPU-1": FULL, "GPU-2": FULL, "GPU-3": FULL}, pod(ask(2)), PodOptions(numa_bind=True),
                 "1/4 AllocatedCardsInsufficientRequest, 3/4 CardTimeSlicingExhausted",
                 id="numa-bind-with-too-few-gpus-is-insufficient-request"),
    pytest.param([gpu(0, count=10, memory_mib=8000)], {}, pod(ask(memory_mib=5000), ask(memory_mib=5000)),
                 PodOptions(), "1/1 CardInsufficientMemory", id="containers-book-cumulatively-memory"),
    pytest.param([gpu(0, count=1)], {}, pod(ask(memory_mib=10), ask(memory_mib=10)), PodOptions(),
                 "1/1 CardTimeSlicingExhausted", id="containers-book-cumulatively-tasks"),
    pytest.param([gpu(0)], {"GPU-0": DeviceUsage(1, 0, 60)},
                 pod(ask(memory_mib=10, cores=30), ask(memory_mib=10, cores=30)), PodOptions(),
                 "1/1 CardInsufficientCore", id="containers-book-cumulatively-on-top-of-node-usage"),
    pytest.param([gpu(0)], {}, pod(ask(memory_mib=9000, init=True), ask(memory_mib=10)), PodOptions(),
                 "1/1 CardInsufficientMemory", id="init-container-that-cannot-fit-fails-the-pod"),
])
def test_fit_pod_failure_summary(devices: list[Device], usage: Mapping[str, DeviceUsage], request_: PodRequest,
                                 options: PodOptions, summary: str) -> None:
    result = fit_pod(request_, view(inventory("n", devices), usage), options)
    assert isinstance(result, FitFailure)
    assert result.summary() == summary


@pytest.mark.parametrize(("devices", "request_", "options", "grants"), [
    pytest.param([gpu(0), gpu(1), gpu(2)], pod(ask(2, memory_mib=1000, cores=10)), PodOptions(),
                 ((grant("GPU-0", 1000, 10), grant("GPU-1", 1000, 10)),), id="multi-gpu-container"),
    pytest.param([gpu(0, memory_mib=8000), gpu(1, memory_mib=16000)], pod(ask(2, memory_percent=50)), PodOptions(),
                 ((grant("GPU-0", 4000, 0), grant("GPU-1", 8000, 0)),), id="percentage-booked-per-gpu"),
    pytest.param([gpu(0), gpu(1)], pod(ask(memory_mib=5000), ask(memory_mib=5000)), PodOptions(gpu_policy="binpack"),
                 ((grant("GPU-0", 5000, 0),), (grant("GPU-1", 5000, 0),)),
                 id="second-container-sees-first-containers-booking"),
    pytest.param([gpu(0)], pod(ask(memory_mib=6000, init=True), ask(memory_mib=6000, init=True),
                               ask(memory_mib=6000)), PodOptions(),
                 ((grant("GPU-0", 6000, 0),), (grant("GPU-0", 6000, 0),), (grant("GPU-0", 6000, 0),)),
                 id="init-containers-fitted-alone"),
    pytest.param([gpu(0)], pod(ask(0, name="init", init=True), ask(0, name="sidecar"), ask(memory_mib=10)),
                 PodOptions(), ((), (), (grant("GPU-0", 10, 0),)), id="containers-without-gpu-get-empty-entries"),
])
def test_fit_pod_grants(devices: list[Device], request_: PodRequest, options: PodOptions,
                        grants: tuple[tuple[DeviceGrant, ...], ...]) -> None:
    assert fit_pod(request_, view(inventory("n", devices)), options) == PodFit(grants=grants)


@pytest.mark.parametrize(("grants", "init_count", "init_finished", "booking"), [
    pytest.param((), 0, False, {}, id="no-containers"),
    pytest.param(((grant("a", 3000, 30),),), 0, False, {"a": DeviceUsage(1, 3000, 30)}, id="one-container"),
    pytest.param(((grant("a", 2000, 10),), (grant("a", 1000, 10), grant("b", 500, 5))), 0, False,
                 {"a": DeviceUsage(2, 3000, 20), "b": DeviceUsage(1, 500, 5)}, id="containers-add-up"),
    pytest.param(((grant("a", 6000, 50),), (grant("a", 2000, 10),), (grant("a", 1000, 10),)), 1, False,
                 {"a": DeviceUsage(2, 6000, 50)}, id="init-peak-wins"),
    pytest.param(((grant("a", 1000, 5),), (grant("a", 3000, 20),), (grant("a", 3000, 20),)), 1, False,
                 {"a": DeviceUsage(2, 6000, 40)}, id="container-sum-wins"),
    pytest.param(((grant("a", 6000, 5),), (grant("a", 2000, 30),)), 1, False,
                 {"a": DeviceUsage(1, 6000, 30)}, id="max-per-resource"),
    pytest.param(((grant("a", 6000, 5),), (grant("a", 7000, 1),), ()), 2, False,
                 {"a": DeviceUsage(1, 7000, 5)}, id="init-peak-over-init-containers-one-task"),
    pytest.param(((grant("a", 6000, 50),), (grant("b", 1000, 10),)), 1, False,
                 {"a": DeviceUsage(1, 6000, 50), "b": DeviceUsage(1, 1000, 10)}, id="gpu-used-only-by-init"),
    pytest.param(((grant("a", 6000, 50),), (grant("a", 1000, 10),), (grant("b", 1000, 10),)), 1, True,
                 {"a": DeviceUsage(1, 1000, 10), "b": DeviceUsage(1, 1000, 10)}, id="init-finished-only-containers"),
])
def test_pod_booking(grants: tuple[tuple[DeviceGrant, ...], ...], init_count: int, init_finished: bool,
                     booking: dict[str, DeviceUsage]) -> None:
    assert pod_booking(grants, init_count=init_count, init_finished=init_finished) == booking
