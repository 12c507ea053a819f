"""Failed attempts grouped by kind, for `leasectl errors`: pure, no database.

A handler's exception is recorded as ``Class: message`` (``runtime/handler_errors.py``'s
``error_text``) with its traceback beside it (``job_attempts.error_detail``, migration 8): its
kind is the class. Any other failure (a job whose values could not be loaded, an attempt from
before migration 8) has no class to trust: its kind is its first line with the parts that vary
from one job to the next (uuids, hex, numbers) made placeholders, so that "503 for invoice 1"
and "503 for invoice 2" are one group.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

# What a kind keeps of a first line (the database sends at most this much of it).
KIND_CHARS = 200
# Failed attempts one `errors` reads at most, newest first (``ErrorReport.truncated``).
SCAN_CAP = 10_000

_CLASS = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::|$)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_HEX = re.compile(
    r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SPACES = re.compile(r"\s+")


def first_line(error: str) -> str:
    return error.strip().split("\n", 1)[0].strip()


def normalise(line: str) -> str:
    """``line`` with uuids, hex and numbers as ``<uuid>``, ``<hex>``, ``<n>``, runs of spaces
    as one, at most ``KIND_CHARS`` characters."""
    text = _UUID.sub("<uuid>", line)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACES.sub(" ", text).strip()[:KIND_CHARS]


def error_kind(error: str | None, *, traced: bool) -> str:
    """The group of one failed attempt's error: the exception's class when the attempt has a
    traceback (the worker wrote ``Class: message``), else its normalised first line."""
    line = first_line(error or "")
    if traced:
        found = _CLASS.match(line)
        if found:
            return found.group(1)
    return normalise(line) or "(no error text)"


@dataclass(frozen=True)
class FailedAttempt:
    job_id: int
    queue: str
    ended_at: datetime
    error: str | None  # its first line, at most KIND_CHARS characters from the database
    traced: bool  # recorded with a traceback: a handler's exception


@dataclass(frozen=True)
class ErrorGroup:
    error: str
    count: int
    first_at: datetime
    last_at: datetime
    queues: tuple[str, ...]
    example_job: int  # the job of its most recent attempt


@dataclass(frozen=True)
class ErrorReport:
    queue: str | None
    since: timedelta
    db_now: datetime
    groups: tuple[ErrorGroup, ...]
    scanned: int  # failed attempts read (of every queue, newest first)
    scan_cap: int

    @property
    def window_start(self) -> datetime:
        return self.db_now - self.since

    @property
    def truncated(self) -> bool:
        """The read stopped at its cap: older failures in the window were not counted."""
        return self.scanned >= self.scan_cap


def group_failures(attempts: Iterable[FailedAttempt]) -> tuple[ErrorGroup, ...]:
    """The groups of ``attempts``, the largest first (ties: the most recent first)."""
    counts: dict[str, int] = {}
    first: dict[str, datetime] = {}
    last: dict[str, tuple[datetime, int]] = {}
    queues: dict[str, set[str]] = {}
    for a in attempts:
        kind = error_kind(a.error, traced=a.traced)
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in first or a.ended_at < first[kind]:
            first[kind] = a.ended_at
        if kind not in last or (a.ended_at, a.job_id) > last[kind]:
            last[kind] = (a.ended_at, a.job_id)
        queues.setdefault(kind, set()).add(a.queue)
    groups = [
        ErrorGroup(
            error=kind,
            count=n,
            first_at=first[kind],
            last_at=last[kind][0],
            queues=tuple(sorted(queues[kind])),
            example_job=last[kind][1],
        )
        for kind, n in counts.items()
    ]
    groups.sort(key=lambda g: (-g.count, -g.last_at.timestamp(), g.error))
    return tuple(groups)
