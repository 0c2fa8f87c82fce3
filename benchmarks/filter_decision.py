"""Time the filter decision (`choose_node`) on generated clusters of 1,000 and 5,000 nodes × 8 GPUs.

Run from anywhere: ``python benchmarks/filter_decision.py [--pods N] [--sizes 1000,5000] [--seed S] [--mixed]
[--record FILE | --check FILE]``.

Each cluster mixes GPU types (A40, A100, T4, L4), has random prior usage and some full nodes. A few hundred
typical pods (1 GPU with gpumem, 2 GPUs with percentage, type-restricted, node binpack and spread, GPU binpack
and spread) are placed one after another; after each placement the pod's booking is added to that node's usage
and its `NodeView` rebuilt, as the cluster cache does. Printed per size: median / p95 / max ms per pod, and the
all-fail path (a pod no node can take, with a reason computed for every node). Not a test: no assertions.

``--mixed``: a third of the nodes carry 8 Hygon DCUs instead of GPUs, a third both (8 GPUs and 4 DCUs), and the pods
alternate between the GPU pods, DCU pods and pods asking for a GPU and a DCU (docs/device-families.md#device-families).
``--ascend``: every node carries 8 Ascend 910B3 NPUs in two HCCS groups (NPUs 0-3 and 4-7, as the device plugin reports
``custominfo.NetworkID``), a third of them allowing soft split, with prior usage in template-sized slices; the pods are
template slices, whole NPUs (1, 2, 4 and 8: the HCCS fill and its node-score term) and soft-split shares
(docs/device-families.md#ascend-npus). Compare its figures with a run without it (NVIDIA) at the same size.
``--family CW``: every node carries 8 devices of that family (Biren, GCU, Metax-GPU, …) as its device plugin reports
them (a register annotation or the node's capacity, read through the cache's own node reader; Metax nodes with their
topology annotations), with prior usage on some of them; the pods ask 1, 2 and 4 whole devices under binpack and spread
(docs/device-families.md#device-families). ``--family all`` prints one row per family the registry builds by default
besides NVIDIA, DCU and MLU; compare with the NVIDIA figures at the same size (the target: within 1.3×).
``--mig``: half the nodes carry 8 A100s that HAMi's device plugin carves into MIG instances on demand (``mode: mig``
with the A100's ``migProfiles``, read through the cache's own node reader), the others 8 A100s shared by HAMi-core; the
pods alternate between the typical pods and pods naming ``nvidia.com/vgpu-mode: mig`` (1, 2 and 3 instances, which one
GPU may give one container), so that a placement on either kind is compared by ``--check`` (docs/mig.md#dynamic-mig).
``--family Metax-SGPU --online SHARE``: that share of the nodes runs online sGPU pods (0-3 a card, 8 GiB each, a card in
ten an ordinary whole-card pod), and the pods placed are online pods of 1 and 2 sGPUs, whose node score (HAMi's online
term, × 10,000) depends on the online pods of the cards they get.
``--record FILE`` writes every placement (node and devices); ``--check FILE`` compares this run's placements with such
a file, so a change to the core can show it decides exactly as before.

``--quota N``: the pods belong to N namespaces (pod i to namespace i mod N), each under a ResourceQuota on GPU memory
and cores (docs/quotas.md#namespace-quotas), and each decision does what the cache does for a pod of such a namespace:
read the namespace's limits and use, derive what they leave the pod, decide with it (``ResourceQuotaNotFit`` checked
on every device tried), and count the placement's booking against the namespace. The limits are generous
(``--quota-mib`` per namespace, default 10^13 MiB, above what any pod could book since a device may hold up
to 2^31 MiB, so the placements are those of the run without quota, which
``--check`` against a ``--record`` of it shows): the figures are the quota's overhead. ``--cpu-time`` times the
thread's CPU instead of the wall clock, for a machine shared with other work.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device, NodeInventory, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.families.capacity import CapacityInventory
from hami_web.core.families.enflame_drs import CAPACITY_KEY as DRS_CAPACITY_KEY
from hami_web.core.families.metax_sgpu import INVENTORY_KEY as SGPU_INVENTORY_KEY
from hami_web.core.grants import describe_grants
from hami_web.core.groups import NETWORK_GROUPS
from hami_web.core.options import DeviceSelection, PodOptions, pod_options
from hami_web.core.quota import NamespaceQuota, booking_quota_use, family_quota_names, quota_resources
from hami_web.core.requests import ContainerRequest, PodRequest, RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view, pod_booking
from hami_web.state.nodes import node_record, node_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from core.builders import A100_MIG_PROFILES  # tests/core/builders.py: HAMi v2.10's A100-40GB MIG table

GPUS_PER_NODE = 8
CARD_MODELS = (  # type, memory MiB
    ("NVIDIA-NVIDIA A40", 46068),
    ("NVIDIA-NVIDIA A100-SXM4-80GB", 81920),
    ("NVIDIA-Tesla T4", 15360),
    ("NVIDIA-NVIDIA L4", 23034),
)
FULL_NODE_SHARE = 0.1
BUSY_GPU_SHARE = 0.4


DCUS_ON_MIXED_NODES = 4
NPU = "Ascend910B3"
NPU_MEMORY_MIB = 65536
NPU_SLICE_MIB = 16384  # the vir05_1c_16g template


def generate_cluster(size: int, rng: random.Random, *, mixed: bool = False,
                     ) -> tuple[dict[str, NodeView], dict[str, dict[str, DeviceUsage]]]:
    """``size`` nodes of 8 GPUs each (with ``mixed``: a third DCU nodes, a third both): views and usage by UUID."""
    views: dict[str, NodeView] = {}
    usages: dict[str, dict[str, DeviceUsage]] = {}
    for number in range(size):
        name = f"gpu-node-{number:05d}"
        card_type, memory_mib = rng.choice(CARD_MODELS)
        gpus = tuple(Device(uuid=f"GPU-{number:05d}-{index}", index=index, count=10, memory_mib=memory_mib,
                            cores=100, type=card_type, numa=index // 4) for index in range(GPUS_PER_NODE))
        kind = number % 3 if mixed else 0
        dcus = tuple(Device(uuid=f"DCU-{number:05d}-{index}", index=index, count=4, memory_mib=65520, cores=100,
                            type="DCU-BW100", family="DCU")
                     for index in range(GPUS_PER_NODE if kind == 1 else DCUS_ON_MIXED_NODES if kind == 2 else 0))
        devices = dcus + (gpus if kind != 1 else ())
        full = rng.random() < FULL_NODE_SHARE
        usage: dict[str, DeviceUsage] = {}
        for device in devices:
            if full:
                usage[device.uuid] = DeviceUsage(device.count, device.memory_mib, device.cores)
            elif rng.random() < BUSY_GPU_SHARE:
                tasks = rng.randint(1, 4)
                usage[device.uuid] = DeviceUsage(tasks, rng.randint(0, device.memory_mib * 3 // 4),
                                                 rng.randint(0, 80))
        inventory = NodeInventory(name=name, devices=devices)
        views[name] = build_node_view(inventory, usage)
        usages[name] = usage
    return views, usages


def generate_ascend_cluster(size: int, rng: random.Random
                            ) -> tuple[dict[str, NodeView], dict[str, dict[str, DeviceUsage]]]:
    """``size`` nodes of 8 Ascend 910B3 NPUs in two HCCS groups, as `node_state` builds them (grouping, soft split on
    a third of the nodes), with prior usage in template slices and some full nodes."""
    views: dict[str, NodeView] = {}
    usages: dict[str, dict[str, DeviceUsage]] = {}
    for number in range(size):
        name = f"npu-node-{number:05d}"
        npus = tuple(Device(uuid=f"NPU-{number:05d}-{index}", index=index, count=4, memory_mib=NPU_MEMORY_MIB,
                            cores=20, type=NPU, family=NPU, network=0 if index <= 3 else 1)
                     for index in range(GPUS_PER_NODE))
        full = rng.random() < FULL_NODE_SHARE
        usage: dict[str, DeviceUsage] = {}
        for device in npus:
            if full:
                usage[device.uuid] = DeviceUsage(device.count, device.memory_mib, 0)
            elif rng.random() < BUSY_GPU_SHARE:
                slices = rng.randint(1, 3)
                usage[device.uuid] = DeviceUsage(slices, slices * NPU_SLICE_MIB, 0)
        inventory = NodeInventory(name=name, devices=npus, topology=frozenset(), grouping={NPU: NETWORK_GROUPS},
                                  soft_split=frozenset({NPU}) if number % 3 == 0 else frozenset())
        views[name] = build_node_view(inventory, usage)
        usages[name] = usage
    return views, usages


# The families --family all times: those the registry builds by default that the other modes do not cover.
COVERED_ELSEWHERE = ("NVIDIA", "DCU", "MLU")


def family_node(family: str, number: int) -> dict[str, Any]:
    """A node of 8 devices of ``family`` as its device plugin leaves it: its register annotation (JSON) or capacity."""
    name = f"{family.lower()}-node-{number:05d}"
    spec = DEFAULT_CATALOG[family]
    table = '{"1":0,"2":110,"4":540}' if number % 2 else '{"1":10,"2":150,"4":620}'  # two card layouts
    annotations: dict[str, str] = {"metax-tech.com/gpu.topology.losses": table,
                                   "metax-tech.com/gpu.topology.scores": table}
    capacity = {spec.resources.count: str(GPUS_PER_NODE)}
    if isinstance(spec.inventory, CapacityInventory):  # as many units as 8 devices take, and 96 memory units each
        capacity[spec.inventory.resource] = str(spec.inventory.units_per_device * GPUS_PER_NODE)
        if spec.inventory.memory_resource:
            capacity[spec.inventory.memory_resource] = str(96 * GPUS_PER_NODE)
    if spec.resources.cores and not spec.register_key and not isinstance(spec.inventory, CapacityInventory):
        capacity[spec.resources.cores] = str(2 * GPUS_PER_NODE)  # AWS Neuron: two cores a device
    status: dict[str, Any] = {"capacity": capacity, "allocatable": capacity}
    if spec.register_key:  # two dies a card for a family that groups them (Vastai's die mode)
        # A family shared in slices (Kunlunxin vXPU) has cards of its whole slice, which a count-only ask books.
        memory_mib = spec.slices.whole_mib if spec.slices else 32768
        devices = [Device(uuid=f"{name}-{index}", index=index, count=1, memory_mib=memory_mib, cores=100, type=family,
                          family=family, card=str(index // 2) if spec.grouping else "")
                   for index in range(GPUS_PER_NODE)]
        annotations = {spec.register_key: encode_register_json(devices)}
        if spec.handshake_key:  # a family without one (AMD) counts while its capacity does
            annotations[spec.handshake_key] = "Reported_2099-01-01"
    if spec.sharing is not None:  # Metax sGPU cards of 16 shares under one QoS, as their device plugin lists them
        annotations = {SGPU_INVENTORY_KEY: json.dumps([
            {"uuid": f"{name}-{index}", "totalDevCount": 16, "totalCompute": 100, "totalVRam": 65536, "numa": 0,
             "healthy": True, "qosPolicy": "best-effort", "linkZone": 1 + index // 4}
            for index in range(GPUS_PER_NODE)])}
    if spec.partitioning is not None:  # GCUs of six slices in DRS mode; a count of n asks the n-slice profile
        annotations = {DRS_CAPACITY_KEY: json.dumps({
            "devices": [{"index": str(index), "minor": str(index), "capacity": 6} for index in range(GPUS_PER_NODE)],
            "profiles": {"1g.12gb": "0", "2g.24gb": "1", "4g.48gb": "2", "6g.72gb": "3"}})}
    # Two instance types: ranges from any start (inf2) or aligned (trn1), for a family that reads it (AWS Neuron).
    labels = {"node.kubernetes.io/instance-type": "inf2.48xlarge" if number % 2 else "trn1.32xlarge"}
    return {"metadata": {"name": name, "annotations": annotations, "labels": labels}, "status": status}


def mig_node(number: int) -> dict[str, Any]:
    """A node of 8 A100s as NVIDIA's device plugin registers them: dynamic MIG (even numbers) or HAMi-core (odd)."""
    name = f"mig-node-{number:05d}"
    mig = number % 2 == 0
    register = [{"id": f"GPU-{number:05d}-{index}", "index": index, "count": 10, "devmem": 40960, "devcore": 100,
                 "type": "NVIDIA-NVIDIA A100-SXM4-40GB", "numa": index // 4, "health": True,
                 "mode": "mig" if mig else "hami-core", **({"migProfiles": A100_MIG_PROFILES} if mig else {})}
                for index in range(GPUS_PER_NODE)]
    annotations = {"hami.io/node-nvidia-register": json.dumps(register),
                   "hami.io/node-handshake": "Reported_2099-01-01"}
    capacity = {"nvidia.com/gpu": str(10 * GPUS_PER_NODE)}
    return {"metadata": {"name": name, "annotations": annotations}, "status": {"capacity": capacity,
                                                                                 "allocatable": capacity}}


def generate_mig_cluster(size: int, rng: random.Random
                         ) -> tuple[dict[str, NodeView], dict[str, dict[str, DeviceUsage]]]:
    """``size`` nodes of `mig_node`, read by the cache's node reader; some GPUs in use (a MIG GPU by one 1g.5gb
    instance of a pod placed before), some nodes full."""
    views: dict[str, NodeView] = {}
    usages: dict[str, dict[str, DeviceUsage]] = {}
    for number in range(size):
        state = node_state(node_record(mig_node(number)), now=0.0)
        assert state.inventory is not None, state.error
        full = rng.random() < FULL_NODE_SHARE
        usage: dict[str, DeviceUsage] = {}
        for device in state.inventory.devices:
            if full:
                usage[device.uuid] = DeviceUsage(device.count, device.memory_mib, device.cores)
            elif rng.random() < BUSY_GPU_SHARE:
                usage[device.uuid] = DeviceUsage(1, 4864, 14) if number % 2 == 0 else \
                    DeviceUsage(rng.randint(1, 4), rng.randint(0, device.memory_mib * 3 // 4), rng.randint(0, 80))
        views[state.name] = build_node_view(state.inventory, usage)
        usages[state.name] = usage
    return views, usages


def mig_pods() -> tuple[tuple[str, PodRequest, PodOptions], ...]:
    """The pods of ``--mig``: the typical pods and pods asking MIG instances (``nvidia.com/vgpu-mode: mig``)."""
    mig = pod_options({"nvidia.com/vgpu-mode": "mig"}, node_policy="binpack", gpu_policy="spread")
    spread = pod_options({"nvidia.com/vgpu-mode": "mig"}, node_policy="spread", gpu_policy="binpack")
    return (
        *TYPICAL_PODS,
        ("1 MIG instance 4000 MiB, node binpack", ask(1, memory_mib=4000), mig),
        ("2 MIG instances 9000 MiB, node spread / GPU binpack", ask(2, memory_mib=9000), spread),
        ("3 MIG instances 15000 MiB (one GPU may give several)", ask(3, memory_mib=15000), mig),
        ("1 MIG instance 20 %", ask(1, memory_percent=20), mig),
    )


def generate_family_cluster(size: int, rng: random.Random, family: str, online: float = 0.0
                            ) -> tuple[dict[str, NodeView], dict[str, dict[str, DeviceUsage]]]:
    """``size`` nodes of 8 devices of ``family`` read by the cache's node reader, some in use, some nodes full;
    ``online``: that share of the nodes (Metax sGPU) runs online pods instead (`online_usage`)."""
    views: dict[str, NodeView] = {}
    usages: dict[str, dict[str, DeviceUsage]] = {}
    for number in range(size):
        state = node_state(node_record(family_node(family, number)), now=0.0)
        assert state.inventory is not None, state.error
        full = rng.random() < FULL_NODE_SHARE
        usage = {device.uuid: DeviceUsage(device.count, device.memory_mib, device.cores)
                 for device in state.inventory.devices if full or rng.random() < BUSY_GPU_SHARE}
        if online and not full and rng.random() < online:
            usage = online_usage(state.inventory.devices, rng)
        views[state.name] = build_node_view(state.inventory, usage)
        usages[state.name] = usage
    return views, usages


def family_pods(family: str) -> tuple[tuple[str, PodRequest, PodOptions], ...]:
    """Whole devices of ``family``: 1, 2 and 4, binpack and spread; read from pod objects as the filter reads them."""
    count = DEFAULT_CATALOG[family].resources.count
    shapes = []
    for devices, policy in ((1, "binpack"), (2, "spread"), (4, "binpack"), (1, "spread")):
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {
            "limits": {count: str(devices)}}}]}}
        shapes.append((f"{family} x{devices} {policy}", pod_request(pod, RequestDefaults.of(DEFAULT_CATALOG)),
                       PodOptions(node_policy=policy)))
    return tuple(shapes)


ONLINE_POD_GIB = 8  # each online pod booked or asked: 8 GiB of a card, no cores (HAMi's online class books none)


def online_usage(devices: tuple[Device, ...], rng: random.Random) -> dict[str, DeviceUsage]:
    """A node running online Metax sGPU pods: each card 0 to 3 of them (8 GiB each, no cores, the online class as the
    sharing rule's tags hold it), a card in ten an ordinary whole-card pod instead."""
    usage: dict[str, DeviceUsage] = {}
    for device in devices:
        if rng.random() < 0.1:
            usage[device.uuid] = DeviceUsage(1, device.memory_mib, device.cores, tags=("qos:",))
        elif pods := rng.randint(0, 3):
            usage[device.uuid] = DeviceUsage(pods, pods * ONLINE_POD_GIB * 1024, 0, tags=("class:online",) * pods)
    return usage


def online_pods(family: str) -> tuple[tuple[str, PodRequest, PodOptions], ...]:
    """Online Metax sGPU pods of 1 and 2 sGPUs, 8 GiB each, under binpack and spread: HAMi's online class, ranked by
    how many online pods the cards they get already run (docs/device-families.md#metax-sgpus)."""
    names = DEFAULT_CATALOG[family].resources
    shapes = []
    for devices, policy in ((1, "binpack"), (2, "spread"), (2, "binpack"), (1, "spread")):
        pod = {"metadata": {"name": "p", "annotations": {"metax-tech.com/sgpu-app-class": "online"}},
               "spec": {"containers": [{"name": "c", "resources": {"limits": {
                   names.count: str(devices), names.memory: str(ONLINE_POD_GIB)}}}]}}
        shapes.append((f"{family} online x{devices} {policy}", pod_request(pod, RequestDefaults.of(DEFAULT_CATALOG)),
                       PodOptions(node_policy=policy)))
    return tuple(shapes)


def ask(count: int, *, memory_mib: int = 0, memory_percent: int = 100, cores: int = 0,
        family: str = "NVIDIA") -> PodRequest:
    """A one-container pod (``family`` passed only when not NVIDIA, so that this script also runs on the core
    from before the device families, for ``--record`` there and ``--check`` here)."""
    chosen: dict[str, Any] = {"family": family} if family != "NVIDIA" else {}
    return PodRequest(containers=(ContainerRequest(name="main", init=False, count=count, memory_mib=memory_mib,
                                                   memory_percent=memory_percent, cores=cores, **chosen),))


def npu_ask(count: int, memory_mib: int = NPU_MEMORY_MIB, cores: int = 0) -> PodRequest:
    """A one-container pod asking Ascend 910B3 NPUs (memory as the webhook rounded it)."""
    return PodRequest(containers=(ContainerRequest(name="main", init=False, count=count, memory_mib=memory_mib,
                                                   cores=cores, family=NPU, grouped=True),))


def ascend_pods() -> tuple[tuple[str, PodRequest, PodOptions], ...]:
    """The pods of ``--ascend``."""
    soft = PodOptions(selections=(DeviceSelection(family=NPU, soft_split=True),))
    return (
        ("1 NPU vir05_1c_16g, node binpack", npu_ask(1, NPU_SLICE_MIB), PodOptions()),
        ("4 whole NPUs (HCCS), node binpack", npu_ask(4), PodOptions()),
        ("1 NPU vir10_3c_32g, node spread", npu_ask(1, 32768), PodOptions(node_policy="spread")),
        ("2 whole NPUs (HCCS), node spread", npu_ask(2), PodOptions(node_policy="spread")),
        ("1 NPU soft split 10000 MiB 30 cores", npu_ask(1, 10000, 30), soft),
        ("8 whole NPUs", npu_ask(8), PodOptions()),
    )


def both(gpu: PodRequest, dcu: PodRequest) -> PodRequest:
    """One container asking for a DCU and a GPU (DCU first: families in common-word order)."""
    return PodRequest(containers=dcu.containers + gpu.containers)


TYPICAL_PODS: tuple[tuple[str, PodRequest, PodOptions], ...] = (
    ("1 GPU 4000 MiB, node binpack / GPU spread", ask(1, memory_mib=4000, cores=20), PodOptions()),
    ("2 GPUs 30 %, node binpack / GPU spread", ask(2, memory_percent=30, cores=10), PodOptions()),
    ("1 GPU 10000 MiB on A100 only", ask(1, memory_mib=10000, cores=30), PodOptions(use_types=("A100",))),
    ("1 GPU 2000 MiB, node spread", ask(1, memory_mib=2000, cores=10), PodOptions(node_policy="spread")),
    ("1 GPU 20 %, GPU binpack", ask(1, memory_percent=20, cores=20), PodOptions(gpu_policy="binpack")),
)
def mixed_pods() -> tuple[tuple[str, PodRequest, PodOptions], ...]:
    """The DCU and GPU + DCU pods of ``--mixed`` (built on demand: the core before families has no DCU)."""
    return (
        ("1 DCU 16384 MiB 50 %", ask(1, memory_mib=16384, cores=50, family="DCU"), PodOptions()),
        ("2 DCUs whole", ask(2, memory_percent=100, cores=100, family="DCU"), PodOptions()),
        ("1 GPU 4000 MiB + 1 DCU 8192 MiB", both(ask(1, memory_mib=4000, cores=20),
                                                ask(1, memory_mib=8192, cores=30, family="DCU")), PodOptions()),
    )
IMPOSSIBLE_POD = ask(1, memory_mib=200_000)


T = TypeVar("T")


CLOCK = time.perf_counter  # --cpu-time: time.thread_time, what the decision itself costs on a shared machine


def timed(call: Callable[[], T]) -> tuple[float, T]:
    """Milliseconds taken by ``call`` (by `CLOCK`) and its result."""
    start = CLOCK()
    result = call()
    return (CLOCK() - start) * 1000, result


def percentile(samples: list[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass(slots=True)
class QuotaBook:
    """Namespaces under quota, as the cache keeps them: limits and booked use per namespace and resource."""

    limits: dict[str, dict[str, int]]
    used: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def generous(cls, namespaces: int, memory_mib: int) -> QuotaBook:
        return cls(limits={f"team-{n:04d}": {"nvidia.com/gpumem": memory_mib, "nvidia.com/gpucores": memory_mib,
                                             "hygon.com/dcumem": memory_mib} for n in range(namespaces)})

    def decide(self, namespace: str, request: PodRequest, options: PodOptions, candidates: list[str],
               views: dict[str, NodeView]) -> Placement | NoPlacement:
        """The quota-aware decision of `ClusterCache.place`: what the limits leave the pod, then `choose_node`."""
        quota = NamespaceQuota(namespace, self.limits[namespace], self.used.get(namespace, {})).pod_quota(
            request, DEFAULT_CATALOG)
        result = choose_node(request, options, candidates, views, quota=quota)
        if isinstance(result, Placement):
            booking = pod_booking(result.grants, init_count=request.init_count)
            totals = self.used.setdefault(namespace, {})
            for resource, amount in booking_quota_use(booking, result.grants, QUOTA_RESOURCES, QUOTA_FAMILIES).items():
                totals[resource] = totals.get(resource, 0) + amount
        return result


QUOTA_RESOURCES = quota_resources(DEFAULT_CATALOG)
QUOTA_FAMILIES = family_quota_names(DEFAULT_CATALOG)


def run(size: int, pods: int, seed: int, *, mixed: bool = False, ascend: bool = False,
        quota: QuotaBook | None = None, family: str = "", mig: bool = False, online: float = 0.0) -> list[str]:
    """Generate one cluster, place ``pods`` pods, time the all-fail path, print the figures; the placements."""
    rng = random.Random(seed)
    build_ms, (views, usages) = timed(lambda: generate_family_cluster(size, rng, family, online) if family
                                      else generate_ascend_cluster(size, rng) if ascend
                                      else generate_mig_cluster(size, rng) if mig
                                      else generate_cluster(size, rng, mixed=mixed))
    candidates = list(views)
    per_pod: list[float] = []
    unplaced = 0
    placements: list[str] = []
    shapes = (online_pods(family) if online else family_pods(family)) if family else ascend_pods() if ascend else \
        mig_pods() if mig else TYPICAL_PODS + mixed_pods() if mixed else TYPICAL_PODS
    impossible = family_pods(family)[0][1] if family else npu_ask(1, 200_000) if ascend else IMPOSSIBLE_POD
    if family:  # a pod asking more devices than any node has
        impossible = PodRequest(node_terms=impossible.node_terms, containers=tuple(
            replace(ask, count=GPUS_PER_NODE + 1) for ask in impossible.containers))
    for number in range(pods):
        _, request, options = shapes[number % len(shapes)]
        if quota is None:
            elapsed, result = timed(functools.partial(choose_node, request, options, candidates, views))
        else:
            namespaces = sorted(quota.limits)
            elapsed, result = timed(functools.partial(quota.decide, namespaces[number % len(namespaces)], request,
                                                      options, candidates, views))
        per_pod.append(elapsed)
        placements.append(f"{size} {number} {result.node} {describe_grants(result.grants)}"
                          if isinstance(result, Placement) else f"{size} {number} -")
        if isinstance(result, Placement):
            usage = usages[result.node]
            for uuid, held in pod_booking(result.grants, init_count=request.init_count).items():
                usage[uuid] = usage.get(uuid, DeviceUsage()) + held
            views[result.node] = build_node_view(views[result.node].inventory, usage)
        else:
            unplaced += 1
    fail_runs, retry_runs = [], []
    for _ in range(5):
        # Fresh views (as after usage changed everywhere) carry no remembered failures: the first-time cost.
        fresh = {name: build_node_view(view.inventory, usages.get(name, {})) for name, view in views.items()}
        if quota is None:
            decide = functools.partial(choose_node, impossible, PodOptions(), candidates, fresh)
        else:
            decide = functools.partial(quota.decide, min(quota.limits), impossible, PodOptions(), candidates, fresh)
        elapsed, result = timed(decide)
        assert isinstance(result, NoPlacement) and len(result.reasons) == size
        fail_runs.append(elapsed)
        # kube-scheduler retrying the same pending pod while the nodes are unchanged.
        elapsed, result = timed(decide)
        assert isinstance(result, NoPlacement) and len(result.reasons) == size
        retry_runs.append(elapsed)
    kind = (f" ({family}, online pods on {online:.0%} of the nodes)" if online else f" ({family})" if family else
            " (Ascend 910B3 NPUs, two HCCS groups)" if ascend else
            " (A100s: half the nodes dynamic MIG)" if mig else
            " (a third DCU nodes, a third GPUs + DCUs)" if mixed else "")
    if quota is not None:
        kind += f", pods of {len(quota.limits)} namespaces under quota"
    print(f"{size} nodes x {GPUS_PER_NODE} devices{kind} (cluster generated and views built in {build_ms:.0f} ms)")
    print(f"  {pods} typical pods: median {statistics.median(per_pod):.3f} ms, p95 {percentile(per_pod, 0.95):.3f} ms,"
          f" max {max(per_pod):.3f} ms per pod ({unplaced} not placed)")
    print(f"  all-fail path (reason for every node), 5 runs: median {statistics.median(fail_runs):.1f} ms,"
          f" max {max(fail_runs):.1f} ms; the same pod retried: median {statistics.median(retry_runs):.1f} ms,"
          f" max {max(retry_runs):.1f} ms")
    return placements


def main() -> None:
    """Parse the options and run each cluster size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=300, help="typical pods to place per cluster size")
    parser.add_argument("--sizes", default="1000,5000", help="comma list of node counts")
    parser.add_argument("--seed", type=int, default=7, help="random seed for the generated clusters")
    parser.add_argument("--mixed", action="store_true", help="a third DCU nodes, a third GPU + DCU nodes")
    parser.add_argument("--ascend", action="store_true", help="8 Ascend 910B3 NPUs per node in two HCCS groups")
    parser.add_argument("--mig", action="store_true", help="half the nodes with dynamic MIG A100s, MIG pods too")
    parser.add_argument("--family", default="", metavar="CW",
                        help="8 devices of this family per node (a common word), or all: a row per family")
    parser.add_argument("--online", type=float, default=0.0, metavar="SHARE",
                        help="with --family Metax-SGPU: online pods run on this share of the nodes, and are the pods")
    parser.add_argument("--record", help="write every placement to this file")
    parser.add_argument("--check", help="compare every placement with this file (written by --record)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the thread's CPU, not the wall clock (other processes on the machine do not count)")
    parser.add_argument("--quota", type=int, default=0, metavar="N", help="pods of N namespaces under quota")
    parser.add_argument("--quota-mib", type=int, default=10**13, metavar="MIB",
                        help="each namespace's limit (GPU and DCU memory MiB, GPU cores)")
    arguments = parser.parse_args()
    if arguments.cpu_time:
        global CLOCK
        CLOCK = time.thread_time
    print(f"python {sys.version.split()[0]}, choose_node per pod, candidates = every node")
    placements: list[str] = []
    for size in (int(part) for part in arguments.sizes.split(",")):
        quota = QuotaBook.generous(arguments.quota, arguments.quota_mib) if arguments.quota else None
        families = ([family.cw for family in DEFAULT_CATALOG if family.cw not in COVERED_ELSEWHERE]
                    if arguments.family == "all" else [arguments.family])
        for family in families:
            placements += run(size, arguments.pods, arguments.seed, mixed=arguments.mixed, ascend=arguments.ascend,
                              quota=quota, family=family, mig=arguments.mig, online=arguments.online)
    if arguments.record:
        Path(arguments.record).write_text("\n".join(placements) + "\n")
    if arguments.check:
        expected = Path(arguments.check).read_text().splitlines()
        differing = [(a, b) for a, b in zip(expected, placements, strict=False) if a != b]
        print(f"placements compared with {arguments.check}: {len(placements)} placements, "
              f"{len(differing) + abs(len(expected) - len(placements))} differ")
        for before, after in differing[:5]:
            print(f"  was {before}\n  now {after}")


if __name__ == "__main__":
    main()
