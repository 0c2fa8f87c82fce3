"""A family's filter decision against NVIDIA's, decision by decision in one process, on a machine shared with others.

Run from anywhere: ``python benchmarks/filter_ratio.py [--family CW|all] [--sizes 1000] [--pods 300] [--seed S]``.

`filter_decision.py` times one cluster after another, so on a busy machine a burst of other work lands on one run and
not the other, and the ratio of two medians swings by ±30 %. Here the NVIDIA cluster and the family's (the same clusters
and pods as ``filter_decision.py --family CW`` and a run without it, same seed) are decided in turns, the first of each
pair alternating, each decision timed by the thread's CPU: what disturbs one falls on the other too. Printed per family
and size: both medians and p95s and the ratio of the medians (the issue's target: within 1.3×). Not a test: no
assertions.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's hami_web, as filter_decision.py
sys.path.insert(0, str(Path(__file__).resolve().parent))

from filter_decision import (  # the same clusters and pods
    COVERED_ELSEWHERE,
    TYPICAL_PODS,
    family_pods,
    generate_cluster,
    generate_family_cluster,
    percentile,
)

from hami_web.core.choose import Placement, choose_node
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.options import PodOptions
from hami_web.core.requests import PodRequest
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view, pod_booking


class Sequence:
    """One cluster and its pods, placed one after another as the cache books them; `decide` times the next one."""

    def __init__(self, views: dict[str, NodeView], usages: dict[str, dict[str, DeviceUsage]],
                 pods: tuple[tuple[str, PodRequest, PodOptions], ...]) -> None:
        self.views, self.usages, self.pods = views, usages, pods
        self.candidates = list(views)
        self.times: list[float] = []

    def decide(self, number: int) -> None:
        _, request, options = self.pods[number % len(self.pods)]
        decide = functools.partial(choose_node, request, options, self.candidates, self.views)
        start = time.thread_time()
        result = decide()
        self.times.append((time.thread_time() - start) * 1000)
        if isinstance(result, Placement):
            usage = self.usages[result.node]
            for uuid, held in pod_booking(result.grants, init_count=request.init_count).items():
                usage[uuid] = usage.get(uuid, DeviceUsage()) + held
            self.views[result.node] = build_node_view(self.views[result.node].inventory, usage)


def compare(family: str, size: int, pods: int, seed: int) -> None:
    """Decide ``pods`` pods on each cluster in turns and print the figures."""
    nvidia = Sequence(*generate_cluster(size, random.Random(seed)), TYPICAL_PODS)
    other = Sequence(*generate_family_cluster(size, random.Random(seed), family), family_pods(family))
    for number in range(pods):
        pair = (nvidia, other) if number % 2 else (other, nvidia)
        for sequence in pair:
            sequence.decide(number)
    medians = [statistics.median(sequence.times) for sequence in (nvidia, other)]
    print(f"{size} nodes, {family}: median {medians[1]:.3f} ms (p95 {percentile(other.times, 0.95):.3f}) against "
          f"NVIDIA's {medians[0]:.3f} ms (p95 {percentile(nvidia.times, 0.95):.3f}): {medians[1] / medians[0]:.2f}x")


def main() -> None:
    """Parse the options and compare each family and size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="Metax-GPU", metavar="CW", help="a family's common word, or all")
    parser.add_argument("--sizes", default="1000", help="comma list of node counts")
    parser.add_argument("--pods", type=int, default=300, help="pods to place on each cluster")
    parser.add_argument("--seed", type=int, default=7, help="random seed for the generated clusters")
    arguments = parser.parse_args()
    families = ([family.cw for family in DEFAULT_CATALOG if family.cw not in COVERED_ELSEWHERE]
                if arguments.family == "all" else [arguments.family])
    print(f"python {sys.version.split()[0]}, choose_node per pod, candidates = every node, thread CPU, in turns")
    for size in (int(part) for part in arguments.sizes.split(",")):
        for family in families:
            compare(family, size, arguments.pods, arguments.seed)


if __name__ == "__main__":
    main()
