"""What the real kube-apiserver does to a watch, which the watchdog of `hami_web.state.sync` relies on.

Starts etcd and kube-apiserver (the e2e tier's binaries, ``KUBEBUILDER_ASSETS``) and, through hami-web's own
`hami_web.kube.Kube`:

1. opens a pod watch and a node watch with ``allowWatchBookmarks``, creates one pod 5 s later (no node changes),
   and records when each BOOKMARK arrives on the otherwise quiet streams (the cadence the watchdog's bound
   ``--watch-silence-bound`` must exceed);
2. resumes a watch from a resourceVersion taken before a deletion and a creation, and checks it replays both;
3. changes a pod more often than the watch cache keeps (twice 150 changes, 80 s apart) and resumes a watch from a
   version before them, and checks the answer is 410 (`GoneError`), which makes `ClusterSync` list again.

Measured on v1.32.13: a bookmark comes 60 s after the watch opened, then every 60 s, and 2 s before the watch's
timeout — but only once the resource has changed since the watch opened; the node watch gets none.

Run: ``KUBEBUILDER_ASSETS=/tmp/kube-assets python benchmarks/watch_bookmarks.py [--seconds 200]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the e2e harness, as the other benchmarks

from e2e.controlplane import ControlPlane, find_assets
from kubernetes.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec, V1ServiceAccount

from hami_web.kube import GoneError, Kube, WatchEvent, join_pages

CHURN_CHANGES = 150


def _pod(name: str) -> V1Pod:
    return V1Pod(metadata=V1ObjectMeta(name=name, namespace="default"),
                 spec=V1PodSpec(containers=[V1Container(name="c", image="busybox")]))


def main() -> int:
    """Print the bookmark intervals, then the replay and 410 checks; exit 1 if a check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=200, help="how long to watch for bookmarks (200)")
    arguments = parser.parse_args()
    assets = find_assets()
    if assets is None:
        print("set KUBEBUILDER_ASSETS to the folder of etcd, kube-apiserver and kube-scheduler", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="hami-web-bookmarks-") as workdir:
        plane = ControlPlane(Path(workdir), assets)
        try:
            plane.start_api()
            kube = Kube.from_kubeconfig(str(plane.admin_kubeconfig))
            plane.core.create_namespaced_service_account("default", V1ServiceAccount(
                metadata=V1ObjectMeta(name="default")))
            failed = _bookmarks(kube, plane, arguments.seconds) + _replay(kube, plane) + _gone(kube, plane)
        finally:
            plane.stop()
    return 1 if failed else 0


def _bookmarks(kube: Kube, plane: ControlPlane, seconds: int) -> int:
    started = time.monotonic()
    arrivals: dict[str, list[float]] = {"pods": [], "nodes": []}
    version = join_pages(kube.list_pods())[1]

    def record(resource: str, events: Iterator[WatchEvent]) -> None:
        for event in events:
            if event.type == "BOOKMARK":
                arrivals[resource].append(time.monotonic() - started)
                print(f"{resource} bookmark at {arrivals[resource][-1]:6.1f}s", flush=True)

    watchers = [threading.Thread(target=record, args=("pods", kube.watch_pods(
                    resource_version=version, timeout_seconds=seconds))),
                threading.Thread(target=record, args=("nodes", kube.watch_nodes(
                    resource_version=version, timeout_seconds=seconds)))]
    for watcher in watchers:
        watcher.start()
    time.sleep(5)
    plane.core.create_namespaced_pod("default", _pod("first"))
    for watcher in watchers:
        watcher.join()
    for resource, times in arrivals.items():
        gaps = [later - earlier for earlier, later in zip([0.0, *times], times, strict=False)]
        print(f"{resource}: {len(times)} bookmarks in {seconds}s; gaps (the first from the watch's start): "
              + ", ".join(f"{gap:.1f}" for gap in gaps))
    return 0 if arrivals["pods"] and not arrivals["nodes"] else 1


def _replay(kube: Kube, plane: ControlPlane) -> int:
    plane.core.create_namespaced_pod("default", _pod("before"))
    version = join_pages(kube.list_pods())[1]
    plane.core.delete_namespaced_pod("before", "default", grace_period_seconds=0)
    plane.core.create_namespaced_pod("default", _pod("after"))
    seen = []
    for event in kube.watch_pods(resource_version=version, timeout_seconds=3):
        if event.type != "BOOKMARK":
            seen.append((event.type, event.object["metadata"]["name"]))
    print(f"a watch resumed from {version} replayed: {seen}")
    return 0 if ("DELETED", "before") in seen and ("ADDED", "after") in seen else 1


def _gone(kube: Kube, plane: ControlPlane) -> int:
    plane.core.create_namespaced_pod("default", _pod("churn"))
    _, version = join_pages(kube.list_pods())

    def churn() -> None:
        for index in range(CHURN_CHANGES):
            plane.core.patch_namespaced_pod("churn", "default", {"metadata": {"labels": {"n": str(index)}}})

    # The watch cache keeps at least 100 changes and doubles while its oldest is younger than 75 s: changes past
    # its capacity once the oldest are older than that make it forget them, as on a busy cluster.
    churn()
    time.sleep(80)
    churn()
    try:
        events = list(kube.watch_pods(resource_version=version, timeout_seconds=3))
    except GoneError as error:
        print(f"a watch from resourceVersion {version}, {2 * CHURN_CHANGES} pod changes and 80 s later: GoneError "
              f"({error})")
        return 0
    print(f"a watch from resourceVersion {version} was not refused: {len(events)} events")
    return 1


if __name__ == "__main__":
    sys.exit(main())
