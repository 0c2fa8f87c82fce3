"""The gunicorn names the server builds on are still where it expects them, with the shape it uses.

Covers: ``server/front.py`` parses HTTP with gunicorn's sans-IO parser (``gunicorn.asgi.parser``, an internal
module with no compatibility promise); ``server/worker.py`` subclasses ``gunicorn.workers.base.Worker`` and
reads its attributes and ``cfg`` settings; ``server/serving.py`` and ``server/logs.py`` extend
``BaseApplication`` and ``glogging.Logger``. setup.cfg pins gunicorn below its next major; when an upgrade
moves or reshapes one of these names, the failing test names it (and which of our modules uses it) instead
of the front failing on its first request. The front's behaviour over real sockets is tests/server/test_front.py.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

import gunicorn
import pytest

# (module, name, the module of ours that uses it)
INTERNAL_NAMES = [
    ("gunicorn.asgi.parser", "PythonProtocol", "hami_web/server/front.py"),
    ("gunicorn.asgi.parser", "CallbackRequest", "hami_web/server/front.py"),
    ("gunicorn.asgi.parser", "ParseError", "hami_web/server/front.py"),
    ("gunicorn.asgi.parser", "LimitRequestLine", "hami_web/server/front.py"),
    ("gunicorn.asgi.parser", "LimitRequestHeaders", "hami_web/server/front.py"),
    ("gunicorn.workers.base", "Worker", "hami_web/server/worker.py"),
    ("gunicorn.config", "Config", "hami_web/server/worker.py (the worker's cfg)"),
    ("gunicorn.app.base", "BaseApplication", "hami_web/server/serving.py"),
    ("gunicorn.glogging", "Logger", "hami_web/server/logs.py"),
]


def _moved(what: str, user: str, detail: str) -> str:
    return (f"gunicorn {gunicorn.__version__}: {what}, which {user} relies on, {detail}. "
            f"setup.cfg pins gunicorn below its next major; adapt {user} before raising the pin.")


def _internal(module: str, name: str, user: str) -> Any:
    try:
        found = importlib.import_module(module)
    except ImportError as error:
        pytest.fail(_moved(f"module `{module}`", user, f"cannot be imported ({error})"), pytrace=False)
    if not hasattr(found, name):
        pytest.fail(_moved(f"`{module}.{name}`", user, "moved or was removed"), pytrace=False)
    return getattr(found, name)


def _require_parameters(what: str, function: Any, names: list[str], user: str) -> None:
    parameters = inspect.signature(function).parameters
    missing = [name for name in names if name not in parameters]
    if missing:
        pytest.fail(_moved(what, user, f"no longer takes {', '.join(missing)} (its signature: "
                                       f"{inspect.signature(function)})"), pytrace=False)


def _require_attributes(what: str, holder: Any, names: list[str], user: str) -> None:
    missing = [name for name in names if not hasattr(holder, name)]
    if missing:
        pytest.fail(_moved(what, user, f"no longer has {', '.join(missing)}"), pytrace=False)


@pytest.mark.parametrize(("module", "name", "user"), INTERNAL_NAMES, ids=[f"{m}.{n}" for m, n, _ in INTERNAL_NAMES])
def test_each_gunicorn_name_we_use_is_importable(module: str, name: str, user: str) -> None:
    _internal(module, name, user)


def test_the_parser_has_the_callbacks_and_methods_the_front_uses() -> None:
    user = "hami_web/server/front.py"
    protocol = _internal("gunicorn.asgi.parser", "PythonProtocol", user)
    _require_parameters("`PythonProtocol(...)`", protocol,
                        ["on_headers_complete", "on_body", "on_message_complete"], user)
    _require_attributes("`PythonProtocol`", protocol, ["feed", "remaining"], user)
    request = _internal("gunicorn.asgi.parser", "CallbackRequest", user)
    _require_attributes("`CallbackRequest`", request, ["from_parser", "should_close"], user)
    _require_parameters("`CallbackRequest.from_parser(...)`", request.from_parser, ["parser", "is_ssl"], user)
    parse_error = _internal("gunicorn.asgi.parser", "ParseError", user)
    for name in ("LimitRequestLine", "LimitRequestHeaders"):
        if not issubclass(_internal("gunicorn.asgi.parser", name, user), parse_error):
            pytest.fail(_moved(f"`gunicorn.asgi.parser.{name}`", user, "is no longer a `ParseError`"),
                        pytrace=False)


def test_a_request_parses_into_the_fields_the_front_reads() -> None:
    """One pipelined exchange through the parser: the callbacks fire, the request has the fields and types that
    `build_environ` and `Connection._serve_one` read, and the next request is left over."""
    user = "hami_web/server/front.py"
    protocol = _internal("gunicorn.asgi.parser", "PythonProtocol", user)
    request_class = _internal("gunicorn.asgi.parser", "CallbackRequest", user)
    seen: list[object] = []
    parser = protocol(on_headers_complete=lambda: seen.append("headers") or False, on_body=seen.append,
                      on_message_complete=lambda: seen.append("complete"))
    parser.feed(b"POST /a%20b?x=1 HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
                b"abcGET / HTTP/1.1\r\n\r\n")
    assert seen == ["headers", b"abc", "complete"], _moved("the parser's callbacks", user, f"fired as {seen}")
    request = request_class.from_parser(parser, is_ssl=True)
    fields = ["method", "raw_path", "query", "version", "headers_bytes", "content_length"]
    _require_attributes("`CallbackRequest`", request, fields, user)
    found = {name: getattr(request, name) for name in fields}
    expected = {"method": "POST", "raw_path": b"/a%20b", "query": "x=1", "version": (1, 1),
                "headers_bytes": [(b"host", b"h"), (b"expect", b"100-continue"), (b"content-length", b"3")],
                "content_length": 3}
    assert {name: (value if name != "version" else tuple(value)) for name, value in found.items()} == expected, \
        _moved("`CallbackRequest`'s fields", user, f"now read {found}")
    assert request.should_close() is False, _moved("`CallbackRequest.should_close()`", user, "changed meaning")
    assert parser.remaining() == b"GET / HTTP/1.1\r\n\r\n", _moved("`PythonProtocol.remaining()`", user,
                                                                   "no longer returns the pipelined rest")


@pytest.mark.parametrize(("request_bytes", "error_name"), [
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", "LimitRequestLine"),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % n for n in range(200)) + b"\r\n", "LimitRequestHeaders"),
], ids=["request line too long", "too many headers"])
def test_the_parser_raises_the_limit_errors_the_front_maps_to_statuses(request_bytes: bytes,
                                                                      error_name: str) -> None:
    """front.py answers 414 and 431 for these two errors (any other `ParseError` is a 400)."""
    user = "hami_web/server/front.py"
    protocol = _internal("gunicorn.asgi.parser", "PythonProtocol", user)
    error_class = _internal("gunicorn.asgi.parser", error_name, user)
    parse_error = _internal("gunicorn.asgi.parser", "ParseError", user)
    parser = protocol(on_headers_complete=lambda: False, on_body=lambda chunk: None,
                      on_message_complete=lambda: None)
    try:
        parser.feed(request_bytes)
    except parse_error as error:
        assert isinstance(error, error_class), _moved(f"`{error_name}`", user,
                                                      f"is no longer raised (got {type(error).__name__})")
    else:
        pytest.fail(_moved(f"`{error_name}`", user, "is no longer raised"), pytrace=False)


def test_the_worker_base_class_has_what_the_front_worker_uses(tmp_path: Any) -> None:
    user = "hami_web/server/worker.py"
    worker_class = _internal("gunicorn.workers.base", "Worker", user)
    config_class = _internal("gunicorn.config", "Config", user)
    _require_parameters("`Worker(...)`", worker_class,
                        ["age", "ppid", "sockets", "app", "timeout", "cfg", "log"], user)
    _require_attributes("`Worker`", worker_class, ["run", "notify", "load_wsgi", "init_process"], user)
    config = config_class()
    _require_attributes("gunicorn's `Config`", config,
                        ["keepalive", "threads", "worker_connections", "graceful_timeout", "settings", "set"],
                        user)
    worker = worker_class(age=1, ppid=os.getppid(), sockets=[], app=None, timeout=30, cfg=config, log=None)
    try:
        _require_attributes("a `Worker` instance", worker, ["alive", "ppid", "sockets", "cfg", "log"], user)
    finally:
        worker.tmp.close()
    load_wsgi = inspect.getsource(worker_class.load_wsgi)
    if "self.wsgi =" not in load_wsgi:
        pytest.fail(_moved("`Worker.load_wsgi`", user, "no longer sets `self.wsgi` (the app the front runs)"),
                    pytrace=False)


def test_the_application_and_logger_bases_have_what_serving_and_logs_override() -> None:
    application = _internal("gunicorn.app.base", "BaseApplication", "hami_web/server/serving.py")
    _require_attributes("`BaseApplication`", application, ["load_config", "load", "run"],
                        "hami_web/server/serving.py")
    _require_parameters("`BaseApplication(...)`", application, ["prog"], "hami_web/server/serving.py")
    logger = _internal("gunicorn.glogging", "Logger", "hami_web/server/logs.py")
    _require_attributes("`glogging.Logger`", logger, ["setup"], "hami_web/server/logs.py")
    _require_parameters("`glogging.Logger.setup(...)`", logger.setup, ["cfg"], "hami_web/server/logs.py")
