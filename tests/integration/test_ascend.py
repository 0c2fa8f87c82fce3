"""Ascend NPUs through ``/filter`` and ``/bind`` against the API (docs/device-families.md#ascend-npus), Ascend enabled.

Covers: an 8-NPU Ascend 910B3 node with two HCCS groups taking a 4-NPU job inside one group (the group with an NPU
taken is passed over), bound with ``hami.io/Ascend910B3-devices-to-allocate``/``-allocated``, the
``huawei.com/Ascend910B3`` RuntimeInfo (decoded back: UUIDs, memory, no template for whole NPUs) and
``predicate-time`` (the bind's clock, Unix seconds), and no NVIDIA key; a template pod (``temp`` = its template); a
soft-split pod (``huawei.com/vnpu-mode: hami-core``) refused ``ModeNotFit`` where the node has no ``hami-vnpu-core``
and bound with its cores (no template) where it has ``"true"``; a 910C pod taking a whole module pair past a module
with one NPU used; a restarted server rebuilding the NPUs' usage from the pods' ``-allocated`` keys and refusing what
no longer fits; the handshake written to ``hami.io/node-handshake-<CW>``; an Ascend ask that is not ours while Ascend
is disabled; every NPU a ``hami_gpu_*`` series (HAMi's per-device metrics) with its family in ``hami_web_device_info``
and a soft-split pod's cores and memory in ``hami_vgpu_*``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    FakeClock,
    RuntimeFactory,
    Scheduler,
    annotations_of,
    container,
    device_node,
    gpu_pod,
    release_lock,
    usage_by_gpu,
    wait_for,
)

NOW = datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC).timestamp()
B3 = "Ascend910B3"
C = "Ascend910C"


def npus(node: str, cw: str, how_many: int = 8, *, memory_mib: int = 65536, cores: int = 20,
         networks: bool = True) -> list[Device]:
    """``how_many`` NPUs ``<node>-<i>`` as HAMi's Ascend device plugin registers them (NetworkID: index ≤ 3 → 0, else
    1; 910C always 0)."""
    return [Device(uuid=f"{node}-{i}", index=i, count=4, memory_mib=memory_mib, cores=cores, type=cw, family=cw,
                   network=(0 if cw == C or i <= 3 else 1) if networks else -1) for i in range(how_many)]


def npu_node(name: str, cw: str, how_many: int = 8, *, soft_split: str | None = None) -> dict[str, Any]:
    annotations = {} if soft_split is None else {"hami-vnpu-core": soft_split}
    return device_node(name, {f"hami.io/node-register-{cw}": encode_register_json(npus(name, cw, how_many))},
                       annotations=annotations)


def npu_limits(cw: str, count: int, memory_mib: int | None = None, cores: int | None = None) -> dict[str, str]:
    limits = {f"huawei.com/{cw}": str(count)}
    if memory_mib is not None:
        limits[f"huawei.com/{cw}-memory"] = str(memory_mib)
    if cores is not None:
        limits[f"huawei.com/{cw}-core"] = str(cores)
    return limits


def runtime_info(apiserver: LocalCluster, pod: str, cw: str = B3) -> list[dict[str, Any]]:
    info: list[dict[str, Any]] = json.loads(annotations_of(apiserver, "pods", pod)[f"huawei.com/{cw}"])
    return info


@pytest.fixture
def ascend(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> Runtime:
    """``b3`` (8 × 910B3, groups 0-3 and 4-7), ``b3-soft`` (the same with ``hami-vnpu-core: "true"``), ``c`` (4 ×
    910C: modules 0-1 and 2-3)."""
    apiserver.load([npu_node("b3", B3), npu_node("b3-soft", B3, soft_split="true"), npu_node("c", C, 4)])
    return make_runtime(clock=FakeClock(NOW), enable_ascend=True)


def test_a_four_npu_job_stays_inside_one_hccs_group(ascend: Runtime, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("one", npu_limits(B3, 1, 65536)), gpu_pod("job", npu_limits(B3, 4, 65536))])
    scheduler = Scheduler(ascend.app.test_client(), apiserver)
    assert scheduler.schedule("one", ["b3"]) == "b3"
    release_lock(ascend.kube, "one", "b3")
    assert scheduler.schedule("job", ["b3"]) == "b3"

    written = annotations_of(apiserver, "pods", "job")
    devices = "".join(f"b3-{i},{B3},65536,0:" for i in range(4, 8)) + ";"
    assert written[f"hami.io/{B3}-devices-to-allocate"] == written[f"hami.io/{B3}-devices-allocated"] == devices
    assert runtime_info(apiserver, "job") == [{"UUID": f"b3-{i}", "memory": 65536} for i in range(4, 8)]
    assert written["predicate-time"] == str(int(NOW))
    assert written[names.POD_ASSIGNED_NODE] == "b3"
    assert names.POD_DEVICES_ALLOCATED not in written  # no NVIDIA key


def test_a_template_pod_names_its_template(ascend: Runtime, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("small", npu_limits(B3, 1, 16384))])
    assert Scheduler(ascend.app.test_client(), apiserver).schedule("small", ["b3"]) == "b3"
    assert runtime_info(apiserver, "small") == [{"UUID": "b3-0", "temp": "vir05_1c_16g", "memory": 16384}]


def test_soft_split_needs_a_node_that_allows_it(ascend: Runtime, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("soft", npu_limits(B3, 1, 10000, 30), annotations={"huawei.com/vnpu-mode": "hami-core"})])
    scheduler = Scheduler(ascend.app.test_client(), apiserver)
    assert scheduler.filter("soft", ["b3"])["FailedNodes"] == {"b3": "8/8 ModeNotFit"}
    assert scheduler.schedule("soft", ["b3", "b3-soft"]) == "b3-soft"
    assert runtime_info(apiserver, "soft") == [{"UUID": "b3-soft-0", "memory": 10000, "core": 30}]
    assert annotations_of(apiserver, "pods", "soft")[f"hami.io/{B3}-devices-allocated"] == f"b3-soft-0,{B3},10000,30:;"


def test_a_910c_pod_takes_a_whole_module(ascend: Runtime, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("single", npu_limits(C, 1, 65536)), gpu_pod("pair", npu_limits(C, 2, 65536))])
    scheduler = Scheduler(ascend.app.test_client(), apiserver)
    assert scheduler.schedule("single", ["c"]) == "c"
    release_lock(ascend.kube, "single", "c")
    assert scheduler.schedule("pair", ["c"]) == "c"
    assert [entry["UUID"] for entry in runtime_info(apiserver, "pair", C)] == ["c-2", "c-3"]


def test_a_restarted_server_rebuilds_npu_usage(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([npu_node("b3", B3, 2), gpu_pod("first", npu_limits(B3, 2, 65536)),
                    gpu_pod("later", npu_limits(B3, 1, 16384))])
    before = make_runtime(enable_ascend=True)
    assert Scheduler(before.app.test_client(), apiserver).schedule("first", ["b3"]) == "b3"
    release_lock(before.kube, "first", "b3")
    before.stop()

    after = make_runtime(enable_ascend=True)
    assert usage_by_gpu(after) == {"b3-0": (1, 65536, 0), "b3-1": (1, 65536, 0)}
    assert Scheduler(after.app.test_client(), apiserver).filter("later", ["b3"])["FailedNodes"] == {
        "b3": "2/2 CardInsufficientMemory"}


def test_the_handshake_is_answered_on_the_chips_key(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    handshake = f"hami.io/node-handshake-{B3}"
    node = npu_node("b3", B3)
    node["metadata"]["annotations"][handshake] = "Reported_2026.08.21 06:20:39"
    apiserver.load([node])
    make_runtime(clock=FakeClock(NOW), enable_ascend=True)
    wait_for(lambda: annotations_of(apiserver, "nodes", "b3").get(handshake) == "Requesting_2026-08-21 06:20:39",
             what="the Ascend910B3 handshake to be written")


def test_an_ascend_ask_is_not_ours_while_ascend_is_disabled(apiserver: LocalCluster,
                                                            make_runtime: RuntimeFactory) -> None:
    apiserver.load([npu_node("b3", B3), gpu_pod("npu", containers=[container("main", npu_limits(B3, 1))])])
    runtime = make_runtime()
    answer = Scheduler(runtime.app.test_client(), apiserver).filter("npu", ["b3"])
    assert answer["Error"] == "" and answer["NodeNames"] == ["b3"]  # no device asked: every node passes
    assert usage_by_gpu(runtime) == {}


def test_every_npu_is_a_per_device_series(ascend: Runtime, apiserver: LocalCluster) -> None:
    apiserver.load([gpu_pod("soft", npu_limits(B3, 1, 10000, 30), annotations={"huawei.com/vnpu-mode": "hami-core"})])
    assert Scheduler(ascend.app.test_client(), apiserver).schedule("soft", ["b3-soft"]) == "b3-soft"
    text = ascend.app.test_client().get("/metrics").get_data(as_text=True)
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    info = {labels["device_uuid"]: labels["family"] for labels, _ in samples["hami_web_device_info"]}
    assert info == {**{f"b3-{i}": B3 for i in range(8)}, **{f"b3-soft-{i}": B3 for i in range(8)},
                    **{f"c-{i}": C for i in range(4)}}
    limits = {labels["device_uuid"]: value for labels, value in samples["hami_gpu_memory_limit_bytes"]}
    assert limits["c-3"] == 65536 * 1024 * 1024
    held = [(labels["device_uuid"], value) for labels, value in samples["hami_vgpu_core_allocated_ratio"]
            if labels["pod"] == "soft"]
    assert held == [("b3-soft-0", 30)]
    memory = [value for labels, value in samples["hami_vgpu_memory_allocated_bytes"] if labels["pod"] == "soft"]
    assert memory == [10000 * 1024 * 1024]
