"""Resolution and validation of what the user gives: DSN, schema name, durations, ids, JSON."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from datetime import timedelta
from typing import Any

from psycopg import conninfo

from leasectl.errors import ConfigError, UsageError

DEFAULT_SCHEMA = "leasectl"

_DURATION = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
MAX_DURATION = timedelta(days=3650)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_QUOTED = re.compile(r'"[^"]*"')

NO_DSN_MESSAGE = (
    "no database given: pass --dsn, or set LEASECTL_DSN or DATABASE_URL "
    "(to try leasectl without a database, run `leasectl demo`)"
)


def resolve_dsn(cli_value: str | None) -> str:
    """--dsn, else LEASECTL_DSN, else DATABASE_URL; validated for syntax, never echoed."""
    for value in (cli_value, os.environ.get("LEASECTL_DSN"), os.environ.get("DATABASE_URL")):
        if value is not None and value.strip():
            validate_dsn(value)
            return value
    raise ConfigError(NO_DSN_MESSAGE)


def validate_dsn(dsn: str) -> dict[str, Any]:
    try:
        return conninfo.conninfo_to_dict(dsn)
    except Exception as exc:  # psycopg raises ProgrammingError with libpq's text
        # libpq quotes fragments of the string, which may hold the password: drop them.
        detail = _QUOTED.sub("…", str(exc).splitlines()[0] if str(exc) else "")
        raise ConfigError(f"invalid DSN: {detail}".rstrip(": ")) from None


def safe_dsn(dsn: str) -> str:
    """host:port/dbname for messages; the password never appears."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except Exception:
        return "<invalid DSN>"
    host = str(params.get("host") or os.environ.get("PGHOST") or "localhost")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    dbname = str(params.get("dbname") or params.get("user") or os.environ.get("PGDATABASE") or "")
    where = f"{host}:{port}" if not host.startswith("/") else f"{host} (socket, port {port})"
    return f"{where}/{dbname}" if dbname else where


def resolve_schema(cli_value: str | None) -> str:
    value = (
        cli_value if cli_value is not None else os.environ.get("LEASECTL_SCHEMA", DEFAULT_SCHEMA)
    )
    if not value or len(value.encode()) > 63 or "\x00" in value:
        raise UsageError(f"invalid schema name {value!r}: 1 to 63 bytes, no NUL")
    return value


def _shown(text: str, limit: int = 40) -> str:
    """The user's value, quoted, cut short so that an error stays one readable line."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def parse_duration(text: str, *, allow_zero: bool = False, what: str = "duration") -> timedelta:
    """Accepts 250ms, 30s, 5m, 1h, 2d or plain seconds (2.5)."""
    m = _DURATION.match(text)
    if not m:
        raise UsageError(
            f"invalid {what} {_shown(text)}: use a number with ms, s, m, h or d "
            "(250ms, 30s, 5m, 1h), or plain seconds"
        )
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise UsageError(f"invalid {what} {_shown(text)}: longer than ten years")
    value = timedelta(seconds=seconds)
    if value <= timedelta(0) and not (allow_zero and value == timedelta(0)):
        raise UsageError(f"invalid {what} {_shown(text)}: must be greater than zero")
    return value


def parse_payload(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"invalid JSON payload: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def parse_job_id(text: str) -> int:
    digits = text.strip()
    try:
        if not (digits.isascii() and digits.isdigit()):
            raise ValueError(text)
        value = int(digits)
    except ValueError:
        raise UsageError(f"invalid job id {_shown(text)}: ids are positive integers") from None
    if value <= 0 or value > 2**63 - 1:
        raise UsageError(f"invalid job id {_shown(text)}: ids are positive integers")
    return value


def format_duration(value: timedelta | float | None) -> str:
    """Short human form: 850ms, 42s, 3m05s, 2h10m, 3d4h; negative values get a minus sign."""
    if value is None:
        return "-"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{sign}{int(seconds)}s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{sign}{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{sign}{int(seconds // 86400)}d{int(seconds % 86400 // 3600)}h"


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def operator_actor() -> str:
    """The operator's name for the audit (job_events.actor, beside the database role):
    $USER, else $LOGNAME, else the name of the process's OS account (cron and systemd units
    often set neither), else its uid."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or _os_account()
    return f"operator:{user}@{socket.gethostname()}"


def _os_account() -> str:
    uid = os.getuid()
    try:
        import pwd  # (POSIX only)

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):  # a uid without a passwd entry (some containers)
        return f"uid{uid}"


def watcher_actor() -> str:
    return f"watcher@{socket.gethostname()}:{os.getpid()}"
