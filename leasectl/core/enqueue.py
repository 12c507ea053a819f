"""What a producer gives to enqueue a job (``NewJob``), what it gets back (``Enqueued``), and
the checks every job passes before any SQL is sent: a bad value raises a ``UsageError`` and
leaves the caller's transaction as it was."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from leasectl.core.config import (
    DEFAULT_SCHEMA,
    MAX_ATTEMPTS,
    MAX_DURATION,
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_DEPTH,
    MAX_QUEUE_CHARS,
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    payload_depth,
)
from leasectl.core.errors import UsageError
from leasectl.core.literal import echo

# A unique key's bound, as a queue name's: the column is varchar(200) (migration 12); a
# concurrency key's the same (migration 18).
MAX_UNIQUE_KEY_CHARS = 200
MAX_CONCURRENCY_KEY_CHARS = 200
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class NewJob:
    """One job to enqueue. ``payload``: any value ``json.dumps`` writes (no NaN or infinity).
    ``delay``: not claimable before now + delay (the database's clock). ``unique_key``: at most
    one live (Pending, Processing, Stuck, Waiting) job per queue and key; enqueueing another
    returns the live one's id, marked ``duplicate``. ``concurrency_key``: at most one job of the
    queue with this key runs at a time, in queue order (priority, run_at, id); the others wait
    (status ``Waiting``) without holding up other keys. ``timeout``: how long one attempt's
    handler may run (1 second to 7 days; None: no limit but the lease's); past it the worker
    cancels the handler and the attempt fails (retried as any failure)."""

    payload: Any = None
    queue: str = "default"
    priority: int = 0
    delay: timedelta = timedelta(0)
    max_attempts: int = 5
    unique_key: str | None = None
    concurrency_key: str | None = None
    timeout: timedelta | None = None


class Enqueued(NamedTuple):
    """A job enqueued: its id, or, when ``duplicate``, the id of the live job with its key that
    was already there (nothing was inserted for it). (A named tuple: a million are made for
    `enqueue --count 1000000` in a fraction of a frozen dataclass's time.)"""

    id: int
    duplicate: bool = False


@dataclass(frozen=True)
class CheckedJob:
    """A NewJob once checked, its payload as the JSON text to send."""

    payload: str
    queue: str
    priority: int
    delay: timedelta
    max_attempts: int
    unique_key: str | None
    concurrency_key: str | None = None
    timeout: timedelta | None = None


def check_timeout(timeout: Any) -> timedelta | None:
    """A job's timeout: None, or a timedelta from MIN_TIMEOUT (1s) to MAX_TIMEOUT (7 days)."""
    if timeout is None:
        return None
    if not isinstance(timeout, timedelta):
        raise UsageError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    if not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        raise UsageError(
            f"timeout must be between {MIN_TIMEOUT.total_seconds():g}s and "
            f"{MAX_TIMEOUT.days} days, got {timeout}"
        )
    return timeout


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise UsageError(f"{what} must not be empty")
    if len(value) > limit:
        raise UsageError(f"{what} has at most {limit} characters, got {len(value):,}")
    if "\x00" in value:
        raise UsageError(f"{what} must not contain NUL characters: {echo(value)}")
    return value


def _integer(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise UsageError(f"{what} must be between {low:,} and {high:,}, got {value:,}")
    return value


def payload_text(payload: Any) -> str:
    """The JSON text of a Python payload, within the limits of a job (README, "Limits")."""
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"payload is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise UsageError(f"payload nested too deep: at most {MAX_PAYLOAD_DEPTH} levels") from None
    # (json.dumps writes ASCII: a character is a byte.)
    if len(text) > MAX_PAYLOAD_BYTES:
        raise UsageError(f"payload too large: at most {MAX_PAYLOAD_BYTES:,} bytes of JSON")
    if payload_depth(payload) > MAX_PAYLOAD_DEPTH:
        raise UsageError(f"payload nested too deep: at most {MAX_PAYLOAD_DEPTH} levels")
    _check_strings(payload)
    return text


def _check_strings(payload: Any) -> None:
    """jsonb holds no NUL character and no surrogate code point (the server would refuse the
    statement, and with it the caller's transaction): refused here first."""
    todo = [payload]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif isinstance(value, list | tuple):
            todo.extend(value)
        elif isinstance(value, str):
            if "\x00" in value:
                raise UsageError("payload: jsonb cannot hold a NUL character (\\u0000)")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise UsageError("payload: a string holds a surrogate code point") from None


def check_job(job: NewJob, *, payload: str | None = None) -> CheckedJob:
    """A job's values checked (``payload``: its JSON text, already checked, instead of
    ``job.payload``)."""
    if not isinstance(job, NewJob):
        raise UsageError(f"a job to enqueue is a leasectl.NewJob, got {type(job).__name__}")
    if not isinstance(job.delay, timedelta):
        raise UsageError(f"delay must be a datetime.timedelta, got {type(job.delay).__name__}")
    if not timedelta(0) <= job.delay <= MAX_DURATION:
        raise UsageError(f"delay must be between 0 and {MAX_DURATION.days:,} days, got {job.delay}")
    key = job.unique_key
    ckey = job.concurrency_key
    return CheckedJob(
        payload=payload_text(job.payload) if payload is None else payload,
        queue=_text(job.queue, "queue", MAX_QUEUE_CHARS),
        priority=_integer(job.priority, "priority", INT32_MIN, INT32_MAX),
        delay=job.delay,
        max_attempts=_integer(job.max_attempts, "max_attempts", 1, MAX_ATTEMPTS),
        unique_key=None if key is None else _text(key, "unique_key", MAX_UNIQUE_KEY_CHARS),
        concurrency_key=None
        if ckey is None
        else _text(ckey, "concurrency_key", MAX_CONCURRENCY_KEY_CHARS),
        timeout=check_timeout(job.timeout),
    )


def check_schema_name(schema: Any) -> str:
    """A schema name the library may splice in as an identifier (as ``--schema``'s)."""
    if not isinstance(schema, str) or not schema or len(schema.encode()) > 63 or "\x00" in schema:
        raise UsageError(f"invalid schema name {echo(str(schema))}: 1 to 63 bytes, no NUL")
    return schema


__all__ = [
    "DEFAULT_SCHEMA",
    "CheckedJob",
    "Enqueued",
    "NewJob",
    "check_job",
    "check_schema_name",
    "check_timeout",
    "payload_text",
]
