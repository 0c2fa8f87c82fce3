"""Enflame DRS GCUs through ``/webhook``, ``/filter`` and ``/bind`` against the API
(docs/device-families.md#device-families, partitioned devices).

Covers: the webhook routing a slice count, or memory and cores alone, copying them to limits and requests, and
refusing HAMi's way; a slice count over 128 admitted, as HAMi admits it, with a warning naming it, and refused at
the filter with ``ModeNotFit``; a pod placed on the GCUs read from ``enflame.com/gcu-drs-capacity``, booked under
``hami.io/enflame-vgpu-devices-allocated`` only with the profile's memory and cores and the DRS plugin's annotations,
bound under hami-web's own lock (removed once bound); a restarted server rebuilding the slices each partition took from
``assigned-containers``; a namespace quota on ``limits.enflame.com/gcu-memory`` counting profiles; the GCUs as
per-device metric series.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.nodelocks import BIND_LOCK
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import RuntimeFactory, Scheduler, annotations_of, container, device_node, gpu_pod, usage_by_gpu
from .test_kunlunxin import review

ALLOCATED = "hami.io/enflame-vgpu-devices-allocated"
CAPACITY = ('{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"1","capacity":6}],'
            '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}')


def drs_node(name: str) -> dict[str, Any]:
    """Two GCUs of six slices, as the DRS device plugin annotates its node."""
    return device_node(name, {"enflame.com/gcu-drs-capacity": CAPACITY})


def drs_pod(name: str, limits: dict[str, str], *, container_name: str = "main") -> dict[str, Any]:
    return gpu_pod(name, containers=[container(container_name, limits)])


def test_the_webhook_routes_slices_or_memory_and_cores(runtime: Runtime) -> None:
    pod = drs_pod("m", {"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "40"})
    pod["spec"].pop("schedulerName")
    pod["spec"]["containers"][0]["resources"].pop("requests")  # limits only: the webhook copies them
    answer = review(runtime, pod)
    assert answer["allowed"] is True
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    requests = next(op["value"] for op in patch if op["path"] == "/spec/containers/0/resources/requests")
    assert requests == {"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "40"}  # no count added
    refused = review(runtime, drs_pod("z", {"enflame.com/gcu-core": "101"}))
    assert refused["allowed"] is False
    assert refused["status"]["message"] == "container main: enflame.com/gcu-core must be in range (0,100]"
    refused = review(runtime, drs_pod("z", {"enflame.com/drs-gcu": "0"}))
    assert refused["status"]["message"] == "container main: enflame.com/drs-gcu must be greater than 0"


def test_a_slice_count_no_profile_holds_is_admitted_with_a_warning_and_never_placed(apiserver: LocalCluster,
                                                                                   runtime: Runtime) -> None:
    """HAMi v2.10.0's DRS ``MutateAdmission`` admits any count above 0 and ``GenerateResourceRequests`` reads it up to
    an int32; ``Fit`` finds no profile of that size (``selectProfileByRequest``, TestFit_ProfileNotFound) and answers
    ``ModeNotFit``. We admit it too, saying why it cannot place, and the filter answers the same."""
    pod = drs_pod("huge", {"enflame.com/drs-gcu": "200"})
    answer = review(runtime, pod)
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        "container main: enflame.com/drs-gcu 200 asks a partition of that many slices, far more than a device is "
        "carved into (its profiles hold a handful), so no node's profile fits it and the filter answers ModeNotFit; "
        "admitted, as HAMi v2.10 admits it"]
    assert review(runtime, drs_pod("small", {"enflame.com/drs-gcu": "128"})).get("warnings") is None
    apiserver.load([drs_node("gcu"), pod])
    runtime.sync.sync_now()
    answer = Scheduler(runtime.app.test_client(), apiserver).filter("huge", ["gcu"])
    assert answer["Error"] == ""
    assert answer["FailedNodes"] == {"gcu": f"1/2 {names.MODE_NOT_FIT}"}


def test_a_drs_pod_gets_its_profile_and_the_plugins_annotations(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([drs_node("gcu"), drs_pod("infer", {"enflame.com/drs-gcu": "3"}, container_name="worker")])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("infer", ["gcu"]) == "gcu"
    written = annotations_of(apiserver, "pods", "infer")
    (uuid,) = [entry.split(",")[0] for entry in written[ALLOCATED].rstrip(":;").split(":")]
    assert written[ALLOCATED] == f"{uuid},Enflame,20480,50:;"
    assert not any(key.endswith("-devices-to-allocate") for key in written)  # HAMi writes only -allocated
    index = uuid.rsplit("-", 1)[1]
    assert (written["enflame.com/gcu-assigned"], written["enflame.com/gcu-assigned-index"],
            written["enflame.com/gcu-assigned-id"], written["enflame.com/gcu-assigned-minor"],
            written["enflame.com/gcu-request-size"]) == ("false", index, index, index, "3")
    assert json.loads(written["assigned-containers"]) == {
        "worker": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}}
    assert written[names.POD_ASSIGNED_NODE] == "gcu"
    assert BIND_LOCK.key not in annotations_of(apiserver, "nodes", "gcu")  # no device-plugin lock: ours, removed


def test_a_restarted_server_rebuilds_the_slices(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([drs_node("gcu"), drs_pod("three", {"enflame.com/drs-gcu": "3"}),
                    drs_pod("more", {"enflame.com/drs-gcu": "3"}), drs_pod("whole", {"enflame.com/drs-gcu": "6"}),
                    drs_pod("one", {"enflame.com/drs-gcu": "1"})])
    before = make_runtime()
    scheduler = Scheduler(before.app.test_client(), apiserver)
    assert scheduler.schedule("three", ["gcu"]) == "gcu"
    assert scheduler.schedule("more", ["gcu"]) == "gcu"
    held = usage_by_gpu(before)
    before.stop()

    after = make_runtime()
    assert usage_by_gpu(after) == held
    assert sorted(held.values()) == [(6, 40960, 100)] or sorted(held.values()) == [(3, 20480, 50)] * 2
    scheduler = Scheduler(after.app.test_client(), apiserver)
    if len(held) == 1:  # binpack filled one GCU with both: the other takes the whole profile, then nothing more
        assert scheduler.schedule("whole", ["gcu"]) == "gcu"
        assert scheduler.filter("one", ["gcu"])["FailedNodes"] == {"gcu": "2/2 CardTimeSlicingExhausted"}
    else:
        assert scheduler.filter("whole", ["gcu"])["FailedNodes"] == {"gcu": "2/2 CardInsufficientMemory"}


def test_a_memory_quota_counts_the_profile(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([drs_node("gcu"), drs_pod("small", {"enflame.com/gcu-memory": "5"}),
                    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "default"},
                     "spec": {"hard": {"limits.enflame.com/gcu-memory": "6000"}}}])
    runtime.sync.sync_now()
    answer = Scheduler(runtime.app.test_client(), apiserver).filter("small", ["gcu"])
    assert answer["FailedNodes"] == {"gcu": "2/2 ResourceQuotaNotFit"}  # 5 GB asks the 1g.6gb: 6,144 MiB booked


def test_the_gcus_are_per_device_series(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([drs_node("gcu")])
    runtime.sync.sync_now()
    text = runtime.app.test_client().get("/metrics").get_data(as_text=True)
    info = {sample.labels["device_uuid"]: sample.labels["family"] for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "hami_web_device_info"}
    assert info == {"gcu-enflame-drs-0": "Enflame", "gcu-enflame-drs-1": "Enflame"}
