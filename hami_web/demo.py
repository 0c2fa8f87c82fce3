"""``hami-web demo``: the whole service on one machine with no cluster.

It starts the in-process Kubernetes API server seeded with GPU nodes as HAMi's device plugin registers them,
starts the real server (``hami-web serve``, gunicorn over TLS with a throwaway certificate, talking to that
API server through a kubeconfig), then plays kube-apiserver and kube-scheduler for a list of pods: each pod
goes through ``/webhook``, is created, goes through ``/filter`` and ``/bind`` over HTTPS, and the demo prints
what happened and the device usage the server reports on ``/metrics``. The demo cluster has a Hygon DCU node, a
Cambricon MLU node, an Ascend 910B node and a Kunlunxin XPU node and vXPU node beside the NVIDIA ones (the server runs
with ``--enable-ascend``): every family is played alike (its devices read from the family's own annotations, through
the same reader as the cache), so a DCU, MLU, NPU or XPU pod shows the cards it got.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import logging
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hami_web.core import names
from hami_web.core.devices import AnnotationError
from hami_web.core.families import build_catalog
from hami_web.core.grants import describe_grants, families_of
from hami_web.kube import Kube, KubeError
from hami_web.localcluster import LocalCluster
from hami_web.server.local import LocalServer, run_local_server
from hami_web.state.pods import pod_usage

EXPECT_ANNOTATION = "demo.hami.io/expect"
# The demo's server runs with NVIDIA, Hygon DCU, Cambricon MLU and Ascend (--enable-ascend; no --enable-iluvatar).
SERVER_ARGUMENTS = ("--refresh-interval", "10s", "--enable-ascend")
CATALOG = build_catalog(enable={"ascend"})


@dataclass(slots=True)
class Outcome:
    """One row of the demo's table."""

    pod: str
    verdict: str
    node: str = "-"
    gpus: str = "-"
    reason: str = ""
    expect: str = ""
    families: str = "-"


def _example(name: str) -> Path:
    return Path(str(resources.files("hami_web") / "examples" / name))


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``hami-web demo``."""
    parser = commands.add_parser("demo", help="run the service against an in-process cluster and show decisions",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", type=Path, default=None, help="nodes and pods to seed (YAML)")
    parser.add_argument("--pods", type=Path, default=None, help="pods to submit, in order (YAML)")
    parser.add_argument("--keep-serving", action="store_true",
                        help="keep the server and API server up after the run and print curl examples")
    parser.set_defaults(handler=run_demo)


class _Https:
    """Minimal HTTPS JSON client that trusts only the demo's CA, as kube-apiserver trusts the caBundle."""

    def __init__(self, base_url: str, ca_file: Path) -> None:
        self.base_url = base_url
        self._context = ssl.create_default_context(cafile=str(ca_file))

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base_url + path, context=self._context, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def post(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self._context, timeout=35) as response:
            return json.loads(response.read())


def _admission_review(pod: dict[str, Any]) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
        "name": metadata.get("name", ""), "namespace": metadata.get("namespace", "default"), "object": pod}}


def _play(pod: dict[str, Any], *, webhook: _Https, extender: _Https, cluster: LocalCluster, kube: Kube,
          node_names: list[str]) -> Outcome:
    name = pod["metadata"]["name"]
    namespace = pod["metadata"].setdefault("namespace", "default")
    expect = (pod["metadata"].get("annotations") or {}).get(EXPECT_ANNOTATION, "")
    outcome = Outcome(pod=name, verdict="", expect=expect)
    review = webhook.post("/webhook", _admission_review(pod))["response"]
    if not review.get("allowed"):
        outcome.verdict, outcome.reason = "denied", review.get("status", {}).get("message", "")
        return outcome
    admitted = copy.deepcopy(pod)
    if review.get("patch"):
        admitted = jsonpatch.apply_patch(admitted, json.loads(base64.b64decode(review["patch"])))
    cluster.load([admitted])
    created = cluster.get("pods", name, namespace) or admitted
    if created["spec"].get("schedulerName") != "hami-scheduler":
        outcome.verdict, outcome.reason = "admitted", "asks for no device: left to the default scheduler"
        return outcome
    result = extender.post("/filter", {"Pod": created, "Nodes": None, "NodeNames": node_names})
    if result.get("Error"):
        outcome.verdict, outcome.reason = "error", result["Error"]
        return outcome
    if not result.get("NodeNames"):
        failed = result.get("FailedNodes") or {}
        outcome.verdict = "unschedulable"
        outcome.reason = "; ".join(f"{node}: {reason}" for node, reason in sorted(failed.items()))
        return outcome
    node = result["NodeNames"][0]
    bound = extender.post("/bind", {"PodName": name, "PodNamespace": namespace,
                                  "PodUID": created["metadata"]["uid"], "Node": node})
    if bound.get("Error"):
        outcome.verdict, outcome.node, outcome.reason = "bind failed", node, bound["Error"]
        return outcome
    # Play HAMi's device plugins: they set the container up, mark the bind done and release the node locks.
    kube.patch_pod(namespace, name, {"metadata": {"annotations": {names.POD_BIND_PHASE: "success"}}})
    kube.patch_node(node, {"metadata": {"annotations": dict.fromkeys(CATALOG.lock_keys())}})
    outcome.verdict, outcome.node = "scheduled", node
    try:
        usage = pod_usage(cluster.get("pods", name, namespace) or {}, catalog=CATALOG)
    except AnnotationError as error:
        outcome.reason = f"its device annotation does not parse: {error}"
        return outcome
    if usage is not None:
        outcome.gpus = describe_grants(usage.grants) or "-"
        outcome.families = ",".join(families_of(usage.grants)) or "-"
    return outcome


def _print_table(rows: list[list[str]], headers: list[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def _print_outcomes(outcomes: list[Outcome]) -> None:
    _print_table([[o.pod, o.verdict, o.node, o.families, o.gpus] for o in outcomes],
                 ["POD", "VERDICT", "NODE", "FAMILY", "DEVICES"])
    print()
    for o in outcomes:
        print(f"- {o.pod}: {o.expect}")
        if o.reason:
            print(f"    {o.verdict}: {o.reason}")


def _print_usage(metrics_text: str) -> None:
    rows: dict[tuple[str, str], dict[str, float]] = {}
    types: dict[tuple[str, str], str] = {}
    families: dict[tuple[str, str], str] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "hami_web_device_info":
            families.update(((s.labels["node"], s.labels["device_uuid"]), s.labels["family"]) for s in family.samples)
        if not family.name.startswith("hami_gpu_"):
            continue
        for sample in family.samples:
            key = (sample.labels["node"], sample.labels["device_uuid"])
            rows.setdefault(key, {})[sample.name] = sample.value
            types[key] = sample.labels["device_type"]
    table = []
    for (node, device), values in sorted(rows.items()):
        mib = 1024 * 1024
        table.append([node, device, families.get((node, device), "-"), types[(node, device)],
                      f"{values.get('hami_gpu_shared_count', 0):.0f}",
                      f"{values.get('hami_gpu_memory_allocated_bytes', 0) / mib:.0f}/"
                      f"{values.get('hami_gpu_memory_limit_bytes', 0) / mib:.0f}",
                      f"{values.get('hami_gpu_core_allocated_ratio', 0):.0f}/"
                      f"{values.get('hami_gpu_core_limit_ratio', 0):.0f}"])
    print("Device usage as the server reports it on /metrics (HAMi's hami_gpu_* series, every family):")
    _print_table(table, ["NODE", "DEVICE", "FAMILY", "TYPE", "TASKS", "MEM MiB", "CORES %"])


def run_demo(arguments: argparse.Namespace) -> int:
    """Run the demo; exit status 0 when every pod was processed (whatever its verdict)."""
    logging.getLogger("hami_web").setLevel(logging.WARNING)  # the table is the output; the server logs to a file
    cluster_file = arguments.cluster or _example("cluster.yaml")
    pods = [p for p in yaml.safe_load_all((arguments.pods or _example("pods.yaml")).read_text()) if p]
    with tempfile.TemporaryDirectory(prefix="hami-web-demo-") as scratch, LocalCluster() as cluster:
        cluster.load_file(cluster_file)
        try:
            with run_local_server(cluster.url, Path(scratch), extra_args=SERVER_ARGUMENTS) as server:
                return _run_pods(pods, server=server, cluster=cluster, keep_serving=arguments.keep_serving)
        except RuntimeError as error:  # the server did not start
            print(f"demo failed: {error}", file=sys.stderr)
            return 1


def _run_pods(pods: list[dict[str, Any]], *, server: LocalServer, cluster: LocalCluster, keep_serving: bool
              ) -> int:
    print(f"API server (in-process): {cluster.url}\n"
          f"hami-web (gunicorn): webhook {server.webhook_url}, extender {server.extender_url}, "
          f"metrics {server.metrics_url}\n"
          f"Dashboard: {server.dashboard_url}")
    webhook = _Https(server.webhook_url, server.ca_path)
    extender = _Https(server.extender_url, server.ca_path)
    kube = Kube.for_url(cluster.url)
    node_names = [n["metadata"]["name"] for n in cluster.list("nodes")]
    outcomes = []
    try:
        for pod in pods:
            outcomes.append(_play(pod, webhook=webhook, extender=extender, cluster=cluster, kube=kube,
                                  node_names=node_names))
    except (OSError, KubeError, KeyError, ValueError) as error:
        print(f"demo failed: {error}\n--- server log ---\n{server.log_tail()}", file=sys.stderr)
        return 1
    _print_outcomes(outcomes)
    print()
    with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
        _print_usage(response.read().decode())
    if keep_serving:
        _keep_serving(server, cluster.url)
    return 0


def _keep_serving(server: LocalServer, api_url: str) -> None:
    ca_copy = Path(tempfile.gettempdir()) / "hami-web-demo-ca.crt"
    ca_copy.write_bytes(server.ca_path.read_bytes())
    filter_body = ('{"Pod": {"metadata": {"name": "x", "uid": "1"}, "spec": {"containers": [{"name": "c", '
                   '"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}, "NodeNames": ["gpu-a40-2"]}')
    print(f"\nServing until Ctrl-C. The API server is {api_url}.\n"
          f"Dashboard (read-only, loopback): {server.dashboard_url}\nTry:\n"
          f"  curl --cacert {ca_copy} {server.webhook_url}/readyz          # webhook listener (the Service's)\n"
          f"  curl {server.metrics_url}/metrics | grep ^hami_gpu          # metrics listener (plain HTTP)\n"
          f"  curl --cacert {ca_copy} -X POST {server.extender_url}/filter -H 'Content-Type: application/json' "
          f"\\\n       -d '{filter_body}'          # extender listener (loopback)\n"
          f"  curl --cacert {ca_copy} -X POST {server.webhook_url}/filter -d '{{}}'   # 404: not on this listener\n"
          f"  curl {api_url}/api/v1/pods | python -m json.tool | grep vgpu\n"
          f"  kubectl-hami inspect -d -s {api_url}; kubectl-hami explain ml/too-big -s {api_url}")
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)
