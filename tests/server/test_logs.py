"""Log lines: one logging setup makes every record one bounded line, text or JSON (``--log-format``).

Covers, text: a newline, carriage return, escape sequence or Unicode line separator in an interpolated value
cannot start a line of its own; a huge value is cut (and says how much was cut) while the rest of the
decision stays; numbers keep their format; traceback lines are indented under their record; the webhook's
decision line for a review whose uid and pod name carry newlines stays one line; the record other handlers
see is unchanged. JSON: time, level, logger, message, pod and node of a decision, exceptions; control
characters (including those ``json`` leaves raw: DEL, C1, U+2028/2029) escaped and decoded back unchanged; the
same bounds as text. Setup: `configure_logging` leaves a test runner's handlers alone and re-formats its own;
gunicorn's lines go through the process's handler once, in the chosen format.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from gunicorn.config import Config

from hami_web.server.logs import (
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    GunicornLogger,
    JsonFormatter,
    SafeFormatter,
    build_formatter,
    configure_logging,
)


def _format(message: str, *args: object, exc_info: object = None) -> str:
    record = logging.LogRecord("hami_web.test", logging.INFO, __file__, 1, message, args, exc_info)
    return SafeFormatter("%(levelname)s %(message)s").format(record)


@pytest.mark.parametrize(("value", "shown"), [
    ("pod\n2026-01-01 INFO forged", "pod\\n2026-01-01 INFO forged"),
    ("a\rb", "a\\rb"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("line\u2028separator", "line\\u2028separator"),
    ("nul\x00", "nul\\x00"),
    ("tab\there", "tab\\there"),
    ("ünïcode ok", "ünïcode ok"),
], ids=["newline", "carriage-return", "terminal-escape", "unicode-line-separator", "nul", "tab", "printable"])
def test_control_characters_are_escaped(value: str, shown: str) -> None:
    line = _format("filter pod=%s node=%s", value, "node1")
    assert line == f"INFO filter pod={shown} node=node1"
    assert "\n" not in line and "\r" not in line


def test_a_huge_value_is_cut_and_the_decision_stays_readable() -> None:
    line = _format("admission %s allowed=%s", "x" * 3_000_000, False)
    assert len(line) < MAX_VALUE_CHARS + 200
    assert f"[{3_000_000 - MAX_VALUE_CHARS} more characters]" in line
    assert line.endswith("allowed=False")


def test_numbers_keep_their_format() -> None:
    assert _format("took %.1f ms for %d pods", 1.25, 3) == "INFO took 1.2 ms for 3 pods"


def test_traceback_lines_are_indented_under_their_record() -> None:
    try:
        raise ValueError("bad\n2026-01-01 00:00:00 INFO forged")
    except ValueError:
        import sys

        line = _format("failed", exc_info=sys.exc_info())
    first, *rest = line.split("\n")
    assert first == "INFO failed"
    assert rest and all(part.startswith("    ") for part in rest)


def test_the_record_other_handlers_see_is_unchanged() -> None:
    record = logging.LogRecord("hami_web.test", logging.INFO, __file__, 1, "pod=%s", ("a\nb",), None)
    SafeFormatter().format(record)
    assert record.getMessage() == "pod=a\nb"


@pytest.fixture
def webhook_log() -> Iterator[io.StringIO]:
    """The ``hami_web`` loggers written through `SafeFormatter` into a string."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("hami_web")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_a_review_with_newlines_in_uid_and_pod_name_logs_one_line(client: FlaskClient,
                                                                  webhook_log: io.StringIO) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "evil\nINFO hami_web.routes.webhook: forged", "namespace": "default"},
           "spec": {"containers": [{"name": "c"}]}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u\n1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "operation": "CREATE", "object": pod}}
    assert client.post("/webhook", json=review).status_code == 200
    lines = webhook_log.getvalue().splitlines()
    assert len(lines) == 1
    assert "uid=u\\n1" in lines[0] and "evil\\nINFO" in lines[0]


def test_configure_logging_leaves_existing_handlers_alone() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    assert before  # pytest's capture handlers
    configure_logging(logging.DEBUG)
    assert root.handlers == before


def test_configure_logging_reformats_its_own_handler_once_the_flags_are_read() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers[:] = []  # as in ``hami-web serve``: no test runner's handlers
    try:
        configure_logging(logging.INFO)  # before the flags are parsed
        configure_logging("WARNING", "json")  # --log-format json --log-level WARNING
        ours, configured_level = root.handlers[:], root.level
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert len(ours) == 1
    assert isinstance(ours[0].formatter, JsonFormatter)
    assert configured_level == logging.WARNING


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        build_formatter("xml")


# -- JSON ------------------------------------------------------------------------------------------------------


def _json_line(message: str, *args: object, exc_info: Any = None, **extra: object) -> tuple[str, dict[str, Any]]:
    record = logging.LogRecord("hami_web.test", logging.WARNING, __file__, 1, message, args, exc_info)
    record.__dict__.update(extra)
    line = JsonFormatter().format(record)
    return line, json.loads(line)


def test_json_line_has_the_fields_and_the_decision_pod_and_node() -> None:
    _, decision = _json_line("bind pod=%s node=%s failed", "default/p", "n1", pod="default/p", node="n1")
    assert set(decision) == {"time", "level", "logger", "message", "pod", "node"}
    assert decision["time"].endswith("Z") and "T" in decision["time"]
    assert (decision["level"], decision["logger"], decision["message"], decision["pod"], decision["node"]) == (
        "WARNING", "hami_web.test", "bind pod=default/p node=n1 failed", "default/p", "n1")
    _, plain = _json_line("cache synced")
    assert set(plain) == {"time", "level", "logger", "message"}


@pytest.mark.parametrize("value", [
    "pod\n{\"level\": \"INFO\"}", "a\rb", "\x1b[31mred", "del\x7f", "csi\x9b2J", "line\u2028separator",
    "para\u2029graph", "nul\x00", "ünïcode ok",
], ids=["newline", "carriage-return", "terminal-escape", "del", "c1-csi", "unicode-line-separator",
        "unicode-paragraph-separator", "nul", "printable"])
def test_json_escapes_every_control_character_and_decodes_back(value: str) -> None:
    line, decoded = _json_line("admission %s", value, pod=value)
    assert not any(ord(character) < 0x20 or 0x7F <= ord(character) < 0xA0 or character in "\u2028\u2029"
                   for character in line)
    assert (decoded["message"], decoded["pod"]) == (f"admission {value}", value)
    assert "ünïcode" in line or "ünïcode" not in value  # printable text stays readable


def test_json_has_the_same_bounds_as_text() -> None:
    huge = "x" * 3_000_000
    try:
        raise ValueError("y" * 3_000_000)
    except ValueError:
        line, decoded = _json_line("admission %s allowed=%s", huge, False, exc_info=sys.exc_info(), pod=huge)
    assert decoded["message"].endswith(f"…[{3_000_000 - MAX_VALUE_CHARS} more characters] allowed=False")
    assert len(decoded["pod"]) < MAX_VALUE_CHARS + 40
    assert len(decoded["exception"]) < 4 * MAX_MESSAGE_CHARS + 40
    assert len(line) < 6 * MAX_MESSAGE_CHARS


# -- gunicorn's own lines ---------------------------------------------------------------------------------------


@pytest.fixture
def gunicorn_loggers() -> Iterator[None]:
    """gunicorn's loggers restored after a test sets them up."""
    touched = [logging.getLogger(name) for name in ("gunicorn.error", "gunicorn.access")]
    saved = [(logger.handlers[:], logger.level, logger.propagate) for logger in touched]
    yield
    for logger, (handlers, level, propagate) in zip(touched, saved, strict=True):
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.mark.parametrize(("log_format", "expected"), [
    ("text", "INFO gunicorn.error: Listening at: http://x\\n[INFO] forged (1)"),
    ("json", {"level": "INFO", "logger": "gunicorn.error", "message": "Listening at: http://x\n[INFO] forged (1)"}),
])
def test_gunicorn_lines_go_once_through_the_process_handler_in_the_chosen_format(
        gunicorn_loggers: None, log_format: str, expected: str | dict[str, str]) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    formatter = build_formatter(log_format)
    if isinstance(formatter, SafeFormatter):
        formatter = SafeFormatter("%(levelname)s %(name)s: %(message)s")  # no time, to compare the line
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        cfg = Config()
        cfg.set("errorlog", "-")
        gunicorn_log = GunicornLogger(cfg)
        gunicorn_log.info("Listening at: %s (%d)", "http://x\n[INFO] forged", 1)
        gunicorn_log.access(None, None, {}, None)  # no access log
    finally:
        root.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    if isinstance(expected, dict):
        assert {key: json.loads(lines[0])[key] for key in expected} == expected
    else:
        assert lines[0] == expected
