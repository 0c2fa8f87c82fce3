"""A real Kubernetes control plane on 127.0.0.1 for the end-to-end tier: etcd, kube-apiserver, hami-web, kube-scheduler.

Why real binaries: kube-apiserver is the client that calls ``/webhook`` and kube-scheduler the one that calls
``/filter`` and ``/bind``, each with its own timeouts, retries, node cache and leader election; the in-process API
server of the other tiers cannot show how they behave. The binaries are found the envtest way, in the folder
named by ``KUBEBUILDER_ASSETS`` (``etcd``, ``kube-apiserver``, ``kube-scheduler``).

What is shipped is what is tested: the namespace, ServiceAccounts and RBAC come from ``k8s/`` and are applied
through the API; hami-web and kube-scheduler authenticate with tokens of those ServiceAccounts; the webhook
registration is ``k8s/webhook.yaml`` with only its ``clientConfig`` pointed at 127.0.0.1; kube-scheduler's
configuration is ``k8s/scheduler-config.yaml`` with only the extender's port, CA path and kubeconfig adapted; the
TLS material is made by ``hami-web certs`` writing the Secrets and the webhook's caBundle through the API.

No kubelet runs, so `DevicePluginStandIn` plays HAMi's device plugin after a bind (``bind-phase=success``, node
lock released, handshake answered) and pods stay Pending with ``spec.nodeName`` set.

Used by ``tests/e2e/conftest.py`` (fixtures) and ``benchmarks/e2e_throughput.py``.
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from hami_web.certs import make_local_certificates
from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.server.local import free_port as free_port  # re-exported for the e2e tests
from hami_web.server.local import free_ports as free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "k8s"
ASSET_NAMES = ("etcd", "kube-apiserver", "kube-scheduler")
SKIP_REASON = ("real control plane not found: set KUBEBUILDER_ASSETS to a folder holding etcd, kube-apiserver and "
               "kube-scheduler (e.g. links to ../shared/kube/bin/* and /usr/bin/etcd; see docs/performance.md)")
ADMIN_TOKEN = "e2e-admin-token"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
SYSTEM_NAMESPACE = "hami-system"
START_TIMEOUT_SECONDS = 60.0


def find_assets() -> dict[str, Path] | None:
    """The binaries named by ``KUBEBUILDER_ASSETS``, or None when any is missing."""
    folder = os.environ.get("KUBEBUILDER_ASSETS", "")
    if not folder:
        return None
    paths = {name: Path(folder) / name for name in ASSET_NAMES}
    if all(path.is_file() and os.access(path, os.X_OK) for path in paths.values()):
        return paths
    return None


def wait_until(condition: Callable[[], Any], *, timeout_seconds: float, what: str,
               interval_seconds: float = 0.1) -> Any:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_seconds
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = condition()
        except ProcessExited:
            raise
        except Exception as error:  # a server still starting answers with connection errors
            last_error = error
        else:
            if result:
                return result
        time.sleep(interval_seconds)
    raise TimeoutError(f"timed out after {timeout_seconds:.0f}s waiting for {what}"
                       + (f" (last error: {last_error})" if last_error else ""))


class ProcessExited(RuntimeError):
    """A child process ended while we waited for it to become ready."""


# -- processes --------------------------------------------------------------------------------------------------


@dataclass
class Process:
    """One child process whose output goes to a log file (shown when something fails)."""

    name: str
    command: list[str]
    log_path: Path
    environment: dict[str, str] | None = None
    popen: subprocess.Popen | None = None

    def start(self) -> Process:
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=self.environment,
                                      start_new_session=True)
        log.close()
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, *, kill: bool = False, timeout_seconds: float = 20.0) -> int | None:
        """SIGTERM (as kubelet) or SIGKILL; returns the exit status."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_seconds)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        status = self.popen.returncode
        self.popen = None
        return status

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ProcessExited(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")


# -- TLS material for the API server ----------------------------------------------------------------------------


def _write_client_certificate(directory: Path, *, ca_cert: Path, ca_key: Path, common_name: str,
                              prefix: str) -> tuple[Path, Path]:
    """A client certificate (clientAuth) signed by the local CA: kube-apiserver's front-proxy client."""
    ca_certificate = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    ca_private_key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_private_key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{prefix}.crt", directory / f"{prefix}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _write_service_account_key(path: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    # kube-apiserver reads "EC PRIVATE KEY" (SEC 1) for ECDSA service-account keys, not PKCS #8.
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))
    return path


def write_kubeconfig(path: Path, *, server: str, ca_path: Path, token: str) -> Path:
    """A kubeconfig with one bearer-token user, as ``kubectl config`` would write it."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_path)}}],
        "users": [{"name": "e2e", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}]}))
    path.chmod(0o600)
    return path


# -- the shipped manifests, adapted -----------------------------------------------------------------------------


def load_manifests(filename: str) -> list[dict[str, Any]]:
    """The YAML documents of one file of ``k8s/``."""
    with (K8S_DIR / filename).open() as stream:
        return [document for document in yaml.safe_load_all(stream) if document]


def scheduler_configuration(*, extender_port: int | None, ca_path: Path, kubeconfig: Path) -> dict[str, Any]:
    """``k8s/scheduler-config.yaml``'s KubeSchedulerConfiguration with only local paths and ports changed.

    ``extender_port`` None drops the extender (the baseline scheduler of the throughput benchmark).
    """
    (config_map,) = [doc for doc in load_manifests("scheduler-config.yaml") if doc["kind"] == "ConfigMap"]
    configuration = yaml.safe_load(config_map["data"]["config.yaml"])
    configuration["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    if extender_port is None:
        configuration.pop("extenders", None)
        return configuration
    for extender in configuration["extenders"]:
        extender["urlPrefix"] = re.sub(r":\d+", f":{extender_port}", extender["urlPrefix"], count=1)
        if extender.get("tlsConfig", {}).get("caFile"):
            extender["tlsConfig"]["caFile"] = str(ca_path)
    return configuration


def extender_port_of_shipped_configuration() -> int:
    """The port kube-scheduler's shipped configuration calls the extender on."""
    (config_map,) = [doc for doc in load_manifests("scheduler-config.yaml") if doc["kind"] == "ConfigMap"]
    url = yaml.safe_load(config_map["data"]["config.yaml"])["extenders"][0]["urlPrefix"]
    return int(url.rsplit(":", 1)[1].split("/")[0])


def webhook_configuration(*, url: str) -> dict[str, Any]:
    """``k8s/webhook.yaml`` with each webhook's ``clientConfig`` pointed at ``url`` (caBundle set by certs)."""
    (document,) = load_manifests("webhook.yaml")
    document = copy.deepcopy(document)
    for webhook in document["webhooks"]:
        webhook["clientConfig"] = {"url": url}
    return document


def _subject_of_binding(documents: Sequence[dict[str, Any]], role: str) -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount a ClusterRoleBinding to ``role`` names."""
    for document in documents:
        if document["kind"] == "ClusterRoleBinding" and document["roleRef"]["name"] == role:
            subject = document["subjects"][0]
            return subject["namespace"], subject["name"]
    raise LookupError(f"k8s/rbac.yaml binds no ServiceAccount to ClusterRole {role}")


# -- a stand-in for HAMi's device plugin -------------------------------------------------------------------------


class DevicePluginStandIn:
    """Does what HAMi's device plugin does once a pod bound to its node starts (there is no kubelet here).

    For each pod with ``hami.io/bind-phase=allocating`` and ``spec.nodeName`` set: ``allocate_delay_seconds`` after
    it is seen bound (what kubelet's admission and the plugin's Allocate take on a real node: hundreds of
    milliseconds to seconds), mark it ``bind-phase=success`` and release the node lock if the lock names that pod
    (HAMi's plugin reads the node, then patches the lock away: three API calls per allocation, as here).
    Allocations run concurrently, as every node's plugin works on its own. It also answers the node handshake of
    every family (``hami.io/node-handshake``, ``hami.io/node-handshake-dcu``, ``…-<Iluvatar chip>``:
    ``Requesting_…`` → ``Reported_…``), as each family's plugin does on every registration round, from a watch of
    the nodes.

    The stand-in plays programs that run on other machines, so it decodes only the JSON it reads (the client's
    models cost milliseconds of this machine's CPU per object, charged to whatever the benchmarks measure) and
    never lists what it can watch: the API calls it makes are those of the device plugins it stands in for.
    """

    def __init__(self, api_client: kubernetes.client.ApiClient, *, allocate_delay_seconds: float = 0.0,
                 workers: int = 16) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self.allocate_delay_seconds = allocate_delay_seconds
        self._stop = threading.Event()
        self._resumed = threading.Event()
        self._resumed.set()
        self._due: list[tuple[float, int, str, str, str, str]] = []  # (due, sequence, namespace, name, uid, node)
        self._due_changed = threading.Condition()
        self._scheduled: set[tuple[str, str, str]] = set()
        self._sequence = 0
        self._workers = ThreadPoolExecutor(workers, thread_name_prefix="device-plugin-allocate")
        self._threads = [threading.Thread(target=self._loop, args=(self._watch_allocations,), daemon=True,
                                          name="device-plugin-pods"),
                         threading.Thread(target=self._dispatch, daemon=True, name="device-plugin-due"),
                         threading.Thread(target=self._loop, args=(self._answer_handshakes,), daemon=True,
                                          name="device-plugin-handshake")]
        self.completed: list[str] = []

    def start(self) -> DevicePluginStandIn:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._resumed.set()
        with self._due_changed:
            self._due_changed.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self._workers.shutdown(wait=False, cancel_futures=True)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave node locks held meanwhile (as a device plugin that has not set the container up yet)."""
        self._resumed.clear()
        try:
            yield
        finally:
            self._resumed.set()
            with self._due_changed:
                self._due_changed.notify_all()

    def _paused_or_stopped(self) -> bool:
        return self._stop.is_set() or not self._resumed.is_set()

    def _loop(self, step: Callable[[], None]) -> None:
        while not self._stop.is_set():
            self._resumed.wait()
            try:
                step()
            except Exception:  # the API restarting, or a race with a test's delete: start over
                self._stop.wait(0.2)

    def _watch_allocations(self) -> None:
        """List, then watch bound pods; schedule each allocation's completion when it is first seen."""
        for pod in listed_then_watched(self._core.list_pod_for_all_namespaces, stop=self._paused_or_stopped,
                                       field_selector="spec.nodeName!="):
            self._schedule(pod)

    def _schedule(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        if (metadata.get("annotations") or {}).get(names.POD_BIND_PHASE) != "allocating":
            return
        key = (metadata["namespace"], metadata["name"], metadata["uid"])
        with self._due_changed:
            if key in self._scheduled:
                return
            self._scheduled.add(key)
            self._sequence += 1
            heapq.heappush(self._due, (time.monotonic() + self.allocate_delay_seconds, self._sequence, *key,
                                       pod["spec"]["nodeName"]))
            self._due_changed.notify_all()

    def _dispatch(self) -> None:
        """Hand each allocation to a worker when its delay is over (and the plugin is not paused)."""
        while not self._stop.is_set():
            with self._due_changed:
                now = time.monotonic()
                if not self._due or not self._resumed.is_set() or self._due[0][0] > now:
                    self._due_changed.wait(min(self._due[0][0] - now, 0.5) if self._due else 0.5)
                    continue
                _due, _sequence, namespace, name, uid, node = heapq.heappop(self._due)
            self._workers.submit(self._complete, namespace, name, uid, node)

    def _complete(self, namespace: str, name: str, uid: str, node: str) -> None:
        try:
            drained(self._core.patch_namespaced_pod(
                name, namespace, {"metadata": {"annotations": {names.POD_BIND_PHASE: "success"}}},
                _preload_content=False))
            self._release_lock(node, namespace, name)
            self.completed.append(f"{namespace}/{name}")
        except Exception:  # a test deleted the pod meanwhile: a later event schedules it again if it still matters
            with self._due_changed:
                self._scheduled.discard((namespace, name, uid))

    def _release_lock(self, node_name: str, namespace: str, pod_name: str) -> None:
        for _ in range(5):
            metadata = json.loads(drained(self._core.read_node(node_name, _preload_content=False)))["metadata"]
            lock = (metadata.get("annotations") or {}).get(names.NODE_LOCK, "")
            if not lock.endswith(f",{namespace},{pod_name}"):
                return
            try:
                drained(self._core.patch_node(node_name, {"metadata": {
                    "resourceVersion": metadata["resourceVersion"], "annotations": {names.NODE_LOCK: None}}},
                    _preload_content=False))
                return
            except ApiException as error:
                if error.status != 409:
                    raise

    def _answer_handshakes(self) -> None:
        """Answer every ``Requesting_…`` handshake a node shows, from a list and then a watch of the nodes."""
        for node in listed_then_watched(self._core.list_node, stop=self._paused_or_stopped):
            requested = [key for key, value in (node["metadata"].get("annotations") or {}).items()
                         if is_handshake_key(key) and value.startswith("Requesting_")]
            if requested:
                stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
                drained(self._core.patch_node(node["metadata"]["name"], {"metadata": {"annotations": dict.fromkeys(
                    requested, f"Reported {stamp}")}}, _preload_content=False))


def drained(response: Any) -> bytes:
    """The bytes of an answer asked for with ``_preload_content=False``, read whole (which hands the connection back
    to the pool) and not decoded into the client's models."""
    return bytes(response.data)


def listed_then_watched(list_call: Callable[..., Any], *, stop: Callable[[], bool] = lambda: False,
                        timeout_seconds: int = 30, **selectors: Any) -> Iterator[dict[str, Any]]:
    """Every object of a list, then every ADDED or MODIFIED object of a watch from the list's version, as JSON (not
    the client's models: see `DevicePluginStandIn`); ends when the watch does (its timeout, or an ERROR such as 410
    Gone: the caller lists again) or as soon as ``stop()`` says so after an object."""
    listing = json.loads(drained(list_call(**selectors, _preload_content=False)))
    for item in listing["items"]:
        yield item
        if stop():
            return
    response = list_call(**selectors, watch=True, resource_version=listing["metadata"]["resourceVersion"],
                         timeout_seconds=timeout_seconds, _preload_content=False)
    try:
        for line in iter_resp_lines(response):
            event = json.loads(line) if line else {}
            if event.get("type") == "ERROR" or stop():
                return
            if event.get("type") in ("ADDED", "MODIFIED"):
                yield event["object"]
                if stop():
                    return
    finally:  # a watch read part-way must not go back to the pool: the next request would read its rest
        response.close()
        response.release_conn()


def is_handshake_key(key: str) -> bool:
    """A family's handshake annotation: NVIDIA's ``hami.io/node-handshake`` or ``hami.io/node-handshake-<CW>``."""
    return key == names.NODE_HANDSHAKE or key.startswith(names.NODE_HANDSHAKE + "-")


# -- the control plane -----------------------------------------------------------------------------------------


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + hami-web + kube-scheduler on free ports of 127.0.0.1, under ``workdir``."""

    workdir: Path
    assets: dict[str, Path]
    hami_web_arguments: tuple[str, ...] = ()
    processes: dict[str, Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.etcd_port, self.etcd_peer_port, self.apiserver_port, *hami_web = free_ports(6)
        # Per hami-web replica: (webhook, extender, metrics) ports. The webhook registration calls "hami-web".
        self.listeners: dict[str, tuple[int, int, int]] = {"hami-web": (hami_web[0], hami_web[1], hami_web[2])}
        self.api_url = f"https://127.0.0.1:{self.apiserver_port}"
        self.api_client: kubernetes.client.ApiClient | None = None
        self.device_plugin: DevicePluginStandIn | None = None

    # -- start and stop ---------------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self._start_etcd()
            self._start_apiserver()
            self._install_manifests()
            self._issue_serving_certificates()
            self.start_hami_web()
            self.start_scheduler()
            self.device_plugin = DevicePluginStandIn(self.api_client).start()
        except BaseException:
            self.report_logs()
            self.stop()
            raise
        return self

    def start_api(self) -> ControlPlane:
        """Only etcd and kube-apiserver (the benchmarks that time the API itself)."""
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.report_logs()
            self.stop()
            raise
        return self

    @property
    def webhook_port(self) -> int:
        """The webhook listener of replica ``hami-web`` (the one the webhook registration calls)."""
        return self.listeners["hami-web"][0]

    @property
    def extender_port(self) -> int:
        return self.listeners["hami-web"][1]

    @property
    def metrics_port(self) -> int:
        return self.listeners["hami-web"][2]

    def stop(self) -> None:
        if self.device_plugin is not None:
            self.device_plugin.stop()
        for name in reversed(list(self.processes)):
            # Our processes and kube-scheduler get SIGTERM (their clean exit is part of what is tested); the
            # throwaway API server and etcd are killed, which saves their graceful shutdown's seconds.
            self.processes[name].stop(kill=name in ("kube-apiserver", "etcd"), timeout_seconds=10)
        if self.api_client is not None:
            self.api_client.close()

    def report_logs(self, lines: int = 30) -> str:
        """The last lines of every process's log (printed when a test fails)."""
        text = "\n".join(f"----- {name} ({process.log_path}) -----\n{process.tail(lines)}"
                         for name, process in self.processes.items())
        print(text, file=sys.stderr)
        return text

    def _start_etcd(self) -> None:
        environment = {key: value for key, value in os.environ.items() if not key.startswith("ETCD_")}
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        etcd = Process("etcd", [
            str(self.assets["etcd"]), "--name=e2e", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}", "--unsafe-no-fsync=true", "--log-level=warn",
        ], self.logs / "etcd.log", environment).start()
        self.processes["etcd"] = etcd

        def healthy() -> bool:
            etcd.check_alive()
            with urllib.request.urlopen(f"{client}/health", timeout=2) as response:
                return json.load(response).get("health") == "true"

        wait_until(healthy, timeout_seconds=START_TIMEOUT_SECONDS, what="etcd /health")

    def _start_apiserver(self) -> None:
        pki = self.workdir / "apiserver-pki"
        self.api_ca, api_cert, api_key = make_local_certificates(pki)
        ca_key = pki / "ca.key"
        proxy_cert, proxy_key = _write_client_certificate(pki, ca_cert=self.api_ca, ca_key=ca_key,
                                                          common_name="front-proxy-client", prefix="front-proxy")
        service_account_key = _write_service_account_key(pki / "sa.key")
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        apiserver = Process("kube-apiserver", [
            str(self.assets["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={api_cert}", f"--tls-private-key-file={api_key}",
            f"--client-ca-file={self.api_ca}", f"--token-auth-file={tokens}",
            f"--service-account-key-file={service_account_key}",
            f"--service-account-signing-key-file={service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none", "--disable-admission-plugins=TaintNodesByCondition",
            f"--requestheader-client-ca-file={self.api_ca}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={proxy_cert}", f"--proxy-client-key-file={proxy_key}",
            "--enable-priority-and-fairness=false", "--profiling=false", "--allow-privileged=true",  # as kubeadm
        ], self.logs / "kube-apiserver.log").start()
        self.processes["kube-apiserver"] = apiserver
        context = ssl.create_default_context(cafile=str(self.api_ca))

        def ready() -> bool:
            apiserver.check_alive()
            request = urllib.request.Request(f"{self.api_url}/readyz",
                                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return response.status == 200

        wait_until(ready, timeout_seconds=START_TIMEOUT_SECONDS, what="kube-apiserver /readyz")
        self.admin_kubeconfig = write_kubeconfig(self.workdir / "admin.kubeconfig", server=self.api_url,
                                                 ca_path=self.api_ca, token=ADMIN_TOKEN)
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(self.admin_kubeconfig),
                                           client_configuration=configuration)
        self.api_client = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.api_client)

    def _install_manifests(self) -> None:
        """Namespace, ServiceAccounts and RBAC from ``k8s/``, then a token for each identity we run as."""
        documents = [*load_manifests("namespace.yaml"), *load_manifests("serviceaccount.yaml"),
                     *load_manifests("rbac.yaml"), *load_manifests("certs-rbac.yaml")]
        for document in documents:
            kubernetes.utils.create_from_dict(self.api_client, document)
        rbac = load_manifests("rbac.yaml")
        self.hami_web_identity = _subject_of_binding(rbac, "hami-web")
        self.scheduler_identity = _subject_of_binding(rbac, "system:kube-scheduler")
        self.hami_web_kubeconfig = self._service_account_kubeconfig(*self.hami_web_identity)
        self.scheduler_kubeconfig = self._service_account_kubeconfig(*self.scheduler_identity)
        self.certs_kubeconfig = self._service_account_kubeconfig(SYSTEM_NAMESPACE, "hami-web-certs")
        webhook = webhook_configuration(url=f"https://127.0.0.1:{self.webhook_port}/webhook")
        kubernetes.client.AdmissionregistrationV1Api(self.api_client).create_mutating_webhook_configuration(webhook)

    def _service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": 24 * 3600}}
        answer = self.core.create_namespaced_service_account_token(name, namespace, request)
        return write_kubeconfig(self.workdir / f"{namespace}-{name}.kubeconfig", server=self.api_url,
                                ca_path=self.api_ca, token=answer.status.token)

    def _issue_serving_certificates(self) -> None:
        """``hami-web certs`` as the certificate Job runs it: Secrets + caBundle in the cluster, files for us."""
        self.tls_dir = self.workdir / "hami-web-tls"
        result = subprocess.run(
            [sys.executable, "-m", "hami_web", "certs", "--kubeconfig", str(self.certs_kubeconfig),
             "--namespace", SYSTEM_NAMESPACE, "--out-dir", str(self.tls_dir), "--webhook-wait-seconds", "5"],
            capture_output=True, text=True, timeout=60, env=self._python_environment())
        if result.returncode != 0:
            raise RuntimeError(f"hami-web certs failed ({result.returncode}):\n{result.stderr}")
        self.tls_ca = self.tls_dir / "ca.crt"

    # -- hami-web -------------------------------------------------------------------------------------------

    @staticmethod
    def _python_environment() -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def hami_web_command(self, name: str = "hami-web") -> list[str]:
        webhook, extender, metrics = self.listeners[name]
        return [sys.executable, "-m", "hami_web", "serve",
                "--cert-file", str(self.tls_dir / "tls.crt"), "--key-file", str(self.tls_dir / "tls.key"),
                "--bind", f"127.0.0.1:{webhook}", "--extender-bind", f"127.0.0.1:{extender}",
                "--metrics-bind-address", f"127.0.0.1:{metrics}", "--ui-bind", "off",  # replicas share the host
                "--kubeconfig", str(self.hami_web_kubeconfig), "--threads", "8", *self.hami_web_arguments]

    def start_hami_web(self, name: str = "hami-web") -> Process:
        """Start (or restart, on the same ports) a hami-web replica; ``hami-web`` is the one the webhook calls."""
        if name not in self.listeners:
            webhook, extender, metrics = free_ports(3)
            self.listeners[name] = (webhook, extender, metrics)
        process = Process(name, self.hami_web_command(name), self.logs / f"{name}.log",
                          self._python_environment()).start()
        self.processes[name] = process
        self.wait_hami_web_ready(name)
        return process

    def stop_hami_web(self, name: str = "hami-web", *, kill: bool = False) -> int | None:
        return self.processes[name].stop(kill=kill)

    def wait_hami_web_ready(self, name: str = "hami-web", timeout_seconds: float = START_TIMEOUT_SECONDS) -> None:
        process = self.processes[name]

        def ready() -> bool:
            process.check_alive()
            return self.hami_web_get("/readyz", name=name)[0] == 200

        wait_until(ready, timeout_seconds=timeout_seconds, what=f"{name} /readyz")

    def hami_web_get(self, path: str, *, name: str = "hami-web") -> tuple[int, str]:
        """GET a path of a hami-web replica's webhook listener over HTTPS, verified against its CA."""
        context = ssl.create_default_context(cafile=str(self.tls_ca))
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.listeners[name][0]}{path}", timeout=5,
                                        context=context) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    # -- kube-scheduler --------------------------------------------------------------------------------------

    def start_scheduler(self, name: str = "kube-scheduler", *, with_extender: bool = True, hami_web: str = "hami-web",
                        profile_name: str | None = None, leader_elect: bool = True) -> Process:
        """kube-scheduler with the shipped configuration, calling the extender of replica ``hami_web`` (or none).

        Schedulers of the shipped profile elect a leader on the shipped Lease (an active/standby pair). A second
        scheduler with another profile runs without leader election: the shipped RBAC lets the scheduler's
        identity hold only the ``hami-scheduler`` Lease.
        """
        configuration = scheduler_configuration(
            extender_port=self.listeners[hami_web][1] if with_extender else None, ca_path=self.tls_ca,
            kubeconfig=self.scheduler_kubeconfig)
        if profile_name is not None:
            configuration["profiles"][0]["schedulerName"] = profile_name
        if not leader_elect:
            configuration["leaderElection"] = {"leaderElect": False}
        config_path = self.workdir / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(configuration))
        port = free_port()
        process = Process(name, [
            str(self.assets["kube-scheduler"]), f"--config={config_path}",
            f"--authentication-kubeconfig={self.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={self.scheduler_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--v=2",
        ], self.logs / f"{name}.log").start()
        self.processes[name] = process
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # kube-scheduler serves a self-signed certificate

        def healthy() -> bool:
            process.check_alive()
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=context) as answer:
                return answer.status == 200

        wait_until(healthy, timeout_seconds=START_TIMEOUT_SECONDS, what=f"{name} /healthz")
        return process

    # -- cluster objects ----------------------------------------------------------------------------------------

    def create_namespace(self, name: str, *, labels: dict[str, str] | None = None) -> str:
        """A namespace with its ``default`` ServiceAccount (no controller-manager creates it here)."""
        self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        self.core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
        return name

    def create_gpu_node(self, name: str, devices: Sequence[Device], *, labels: dict[str, str] | None = None,
                        annotations: dict[str, str] | None = None) -> None:
        """A Node as HAMi's device plugin leaves it (register annotation, handshake, allocatable GPUs)."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
        node_annotations = {names.NODE_REGISTER: encode_register_json(list(devices)),
                            names.NODE_HANDSHAKE: f"Reported {stamp}", **(annotations or {})}
        self.create_node(name, annotations=node_annotations, devices={"nvidia.com/gpu": str(len(devices) * 10)},
                         labels=labels)

    def create_node(self, name: str, *, annotations: dict[str, str], devices: dict[str, str],
                    labels: dict[str, str] | None = None) -> None:
        """A Ready Node with ``annotations`` and, besides cpu, memory and pods, the device ``devices`` in its capacity
        and allocatable (what a family's device plugin advertises through kubelet)."""
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", **devices}
        self.core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                       **(labels or {})},
                                            "annotations": dict(annotations)},
                               "status": {"capacity": capacity, "allocatable": capacity,
                                          "conditions": [{"type": "Ready", "status": "True",
                                                          "reason": "KubeletReady", "message": "e2e"}]}})

    def pod(self, namespace: str, name: str) -> Any:
        return self.core.read_namespaced_pod(name, namespace)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Force delete (no kubelet would ever confirm a graceful one)."""
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def wait_bound(self, namespace: str, name: str, *, timeout_seconds: float = 30.0) -> Any:
        """The pod once kube-scheduler has bound it (``spec.nodeName`` set)."""
        return wait_until(lambda: (pod := self.pod(namespace, name)).spec.node_name and pod,
                          timeout_seconds=timeout_seconds, what=f"pod {namespace}/{name} to be bound")

    def events(self, namespace: str, name: str) -> list[Any]:
        """The pod's events, as ``kubectl describe pod`` lists them (oldest first)."""
        items = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}").items
        return sorted(items, key=lambda event: (event.last_timestamp or event.event_time or event.metadata
                                                .creation_timestamp, event.metadata.name))

    def wait_event(self, namespace: str, name: str, reason: str, *, containing: str = "",
                   timeout_seconds: float = 30.0) -> Any:
        """The first event of ``reason`` on the pod whose message contains ``containing``."""
        def found() -> Any:
            for event in self.events(namespace, name):
                if event.reason == reason and containing in (event.message or ""):
                    return event
            return None

        return wait_until(found, timeout_seconds=timeout_seconds,
                          what=f"event {reason} containing {containing!r} on {namespace}/{name}",
                          interval_seconds=0.2)


def gpu_container(name: str = "cuda", limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A container as a user writes it (``resources.limits``); pause image, never started here."""
    body: dict[str, Any] = {"name": name, "image": PAUSE_IMAGE, **extra}
    if limits:
        body["resources"] = {"limits": dict(limits)}
    return body


def pod_manifest(name: str, containers: Sequence[dict[str, Any]], *, node_selector: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod as ``kubectl apply`` would send it: no schedulerName (the webhook sets ours)."""
    body_spec: dict[str, Any] = {"containers": list(containers), "terminationGracePeriodSeconds": 0, **spec}
    if node_selector:
        body_spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": body_spec}

