"""Failed attempts grouped by kind, for `leasectl errors`: pure, no database.

A handler's exception is recorded as ``Class: message`` (``runtime/handler_errors.py``'s
``error_text``) with its traceback beside it (``job_attempts.error_detail``, migration 8): its
kind is the class. Any other failure (a job whose values could not be loaded, an attempt from
before migration 8) has no class to trust: its kind is its first line with the parts that vary
from one job to the next (uuids, hex, numbers) made placeholders, so that "503 for invoice 1"
and "503 for invoice 2" are one group.

The worker computes each failed attempt's kind when it records the failure (``attempt_kind``,
stored with the attempt, migration 29), so that `errors` reads kinds from an index and the
database only counts equal ones together; an attempt without one (failed before that version)
is read as its first line and grouped here. Either way this module is the one definition.
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


def head(error: str | None) -> str:
    """What ``errors`` reads of an error: its first line, at most ``KIND_CHARS`` characters (the
    SQL's ``split_part(left(error, n), E'\\n', 1)``, which detoasts only that much)."""
    return (error or "").split("\n", 1)[0][:KIND_CHARS]


def attempt_kind(error: str | None, *, traced: bool) -> str:
    """The kind of a failed attempt whose stored error is ``error`` (``traced``: a traceback is
    stored beside it): the worker's, stored with the attempt, and the reader's for an attempt
    stored without one, from the same ``head``."""
    return error_kind(head(error), traced=traced)


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
class FailureTally:
    """Failed attempts the database counted together: of one stored ``kind``, or, for attempts
    stored without one, of one first line (``error``) and ``traced``. Several tallies may be
    of one kind (``group_tallies`` merges them)."""

    kind: str | None
    error: str | None  # the first line (``head``) when ``kind`` is None
    traced: bool
    count: int
    first_at: datetime
    last_at: datetime
    example_job: int  # the job of its most recent attempt (the highest id among ties)
    queues: tuple[str, ...]

    @property
    def group(self) -> str:
        if self.kind is not None:
            return self.kind
        return error_kind(self.error, traced=self.traced)


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
    scanned: int  # failed attempts read (of the queue asked for, or every queue; newest first)
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
    return group_tallies(
        FailureTally(None, a.error, a.traced, 1, a.ended_at, a.ended_at, a.job_id, (a.queue,))
        for a in attempts
    )


def group_tallies(tallies: Iterable[FailureTally]) -> tuple[ErrorGroup, ...]:
    """The groups of the attempts ``tallies`` counted, the largest first (ties: the most recent
    first): each tally's attempts join the group of its kind."""
    counts: dict[str, int] = {}
    first: dict[str, datetime] = {}
    last: dict[str, tuple[datetime, int]] = {}
    queues: dict[str, set[str]] = {}
    for t in tallies:
        kind = t.group
        counts[kind] = counts.get(kind, 0) + t.count
        if kind not in first or t.first_at < first[kind]:
            first[kind] = t.first_at
        if kind not in last or (t.last_at, t.example_job) > last[kind]:
            last[kind] = (t.last_at, t.example_job)
        queues.setdefault(kind, set()).update(t.queues)
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
