"""hami-web's CPU per request through its HTTPS front, as kube-apiserver's webhook client drives it (a script).

Run: ``python benchmarks/front_cpu.py [--requests 4000] [--connections 8] [--rounds 3] [--source DIR ...]``.

Starts ``hami-web serve`` (gunicorn, the front worker, TLS) against the in-process API server holding one GPU
node, then a client in a separate process that opens ``--connections`` kept-alive TLS connections (as
kube-apiserver's webhook client and kube-scheduler's extender client keep theirs) and sends ``--requests``
requests spread over them: the AdmissionReview kube-apiserver POSTs to ``/webhook`` and the ``ExtenderArgs``
kube-scheduler POSTs to ``/filter`` (`/work/shared/fixtures`, real bodies; ``--paths`` picks). ``/bind`` is left
out: every bind changes the cluster, so the same body cannot be sent twice.

The figure is hami-web's CPU seconds per 1,000 requests: utime + stime of the gunicorn worker process
(``/proc/<pid>/stat``) from just before the client's first timed request to just after its last; CPU is far
less noisy than wall time on a shared machine. Also printed: the worker's idle CPU per second (its background
threads: watches, heartbeats), requests per second, and latency percentiles as the client saw them.

A/B in one sitting: each ``--source DIR`` is a source tree (e.g. ``git archive main | tar -x -C /tmp/main``)
whose ``hami_web`` the server runs from (PYTHONPATH); one server per source, started together, and rounds
alternate between them; printed last, each source's CPU per request over the first's, round by round (the
machine's load moves both sides of a round alike). Without ``--source``, this tree.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hami_web.core.devices import Device, encode_register_json
from hami_web.localcluster import LocalCluster
from hami_web.server.local import LocalServer, run_local_server

FIXTURES = Path(os.environ.get("HAMI_FIXTURES", "/work/shared/fixtures"))
CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
THIS_TREE = str(Path(__file__).resolve().parents[1])
WARMUP_REQUESTS_PER_CONNECTION = 20


def _node(name: str) -> dict[str, Any]:
    devices = [Device(uuid=f"{name}-gpu{i}", index=i, count=10, memory_mib=46068, cores=100,
                      type="NVIDIA-NVIDIA A40", numa=0) for i in range(4)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {
                "hami.io/node-nvidia-register": encode_register_json(devices),
                "hami.io/node-handshake": "Requesting_2099-01-01 00:00:00"}},
            "status": {"allocatable": {"nvidia.com/gpu": "40"}}}


def _bodies() -> dict[str, bytes]:
    """Path → the body sent to it (the fixtures as captured)."""
    return {"/webhook": (FIXTURES / "admission-review-v1.json").read_bytes(),
            "/filter": (FIXTURES / "extender-filter-args.json").read_bytes()}


def _worker_pid(arbiter: int) -> int:
    """The gunicorn worker: the arbiter's one child."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{arbiter}/task/{arbiter}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise RuntimeError(f"gunicorn arbiter {arbiter} has no worker")


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """utime + stime of a process (all its threads) and of its main thread (the event loop's), in seconds."""
    seconds = []
    for stat in (Path(f"/proc/{pid}/stat"), Path(f"/proc/{pid}/task/{pid}/stat")):
        fields = stat.read_text().rsplit(")", 1)[1].split()
        seconds.append((int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND)
    return seconds[0], seconds[1]


# -- the client (a separate process, as kube-apiserver is) ------------------------------------------------------


def _client(spec: dict[str, Any]) -> None:
    """Connect, warm up, say ``ready``, wait for ``go``, send the requests, print the latencies as JSON."""
    context = ssl.create_default_context(cafile=spec["ca"])
    bodies = {path: body.encode("latin-1") for path, body in spec["bodies"].items()}
    plan = [(spec["urls"][path], path) for path in spec["paths"]]
    per_connection = spec["requests"] // spec["connections"]
    connections: list[dict[str, http.client.HTTPSConnection]] = []
    for _ in range(spec["connections"]):
        opened = {}
        for url in {url for url, _ in plan}:
            parts = urlsplit(url)
            opened[url] = http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=30)
        connections.append(opened)

    def send(opened: dict[str, http.client.HTTPSConnection], index: int, latencies: list[float] | None) -> None:
        url, path = plan[index % len(plan)]
        started = time.perf_counter()
        opened[url].request("POST", path, body=bodies[path], headers={"Content-Type": "application/json"})
        response = opened[url].getresponse()
        answer = response.read()
        if latencies is not None:
            latencies.append(time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {answer[:300]!r}")

    for opened in connections:
        for index in range(WARMUP_REQUESTS_PER_CONNECTION):
            send(opened, index, None)
    print("ready", flush=True)
    sys.stdin.readline()
    results: list[list[float]] = [[] for _ in connections]
    errors: list[BaseException] = []

    def run(number: int) -> None:
        try:
            for index in range(per_connection):
                send(connections[number], index + number, results[number])
        except BaseException as error:  # reported by the parent
            errors.append(error)

    threads = [threading.Thread(target=run, args=(number,)) for number in range(len(connections))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    print(json.dumps({"elapsed": elapsed, "latencies": [value for one in results for value in one],
                      "errors": [repr(error) for error in errors]}), flush=True)


# -- the parent ------------------------------------------------------------------------------------------------


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _measure(server: LocalServer, worker: int, args: argparse.Namespace) -> dict[str, float]:
    urls = {"/webhook": server.webhook_url, "/filter": server.extender_url}
    spec = {"ca": str(server.ca_path), "urls": urls, "paths": args.paths, "requests": args.requests,
            "connections": args.connections,
            "bodies": {path: body.decode("latin-1") for path, body in _bodies().items()}}
    client = subprocess.Popen([sys.executable, __file__, "--client"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert client.stdin is not None and client.stdout is not None
    client.stdin.write(json.dumps(spec) + "\n")
    client.stdin.flush()
    if client.stdout.readline().strip() != "ready":
        raise RuntimeError("the client failed before its first timed request")
    idle_before = _cpu_seconds(worker)
    time.sleep(args.idle_seconds)
    before = _cpu_seconds(worker)
    client.stdin.write("go\n")
    client.stdin.flush()
    report = json.loads(client.stdout.readline())
    after = _cpu_seconds(worker)
    client.wait()
    if report["errors"]:
        raise RuntimeError(f"client errors: {report['errors'][:3]}")
    ordered = sorted(report["latencies"])
    count = len(ordered)
    return {"cpu_per_1000": (after[0] - before[0]) / count * 1000,
            "loop_cpu_per_1000": (after[1] - before[1]) / count * 1000,
            "idle_cpu_per_second": (before[0] - idle_before[0]) / args.idle_seconds,
            "requests_per_second": count / report["elapsed"],
            "p50_ms": statistics.median(ordered) * 1000, "p95_ms": _percentile(ordered, 0.95) * 1000,
            "p99_ms": _percentile(ordered, 0.99) * 1000, "requests": count}


def _line(label: str, result: dict[str, float]) -> str:
    return (f"{label:>28}: {result['cpu_per_1000']:.3f} CPU s / 1,000 requests (event loop's thread "
            f"{result['loop_cpu_per_1000']:.3f}; {int(result['requests'])} requests, "
            f"{result['requests_per_second']:.0f}/s), p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms, "
            f"p99 {result['p99_ms']:.1f} ms; idle {result['idle_cpu_per_second'] * 1000:.1f} ms CPU/s; "
            f"load {os.getloadavg()[0]:.2f}")


def main() -> int:
    """Start one server per source, alternate measured rounds between them, print each round and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)  # the spec comes on stdin
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="app threads per listener (serve's --threads)")
    parser.add_argument("--paths", nargs="+", default=["/webhook"], choices=["/webhook", "/filter"])
    parser.add_argument("--idle-seconds", type=float, default=1.0)
    parser.add_argument("--source", action="append", default=[], help="a source tree to run the server from")
    args = parser.parse_args()
    if args.client:
        _client(json.loads(sys.stdin.readline()))
        return 0
    sources = args.source or [THIS_TREE]
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}; {os.cpu_count()} CPUs; "
          f"{args.requests} requests per round over {args.connections} connections to {' + '.join(args.paths)}")
    filter_args = json.loads(_bodies()["/filter"])
    with ExitStack() as stack:
        cluster = stack.enter_context(LocalCluster())
        cluster.load([_node(name) for name in filter_args["NodeNames"]]
                     + [{"apiVersion": "v1", "kind": "Pod", **filter_args["Pod"]}])
        servers = []
        for source in sources:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            os.environ["PYTHONPATH"] = source
            os.chdir(source)  # ``python -m`` puts the working directory first on the server's path
            server = stack.enter_context(run_local_server(cluster.url, workdir, threads=args.threads))
            os.chdir(THIS_TREE)
            servers.append((source, server, _worker_pid(server.process.pid)))
        os.environ.pop("PYTHONPATH")
        results: dict[str, list[dict[str, float]]] = {source: [] for source in sources}
        for round_number in range(args.rounds):
            for source, server, worker in servers if round_number % 2 == 0 else reversed(servers):
                result = _measure(server, worker, args)
                results[source].append(result)
                print(_line(f"round {round_number + 1} {Path(source).name}", result), flush=True)
        for source, measured in results.items():
            medians = {key: statistics.median(result[key] for result in measured) for key in measured[0]}
            print(_line(f"median {Path(source).name}", medians))
        baseline = results[sources[0]]
        for source in sources[1:]:  # round by round: the machine's load moves both sides of a pair alike
            ratios = sorted(result["cpu_per_1000"] / base["cpu_per_1000"]
                            for result, base in zip(results[source], baseline, strict=True))
            print(f"{Path(source).name} / {Path(sources[0]).name}, CPU per request round by round: median "
                  f"{statistics.median(ratios):.2f} ({', '.join(f'{ratio:.2f}' for ratio in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
