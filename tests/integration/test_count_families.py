"""Biren, Enflame GCU, Metax GPU and Moore Threads through ``/filter`` and ``/bind`` against the API
(docs/device-families.md#device-families).

Covers: one node carrying Biren cards (register annotation), Enflame GCUs, Metax and Moore Threads GPUs (its capacity)
and NVIDIA GPUs; a pod of each family bound there with exactly the annotations its device plugin reads (HAMi v2.10's
``PatchAnnotations``: ``hami.io/Biren-devices-…``, ``hami.io/enflame-gcu-devices-…``,
``hami.io/metax-gpu-devices-…``; Moore Threads' ``-allocated`` key alone with ``mthreads.com/gpu-index``,
``predicate-node`` and ``predicate-time``), Biren's bind under ``hami.io/mutex.lock`` (left for its device plugin) and
the others' under hami-web's own bind lock (removed once bound); a pod asking a GCU and a Metax GPU getting both, and
one asking a Metax GPU and a Biren card the node no longer has getting neither, the reason naming Biren and nothing
booked; a restarted server rebuilding the usage from the pods' annotations so the last GCU is not promised twice;
every card in HAMi's per-device metrics with its family's type.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.nodelocks import BIND_LOCK
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import RuntimeFactory, Scheduler, annotations_of, container, gpu_pod, gpus, release_lock

NODE = "mixed"


def _mixed_node() -> dict[str, Any]:
    """2 NVIDIA A40s, 1 Biren card (two shares), 2 Enflame GCUs, 2 Metax GPUs."""
    biren = [Device(uuid="biren-0", index=0, count=2, memory_mib=32768, cores=0, type="BR166", family="Biren")]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "annotations": {
        names.NODE_REGISTER: encode_register_json(gpus(NODE, 2)),
        names.NODE_HANDSHAKE: "Requesting_2099-01-01 00:00:00",
        "hami.io/node-biren-register": encode_register_json(biren),
        "hami.io/node-handshake-biren": "Requesting_2099-01-01 00:00:00"}},
        "status": {"capacity": {"enflame.com/gcu": "2", "metax-tech.com/gpu": "2", "mthreads.com/sgpu-core": "32",
                                "mthreads.com/sgpu-memory": "192"},
                   "allocatable": {"nvidia.com/gpu": "2", "birentech.com/gpu": "1", "enflame.com/gcu": "2",
                                   "metax-tech.com/gpu": "2", "cpu": "8"}}}


def _pod(name: str, **counts: str) -> dict[str, Any]:
    resources = {"biren": "birentech.com/gpu", "gcu": "enflame.com/gcu", "metax": "metax-tech.com/gpu",
                 "mthreads": "mthreads.com/vgpu", "mthreads_memory": "mthreads.com/sgpu-memory"}
    return gpu_pod(name, containers=[container("main", {resources[key]: value for key, value in counts.items()})])


def _device_keys(apiserver: LocalCluster, pod: str) -> dict[str, str]:
    return {key: value for key, value in annotations_of(apiserver, "pods", pod).items() if "-devices-" in key}


def _runtime(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> Runtime:
    apiserver.load([_mixed_node()])
    return make_runtime()


def test_a_pod_of_each_family_gets_exactly_its_device_plugins_annotations(apiserver: LocalCluster,
                                                                          make_runtime: RuntimeFactory) -> None:
    runtime = _runtime(apiserver, make_runtime)
    apiserver.load([_pod("b", biren="1"), _pod("g", gcu="1"), _pod("m", metax="1")])
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    assert scheduler.schedule("b", [NODE]) == NODE
    assert _device_keys(apiserver, "b") == dict.fromkeys(
        ("hami.io/Biren-devices-to-allocate", "hami.io/Biren-devices-allocated"), "biren-0,Biren,0,0:;")
    assert annotations_of(apiserver, "nodes", NODE)[names.NODE_LOCK].endswith(",default,b")  # for the plugin
    release_lock(runtime.kube, "b", NODE)

    assert scheduler.schedule("g", [NODE]) == NODE
    assert _device_keys(apiserver, "g") == dict.fromkeys(
        ("hami.io/enflame-gcu-devices-to-allocate", "hami.io/enflame-gcu-devices-allocated"),
        f"{NODE}-GCU-0,GCU,100,100:;")
    assert scheduler.schedule("m", [NODE]) == NODE
    assert _device_keys(apiserver, "m") == dict.fromkeys(
        ("hami.io/metax-gpu-devices-to-allocate", "hami.io/metax-gpu-devices-allocated"),
        f"{NODE}-metax-0,Metax-GPU,65536,100:;")
    node_annotations = annotations_of(apiserver, "nodes", NODE)
    assert BIND_LOCK.key not in node_annotations and names.NODE_LOCK not in node_annotations

    apiserver.load([_pod("t", mthreads="1", mthreads_memory="8")])
    assert scheduler.schedule("t", [NODE]) == NODE
    written = annotations_of(apiserver, "pods", "t")
    assert _device_keys(apiserver, "t") == {
        "hami.io/mthreads-vgpu-devices-allocated": f"{NODE}-mthreads-0,Mthreads,4096,0:;"}
    assert (written["mthreads.com/gpu-index"], written["mthreads.com/predicate-node"]) == ("0", NODE)
    assert int(written["mthreads.com/predicate-time"]) > 10**18  # nanoseconds

    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(runtime.app.test_client().get("/metrics").get_data(as_text=True)):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    types = {labels["device_uuid"]: labels["device_type"] for labels, _ in samples["hami_gpu_memory_limit_bytes"]}
    assert {uuid: types[uuid] for uuid in ("biren-0", f"{NODE}-GCU-1", f"{NODE}-metax-1")} == {
        "biren-0": "Biren", f"{NODE}-GCU-1": "GCU", f"{NODE}-metax-1": "Metax-GPU"}


def test_a_pod_of_two_families_gets_both_or_neither(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    runtime = _runtime(apiserver, make_runtime)
    apiserver.load([_pod("both", gcu="1", metax="1"), _pod("hog", biren="1"), _pod("hog2", biren="1"),
                    _pod("neither", metax="1", biren="1")])
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    assert scheduler.schedule("both", [NODE]) == NODE
    assert set(_device_keys(apiserver, "both")) == {
        "hami.io/enflame-gcu-devices-to-allocate", "hami.io/enflame-gcu-devices-allocated",
        "hami.io/metax-gpu-devices-to-allocate", "hami.io/metax-gpu-devices-allocated"}
    for hog in ("hog", "hog2"):  # the Biren card's two shares
        assert scheduler.schedule(hog, [NODE]) == NODE
        release_lock(runtime.kube, hog, NODE)

    answer = scheduler.filter("neither", [NODE])
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"][NODE] == "Biren: 1/1 CardTimeSlicingExhausted"
    assert runtime.cache.placed(scheduler.pod("neither")["metadata"]["uid"]) is None


def test_a_restarted_server_rebuilds_the_usage_and_never_promises_the_last_gcu_twice(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    runtime = _runtime(apiserver, make_runtime)
    apiserver.load([_pod("g1", gcu="1"), _pod("g2", gcu="1"), _pod("g3", gcu="1")])
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.schedule("g1", [NODE]) == NODE
    assert scheduler.schedule("g2", [NODE]) == NODE

    restarted = make_runtime()  # its cache is built from the API alone
    answer = Scheduler(restarted.app.test_client(), apiserver).filter("g3", [NODE])
    assert answer["NodeNames"] == [] and answer["FailedNodes"][NODE] == "GCU: 2/2 CardTimeSlicingExhausted"
