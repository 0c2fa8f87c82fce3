"""Time a device-aware preemption decision (`plan_preemption`) on a generated cluster of full nodes.

Run from anywhere: ``python benchmarks/preemption_decision.py [--sizes 1000,5000] [--holders 2] [--repeat 20]
[--seed S]``.

Every node carries 8 A40 GPUs (46,068 MiB) filled to the last MiB by low-priority pods (``--holders`` per GPU, each an
equal share, priorities 0-9 and start times at random), so no pod fits anywhere without preemption: the worst case
for the dry run, which tries nodes until it has kube-scheduler's number of candidates (10 %, at least 100) and picks
one. The preemptor (priority 1000) asks for one GPU with a whole card's memory and, in a second row, two GPUs.
Printed: median / p95 / max ms per decision. Not a test: no assertions (docs/preemption.md#preemption, speed).

``--through-cache`` times what ``/filter`` runs instead: `ClusterCache.preempt` on a cache fed the same nodes and pods
(the snapshot under the lock, the dry run outside it, the hold recorded; each decision a new preemptor, its hold
dropped after), and prints the longest hold of the cache's lock by a decision: what a concurrent filter may wait.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.core.devices import Device, NodeInventory, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.grants import DeviceGrant, encode_pod_devices
from hami_web.core.options import PodOptions
from hami_web.core.preemption import Holder, PreemptionPlan, Preemptor, plan_preemption
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView, build_node_view, pod_booking, sum_bookings
from hami_web.state.cache import ClusterCache
from hami_web.state.holds import Preempting
from hami_web.state.nodes import node_record
from hami_web.state.pods import PodRecord, PodUsage

GPUS_PER_NODE = 8
MEMORY_MIB = 46068


def full_cluster(size: int, holders_per_gpu: int, rng: random.Random
                 ) -> tuple[dict[str, NodeView], dict[str, list[Holder]]]:
    """``size`` nodes whose GPUs are filled by low-priority holders."""
    views: dict[str, NodeView] = {}
    holders: dict[str, list[Holder]] = {}
    share = MEMORY_MIB // holders_per_gpu
    for n in range(size):
        name = f"node-{n:05d}"
        devices = tuple(Device(uuid=f"GPU-{n}-{g}", index=g, count=10, memory_mib=MEMORY_MIB, cores=100,
                               type="NVIDIA-NVIDIA A40") for g in range(GPUS_PER_NODE))
        on_node = []
        for device in devices:
            for h in range(holders_per_gpu):
                memory = share if h < holders_per_gpu - 1 else MEMORY_MIB - share * (holders_per_gpu - 1)
                grants = ((DeviceGrant(uuid=device.uuid, memory_mib=memory, cores=0),),)
                on_node.append(Holder(uid=f"{device.uuid}-{h}", namespace="batch", name=f"{device.uuid}-{h}",
                                      priority=rng.randrange(10), started_at=rng.uniform(0, 10_000),
                                      booking=pod_booking(grants, init_count=0)))
        holders[name] = on_node
        views[name] = build_node_view(NodeInventory(name=name, devices=devices),
                                      sum_bookings(holder.booking for holder in on_node))
    return views, holders


def filled_cache(views: dict[str, NodeView], holders: dict[str, list[Holder]]) -> ClusterCache:
    """A cluster cache fed, as its reflectors would, the nodes of ``views`` and the pods of ``holders``."""
    cache = ClusterCache()
    cache.replace_nodes(node_record({"metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": encode_register_json(view.inventory.devices),
        "hami.io/node-handshake": "Reported_2099-01-01 00:00:00"}}}) for name, view in views.items())
    records = []
    for node, on_node in holders.items():
        for holder in on_node:
            (uuid,) = holder.booking
            grants = ((DeviceGrant(uuid=uuid, memory_mib=holder.booking[uuid].memory_mib, cores=0),),)
            records.append(PodRecord(uid=holder.uid, bound=True, usage=PodUsage(
                uid=holder.uid, namespace=holder.namespace, name=holder.name, node=node, grants=grants,
                booking=holder.booking, devices_text=encode_pod_devices(grants), priority=holder.priority,
                started_at=holder.started_at, bind_phase="success")))
    cache.replace_pods(records, listed_at=time.time())
    cache.mark_synced()
    gc.collect()
    gc.freeze()  # as the server does once synced (state.sync): full collections would walk the cache under the lock
    return cache


def _decide(cache: ClusterCache | None, preemptor: Preemptor, nodes: list[str], views: dict[str, NodeView],
            holders: dict[str, list[Holder]]) -> int:
    """One decision, by the core alone or through ``cache``; returns its victims."""
    if cache is None:
        plan = plan_preemption(preemptor, nodes, views, holders, [], DEFAULT_CATALOG)
        assert isinstance(plan, PreemptionPlan)
        return len(plan.chosen.victims)
    decision = cache.preempt(preemptor, nodes)
    assert isinstance(decision, Preempting), decision
    cache.drop_hold(preemptor.uid, "the benchmark's next decision")
    return len(decision.plan.victims)


def main() -> None:
    """Parse the arguments, build each cluster and time the decisions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="comma list of node counts")
    parser.add_argument("--holders", type=int, default=2, help="low-priority pods per GPU")
    parser.add_argument("--repeat", type=int, default=20, help="decisions timed per row")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--through-cache", action="store_true", help="time ClusterCache.preempt (see the module)")
    args = parser.parse_args()
    options = PodOptions(node_policy="binpack", gpu_policy="binpack")
    for size in (int(text) for text in args.sizes.split(",")):
        views, holders = full_cluster(size, args.holders, random.Random(args.seed))
        nodes = sorted(views)
        cache = filled_cache(views, holders) if args.through_cache else None
        for count in (1, 2):
            ask = PodRequest(containers=(ContainerRequest(name="main", init=False, count=count,
                                                          memory_mib=MEMORY_MIB),))
            samples = []
            victims = 0
            for attempt in range(args.repeat):
                preemptor = Preemptor(uid=f"p-{count}-{attempt}", namespace="prod", name=f"p-{count}-{attempt}",
                                      priority=1000, request=ask, options=options)
                started = time.perf_counter()
                victims = _decide(cache, preemptor, nodes, views, holders)
                samples.append((time.perf_counter() - started) * 1000)
            samples.sort()
            held = ""
            if cache is not None:
                held = f", longest lock hold {cache.lock_hold_snapshot()['filter'].max_seconds * 1000:.1f} ms"
            print(f"{size:>6} nodes x {GPUS_PER_NODE} GPUs, {args.holders} holders/GPU, {count} GPU ask: "
                  f"median {statistics.median(samples):.1f} ms, p95 {samples[int(len(samples) * 0.95) - 1]:.1f} ms, "
                  f"max {samples[-1]:.1f} ms ({victims} victims){held}")


if __name__ == "__main__":
    main()
