"""Publishing the server's scheduling settings at start-up, so the operator tools need no flags.

``kubectl hami explain`` must decide as the running filter decides, but an operator does not know the flags
the server was started with, and a wrong guess gives a wrong answer that looks right. So the server writes
the settings that change a decision (`settings.PUBLISHED_FLAGS`) into a small ConfigMap
(``--settings-configmap``, ``hami-system/hami-web-settings``) and the tools read it. The write happens on a
background thread with a few retries: a missing RBAC rule or a slow API server must never delay or stop
serving, only leave the tools on their flags (they say so). A 403 (an RBAC without the right, as HAMi's chart's)
is not retried: one line says so at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from hami_web.kube import Kube, KubeError, NotFoundError
from hami_web.settings import Settings, published_settings

log = logging.getLogger(__name__)

ATTEMPTS = 5
FORBIDDEN = 403
FIRST_BACKOFF_SECONDS = 1.0
MANAGED_BY = {"app.kubernetes.io/name": "hami-web", "app.kubernetes.io/component": "settings"}


def publish_settings(kube: Kube, settings: Settings) -> bool:
    """Create or update the settings ConfigMap; True when it holds this server's settings afterwards.

    A ConfigMap that already holds the same data is left alone (no write at every restart). A concurrent
    writer (the other replica of a rollout) makes the update fail with a conflict; the caller retries.
    """
    namespace, _, name = settings.settings_configmap.partition("/")
    data = published_settings(settings)
    try:
        current = kube.get_config_map(namespace, name)
    except NotFoundError:
        kube.create_config_map(namespace, {"metadata": {"name": name, "namespace": namespace,
                                                        "labels": MANAGED_BY}, "data": data})
        return True
    if current.get("data") == data:
        return True
    metadata = current.get("metadata") or {}
    kube.replace_config_map(namespace, name, {"metadata": {"name": name, "namespace": namespace,
                                                           "labels": {**(metadata.get("labels") or {}),
                                                                      **MANAGED_BY},
                                                           "resourceVersion": metadata.get("resourceVersion")},
                                              "data": data})
    return True


def start_publishing(kube: Kube, settings: Settings, *, stopping: threading.Event,
                     attempts: int = ATTEMPTS, backoff_seconds: float = FIRST_BACKOFF_SECONDS,
                     done: Callable[[bool], None] | None = None) -> threading.Thread | None:
    """Publish on a daemon thread, retrying with doubling backoff; one log line says how it ended."""
    if not settings.settings_configmap:
        return None

    def run() -> None:
        wait = backoff_seconds
        error: KubeError | None = None
        for _ in range(attempts):
            try:
                publish_settings(kube, settings)
            except KubeError as failed:
                error = failed
                if failed.status == FORBIDDEN:
                    break  # RBAC does not change between retries (HAMi's chart grants no ConfigMap create)
                if stopping.wait(wait):
                    break
                wait *= 2
                continue
            log.info("published the scheduling settings in ConfigMap %s", settings.settings_configmap)
            if done:
                done(True)
            return
        log.warning("cannot publish the scheduling settings in ConfigMap %s (kubectl hami falls back to its "
                    "flags): %s", settings.settings_configmap, error)
        if done:
            done(False)

    thread = threading.Thread(target=run, name="publish-settings", daemon=True)
    thread.start()
    return thread
