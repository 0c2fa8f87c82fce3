"""Log lines: one formatter makes every record one bounded line with control characters escaped.

Covers: a newline, carriage return, escape sequence or Unicode line separator in an interpolated value
cannot start a line of its own; a huge value is cut (and says how much was cut) while the rest of the
decision stays; numbers keep their format; traceback lines are indented under their record; the webhook's
decision line for a review whose uid and pod name carry newlines stays one line; the record other handlers
see is unchanged; `configure_logging` leaves a test runner's handlers alone.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from hami_web.server.logs import MAX_VALUE_CHARS, SafeFormatter, configure_logging


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
