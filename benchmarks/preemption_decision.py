"""Time a device-aware preemption decision (`plan_preemption`) on a generated cluster of full nodes.

Run from anywhere: ``python benchmarks/preemption_decision.py [--sizes 1000,5000] [--holders 2] [--repeat 20]
[--seed S]``.

Every node carries 8 A40 GPUs (46,068 MiB) filled to the last MiB by low-priority pods (``--holders`` per GPU, each an
equal share, priorities 0-9 and start times at random), so no pod fits anywhere without preemption: the worst case
for the dry run, which tries nodes until it has kube-scheduler's number of candidates (10 %, at least 100) and picks
one. The preemptor (priority 1000) asks for one GPU with a whole card's memory and, in a second row, two GPUs.
Printed: median / p95 / max ms per decision. Not a test: no assertions (docs/preemption.md#preemption, speed).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.core.devices import Device, NodeInventory
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.grants import DeviceGrant
from hami_web.core.options import PodOptions
from hami_web.core.preemption import Holder, PreemptionPlan, Preemptor, plan_preemption
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import NodeView, build_node_view, pod_booking, sum_bookings

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


def main() -> None:
    """Parse the arguments, build each cluster and time the decisions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="comma list of node counts")
    parser.add_argument("--holders", type=int, default=2, help="low-priority pods per GPU")
    parser.add_argument("--repeat", type=int, default=20, help="decisions timed per row")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    options = PodOptions(node_policy="binpack", gpu_policy="binpack")
    for size in (int(text) for text in args.sizes.split(",")):
        views, holders = full_cluster(size, args.holders, random.Random(args.seed))
        nodes = sorted(views)
        for count in (1, 2):
            ask = PodRequest(containers=(ContainerRequest(name="main", init=False, count=count,
                                                          memory_mib=MEMORY_MIB),))
            preemptor = Preemptor(uid="p", namespace="prod", name="p", priority=1000, request=ask, options=options)
            samples = []
            victims = 0
            for _ in range(args.repeat):
                started = time.perf_counter()
                plan = plan_preemption(preemptor, nodes, views, holders, [], DEFAULT_CATALOG)
                samples.append((time.perf_counter() - started) * 1000)
                assert isinstance(plan, PreemptionPlan)
                victims = len(plan.chosen.victims)
            samples.sort()
            print(f"{size:>6} nodes x {GPUS_PER_NODE} GPUs, {args.holders} holders/GPU, {count} GPU ask: "
                  f"median {statistics.median(samples):.1f} ms, p95 {samples[int(len(samples) * 0.95) - 1]:.1f} ms, "
                  f"max {samples[-1]:.1f} ms ({victims} victims)")


if __name__ == "__main__":
    main()
