"""How long ``/healthz`` and ``/readyz`` take while every app thread is held by a bind stalled on the API.

Starts ``hami-web serve`` (two app threads per listener) against the in-process API server, places four pods
on four nodes, makes the API server hold every node-lock write for `STALL_SECONDS`, sends the four binds
(two hold the extender's threads, two queue), then probes both TLS listeners on a new connection per probe (as
kubelet does: TLS handshake included) until the stall is nearly over. The same probes with the threads free
give the baseline. Prints p50 / p99 / max per phase.

Run: ``python benchmarks/probe_latency.py``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the stall tests/server/test_probes.py sets up

from server.test_probes import APP_THREADS, STALL_SECONDS, gpu_node, gpu_pod, request, stalled_binds

from hami_web.localcluster import LocalCluster
from hami_web.server.local import LocalServer, run_local_server


def _probe_for(server: LocalServer, seconds: float) -> list[float]:
    """Milliseconds of each probe, alternating listeners and paths, for ``seconds``."""
    latencies: list[float] = []
    targets = [(url, path) for url in (server.extender_url, server.webhook_url) for path in ("/healthz", "/readyz")]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        url, path = targets[len(latencies) % len(targets)]
        started = time.perf_counter()
        status, _ = request(server, url, "GET", path, timeout_seconds=30)
        latencies.append((time.perf_counter() - started) * 1000)
        assert status == 200, (url, path, status)
    return latencies


def _summary(label: str, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"{label}: {len(ordered)} probes, p50 {statistics.median(ordered):.1f} ms, p99 {p99:.1f} ms, "
            f"max {ordered[-1]:.1f} ms")


def main() -> int:
    """Print the probe latencies with the app threads free, then held by stalled binds."""
    print(f"load average {os.getloadavg()[0]:.2f}; {APP_THREADS} app threads per listener")
    with LocalCluster(bookmark_interval_seconds=0.5) as cluster, tempfile.TemporaryDirectory() as workdir:
        cluster.load([gpu_node(f"node{index}") for index in range(4)] + [gpu_pod(f"pod{index}") for index in range(4)])
        with run_local_server(cluster.url, Path(workdir), threads=APP_THREADS) as server:
            print(_summary("threads free", _probe_for(server, 5.0)))
            with stalled_binds(cluster, server, pods=4):
                held = _probe_for(server, STALL_SECONDS - 3)
            print(_summary(f"every extender thread held by a bind stalled {STALL_SECONDS:g}s on the API", held))
    return 0


if __name__ == "__main__":
    sys.exit(main())
