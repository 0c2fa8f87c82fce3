"""Two hami-web servers racing over GPUs and DCUs: no device of any family is ever promised twice
(docs/deployment.md#high-availability-active-and-standby, docs/device-families.md#device-families).

Covers: the race of ``test_two_servers`` (two runtimes, two uncoordinated kube-scheduler loops, one API server, a
device-plugin stand-in releasing node locks) over a GPU node, a Hygon DCU node and a mixed node (GPU and DCUs),
with a stream of GPU pods, DCU pods, pods asking for a GPU and a DCU in one container and pods asking for each in
a different container. At the end, from the pods as stored in the API server: no device's task slots, memory or
cores are over-booked, summed per node and device over every family's ``…-devices-allocated`` key, and no
exclusive device is shared; each grant sits on a device of its own family on the pod's node; every bound pod holds
exactly what each of its containers asks of each family, in that family's keys only; every unbound pod holds
nothing; every refused bind says why; both caches agree with the API. And a pod refused because it carries the
other server's booking does not keep this server's first placement of it booked once that booking is voided.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from hami_web.core import names
from hami_web.core.checks import EXCLUSIVE_CORES
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.localcluster import LocalCluster
from hami_web.state.pods import pod_usage

from .helpers import (
    DCU_REGISTER,
    RuntimeFactory,
    Scheduler,
    container,
    dcu_limits,
    dcu_node,
    dcus,
    device_node,
    gpu_limits,
    gpu_pod,
    gpus,
    text_register,
    usage_by_gpu,
    wait_for,
)
from .test_two_servers import EXPECTED_REFUSALS, _device_plugin, _schedule_all

TASKS, MEMORY_MIB, CORES = 4, 8000, 100
PODS = 48
# A bound for the watches and the device-plugin stand-in to catch up, not a timing (the suite may share the CPU).
SETTLE_SECONDS = 10.0
FAMILY_KEYS = {"NVIDIA": ("hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated"),
               "DCU": ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated")}
COUNT_RESOURCES = {"NVIDIA": "nvidia.com/gpu", "DCU": "hygon.com/dcunum"}


def _inventory() -> dict[str, list[Device]]:
    """Per node, its devices: ``gpu-node`` 2 GPUs, ``dcu-node`` 2 DCUs, ``mixed`` 1 GPU and 2 DCUs, all alike."""
    shape: dict[str, Any] = {"count": TASKS, "memory_mib": MEMORY_MIB, "cores": CORES}
    return {"gpu-node": gpus("gpu-node", 2, **shape), "dcu-node": dcus("dcu-node", 2, **shape),
            "mixed": [*gpus("mixed", 1, **shape), *dcus("mixed", 2, **shape)]}


def _nodes(inventory: dict[str, list[Device]]) -> list[dict[str, Any]]:
    nodes = []
    for name, devices in inventory.items():
        registers = {}
        if gpu_devices := [device for device in devices if device.family == "NVIDIA"]:
            registers[names.NODE_REGISTER] = encode_register_json(gpu_devices)
        if dcu_devices := [device for device in devices if device.family == "DCU"]:
            registers[DCU_REGISTER] = text_register(dcu_devices)
        nodes.append(device_node(name, registers))
    return nodes


def _ask(rng: random.Random, family: str) -> dict[str, str]:
    """One device of ``family``: shared (some cores or none) or, now and then, exclusive."""
    cores = rng.choice([0, 20, 30, 50, EXCLUSIVE_CORES])
    memory = rng.choice([1000, 2000, 3000]) if cores != EXCLUSIVE_CORES else 5000
    if family == "NVIDIA":
        return gpu_limits(memory_mib=memory, cores=cores)
    # A DCU ask without cores books the whole card (docs/device-families.md#device-families, default cores 100): the
    # exclusive case, as HAMi's default.
    return dcu_limits(memory_mib=memory, cores=None if cores == EXCLUSIVE_CORES else cores)


def _pods(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    pods = []
    for index in range(PODS):
        kind = rng.choice(["gpu", "dcu", "dcu", "one-container", "two-containers"])
        if kind in ("gpu", "dcu"):
            containers = [container("main", _ask(rng, "NVIDIA" if kind == "gpu" else "DCU"))]
        elif kind == "one-container":
            containers = [container("main", {**_ask(rng, "NVIDIA"), **_ask(rng, "DCU")})]
        else:
            containers = [container("gpu", _ask(rng, "NVIDIA")), container("dcu", _ask(rng, "DCU"))]
        pods.append(gpu_pod(f"job-{index:02d}", containers=containers))
    return pods


def _asked(pod: dict[str, Any], family: str) -> list[int]:
    """Per container (no init containers here), how many devices of ``family`` it asks for."""
    return [int(((c.get("resources") or {}).get("limits") or {}).get(COUNT_RESOURCES[family], "0"))
            for c in pod["spec"]["containers"]]


def test_two_servers_never_overbook_a_device_of_any_family(apiserver: LocalCluster,
                                                           make_runtime: RuntimeFactory) -> None:
    inventory = _inventory()
    nodes = list(inventory)
    apiserver.load(_nodes(inventory) + _pods(seed=31))
    servers = [make_runtime(), make_runtime()]
    stop = threading.Event()
    plugin = threading.Thread(target=_device_plugin, args=(servers[0], apiserver, stop), daemon=True)
    plugin.start()
    refusals: list[str] = []
    orders = [[f"job-{index:02d}" for index in range(PODS)] for _ in servers]
    random.Random(11).shuffle(orders[1])
    threads = [threading.Thread(target=_schedule_all, args=(Scheduler(server.app.test_client(), apiserver), order,
                                                              refusals), kwargs={"nodes": nodes, "retry_errors": True})
               for server, order in zip(servers, orders, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    wait_for(lambda: not any(pod["spec"].get("nodeName") and (pod["metadata"].get("annotations") or {})
                             .get(names.POD_BIND_PHASE) == "allocating" for pod in apiserver.list("pods", "default")),
             timeout_seconds=SETTLE_SECONDS, what="the device plugin to finish")
    stop.set()
    plugin.join(5)

    family_of = {(node, device.uuid): device.family for node, devices in inventory.items() for device in devices}
    booked: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    bound_by_family: Counter[str] = Counter()
    for pod in apiserver.list("pods", "default"):
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        usage = pod_usage(pod, catalog=DEFAULT_CATALOG)
        annotations = pod["metadata"].get("annotations") or {}
        if not node:
            assert usage is None, f"unbound pod {name} still holds {usage.devices_text}"
            continue
        assert usage is not None and usage.node == node, (name, usage)
        for family in FAMILY_KEYS:
            held = [[grant for grant in granted if grant.vendor == family] for granted in usage.grants]
            assert [len(grants) for grants in held] == _asked(pod, family), (name, family, usage.devices_text)
            asks = any(_asked(pod, family))
            assert all((key in annotations) == asks for key in FAMILY_KEYS[family]), (name, family, annotations)
            bound_by_family[family] += asks
        for granted in usage.grants:
            for grant in granted:
                assert family_of.get((node, grant.uuid)) == grant.vendor, (name, node, grant)
                booked.setdefault((node, grant.uuid), []).append((1, grant.memory_mib, grant.cores))
    for device, grants in booked.items():
        tasks, memory, cores = (sum(column) for column in zip(*grants, strict=True))
        assert tasks <= TASKS and memory <= MEMORY_MIB and cores <= CORES, (device, grants)
        if any(grant_cores == EXCLUSIVE_CORES for _, _, grant_cores in grants):
            assert len(grants) == 1, f"exclusive device {device} shared: {grants}"

    assert set(booked) == set(family_of), "some device was never used: the cluster was not filled"
    assert bound_by_family["NVIDIA"] >= 3 and bound_by_family["DCU"] >= 4, bound_by_family
    assert refusals, "the two servers never raced for a device: the test proves nothing"
    unexplained = [message for message in refusals if not any(key in message for key in EXPECTED_REFUSALS)]
    assert not unexplained, unexplained
    causes = Counter(next(key for key in EXPECTED_REFUSALS if key in message) for message in refusals)
    assert causes["already bound"] + causes["no longer free"] + causes["already holds devices"] > 0, causes

    # Device UUIDs are unique across nodes here, so the caches' per-UUID usage must match the API's.
    expected = {uuid: tuple(sum(column) for column in zip(*grants, strict=True))
                for (_, uuid), grants in booked.items()}
    settled_by = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < settled_by and any(usage_by_gpu(server) != expected for server in servers):
        time.sleep(0.01)
    for server in servers:
        assert usage_by_gpu(server) == expected, "a cache disagrees with the API"


def test_a_pod_refused_for_another_binders_booking_does_not_keep_our_first_placement(
        apiserver: LocalCluster, make_runtime: RuntimeFactory) -> None:
    apiserver.load([dcu_node("hygon"), gpu_pod("x", dcu_limits(1)), gpu_pod("z", dcu_limits(2))])
    ours = make_runtime()
    scheduler = Scheduler(ours.app.test_client(), apiserver)
    assert scheduler.filter("x", ["hygon"])["NodeNames"] == ["hygon"]  # assumed here: all of hygon-dcu0
    # Before our bind, the other server's /bind writes its own choice for x (hygon-dcu1) onto the pod ...
    now = str(int(time.time()))
    other = "hygon-dcu1,DCU,65520,100:;"
    ours.kube.patch_pod("default", "x", {"metadata": {
        "annotations": {names.POD_ASSIGNED_NODE: "hygon", names.POD_ASSIGNED_TIME: now, FAMILY_KEYS["DCU"][0]: other,
                        FAMILY_KEYS["DCU"][1]: other, names.POD_BIND_PHASE: "allocating", names.POD_BIND_TIME: now}}})
    # ... so when kube-scheduler retries x here (our bind found the node locked), we refuse to place it again ...
    assert "already holds devices" in scheduler.filter("x", ["hygon"])["Error"]
    # ... and the other server's verification fails: its booking is voided, x is unbound and holds nothing.
    ours.kube.patch_pod("default", "x", {"metadata": {"annotations": {names.POD_BIND_PHASE: "failed"}}})

    # Both DCUs are free in the API: this server must see them free too.
    wait_for(lambda: scheduler.filter("z", ["hygon"])["NodeNames"] == ["hygon"],
             what="both DCUs to be free for z once x's only booking was voided")
