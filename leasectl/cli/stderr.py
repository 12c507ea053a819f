"""Everything leasectl writes to stderr: notices, error lines and log lines, each with every
secret taken out and every control character visible."""

from __future__ import annotations

import enum
import logging
import sys
from collections.abc import Sequence

from leasectl.cli.redaction import Secrets, redact, scrub, secrets_in
from leasectl.cli.root import PROG
from leasectl.core.literal import shorten, visible

# The longest line an error or a notice may take on stderr: a message quotes at most
# ECHO_LIMIT characters of any one value, so only a message that quotes too much gets here.
MESSAGE_LIMIT = 1000

# The arguments main() was called with: notices and log lines are scrubbed with them too.
_given_args: list[str] = []


def _one_line(message: str) -> str:
    """What stderr may carry of a message: one line, every control visible, bounded."""
    return shorten(visible(message), MESSAGE_LIMIT)


def _warn(message: str) -> None:
    """A one-line notice on stderr for outcomes that are not errors but set the exit code."""
    line = _one_line(redact(message, secrets_in(_given_args)))
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _error(message: str, args: Sequence[str], *, kind: str = "error") -> None:
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


def _setup_logging(level: LogLevel) -> None:
    """Long-running commands log to stderr with timestamps."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _SafeFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", secrets_in(_given_args))
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if level != LogLevel.DEBUG:
        logging.getLogger("psycopg").setLevel(logging.WARNING)
