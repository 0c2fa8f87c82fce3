"""Issuing and judging the webhook's CA and serving certificate (pure: no files, no cluster, no clock).

kube-apiserver calls the webhook at ``https://<svc>.<ns>.svc`` and kube-scheduler calls the extender at
``https://127.0.0.1``; one serving certificate carries all of those names, signed by a private CA whose
certificate goes into the MutatingWebhookConfiguration's ``caBundle`` and kube-scheduler's ``caFile``.
The CA lives much longer than the serving certificate, so a routine renewal changes neither of those.

Each ``*_problem`` function answers "why must this be replaced?" (or None when it can be kept), so the
caller can log one line per decision with the reason.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Back-date certificates a little so a node whose clock is slightly behind still accepts them.
CLOCK_SKEW = timedelta(minutes=5)
LOCAL_IP_ADDRESSES = ("127.0.0.1",)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM private key, as stored (bytes may be garbage when read back)."""

    cert_pem: bytes
    key_pem: bytes

    def certificate(self) -> x509.Certificate:
        """The parsed certificate; `ValueError` when the PEM is not a certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True, slots=True)
class ServingIdentity:
    """The names the serving certificate must carry, exactly (more or fewer means re-issue)."""

    common_name: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = LOCAL_IP_ADDRESSES

    @classmethod
    def for_service(cls, service: str, namespace: str, *, extra_dns_names: tuple[str, ...] = (),
                    ip_addresses: tuple[str, ...] = LOCAL_IP_ADDRESSES) -> ServingIdentity:
        """``<svc>``, ``<svc>.<ns>``, ``<svc>.<ns>.svc``, ``<svc>.<ns>.svc.cluster.local`` plus extras."""
        names = (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
                 f"{service}.{namespace}.svc.cluster.local")
        extras = tuple(name for name in extra_dns_names if name not in names)
        return cls(common_name=f"{service}.{namespace}.svc", dns_names=names + extras,
                   ip_addresses=ip_addresses)

    def subject_alternative_names(self) -> x509.SubjectAlternativeName:
        """The SAN extension for these names."""
        entries: list[x509.GeneralName] = [x509.DNSName(name) for name in self.dns_names]
        entries += [x509.IPAddress(ipaddress.ip_address(address)) for address in self.ip_addresses]
        return x509.SubjectAlternativeName(entries)

    def name_set(self) -> frozenset[str]:
        """DNS names and IP addresses as one comparable set of strings."""
        return frozenset(self.dns_names) | {str(ipaddress.ip_address(a)) for a in self.ip_addresses}


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long certificates live and how early they are renewed."""

    serving_days: int = 365
    ca_days: int = 3650
    renew_before_days: int = 30

    @property
    def renew_before(self) -> timedelta:
        """Remaining validity below which a certificate is replaced."""
        return timedelta(days=self.renew_before_days)


@dataclass(frozen=True, slots=True)
class Issued:
    """The outcome of `ensure_certificates`: what to store, and why each part was (re)issued."""

    ca: KeyPair
    serving: KeyPair
    ca_reason: str  # "" when the stored CA was kept
    serving_reason: str  # "" when the stored serving certificate was kept
    trust_bundle_pem: bytes  # what clients trust: the CA, plus the replaced CA while it is still valid

    @property
    def changed(self) -> bool:
        """Whether anything has to be written."""
        return bool(self.ca_reason or self.serving_reason)


def _new_private_key() -> ec.EllipticCurvePrivateKey:
    # P-256: accepted by Go (kube-apiserver, kube-scheduler) and OpenSSL, and cheap to generate in tests.
    return ec.generate_private_key(ec.SECP256R1())


def _private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def create_ca(*, common_name: str, now: datetime, days: int) -> KeyPair:
    """A self-signed CA that may only sign leaf certificates (path length 0)."""
    key = _new_private_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    public_key = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False),
                       critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), _private_key_pem(key))


def create_serving_certificate(ca: KeyPair, identity: ServingIdentity, *, now: datetime, days: int) -> KeyPair:
    """A server certificate for ``identity`` signed by ``ca``; never outlives the CA."""
    ca_certificate = ca.certificate()
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the CA key must be an EC or RSA private key")
    ca_public_key = ca_certificate.public_key()
    if not isinstance(ca_public_key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise ValueError("the CA certificate's key must be an EC or RSA public key")
    key = _new_private_key()
    not_after = min(now + timedelta(days=days), ca_certificate.not_valid_after_utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.common_name)]))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(identity.subject_alternative_names(), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False),
                       critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public_key),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), _private_key_pem(key))


def _key_problem(pair: KeyPair, certificate: x509.Certificate) -> str | None:
    try:
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except (ValueError, TypeError) as error:
        return f"private key unparsable ({error})"
    if key.public_key() != certificate.public_key():
        return "private key does not match the certificate"
    return None


def _lifetime_problem(certificate: x509.Certificate, *, now: datetime, renew_before: timedelta) -> str | None:
    if certificate.not_valid_before_utc > now + CLOCK_SKEW:
        return f"not valid before {certificate.not_valid_before_utc:%Y-%m-%d}"
    remaining = certificate.not_valid_after_utc - now
    if remaining < renew_before:
        return (f"expires {certificate.not_valid_after_utc:%Y-%m-%d} "
                f"({max(remaining.days, 0)} days left, renewing below {renew_before.days})")
    return None


def ca_problem(ca: KeyPair | None, *, now: datetime, renew_before: timedelta) -> str | None:
    """Why the stored CA cannot be kept, or None when it is a usable CA with enough time left."""
    if ca is None:
        return "no CA stored"
    try:
        certificate = ca.certificate()
    except ValueError as error:
        return f"CA certificate unparsable ({error})"
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return "CA certificate has no basicConstraints"
    if not constraints.ca:
        return "stored CA certificate is not a CA"
    return _key_problem(ca, certificate) or _lifetime_problem(certificate, now=now, renew_before=renew_before)


def serving_problem(serving: KeyPair | None, ca: KeyPair, identity: ServingIdentity, *, now: datetime,
                    renew_before: timedelta) -> str | None:
    """Why the stored serving certificate cannot be kept, or None when it is valid for ``identity``."""
    if serving is None:
        return "no serving certificate stored"
    try:
        certificate = serving.certificate()
    except ValueError as error:
        return f"serving certificate unparsable ({error})"
    try:
        certificate.verify_directly_issued_by(ca.certificate())
    except (ValueError, TypeError, InvalidSignature):
        return "serving certificate is not signed by the current CA"
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "serving certificate has no subjectAltName"
    present = frozenset(names.get_values_for_type(x509.DNSName)) | {
        str(address) for address in names.get_values_for_type(x509.IPAddress)}
    if present != identity.name_set():
        return (f"serving certificate names {sorted(present)} differ from the wanted "
                f"{sorted(identity.name_set())}")
    return _key_problem(serving, certificate) or _lifetime_problem(certificate, now=now, renew_before=renew_before)


def ensure_certificates(*, stored_ca: KeyPair | None, stored_serving: KeyPair | None, identity: ServingIdentity,
                        lifetimes: Lifetimes, now: datetime, ca_common_name: str) -> Issued:
    """Keep what is still good, re-issue what is not: the decision at the heart of ``hami-web certs``.

    A new CA forces a new serving certificate; a kept CA signs the renewed serving certificate, so the
    ``caBundle`` in the cluster stays the same across routine renewals. When the CA itself is replaced,
    the trust bundle keeps the old CA until it expires, so clients that got the new bundle still accept
    a server that has not yet picked up its new certificate.
    """
    ca_reason = ca_problem(stored_ca, now=now, renew_before=lifetimes.renew_before) or ""
    ca = stored_ca if stored_ca is not None and not ca_reason else create_ca(
        common_name=ca_common_name, now=now, days=lifetimes.ca_days)
    serving_reason = ("CA replaced" if ca_reason else serving_problem(
        stored_serving, ca, identity, now=now, renew_before=lifetimes.renew_before)) or ""
    serving = stored_serving if stored_serving is not None and not serving_reason else create_serving_certificate(
        ca, identity, now=now, days=lifetimes.serving_days)
    trust_bundle = ca.cert_pem
    if ca_reason and stored_ca is not None and _still_valid(stored_ca, now=now):
        trust_bundle += stored_ca.cert_pem
    return Issued(ca=ca, serving=serving, ca_reason=ca_reason, serving_reason=serving_reason,
                  trust_bundle_pem=trust_bundle)


def _still_valid(pair: KeyPair, *, now: datetime) -> bool:
    try:
        return pair.certificate().not_valid_after_utc > now
    except ValueError:
        return False
