"""AWS Neuron devices through ``/webhook``, ``/filter`` and ``/bind`` against the API
(docs/device-families.md#device-families).

Covers: the webhook routing a container that asks only ``aws.amazon.com/neuroncore``; a pod asking two devices bound
on a contiguous range with HAMi's annotations (only ``hami.io/aws-neuron-devices-allocated``, ``AWS_NEURON_IDS`` of
the devices, ``NEURON_ALLOCATED``, ``NEURON_ALLOC_TIME`` in nanoseconds, ``aws.amazon.com/predicate-node``), under
hami-web's own bind lock (removed once bound); a pod asking one core given core 1 of a device whose core 0 is taken,
with core ids and ``NEURON_RESOURCE_TYPE``; a restarted server rebuilding the core masks from the pods; two filters
racing on one server (threads over HTTP) for the last contiguous range: exactly one gets it; two servers each placing
a pod on the last range and binding at once: one bind refused, each device held once; eight threads filtering and
binding range pods on two nodes: no device held twice, every pod's devices one range; the devices as HAMi's per-device
metric series.
"""

from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from hami_web.core.grants import decode_pod_devices
from hami_web.core.nodelocks import BIND_LOCK
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import (
    RuntimeFactory,
    Scheduler,
    admission_response,
    annotations_of,
    bind_at_once,
    container,
    gpu_pod,
    http_scheduler,
    usage_by_gpu,
)

KEY = "hami.io/aws-neuron-devices-allocated"


def neuron_node(name: str, devices: int = 6, *, instance_type: str = "inf2.24xlarge") -> dict[str, Any]:
    """``devices`` Neuron devices of two cores each, read from the node's capacity."""
    capacity = {"aws.amazon.com/neuron": str(devices), "aws.amazon.com/neuroncore": str(2 * devices)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": instance_type}},
            "status": {"capacity": capacity, "allocatable": capacity}}


def neuron_pod(name: str, *, devices: int | None = None, cores: int | None = None,
               policy: str | None = None) -> dict[str, Any]:
    limits = {"aws.amazon.com/neuron": str(devices)} if devices else {"aws.amazon.com/neuroncore": str(cores)}
    annotations = {"hami.io/gpu-scheduler-policy": policy} if policy else None
    return gpu_pod(name, containers=[container("main", limits)], annotations=annotations)


def test_the_webhook_routes_a_core_ask(runtime: Runtime) -> None:
    pod = neuron_pod("c", cores=2)
    pod["spec"].pop("schedulerName")
    patch = json.loads(base64.b64decode(admission_response(runtime, pod)["patch"]))
    assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]


def test_a_range_pod_and_a_core_pod_get_hamis_annotations(apiserver: LocalCluster, runtime: Runtime) -> None:
    apiserver.load([neuron_node("inf"), neuron_pod("range", devices=2), neuron_pod("one", cores=1),
                    neuron_pod("other", cores=1, policy="binpack")])
    runtime.sync.sync_now()
    scheduler = Scheduler(runtime.app.test_client(), apiserver)
    assert scheduler.schedule("range", ["inf"]) == "inf"
    written = annotations_of(apiserver, "pods", "range")
    devices = decode_pod_devices(written[KEY])[0]
    indices = sorted(int(grant.uuid.rsplit("-", 1)[1]) for grant in devices)
    assert indices[1] == indices[0] + 1 and all(grant.cores == 3 for grant in devices)
    assert written["AWS_NEURON_IDS"] == ",".join(map(str, [int(g.uuid.rsplit("-", 1)[1]) for g in devices]))
    assert (written["NEURON_ALLOCATED"], written["aws.amazon.com/predicate-node"]) == ("false", "inf")
    assert int(written["NEURON_ALLOC_TIME"]) > 10**18 and "NEURON_RESOURCE_TYPE" not in written
    assert not any(key.endswith("-devices-to-allocate") for key in written)
    assert BIND_LOCK.key not in annotations_of(apiserver, "nodes", "inf")

    assert scheduler.schedule("one", ["inf"]) == "inf"
    assert scheduler.schedule("other", ["inf"]) == "inf"  # GPU binpack: the other core of the same device
    one, other = (annotations_of(apiserver, "pods", name) for name in ("one", "other"))
    (first,), (second,) = decode_pod_devices(one[KEY])[0], decode_pod_devices(other[KEY])[0]
    assert first.uuid == second.uuid and {first.cores, second.cores} == {1, 2}
    index = int(first.uuid.rsplit("-", 1)[1])
    assert {one["AWS_NEURON_IDS"], other["AWS_NEURON_IDS"]} == {str(2 * index), str(2 * index + 1)}
    assert one["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore"


def test_a_restarted_server_rebuilds_the_core_masks(apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([neuron_node("inf", 1), neuron_pod("a", cores=1), neuron_pod("b", devices=1),
                    neuron_pod("c", cores=1)])
    before = make_runtime()
    assert Scheduler(before.app.test_client(), apiserver).schedule("a", ["inf"]) == "inf"
    before.stop()

    after = make_runtime()
    assert usage_by_gpu(after) == {"inf-AWSNeuron-0": (1, 0, 1)}
    scheduler = Scheduler(after.app.test_client(), apiserver)
    assert scheduler.filter("b", ["inf"])["FailedNodes"] == {"inf": "1/1 CardInsufficientCore"}
    assert scheduler.schedule("c", ["inf"]) == "inf"
    assert decode_pod_devices(annotations_of(apiserver, "pods", "c")[KEY])[0][0].cores == 2


def test_two_concurrent_filters_never_both_get_the_last_range(apiserver: LocalCluster, runtime: Runtime,
                                                              server_url: str) -> None:
    apiserver.load([neuron_node("trn", 8, instance_type="trn1.32xlarge"), neuron_pod("busy", devices=1)])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("busy", ["trn"]) == "trn"  # one device of 0-3
    for round_ in range(5):  # 4-7 is the last aligned range of four
        pods = [neuron_pod(f"r{round_}-{i}", devices=4) for i in range(2)]
        apiserver.load(pods)
        start = threading.Barrier(2)

        def filter_(pod: dict[str, Any], start: threading.Barrier = start) -> dict[str, Any]:
            start.wait()
            answer: dict[str, Any] = requests.post(f"{server_url}/filter", json={"Pod": pod, "NodeNames": ["trn"]},
                                                   timeout=30).json()
            return answer

        with ThreadPoolExecutor(max_workers=2) as pool:
            answers = list(pool.map(filter_, [apiserver.get("pods", p["metadata"]["name"]) for p in pods]))
        assert sorted(answer["NodeNames"] for answer in answers) == [[], ["trn"]], answers
        loser = next(answer for answer in answers if not answer["NodeNames"])
        # The winner's range is booked: its four devices have no free core, three of 0-3 pass but are no range.
        assert loser["FailedNodes"] == {"trn": "3/8 AllocatedCardsInsufficientRequest, 5/8 CardInsufficientCore"}
        for pod in pods:  # neither binds: the winner's placement is dropped when the pod goes away
            requests.delete(f"{apiserver.url}/api/v1/namespaces/default/pods/{pod['metadata']['name']}", timeout=5)
        runtime.sync.sync_now()


def test_eight_threads_never_hold_a_device_twice_and_keep_ranges_whole(apiserver: LocalCluster, runtime: Runtime,
                                                                       server_url: str) -> None:
    apiserver.load([neuron_node("n0"), neuron_node("n1")])
    apiserver.load([neuron_pod(f"job-{n:02d}", devices=2) for n in range(16)])
    runtime.sync.sync_now()
    schedule = http_scheduler(server_url, apiserver, ["n0", "n1"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        placed = [node for node in pool.map(schedule, apiserver.list("pods", "default")) if node]

    held: dict[str, list[str]] = {}
    for pod in apiserver.list("pods", "default"):
        value = (pod["metadata"].get("annotations") or {}).get(KEY)
        if not value:
            continue
        indices = sorted(int(grant.uuid.rsplit("-", 1)[1]) for grant in decode_pod_devices(value)[0])
        assert indices == list(range(indices[0], indices[0] + 2)), indices
        for grant in decode_pod_devices(value)[0]:
            held.setdefault(grant.uuid, []).append(pod["metadata"]["name"])
    assert len(placed) >= 4 and sum(len(pods) for pods in held.values()) == 2 * len(placed)
    assert {uuid: pods for uuid, pods in held.items() if len(pods) > 1} == {}


def test_two_servers_racing_for_the_last_range_book_it_once(apiserver: LocalCluster,
                                                            make_runtime: RuntimeFactory) -> None:
    """Each server places its pod on the one free range of four before either binds; both binds run at once: one is
    refused (its re-check sees the other's cores), and the pods hold each device once."""
    apiserver.load([neuron_node("trn", 4, instance_type="trn1.32xlarge"), neuron_pod("p0", devices=4),
                    neuron_pod("p1", devices=4)])
    servers = [make_runtime(), make_runtime()]
    schedulers = [Scheduler(server.app.test_client(), apiserver) for server in servers]
    for index, scheduler in enumerate(schedulers):
        assert scheduler.filter(f"p{index}", ["trn"])["NodeNames"] == ["trn"]
    answers = bind_at_once(schedulers, "trn")
    assert sorted(answer["Error"] == "" for answer in answers.values()) == [False, True], answers
    holders = [pod for pod in ("p0", "p1") if annotations_of(apiserver, "pods", pod).get(KEY)
               and annotations_of(apiserver, "pods", pod).get("hami.io/bind-phase") != "failed"]
    assert len(holders) == 1
    assert BIND_LOCK.key not in annotations_of(apiserver, "nodes", "trn")


def test_neuron_devices_are_hamis_per_device_series(apiserver: LocalCluster, runtime: Runtime) -> None:
    """HAMi's per-device series for devices without memory: the core mask as the limit, a booked core's mask as the
    allocation, no memory ratio (no division by a device of 0 MiB), and the family in ``hami_web_device_info``."""
    apiserver.load([neuron_node("inf", 2), neuron_pod("one", cores=1)])
    runtime.sync.sync_now()
    assert Scheduler(runtime.app.test_client(), apiserver).schedule("one", ["inf"]) == "inf"
    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(runtime.app.test_client().get("/metrics").get_data(as_text=True)):
        for sample in family.samples:
            if "device_uuid" in sample.labels:
                samples.setdefault(sample.name, {})[sample.labels["device_uuid"]] = sample.value
    assert samples["hami_gpu_memory_limit_bytes"] == {"inf-AWSNeuron-0": 0.0, "inf-AWSNeuron-1": 0.0}
    assert sorted(samples["hami_gpu_shared_count"].values()) == [0.0, 1.0]
    assert set(samples["hami_web_device_info"]) == {"inf-AWSNeuron-0", "inf-AWSNeuron-1"}
    assert "hami_node_gpu_memory_allocated_ratio" not in samples
