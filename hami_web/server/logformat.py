"""Log output: plain text (default) or one JSON object per line (``--log-format json``).

JSON lines carry ``time`` (RFC 3339, UTC), ``level``, ``logger`` and ``message``, plus ``pod`` and ``node`` when
the line is a scheduling decision (the filter, bind and webhook pass them as ``extra``), so a log pipeline can
select a pod's decisions without parsing the message. gunicorn's own lines go through the same formatter.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DECISION_FIELDS = ("pod", "node")
# A message carries values clients chose (pod names, annotation values): bound each line's size. JSON
# encoding already keeps a line one line (a newline in a value is written as \n).
MAX_MESSAGE_CHARS = 8192


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[{len(text) - limit} more characters]"


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and pod/node of a decision."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
                    .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": _bounded(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        for name in DECISION_FIELDS:
            value = getattr(record, name, None)
            if value:
                line[name] = _bounded(str(value), MAX_MESSAGE_CHARS)
        if record.exc_info:
            line["exception"] = _bounded(self.formatException(record.exc_info), 4 * MAX_MESSAGE_CHARS)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(log_format: str, level: str) -> None:
    """Point the root logger's handlers (stderr) at the chosen format and level."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    formatter = JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    for handler in root.handlers:
        handler.setFormatter(formatter)
    root.setLevel(level)


def gunicorn_logconfig(log_format: str, level: str) -> dict[str, Any] | None:
    """gunicorn's ``logconfig_dict`` for JSON logs (its lines and ours, once each, on stderr); None for text."""
    if log_format != "json":
        return None
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonLogFormatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "root": {"level": level, "handlers": ["stderr"]},
        # No access log, as in text mode: the app logs one line per decision already.
        "loggers": {"gunicorn.error": {"level": level, "handlers": [], "propagate": True},
                    "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False}},
    }
