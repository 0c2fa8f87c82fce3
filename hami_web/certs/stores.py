"""Where certificates are kept: a directory of PEM files, or Secrets in the cluster; and the webhook caBundle.

Files are replaced atomically (temporary file in the same directory, then ``os.replace``) because a
running server re-reads them on its own schedule and must never see half a key. Private keys are created
with mode 0600 from the first byte, not chmod-ed afterwards.

The CA key is kept in its own Secret, which no pod mounts: the serving pod only gets its own key pair
and the CA certificate, so a compromised server cannot mint certificates the webhook clients would trust.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_web.certs.pki import Issued, KeyPair
from hami_web.kube import Kube, NotFoundError

log = logging.getLogger(__name__)

CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
SERVING_CERT_FILE = "tls.crt"
SERVING_KEY_FILE = "tls.key"
PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644

SECRET_LABELS = {"app.kubernetes.io/name": "hami-web", "app.kubernetes.io/managed-by": "hami-web-certs"}


def write_file_atomically(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never a mix."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _read_optional(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class DirectoryStore:
    """``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key`` in one directory (created 0700 if missing)."""

    directory: Path

    def load(self) -> tuple[KeyPair | None, KeyPair | None]:
        """The stored CA and serving pairs; None for a pair with a missing file."""
        return (self._load_pair(CA_CERT_FILE, CA_KEY_FILE), self._load_pair(SERVING_CERT_FILE, SERVING_KEY_FILE))

    def _load_pair(self, cert_name: str, key_name: str) -> KeyPair | None:
        cert_pem = _read_optional(self.directory / cert_name)
        key_pem = _read_optional(self.directory / key_name)
        if cert_pem is None or key_pem is None:
            return None
        return KeyPair(cert_pem, key_pem)

    def save(self, ca: KeyPair, serving: KeyPair) -> list[Path]:
        """Write the files whose content differs (key before certificate); returns the paths written."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        wanted = ((CA_KEY_FILE, ca.key_pem, PRIVATE_MODE), (CA_CERT_FILE, ca.cert_pem, PUBLIC_MODE),
                  (SERVING_KEY_FILE, serving.key_pem, PRIVATE_MODE),
                  (SERVING_CERT_FILE, serving.cert_pem, PUBLIC_MODE))
        written = []
        for name, data, mode in wanted:
            path = self.directory / name
            if _read_optional(path) != data:
                write_file_atomically(path, data, mode=mode)
                written.append(path)
        return written


def _decode(data: dict[str, str], key: str) -> bytes:
    try:
        return base64.b64decode(data.get(key) or "", validate=True)
    except ValueError:
        return b""  # judged unparsable later, and replaced


def _encode(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


@dataclass(slots=True)
class SecretStore:
    """Two ``kubernetes.io/tls`` Secrets: the serving pair (+ ``ca.crt``) and, separately, the CA pair."""

    kube: Kube
    namespace: str
    secret_name: str
    ca_secret_name: str
    _existing: dict[str, dict[str, Any]] = field(default_factory=dict)

    def load(self) -> tuple[KeyPair | None, KeyPair | None]:
        """The stored CA and serving pairs; None for a Secret that does not exist."""
        return self._load_pair(self.ca_secret_name), self._load_pair(self.secret_name)

    def _load_pair(self, name: str) -> KeyPair | None:
        try:
            secret = self.kube.get_secret(self.namespace, name)
        except NotFoundError:
            return None
        self._existing[name] = secret
        data = secret.get("data") or {}
        return KeyPair(_decode(data, "tls.crt"), _decode(data, "tls.key"))

    def save(self, issued: Issued) -> list[str]:
        """Create or replace the Secrets whose data differ (CA first); returns the names written."""
        ca, serving = issued.ca, issued.serving
        wanted = ((self.ca_secret_name, {"tls.crt": _encode(ca.cert_pem), "tls.key": _encode(ca.key_pem)}),
                  (self.secret_name, {"tls.crt": _encode(serving.cert_pem), "tls.key": _encode(serving.key_pem),
                                      "ca.crt": _encode(issued.trust_bundle_pem)}))
        written = []
        for name, data in wanted:
            existing = self._existing.get(name)
            if existing is not None and (existing.get("data") or {}) == data \
                    and existing.get("type") == "kubernetes.io/tls":
                continue
            self._write(name, data, existing)
            written.append(name)
        return written

    def _write(self, name: str, data: dict[str, str], existing: dict[str, Any] | None) -> None:
        metadata: dict[str, Any] = {"name": name, "namespace": self.namespace, "labels": dict(SECRET_LABELS)}
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "kubernetes.io/tls",
                "data": data}
        if existing is None:
            self._existing[name] = self.kube.create_secret(self.namespace, body)
            return
        if existing.get("type") not in (None, "kubernetes.io/tls"):
            raise ValueError(f"Secret {self.namespace}/{name} has type {existing.get('type')}, not "
                             "kubernetes.io/tls (the type is immutable); delete it or choose another name")
        old_metadata = existing.get("metadata") or {}
        # resourceVersion makes the replace a compare-and-swap: a concurrent writer fails us, not the reverse.
        metadata["resourceVersion"] = old_metadata.get("resourceVersion", "")
        metadata["labels"] = {**(old_metadata.get("labels") or {}), **SECRET_LABELS}
        if old_metadata.get("annotations"):
            metadata["annotations"] = old_metadata["annotations"]
        self._existing[name] = self.kube.replace_secret(self.namespace, name, body)


def patch_ca_bundle(kube: Kube, configuration_name: str, trust_bundle_pem: bytes, *, wait_seconds: float = 0.0,
                    poll_seconds: float = 2.0) -> int:
    """Set ``clientConfig.caBundle`` of every webhook in the MutatingWebhookConfiguration; returns how many changed.

    Waits up to ``wait_seconds`` for the configuration to appear: ``kubectl apply -k`` creates the Job before
    the MutatingWebhookConfiguration, so the Job may run first.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            configuration = kube.get_mutating_webhook_configuration(configuration_name)
            break
        except NotFoundError:
            if time.monotonic() >= deadline:
                raise
            log.info("MutatingWebhookConfiguration %s not found yet; retrying", configuration_name)
            time.sleep(poll_seconds)
    bundle = _encode(trust_bundle_pem)
    operations: list[dict[str, Any]] = []
    for index, webhook in enumerate(configuration.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") == bundle:
            continue
        # The "test" guards against the list having been reordered since we read it.
        operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.get("name")})
        operations.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle})
    if operations:
        kube.patch_mutating_webhook_configuration(configuration_name, operations)
    return len(operations) // 2
