"""Dynamic MIG through the real kube-apiserver and kube-scheduler (docs/mig.md#dynamic-mig).

Covers: an A100-40GB node registered in ``mig`` mode with HAMi v2.10's ``migProfiles``; MIG pods created as
``kubectl apply`` would, routed by the webhook and bound by kube-scheduler through the extender, each carrying
``hami.io/vgpu-mig-allocations`` that HAMi's decoder rules accept (a list; ``gpuUUID``, ``profile`` and a placement
of size > 0 per entry; no duplicate container/device index) and that matches the device annotation entry for entry
(same GPU, the profile's memory and cores booked); two containers' instances never overlap; a pod asking more
instances than the GPUs have placements stays Pending with ``CardMigTopologyInfeasible`` in kube-scheduler's
``FailedScheduling`` event.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hami_web.core import names
from hami_web.core.grants import decode_pod_devices
from hami_web.core.migreservations import decode_reservations
from tests.core.builders import A100_MIG_PROFILES, a100_mig_register

from .controlplane import ControlPlane, gpu_container, pod_manifest

PROFILE_MEMORY = {profile["name"]: (profile["memoryMB"], profile["core"]) for profile in A100_MIG_PROFILES}


def _mig_node(control_plane: ControlPlane, namespace: str) -> tuple[str, dict[str, str]]:
    label = {"e2e.hami.io/pool": namespace}
    name = f"{namespace}-a100"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    control_plane.create_node(name, labels=label, devices={"nvidia.com/gpu": "14"},
                              annotations={names.NODE_REGISTER: a100_mig_register(f"GPU-{name}-0", f"GPU-{name}-1"),
                                           names.NODE_HANDSHAKE: f"Reported {stamp}"})
    return name, label


def test_mig_pods_are_bound_with_reservations_hami_accepts(control_plane: ControlPlane, namespace: str) -> None:
    node, label = _mig_node(control_plane, namespace)
    mig = {"nvidia.com/vgpu-mode": "mig"}
    asks = {"infer": [("server", "1", "9000")], "train": [("a", "2", "15000"), ("b", "1", "4000")]}
    for pod, containers in asks.items():
        manifest = pod_manifest(pod, [gpu_container(name, {"nvidia.com/gpu": count, "nvidia.com/gpumem": memory})
                                      for name, count, memory in containers], node_selector=label)
        manifest["metadata"]["annotations"] = mig
        control_plane.core.create_namespaced_pod(namespace, manifest)
        control_plane.wait_bound(namespace, pod)

    occupied: dict[str, list[tuple[int, int]]] = {}
    for pod, containers in asks.items():
        bound = control_plane.pod(namespace, pod)
        assert bound.spec.node_name == node
        annotations = bound.metadata.annotations
        reservations = decode_reservations(annotations[names.POD_MIG_RESERVATIONS])
        grants = decode_pod_devices(annotations[names.POD_DEVICES_ALLOCATED])
        assert [len(entry) for entry in grants] == [int(count) for _, count, _ in containers]
        by_index = {(r.container_index, r.device_index): r for r in reservations}
        assert sorted(by_index) == [(c, d) for c, entry in enumerate(grants) for d in range(len(entry))]
        for container_index, entry in enumerate(grants):
            for device_index, grant in enumerate(entry):
                reservation = by_index[(container_index, device_index)]
                assert reservation.gpu_uuid == grant.uuid
                assert (grant.memory_mib, grant.cores) == PROFILE_MEMORY[reservation.instance.profile]
                placement = reservation.instance.placement
                occupied.setdefault(grant.uuid, []).append((placement.start, placement.end))
    for ranges in occupied.values():
        ranges.sort()
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(ranges)), ranges
    profiles = sorted(r.instance.profile for pod in asks
                      for r in decode_reservations(control_plane.pod(namespace, pod).metadata.annotations[
                          names.POD_MIG_RESERVATIONS]))
    assert profiles == ["1g.10gb", "1g.5gb", "3g.20gb", "3g.20gb"]


def test_more_instances_than_placements_stay_pending(control_plane: ControlPlane, namespace: str) -> None:
    _, label = _mig_node(control_plane, namespace)
    manifest = pod_manifest("greedy", [gpu_container("cuda", {"nvidia.com/gpu": "7", "nvidia.com/gpumem": "9900"})],
                            node_selector=label)
    manifest["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mig"}
    control_plane.core.create_namespaced_pod(namespace, manifest)

    failed = control_plane.wait_event(namespace, "greedy", "FailedScheduling", containing="CardMig")
    # Each A100 holds three 2g.10gb (slices 0-5), with memory and task slots to spare: a fourth has no placement.
    assert "CardMigTopologyInfeasible" in failed.message
    pod = control_plane.pod(namespace, "greedy")
    assert pod.spec.node_name is None
    assert names.POD_MIG_RESERVATIONS not in (pod.metadata.annotations or {})
    control_plane.delete_pod(namespace, "greedy")
