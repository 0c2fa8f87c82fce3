"""Where the client connects: kubeconfig files found and merged as kubectl does, or the in-cluster account.

The operator tools and the server resolve the API the same way, so a ``kubectl hami`` that works from a
laptop talks to the cluster the server would, and an error names the file or the context that failed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.config
import yaml
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

from hami_web.kube.errors import KubeError
from hami_web.kube.untyped import load_incluster_config, load_kube_config

IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Seconds between two runs of the loaders' token refresh hook (see `throttle_token_refresh`).
TOKEN_REFRESH_CHECK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ClientTarget:
    """Where a client connects and how it got there: the configuration, the context's default namespace
    (``""`` when it sets none) and a few words on the source, for messages."""

    configuration: kubernetes.client.Configuration
    namespace: str
    source: str


def kubeconfig_paths(kubeconfig: str = "", environ: Mapping[str, str] | None = None) -> list[str]:
    """The kubeconfig files kubectl would read: ``--kubeconfig``, else every existing file of ``KUBECONFIG``
    (a list separated by the OS's path separator), else ``~/.kube/config`` if it exists."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        return [kubeconfig]
    listed = [os.path.expanduser(p) for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        existing = [path for path in listed if os.path.exists(path)]
        if not existing:
            raise KubeError(f"KUBECONFIG={environ['KUBECONFIG']}: none of these files exists")
        return existing
    default_path = os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION)
    return [default_path] if os.path.exists(default_path) else []


def _read_kubeconfig_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as stream:
            content = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError) as error:
        raise KubeError(f"cannot use kubeconfig {path}: {error}".replace("\n", " ")) from None
    if not isinstance(content, dict):
        raise KubeError(f"cannot use kubeconfig {path}: not a kubeconfig (no map at the top)")
    return content


def _merged_view(paths: Sequence[str]) -> tuple[str, dict[str, dict[str, Any]]]:
    """kubectl's merge of several files: the first file that sets ``current-context`` wins, and so does the
    first file that defines a context of a given name (the official client's merger lets the last file's
    ``current-context`` win, so it is decided here)."""
    current = ""
    contexts: dict[str, dict[str, Any]] = {}
    for path in paths:
        content = _read_kubeconfig_file(path)
        current = current or str(content.get("current-context") or "")
        for entry in content.get("contexts") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                contexts.setdefault(entry["name"], {**(entry.get("context") or {}), "file": path})
    return current, contexts


def resolve_client(kubeconfig: str = "", *, context: str = "",
                   environ: Mapping[str, str] | None = None) -> ClientTarget:
    """How to reach the API as kubectl resolves it, for the operator tools and the server alike.

    ``--kubeconfig``, else ``KUBECONFIG`` (several files merged as kubectl merges them), else in-cluster,
    else ``~/.kube/config``; ``context`` picks a context instead of ``current-context``. Token, client
    certificate and exec credentials go through the official client's loader. Errors name the file or the
    context that failed.
    """
    configuration = kubernetes.client.Configuration()
    environ = os.environ if environ is None else environ
    explicit = bool(kubeconfig or environ.get("KUBECONFIG"))
    paths = kubeconfig_paths(kubeconfig, environ)
    if not explicit and not context and _in_cluster(configuration):
        return ClientTarget(configuration, namespace=_in_cluster_namespace(), source="in-cluster")
    if not paths:
        raise KubeError("no Kubernetes API configured: not in a cluster, no --kubeconfig, no KUBECONFIG, "
                        "no ~/.kube/config")
    files = ":".join(paths)
    current, contexts = _merged_view(paths)
    chosen = context or current
    if not chosen:
        raise KubeError(f"kubeconfig {files}: no current-context set; give --context "
                        f"({', '.join(sorted(contexts)) or 'no contexts defined'})")
    if chosen not in contexts:
        raise KubeError(f"kubeconfig {files}: context {chosen!r} not found "
                        f"(contexts: {', '.join(sorted(contexts)) or 'none'})")
    try:
        load_kube_config(config_file=os.pathsep.join(paths), context=chosen, client_configuration=configuration,
                         persist_config=False)
    except (ConfigException, OSError, yaml.YAMLError, ValueError) as error:
        raise KubeError(f"cannot use context {chosen!r} of kubeconfig {contexts[chosen]['file']}: {error}"
                        .replace("\n", " ")) from None
    return ClientTarget(configuration, namespace=str(contexts[chosen].get("namespace") or ""),
                        source=f"context {chosen} of {contexts[chosen]['file']}")


def _in_cluster(configuration: kubernetes.client.Configuration) -> bool:
    try:
        load_incluster_config(client_configuration=configuration)
    except ConfigException:
        return False
    return True


def _in_cluster_namespace() -> str:
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE, encoding="utf-8") as stream:
            return stream.read().strip()
    except OSError:
        return ""


def load_client_configuration(kubeconfig: str = "", *, context: str = "") -> kubernetes.client.Configuration:
    """The configuration of `resolve_client` (the server needs nothing else)."""
    return resolve_client(kubeconfig, context=context).configuration


class _ThrottledRefresh:
    """A loader's ``refresh_api_key_hook`` run at most once per ``period`` seconds (see `throttle_token_refresh`)."""

    def __init__(self, hook: Callable[[Any], None], period: float, clock: Callable[[], float]) -> None:
        self._hook = hook
        self._period = period
        self._clock = clock
        self._next = 0.0

    def __call__(self, configuration: Any) -> None:
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._period
        self._hook(configuration)
        installed = configuration.refresh_api_key_hook
        if installed is not self:  # the loaders install their hook again on every run: wrap the new one
            self._hook = installed
            configuration.refresh_api_key_hook = self


def throttle_token_refresh(configuration: kubernetes.client.Configuration, *,
                           period: float = TOKEN_REFRESH_CHECK_SECONDS,
                           clock: Callable[[], float] = time.monotonic) -> None:
    """Run the configuration's token refresh hook at most once per ``period`` seconds instead of before every request.

    The official loaders (kubeconfig and in-cluster) install a hook the client calls before each request; it checks the
    token's expiry (or the service-account file's one-minute re-read) and then sets host, CA and TLS settings again,
    the host's setter reading the proxy environment: a tenth of the CPU of a write on a burst's hot path. A token is
    still renewed when it expires, at most ``period`` later; nothing else the hook sets changes while we run.
    """
    hook = configuration.refresh_api_key_hook
    if hook is not None and not isinstance(hook, _ThrottledRefresh):
        configuration.refresh_api_key_hook = _ThrottledRefresh(hook, period, clock)
