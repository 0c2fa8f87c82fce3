"""Which replica is active (docs/deployment.md#high-availability-active-and-standby): ``/readyz`` says whether
kube-scheduler has called this hami-web's extender.

Covers: a standby that was never called says so; after a filter it reports the call; readiness itself still only
depends on the cache (a standby is ready: its cache is in sync, so a failover is a Lease expiry, not a cold start).
"""

from __future__ import annotations

from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime

from .helpers import Scheduler, gpu_node, gpu_pod


def test_a_standby_is_ready_and_says_it_was_never_called_then_reports_the_active_calls(
        apiserver: LocalCluster, runtime: Runtime, scheduler: Scheduler) -> None:
    apiserver.load([gpu_node("node1"), gpu_pod("pod1")])
    standby = runtime.app.test_client().get("/readyz")
    assert standby.status_code == 200
    assert standby.get_json()["extender"] == "never called"

    scheduler.filter("pod1", ["node1"])
    active = runtime.app.test_client().get("/readyz").get_json()
    assert active["status"] == "ready" and active["extender"] == "last called 0 s ago"
