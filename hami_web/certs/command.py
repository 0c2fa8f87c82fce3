"""``hami-web certs``: create or renew the webhook's TLS material, in files and/or in the cluster.

Meant to run again and again (a Job at install, a CronJob afterwards, or by hand): each run keeps what is
still valid and only writes what changed, so re-running it never disturbs a working installation.
"""

from __future__ import annotations

import argparse
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from hami_web.certs.pki import Issued, KeyPair, Lifetimes, ServingIdentity, ensure_certificates
from hami_web.certs.stores import (
    CA_CERT_FILE,
    SERVING_CERT_FILE,
    SERVING_KEY_FILE,
    DirectoryStore,
    SecretStore,
    patch_ca_bundle,
)
from hami_web.kube import Kube, KubeError

log = logging.getLogger(__name__)

CA_COMMON_NAME = "hami-web-ca"
DEFAULT_LIFETIMES = Lifetimes()
# Local throwaway certificates: short-lived, and reused by the next run while they have a day left.
LOCAL_LIFETIMES = Lifetimes(serving_days=7, ca_days=7, renew_before_days=1)


class LocalCertificates(NamedTuple):
    """Paths of a local CA certificate, serving certificate and serving key."""

    ca_path: Path
    cert_path: Path
    key_path: Path


def _log_decision(what: str, reason: str, pair: KeyPair) -> None:
    certificate = pair.certificate()
    verdict = f"issued ({reason})" if reason else "kept"
    log.info("%s %s: serial %x, valid until %s", what, verdict, certificate.serial_number,
             f"{certificate.not_valid_after_utc:%Y-%m-%dT%H:%MZ}")


def bootstrap_directory(directory: Path, identity: ServingIdentity, *, lifetimes: Lifetimes = DEFAULT_LIFETIMES,
                        now: datetime | None = None) -> Issued:
    """Ensure ``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key`` in ``directory`` (keys 0600)."""
    store = DirectoryStore(Path(directory))
    stored_ca, stored_serving = store.load()
    issued = ensure_certificates(stored_ca=stored_ca, stored_serving=stored_serving, identity=identity,
                                 lifetimes=lifetimes, now=now or datetime.now(UTC), ca_common_name=CA_COMMON_NAME)
    _log_decision("CA", issued.ca_reason, issued.ca)
    _log_decision("serving certificate", issued.serving_reason, issued.serving)
    for path in store.save(issued.ca, issued.serving):
        log.info("wrote %s", path)
    return issued


def bootstrap_cluster(kube: Kube, identity: ServingIdentity, *, namespace: str, secret_name: str,
                      ca_secret_name: str, webhook_configuration: str, lifetimes: Lifetimes = DEFAULT_LIFETIMES,
                      now: datetime | None = None, webhook_wait_seconds: float = 0.0) -> Issued:
    """Ensure the TLS Secrets in ``namespace`` and the caBundle of ``webhook_configuration`` ("" = skip)."""
    store = SecretStore(kube, namespace, secret_name, ca_secret_name)
    stored_ca, stored_serving = store.load()
    issued = ensure_certificates(stored_ca=stored_ca, stored_serving=stored_serving, identity=identity,
                                 lifetimes=lifetimes, now=now or datetime.now(UTC), ca_common_name=CA_COMMON_NAME)
    _log_decision("CA", issued.ca_reason, issued.ca)
    _log_decision("serving certificate", issued.serving_reason, issued.serving)
    for name in store.save(issued):
        log.info("wrote Secret %s/%s", namespace, name)
    if webhook_configuration:
        changed = patch_ca_bundle(kube, webhook_configuration, issued.trust_bundle_pem,
                                  wait_seconds=webhook_wait_seconds)
        log.info("MutatingWebhookConfiguration %s: caBundle %s", webhook_configuration,
                 f"set on {changed} webhook(s)" if changed else "already current")
    return issued


def make_local_certificates(directory: Path | str, *, dns_names: tuple[str, ...] = ("localhost",),
                            ip_addresses: tuple[str, ...] = ("127.0.0.1",)) -> LocalCertificates:
    """Throwaway CA and serving certificate for a server on this machine (the demo, tests)."""
    identity = ServingIdentity(common_name=dns_names[0] if dns_names else ip_addresses[0], dns_names=dns_names,
                               ip_addresses=ip_addresses)
    path = Path(directory)
    bootstrap_directory(path, identity, lifetimes=LOCAL_LIFETIMES)
    return LocalCertificates(path / CA_CERT_FILE, path / SERVING_CERT_FILE, path / SERVING_KEY_FILE)


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``hami-web certs`` on the CLI's sub-parsers."""
    parser = commands.add_parser(
        "certs", help="create or renew the CA and serving certificate (files and/or Secret + caBundle)",
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--service", default="hami-web", help="Service name the webhook is reached by")
    parser.add_argument("--namespace", default="hami-system", help="namespace of the Service and the Secrets")
    parser.add_argument("--secret", default="hami-web-tls",
                        help="kubernetes.io/tls Secret the server mounts (tls.crt, tls.key, ca.crt)")
    parser.add_argument("--ca-secret", default="hami-web-ca", help="Secret holding the CA key pair (not mounted)")
    parser.add_argument("--webhook-config", default="hami-web",
                        help="MutatingWebhookConfiguration whose caBundle is set ('' to skip)")
    parser.add_argument("--out-dir", type=Path, help="also (or only) write ca.crt, ca.key, tls.crt, tls.key here")
    parser.add_argument("--kubeconfig", default="", help="kubeconfig of the cluster to write the Secrets to")
    parser.add_argument("--in-cluster", action="store_true",
                        help="write the Secrets using the pod's service account (else ~/.kube/config)")
    parser.add_argument("--extra-dns-name", action="append", default=[], help="additional DNS SAN (repeatable)")
    parser.add_argument("--ip-address", action="append", default=None,
                        help="IP SAN (repeatable; default 127.0.0.1 for kube-scheduler's local calls)")
    parser.add_argument("--validity-days", type=int, default=365, help="serving certificate lifetime")
    parser.add_argument("--ca-validity-days", type=int, default=3650, help="CA lifetime")
    parser.add_argument("--renew-before-days", type=int, default=30,
                        help="renew a certificate with fewer days left than this")
    parser.add_argument("--webhook-wait-seconds", type=float, default=60.0,
                        help="how long to wait for the MutatingWebhookConfiguration to exist")
    parser.set_defaults(handler=run_certs)


def run_certs(arguments: argparse.Namespace) -> int:
    """The ``certs`` subcommand; returns the exit status (1 with a message on any failure)."""
    to_cluster = bool(arguments.in_cluster or arguments.kubeconfig)
    if not to_cluster and arguments.out_dir is None:
        log.error("hami-web certs: give --out-dir DIR, --in-cluster or --kubeconfig PATH")
        return 2
    lifetimes = Lifetimes(serving_days=arguments.validity_days, ca_days=arguments.ca_validity_days,
                          renew_before_days=arguments.renew_before_days)
    if not 0 <= lifetimes.renew_before_days < min(lifetimes.serving_days, lifetimes.ca_days):
        log.error("hami-web certs: --renew-before-days must be below --validity-days and --ca-validity-days")
        return 2
    identity = ServingIdentity.for_service(arguments.service, arguments.namespace,
                                           extra_dns_names=tuple(arguments.extra_dns_name),
                                           ip_addresses=tuple(arguments.ip_address or ("127.0.0.1",)))
    try:
        if not to_cluster:
            bootstrap_directory(arguments.out_dir, identity, lifetimes=lifetimes)
            return 0
        kube = Kube.from_kubeconfig(arguments.kubeconfig)
        try:
            issued = bootstrap_cluster(kube, identity, namespace=arguments.namespace, secret_name=arguments.secret,
                                       ca_secret_name=arguments.ca_secret,
                                       webhook_configuration=arguments.webhook_config, lifetimes=lifetimes,
                                       webhook_wait_seconds=arguments.webhook_wait_seconds)
        finally:
            kube.close()
        if arguments.out_dir is not None:
            for path in DirectoryStore(arguments.out_dir).save(issued.ca, issued.serving):
                log.info("wrote %s", path)
    except (KubeError, OSError, ValueError) as error:
        log.error("hami-web certs failed: %s", error)
        return 1
    return 0
