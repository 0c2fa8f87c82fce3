"""Kunlunxin XPUs and vXPUs through ``/webhook``, ``/filter`` and ``/bind`` against the API
(docs/device-families.md#kunlunxin-xpus).

Covers: the webhook routing both families to hami-scheduler and rounding a vXPU memory up to a slice in limits and
requests; a whole-XPU pod placed on the node read from its capacity, two cards of one wing, booked under
``hami.io/kunlun-allocated`` only with ``BAIDU_COM_DEVICE_IDX``, bound under hami-web's own lock (removed once bound);
a vXPU pod booked under ``hami.io/xpu-devices-*`` with its slice and derived cores under ``hami.io/mutex.lock``; a
restarted server rebuilding both from the pods (the busy cards and the slice sizes); eight threads filtering and
binding vXPU pods of two sizes at once never mixing sizes on a card nor over-booking one; the handshake answered on
``hami.io/node-handshake-xpu``; both families as per-device metric series.
"""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.grants import decode_pod_devices
from hami_web.core.nodelocks import BIND_LOCK
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    annotations_of,
    container,
    device_node,
    gpu_pod,
    http_scheduler,
    release_lock,
    usage_by_gpu,
    wait_for,
)

XPU_KEY = "hami.io/kunlun-allocated"
VXPU_KEYS = ("hami.io/xpu-devices-to-allocate", "hami.io/xpu-devices-allocated")
VXPU_REGISTER = "hami.io/node-register-xpu"
VXPU_HANDSHAKE = "hami.io/node-handshake-xpu"
CARD_MIB = 98304


def xpu_node(name: str, cards: int = 8) -> dict[str, Any]:
    """Whole XPUs: only ``status.capacity[kunlunxin.com/xpu]``, as the Kunlunxin device plugin reports them."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"capacity": {"kunlunxin.com/xpu": str(cards)},
                       "allocatable": {"kunlunxin.com/xpu": str(cards)}}}


def vxpu_node(name: str, cards: int = 8, *, slices: int = 4) -> dict[str, Any]:
    """vXPU cards ``<name>-xpu<i>`` of 98,304 MiB registered in HAMi's JSON."""
    devices = [Device(uuid=f"{name}-xpu{i}", index=i, count=slices, memory_mib=CARD_MIB, cores=100, type="XPU-P800",
                      numa=int(i >= cards // 2), family="XPU") for i in range(cards)]
    return device_node(name, {VXPU_REGISTER: encode_register_json(devices)})


def xpu_limits(count: int) -> dict[str, str]:
    return {"kunlunxin.com/xpu": str(count)}


def vxpu_limits(count: int = 1, memory_mib: int | None = None) -> dict[str, str]:
    limits = {"kunlunxin.com/vxpu": str(count)}
    if memory_mib is not None:
        limits["kunlunxin.com/vxpu-memory"] = str(memory_mib)
    return limits


def review(runtime: Runtime, pod: dict[str, Any]) -> dict[str, Any]:
    """The webhook's answer for ``pod`` (an AdmissionReview of its CREATE)."""
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                        "namespace": "default", "object": pod}}
    answer = runtime.app.test_client().post("/webhook", data=json.dumps(body), content_type="application/json")
    response: dict[str, Any] = answer.get_json()["response"]
    return response


def test_the_webhook_routes_both_and_rounds_a_vxpu_memory(runtime: Runtime) -> None:
    pod = gpu_pod("v", containers=[container("main", vxpu_limits(1, 20000))])
    pod["spec"].pop("schedulerName")
    answer = review(runtime, pod)
    assert answer["allowed"] is True
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    written = [op for op in patch if op["path"].startswith("/spec/containers/0/resources")]
    assert any("24576" in json.dumps(op) for op in written), written  # 20000 MiB → a quarter card
    whole = gpu_pod("w", containers=[container("main", xpu_limits(2))])
    whole["spec"].pop("schedulerName")
    patch = json.loads(base64.b64decode(review(runtime, whole)["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch


def test_a_whole_xpu_pod_gets_two_cards_of_one_wing_and_hamis_annotations(apiserver: LocalCluster,
                                                                         runtime: Runtime) -> None:
    apiserver.load([xpu_node("xpu"), gpu_pod("train", xpu_limits(2))])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("train", ["xpu"]) == "xpu"
    written = annotations_of(apiserver, "pods", "train")
    assert written[XPU_KEY] == f"xpu-kunlun-0,kunlun,{CARD_MIB},100:xpu-kunlun-1,kunlun,{CARD_MIB},100:;"
    assert written["BAIDU_COM_DEVICE_IDX"] == "0,1"
    assert not any(key.endswith("-devices-to-allocate") for key in written)  # HAMi writes only -allocated
    assert written[names.POD_ASSIGNED_NODE] == "xpu"
    assert BIND_LOCK.key not in annotations_of(apiserver, "nodes", "xpu")  # no device-plugin lock: ours, removed


def test_a_vxpu_pod_gets_a_slice_under_hamis_lock(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([vxpu_node("v"), gpu_pod("infer", vxpu_limits(1, 24576))])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("infer", ["v"]) == "v"
    written = annotations_of(apiserver, "pods", "infer")
    (uuid,) = [entry.split(",")[0] for entry in written[VXPU_KEYS[1]].rstrip(":;").split(":")]
    assert written[VXPU_KEYS[0]] == written[VXPU_KEYS[1]] == f"{uuid},XPU,24576,25:;"
    assert names.NODE_LOCK in annotations_of(apiserver, "nodes", "v")  # HAMi's, for the device plugin to release


def test_a_restarted_server_rebuilds_both_families(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([xpu_node("xpu", 2), vxpu_node("v", 1), gpu_pod("whole", xpu_limits(1)),
                    gpu_pod("quarter", vxpu_limits(1, 24576)), gpu_pod("another", xpu_limits(2)),
                    gpu_pod("half", vxpu_limits(1, 49152))])
    before = make_runtime()
    scheduler = Scheduler(before.app.test_client(), apiserver)
    assert scheduler.schedule("whole", ["xpu"]) == "xpu"
    assert scheduler.schedule("quarter", ["v"]) == "v"
    release_lock(before.kube, "quarter", "v")
    before.stop()

    after = make_runtime()
    assert usage_by_gpu(after) == {"xpu-kunlun-0": (1, CARD_MIB, 100), "v-xpu0": (1, 24576, 25)}
    scheduler = Scheduler(after.app.test_client(), apiserver)
    assert scheduler.filter("another", ["xpu"])["FailedNodes"] == {
        "xpu": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"}
    assert scheduler.filter("half", ["v"])["FailedNodes"] == {"v": "1/1 CardSliceSizeMismatch"}



def test_concurrent_filters_never_mix_vxpu_sizes_on_a_card(apiserver: LocalCluster, runtime: Runtime,
                                                           server_url: str) -> None:
    apiserver.load([vxpu_node("v0", 4), vxpu_node("v1", 4)])
    apiserver.load([gpu_pod(f"job-{n:02d}", vxpu_limits(1, 24576 if n % 2 else 49152)) for n in range(40)])
    runtime.sync.sync_now()
    schedule = http_scheduler(server_url, apiserver, ["v0", "v1"], release=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        placed = [node for node in pool.map(schedule, apiserver.list("pods", "default")) if node]

    sizes: dict[str, list[int]] = {}
    for pod in apiserver.list("pods", "default"):
        value = (pod["metadata"].get("annotations") or {}).get(VXPU_KEYS[1])
        if value:
            for grant in decode_pod_devices(value)[0]:
                sizes.setdefault(grant.uuid, []).append(grant.memory_mib)
    assert sum(len(held) for held in sizes.values()) == len(placed) > 8
    mixed = {uuid: held for uuid, held in sizes.items() if len(set(held)) > 1}
    over = {uuid: held for uuid, held in sizes.items() if sum(held) > CARD_MIB}
    assert (mixed, over) == ({}, {})
    # Every card was used, and the refused pods had no card of their size with room left.
    assert len(sizes) == 8
    assert usage_by_gpu(runtime) == {uuid: (len(held), sum(held), sum(held) * 100 // CARD_MIB)
                                     for uuid, held in sizes.items()}


def test_the_vxpu_handshake_is_answered_on_its_key(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    node = vxpu_node("v", 1)
    node["metadata"]["annotations"][VXPU_HANDSHAKE] = "Reported_2026.08.21 06:20:39"
    apiserver.load([node])
    make_runtime()
    wait_for(lambda: annotations_of(apiserver, "nodes", "v").get(VXPU_HANDSHAKE, "").startswith("Requesting_"),
             what="the vXPU handshake to be answered")


def test_both_families_are_per_device_series(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([xpu_node("xpu", 2), vxpu_node("v", 1)])
    runtime.sync.sync_now()
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    info = {sample.labels["device_uuid"]: sample.labels["family"] for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "hami_web_device_info"}
    assert info == {"xpu-kunlun-0": "kunlun", "xpu-kunlun-1": "kunlun", "v-xpu0": "XPU"}
