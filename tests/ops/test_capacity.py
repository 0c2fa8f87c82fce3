"""``capacity``: how many more pods of a shape fit now, where, and what runs out first.

Covers: the count placed one after another with the real policies, per GPU type and per node, matching
the hand count for ``cluster.yaml`` (golden, JSON); a cordoned node takes none; multi-GPU pods and the
capacity cause reported over the consequence (too few GPUs passed); ``--limit`` cuts the count and says so;
the pod's own policies decide where the first pods go but not how many fit; filling node by node gives
exactly the per-node counts of placing pod after pod with `choose_node` over every node; a shape the filter
would refuse is one line and exit 1.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from hami_web.core.choose import Placement, choose_node
from hami_web.core.noderules import read_pod_needs
from hami_web.core.options import pod_options
from hami_web.core.policy import SchedulingPolicy
from hami_web.core.requests import pod_request
from hami_web.core.usage import pod_booking, with_booking
from hami_web.ops.capacity import PodShape, plan_capacity
from hami_web.ops.snapshot import build_snapshot

from .conftest import CLUSTER, Run, assert_golden


def test_capacity_counts_pods_of_a_shape_by_type(run: Run) -> None:
    outcome = run("capacity", "--gpumem", "10000", "--gpucores", "20", "--type", "A40", "-o", "wide")
    assert (outcome.code, outcome.err) == (0, "")
    assert_golden("capacity-a40-wide.txt", outcome.out)


def test_capacity_json_matches_the_hand_count(run: Run) -> None:
    # gpu-a40-0: GPU0 16068 MiB free -> 1, GPU1 36068 -> 3, GPU2/3 full; gpu-a40-1: GPU0 38068 -> 3,
    # GPU1 -> 4, GPU2 26068 -> 2, GPU3 6068 -> 0; gpu-a40-c is cordoned.
    data = json.loads(run("capacity", "--gpumem", "10000", "--gpucores", "20", "--type", "A40", "-o", "json").out)
    assert data["fits"] == 13
    assert data["by_node"] == {"gpu-a40-1": 9, "gpu-a40-0": 4}
    assert data["by_gpu_type"] == {"NVIDIA-NVIDIA A40": 13}
    assert (data["limited"], data["runs_out_first"]) == (False, "CardInsufficientMemory")


def test_two_gpu_pods_report_memory_not_the_consequence(run: Run) -> None:
    outcome = run("capacity", "--gpus", "2", "--gpumem-percentage", "50")
    assert outcome.code == 0
    assert_golden("capacity-2gpu.txt", outcome.out)
    data = json.loads(run("capacity", "--gpus", "2", "--gpumem-percentage", "50", "-o", "json").out)
    assert (data["fits"], data["runs_out_first"]) == (4, "CardInsufficientMemory")


def test_the_limit_cuts_the_count_and_says_so(run: Run) -> None:
    data = json.loads(run("capacity", "--gpumem", "1000", "--limit", "5", "-o", "json").out)
    assert (data["fits"], data["limited"], data["runs_out_first"]) == (5, True, "")
    assert "at least 5 more pods (stopped at --limit 5)" in run("capacity", "--gpumem", "1000", "--limit", "5").out


@pytest.mark.parametrize(("flags", "message"), [
    pytest.param(["--gpus", "0"], "error: --gpus: must be between 1 and 128, got 0", id="no-gpu"),
    pytest.param(["--gpumem-percentage", "150"],
                 "error: --gpumem-percentage: must be between 0 and 100, got 150", id="percentage"),
    pytest.param(["--gpucores", "150"], "error: --gpucores: must be between 0 and 100, got 150", id="cores"),
])
def test_a_shape_the_filter_refuses_is_one_line_and_exit_1(run: Run, flags: list[str], message: str) -> None:
    outcome = run("capacity", *flags)
    assert (outcome.code, outcome.out, outcome.err) == (1, "", message + "\n")


def test_the_pods_own_policies_change_the_order_not_the_count(run: Run) -> None:
    base = ["capacity", "--gpumem", "10000", "--gpucores", "20", "--limit", "3", "-o", "json"]
    binpack = json.loads(run(*base).out)
    spread = json.loads(run(*base, "--node-policy", "spread", "--gpu-policy", "binpack").out)
    assert (binpack["fits"], spread["fits"]) == (3, 3)
    assert spread["shape"]["node_policy"] == "spread"
    assert binpack["by_node"] != spread["by_node"]  # binpack fills the fullest node first, spread the emptiest
    unlimited = [json.loads(run(*base[:-4], "-o", "json", *extra).out)["fits"]
                 for extra in ([], ["--node-policy", "spread", "--gpu-policy", "binpack"])]
    assert unlimited[0] == unlimited[1]


@pytest.mark.parametrize("shape", [
    PodShape(memory_mib=10000, cores=20),
    PodShape(gpus=2, memory_percent=30, gpu_policy="binpack"),
    PodShape(gpus=2, memory_mib=8000, numa_bind=True, node_policy="spread"),
    PodShape(cores=100),
], ids=["small", "two-gpus-binpack", "numa-spread", "exclusive"])
def test_filling_node_by_node_counts_what_the_filter_would_place_pod_by_pod(shape: PodShape) -> None:
    objects = [doc for doc in yaml.safe_load_all(CLUSTER.read_text()) if doc]
    snapshot = build_snapshot([o for o in objects if o["kind"] == "Node"], [o for o in objects if o["kind"] == "Pod"])
    policies = SchedulingPolicy()
    report = plan_capacity(snapshot, shape, policies)

    # The slow way: the filter's choose_node over every candidate for every pod, booking each placement.
    pod = shape.as_pod(policies)
    request = pod_request(pod, policies.defaults)
    options = pod_options(pod["metadata"]["annotations"], node_policy=policies.node_policy,
                          gpu_policy=policies.gpu_policy)
    views, placed = dict(snapshot.views), Counter()
    offered = list(snapshot.screen(read_pod_needs(pod)).offered)
    while isinstance(result := choose_node(request, options, offered, views),
                     Placement):
        views[result.node] = with_booking(views[result.node], pod_booking(result.grants, init_count=0))
        placed[result.node] += 1

    assert report.fits == sum(placed.values()) > 0
    assert report.by_node == dict(placed)


def test_a_gpu_policy_chain_the_server_accepts_is_accepted_and_a_typo_refused(run: Run) -> None:
    chained = json.loads(run("capacity", "--gpumem", "10000", "--limit", "3", "-o", "json",
                             "--gpu-policy", "binpack, numa").out)
    assert (chained["fits"], chained["shape"]["gpu_policy"]) == (3, "binpack,numa")
    refused = run("capacity", "--gpu-policy", "binpak")
    assert (refused.code, refused.out) == (1, "")
    assert refused.err.startswith('error: --gpu-policy: unknown GPU policy "binpak"')
