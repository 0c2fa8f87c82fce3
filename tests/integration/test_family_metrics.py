"""``/metrics`` for every device family, as HAMi v2.10 serves them (``cmd/scheduler/metrics.go``).

HAMi's scheduler emits its per-device gauges for every vendor's devices under the same names (a DCU is a
``hami_gpu_*`` series too), the device's kind shown by ``device_type``: the type its device plugin registered.
Covers: an NVIDIA node, a Hygon DCU node (HAMi's text register), a Cambricon MLU node (its capacity) and an Iluvatar
MR-V100 node (with ``--enable-iluvatar``), one pod scheduled on each through ``/filter`` and ``/bind``: every device
is in every per-device gauge with HAMi's label names and its registered type (``DCU-BW100``, ``MR-V100``, the MLU's
model), the units as for NVIDIA (bytes, percent of the device; Iluvatar and MLU memory asked in 256 MiB units is
booked in MiB), each container's share in ``hami_vgpu_*``; ``hami_web_device_info`` names each device's family; a
family that is not enabled has no series.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami_web.core.families import build_catalog
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    A40,
    RuntimeFactory,
    Scheduler,
    container,
    gpu_limits,
    gpu_node,
    gpu_pod,
    gpus,
    mlu_limits,
    mlu_node,
    release_lock,
)

MIB = 1024 * 1024
FAMILIES = build_catalog(enable={"iluvatar"})
DCU, MR_V100 = FAMILIES["DCU"], FAMILIES["MR-V100"]
ILUVATAR_UUID = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae"
MLU_UUID = "mlu-0-cambricon-mlu-0"
GPU_LABELS = ("node", "device_uuid", "device_index", "device_type", "zone")
PER_DEVICE = ("hami_gpu_memory_limit_bytes", "hami_gpu_core_limit_ratio", "hami_gpu_memory_allocated_bytes",
              "hami_gpu_shared_count", "hami_gpu_core_allocated_ratio", "hami_node_gpu_overview",
              "hami_node_gpu_memory_allocated_ratio", "hami_web_device_info")

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _node(name: str, register_key: str, register: str, handshake_key: str, count_resource: str,
          count: int) -> dict[str, Any]:
    """A node as a family's device plugin leaves it (the family's register, handshake and allocatable)."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {register_key: register,
                                                       handshake_key: "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {count_resource: str(count), "cpu": "8"}}}


def _cluster(apiserver: LocalCluster) -> None:
    apiserver.load([
        gpu_node("gpu-0", gpus("gpu-0", 1)),
        _node("dcu-0", DCU.register_key, "DCU-0,4,65520,100,DCU-BW100,0,true:DCU-1,4,65520,100,DCU-BW100,0,true:",
              DCU.handshake_key, DCU.resources.count, 8),
        _node("iluvatar-0", MR_V100.register_key, f"{ILUVATAR_UUID},10,8192,100,MR-V100,0,true:",
              MR_V100.handshake_key, MR_V100.resources.count, 10),
        mlu_node("mlu-0", cards=1, memory_units=96),
        gpu_pod("on-gpu", gpu_limits(1, memory_mib=3000, cores=30)),
        gpu_pod("on-mlu", mlu_limits(1, memory_units=48, cores=50)),
        gpu_pod("on-dcu", containers=[container("main", {DCU.resources.count: "1", DCU.resources.memory: "16384",
                                                         DCU.resources.cores: "50"})]),
        gpu_pod("on-iluvatar", containers=[container("main", {MR_V100.resources.count: "1",
                                                              MR_V100.resources.memory: "8",
                                                              MR_V100.resources.cores: "25"})]),
    ])


def _scrape(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    found = [value for got, value in samples[name] if all(got.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def test_every_familys_devices_are_hamis_per_device_series(apiserver: LocalCluster,
                                                           make_runtime: RuntimeFactory) -> None:
    runtime = make_runtime(enable_iluvatar=True)
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    _cluster(apiserver)
    runtime.sync.sync_now()
    nodes = ["gpu-0", "dcu-0", "iluvatar-0", "mlu-0"]
    for pod, node in (("on-gpu", "gpu-0"), ("on-dcu", "dcu-0"), ("on-iluvatar", "iluvatar-0"), ("on-mlu", "mlu-0")):
        assert scheduler.schedule(pod, nodes) == node
        release_lock(runtime.kube, pod, node)
    samples = _scrape(runtime.app.test_client().get("/metrics").get_data(as_text=True))

    types = {("gpu-0", "gpu-0-gpu0"): A40, ("dcu-0", "DCU-0"): "DCU-BW100", ("dcu-0", "DCU-1"): "DCU-BW100",
             ("iluvatar-0", ILUVATAR_UUID): "MR-V100", ("mlu-0", MLU_UUID): "MLU370-X4"}
    for name in PER_DEVICE:
        assert {(labels["node"], labels["device_uuid"]): labels["device_type"] for labels, _ in samples[name]} \
            == types, name
    for labels, _ in samples["hami_gpu_core_limit_ratio"]:
        assert tuple(sorted(labels)) == tuple(sorted(GPU_LABELS))

    dcu = {"node": "dcu-0", "device_type": "DCU-BW100"}
    booked = next(labels["device_uuid"] for labels, value in samples["hami_gpu_shared_count"]
                  if labels["node"] == "dcu-0" and value == 1)
    assert _value(samples, "hami_gpu_memory_limit_bytes", **dcu, device_uuid=booked) == 65520 * MIB
    assert _value(samples, "hami_gpu_memory_allocated_bytes", **dcu, device_uuid=booked, device_cores="100") \
        == 16384 * MIB
    assert _value(samples, "hami_gpu_core_allocated_ratio", **dcu, device_uuid=booked) == 50
    assert _value(samples, "hami_node_gpu_memory_allocated_ratio", **dcu, device_uuid=booked) \
        == 16384 / 65520
    assert _value(samples, "hami_node_gpu_overview", **dcu, device_uuid=booked, device_memory_limit="65520") \
        == 16384 * MIB
    # Iluvatar: vMem 8 is 8 x 256 MiB.
    assert _value(samples, "hami_gpu_memory_allocated_bytes", node="iluvatar-0") == 2048 * MIB
    assert _value(samples, "hami_gpu_core_allocated_ratio", node="iluvatar-0") == 25
    # MLU: vmemory 48 is 48 x 256 MiB of a 24576 MiB card read from the node's capacity.
    assert _value(samples, "hami_gpu_memory_limit_bytes", node="mlu-0") == 24576 * MIB
    assert _value(samples, "hami_gpu_memory_allocated_bytes", node="mlu-0") == 12288 * MIB
    for pod, uuid, memory_mib, cores in (("on-dcu", booked, 16384, 50), ("on-iluvatar", ILUVATAR_UUID, 2048, 25),
                                         ("on-mlu", MLU_UUID, 12288, 50)):
        assert _value(samples, "hami_vgpu_memory_allocated_bytes", pod=pod, device_uuid=uuid) == memory_mib * MIB
        assert _value(samples, "hami_vgpu_core_allocated_ratio", pod=pod, device_uuid=uuid) == cores

    families = {(labels["node"], labels["device_uuid"]): labels["family"]
                for labels, value in samples["hami_web_device_info"] if value == 1}
    assert families == {("gpu-0", "gpu-0-gpu0"): "NVIDIA", ("dcu-0", "DCU-0"): "DCU", ("dcu-0", "DCU-1"): "DCU",
                        ("iluvatar-0", ILUVATAR_UUID): "MR-V100", ("mlu-0", MLU_UUID): "MLU"}


def test_a_family_that_is_not_enabled_has_no_series(apiserver: LocalCluster, runtime: Runtime) -> None:
    _cluster(apiserver)
    runtime.sync.sync_now()
    samples = _scrape(runtime.app.test_client().get("/metrics").get_data(as_text=True))
    assert {labels["family"] for labels, _ in samples["hami_web_device_info"]} == {"NVIDIA", "DCU", "MLU"}
    assert all(labels["node"] != "iluvatar-0" for labels, _ in samples["hami_gpu_memory_limit_bytes"])
