"""The webhook's ``matchConditions`` (``k8s/webhook.yaml``) checked by a real kube-apiserver and etcd.

Covers: kube-apiserver accepts the MutatingWebhookConfiguration as written (its CEL compiles and type-checks
against the Pod schema); pod CREATEs reach the webhook exactly when a container or init container has a resource
of a device family's domain (``nvidia.com/*``, ``hygon.com/*``, ``cambricon.com/*``, ``iluvatar.ai/*``,
``huawei.com/*``) in its limits or requests — seen by pointing the webhook at a closed port with ``failurePolicy:
Fail``: a call is a refusal ("failed calling webhook"), no call is a created pod.

Needs ``kube-apiserver`` (``$KUBEBUILDER_ASSETS`` or ``/work/shared/kube/bin``) and ``etcd`` (``$KUBEBUILDER_ASSETS``
or ``/usr/bin/etcd``); skipped with the reason when they are missing.
"""

from __future__ import annotations

import base64
import copy
import itertools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hami_web.certs.pki import ServingIdentity, create_ca, create_serving_certificate

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "match-conditions-admin-token"  # a throwaway token of a throwaway API server
START_TIMEOUT_SECONDS = 60.0


def _binary(name: str, fallback: str) -> str | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    candidates = [os.path.join(assets, name)] if assets else []
    candidates.append(fallback)
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


APISERVER = _binary("kube-apiserver", "/work/shared/kube/bin/kube-apiserver")
ETCD = _binary("etcd", shutil.which("etcd") or "/usr/bin/etcd")

pytestmark = pytest.mark.skipif(APISERVER is None or ETCD is None,
                                reason="needs kube-apiserver and etcd (set KUBEBUILDER_ASSETS)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(session: requests.Session, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    last = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{url} exited early:\n{log.read_text()[-3000:]}")
        try:
            answer = session.get(url, params={"verbose": "1"}, timeout=2)
            if answer.status_code == 200:
                return
            last = answer.text
        except requests.RequestException as error:
            last = str(error)
        time.sleep(0.2)
    pytest.fail(f"{url} not ready after {START_TIMEOUT_SECONDS}s: {last}")


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[requests.Session, str]]:
    """etcd and kube-apiserver on free ports; yields an admin session and the API URL."""
    assert APISERVER is not None and ETCD is not None
    work = tmp_path_factory.mktemp("kube")
    now = datetime.now(UTC)
    ca = create_ca(common_name="match-conditions-ca", now=now, days=1)
    serving = create_serving_certificate(ca, ServingIdentity("127.0.0.1", ("localhost",)), now=now, days=1)
    signer = ec.generate_private_key(ec.SECP256R1())
    files = {"ca.crt": ca.cert_pem, "tls.crt": serving.cert_pem, "tls.key": serving.key_pem,
             "sa.key": signer.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                            serialization.NoEncryption()),
             "sa.pub": signer.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo),
             "tokens.csv": f"{TOKEN},admin,1,system:masters\n".encode()}
    for name, content in files.items():
        (work / name).write_bytes(content)
    client_port, peer_port, secure_port = _free_port(), _free_port(), _free_port()
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ETCD_")}
    etcd_log, apiserver_log = (work / "etcd.log").open("wb"), (work / "apiserver.log").open("wb")
    etcd = subprocess.Popen(
        [ETCD, "--name=test", f"--data-dir={work / 'etcd'}", f"--listen-client-urls=http://127.0.0.1:{client_port}",
         f"--advertise-client-urls=http://127.0.0.1:{client_port}",
         f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
         f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
         f"--initial-cluster=test=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync=true"],
        stdout=etcd_log, stderr=subprocess.STDOUT, env=environment)
    kube = subprocess.Popen(
        [APISERVER, f"--etcd-servers=http://127.0.0.1:{client_port}", "--bind-address=127.0.0.1",
         "--advertise-address=127.0.0.1", f"--secure-port={secure_port}", f"--tls-cert-file={work / 'tls.crt'}",
         f"--tls-private-key-file={work / 'tls.key'}", f"--token-auth-file={work / 'tokens.csv'}",
         f"--service-account-key-file={work / 'sa.pub'}", f"--service-account-signing-key-file={work / 'sa.key'}",
         "--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.0.0.0/24",
         "--authorization-mode=Node,RBAC", "--endpoint-reconciler-type=none",
         "--disable-admission-plugins=TaintNodesByCondition,ServiceAccount"],
        stdout=apiserver_log, stderr=subprocess.STDOUT)
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    session.verify = str(work / "ca.crt")
    session.trust_env = False  # REQUESTS_CA_BUNDLE would otherwise replace our CA
    url = f"https://127.0.0.1:{secure_port}"
    try:
        _wait_ready(session, f"{url}/readyz", kube, work / "apiserver.log")
        yield session, url
    finally:
        for process in (kube, etcd):
            process.terminate()
        for process in (kube, etcd):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        etcd_log.close()
        apiserver_log.close()


@pytest.fixture(scope="module")
def webhook(apiserver: tuple[requests.Session, str]) -> str:
    """Our MutatingWebhookConfiguration, pointed at a closed port with failurePolicy Fail; returns a namespace."""
    session, url = apiserver
    configuration = copy.deepcopy(yaml.safe_load((REPO_ROOT / "k8s" / "webhook.yaml").read_text()))
    ca_pem = Path(session.verify).read_bytes()  # type: ignore[arg-type]
    for hook in configuration["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{_free_port()}/webhook",
                                "caBundle": base64.b64encode(ca_pem).decode()}
        hook["failurePolicy"] = "Fail"
        hook["timeoutSeconds"] = 2
    created = session.post(f"{url}/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                           json=configuration, timeout=10)
    assert created.status_code == 201, created.text
    namespace = "gpu-tenants"
    answer = session.post(f"{url}/api/v1/namespaces", timeout=10,
                          json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    assert answer.status_code == 201, answer.text
    # The API server picks webhook configurations up from its informer: wait until a GPU probe pod is refused.
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    for attempt in itertools.count():
        probe = _pod(f"probe-{attempt}", containers=[_container(limits=GPU)])
        if session.post(f"{url}/api/v1/namespaces/{namespace}/pods", json=probe, timeout=15).status_code >= 400:
            return namespace
        assert time.monotonic() < deadline, "the webhook configuration never took effect"
        time.sleep(0.1)
    raise AssertionError("itertools.count() never ends")


def _pod(name: str, *, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _container(name: str = "main", *, limits: dict[str, str] | None = None,
               requests_: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox"}
    resources = {key: value for key, value in (("limits", limits), ("requests", requests_)) if value}
    if resources:
        body["resources"] = resources
    return body


GPU = {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize(("pod", "reaches_webhook"), [
    pytest.param(_pod("plain", containers=[_container()]), False, id="no-resources"),
    pytest.param(_pod("cpu-only", containers=[_container(limits={"cpu": "1"}, requests_={"memory": "1Gi"})]), False,
                 id="other-resources"),
    pytest.param(_pod("gpu-limits", containers=[_container(limits=GPU)]), True, id="gpu-in-limits"),
    pytest.param(_pod("gpumem-requests", containers=[_container(requests_={"nvidia.com/gpumem": "3k"})]), True,
                 id="gpumem-in-requests"),
    pytest.param(_pod("second-container", containers=[_container("a"), _container("b", limits=GPU)]), True,
                 id="any-container"),
    pytest.param(_pod("init-gpu", containers=[_container()], init=[_container("fetch", limits=GPU)]), True,
                 id="init-container"),
    pytest.param(_pod("other-vendor", containers=[_container(limits={"example.com/accelerator": "1"})]), False,
                 id="other-vendor"),
    pytest.param(_pod("amd-limits", containers=[_container(limits={"amd.com/gpu": "1"})]), True,
                 id="amd-gpu-in-limits"),
    pytest.param(_pod("neuron-requests", containers=[_container(requests_={"aws.amazon.com/neuroncore": "1"})]),
                 True, id="neuron-core-in-requests"),
    pytest.param(_pod("dcu-limits", containers=[_container(limits={"hygon.com/dcunum": "1"})]), True,
                 id="hygon-dcu-in-limits"),
    pytest.param(_pod("dcumem-requests", containers=[_container(requests_={"hygon.com/dcumem": "4000"})]), True,
                 id="hygon-dcumem-in-requests"),
    pytest.param(_pod("mlu-limits", containers=[_container(limits={"cambricon.com/vmlu": "1"})]), True,
                 id="cambricon-mlu-in-limits"),
    pytest.param(_pod("mlu-init", containers=[_container()],
                      init=[_container("fetch", requests_={"cambricon.com/mlu.smlu.vmemory": "48"})]), True,
                 id="cambricon-vmemory-in-init-requests"),
    pytest.param(_pod("iluvatar-limits", containers=[_container(limits={"iluvatar.ai/MR-V100-vgpu": "1"})]), True,
                 id="iluvatar-in-limits"),
    pytest.param(_pod("iluvatar-init", containers=[_container()],
                      init=[_container("fetch", requests_={"iluvatar.ai/BI-V150.vMem": "8"})]), True,
                 id="iluvatar-in-init-requests"),
    pytest.param(_pod("ascend-limits", containers=[_container(limits={"huawei.com/Ascend910B3": "1"})]), True,
                 id="ascend-in-limits"),
    pytest.param(_pod("ascend-init", containers=[_container()],
                      init=[_container("fetch", requests_={"huawei.com/Ascend910C-memory": "16384"})]), True,
                 id="ascend-in-init-requests"),
    pytest.param(_pod("lookalike", containers=[_container(limits={"example.com/nvidia.com-gpu": "1"})]), False,
                 id="prefix-not-domain"),
])
def test_only_pods_asking_for_device_resources_reach_the_webhook(
        apiserver: tuple[requests.Session, str], webhook: str, pod: dict[str, Any], reaches_webhook: bool) -> None:
    session, url = apiserver
    answer = session.post(f"{url}/api/v1/namespaces/{webhook}/pods", json=pod, timeout=15)
    if reaches_webhook:
        assert answer.status_code >= 400, answer.text
        assert "failed calling webhook" in answer.json()["message"]
    else:
        assert answer.status_code == 201, answer.text

