"""Everything leasectl writes to stderr: notices, error lines and log lines, each with every
secret taken out and every control character visible."""

from __future__ import annotations

import enum
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from leasectl.cli.redaction import Secrets, redact, scrub, secrets_in
from leasectl.cli.root import PROG
from leasectl.core.literal import shorten, visible

# The longest line an error or a notice may take on stderr: a message quotes at most
# ECHO_LIMIT characters of any one value, so only a message that quotes too much gets here.
MESSAGE_LIMIT = 1000

# The arguments main() was called with: notices and log lines are scrubbed with them too.
_given_args: list[str] = []
# Set by _setup_logging(..., LogFormat.JSON): notices and errors become JSON log lines too, so
# that every line on stderr is one JSON object.
_json_lines: list[bool] = [False]


def _one_line(message: str) -> str:
    """What stderr may carry of a message: one line, every control visible, bounded."""
    return shorten(visible(message), MESSAGE_LIMIT)


def _warn(message: str) -> None:
    """A one-line notice on stderr for outcomes that are not errors but set the exit code."""
    if _json_lines[0]:
        _print_json("warning", "leasectl", message, secrets_in(_given_args))
        return
    line = _one_line(redact(message, secrets_in(_given_args)))
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _error(message: str, args: Sequence[str], *, kind: str = "error") -> None:
    if _json_lines[0]:
        _print_json("error", "leasectl", f"{kind}: {message}", secrets_in(args), scrubbed=True)
        return
    line = _one_line(scrub(message, secrets_in(args)))
    print(f"{PROG}: {kind}: {line}", file=sys.stderr, flush=True)


class LogLevel(enum.StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class _SafeFormatter(logging.Formatter):
    """Log lines (and the tracebacks in them) without any of ``secrets``; the worker ids,
    queues and server messages they quote are shown, not acted on (newlines and tabs stay,
    for tracebacks)."""

    def __init__(self, fmt: str, secrets: Secrets) -> None:
        super().__init__(fmt)
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return visible(redact(super().format(record), self.secrets), multiline=True)


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


# A log record's fields about a job (runtime/handler_errors.py's LOG_FIELDS, not imported: the
# runtime is not loaded for --help), written in this order after ts, level, logger and msg.
LOG_FIELDS = "leasectl_fields"
JOB_KEYS = ("job", "attempt", "queue", "outcome", "error")


def _json_line(fields: dict[str, Any]) -> str:
    """One line of JSON, printable ASCII only: every control character (C0, DEL, C1), every
    non-ASCII character (bidi controls, line separators) written as a \\u escape."""
    return json.dumps(fields, ensure_ascii=True, default=str).replace("\x7f", "\\u007f")


def _print_json(
    level: str, logger: str, message: str, secrets: Secrets, *, scrubbed: bool = False
) -> None:
    clean = scrub(message, secrets) if scrubbed else redact(message, secrets)
    line = _json_line({"ts": _now(), "level": level, "logger": logger, "msg": clean})
    print(line, file=sys.stderr, flush=True)


def _now(created: float | None = None) -> str:
    when = datetime.now(UTC) if created is None else datetime.fromtimestamp(created, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _JsonFormatter(logging.Formatter):
    """A log record as one JSON object (docs/design.md, "Log lines"): ts, level, logger, msg,
    a job's fields when the line is about one, exc (a traceback) when it has one; every string
    without any of ``secrets``, and escaped (``_json_line``)."""

    def __init__(self, secrets: Secrets) -> None:
        super().__init__()
        self.secrets = secrets

    def _clean(self, value: Any) -> Any:
        return redact(value, self.secrets) if isinstance(value, str) else value

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": _now(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": self._clean(record.getMessage()),
        }
        job = getattr(record, LOG_FIELDS, None)
        if isinstance(job, dict):
            for key in JOB_KEYS:
                if job.get(key) is not None:
                    fields[key] = self._clean(job[key])
        if record.exc_info:
            fields["exc"] = self._clean(self.formatException(record.exc_info))
        return _json_line(fields)


def _setup_logging(level: LogLevel, log_format: LogFormat = LogFormat.TEXT) -> None:
    """Long-running commands log to stderr with timestamps (``--log-format``: as text, or one
    JSON object per line)."""
    handler = logging.StreamHandler(sys.stderr)
    secrets = secrets_in(_given_args)
    _json_lines[0] = log_format is LogFormat.JSON
    if log_format is LogFormat.JSON:
        handler.setFormatter(_JsonFormatter(secrets))
    else:
        handler.setFormatter(
            _SafeFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", secrets)
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if level != LogLevel.DEBUG:
        logging.getLogger("psycopg").setLevel(logging.WARNING)
