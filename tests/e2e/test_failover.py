"""High availability through the real clients (docs/deployment.md#high-availability-active-and-standby): an
active/standby pair of kube-scheduler + hami-web.

Covers: a second hami-web and a second kube-scheduler with the shipped configuration (leader election on the
shipped Lease) stand by while the first pair schedules; the active pair is killed (SIGKILL) mid-run; the standby's
kube-scheduler takes the Lease over after it expires and scheduling continues through the standby's hami-web, whose
cache was in sync all along; nothing is double booked (checked from the pods' annotations in the API).
"""

from __future__ import annotations

import json
import time

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.grants import decode_pod_devices

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until

A40 = "NVIDIA-NVIDIA A40"
SLOTS, MEMORY_MIB = 4, 20000
# What the webhook would have added; set by hand because the webhook is down with the active pair.
SHARE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000", "nvidia.com/gpucores": "20"}


def _extender_activity(control_plane: ControlPlane, name: str) -> str:
    return json.loads(control_plane.hami_web_get("/readyz", name=name)[1])["extender"]


def _booked(control_plane: ControlPlane, namespace: str) -> dict[str, list[int]]:
    booked: dict[str, list[int]] = {}
    for pod in control_plane.core.list_namespaced_pod(namespace).items:
        annotations = pod.metadata.annotations or {}
        if not pod.spec.node_name or names.POD_DEVICES_ALLOCATED not in annotations:
            continue
        for container in decode_pod_devices(annotations[names.POD_DEVICES_ALLOCATED]):
            for grant in container:
                booked.setdefault(grant.uuid, []).append(grant.memory_mib)
    return booked


def test_the_standby_pair_takes_over_when_the_active_pair_dies(control_plane: ControlPlane, namespace: str) -> None:
    pool = {"e2e.hami.io/pool": namespace}
    for index in range(2):
        node = f"{namespace}-n{index}"
        control_plane.create_gpu_node(node, [Device(uuid=f"GPU-{node}-{i}", index=i, count=SLOTS,
                                                    memory_mib=MEMORY_MIB, cores=100, type=A40, numa=0)
                                             for i in range(2)], labels=pool)
    control_plane.start_hami_web("hami-web-b")
    control_plane.start_scheduler("kube-scheduler-b", hami_web="hami-web-b")

    def create(name: str, share: dict[str, str] = SHARE) -> None:
        control_plane.core.create_namespaced_pod(namespace, pod_manifest(
            name, [gpu_container("cuda", share)], node_selector=pool, schedulerName="hami-scheduler"))

    try:
        for index in range(4):
            create(f"before-{index}")
        for index in range(4):
            control_plane.wait_bound(namespace, f"before-{index}")
        assert _extender_activity(control_plane, "hami-web") != "never called"
        assert _extender_activity(control_plane, "hami-web-b") == "never called"  # a warm standby

        control_plane.processes["kube-scheduler"].stop(kill=True)  # the active pair dies at once
        control_plane.stop_hami_web(kill=True)
        killed_at = time.monotonic()
        for index in range(8):
            create(f"after-{index}")
        wait_until(lambda: control_plane.pod(namespace, "after-0").spec.node_name, timeout_seconds=60,
                   what="the standby to take over and bind", interval_seconds=0.2)
        takeover_seconds = time.monotonic() - killed_at
        for index in range(8):
            control_plane.wait_bound(namespace, f"after-{index}", timeout_seconds=60)
        print(f"\nstandby pair took over and bound its first pod {takeover_seconds:.1f} s after the kill "
              f"(leaseDuration 15 s + retryPeriod 2 s)")
        assert _extender_activity(control_plane, "hami-web-b") != "never called"

        # 12 pods of 6,000 MiB on 4 GPUs of 20,000 MiB (3 fit per GPU): full, and never more than full.
        booked = _booked(control_plane, namespace)
        assert sum(len(shares) for shares in booked.values()) == 12
        for uuid, shares in booked.items():
            assert len(shares) <= SLOTS and sum(shares) <= MEMORY_MIB, (uuid, shares)
    finally:
        # Leave an active pair for the tests that follow: the first pair again, once the standby has let go.
        control_plane.start_hami_web()
        control_plane.processes["kube-scheduler-b"].stop()
        control_plane.stop_hami_web("hami-web-b")
        control_plane.start_scheduler()
        create("probe", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"})
        control_plane.wait_bound(namespace, "probe", timeout_seconds=60)
