"""TLS certificates for the webhook and extender: a private CA and one serving certificate, kept fresh.

``pki`` decides and issues (pure), ``stores`` keeps them in files or Secrets and sets the webhook's
``caBundle``, ``command`` is ``hami-web certs``. Imports go one way: command → stores → pki.
"""

from hami_web.certs.command import (
    LocalCertificates,
    add_command,
    bootstrap_cluster,
    bootstrap_directory,
    make_local_certificates,
)
from hami_web.certs.pki import Issued, KeyPair, Lifetimes, ServingIdentity, ensure_certificates

__all__ = [
    "Issued",
    "KeyPair",
    "Lifetimes",
    "LocalCertificates",
    "ServingIdentity",
    "add_command",
    "bootstrap_cluster",
    "bootstrap_directory",
    "ensure_certificates",
    "make_local_certificates",
]
