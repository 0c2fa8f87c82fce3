"""Log lines a client cannot forge or inflate: one logging setup for the process, text or JSON (``--log-format``).

Pod names, review uids, annotation values and error messages come from whoever calls us. Written verbatim,
a newline in a pod name starts a fake log line, an escape sequence rewrites the operator's terminal, and a
3 MB annotation makes a 3 MB line. Both formatters cut every interpolated value and the whole message to a
bound. The text formatter escapes control characters (``\\n`` becomes the two characters ``\\`` ``n``) and
indents the lines of a traceback so that none of them can pass for a record of its own. The JSON formatter
writes one object per line (``time``, ``level``, ``logger``, ``message``, and ``pod``/``node`` of a decision,
which the filter, bind and webhook pass as ``extra``) so a log pipeline can select a pod's decisions without
parsing the message; JSON string escaping keeps a record on one line. gunicorn's own lines go through the
same handler (`GunicornLogger`), so they follow the chosen format too.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gunicorn.glogging import Logger as _GunicornBaseLogger

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Fields of a JSON line taken from a decision's ``extra`` (filter, bind, webhook).
DECISION_FIELDS = ("pod", "node")
# The name of the handler `configure_logging` installs, so that a second call re-formats it.
HANDLER_NAME = "hami-web"

# Characters per interpolated value (a pod name is at most 253; error messages are a few hundred).
MAX_VALUE_CHARS = 1024
# Characters per message after interpolation: one decision per line, readable.
MAX_MESSAGE_CHARS = 8192

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROL_CHARACTERS = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
_ESCAPES = {code: _NAMED_ESCAPES.get(chr(code), f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
            for code in _CONTROL_CHARACTERS}
_ESCAPES_KEEPING_NEWLINES = {code: text for code, text in _ESCAPES.items() if code != ord("\n")}
# json.dumps(ensure_ascii=False) escapes C0 only: DEL, C1 (a terminal's 8-bit CSI) and U+2028/2029 (a line
# break to some viewers) would be written raw. Inside a JSON string \uXXXX decodes to the same character.
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in _CONTROL_CHARACTERS if code >= 0x7F}


def escape_control_characters(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character (C0, DEL, C1, Unicode line separators) written as an escape."""
    return text.translate(_ESCAPES_KEEPING_NEWLINES if keep_newlines else _ESCAPES)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit} more characters]"


def _bounded(value: Any) -> Any:
    if isinstance(value, (int, float, bool)) or value is None:
        return value  # keeps %d / %.3f working
    return truncate(str(value), MAX_VALUE_CHARS)


def bounded_message(record: logging.LogRecord) -> str:
    """The record's message with each interpolated value and the whole message cut to their bounds."""
    record = copy.copy(record)  # other handlers (and the caller) keep the original
    if isinstance(record.args, Mapping):
        record.args = {key: _bounded(value) for key, value in record.args.items()}
    elif record.args:
        record.args = tuple(_bounded(value) for value in record.args)
    record.msg = truncate(str(record.msg), MAX_MESSAGE_CHARS)
    return truncate(record.getMessage(), MAX_MESSAGE_CHARS)


class SafeFormatter(logging.Formatter):
    """`logging.Formatter` whose output is one line per record, bounded, with control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        message = escape_control_characters(bounded_message(record))
        record = copy.copy(record)
        record.msg, record.args = message, None
        exc_info, stack_info = record.exc_info, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        line = super().format(record)
        details = []
        if exc_info:
            details.append(self.formatException(exc_info))
        if stack_info:
            details.append(self.formatStack(stack_info))
        for text in details:
            # Each traceback line indented: a forged "2026-… INFO …" inside an exception message stays inside.
            escaped = escape_control_characters(truncate(text, 4 * MAX_MESSAGE_CHARS), keep_newlines=True)
            line += "\n" + "\n".join("    " + part for part in escaped.splitlines())
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, pod/node of a decision, and any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": bounded_message(record),
        }
        for name in DECISION_FIELDS:
            value = getattr(record, name, None)
            if value:
                line[name] = truncate(str(value), MAX_VALUE_CHARS)
        if record.exc_info:
            line["exception"] = truncate(self.formatException(record.exc_info), 4 * MAX_MESSAGE_CHARS)
        if record.stack_info:
            line["stack"] = truncate(self.formatStack(record.stack_info), 4 * MAX_MESSAGE_CHARS)
        return json.dumps(line, ensure_ascii=False).translate(_JSON_ESCAPES)


def build_formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``--log-format`` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return SafeFormatter(LOG_FORMAT)
    raise ValueError(f"unknown log format {log_format!r} (expected text or json)")


def configure_logging(level: int | str = logging.INFO, log_format: str = "text") -> None:
    """Send the process's logs to stderr in ``log_format`` (the one place logging is set up).

    Called again (once the flags are read), it re-formats the handler it installed. Like
    `logging.basicConfig`, it does nothing when the root logger has other handlers (a test runner's).
    """
    root = logging.getLogger()
    ours = [handler for handler in root.handlers if handler.get_name() == HANDLER_NAME]
    if root.handlers and not ours:
        return
    if not ours:
        stderr_handler = logging.StreamHandler(sys.stderr)
        stderr_handler.set_name(HANDLER_NAME)
        root.addHandler(stderr_handler)
        ours = [stderr_handler]
    for handler in ours:
        handler.setFormatter(build_formatter(log_format))
    root.setLevel(level)


class GunicornLogger(_GunicornBaseLogger):
    """gunicorn's logger (``logger_class``) writing its lines through the process's handler, not its own.

    gunicorn gives ``gunicorn.error`` a handler with its own format and stops propagation; then its lines
    would neither escape control characters nor follow ``--log-format``. There is no access log
    (``accesslog`` is off): the app logs one line per decision already.
    """

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in list(self.error_log.handlers):
            if getattr(handler, "_gunicorn", False):
                self.error_log.removeHandler(handler)
        self.error_log.propagate = True
