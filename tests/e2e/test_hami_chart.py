"""HAMi v2.10's own Helm chart, unchanged but for the image, running hami-web (README.md#switching-from-hami).

For each file HAMi's chart rendered (``../shared/fixtures/hami-chart-v2.10.0``: the defaults, every option, the
webhook off), on a control plane of its own: the chart's objects the API server can hold are created as rendered
(ServiceAccounts, ConfigMaps, ClusterRoles, Roles and their bindings, the Service, the MutatingWebhookConfiguration
with only its ``clientConfig`` pointed at the local listener and given the test CA); the real kube-scheduler runs the
chart's ``config.yaml`` and our ``scheduler`` console script the chart's exact command line and environment, both
authenticated as the chart's ServiceAccount ``kube-system/hami-scheduler`` (a token of it, no admin), with only file
paths remapped (``/tls``, ``/device-config.yaml``) and ports that cannot be had here remapped consistently (443 and
the metrics port, in the command line, kube-scheduler's extender URL and the webhook URL alike).

Covers: the probes answer as the chart's probes ask (scheme, port, path); an NVIDIA pod, a Hygon DCU pod and (with
``devices.ascend.enabled``) an Ascend pod are admitted (the webhook routes them), filtered and bound with HAMi's
annotations; with ``--force-overwrite-default-scheduler=false`` a pod naming ``default-scheduler`` is left alone
(and with the default it is routed); ``/filter`` and ``/bind`` from a non-loopback peer (the machine's own
address) are refused with 403 while kube-scheduler's loopback calls work; metrics at the chart's address, with the
legacy names where the chart asks for them; the leader labels its pod ``hami.io/scheduler-role=leader`` as the
chart's Service selects it; what the chart's RBAC does not allow (the settings ConfigMap) is one log line.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from hami_web.certs import make_local_certificates
from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json

from .controlplane import (
    START_TIMEOUT_SECONDS,
    ControlPlane,
    DevicePluginStandIn,
    Process,
    find_assets,
    free_port,
    free_ports,
    gpu_container,
    pod_manifest,
    wait_until,
)
from .test_scheduling import A40, devices

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "hami-chart-v2.10.0"
CHART_FILES = ("default.yaml", "all-options.yaml", "no-webhook.yaml")
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "hami-scheduler"
HELD_KINDS = ("ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
              "MutatingWebhookConfiguration")  # not the workloads: no kubelet or controller runs them here
POD_NAME = "hami-scheduler-7d4f9c8b6-x2x7q"
B3 = "Ascend910B3"
DCU_REGISTER = "hami.io/node-dcu-register"
SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def _machine_address() -> str | None:
    """A non-loopback IPv4 address of this machine (its eth address), to call from as another peer would."""
    for _, interface in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, contextlib.suppress(OSError):
            answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
            address = socket.inet_ntoa(answer[20:24])
            if not ipaddress.ip_address(address).is_loopback:
                return address
    return None


@dataclass
class Chart:
    """One rendered file: its documents, the extender container and the chart's kube-scheduler configuration."""

    filename: str
    documents: list[dict[str, Any]]

    @classmethod
    def load(cls, filename: str) -> Chart:
        documents = [document for document in yaml.safe_load_all((FIXTURES / filename).read_text()) if document]
        return cls(filename, documents)

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [doc for doc in self.documents if doc["kind"] == kind and doc["metadata"]["name"] == name]
        return found

    @property
    def extender(self) -> dict[str, Any]:
        pod = self.one("Deployment", "hami-scheduler")["spec"]["template"]
        (container,) = [c for c in pod["spec"]["containers"] if c["command"][0] == "scheduler"]
        return dict(container)

    @property
    def webhook_enabled(self) -> bool:
        return any(doc["kind"] == "MutatingWebhookConfiguration" for doc in self.documents)


@dataclass
class Installed:
    """The chart running on a control plane: where its listener and metrics are, and how it was started."""

    chart: Chart
    plane: ControlPlane
    port: int  # the chart's 443 (or 80)
    metrics_port: int  # the chart's 9395
    tls: bool
    ca: Path | None
    scheduler: Process

    def url(self, path: str, *, host: str = "127.0.0.1") -> str:
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    def request(self, path: str, *, host: str = "127.0.0.1", body: bytes | None = None) -> tuple[int, str]:
        """A request as kubelet's probe makes it (no certificate check) or a peer posting a body."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(self.url(path, host=host), data=body, method="POST" if body else "GET",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=context if self.tls else None) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def _remap(text: str, ports: dict[str, str], paths: dict[str, str]) -> str:
    for old, new in paths.items():
        text = text.replace(old, new)
    for old, new in ports.items():
        text = re.sub(rf"(?<=:){old}\b", new, text)
    return text


def _install(chart: Chart, plane: ControlPlane) -> Installed:
    assert plane.api_client is not None
    workdir = plane.workdir
    with contextlib.suppress(kubernetes.client.ApiException):
        plane.core.create_namespace({"metadata": {"name": NAMESPACE}})
    container = chart.extender
    command = list(container["command"])
    http_bind = next(arg for arg in command if arg.startswith("--http_bind="))
    chart_port = http_bind.rsplit(":", 1)[1]
    port, metrics_port = free_ports(2)
    tls = any(arg.startswith("--cert_file=") for arg in command)
    ca: Path | None = None
    paths = {"/device-config.yaml": str(workdir / "device-config.yaml")}
    (workdir / "device-config.yaml").write_text(chart.one("ConfigMap", "hami-scheduler-device")["data"]
                                                ["device-config.yaml"])
    if tls:
        # What the chart's certgen Job leaves: Secret hami-scheduler-tls, mounted at /tls; caBundle on the webhook.
        ca, cert, key = make_local_certificates(workdir / "tls")  # tls.crt, tls.key as the Secret's keys
        plane.core.create_namespaced_secret(NAMESPACE, {
            "metadata": {"name": "hami-scheduler-tls"}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": base64.b64encode(Path(cert).read_bytes()).decode(),
                     "tls.key": base64.b64encode(Path(key).read_bytes()).decode(),
                     "ca": base64.b64encode(Path(ca).read_bytes()).decode()}})
        paths["/tls/"] = f"{workdir / 'tls'}/"
    ports = {chart_port: str(port), "9395": str(metrics_port)}
    for document in chart.documents:
        if document["kind"] not in HELD_KINDS:
            continue
        if document["kind"] == "MutatingWebhookConfiguration":
            document = json.loads(json.dumps(document))
            for webhook in document["webhooks"]:
                webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/webhook",
                                           "caBundle": base64.b64encode(Path(str(ca)).read_bytes()).decode()}
        kubernetes.utils.create_from_dict(plane.api_client, document)
    # The Deployment's pod, as the API would hold it (no controller-manager here): the leader labels it.
    template = chart.one("Deployment", "hami-scheduler")["spec"]["template"]
    plane.core.create_namespaced_pod(NAMESPACE, {
        "metadata": {"name": POD_NAME, "labels": template["metadata"]["labels"]},
        "spec": {"containers": [{"name": "vgpu-scheduler-extender", "image": "hami-web:test"}],
                 "serviceAccountName": SERVICE_ACCOUNT}})
    kubeconfig = plane._service_account_kubeconfig(NAMESPACE, SERVICE_ACCOUNT)

    # kube-scheduler: the chart's container command and config.yaml; the in-cluster identity is the token.
    configuration = yaml.safe_load(chart.one("ConfigMap", "hami-scheduler")["data"]["config.yaml"])
    configuration["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    for extender in configuration["extenders"]:
        extender["urlPrefix"] = _remap(extender["urlPrefix"], ports, {})
    config_path = workdir / "config" / "config.yaml"
    config_path.parent.mkdir(exist_ok=True)
    config_path.write_text(yaml.safe_dump(configuration))
    (kube_container,) = [c for c in template["spec"]["containers"] if c["command"][0] == "kube-scheduler"]
    kube_command = [str(plane.assets["kube-scheduler"]),
                    *(_remap(arg, {}, {"/config/": f"{config_path.parent}/"}) for arg in kube_container["command"][1:]),
                    f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                    "--bind-address=127.0.0.1", f"--secure-port={free_port()}"]
    plane.processes["kube-scheduler"] = Process("kube-scheduler", kube_command,
                                                plane.logs / "kube-scheduler.log").start()

    # hami-web: the chart's exact command and environment (fieldRefs as kubelet fills them), paths and ports remapped.
    argv = [_remap(arg, ports, paths) for arg in command[1:]]
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("HAMI_")},
                   "KUBECONFIG": str(kubeconfig), "HAMI_UI_BIND": f"127.0.0.1:{free_port()}"}
    from_field = {"metadata.name": POD_NAME, "metadata.namespace": NAMESPACE}
    for variable in container["env"]:
        environment[variable["name"]] = variable.get("value") or from_field[variable["valueFrom"]["fieldRef"]
                                                                            ["fieldPath"]]
    script = Path(sys.executable).with_name("scheduler")
    process = Process("scheduler", [str(script), *argv], plane.logs / "scheduler.log", environment).start()
    plane.processes["scheduler"] = process
    installed = Installed(chart, plane, port, metrics_port, tls, ca, process)

    def ready() -> bool:
        process.check_alive()
        return installed.request("/readyz")[0] == 200

    wait_until(ready, timeout_seconds=START_TIMEOUT_SECONDS, what="scheduler /readyz")
    plane.device_plugin = DevicePluginStandIn(plane.api_client).start()
    return installed


@pytest.fixture(scope="module", params=CHART_FILES)
def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    assets = find_assets()
    if assets is None:
        pytest.skip("real control plane not found: set KUBEBUILDER_ASSETS")
    if not FIXTURES.is_dir():
        pytest.skip(f"HAMi's rendered chart is not on this machine ({FIXTURES})")
    chart = Chart.load(request.param)
    plane = ControlPlane(tmp_path_factory.mktemp(f"hami-chart-{request.param.removesuffix('.yaml')}"),
                         assets).start_api()
    try:
        yield _install(chart, plane)
    except BaseException:
        plane.report_logs()
        raise
    finally:
        plane.stop()


def _nodes(installed: Installed, prefix: str) -> dict[str, str]:
    """An NVIDIA node, a DCU node and (Ascend enabled) an NPU node, labelled as the chart's node selector asks."""
    plane = installed.plane
    selector = dict(pair.split("=", 1) for arg in installed.chart.extender["command"]
                    if arg.startswith("--node-label-selector=") for pair in arg.split("=", 1)[1].split(","))
    labels = {"e2e.hami.io/pool": prefix, **selector}
    nodes = {"nvidia": f"{prefix}-nvidia", "dcu": f"{prefix}-dcu"}
    plane.create_gpu_node(nodes["nvidia"], devices(nodes["nvidia"], 2, memory_mib=46068, type=A40), labels=labels)
    plane.create_node(nodes["dcu"], labels=labels, devices={"hygon.com/dcunum": "8"},
                      annotations={DCU_REGISTER: f"DCU-{prefix}-0,4,65520,100,DCU-BW100,0,true:",
                                   "hami.io/node-handshake-dcu": "Reported 2026-01-01 00:00:00"})
    if "--enable-ascend=true" in installed.chart.extender["command"]:
        nodes["ascend"] = f"{prefix}-npu"
        npus = [Device(uuid=f"{prefix}-npu-{i}", index=i, count=4, memory_mib=65536, cores=20, type=B3, family=B3,
                       network=0 if i <= 3 else 1) for i in range(8)]
        plane.create_node(nodes["ascend"], labels=labels, devices={f"huawei.com/{B3}": "8"},
                          annotations={f"hami.io/node-register-{B3}": encode_register_json(npus),
                                       f"hami.io/node-handshake-{B3}": "Reported_2026.08.21 06:20:39"})
    return labels


def _create(installed: Installed, namespace: str, name: str, limits: dict[str, str], pool: dict[str, str],
            **spec: Any) -> Any:
    command = installed.chart.extender["command"]
    if not installed.chart.webhook_enabled or "--force-overwrite-default-scheduler=false" in command:
        # No webhook, or one that leaves default-scheduler's pods alone: the user names the scheduler.
        spec.setdefault("schedulerName", "hami-scheduler")
    installed.plane.core.create_namespaced_pod(namespace, pod_manifest(name, [gpu_container("main", limits)],
                                                                       node_selector=pool, **spec))
    return installed.plane.pod(namespace, name)


def test_the_probes_answer_as_the_charts_probes_ask(installed: Installed) -> None:
    container = installed.chart.extender
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        if probe not in container:
            continue
        get = container[probe]["httpGet"]
        assert ports[get["port"]] in (443, 80)  # the chart's --http_bind port, remapped here
        assert get["scheme"] == ("HTTPS" if installed.tls else "HTTP")
        status, body = installed.request(get["path"])
        assert status == 200, body
    # Ready from the first sync, standby or not; leader once the kube-scheduler beside it holds the chart's Lease.
    wait_until(lambda: json.loads(installed.request("/readyz")[1])["leader_election"].startswith(
        "leader (Lease kube-system/hami-scheduler held by "), timeout_seconds=30, what="the leader on /readyz")


def test_device_pods_are_admitted_filtered_and_bound(installed: Installed) -> None:
    plane = installed.plane
    namespace = plane.create_namespace(f"chart-{installed.chart.filename.removesuffix('.yaml')}")
    pool = _nodes(installed, namespace)
    wanted = {"gpu": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, f"{namespace}-nvidia",
                      names.POD_DEVICES_ALLOCATED),
              "dcu": ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "4000"}, f"{namespace}-dcu",
                      "hami.io/dcu-devices-allocated")}
    if "--enable-ascend=true" in installed.chart.extender["command"]:
        wanted["npu"] = ({f"huawei.com/{B3}": "1", f"huawei.com/{B3}-memory": "10000"}, f"{namespace}-npu",
                         f"hami.io/{B3}-devices-allocated")
    for name, (limits, _, _) in wanted.items():
        created = _create(installed, namespace, name, limits, pool)
        assert created.spec.scheduler_name == "hami-scheduler"  # routed by the chart's webhook (or named)
        if installed.chart.webhook_enabled:  # the webhook saw it: the Ascend memory is rounded to its template
            assert name != "npu" or created.spec.containers[0].resources.limits[f"huawei.com/{B3}-memory"] == "16384"
    for name, (_, node, allocated) in wanted.items():
        pod = plane.wait_bound(namespace, name, timeout_seconds=60)
        annotations = pod.metadata.annotations
        assert pod.spec.node_name == node
        assert annotations[names.POD_ASSIGNED_NODE] == node
        assert annotations[allocated] and annotations[names.POD_BIND_PHASE] in ("allocating", "success")
        plane.wait_event(namespace, name, "BindingSucceed")


def test_a_default_scheduler_pod(installed: Installed) -> None:
    """--force-overwrite-default-scheduler: false (all-options) leaves it to default-scheduler; true routes it; with
    the chart's webhook off nothing routes it."""
    plane = installed.plane
    namespace = plane.create_namespace(f"default-{installed.chart.filename.removesuffix('.yaml')}")
    pod = _create(installed, namespace, "plain", {"nvidia.com/gpu": "1"}, {"e2e.hami.io/pool": namespace},
                  schedulerName="default-scheduler")
    force = installed.chart.webhook_enabled and "--force-overwrite-default-scheduler=true" in installed.chart.extender[
        "command"]
    assert pod.spec.scheduler_name == ("hami-scheduler" if force else "default-scheduler")
    assert names.POD_DEVICES_ALLOCATED not in (pod.metadata.annotations or {})


@pytest.mark.parametrize("path", ["/filter", "/bind"])
def test_booking_routes_refuse_a_non_loopback_peer(installed: Installed, path: str) -> None:
    address = _machine_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    status, body = installed.request(path, host=address, body=b"{}")
    assert status == 403
    assert json.loads(body)["message"] == (f"{path} is answered only to loopback peers on this listener "
                                           f"(kube-scheduler in the same pod); refused for {address}")
    assert installed.request(path, body=b"{}")[0] == 200  # loopback: answered (an Error for the empty body)
    assert installed.request("/readyz", host=address)[0] == 200  # the probes and the webhook stay reachable


def test_metrics_at_the_charts_address(installed: Installed) -> None:
    address = _machine_address() or "127.0.0.1"  # --metrics-bind-address=:9395 is every interface
    text = urllib.request.urlopen(f"http://{address}:{installed.metrics_port}/metrics", timeout=10).read().decode()
    assert "hami_gpu_memory_limit_bytes{" in text or "# TYPE hami_gpu_memory_limit_bytes gauge" in text
    legacy = "--legacy-metrics=true" in installed.chart.extender["command"]
    assert ("# TYPE GPUDeviceMemoryLimit gauge" in text) is legacy


def test_the_leader_is_labelled_as_the_service_selects_it(installed: Installed) -> None:
    selector = installed.chart.one("Service", "hami-scheduler")["spec"]["selector"]

    def labelled() -> bool:
        labels = installed.plane.core.read_namespaced_pod(POD_NAME, NAMESPACE).metadata.labels or {}
        return all(labels.get(key) == value for key, value in selector.items())

    wait_until(labelled, timeout_seconds=30, what="the leader's pod labelled as the chart's Service selects")


def test_what_the_charts_rbac_does_not_allow_is_one_log_line(installed: Installed) -> None:
    def logged() -> list[str]:
        return [line for line in installed.scheduler.tail(100000).splitlines()
                if "cannot publish the scheduling settings" in line]

    (line,) = wait_until(logged, timeout_seconds=30, what="the settings ConfigMap fallback line")
    assert "kube-system/hami-web-settings" in line and "forbidden" in line.lower()
    text = installed.scheduler.tail(100000)
    assert "Traceback" not in text and " 403" not in text.replace(line, "")
    selectors = [variable["name"] for variable in installed.chart.extender["env"]
                 if variable["name"].startswith("NODE_SELECTOR_")]
    assert [name for name in selectors if text.count(f"{name}=gpu has no effect") == 1] == selectors
