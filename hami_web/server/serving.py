"""``hami-web serve``: the Flask app under an embedded gunicorn, in one worker process with threads.

Why one worker with threads: all scheduling state — the cluster cache and the filter-time assumptions
("this GPU is promised to pod X until its bind lands") — lives in the memory of one process. Several
worker processes would each hold their own cache and each promise the same free GPU to a different pod;
kube-scheduler would then bind both and the device plugin would overcommit the card. Threads give
concurrency for slow API calls inside ``/bind`` while the cache stays shared and is protected by its own
lock. Keep-alive is on because kube-scheduler and the API server reuse connections
for every filter/bind and admission call; a TLS handshake per request would dominate the latency.

The worker is ours (`hami_web.server.worker.FrontWorker`): an event loop does the TLS handshakes and reads
whole requests under deadlines, and the threads only run the app, so slow or idle clients cannot take them.
It serves three listeners (`hami_web.server.listeners`): the webhook on ``--bind``, the extender on
``--extender-bind`` (loopback), metrics on ``--metrics-bind-address`` (plain HTTP).

gunicorn is embedded through its application API so that one command starts everything and the
Deployment needs no separate config file. Background threads (cache refresh, watches) do not survive
``fork``; they are started in the worker after it boots (``post_worker_init``) and stopped when it exits.
The app itself is built before the fork so that a configuration error is reported once, at start-up.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from hami_web.server.listeners import plan_listeners
from hami_web.server.logs import GunicornLogger
from hami_web.server.tlsreload import CertificateLoadError, ReloadingTLSContext
from hami_web.server.worker import front_worker_class
from hami_web.settings import ServingSettings, Settings, SettingsError

log = logging.getLogger(__name__)

# Seconds a kept-alive client connection waits for its next request (kube-scheduler, API server): longer than the 90 s
# after which Go's HTTP clients close idle connections themselves, so they close first (`server.front.Deadlines`).
KEEPALIVE_SECONDS = 120
# Open connections at once (all listeners); more are closed on accept. Idle ones cost memory, not threads.
MAX_CONNECTIONS = 1000
# Seconds a request may run before gunicorn restarts the worker; above kube-scheduler's 30 s httpTimeout.
WORKER_TIMEOUT_SECONDS = 60
# Seconds in-flight requests get to finish on SIGTERM (below the pod's terminationGracePeriodSeconds).
GRACEFUL_TIMEOUT_SECONDS = 20


def serve(settings: Settings) -> int:
    """Run the production server until it is stopped; returns the process exit status.

    Raises `SettingsError` (naming the flag) when TLS is misconfigured, before anything listens.
    """
    tls = load_tls(settings.serving)
    from hami_web.server.runtime import build_runtime

    runtime = build_runtime(settings)
    return run_gunicorn(runtime.app, settings.serving, tls=tls, waiting_threads=settings.binding.queued_binds,
                        on_started=runtime.start, on_stopped=runtime.stop)


def load_tls(serving: ServingSettings) -> ReloadingTLSContext | None:
    """The reloading TLS context from ``--cert-file/--key-file``, or None under ``--insecure-http``.

    Every failure names the flag an operator has to fix.
    """
    if serving.insecure_http:
        log.warning("--insecure-http: serving plain HTTP; kube-apiserver only calls webhooks over HTTPS, "
                    "so use this for local tests only")
        return None
    if serving.plain_http:
        log.info("--http_bind without --cert_file/--key_file: plain HTTP on %s, as HAMi's chart runs it without "
                 "its admission webhook", serving.http_bind)
        return None
    if not serving.cert_file or not serving.key_file:
        raise SettingsError("invalid value for --cert-file/--key-file: both are required to serve HTTPS "
                            "(or pass --insecure-http for plain HTTP in local tests)")
    for flag, path in (("--cert-file", serving.cert_file), ("--key-file", serving.key_file)):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise SettingsError(f"invalid value for {flag}: cannot read {path}: {error.strerror}") from None
    try:
        return ReloadingTLSContext(serving.cert_file, serving.key_file)
    except CertificateLoadError as error:
        raise SettingsError(f"invalid value for --cert-file/--key-file: {error}") from None


def gunicorn_options(serving: ServingSettings, *, tls: ReloadingTLSContext | None,
                     waiting_threads: int = 0) -> dict[str, Any]:
    """The gunicorn settings hami-web runs with (also used by ``hami_web.server.gunicorn_conf``).

    TLS is not gunicorn's: it would apply to every listener, and the metrics listener is plain HTTP. The
    worker wraps each TLS listener itself with ``tls``. ``waiting_threads``: threads the extender's listener has
    beyond ``--threads`` for binds that wait in binpack's lines (`BindSettings.queued_binds`).
    """
    listeners = plan_listeners(serving)
    options: dict[str, Any] = {
        "bind": [listener.address for listener in listeners],
        "workers": 1,  # never more: see the module docstring
        "worker_class": front_worker_class(listeners, tls, waiting_threads),
        "threads": serving.threads,
        "worker_connections": MAX_CONNECTIONS,
        "keepalive": KEEPALIVE_SECONDS,
        "timeout": WORKER_TIMEOUT_SECONDS,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "max_requests": 0,  # recycling the worker would throw away the cache and the assumptions
        "proc_name": "hami-web",
        "accesslog": None,  # the app logs one line per decision; an access log would double it
        "errorlog": "-",
        "logger_class": GunicornLogger,  # gunicorn's lines through our handler, in --log-format
        "loglevel": serving.log_level.lower(),
        "control_socket_disable": True,  # gunicorn >= 24 would create a socket file; the rootfs is read-only
    }
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        # The worker heartbeat file; tmpfs keeps it off a read-only root filesystem and off the disk.
        options["worker_tmp_dir"] = "/dev/shm"
    return options


class _EmbeddedGunicorn(BaseApplication):
    """gunicorn's application API with options from a dict and an already-built WSGI app."""

    def __init__(self, app: Flask, options: Mapping[str, Any]) -> None:
        self._app = app
        self._options = options
        super().__init__(prog="hami-web")

    def load_config(self) -> None:
        for key, value in self._options.items():
            if key in self.cfg.settings:  # options newer than the installed gunicorn are skipped
                self.cfg.set(key, value)

    def load(self) -> Flask:
        return self._app


def run_gunicorn(app: Flask, serving: ServingSettings, *, tls: ReloadingTLSContext | None = None,
                 waiting_threads: int = 0,
                 on_started: Callable[[], None] | None = None,
                 on_stopped: Callable[[], None] | None = None) -> int:
    """Serve ``app`` with gunicorn until a signal stops it; returns the exit status.

    ``tls`` None means plain HTTP and is only accepted with ``serving.plain_http``. ``on_started`` and
    ``on_stopped`` run inside the worker process (where the app's background threads must live).
    """
    if tls is None and not serving.plain_http:
        raise SettingsError("invalid value for --cert-file/--key-file: no TLS context and no --insecure-http")
    options = gunicorn_options(serving, tls=tls, waiting_threads=waiting_threads)
    listening = ", ".join(f"{listener.audience} on {listener.scheme}://{listener.address}"
                          for listener in plan_listeners(serving))
    options["when_ready"] = lambda _arbiter: log.info("hami-web listening: %s", listening)
    if on_started is not None:
        options["post_worker_init"] = lambda _worker: on_started()
    if on_stopped is not None:
        options["worker_exit"] = lambda _arbiter, _worker: on_stopped()
    try:
        _EmbeddedGunicorn(app, options).run()
    except SystemExit as stop:  # the arbiter leaves through sys.exit with its status
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return 0
