"""A dynamic-MIG pod under a namespace quota (docs/quotas.md#namespace-quotas, docs/mig.md#dynamic-mig): the filter
counts the profile an instance will really take, exactly as ``/bind`` counts it, so the two never disagree.

Covers: a pod whose request (4,000 MiB) fits the quota but whose profile (1g.5gb, 4,864 MiB) does not gets one stable
answer, ``ResourceQuotaNotFit`` on every filter, and is never bound (no bind loop: kube-scheduler never gets a node to
bind); with room for the profile it is placed and bound once, and the namespace's books show the profile's memory and
cores, as the bind wrote them.
"""

from __future__ import annotations

from typing import Any

from hami_web.core import names
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from tests.core.builders import a100_mig_register

from .helpers import RuntimeFactory, Scheduler, gpu_limits, gpu_node, gpu_pod, release_lock, wait_for
from .test_quota import TEAM, limit_seen, put_quota

MIG = {"nvidia.com/vgpu-mode": "mig"}


def _pod() -> dict[str, Any]:
    return gpu_pod("mig-job", gpu_limits(1, memory_mib=4000, cores=10), annotations=MIG, namespace=TEAM)


def _cluster(apiserver: LocalCluster, make_runtime: RuntimeFactory, memory_limit: int) -> tuple[Runtime, Scheduler]:
    apiserver.load([gpu_node("a100", register=a100_mig_register("GPU-a"))])
    put_quota(apiserver, {"limits.nvidia.com/gpumem": str(memory_limit)})
    runtime = make_runtime()
    wait_for(lambda: limit_seen(runtime, "nvidia.com/gpumem", memory_limit), what="the quota")
    apiserver.load([_pod()])
    runtime.sync.sync_now()
    return runtime, Scheduler(runtime.app.test_client(), apiserver)


def test_a_profile_over_the_quota_is_refused_by_the_filter_every_time(apiserver: LocalCluster,
                                                                      make_runtime: RuntimeFactory) -> None:
    runtime, scheduler = _cluster(apiserver, make_runtime, 4500)
    binds = 0
    answers = []
    for _ in range(5):  # kube-scheduler's retries: each cycle filters again and binds only what the filter passed
        answer = scheduler.filter("mig-job", ["a100"], TEAM)
        answers.append((answer["NodeNames"] or [], answer["FailedNodes"], answer["Error"]))
        for node in answer["NodeNames"] or []:
            binds += 1
            scheduler.bind("mig-job", node, TEAM)
    assert answers == [([], {"a100": f"1/1 {names.RESOURCE_QUOTA_NOT_FIT}"}, "")] * 5
    assert binds == 0
    pod = apiserver.get("pods", "mig-job", TEAM) or {}
    assert not pod["spec"].get("nodeName")
    assert runtime.cache.namespace_quota(TEAM).used == {}


def test_a_profile_within_the_quota_is_placed_and_booked_as_the_profile(apiserver: LocalCluster,
                                                                        make_runtime: RuntimeFactory) -> None:
    runtime, scheduler = _cluster(apiserver, make_runtime, 4864)
    assert scheduler.schedule("mig-job", ["a100"], TEAM) == "a100"
    release_lock(runtime.kube, "mig-job", "a100", namespace=TEAM)
    wait_for(lambda: runtime.cache.namespace_quota(TEAM).used == {"nvidia.com/gpumem": 4864,
                                                                   "nvidia.com/gpucores": 14},
             what="the profile's memory and cores on the namespace's books")
