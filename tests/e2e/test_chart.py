"""The chart `charts/hami-web` installed by the real Helm into a real kube-apiserver, and run from what it installed.

Covers: over the values matrix (defaults, every family on, HA with two replicas, one replica without leader election,
webhook off, monitoring on) every object ``helm template`` renders is accepted by kube-apiserver's server-side dry
run with strict field validation (the ServiceMonitor too: its CRD is created first); ``helm install`` into the
cluster, then the certificate Job's command as the Job's ServiceAccount, and kube-scheduler and hami-web started
from the installed Deployment's commands and ConfigMaps, each as its own ServiceAccount (only file paths mapped to
local ones, as kubelet's mounts would place them; the listeners' ports set through the chart's own values, the
webhook reached through ``scheduler.admissionWebhook.customURL``; hami-web following kube-scheduler's Lease with
``--leader-elect``, as ``scheduler.leaderElect`` means in HAMi's chart): a GPU pod is admitted, filtered and bound
within 20 s of hami-web's start; ``helm upgrade`` changing ``scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy``
rolls the Deployment's command, and the restarted pair places by the new policy; ``helm uninstall`` leaves no object
of ours (the certificate Secrets, the settings ConfigMap and the Lease included); a values file with a misspelt key
is refused by ``helm install`` naming the key, and installs nothing.

No kubelet runs here, so nothing starts the Deployment's or the Job's pods: this module starts their commands.
"""

from __future__ import annotations

import base64
import ssl
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from hami_web.core import names
from hami_web.core.devices import Device
from tests.charts.helm import CHART, KUBE_VERSION, helm_binary, run_helm

from .controlplane import (
    SKIP_REASON,
    ControlPlane,
    DevicePluginStandIn,
    Process,
    find_assets,
    free_port,
    free_ports,
    gpu_container,
    pod_manifest,
    wait_until,
    write_kubeconfig,
)

RELEASE, NAMESPACE = "hami-web", "hami-system"
DRY_RUN_NAMESPACE = "chart-dry-run"
MATRIX: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "every-family": ("--set", "devices.iluvatar.enabled=true", "--set", "devices.ascend.enabled=true"),
    "ha-two": ("--set", "scheduler.leaderElect=true", "--set", "scheduler.replicas=2"),
    "single-no-election": ("--set", "scheduler.leaderElect=false"),
    "webhook-off": ("--set", "scheduler.admissionWebhook.enabled=false"),
    "monitoring": ("--set", "prometheus.enabled=true", "--set", "grafanaDashboard.enabled=true",
                   "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"),
}
# The Prometheus Operator's CRD, reduced to what the API server needs to hold a ServiceMonitor.
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList", "plural": "servicemonitors",
                       "singular": "servicemonitor"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}
FIRST_BIND_SECONDS = 20.0
A40 = "NVIDIA-NVIDIA A40"


def _gpus(node: str) -> list[Device]:
    return [Device(uuid=f"GPU-{node}-{index}", index=index, count=10, memory_mib=46068, cores=100, type=A40, numa=0)
            for index in range(2)]


@dataclass
class Installed:
    """The release and the processes started from it: what kubelet would run from the installed objects."""

    plane: ControlPlane
    workdir: Path
    ports: dict[str, int]
    processes: dict[str, Process] = field(default_factory=dict)
    started_at: float = 0.0

    @property
    def kubeconfig(self) -> str:
        return str(self.plane.admin_kubeconfig)

    def helm(self, *arguments: str) -> Any:
        return run_helm(*arguments, "--kubeconfig", self.kubeconfig, timeout=180)

    def port_values(self) -> tuple[str, ...]:
        """The chart's own values that put its listeners where this host has free ports."""
        return ("--set", f"listeners.webhookPort={self.ports['webhook']}",
                "--set", f"listeners.extenderPort={self.ports['extender']}",
                "--set", f"scheduler.metricsBindAddress=127.0.0.1:{self.ports['metrics']}",
                "--set", "dashboard.bind=off",
                "--set", "scheduler.admissionWebhook.customURL.enabled=true",
                "--set", "scheduler.admissionWebhook.customURL.host=127.0.0.1",
                "--set", f"scheduler.admissionWebhook.customURL.port={self.ports['webhook']}")

    # -- what kubelet would do with the installed objects ---------------------------------------------------

    def deployment(self) -> Any:
        return kubernetes.client.AppsV1Api(self.plane.api_client).read_namespaced_deployment(RELEASE, NAMESPACE)

    def _container(self, name: str) -> Any:
        return next(c for c in self.deployment().spec.template.spec.containers if c.name == name)

    def _token_kubeconfig(self, account: str) -> Path:
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 24 * 3600}}
        token = self.plane.core.create_namespaced_service_account_token(account, NAMESPACE, request).status.token
        return write_kubeconfig(self.workdir / f"{account}.kubeconfig", server=self.plane.api_url,
                                ca_path=self.plane.api_ca, token=token)

    def mount(self) -> dict[str, str]:
        """The pod's volumes as files: the TLS Secret, the ConfigMaps, kube-scheduler's token; paths mapped."""
        mounts = {"/certs/": self.workdir / "certs", "/config/": self.workdir / "config",
                  "/etc/hami-device/": self.workdir / "device",
                  "/var/run/secrets/hami-scheduler/": self.workdir / "scheduler-token"}
        for folder in mounts.values():
            folder.mkdir(exist_ok=True)
        secret = self.plane.core.read_namespaced_secret(f"{RELEASE}-tls", NAMESPACE).data
        for key, value in secret.items():
            (mounts["/certs/"] / key).write_bytes(base64.b64decode(value))
        pod = self.deployment().spec.template.spec
        config_maps = {v.name: v.config_map.name for v in pod.volumes if v.config_map}
        for volume, folder in (("scheduler-config", "/config/"), ("device-config", "/etc/hami-device/")):
            data = self.plane.core.read_namespaced_config_map(config_maps[volume], NAMESPACE).data
            for key, text in data.items():
                (mounts[folder] / key).write_text(text)
        scheduler = yaml.safe_load((mounts["/config/"] / "kubeconfig.yaml").read_text())
        token = yaml.safe_load(self._token_kubeconfig(scheduler["users"][0]["name"]).read_text())
        (mounts["/var/run/secrets/hami-scheduler/"] / "token").write_text(token["users"][0]["user"]["token"])
        (mounts["/var/run/secrets/hami-scheduler/"] / "ca.crt").write_bytes(self.plane.api_ca.read_bytes())
        mapped = {prefix: f"{folder}/" for prefix, folder in mounts.items()}
        # kubernetes.default.svc is the API server, as a pod's DNS would resolve it.
        config = self.map_paths((mounts["/config/"] / "kubeconfig.yaml").read_text(), mapped)
        (mounts["/config/"] / "kubeconfig.yaml").write_text(
            config.replace("https://kubernetes.default.svc", self.plane.api_url))
        text = (mounts["/config/"] / "config.yaml").read_text()
        (mounts["/config/"] / "config.yaml").write_text(self.map_paths(text, mapped))
        return mapped

    @staticmethod
    def map_paths(text: str, mapped: dict[str, str]) -> str:
        for prefix, local in mapped.items():
            text = text.replace(prefix, local)
        return text

    def run_certs_job(self) -> None:
        """The certificate Job's command, as its ServiceAccount (``--in-cluster`` becomes that account's token)."""
        (job,) = kubernetes.client.BatchV1Api(self.plane.api_client).list_namespaced_job(NAMESPACE).items
        pod = job.spec.template.spec
        arguments = ["--kubeconfig" if a == "--in-cluster" else a for a in pod.containers[0].args]
        arguments.insert(arguments.index("--kubeconfig") + 1, str(self._token_kubeconfig(pod.service_account_name)))
        process = Process("certs", [sys.executable, "-m", "hami_web", *arguments], self.plane.logs / "certs.log",
                          self.plane._python_environment()).start()
        assert process.popen is not None
        assert process.popen.wait(timeout=60) == 0, process.tail()

    def start(self) -> None:
        """hami-web and kube-scheduler from the Deployment's containers, each as its own ServiceAccount."""
        mapped = self.mount()
        pod = self.deployment().spec.template.spec
        server = self._container("hami-web")
        arguments = [self.map_paths(a, mapped) for a in server.args]
        kubeconfig = self._token_kubeconfig(pod.service_account_name)
        self.started_at = time.monotonic()
        self.processes["hami-web"] = Process(
            "chart-hami-web", [sys.executable, "-m", "hami_web", *arguments, "--kubeconfig", str(kubeconfig)],
            self.plane.logs / "chart-hami-web.log", self.plane._python_environment()).start()
        scheduler = self._container("kube-scheduler")
        command = [self.map_paths(a, mapped) for a in scheduler.command]
        command[0] = str(self.plane.assets["kube-scheduler"])
        self.processes["kube-scheduler"] = Process(
            "chart-kube-scheduler", [*command, "--bind-address=127.0.0.1", f"--secure-port={free_port()}"],
            self.plane.logs / "chart-kube-scheduler.log").start()
        self.plane.processes.update({f"chart-{name}": process for name, process in self.processes.items()})
        self._wait_ready(mapped["/certs/"], next(int(a.rsplit(":", 1)[1]) for a in arguments
                                                 if a.startswith("--bind=")))

    def _wait_ready(self, certs: str, port: int) -> None:
        """hami-web's /readyz as its readiness probe asks it (the webhook must answer before a pod is created)."""
        context = ssl.create_default_context(cafile=f"{certs}ca.crt")
        process = self.processes["hami-web"]

        def ready() -> bool:
            process.check_alive()
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=context) as answer:
                return bool(answer.status == 200)

        wait_until(ready, timeout_seconds=FIRST_BIND_SECONDS, what="hami-web /readyz")

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop(timeout_seconds=10)

    def create_pod(self, namespace: str, name: str) -> None:
        manifest = pod_manifest(name, [gpu_container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})])
        self.plane.core.create_namespaced_pod(namespace, manifest)

    def bound_node(self, namespace: str, name: str, timeout_seconds: float = 30.0) -> str:
        node: str = self.plane.wait_bound(namespace, name, timeout_seconds=timeout_seconds).spec.node_name
        return node

    def allocated_node(self, namespace: str, name: str) -> str:
        """The node of a bound pod once the device plugin stand-in has allocated it (its node lock released)."""
        node = self.bound_node(namespace, name)
        wait_until(lambda: (self.plane.pod(namespace, name).metadata.annotations or {}).get("hami.io/bind-phase")
                   == "success", timeout_seconds=30, what=f"{namespace}/{name} allocated")
        return node


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver only, for this module: Helm installs the rest."""
    assets = find_assets()
    if assets is None:
        pytest.skip(SKIP_REASON)
    helm_binary()  # skips without Helm
    control = ControlPlane(tmp_path_factory.mktemp("chart-plane"), assets).start_api()
    try:
        kubernetes.utils.create_from_dict(control.api_client, SERVICE_MONITOR_CRD)
        extensions = kubernetes.client.ApiextensionsV1Api(control.api_client)
        wait_until(lambda: any(c.type == "Established" and c.status == "True" for c in
                               extensions.read_custom_resource_definition(
                                   SERVICE_MONITOR_CRD["metadata"]["name"]).status.conditions or []),
                   timeout_seconds=30, what="the ServiceMonitor CRD established")
        control.create_namespace(DRY_RUN_NAMESPACE)
        yield control
    finally:
        control.stop()


@pytest.fixture(scope="module")
def installed(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    release = Installed(plane, tmp_path_factory.mktemp("chart-release"),
                        dict(zip(("webhook", "extender", "metrics"), free_ports(3), strict=True)))
    result = release.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                          *release.port_values())
    assert result.returncode == 0, result.stderr
    plane.device_plugin = DevicePluginStandIn(plane.api_client).start()
    try:
        release.run_certs_job()
        release.start()
        yield release
    finally:
        release.stop()
        plane.report_logs(15)


def _dry_run_create(resources: Any, document: dict[str, Any], namespace: str) -> None:
    resource = resources.get(api_version=document["apiVersion"], kind=document["kind"])
    resource.create(body=document, namespace=namespace if resource.namespaced else None, dry_run="All",
                    query_params=[("fieldValidation", "Strict")])


@pytest.mark.parametrize("settings", MATRIX.values(), ids=MATRIX.keys())
def test_every_rendered_object_passes_the_api_server_dry_run(plane: ControlPlane, settings: tuple[str, ...]) -> None:
    result = run_helm("template", "dry", str(CHART), "--namespace", DRY_RUN_NAMESPACE, "--kube-version",
                      KUBE_VERSION, *settings)
    assert result.returncode == 0, result.stderr
    documents = [document for document in yaml.safe_load_all(result.stdout) if document]
    assert documents
    resources = kubernetes.dynamic.DynamicClient(plane.api_client).resources
    for document in documents:
        namespace = document["metadata"].get("namespace", DRY_RUN_NAMESPACE)
        try:
            _dry_run_create(resources, document, namespace)
        except kubernetes.dynamic.exceptions.DynamicApiError as error:
            raise AssertionError(f"{document['kind']} {document['metadata']['name']}: {error.summary()}") from None


def test_installed_chart_binds_a_gpu_pod_within_20_seconds_of_the_server_start(installed: Installed) -> None:
    plane = installed.plane
    plane.create_gpu_node("chart-node-a", _gpus("chart-node-a"))
    namespace = plane.create_namespace("chart-first")
    installed.create_pod(namespace, "first")
    created = plane.pod(namespace, "first")
    assert created.spec.scheduler_name == "hami-scheduler"  # the installed webhook, caBundle set by the Job
    deadline = FIRST_BIND_SECONDS - (time.monotonic() - installed.started_at)
    node = installed.bound_node(namespace, "first", timeout_seconds=max(deadline, 0.1))
    elapsed = time.monotonic() - installed.started_at
    print(f"first pod bound {elapsed:.1f} s after hami-web's start (chart install)")
    assert node == "chart-node-a" and elapsed <= FIRST_BIND_SECONDS
    assert plane.pod(namespace, "first").metadata.annotations[names.POD_ASSIGNED_NODE] == node  # our bind


def test_helm_upgrade_of_the_node_policy_takes_effect(installed: Installed) -> None:
    plane = installed.plane
    for node in ("chart-node-a", "chart-node-b"):
        try:
            plane.create_gpu_node(node, _gpus(node))
        except ApiException as error:
            assert error.status == 409  # chart-node-a from the first test
    namespace = plane.create_namespace("chart-upgrade")
    installed.create_pod(namespace, "packed-1")
    first = installed.allocated_node(namespace, "packed-1")
    installed.create_pod(namespace, "packed-2")
    assert installed.allocated_node(namespace, "packed-2") == first  # binpack (the default): the fuller node

    before = installed.deployment().metadata.generation
    result = installed.helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
                            "--set", "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy=spread")
    assert result.returncode == 0, result.stderr
    deployment = installed.deployment()
    assert deployment.metadata.generation > before  # a rollout: the pods restart with the new command
    arguments = next(c for c in deployment.spec.template.spec.containers if c.name == "hami-web").args
    assert "--node-scheduler-policy=spread" in arguments
    installed.stop()  # the rollout, as kubelet would run it: the new pod's containers from the new spec
    installed.start()
    installed.create_pod(namespace, "spread-1")
    assert installed.bound_node(namespace, "spread-1") != first  # spread: the emptier node
    settings = plane.core.read_namespaced_config_map(f"{RELEASE}-settings", NAMESPACE)
    wait_until(lambda: "spread" in yaml.safe_dump(
        plane.core.read_namespaced_config_map(f"{RELEASE}-settings", NAMESPACE).data or {}),
        timeout_seconds=20, what="the settings ConfigMap to publish the new policy")
    assert settings.metadata.labels["app.kubernetes.io/name"] == "hami-web"


def test_a_values_file_with_a_misspelt_key_is_refused_and_installs_nothing(plane: ControlPlane,
                                                                            tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("scheduler:\n  defaultSchedulerPolicy:\n    nodeSchedulerPolcy: spread\n")
    result = run_helm("install", "typo", str(CHART), "--namespace", "typo", "--create-namespace", "-f", str(values),
                      "--kubeconfig", str(plane.admin_kubeconfig))
    assert result.returncode != 0
    assert "nodeSchedulerPolcy" in result.stderr and "Additional property" in result.stderr, result.stderr
    listed = run_helm("list", "--all-namespaces", "--short", "--kubeconfig", str(plane.admin_kubeconfig))
    assert "typo" not in listed.stdout.split()


def _ours_left(plane: ControlPlane) -> list[str]:
    """Every object of the release's names left in the cluster (events aside: they expire by themselves)."""
    client = kubernetes.dynamic.DynamicClient(plane.api_client)
    kinds = [("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "ServiceAccount"), ("v1", "Service"),
             ("apps/v1", "Deployment"), ("batch/v1", "Job"), ("batch/v1", "CronJob"),
             ("policy/v1", "PodDisruptionBudget"), ("coordination.k8s.io/v1", "Lease"),
             ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
             ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
             ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")]
    left = []
    for api_version, kind in kinds:
        resource = client.resources.get(api_version=api_version, kind=kind)
        for namespace in ((NAMESPACE, "kube-system") if resource.namespaced else (None,)):
            for item in resource.get(namespace=namespace).items:
                name = item.metadata.name
                if name.startswith(RELEASE) or name.startswith("hami-scheduler"):
                    left.append(f"{kind} {namespace or ''}/{name}")
    return left


def test_helm_uninstall_leaves_no_object_of_ours(installed: Installed) -> None:
    plane = installed.plane
    assert len(_ours_left(plane)) > 20  # installed, Secrets, settings and Lease written to by the processes
    lease = kubernetes.client.CoordinationV1Api(plane.api_client).read_namespaced_lease("hami-scheduler", NAMESPACE)
    assert lease.spec.holder_identity  # kube-scheduler took the chart's Lease
    installed.stop()  # the pods go first, as the Deployment's deletion stops them
    result = installed.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    assert result.returncode == 0, result.stderr
    assert _ours_left(plane) == []
