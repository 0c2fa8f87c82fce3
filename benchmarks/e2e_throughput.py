"""A burst of GPU pods through the real kube-scheduler: with hami-web as its extender, and without.

Starts the end-to-end tier's control plane (``tests/e2e/controlplane.py``: etcd, kube-apiserver, hami-web,
kube-scheduler with ``k8s/scheduler-config.yaml``, and the device-plugin stand-in), creates GPU nodes, then

1. creates N GPU pods (through the webhook) for ``hami-scheduler`` — kube-scheduler calls ``/filter`` and
   ``/bind`` for each — and times first create → last pod bound. The device-plugin stand-in releases each node lock
   and sets ``bind-phase=success`` only ``--allocate-delay`` seconds after it sees the pod bound, as kubelet's
   admission and the plugin's Allocate take on a real node; until then the node's HAMi lock is held;
2. starts a second kube-scheduler with the same configuration minus the extender (profile ``plain-scheduler``)
   and times N pods without GPUs through it on the same nodes.

Prints pods per second both ways and their ratio; binds per pod, binds refused on a held node lock, API calls per
bind, and hami-web's filter / bind latency percentiles (estimated from its histograms, as Prometheus'
``histogram_quantile`` does); the nodes the burst used and the whole nodes it left free beside what serial binpack
leaves free for the same pods (computed with the core's own rules); and whether any GPU ended over-booked.
Needs ``KUBEBUILDER_ASSETS`` (see docs/performance.md#end-to-end-tests-real-kube-apiserver-and-kube-scheduler).

``--shape mig-mix`` makes the nodes A100-40GB and the pods a mix of MIG-profile sizes (1g.5gb, 1g.10gb, 2g.10gb,
3g.20gb memory asks); with ``--gpu-mode mig`` the GPUs are registered in dynamic MIG mode with HAMi's A100 profile
table and the pods ask ``nvidia.com/vgpu-mode: mig``, and the check at the end is every GPU's MIG reservations: no
two overlap, every device entry has one, no GPU holds more instances than it has slots. ``--gpu-mode hami-core``
with the same shape is the burst to compare with.

    python benchmarks/e2e_throughput.py [--nodes 200] [--pods 300] [--node-policy binpack|spread]
                                        [--allocate-delay 0.5] [--strict-hami-order]
                                        [--shape default|mig-mix] [--gpu-mode hami-core|mig]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from core.builders import a100_mig_register  # tests/core/builders.py: HAMi's A100-40GB MIG table
from e2e.controlplane import (
    SKIP_REASON,
    ControlPlane,
    drained,
    find_assets,
    gpu_container,
    listed_then_watched,
    pod_manifest,
)

from hami_web.core.choose import Placement, choose_node
from hami_web.core.devices import Device, NodeInventory, decode_register
from hami_web.core.options import pod_options
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.core.usage import DeviceUsage, build_node_view, pod_booking, sum_bookings
from hami_web.settings import ResourceNames
from hami_web.state.pods import pod_usage

A40 = "NVIDIA-NVIDIA A40"
CREATE_THREADS = 8
GPU_LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "10"}
# The mig-mix shape: memory asks that get 1g.5gb, 1g.10gb, 2g.10gb, 1g.5gb and 3g.20gb instances (2 slices of 8 a pod
# on average), one GPU each.
MIG_MIX_MIB = (4000, 9000, 9900, 4000, 15000)
A100_MIG = decode_register(a100_mig_register("GPU-template"))[0]
SHAPES = ("default", "mig-mix")
GPU_MODES = ("hami-core", "mig")


def node_devices(name: str, gpus_per_node: int, shape: str = "default", gpu_mode: str = "hami-core") -> list[Device]:
    """A node's GPUs: A40s for the default shape; A100-40GB for mig-mix, in dynamic MIG mode or as hami-core."""
    if shape == "mig-mix":
        if gpu_mode == "mig":
            return [replace(A100_MIG, uuid=f"GPU-{name}-{i}", index=i) for i in range(gpus_per_node)]
        return [replace(A100_MIG, uuid=f"GPU-{name}-{i}", index=i, count=10, mode="hami-core", mig_profiles=())
                for i in range(gpus_per_node)]
    return [Device(uuid=f"GPU-{name}-{i}", index=i, count=10, memory_mib=46068, cores=100, type=A40, numa=0)
            for i in range(gpus_per_node)]


def burst(pods: int, shape: str, gpu_mode: str, node_policy: str) -> list[dict[str, Any]]:
    """The GPU pods of the burst."""
    annotations = {"hami.io/node-scheduler-policy": node_policy}
    if shape == "default":
        return [pod_manifest(f"gpu-{i:04d}", [gpu_container("cuda", GPU_LIMITS)], annotations=annotations)
                for i in range(pods)]
    if gpu_mode == "mig":
        annotations["nvidia.com/vgpu-mode"] = "mig"
    return [pod_manifest(f"gpu-{i:04d}", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem":
                                                                 str(MIG_MIX_MIB[i % len(MIG_MIX_MIB)])})],
                         annotations=annotations) for i in range(pods)]


def node_names(how_many: int) -> list[str]:
    return [f"bench-node-{index:04d}" for index in range(how_many)]


def create_nodes(plane: ControlPlane, names: Sequence[str], gpus_per_node: int, shape: str, gpu_mode: str) -> None:
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(lambda name: plane.create_gpu_node(name, node_devices(name, gpus_per_node, shape, gpu_mode)),
                      names))


class Timeline:
    """When the counting watch first saw each pod bound (and on which node), and its ``bind-phase=success`` (the
    device plugin done, its node lock released right after): how the burst opened nodes, and how long each node
    stayed locked by one pod."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.bound: dict[str, tuple[float, str]] = {}
        self.succeeded: dict[str, float] = {}

    def see(self, pod: dict[str, Any]) -> None:
        now = time.monotonic() - self.started
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        if node and name not in self.bound:
            self.bound[name] = (now, node)
        if (pod["metadata"].get("annotations") or {}).get("hami.io/bind-phase") == "success" \
                and name not in self.succeeded:
            self.succeeded[name] = now

    def report(self) -> str:
        """Per second of the burst: pods bound, nodes first used; nodes locked at once; bound → success."""
        if not self.bound:
            return ""
        first_use: dict[str, float] = {}
        for at, node in sorted(self.bound.values()):
            first_use.setdefault(node, at)
        seconds = math.ceil(max(at for at, _ in self.bound.values()))
        per_second = [(sum(1 for at, _ in self.bound.values() if second <= at < second + 1),
                       sum(1 for at in first_use.values() if second <= at < second + 1)) for second in range(seconds)]
        held = sorted(self.succeeded[name] - at for name, (at, _) in self.bound.items() if name in self.succeeded)
        edges = sorted([(at, 1) for name, (at, _) in self.bound.items() if name in self.succeeded]
                       + [(at, -1) for at in self.succeeded.values()])
        locked = peak = 0
        for _, step in edges:
            locked += step
            peak = max(peak, locked)
        lines = ["burst timeline (s: pods bound / nodes first used): "
                 + ", ".join(f"{second}: {pods}/{opened}" for second, (pods, opened) in enumerate(per_second))]
        if held:
            lines.append(f"bound -> bind-phase=success (node lock held): p50 {held[len(held) // 2]:.2f} s, "
                         f"p90 {held[int(len(held) * 0.9)]:.2f} s; pods allocating at once: peak {peak}")
        return "\n".join(lines)


def time_pods(plane: ControlPlane, namespace: str, manifests: list[dict[str, Any]], *,
              timeout_seconds: float, timeline: Timeline | None = None) -> float:
    """Seconds from the first create to the last pod bound (a watch on the namespace counts bindings); ``timeline``
    notes when each pod was seen bound and allocated.

    The watch and the creating threads read JSON, not the client's models: decoding a pod into them costs about a
    millisecond of this machine's CPU, and a burst's events (three or four per GPU pod) would charge that to the
    run being measured. The API calls are the same."""
    bound: set[str] = set()
    done = threading.Event()
    resumes = [0]
    core = kubernetes.client.CoreV1Api(plane.api_client)
    wanted = {manifest["metadata"]["name"] for manifest in manifests}

    def count(pods: list[dict[str, Any]]) -> None:
        if timeline is not None:
            for pod in pods:
                if pod["metadata"]["name"] in wanted:
                    timeline.see(pod)
        bound.update(pod["metadata"]["name"] for pod in pods
                     if pod["spec"].get("nodeName") and pod["metadata"]["name"] in wanted)
        if len(bound) == len(wanted):
            done.set()

    def finished() -> bool:  # with a timeline, the watch goes on until every pod's allocation is seen
        return done.is_set() and (timeline is None or len(timeline.succeeded) >= len(wanted))

    def watch() -> None:
        # kube-apiserver closes a watch whose reader falls behind (a burst of a thousand pods can do it to this
        # Python reader), and the client's stream then just ends: list again and resume, counting what was missed.
        deadline = time.monotonic() + timeout_seconds
        while not finished() and time.monotonic() < deadline:
            for pod in listed_then_watched(functools.partial(core.list_namespaced_pod, namespace), stop=finished,
                                           timeout_seconds=max(1, int(deadline - time.monotonic()))):
                count([pod])
            if not done.is_set():
                resumes[0] += 1

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    if timeline is not None:
        timeline.started = started
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(lambda manifest: drained(core.create_namespaced_pod(namespace, manifest,
                                                                          _preload_content=False)), manifests))
    created = time.monotonic() - started
    if not done.wait(timeout_seconds):
        raise SystemExit(f"only {len(bound)}/{len(manifests)} pods bound within {timeout_seconds:.0f} s "
                         f"(the watch counting them {'is still open' if watcher.is_alive() else 'ended'})\n"
                         + why_pending(core, namespace))
    elapsed = time.monotonic() - started
    resumed = f" (the counting watch was resumed {resumes[0]} times)" if resumes[0] else ""
    print(f"  created {len(manifests)} pods in {created:.1f} s; all bound after {elapsed:.1f} s{resumed}")
    return elapsed


def why_pending(core: kubernetes.client.CoreV1Api, namespace: str, *, examples: int = 5) -> str:
    """What the API says about the pods still unbound: their count and a few with kube-scheduler's last word."""
    pods = core.list_namespaced_pod(namespace).items
    pending = [pod for pod in pods if not (pod.spec and pod.spec.node_name)]
    lines = [f"the API lists {len(pods) - len(pending)} bound, {len(pending)} unbound; a few unbound:"]
    for pod in pending[:examples]:
        name = pod.metadata.name if pod.metadata else "?"
        conditions = [f"{condition.reason}: {condition.message}" for condition in
                      (pod.status.conditions if pod.status and pod.status.conditions else [])]
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        last = events[-1].message if events else "no event"
        lines.append(f"  {name}: {'; '.join(conditions) or 'no condition'}; last event: {last}")
    return "\n".join(lines)


# -- hami-web's metrics -------------------------------------------------------------------------------------------


def scrape(plane: ControlPlane) -> dict[str, Any]:
    """hami-web's metric families by name (its plain-HTTP metrics listener)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{plane.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def counter_values(family: Any, label: str) -> dict[str, float]:
    return {sample.labels.get(label, ""): sample.value for sample in family.samples if sample.name.endswith("_total")}


def histogram_buckets(family: Any, **labels: str) -> list[tuple[float, float]]:
    """``(upper bound, cumulative count)`` of one series of a histogram family."""
    return sorted((float(sample.labels["le"]), sample.value) for sample in family.samples
                  if sample.name.endswith("_bucket")
                  and all(sample.labels.get(key) == value for key, value in labels.items()))


def histogram_quantile(quantile: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' estimate: linear interpolation inside the bucket that holds the quantile."""
    if not buckets or buckets[-1][1] == 0:
        return math.nan
    rank = quantile * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for upper_bound, count in buckets:
        if count >= rank:
            if math.isinf(upper_bound):
                return lower_bound
            return lower_bound + (upper_bound - lower_bound) * (rank - lower_count) / max(count - lower_count, 1e-9)
        lower_bound, lower_count = upper_bound, count
    return lower_bound


def histogram_mean(family: Any, **labels: str) -> float:
    def value(suffix: str) -> float:
        return sum(sample.value for sample in family.samples if sample.name.endswith(suffix)
                   and all(sample.labels.get(key) == v for key, v in labels.items()))

    count = value("_count")
    return value("_sum") / count if count else math.nan


def route_label(family: Any, route: str) -> dict[str, str]:
    for sample in family.samples:
        if sample.labels.get("route", "").lstrip("/") == route:
            return {"route": sample.labels["route"]}
    return {"route": route}


# -- what the burst left ----------------------------------------------------------------------------------------


def final_bookings(plane: ControlPlane, namespace: str) -> tuple[dict[str, int], dict[str, dict[str, DeviceUsage]]]:
    """Pods per node, and every GPU's booked usage per node, as the API shows them after the burst."""
    core = kubernetes.client.CoreV1Api(plane.api_client)
    # Unread (``_preload_content=False``) the client returns the urllib3 response, not the V1PodList it declares.
    response: Any = core.list_namespaced_pod(namespace, _preload_content=False)
    import json

    pods = json.loads(response.data)["items"]
    per_node: Counter[str] = Counter()
    bookings: dict[str, list[Mapping[str, DeviceUsage]]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node:
            per_node[node] += 1
        usage = pod_usage(pod)
        if usage is not None:
            bookings.setdefault(usage.node, []).append(usage.booking)
    return dict(per_node), {node: sum_bookings(items) for node, items in bookings.items()}


def over_booked(bookings: Mapping[str, Mapping[str, DeviceUsage]], gpus_per_node: int, shape: str = "default",
                gpu_mode: str = "hami-core") -> list[str]:
    """GPUs whose booked tasks, memory or cores exceed what the node's register annotation offers; on MIG GPUs,
    whose reservations overlap, miss a device entry, or outnumber the GPU's slots."""
    problems = []
    for node, by_uuid in bookings.items():
        devices = {device.uuid: device for device in node_devices(node, gpus_per_node, shape, gpu_mode)}
        for uuid, used in by_uuid.items():
            device = devices.get(uuid)
            if device is None:
                problems.append(f"{node}/{uuid}: not a GPU of the node")
            elif device.mig_profiles:
                # Sorted by start, any overlap shows between neighbours.
                placements = sorted((instance.placement for instance in used.placed),
                                    key=lambda placement: (placement.start, placement.size))
                overlapping = [f"{a.describe()}/{b.describe()}" for a, b in itertools.pairwise(placements)
                               if a.overlaps(b)]
                if overlapping or used.unreserved or used.tasks > device.count:
                    problems.append(f"{node}/{uuid}: overlapping {overlapping}, unreserved {used.unreserved}, "
                                    f"{used.tasks} instances")
            elif used.tasks > device.count or used.memory_mib > device.memory_mib or used.cores > device.cores:
                problems.append(f"{node}/{uuid}: {used}")
    return problems


def serial_binpack_nodes(names: Sequence[str], gpus_per_node: int, manifests: Sequence[dict[str, Any]],
                         node_policy: str, shape: str = "default", gpu_mode: str = "hami-core") -> int:
    """Nodes used when the same pods are placed one at a time, each bound before the next is filtered."""
    defaults = RequestDefaults(resources=ResourceNames(), default_mem_mib=0, default_cores=0)
    views = {name: build_node_view(NodeInventory(name=name, devices=tuple(node_devices(name, gpus_per_node, shape,
                                                                                        gpu_mode))), {})
             for name in names}
    usage: dict[str, dict[str, DeviceUsage]] = {name: {} for name in names}
    used: set[str] = set()
    for manifest in manifests:
        request = pod_request(manifest, defaults)
        options = pod_options(manifest["metadata"].get("annotations") or {}, node_policy=node_policy,
                              gpu_policy="spread")
        result = choose_node(request, options, list(names), views)
        if not isinstance(result, Placement):
            raise SystemExit(f"serial placement found no node for {manifest['metadata']['name']}")
        usage[result.node] = sum_bookings([usage[result.node],
                                           pod_booking(result.grants, init_count=request.init_count)])
        views[result.node] = build_node_view(views[result.node].inventory, usage[result.node])
        used.add(result.node)
    return len(used)


# -- where the CPU goes --------------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[int, float]:
    """``(parent pid, CPU seconds used)`` of one process, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_by_process(plane: ControlPlane) -> dict[str, float]:
    """CPU seconds used so far by each control-plane process and its children (gunicorn's worker), and by this one
    (the pod creators, the watch that times them, the device-plugin stand-in)."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)], used[int(entry)] = _proc_stat(int(entry))
            except (OSError, IndexError, ValueError):
                continue

    def tree(pid: int) -> float:
        return used.get(pid, 0.0) + sum(tree(child) for child, parent in parents.items() if parent == pid)

    totals = {name: tree(process.popen.pid) for name, process in plane.processes.items()
              if process.popen is not None and process.popen.poll() is None}
    totals["benchmark + device-plugin stand-in"] = used.get(os.getpid(), 0.0)
    return totals


def cpu_used_between(before: Mapping[str, float], after: Mapping[str, float]) -> str:
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(spent.items(), key=lambda item: -item[1])
                     if seconds >= 0.05) + f" (total {sum(spent.values()):.1f} CPU s)"


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--node-policy", choices=("binpack", "spread"), default="binpack",
                        help="hami.io/node-scheduler-policy of the GPU pods (binpack is hami-web's default)")
    parser.add_argument("--allocate-delay", type=float, default=0.5, metavar="SECONDS",
                        help="how long after a bind the device-plugin stand-in releases the node lock (0.5)")
    parser.add_argument("--strict-hami-order", action="store_true",
                        help="run hami-web with --busy-nodes-last=false (HAMi's node order) for comparison")
    parser.add_argument("--hami-web-arg", action="append", default=[], metavar="FLAG",
                        help="an extra flag for hami-web serve, e.g. --hami-web-arg=--threads=16 (repeatable)")
    parser.add_argument("--skip-plain", action="store_true", help="do not time the run without the extender")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--shape", choices=SHAPES, default="default",
                        help="the pods and GPUs: A40s and 4,000 MiB pods, or A100-40GB and mixed MIG-profile sizes")
    parser.add_argument("--gpu-mode", choices=GPU_MODES, default="hami-core",
                        help="register the mig-mix GPUs in dynamic MIG mode (pods ask nvidia.com/vgpu-mode: mig)")
    arguments = parser.parse_args()
    if arguments.gpu_mode == "mig" and arguments.shape != "mig-mix":
        parser.error("--gpu-mode mig needs --shape mig-mix")
    assets = find_assets()
    if assets is None:
        print(SKIP_REASON, file=sys.stderr)
        return 2
    hami_web_arguments = (*(("--busy-nodes-last=false",) if arguments.strict_hami_order else ()),
                          *arguments.hami_web_arg)
    with tempfile.TemporaryDirectory(prefix="hami-web-e2e-bench-") as workdir:
        plane = ControlPlane(Path(workdir), assets, hami_web_arguments=hami_web_arguments).start()
        try:
            assert plane.device_plugin is not None
            plane.device_plugin.allocate_delay_seconds = arguments.allocate_delay
            names = node_names(arguments.nodes)
            create_nodes(plane, names, arguments.gpus_per_node, arguments.shape, arguments.gpu_mode)
            time.sleep(2)  # let hami-web's cache and kube-scheduler's informer see every node
            gpu_namespace = plane.create_namespace("bench-gpu")
            plain_namespace = plane.create_namespace("bench-plain")
            print(f"{arguments.nodes} nodes x {arguments.gpus_per_node} GPUs ({arguments.shape}, "
                  f"{arguments.gpu_mode}), {arguments.pods} pods "
                  f"each way, allocate delay {arguments.allocate_delay:g} s, {os.cpu_count()} CPUs, load "
                  f"{os.getloadavg()[0]:.2f}{', strict HAMi node order' if arguments.strict_hami_order else ''}"
                  f"{', hami-web ' + ' '.join(arguments.hami_web_arg) if arguments.hami_web_arg else ''}")

            print(f"with the extender (hami-scheduler -> /filter, /bind; node policy {arguments.node_policy}):")
            gpu_pods = burst(arguments.pods, arguments.shape, arguments.gpu_mode, arguments.node_policy)
            cpu_before = cpu_seconds_by_process(plane)
            timeline = Timeline()
            with_extender = time_pods(plane, gpu_namespace, gpu_pods, timeout_seconds=arguments.timeout,
                                      timeline=timeline)
            time.sleep(arguments.allocate_delay + 1.0)  # the last allocations' bind-phase=success, for the timeline
            cpu_with = cpu_used_between(cpu_before, cpu_seconds_by_process(plane))
            metrics = scrape(plane)
            per_node, bookings = final_bookings(plane, gpu_namespace)

            without_extender = math.nan
            cpu_without = ""
            if not arguments.skip_plain:
                plane.start_scheduler("plain-scheduler", with_extender=False, profile_name="plain-scheduler",
                                      leader_elect=False)
                print("without the extender (plain-scheduler, pods without GPUs):")
                plain_pods = [pod_manifest(f"plain-{i:04d}", [gpu_container("app")],
                                           schedulerName="plain-scheduler") for i in range(arguments.pods)]
                cpu_before = cpu_seconds_by_process(plane)
                without_extender = time_pods(plane, plain_namespace, plain_pods, timeout_seconds=arguments.timeout)
                cpu_without = cpu_used_between(cpu_before, cpu_seconds_by_process(plane))
            load = os.getloadavg()[0]
        finally:
            plane.stop()

    binds = counter_values(metrics["hami_web_bind_results"], "result")
    bind_calls = sum(binds.values())
    latency = metrics["hami_web_request_duration_seconds"]
    calls = metrics["hami_web_bind_api_calls"]
    with_rate = arguments.pods / with_extender
    print(f"\nwith extender:     {with_rate:6.1f} pods/s ({with_extender:.1f} s)")
    if not math.isnan(without_extender):
        without_rate = arguments.pods / without_extender
        print(f"without extender:  {without_rate:6.1f} pods/s ({without_extender:.1f} s)")
        print(f"ratio:             {with_rate / without_rate:.2f} (the extender adds "
              f"{100 * (with_extender / without_extender - 1):.0f} % to the time)")
    print(f"binds:             {bind_calls:.0f} for {arguments.pods} pods = {bind_calls / arguments.pods:.2f} per pod; "
          + ", ".join(f"{result} {count:.0f}" for result, count in sorted(binds.items())))
    print(f"lock refusals:     {binds.get('locked', 0):.0f} = {percent(binds.get('locked', 0), bind_calls)} of binds")
    waits = counter_values(metrics["hami_web_node_lock_waits"], "outcome") if "hami_web_node_lock_waits" in metrics \
        else {}
    print("lock waits:        " + (", ".join(f"{outcome} {count:.0f}" for outcome, count in sorted(waits.items()))
                                   or "none"))
    rereads = counter_values(metrics["hami_web_bind_rereads"], "what")
    call_counts = histogram_buckets(calls)
    exact = {int(bound): count - previous for (bound, count), (_b, previous) in
             zip(call_counts, [(0.0, 0.0), *call_counts[:-1]], strict=True) if count > previous}
    print(f"API calls / bind:  mean {histogram_mean(calls):.2f}; binds by calls (bucket <=): "
          + ", ".join(f"{bound if not math.isinf(bound) else '>24'}: {count:.0f}" for bound, count in exact.items())
          + f"; re-reads after a 409: node {rereads.get('node', 0):.0f}, pod {rereads.get('pod', 0):.0f}"
          + f"; node's pods listed (cache behind the lock): {rereads.get('node_pods', 0):.0f}")
    for route in ("filter", "bind", "webhook"):
        labels = route_label(latency, route)
        buckets = histogram_buckets(latency, **labels)
        print(f"/{route + ' latency:':<17} mean {1000 * histogram_mean(latency, **labels):.1f} ms, "
              f"p50 {1000 * histogram_quantile(0.5, buckets):.1f} ms, "
              f"p99 {1000 * histogram_quantile(0.99, buckets):.1f} ms (n={buckets[-1][1] if buckets else 0:.0f})")
    serial_used = serial_binpack_nodes(names, arguments.gpus_per_node, gpu_pods, arguments.node_policy,
                                       arguments.shape, arguments.gpu_mode)
    free, serial_free = arguments.nodes - len(per_node), arguments.nodes - serial_used
    print(f"nodes used:        {len(per_node)} (serial {arguments.node_policy}: {serial_used}); whole nodes left "
          f"free: {free} vs {serial_free} = {percent(free, serial_free)} of serial {arguments.node_policy}'s")
    problems = over_booked(bookings, arguments.gpus_per_node, arguments.shape, arguments.gpu_mode)
    print(timeline.report())
    print(f"over-booked GPUs:  {len(problems)}" + (f" ({'; '.join(problems[:5])})" if problems else " (checked "
          f"{sum(len(by_uuid) for by_uuid in bookings.values())} GPUs against their capacity)"))
    print(f"CPU seconds, with the extender: {cpu_with}")
    if cpu_without:
        print(f"CPU seconds, without:          {cpu_without}")
    print(f"load average at the end: {load:.2f}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
