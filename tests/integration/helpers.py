"""Builders and stand-ins shared by the extender tests.

Node and pod builders; `Scheduler`, which plays kube-scheduler (reads the pod from the API server as its
informer would, POSTs ``/filter`` with ``NodeNames``, then ``/bind``, through the app's HTTP routes — the
filter only decides and books in memory, the bind writes the booking onto the pod, so a test that reads the
pod's annotations schedules it, and one that checks the filter's choice alone reads ``runtime.cache.placed``);
`release_lock`, which plays HAMi's device plugin after a bind (pod ``bind-phase=success``, node lock removed);
and readers of what ended up in the API server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from hami_web.core import names
from hami_web.core.devices import AnnotationError, Device, decode_register, encode_register_json, encode_register_text
from hami_web.core.families import build_catalog, gated_specs
from hami_web.kube import ConflictError, Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.cache import ClusterCache
from hami_web.state.nodes import node_record
from hami_web.state.pods import pod_record
from hami_web.state.sync import ClusterSync

A40 = "NVIDIA-NVIDIA A40"
NAMESPACE = "default"
# A bound, not a timing: the first sync returns as soon as it is done. The first test of a process also pays the
# kubernetes client's model imports (~0.6 s of CPU), which at load average 7 on two cores took over 5 s.
SYNC_TIMEOUT_SECONDS = 30.0

RuntimeFactory = Callable[..., Runtime]
# ``sync_on(apiserver, **options)`` (the fixture in conftest.py)
SyncOn = Callable[..., ClusterSync]
"""``make_runtime(clock=..., start=True, **settings_fields)`` (the fixture in conftest)."""


# -- builders --------------------------------------------------------------------------------------


def gpus(node: str, how_many: int = 4, *, count: int = 10, memory_mib: int = 8000, cores: int = 100,
         type: str = A40, numa: int = 0) -> list[Device]:
    """``how_many`` identical GPUs named ``<node>-gpu<i>``."""
    return [Device(uuid=f"{node}-gpu{i}", index=i, count=count, memory_mib=memory_mib, cores=cores, type=type,
                   numa=numa) for i in range(how_many)]


def gpu_node(name: str, devices: Sequence[Device] | None = None, *, register: str | None = None,
             handshake: str | None = "Requesting_2099-01-01 00:00:00", allocatable_gpus: int | None = None,
             annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node object as HAMi's device plugin leaves it: register annotation, handshake, allocatable GPUs.

    The default handshake is a fresh ``Requesting_`` (in the future, so never stale) so the cache does not
    write a handshake back, which would change the node's resourceVersion under a test's feet.
    """
    devices = list(gpus(name) if devices is None else devices)
    node_annotations: dict[str, str] = {}
    if register is not None:
        node_annotations[names.NODE_REGISTER] = register
    elif devices:
        node_annotations[names.NODE_REGISTER] = encode_register_json(devices)
    if handshake is not None:
        node_annotations[names.NODE_HANDSHAKE] = handshake
    node_annotations.update(annotations or {})
    allocatable = len(devices) if allocatable_gpus is None else allocatable_gpus
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": node_annotations, "labels": labels or {}},
            "status": {"allocatable": {"nvidia.com/gpu": str(allocatable), "cpu": "8"}}}


def plain_node(name: str) -> dict[str, Any]:
    """A node without GPUs (no register annotation)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {"cpu": "8"}}}


def gpu_limits(count: int = 1, *, memory_mib: int | str | None = None, memory_percent: int | None = None,
               cores: int | None = None) -> dict[str, str]:
    """Container limits asking for GPUs, as the webhook leaves them."""
    limits = {"nvidia.com/gpu": str(count)}
    if memory_mib is not None:
        limits["nvidia.com/gpumem"] = str(memory_mib)
    if memory_percent is not None:
        limits["nvidia.com/gpumem-percentage"] = str(memory_percent)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return limits


def container(name: str = "main", limits: dict[str, str] | None = None) -> dict[str, Any]:
    """A container; ``limits`` None asks for nothing."""
    body: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits:
        body["resources"] = {"limits": dict(limits), "requests": dict(limits)}
    return body


def gpu_pod(name: str, limits: dict[str, str] | None = None, *, containers: Sequence[dict[str, Any]] | None = None,
            init_containers: Sequence[dict[str, Any]] = (), annotations: dict[str, str] | None = None,
            namespace: str = NAMESPACE) -> dict[str, Any]:
    """A pending pod for hami-scheduler; by default one container asking for ``limits`` (1 whole GPU)."""
    if containers is None:
        containers = [container("main", gpu_limits() if limits is None else limits)]
    spec: dict[str, Any] = {"schedulerName": "hami-scheduler", "containers": list(containers)}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "spec": spec}


# -- other device families (docs/device-families.md#device-families)
# ----------------------------------------------------

DCU_REGISTER = "hami.io/node-dcu-register"
DCU_TYPE = "DCU-BW100"
FRESH_HANDSHAKE = "Requesting_2099-01-01 00:00:00"
# Every family hami-web knows, Iluvatar's and Ascend's chips included: the builders look register keys up here.
ALL_FAMILIES = build_catalog(enable={spec.name for spec in gated_specs()})


def with_defaults(make_runtime: RuntimeFactory, **defaults: Any) -> RuntimeFactory:
    """``make_runtime`` whose runtimes take ``defaults`` (settings fields) unless a test passes its own."""
    def make(**overrides: Any) -> Runtime:
        return make_runtime(**{**defaults, **overrides})
    return make


@pytest.fixture(name="make_runtime")
def make_runtime_refusing_locked_binds(make_runtime: RuntimeFactory) -> RuntimeFactory:
    """``make_runtime`` without binpack's line (``--binpack-lock-queue=0``: HAMi's refusal of a bind that finds its
    node locked) unless a test says otherwise. A test module about that refusal imports this fixture, which then
    stands for ``make_runtime`` (and so ``runtime``) in the module."""
    return with_defaults(make_runtime, binpack_lock_queue_seconds=0.0)


def bound_gpu_pod(name: str, node: str, devices: str, limits: dict[str, str] | None = None) -> dict[str, Any]:
    """A GPU pod another binder already bound to ``node`` with ``devices`` (HAMi's pod-devices text), its device
    plugin done with it (``bind-phase=success``)."""
    pod = gpu_pod(name, limits, annotations={names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: devices,
                                             names.POD_BIND_PHASE: "success"})
    pod["spec"]["nodeName"] = node
    return pod


def dcus(node: str, how_many: int = 2, *, count: int = 4, memory_mib: int = 65520, cores: int = 100,
         type: str = DCU_TYPE) -> list[Device]:
    """``how_many`` identical Hygon DCUs named ``<node>-dcu<i>``."""
    return [Device(uuid=f"{node}-dcu{i}", index=i, count=count, memory_mib=memory_mib, cores=cores, type=type,
                   family="DCU") for i in range(how_many)]


def text_register(devices: Sequence[Device]) -> str:
    """Devices as the 7-field text register annotation the DCU and Iluvatar device plugins write."""
    return encode_register_text(devices, with_index=False)


def device_node(name: str, registers: Mapping[str, str], *, handshakes: Mapping[str, str | None] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node carrying the given register annotations (register key -> value) of any families.

    Each family present gets a fresh ``Requesting_`` handshake (never stale, never written back) unless
    ``handshakes`` gives its handshake key another value (None: absent), and its count resource allocatable
    (the number of devices the register lists, 1 when it does not parse).
    """
    node_annotations: dict[str, str] = dict(registers)
    allocatable: dict[str, str] = {"cpu": "8"}
    for family in ALL_FAMILIES:
        register = registers.get(family.register_key)
        if register is None:
            continue
        node_annotations[family.handshake_key] = FRESH_HANDSHAKE
        try:
            allocatable[family.resources.count] = str(len(decode_register(register, family=family.cw)))
        except AnnotationError:
            allocatable[family.resources.count] = "1"
    for key, value in (handshakes or {}).items():
        if value is None:
            node_annotations.pop(key, None)
        else:
            node_annotations[key] = value
    node_annotations.update(annotations or {})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": node_annotations},
            "status": {"allocatable": allocatable}}


def dcu_node(name: str, devices: Sequence[Device] | None = None, *,
             gpu_devices: Sequence[Device] = ()) -> dict[str, Any]:
    """A Hygon node (two DCUs ``<name>-dcu<i>`` by default); with ``gpu_devices`` also an NVIDIA one."""
    registers = {DCU_REGISTER: text_register(dcus(name) if devices is None else devices)}
    if gpu_devices:
        registers[names.NODE_REGISTER] = encode_register_json(gpu_devices)
    return device_node(name, registers)


def dcu_limits(count: int = 1, *, memory_mib: int | None = None, cores: int | None = None) -> dict[str, str]:
    """Container limits asking for Hygon DCUs (``hygon.com/dcunum``, ``dcumem`` MiB, ``dcucores``)."""
    limits = {"hygon.com/dcunum": str(count)}
    if memory_mib is not None:
        limits["hygon.com/dcumem"] = str(memory_mib)
    if cores is not None:
        limits["hygon.com/dcucores"] = str(cores)
    return limits


def iluvatar_limits(chip: str = "MR-V100", count: int = 1, *, memory_units: int | None = None,
                    cores: int | None = None) -> dict[str, str]:
    """Container limits asking for Iluvatar GPUs of ``chip`` (memory in units of 256 MiB)."""
    limits = {f"iluvatar.ai/{chip}-vgpu": str(count)}
    if memory_units is not None:
        limits[f"iluvatar.ai/{chip}.vMem"] = str(memory_units)
    if cores is not None:
        limits[f"iluvatar.ai/{chip}.vCore"] = str(cores)
    return limits


MLU_VCORE = "cambricon.com/mlu.smlu.vcore"
MLU_VMEMORY = "cambricon.com/mlu.smlu.vmemory"
DSMLU_LOCK = "cambricon.com/dsmlu.lock"


def mlu_node(name: str, cards: int = 2, *, memory_units: int = 96, model: str | None = "MLU370-X4",
             gpu_devices: Sequence[Device] = (), annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A Cambricon node as its device plugin leaves it: no annotation, ``cards`` × 100 vcores and ``memory_units`` ×
    256 MiB a card in its capacity, the ``Model`` label (None: none); with ``gpu_devices`` also an NVIDIA inventory."""
    capacity = {"cpu": "8", MLU_VCORE: str(100 * cards), MLU_VMEMORY: str(memory_units * cards),
                "cambricon.com/vmlu": str(100 * cards)}
    node_annotations = dict(annotations or {})
    allocatable = dict(capacity)
    if gpu_devices:
        node_annotations[names.NODE_REGISTER] = encode_register_json(gpu_devices)
        node_annotations[names.NODE_HANDSHAKE] = FRESH_HANDSHAKE
        allocatable["nvidia.com/gpu"] = str(len(gpu_devices))
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": node_annotations,
                         "labels": {"Model": model} if model is not None else {}},
            "status": {"capacity": capacity, "allocatable": allocatable}}


def mlu_limits(count: int = 1, *, memory_units: int | None = None, cores: int | None = None) -> dict[str, str]:
    """Container limits asking for Cambricon MLUs (``cambricon.com/vmlu``, vmemory in units of 256 MiB, vcore)."""
    limits = {"cambricon.com/vmlu": str(count)}
    if memory_units is not None:
        limits[MLU_VMEMORY] = str(memory_units)
    if cores is not None:
        limits[MLU_VCORE] = str(cores)
    return limits


# -- clock and polling ------------------------------------------------------------------------------


@dataclass
class FakeClock:
    """A clock tests move by hand (`advance`); callable like `time.time`."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def wait_for(condition: Callable[[], Any], *, timeout_seconds: float = 3.0, what: str = "condition") -> Any:
    """Poll ``condition`` every 10 ms until it is truthy; fail the test after ``timeout_seconds``."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_seconds}s waiting for {what}")
        time.sleep(0.01)


# -- kube-scheduler and device plugin stand-ins ------------------------------------------------------


class Scheduler:
    """Drives ``/filter`` and ``/bind`` the way kube-scheduler does, through the app's HTTP routes."""

    def __init__(self, client: FlaskClient, apiserver: LocalCluster) -> None:
        self.client = client
        self.apiserver = apiserver

    def pod(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        """The pod as stored in the API server (what kube-scheduler's informer hands to the extender)."""
        pod = self.apiserver.get("pods", name, namespace)
        assert pod is not None, f"pod {namespace}/{name} does not exist"
        return pod

    def post(self, path: str, body: Any) -> dict[str, Any]:
        """POST ``body`` as JSON; the extender must always answer HTTP 200 with a JSON object."""
        response = self.client.post(path, data=json.dumps(body), content_type="application/json")
        assert response.status_code == 200, response.get_data(as_text=True)
        answer = response.get_json()
        assert isinstance(answer, dict)
        return answer

    def filter(self, name: str, node_names: Sequence[str], namespace: str = NAMESPACE) -> dict[str, Any]:
        """``/filter`` with the ``NodeNames`` form (``nodeCacheCapable: true``)."""
        return self.post("/filter", {"Pod": self.pod(name, namespace), "Nodes": None,
                                     "NodeNames": list(node_names)})

    def bind(self, name: str, node: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        """``/bind`` of the pod to ``node``."""
        pod = self.pod(name, namespace)
        return self.post("/bind", {"PodName": name, "PodNamespace": namespace,
                                   "PodUID": pod["metadata"]["uid"], "Node": node})

    def schedule(self, name: str, node_names: Sequence[str], namespace: str = NAMESPACE) -> str:
        """Filter then bind; returns the node. Fails the test when either step answers an error."""
        answer = self.filter(name, node_names, namespace)
        assert answer["Error"] == "", answer
        assert answer["NodeNames"] and len(answer["NodeNames"]) == 1, answer
        node = answer["NodeNames"][0]
        bound = self.bind(name, node, namespace)
        assert bound == {"Error": ""}, bound
        return node


def observe_node(cache: ClusterCache, event_type: str, node: dict[str, Any]) -> None:
    """One watch event for a node object, as the node reflector's sink applies it."""
    cache.apply_node_events([(event_type, node_record(node, catalog=cache.catalog))])


def observe_pod(cache: ClusterCache, event_type: str, pod: dict[str, Any]) -> None:
    """One watch event for a pod object, as the pod reflector's sink applies it."""
    cache.apply_pod_events([(event_type, pod_record(pod, catalog=cache.catalog))])


def busy_nodes(cache: ClusterCache) -> frozenset[str]:
    """The GPU nodes busy binding now, for any pod: what the filter tries last (the cache's own rule, read here
    because only tests ask it without a pod)."""
    with cache._store.locked("read"):
        return cache._busy_nodes_locked("", "", "")


def metric_value(runtime: Runtime, name: str, **labels: str) -> float:
    """A sample of the runtime's metrics (0 when it was never observed)."""
    return runtime.metrics.registry.get_sample_value(name, labels) or 0.0


def lock_waits(runtime: Runtime, outcome: str) -> float:
    """``hami_web_node_lock_waits_total`` of ``outcome``: a gang member's wait for a held lock, or a bind in line."""
    return metric_value(runtime, "hami_web_node_lock_waits_total", outcome=outcome)


def release_lock(kube: Kube, name: str, node: str, *, namespace: str = NAMESPACE, phase: str = "success") -> None:
    """What HAMi's device plugin does once it has set up the pod: node lock removed, bind-phase ``phase``.

    The lock goes first and only if it is this pod's (compare-and-swap on the node's resourceVersion): once the
    phase is ``success`` another binder may take the lock over, and removing it after that would free its lock.
    """
    while True:
        current = kube.get_node(node)
        lock = str(((current["metadata"].get("annotations") or {}).get(names.NODE_LOCK)) or "")
        if not lock.endswith(f",{namespace},{name}"):
            break
        try:
            kube.patch_node(node, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"],
                                                "annotations": {names.NODE_LOCK: None}}})
            break
        except ConflictError:
            continue
    kube.patch_pod(namespace, name, {"metadata": {"annotations": {names.POD_BIND_PHASE: phase}}})


def booking_apart_quota(namespace: str = NAMESPACE) -> dict[str, Any]:
    """A ResourceQuota that limits ``namespace``'s device memory far beyond any test's use: its pods' binds then book
    apart (booking patch, node and namespace reads, Binding) instead of riding the booking on the Binding."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "devices", "namespace": namespace},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "100000000"}}}


def devices_of(apiserver: LocalCluster, name: str, namespace: str = NAMESPACE) -> str:
    """The pod's ``hami.io/vgpu-devices-allocated`` annotation as stored in the API server (written by ``/bind``)."""
    pod = apiserver.get("pods", name, namespace) or {}
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(names.POD_DEVICES_ALLOCATED, "")


def annotations_of(apiserver: LocalCluster, resource: str, name: str, namespace: str | None = None) -> dict[str, str]:
    """An object's annotations as stored in the API server ({} when it does not exist)."""
    obj = apiserver.get(resource, name, namespace) or {}
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def admission_response(runtime: Runtime, pod: dict[str, Any], namespace: str = NAMESPACE, *,
                       dry_run: bool = False) -> dict[str, Any]:
    """The webhook's ``response`` for a pod CREATE in ``namespace``, through the runtime's app."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "review-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "operation": "CREATE", "namespace": namespace, "object": pod, "dryRun": dry_run}}
    response = runtime.app.test_client().post("/webhook", data=json.dumps(review), content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()["response"]
    assert isinstance(answer, dict)
    return answer


def events_for(apiserver: LocalCluster, pod: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Events recorded about ``pod``, oldest first (call ``runtime.events.flush()`` first)."""
    events = [event for event in apiserver.list("events", namespace)
              if (event.get("involvedObject") or {}).get("name") == pod]
    return sorted(events, key=lambda event: int(event["metadata"]["resourceVersion"]))


def reasons_for(apiserver: LocalCluster, pod: str, namespace: str = NAMESPACE) -> list[str]:
    """The reasons of the events about ``pod``, oldest first."""
    return [str(event.get("reason")) for event in events_for(apiserver, pod, namespace)]


def usage_by_gpu(runtime: Runtime) -> dict[str, tuple[int, int, int]]:
    """``uuid -> (tasks, memory MiB, cores)`` for every GPU with usage, from the cache's node views."""
    booked: dict[str, tuple[int, int, int]] = {}
    for view in runtime.cache.node_views().values():
        for device, usage in zip(view.inventory.devices, view.usage, strict=True):
            if usage.tasks or usage.memory_mib or usage.cores:
                booked[device.uuid] = (usage.tasks, usage.memory_mib, usage.cores)
    return booked


def delete_pod(apiserver: LocalCluster, name: str, namespace: str = NAMESPACE) -> None:
    """DELETE the pod through the API server's REST interface (as kubectl would)."""
    response = requests.delete(f"{apiserver.url}/api/v1/namespaces/{namespace}/pods/{name}", timeout=5)
    assert response.status_code == 200, response.text


def patch_pod_status(apiserver: LocalCluster, name: str, status: dict[str, Any], namespace: str = NAMESPACE) -> None:
    """Merge-patch the pod's status through ``/status`` (what the kubelet does)."""
    response = requests.patch(f"{apiserver.url}/api/v1/namespaces/{namespace}/pods/{name}/status",
                              data=json.dumps({"status": status}), timeout=5,
                              headers={"Content-Type": "application/merge-patch+json"})
    assert response.status_code == 200, response.text


def http_scheduler(server_url: str, apiserver: LocalCluster, nodes: Sequence[str], *,
                   release: bool = False) -> Callable[[dict[str, Any]], str]:
    """What kube-scheduler does for one pod, over HTTP against a threaded server, safe to call from many threads (a
    session and a client per thread): ``/filter`` on ``nodes``, then ``/bind`` retried while the node is locked; the
    node bound to, "" when no node fits. ``release``: the device plugin removes HAMi's lock once bound."""
    local = threading.local()

    def schedule(pod: dict[str, Any]) -> str:
        if not hasattr(local, "session"):
            local.session, local.kube = requests.Session(), Kube.for_url(apiserver.url)
        name = pod["metadata"]["name"]
        answer = local.session.post(f"{server_url}/filter", json={"Pod": pod, "NodeNames": list(nodes)},
                                    timeout=30).json()
        assert answer["Error"] == "", answer
        if not answer["NodeNames"]:
            return ""
        [node] = answer["NodeNames"]
        for _ in range(400):
            bound = local.session.post(f"{server_url}/bind", json={
                "PodName": name, "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": node},
                timeout=30).json()
            if bound["Error"] == "":
                if release:
                    release_lock(local.kube, name, node)
                return str(node)
            assert "is locked by" in bound["Error"] or "lock still contended" in bound["Error"], bound
            time.sleep(0.002)
        raise AssertionError(f"{name} never bound to {node}")

    return schedule


def bind_at_once(schedulers: Sequence[Scheduler], node: str) -> dict[int, dict[str, Any]]:
    """Bind pod ``p<i>`` through ``schedulers[i]`` onto ``node``, all binds started together; each answer by ``i``."""
    answers: dict[int, dict[str, Any]] = {}
    start = threading.Barrier(len(schedulers))

    def bind(index: int) -> None:
        start.wait()
        answers[index] = schedulers[index].bind(f"p{index}", node)

    threads = [threading.Thread(target=bind, args=(index,)) for index in range(len(schedulers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers
