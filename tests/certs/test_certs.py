"""Certificate bootstrap (``hami-web certs``).

Covers: the CA and serving certificate as a client would check them (chain, SANs, key usage, EKU, expiry);
private keys written 0600; idempotency (kept serials, nothing rewritten); renewal of a certificate with
10 days left, with wrong names or unparsable, reusing a CA that is still good; CA rotation keeping the old
CA in the trust bundle; the kubernetes.io/tls Secret and every webhook's caBundle through the in-process
API server; the CLI with ``--out-dir`` and the ``certs/bootstrap.sh`` wrapper; throwaway local
certificates usable by the ``ssl`` module.
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from hami_web.certs import (
    KeyPair,
    Lifetimes,
    ServingIdentity,
    bootstrap_cluster,
    bootstrap_directory,
    ensure_certificates,
    make_local_certificates,
)
from hami_web.cli import main
from hami_web.kube import Kube, NotFoundError
from hami_web.localcluster import LocalCluster

NAMESPACE = "hami-system"
IDENTITY = ServingIdentity.for_service("hami-web", NAMESPACE)
SERVICE_NAMES = ["hami-web", "hami-web.hami-system", "hami-web.hami-system.svc",
                 "hami-web.hami-system.svc.cluster.local"]


def _certificate(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _serials(directory: Path) -> tuple[int, int]:
    return _certificate(directory / "ca.crt").serial_number, _certificate(directory / "tls.crt").serial_number


def _webhook_configuration(*webhook_names: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "hami-web"},
        "webhooks": [{"name": name, "admissionReviewVersions": ["v1", "v1beta1"], "sideEffects": "None",
                      "clientConfig": {"service": {"name": "hami-web", "namespace": NAMESPACE, "path": "/webhook"}},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"]}]}
                     for name in webhook_names],
    }


def _bootstrap(kube: Kube, **overrides: object) -> object:
    options: dict = {"namespace": NAMESPACE, "secret_name": "hami-web-tls", "ca_secret_name": "hami-web-ca",
                     "webhook_configuration": "hami-web"}
    options.update(overrides)
    return bootstrap_cluster(kube, IDENTITY, **options)


# -- what a client checks -------------------------------------------------------------------------------


def test_serving_certificate_is_signed_by_the_ca_for_the_service_names(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY)
    ca, serving = _certificate(tmp_path / "ca.crt"), _certificate(tmp_path / "tls.crt")

    serving.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == SERVICE_NAMES
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert serving.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = serving.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert list(serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    lifetime = serving.not_valid_after_utc - datetime.now(UTC)
    assert timedelta(days=364) < lifetime <= timedelta(days=365)
    assert ca.not_valid_after_utc - datetime.now(UTC) > timedelta(days=3600)


def test_an_ssl_client_trusting_the_ca_accepts_the_serving_certificate(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")  # key matches the certificate
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client_side, server_side = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_connection = client.wrap_bio(client_side, server_side, server_hostname="hami-web.hami-system.svc")
    server_connection = server.wrap_bio(server_side, client_side, server_side=True)
    # The two ends share one pair of BIOs; pump the handshake until both are done (hostname checked too).
    for _ in range(10):
        done = 0
        for connection in (client_connection, server_connection):
            try:
                connection.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
        if done == 2:
            break
    assert client_connection.getpeercert()["subject"] == ((("commonName", "hami-web.hami-system.svc"),),)


def test_private_keys_are_written_with_mode_0600(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path / "certs", IDENTITY)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "certs").iterdir()}
    assert modes["tls.key"] == 0o600
    assert modes["ca.key"] == 0o600
    assert modes["tls.crt"] & 0o077 in (0o044, 0o004, 0o040, 0)  # certificates are public, umask applies
    assert sorted(modes) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]  # no temporary file left behind


# -- idempotency and renewal ------------------------------------------------------------------------------


def test_second_run_keeps_both_certificates_and_writes_nothing(tmp_path: Path) -> None:
    first = bootstrap_directory(tmp_path, IDENTITY)
    modified = {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()}

    second = bootstrap_directory(tmp_path, IDENTITY)

    assert first.changed and not second.changed
    assert second.serving.certificate().serial_number == first.serving.certificate().serial_number
    assert {path.name: path.stat().st_mtime_ns for path in tmp_path.iterdir()} == modified


def test_certificate_with_10_days_left_is_renewed_by_the_same_ca(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY, now=datetime.now(UTC) - timedelta(days=355))
    ca_serial, old_serial = _serials(tmp_path)

    issued = bootstrap_directory(tmp_path, IDENTITY)

    assert "10 days left" in issued.serving_reason or "9 days left" in issued.serving_reason
    assert issued.ca_reason == ""
    assert _serials(tmp_path)[0] == ca_serial
    assert _serials(tmp_path)[1] != old_serial
    _certificate(tmp_path / "tls.crt").verify_directly_issued_by(_certificate(tmp_path / "ca.crt"))


def test_certificate_with_40_days_left_is_kept(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY, now=datetime.now(UTC) - timedelta(days=325))
    serials = _serials(tmp_path)

    assert not bootstrap_directory(tmp_path, IDENTITY).changed
    assert _serials(tmp_path) == serials


def test_certificate_with_other_names_is_renewed(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, ServingIdentity.for_service("old-name", NAMESPACE))
    ca_serial, old_serial = _serials(tmp_path)

    issued = bootstrap_directory(tmp_path, IDENTITY)

    assert "differ" in issued.serving_reason
    assert _serials(tmp_path) != (ca_serial, old_serial) and _serials(tmp_path)[0] == ca_serial
    names = _certificate(tmp_path / "tls.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.value.get_values_for_type(x509.DNSName) == SERVICE_NAMES


def test_extra_dns_name_is_a_name_change(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY)
    wider = ServingIdentity.for_service("hami-web", NAMESPACE, extra_dns_names=("gpu-webhook.example.com",))
    assert bootstrap_directory(tmp_path, wider).serving_reason


def test_unparsable_certificate_is_renewed(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY)
    (tmp_path / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")

    issued = bootstrap_directory(tmp_path, IDENTITY)

    assert "unparsable" in issued.serving_reason
    _certificate(tmp_path / "tls.crt").verify_directly_issued_by(_certificate(tmp_path / "ca.crt"))


def test_certificate_not_matching_its_key_is_renewed(tmp_path: Path) -> None:
    bootstrap_directory(tmp_path, IDENTITY)
    (tmp_path / "tls.key").write_bytes((tmp_path / "ca.key").read_bytes())

    assert "does not match" in bootstrap_directory(tmp_path, IDENTITY).serving_reason


def test_expiring_ca_is_replaced_and_stays_trusted_until_it_expires() -> None:
    now = datetime.now(UTC)
    lifetimes = Lifetimes(serving_days=365, ca_days=3650, renew_before_days=30)
    old = ensure_certificates(stored_ca=None, stored_serving=None, identity=IDENTITY, lifetimes=lifetimes,
                              now=now - timedelta(days=3640), ca_common_name="test-ca")

    renewed = ensure_certificates(stored_ca=old.ca, stored_serving=old.serving, identity=IDENTITY,
                                  lifetimes=lifetimes, now=now, ca_common_name="test-ca")

    assert "days left" in renewed.ca_reason and renewed.serving_reason == "CA replaced"
    renewed.serving.certificate().verify_directly_issued_by(renewed.ca.certificate())
    trusted = x509.load_pem_x509_certificates(renewed.trust_bundle_pem)
    assert [c.serial_number for c in trusted] == [renewed.ca.certificate().serial_number,
                                                 old.ca.certificate().serial_number]


def test_serving_certificate_never_outlives_its_ca() -> None:
    now = datetime.now(UTC)
    issued = ensure_certificates(stored_ca=None, stored_serving=None, identity=IDENTITY,
                                 lifetimes=Lifetimes(serving_days=365, ca_days=100, renew_before_days=30), now=now,
                                 ca_common_name="short-ca")
    assert issued.serving.certificate().not_valid_after_utc <= issued.ca.certificate().not_valid_after_utc


def test_garbage_in_the_store_is_judged_not_trusted() -> None:
    garbage = KeyPair(b"junk", b"junk")
    issued = ensure_certificates(stored_ca=garbage, stored_serving=garbage, identity=IDENTITY,
                                 lifetimes=Lifetimes(), now=datetime.now(UTC), ca_common_name="ca")
    assert "unparsable" in issued.ca_reason
    assert issued.trust_bundle_pem == issued.ca.cert_pem


# -- in the cluster ----------------------------------------------------------------------------------------


def test_bootstrap_writes_the_tls_secret_and_every_ca_bundle(apiserver: LocalCluster, kube: Kube) -> None:
    apiserver.load([_webhook_configuration("gpu.hami.io", "second.hami.io")])

    _bootstrap(kube)

    secret = apiserver.get("secrets", "hami-web-tls", NAMESPACE)
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    assert sorted(data) == ["ca.crt", "tls.crt", "tls.key"]
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    x509.load_pem_x509_certificate(data["tls.crt"]).verify_directly_issued_by(ca)
    ca_secret = apiserver.get("secrets", "hami-web-ca", NAMESPACE)
    assert ca_secret is not None and base64.b64decode(ca_secret["data"]["tls.crt"]) == data["ca.crt"]
    configuration = apiserver.get("mutatingwebhookconfigurations", "hami-web")
    assert configuration is not None
    bundles = [base64.b64decode(w["clientConfig"]["caBundle"]) for w in configuration["webhooks"]]
    assert bundles == [data["ca.crt"], data["ca.crt"]]
    assert configuration["webhooks"][0]["clientConfig"]["service"]["path"] == "/webhook"  # rest untouched


def test_cluster_bootstrap_twice_changes_nothing(apiserver: LocalCluster, kube: Kube) -> None:
    apiserver.load([_webhook_configuration("gpu.hami.io")])
    first = _bootstrap(kube)
    versions = (apiserver.get("secrets", "hami-web-tls", NAMESPACE)["metadata"]["resourceVersion"],
                apiserver.get("secrets", "hami-web-ca", NAMESPACE)["metadata"]["resourceVersion"],
                apiserver.get("mutatingwebhookconfigurations", "hami-web")["metadata"]["resourceVersion"])

    second = _bootstrap(kube)

    assert not second.changed
    assert second.serving.certificate().serial_number == first.serving.certificate().serial_number
    assert versions == (apiserver.get("secrets", "hami-web-tls", NAMESPACE)["metadata"]["resourceVersion"],
                        apiserver.get("secrets", "hami-web-ca", NAMESPACE)["metadata"]["resourceVersion"],
                        apiserver.get("mutatingwebhookconfigurations", "hami-web")["metadata"]["resourceVersion"])


def test_cluster_renewal_replaces_the_secret_and_keeps_the_ca_bundle(apiserver: LocalCluster, kube: Kube) -> None:
    apiserver.load([_webhook_configuration("gpu.hami.io")])
    old = _bootstrap(kube, now=datetime.now(UTC) - timedelta(days=355))
    bundle = apiserver.get("mutatingwebhookconfigurations", "hami-web")["webhooks"][0]["clientConfig"]["caBundle"]

    renewed = _bootstrap(kube)

    assert renewed.serving_reason and not renewed.ca_reason
    secret = apiserver.get("secrets", "hami-web-tls", NAMESPACE)
    serial = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"])).serial_number
    assert serial == renewed.serving.certificate().serial_number != old.serving.certificate().serial_number
    assert apiserver.get("mutatingwebhookconfigurations", "hami-web")["webhooks"][0]["clientConfig"][
        "caBundle"] == bundle


def test_missing_webhook_configuration_is_an_error_after_the_secret_is_written(apiserver: LocalCluster,
                                                                                kube: Kube) -> None:
    with pytest.raises(NotFoundError):
        _bootstrap(kube, webhook_wait_seconds=0.0)
    assert apiserver.get("secrets", "hami-web-tls", NAMESPACE) is not None  # a retry only patches


# -- command line and local use ------------------------------------------------------------------------------


def test_certs_command_writes_files(tmp_path: Path) -> None:
    assert main(["certs", "--out-dir", str(tmp_path), "--service", "gpu", "--namespace", "ops",
                 "--validity-days", "90"]) == 0
    serving = _certificate(tmp_path / "tls.crt")
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpu.ops.svc" in names.get_values_for_type(x509.DNSName)
    assert serving.not_valid_after_utc - datetime.now(UTC) <= timedelta(days=90)


def test_certs_command_without_a_destination_fails(tmp_path: Path) -> None:
    assert main(["certs"]) == 2


def test_local_certificates_serve_127_0_0_1_and_localhost(tmp_path: Path) -> None:
    ca_path, cert_path, key_path = make_local_certificates(tmp_path)
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
    names = _certificate(cert_path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    _certificate(cert_path).verify_directly_issued_by(_certificate(ca_path))


def test_bootstrap_script_runs_the_certs_command(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "certs" / "bootstrap.sh"
    environment = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}  # no hami-web on PATH: source tree
    result = subprocess.run(["sh", str(script), "--out-dir", str(tmp_path / "tls")], env=environment,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    _certificate(tmp_path / "tls" / "tls.crt").verify_directly_issued_by(_certificate(tmp_path / "tls" / "ca.crt"))
