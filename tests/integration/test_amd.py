"""AMD GPUs through ``/webhook``, ``/filter`` and ``/bind`` against the API (docs/device-families.md#device-families).

Covers: the webhook routing a container that asks only ``amd.com/gpumem`` (no count added) and refusing a cores
percentage of 0 beside a count; a pod booked with its compute units under ``hami.io/amd-devices-to-allocate`` and
``-allocated``, the product type in the type field, bound under ``hami.io/mutex.lock`` (left for the device plugin);
a restarted server rebuilding the compute units from the pods so a GPU's last units are not promised twice; the node's
capacity of ``amd.com/gpu`` falling to 0 taking the family away (its health, in place of a handshake) while the
node's NVIDIA GPUs stay, and coming back with it; both GPUs as HAMi's per-device metric series with their product
type; a namespace quota on ``amd.com/gpucores`` admitting on the percentage with a warning and filtering on the compute
units booked, so what the filter places the bind lets stand.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    admission_response,
    annotations_of,
    container,
    gpu_pod,
    gpus,
    release_lock,
    usage_by_gpu,
    wait_for,
)

KEYS = ("hami.io/amd-devices-to-allocate", "hami.io/amd-devices-allocated")
PRODUCT = "AMD_Instinct_MI300X"


def amd_node(name: str, *, capacity: str = "2", nvidia: bool = False) -> dict[str, Any]:
    """Two MI300X of 304 compute units and 192 GiB registered in HAMi's JSON, ``amd.com/gpu`` in the capacity."""
    devices = [Device(uuid=f"{name}-amd-{i}", index=i, count=4, memory_mib=196608, cores=304, type=PRODUCT,
                      family="AMD") for i in range(2)]
    annotations = {"hami.io/node-amd-register": encode_register_json(devices)}
    allocatable = {"amd.com/gpu": capacity, "cpu": "8"}
    if nvidia:
        annotations |= {names.NODE_REGISTER: encode_register_json(gpus(name, 2)),
                        names.NODE_HANDSHAKE: "Requesting_2099-01-01 00:00:00"}
        allocatable["nvidia.com/gpu"] = "2"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations},
            "status": {"capacity": {"amd.com/gpu": capacity}, "allocatable": allocatable}}


def amd_limits(count: int | None = 1, *, memory_mib: int | None = None, percent: int | None = None) -> dict[str, str]:
    limits = {} if count is None else {"amd.com/gpu": str(count)}
    if memory_mib is not None:
        limits["amd.com/gpumem"] = str(memory_mib)
    if percent is not None:
        limits["amd.com/gpucores"] = str(percent)
    return limits


def test_the_webhook_routes_memory_alone_and_refuses_a_zero_percentage(runtime: Runtime) -> None:
    memory_only = gpu_pod("m", containers=[container("main", amd_limits(None, memory_mib=4096))])
    memory_only["spec"].pop("schedulerName")
    answer = admission_response(runtime, memory_only)
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]  # no count added
    zero = gpu_pod("z", containers=[container("main", amd_limits(1, percent=0))])
    refused = admission_response(runtime, zero)
    assert refused["allowed"] is False
    assert "amd.com/gpucores must be an integer percentage between 1 and 100" in refused["status"]["message"]


def test_a_pod_books_compute_units_with_the_product_type_under_hamis_lock(apiserver: LocalCluster,
                                                                         runtime: Runtime) -> None:
    apiserver.load([amd_node("amd"), gpu_pod("train", amd_limits(1, memory_mib=65536, percent=25))])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("train", ["amd"]) == "amd"
    written = annotations_of(apiserver, "pods", "train")
    (uuid,) = [entry.split(",")[0] for entry in written[KEYS[1]].rstrip(":;").split(":")]
    assert written[KEYS[0]] == written[KEYS[1]] == f"{uuid},{PRODUCT},65536,76:;"  # 25 % of 304 units
    assert names.NODE_LOCK in annotations_of(apiserver, "nodes", "amd")  # HAMi's, for the device plugin to release


def test_a_restarted_server_rebuilds_the_compute_units(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([amd_node("amd", capacity="1"), gpu_pod("a", amd_limits(2, memory_mib=1024, percent=60)),
                    gpu_pod("b", amd_limits(1, memory_mib=1024, percent=50)),
                    gpu_pod("c", amd_limits(1, memory_mib=1024, percent=40))])
    before = make_runtime()
    assert Scheduler(before.app.test_client(), apiserver).schedule("a", ["amd"]) == "amd"
    release_lock(before.kube, "a", "amd")
    before.stop()

    after = make_runtime()
    assert usage_by_gpu(after) == {"amd-amd-0": (1, 1024, 182), "amd-amd-1": (1, 1024, 182)}
    scheduler = Scheduler(after.app.test_client(), apiserver)
    assert scheduler.filter("b", ["amd"])["FailedNodes"] == {"amd": "2/2 CardInsufficientCore"}  # 152 > 122 left
    assert scheduler.schedule("c", ["amd"]) == "amd"  # 40 % = 121 units fit


def test_a_cores_quota_admits_on_the_percentage_and_places_on_the_units(apiserver: LocalCluster,
                                                                       runtime: Runtime) -> None:
    """HAMi v2.10.0's webhook (``fitResourceQuota``) counts ``Coresreq × Nums`` (100 here) against a limit its AMD
    ``Fit`` never checks, while the GPU books 304 compute units: admitted with a warning, then ``ResourceQuotaNotFit``
    on both GPUs under a limit of 200; under 304 placed and bound, the namespace's use the 304 units booked."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "amd", "namespace": "team-a"},
             "spec": {"hard": {"limits.amd.com/gpucores": "200"}}}
    job = gpu_pod("job", amd_limits(1), namespace="team-a")
    apiserver.load([amd_node("amd"), quota])
    wait_for(lambda: runtime.cache.namespace_quota("team-a").limits == {"amd.com/gpucores": 200}, what="the quota")
    answer = admission_response(runtime, job, "team-a")
    assert answer["allowed"] is True
    (warning,) = answer["warnings"]
    assert warning.startswith("namespace team-a limits amd.com/gpucores to 200: admission counts 100 as asked")
    apiserver.load([job])
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.filter("job", ["amd"], "team-a")["FailedNodes"] == {"amd": f"2/2 {names.RESOURCE_QUOTA_NOT_FIT}"}

    stored = apiserver.get("resourcequotas", "amd", "team-a") or {}
    stored["spec"]["hard"]["limits.amd.com/gpucores"] = "304"
    response = requests.put(f"{apiserver.url}/api/v1/namespaces/team-a/resourcequotas/amd", json=stored, timeout=5)
    assert response.status_code == 200, response.text
    wait_for(lambda: runtime.cache.namespace_quota("team-a").limits == {"amd.com/gpucores": 304}, what="the new limit")
    assert scheduler.schedule("job", ["amd"], "team-a") == "amd"
    assert runtime.cache.namespace_quota("team-a").used.get("amd.com/gpucores") == 304


def test_no_capacity_takes_the_family_away_and_the_gpus_stay(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([amd_node("mixed", capacity="0", nvidia=True), gpu_pod("amd-job", amd_limits(1)),
                    gpu_pod("gpu-job", {"nvidia.com/gpu": "1"})])
    runtime.sync.sync_now()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.filter("amd-job", ["mixed"])["FailedNodes"] == {"mixed": "AMD: 1/0 NodeInsufficientDevice"}
    assert scheduler.schedule("gpu-job", ["mixed"]) == "mixed"

    response = requests.patch(f"{apiserver.url}/api/v1/nodes/mixed/status", timeout=5,  # what the kubelet does
                              data=json.dumps({"status": {"capacity": {"amd.com/gpu": "2"}}}),
                              headers={"Content-Type": "application/merge-patch+json"})
    assert response.status_code == 200, response.text
    wait_for(lambda: scheduler.filter("amd-job", ["mixed"])["NodeNames"] == ["mixed"],
             what="the AMD GPUs to come back with the capacity")


def test_amd_gpus_are_hamis_per_device_series_with_their_product_type(apiserver: LocalCluster,
                                                                     runtime: Runtime) -> None:
    apiserver.load([amd_node("amd")])
    runtime.sync.sync_now()
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    types = {sample.labels["device_uuid"]: sample.labels["device_type"]
             for family in text_string_to_metric_families(text) for sample in family.samples
             if sample.name == "hami_gpu_memory_limit_bytes"}
    assert types == {"amd-amd-0": PRODUCT, "amd-amd-1": PRODUCT}
