"""Resolution and validation of what the user gives: schema name, durations, ids, JSON (the
DSN is the data layer's: `db/dsn.py`)."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from datetime import timedelta
from typing import Any

from leasectl.core.errors import UsageError
from leasectl.core.literal import echo

DEFAULT_SCHEMA = "leasectl"

# Limits on what a job may be given (README, "Limits"); the schema enforces the first two too
# (migration 5).
MAX_QUEUE_CHARS = 200  # far below the btree entry size of the indexes that lead with queue
MAX_ATTEMPTS = 1000
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024  # of JSON text, UTF-8
# All the payloads one enqueue sends (--count copies of one): one statement, all or nothing, so
# all of it is in memory at once on both sides (about 2.4 times its size in the client), and
# past 1 GiB PostgreSQL refuses the array outright. BENCHMARKS.md, "enqueue --count".
MAX_ENQUEUE_BYTES = 64 * 1024 * 1024
# Nesting of arrays and objects: Python's JSON decoder recurses once per level and gives up
# near 1,000 (the recursion limit), less in a deep call stack; handlers that walk a payload
# recursively need room too.
MAX_PAYLOAD_DEPTH = 256
# Snooze, per-job timeouts and progress (migration 21 enforces the first three as well).
MAX_SNOOZES = 100  # snoozes per job; one more is a failure of the attempt
MAX_SNOOZE_DELAY = timedelta(days=7)  # how far one snooze may put a job off
MIN_TIMEOUT = timedelta(seconds=1)  # a job's timeout (enqueue --timeout): from 1s ...
MAX_TIMEOUT = timedelta(days=7)  # ... to 7 days
MAX_PROGRESS_CHARS = 200  # a progress message is cut to this (varchar(200))

_DURATION = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
MAX_DURATION = timedelta(days=3650)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def resolve_schema(cli_value: str | None) -> str:
    value = (
        cli_value if cli_value is not None else os.environ.get("LEASECTL_SCHEMA", DEFAULT_SCHEMA)
    )
    if not value or len(value.encode()) > 63 or "\x00" in value:
        raise UsageError(f"invalid schema name {echo(value)}: 1 to 63 bytes, no NUL")
    if value.startswith("pg_") or value == "information_schema":
        raise UsageError(
            f"invalid schema name {echo(value)}: pg_* and information_schema are PostgreSQL's "
            "own schemas; choose another"
        )
    return value


def check_queue(name: str, option: str = "--queue") -> str:
    """A queue name from the command line: not blank, and one leasectl can store."""
    if not name.strip():
        raise UsageError(f"{option} must not be empty")
    return check_queue_length(name, option)


# The most an operator's audit reason may hold (pause, resume, cancel, delete): queue_state's
# and job_events' bound (migrations 7 and 10).
MAX_REASON_CHARS = 1000
# What a worker or an operator writes (migration 15): a worker id (lease_owner), an error, an
# audit actor. Longer text froze the readers that showed it.
MAX_OWNER_CHARS = 400
MAX_ERROR_CHARS = 4000
MAX_ACTOR_CHARS = 1000


def check_reason(text: str | None, *, required: str | None) -> str | None:
    """An audit ``--reason`` as given, bounded; a missing or blank one is refused when
    ``required`` (what to say instead), else None."""
    if text is None or not text.strip():
        if required:
            raise UsageError(f"--reason must not be empty: {required}")
        return None
    if len(text) > MAX_REASON_CHARS:
        raise UsageError(
            f"--reason: at most {MAX_REASON_CHARS} characters, got {len(text):,}: {echo(text)}"
        )
    return text


def check_queue_length(name: str, option: str = "queue") -> str:
    """A queue name as given, once known to be one leasectl can store and index."""
    if len(name) > MAX_QUEUE_CHARS:
        raise UsageError(
            f"{option}: a queue name has at most {MAX_QUEUE_CHARS} characters, "
            f"got {len(name):,}: {echo(name)}"
        )
    return name


def _shown(text: str) -> str:
    """The user's value, quoted, cut short so that an error stays one readable line."""
    return echo(text)


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
        wanted = "zero or more" if allow_zero else "greater than zero"
        raise UsageError(f"invalid {what} {_shown(text)}: must be {wanted}")
    return value


class _NotJson(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def _any(text: str) -> None:
    """Numbers are not converted: they go to PostgreSQL as written (jsonb keeps them exact)."""
    return None


def payload_depth(value: Any, limit: int = MAX_PAYLOAD_DEPTH) -> int:
    """How deep arrays and objects nest in a decoded value (a scalar: 0), counted without
    recursion; stops counting past ``limit``."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


def check_enqueue_size(payload_bytes: int, count: int) -> None:
    """One enqueue of ``count`` copies of a payload sends at most MAX_ENQUEUE_BYTES in all."""
    total = payload_bytes * count
    if total > MAX_ENQUEUE_BYTES:
        raise UsageError(
            f"--count {count:,} copies of a {payload_bytes:,}-byte payload are {total:,} bytes; "
            f"one enqueue sends at most {MAX_ENQUEUE_BYTES:,} (64 MiB) in one statement: "
            "lower --count, or enqueue in several runs"
        )


def parse_payload(text: str) -> str:
    """The JSON text as given, once it is known to be one JSON value within the limits
    (MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH). It is sent as text and PostgreSQL makes the
    jsonb of it, so numbers are stored exactly as written (no float rounding; 1e400 is a
    number there). The server's own checks (NUL and lone surrogate escapes) still apply."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError("invalid JSON payload: not valid UTF-8") from None
    if size > MAX_PAYLOAD_BYTES:
        raise UsageError(
            f"payload too large: {size:,} bytes of JSON; at most {MAX_PAYLOAD_BYTES:,} (16 MiB)"
        )
    too_deep = f"payload nested too deep: at most {MAX_PAYLOAD_DEPTH} levels of arrays and objects"
    try:
        value = json.loads(text, parse_float=_any, parse_int=_any, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"invalid JSON payload: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except _NotJson as exc:
        raise UsageError(f"invalid JSON payload: {exc}") from None
    except RecursionError:
        raise UsageError(too_deep) from None
    if payload_depth(value) > MAX_PAYLOAD_DEPTH:
        raise UsageError(too_deep)
    return text


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
    return f"operator:{user}@{socket.gethostname()}"[:MAX_ACTOR_CHARS]


def _os_account() -> str:
    uid = os.getuid()
    try:
        import pwd  # (POSIX only)

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):  # a uid without a passwd entry (some containers)
        return f"uid{uid}"


def watcher_actor() -> str:
    return f"watcher@{socket.gethostname()}:{os.getpid()}"[:MAX_ACTOR_CHARS]


def parse_listen(text: str, what: str = "--listen") -> tuple[str, int]:
    """HOST:PORT (``[::1]:9464`` for an IPv6 address; port 0: any free port) as (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        sep = ""  # an IPv6 address without brackets: its port is ambiguous
    if not sep or not host.strip() or not port_text.isascii() or not port_text.isdigit():
        raise UsageError(
            f"invalid {what} {_shown(text)}: use HOST:PORT (127.0.0.1:9464, [::1]:9464)"
        )
    port = int(port_text)
    if port > 65535:
        raise UsageError(f"invalid {what} {_shown(text)}: the port must be 0 to 65535")
    return host, port
