"""gunicorn configuration for running hami-web under a stock ``gunicorn`` command instead of ``hami-web serve``.

    HAMI_CERT_FILE=/certs/tls.crt HAMI_KEY_FILE=/certs/tls.key gunicorn -c python:hami_web.server.gunicorn_conf

Settings come from the ``HAMI_…`` environment variables (the same names as the flags). The options are
exactly those of ``hami-web serve`` (one front worker with threads, three listeners, keep-alive, TLS with
certificate hot reload, the log formatter), and
the app is built and its background threads started inside the worker, after the fork. ``hami-web serve``
stays the supported entry point; this file exists for platforms that insist on launching gunicorn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hami_web.server.logs import configure_logging
from hami_web.server.serving import gunicorn_options, load_tls
from hami_web.settings import build_settings

_settings = build_settings(None)
configure_logging(_settings.serving.log_level, _settings.serving.log_format)
_runtime: Any = None

globals().update(gunicorn_options(_settings.serving, tls=load_tls(_settings.serving),
                                  waiting_threads=_settings.binding.queued_binds))
wsgi_app = "hami_web.server.gunicorn_conf:application"


def post_worker_init(_worker: object) -> None:
    """Build the app and start its background threads in the worker (threads do not survive fork)."""
    global _runtime
    from hami_web.server.runtime import build_runtime

    _runtime = build_runtime(_settings)
    _runtime.start()


def worker_exit(_arbiter: object, _worker: object) -> None:
    """Stop the background threads of the worker that is exiting."""
    if _runtime is not None:
        _runtime.stop()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """WSGI entry point: the worker's app (built in `post_worker_init`)."""
    answer: Iterable[bytes] = _runtime.app(environ, start_response)
    return answer
