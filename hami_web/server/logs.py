"""Log lines a client cannot forge or inflate: one formatter, installed once for the whole process.

Pod names, review uids, annotation values and error messages come from whoever calls us. Written verbatim,
a newline in a pod name starts a fake log line, an escape sequence rewrites the operator's terminal, and a
3 MB annotation makes a 3 MB line. The formatter escapes control characters (``\\n`` becomes the two
characters ``\\`` ``n``), cuts every interpolated value and the whole message to a bound, and indents the
lines of a traceback so that none of them can pass for a record of its own.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Mapping
from typing import Any

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Characters per interpolated value (a pod name is at most 253; error messages are a few hundred).
MAX_VALUE_CHARS = 1024
# Characters per message after interpolation: one decision per line, readable.
MAX_MESSAGE_CHARS = 8192

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROL_CHARACTERS = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
_ESCAPES = {code: _NAMED_ESCAPES.get(chr(code), f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
            for code in _CONTROL_CHARACTERS}
_ESCAPES_KEEPING_NEWLINES = {code: text for code, text in _ESCAPES.items() if code != ord("\n")}


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


class SafeFormatter(logging.Formatter):
    """`logging.Formatter` whose output is one line per record, bounded, with control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        record = copy.copy(record)  # other handlers (and the caller) keep the original
        if isinstance(record.args, Mapping):
            record.args = {key: _bounded(value) for key, value in record.args.items()}
        elif record.args:
            record.args = tuple(_bounded(value) for value in record.args)
        record.msg = truncate(str(record.msg), MAX_MESSAGE_CHARS)
        message = escape_control_characters(truncate(record.getMessage(), MAX_MESSAGE_CHARS))
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


def configure_logging(level: int | str = logging.INFO) -> None:
    """Send the process's logs to stderr through `SafeFormatter` (the one place logging is set up).

    Like `logging.basicConfig`, it does nothing when the root logger already has handlers (a test runner's).
    """
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
