"""Lists against the real kube-apiserver: streamed where it offers them, in pages where it refuses
(docs/performance.md#scale).

Covers: kube-apiserver v1.32 streams a list (``sendInitialEvents``) only when its etcd sends progress notifications
(3.5.13 and later; the e2e tier's Debian etcd 3.4 does not, and kube-apiserver answers 500 "the required storage
feature RequestWatchProgress is disabled"): a `ClusterSync` against the session's control plane takes the path
the etcd allows, falls back without counting an error, and fills the same cache as one told to list in pages;
the running hami-web reports which path it took on ``/metrics``.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request

from hami_web.core.devices import Device
from hami_web.kube import Kube
from hami_web.state.cache import ClusterCache
from hami_web.state.reflector import PAGINATED, STREAMING
from hami_web.state.sync import ClusterSync

from .controlplane import ControlPlane, gpu_container, pod_manifest, wait_until
from .test_scheduling import A40


def etcd_streams(control_plane: ControlPlane) -> bool:
    """Whether the session's etcd sends the progress notifications kube-apiserver needs (3.5.13 or later)."""
    text = subprocess.run([str(control_plane.assets["etcd"]), "--version"], capture_output=True, text=True).stdout
    found = re.search(r"etcd Version: (\d+)\.(\d+)\.(\d+)", text)
    assert found, f"no etcd version in {text!r}"
    return tuple(int(part) for part in found.groups()) >= (3, 5, 13)


def synced(control_plane: ControlPlane, *, streaming: bool) -> tuple[ClusterSync, Kube]:
    kube = Kube.from_kubeconfig(str(control_plane.admin_kubeconfig))
    sync = ClusterSync(ClusterCache(), kube, streaming_lists=streaming)
    sync.start()
    assert sync._cache.wait_synced(60), "no first sync"
    return sync, kube


def test_a_list_takes_the_path_the_api_server_offers_and_fills_the_same_cache(control_plane: ControlPlane,
                                                                              namespace: str) -> None:
    control_plane.create_gpu_node("stream-node", [Device(uuid=f"GPU-stream-{i}", index=i, count=10, memory_mib=46068,
                                                         cores=100, type=A40, numa=0) for i in range(2)])
    for index in range(3):
        control_plane.core.create_namespaced_pod(namespace, pod_manifest(  # type: ignore[arg-type]
            f"plain-{index}", [gpu_container("main")], schedulerName="not-scheduled-here"))
    streams = etcd_streams(control_plane)

    streamed, streamed_kube = synced(control_plane, streaming=True)
    paged, paged_kube = synced(control_plane, streaming=False)
    try:
        for status in (streamed.nodes, streamed.pods):
            assert status.errors == 0
            if streams:
                assert (status.list_mode, status.streaming_refused) == (STREAMING, "")
            else:
                assert status.list_mode == PAGINATED
                assert "RequestWatchProgress" in status.streaming_refused
        assert (paged.nodes.list_mode, paged.pods.list_mode) == (PAGINATED, PAGINATED)
        assert "stream-node" in streamed._cache.node_views()
        assert streamed._cache.node_views().keys() == paged._cache.node_views().keys()
        assert sorted(u.name for u in streamed._cache.pod_usages()) == sorted(u.name for u in paged._cache.pod_usages())
    finally:
        for sync, kube in ((streamed, streamed_kube), (paged, paged_kube)):
            sync.stop(timeout_seconds=0.5)
            kube.close()

    def reported() -> str:
        url = f"http://127.0.0.1:{control_plane.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
        return body if "hami_web_cache_list_streamed" in body else ""

    metrics = wait_until(reported, timeout_seconds=10, what="hami-web's list metrics")
    expected = "1.0" if streams else "0.0"
    for resource in ("nodes", "pods"):
        assert f'hami_web_cache_list_streamed{{resource="{resource}"}} {expected}' in metrics
