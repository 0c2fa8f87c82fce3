"""Metax sGPUs through ``/webhook``, ``/filter`` and ``/bind`` against the API (docs/device-families.md#metax-sgpus).

Covers: the webhook routing an sGPU pod and writing the default QoS (``best-effort``), refusing an unknown QoS or app
class and an app-class pod asking several cards, in HAMi's words; a pod placed on the cards of
``metax-tech.com/node-gpu-devices`` in GiB, booked under both ``hami.io/metax-sgpu-devices-*`` keys with Metax's
allocation JSON and predicate time, under ``hami.io/mutex.lock``; the QoS state HAMi's scheduler keeps in memory,
here rebuilt from the pods: a restarted server and a second server over the same API both refuse a pod of another QoS
on the busy card and place one of the same QoS beside it; online and offline pods kept apart from ordinary ones.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import RuntimeFactory, Scheduler, annotations_of, container, device_node, gpu_pod, release_lock
from .test_kunlunxin import review

QOS = "metax-tech.com/sgpu-qos-policy"
CLASS = "metax-tech.com/sgpu-app-class"


def sgpu_node(name: str, cards: int = 1, *, qos: str = "best-effort") -> dict[str, Any]:
    """Cards of 64 GiB and 16 shares, as Metax's sGPU device plugin lists them."""
    listed = [{"uuid": f"{name}-card-{i}", "totalDevCount": 16, "totalCompute": 100, "totalVRam": 65536,
               "numa": 0, "healthy": True, "qosPolicy": qos, "linkZone": 0} for i in range(cards)]
    return device_node(name, {"metax-tech.com/node-gpu-devices": json.dumps(listed)})


def sgpu_pod(name: str, memory: str = "4", cores: str = "30", **annotations: str) -> dict[str, Any]:
    limits = {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": memory, "metax-tech.com/vcore": cores}
    return gpu_pod(name, containers=[container("main", limits)],
                   annotations={{"qos": QOS, "app_class": CLASS}[key]: value for key, value in annotations.items()})


def test_the_webhook_writes_the_default_qos_and_refuses_hamis_way(runtime: Runtime) -> None:
    pod = sgpu_pod("p")
    pod["spec"].pop("schedulerName")
    answer = review(runtime, pod)
    assert answer["allowed"] is True
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    assert any(op["path"].startswith("/metadata/annotations") and "best-effort" in json.dumps(op) for op in patch)
    refused = review(runtime, sgpu_pod("q", qos="gold"))
    assert (refused["allowed"], refused["status"]["message"]) == (
        False, "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]")
    refused = review(runtime, sgpu_pod("c", app_class="batch"))
    assert refused["status"]["message"] == "metax-tech.com/sgpu-app-class must be set one of [online, offline]"
    several = gpu_pod("s", containers=[container("main", {"metax-tech.com/sgpu": "2"})],
                      annotations={CLASS: "online"})
    assert review(runtime, several)["status"]["message"] == "app-class pod must request single device"


def test_an_sgpu_pod_gets_its_slice_and_metax_annotations(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([sgpu_node("mx"), sgpu_pod("infer", qos="fixed-share")])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("infer", ["mx"]) == "mx"
    written = annotations_of(apiserver, "pods", "infer")
    assert written["hami.io/metax-sgpu-devices-allocated"] == written["hami.io/metax-sgpu-devices-to-allocate"] == \
        "mx-card-0,Metax-SGPU,4096,30:;"
    assert json.loads(written["metax-tech.com/gpu-devices-allocated"]) == [
        [{"uuid": "mx-card-0", "compute": 30, "vRam": 4096}]]
    assert int(written["metax-tech.com/predicate-time"]) > 10**18
    assert names.NODE_LOCK in annotations_of(apiserver, "nodes", "mx")  # HAMi's, for the device plugin to release


def test_the_qos_state_is_rebuilt_after_a_restart_and_shared_by_two_servers(apiserver: LocalCluster,
                                                                           make_runtime: RuntimeFactory) -> None:
    apiserver.load([sgpu_node("mx"), sgpu_pod("fixed", qos="fixed-share"), sgpu_pod("burst", qos="burst-share"),
                    sgpu_pod("again", qos="fixed-share"), sgpu_pod("other", qos="burst-share")])
    first = make_runtime()
    assert Scheduler(first.app.test_client(), apiserver).schedule("fixed", ["mx"]) == "mx"
    release_lock(first.kube, "fixed", "mx")
    # The card still reports best-effort (its plugin has not switched yet): the booking's QoS is what counts.
    second = make_runtime()  # a second server over the same API, and what a restarted one sees
    for server in (first, second):
        server.sync.sync_now()
        answer = Scheduler(server.app.test_client(), apiserver).filter("burst", ["mx"])
        assert answer["FailedNodes"] == {"mx": "1/1 CardQosPolicyMismatch"}
    assert Scheduler(second.app.test_client(), apiserver).schedule("again", ["mx"]) == "mx"
    release_lock(second.kube, "again", "mx")
    first.stop()
    restarted = make_runtime()
    answer = Scheduler(restarted.app.test_client(), apiserver).filter("other", ["mx"])
    assert answer["FailedNodes"] == {"mx": "1/1 CardQosPolicyMismatch"}


def test_app_class_pods_and_ordinary_pods_never_share_a_card(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([sgpu_node("mx"), sgpu_pod("online", app_class="online"), sgpu_pod("plain"),
                    sgpu_pod("offline", app_class="offline", qos="best-effort")])
    runtime.sync.sync_now()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.schedule("online", ["mx"]) == "mx"
    release_lock(runtime.kube, "online", "mx")
    runtime.sync.sync_now()
    assert scheduler.filter("plain", ["mx"])["FailedNodes"] == {"mx": "1/1 CardAppClassMismatch"}
    assert scheduler.filter("offline", ["mx"])["FailedNodes"] == {"mx": "1/1 CardAppClassMismatch"}
    assert annotations_of(apiserver, "pods", "online")["hami.io/metax-sgpu-devices-allocated"] == \
        "mx-card-0,Metax-SGPU,4096,0:;"  # an online pod books no cores


def test_a_memory_quota_counts_gib(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([sgpu_node("mx"), sgpu_pod("big", memory="8"),
                    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "default"},
                     "spec": {"hard": {"limits.metax-tech.com/vmemory": "6"}}}])
    runtime.sync.sync_now()
    answer = Scheduler(runtime.app.test_client(), apiserver).filter("big", ["mx"])
    assert answer["FailedNodes"] == {"mx": "1/1 ResourceQuotaNotFit"}  # 8 GiB asked, 6 GiB left
