"""A TLS server context that follows its certificate files on disk, so a renewed certificate needs no restart.

The certificate comes from a mounted Secret that the cert job renews in place. A mounted Secret emits no
file event we could rely on (kubelet swaps a symlink; inotify on the path sees nothing), so the files are
re-checked by their (mtime, size, inode) — at most every few seconds, when a client connects — instead of
being watched. Two entry points cover both ways a server can use the context:

* `ReloadingTLSContext.current()` — call it for every new connection;
* each context carries an ``sni_callback`` that swaps a fresher context into the handshake, so a server
  that builds its context once still serves the renewed certificate (hami-web's front worker hands one
  context per listener to `asyncio` and relies on this).

A reload that fails (half-written files, key and certificate from different generations) keeps the
previous context and logs; the next check retries once the files change again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable

from cryptography import x509

log = logging.getLogger(__name__)

# Seconds between two looks at the files: cheap enough per connection, fast enough for a renewal.
DEFAULT_CHECK_INTERVAL_SECONDS = 5.0

FileFingerprint = tuple[tuple[int, int, int], tuple[int, int, int]]


class CertificateLoadError(ValueError):
    """The certificate or key cannot be read or does not form a usable pair."""


def build_server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server-side context (TLS 1.2+, the ssl module's secure defaults) loaded with the given pair."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=cert_file, keyfile=key_file)
    except (OSError, ssl.SSLError) as error:
        raise CertificateLoadError(
            f"cannot load TLS certificate {cert_file} with key {key_file}: {error}") from error
    return context


def _stat_fingerprint(path: str) -> tuple[int, int, int]:
    # os.stat follows symlinks: kubelet's atomic ``..data`` swap changes the inode we see.
    status = os.stat(path)
    return status.st_mtime_ns, status.st_size, status.st_ino


def _describe_certificate(cert_file: str) -> str:
    try:
        with open(cert_file, "rb") as handle:
            certificate = x509.load_pem_x509_certificate(handle.read())
    except (OSError, ValueError) as error:
        return f"unparsable certificate ({error})"
    return f"serial {certificate.serial_number:x}, valid until {certificate.not_valid_after_utc:%Y-%m-%dT%H:%MZ}"


class ReloadingTLSContext:
    """Owns the current server `ssl.SSLContext` and replaces it when the certificate files change.

    Built eagerly: a pair that cannot be loaded at start-up raises `CertificateLoadError`, so the process
    fails before it listens instead of failing every handshake.
    """

    def __init__(self, cert_file: str, key_file: str, *,
                 check_interval_seconds: float = DEFAULT_CHECK_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cert_file = cert_file
        self._key_file = key_file
        self._check_interval_seconds = check_interval_seconds
        self._clock = clock
        self._lock = threading.Lock()
        try:
            fingerprint = self._fingerprint()
        except OSError as error:
            raise CertificateLoadError(f"cannot read TLS files: {error}") from error
        self._context = self._build()
        self._loaded_fingerprint: FileFingerprint | None = fingerprint
        self._failed_fingerprint: FileFingerprint | None = None
        self._unreadable_reported = False
        self._next_check = clock() + check_interval_seconds
        log.info("TLS certificate %s loaded (%s)", cert_file, _describe_certificate(cert_file))

    @property
    def cert_file(self) -> str:
        """Path of the PEM certificate (chain) being followed."""
        return self._cert_file

    @property
    def key_file(self) -> str:
        """Path of the PEM private key being followed."""
        return self._key_file

    def current(self) -> ssl.SSLContext:
        """The context a new connection should use; rebuilt first when the files changed since last look."""
        if self._clock() < self._next_check:
            return self._context
        with self._lock:
            now = self._clock()
            if now < self._next_check:
                return self._context
            self._next_check = now + self._check_interval_seconds
            self._reload_if_changed()
            return self._context

    def _fingerprint(self) -> FileFingerprint:
        return _stat_fingerprint(self._cert_file), _stat_fingerprint(self._key_file)

    def _build(self) -> ssl.SSLContext:
        context = build_server_context(self._cert_file, self._key_file)
        context.sni_callback = self._on_client_hello
        return context

    def _reload_if_changed(self) -> None:
        try:
            fingerprint = self._fingerprint()
        except OSError as error:
            if not self._unreadable_reported:
                self._unreadable_reported = True
                log.warning("TLS files unreadable, still serving the previous certificate: %s", error)
            return
        self._unreadable_reported = False
        if fingerprint in (self._loaded_fingerprint, self._failed_fingerprint):
            return
        try:
            context = self._build()
        except CertificateLoadError as error:
            # Often transient: key and certificate are replaced one after the other.
            self._failed_fingerprint = fingerprint
            log.warning("TLS certificate changed but does not load, still serving the previous one: %s", error)
            return
        self._context = context
        self._loaded_fingerprint = fingerprint
        self._failed_fingerprint = None
        log.info("TLS certificate %s reloaded (%s)", self._cert_file, _describe_certificate(self._cert_file))

    def _on_client_hello(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                         context: ssl.SSLContext) -> None:
        # Called by OpenSSL for every ClientHello (server_name is None without SNI, e.g. for an IP).
        fresh = self.current()
        if fresh is not context:
            connection.context = fresh
