"""What the bind-time verification (docs/deployment.md#high-availability-active-and-standby) adds to a bind, against the
real kube-apiserver at 100 pods per node.

Starts the end-to-end tier's control plane (``tests/e2e/controlplane.py``; needs ``KUBEBUILDER_ASSETS``), creates one
node with 8 GPUs and 100 pods bound to it carrying HAMi bookings (and 2,000 pods elsewhere, so the selectors have
something to skip), builds a hami-web runtime against the API and times ``Binder.verify`` — the list of the node's
bound pods at a recent version, and the capacity check, exactly what ``/bind`` runs under the node lock before the
Binding when its cache cannot vouch for the placement (or a booking made apart) — for a placement on that node.
Prints p50 / p99 / max in ms.

    KUBEBUILDER_ASSETS=/tmp/kube-assets python benchmarks/bind_verification.py [--pods-per-node 100] [--rounds 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e.controlplane import SKIP_REASON, ControlPlane, find_assets, gpu_container, pod_manifest

from hami_web.core import names
from hami_web.core.devices import Device
from hami_web.core.grants import DeviceGrant, encode_pod_devices
from hami_web.core.usage import pod_booking
from hami_web.kube import Kube
from hami_web.server.runtime import build_runtime
from hami_web.settings import Settings
from hami_web.state.pods import PodUsage

NODE = "busy-node"
GPUS = 8
A40 = "NVIDIA-NVIDIA A40"


def populate(plane: ControlPlane, pods_per_node: int, other_pods: int) -> str:
    """The busy node with its bound pods (in a namespace the webhook skips, so ``nodeName`` is accepted)."""
    plane.create_gpu_node(NODE, [Device(uuid=f"GPU-{NODE}-{i}", index=i, count=20, memory_mib=81920, cores=100,
                                        type=A40, numa=0) for i in range(GPUS)])
    plane.create_gpu_node("other-node", [Device(uuid="GPU-other-0", index=0, count=10, memory_mib=81920, cores=100,
                                                type=A40, numa=0)])
    namespace = plane.create_namespace("bench-bound", labels={"hami.io/webhook": "ignore"})

    def create(index: int) -> None:
        node = NODE if index < pods_per_node else "other-node"
        uuid = f"GPU-{NODE}-{index % GPUS}" if node == NODE else "GPU-other-0"
        devices = encode_pod_devices(((DeviceGrant(uuid, 500, 0),),))
        annotations = {names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: devices,
                       names.POD_DEVICES_TO_ALLOCATE: devices, names.POD_BIND_PHASE: "success"}
        manifest = pod_manifest(f"pod-{index:05d}", [gpu_container("cuda", {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "500", "nvidia.com/gpucores": "0"})],
            annotations=annotations, nodeName=node, schedulerName="hami-scheduler")
        # The client sends a plain dict body as it is; its annotation names only the V1Pod model.
        plane.core.create_namespaced_pod(namespace, manifest)  # type: ignore[arg-type]

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(pods_per_node + other_pods)))
    candidate = pod_manifest("candidate", [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
                             schedulerName="not-scheduled-here")
    plane.core.create_namespaced_pod(namespace, candidate)  # type: ignore[arg-type]  # a dict body, as above
    return namespace


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods-per-node", type=int, default=100)
    parser.add_argument("--other-pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=300)
    arguments = parser.parse_args()
    assets = find_assets()
    if assets is None:
        print(SKIP_REASON, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hami-web-bind-bench-") as workdir:
        plane = ControlPlane(Path(workdir), assets).start()
        try:
            namespace = populate(plane, arguments.pods_per_node, arguments.other_pods)
            runtime = build_runtime(Settings.of(kubeconfig=str(plane.hami_web_kubeconfig)),
                                    kube=Kube.from_kubeconfig(str(plane.hami_web_kubeconfig)))
            runtime.start()
            assert runtime.cache.wait_synced(60)
            candidate = plane.core.read_namespaced_pod("candidate", namespace)
            assert candidate.metadata is not None and candidate.metadata.uid, "the API server gives every pod a uid"
            grants = ((DeviceGrant(f"GPU-{NODE}-0", 1000, 0),),)
            placed = PodUsage(uid=candidate.metadata.uid, namespace=namespace, name="candidate", node=NODE,
                              grants=grants, booking=pod_booking(grants, init_count=0),
                              devices_text=encode_pod_devices(grants))
            binder = runtime.extender.binder
            # /bind verifies right after writing the pod's booking, at that write's resourceVersion
            written = runtime.kube.patch_pod(namespace, "candidate", {"metadata": {"annotations": {"bench": "1"}}})
            lock_version = written["metadata"]["resourceVersion"]
            refusal = binder.verify(placed, NODE, not_older_than=lock_version)
            assert refusal == "", refusal
            samples, reads, lists = [], [], []
            for _ in range(arguments.rounds):
                started = time.perf_counter()
                binder.verify(placed, NODE, not_older_than=lock_version)
                samples.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                runtime.kube.get_pod(namespace, "candidate")
                reads.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                runtime.kube.list_pods_on_node(NODE, not_older_than=lock_version)
                lists.append((time.perf_counter() - started) * 1000)
            runtime.stop()
            samples.sort()
            print(f"bind-time verification, {arguments.pods_per_node} pods on the node, {arguments.other_pods} "
                  f"elsewhere, real kube-apiserver, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}:")
            print(f"  p50 {statistics.median(samples):.1f} ms   p99 {samples[int(0.99 * len(samples)) - 1]:.1f} ms"
                  f"   max {samples[-1]:.1f} ms   ({arguments.rounds} rounds)")
            print(f"  of which (p50): read the pod {statistics.median(reads):.1f} ms, list the node's pods "
                  f"{statistics.median(lists):.1f} ms")
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
