"""Time what hostile input and a stalled API server cost: quantity refusals, and /filter and /bind answers.

Run from anywhere: ``python benchmarks/api_faults.py [--deadline 15] [--repeat 3]``.

1. Quantities like ``1e2000000`` are parsed and refused (median of 1,000 parses each, in microseconds).
2. ``/filter`` and ``/bind`` run against the in-process API server while every request to it is delayed far
   past the client's timeouts, or its answer dripped one byte per second; printed is how long each route took
   to answer (with ``--extender-deadline`` = ``--deadline``), next to kube-scheduler's 30 s ``httpTimeout``.
Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hami_web.core.quantities import QuantityError, parse_whole_quantity
from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import build_runtime
from hami_web.settings import Settings

HOSTILE_QUANTITIES = ("1e2000000", "1e300000", "1e100000", "1e5000", "3k")
STALL_SECONDS = 120.0
HTTP_TIMEOUT_SECONDS = 30.0


def time_quantities() -> None:
    print("quantity       median µs per parse   outcome")
    for text in HOSTILE_QUANTITIES:
        samples = []
        outcome = ""
        for _ in range(1000):
            started = time.perf_counter()
            try:
                outcome = str(parse_whole_quantity(text, container="c", resource="nvidia.com/gpu"))
            except QuantityError as error:
                outcome = str(error).split(": ", 2)[-1]
            samples.append(time.perf_counter() - started)
        print(f"{text:<14} {statistics.median(samples) * 1e6:>8.1f}              {outcome}")


def _node() -> dict:
    from tests.integration.helpers import gpu_node

    return gpu_node("node1")


def time_stalls(deadline_seconds: float, repeat: int) -> None:
    from tests.integration.helpers import gpu_pod

    print(f"\n--extender-deadline {deadline_seconds:g}s; kube-scheduler httpTimeout {HTTP_TIMEOUT_SECONDS:g}s")
    print("route    API server             answered after   answer")
    for mode in ("delay", "drip"):
        for route in ("filter", "bind"):
            for attempt in range(repeat):
                with LocalCluster(bookmark_interval_seconds=0.1) as apiserver:
                    name = f"pod{attempt}"
                    apiserver.load([_node(), gpu_pod(name)])
                    settings = Settings.of(refresh_interval_seconds=300.0, extender_deadline_seconds=deadline_seconds)
                    runtime = build_runtime(settings, kube=Kube.for_url(apiserver.url))
                    runtime.sync.sync_now()
                    runtime.cache.mark_synced()
                    client = runtime.app.test_client()
                    pod = apiserver.get("pods", name, "default")
                    assert pod is not None, f"pod {name} was loaded"
                    if route == "bind":
                        client.post("/filter", json={"Pod": pod, "NodeNames": ["node1"]})
                    for method, resource, sub in (("GET", "pods", None), ("PATCH", "pods", None),
                                                  ("GET", "nodes", None), ("PATCH", "nodes", None),
                                                  ("POST", "pods", "binding")):
                        apiserver.inject_failure(method, resource, mode=mode, seconds=STALL_SECONDS if mode ==
                                                 "delay" else 1.0, count=100, subresource=sub)
                    started = time.perf_counter()
                    if route == "filter":
                        answer = client.post("/filter", json={"Pod": pod, "NodeNames": ["node1"]}).get_json()
                    else:
                        answer = client.post("/bind", json={"PodName": name, "PodNamespace": "default",
                                                            "PodUID": pod["metadata"]["uid"],
                                                            "Node": "node1"}).get_json()
                    took = time.perf_counter() - started
                    label = "stalled 120 s" if mode == "delay" else "drips 1 byte/s"
                    print(f"/{route:<7} {label:<22} {took:>6.1f} s         {answer['Error'][:70]}")
                    apiserver.clear_failures()
                    runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=Settings().binding.extender_deadline_seconds)
    parser.add_argument("--repeat", type=int, default=1)
    arguments = parser.parse_args()
    time_quantities()
    time_stalls(arguments.deadline, arguments.repeat)


if __name__ == "__main__":
    main()
