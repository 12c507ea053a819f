"""Which jobs a person means: the filter of `leasectl list` (and of the bulk actions and the
console's search to come), parsed and validated in one place, and the page a listing returns.

Every value here is the user's: it is bound as a parameter, never spliced into SQL, and shown
through ``literal.echo`` in messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasectl.core import config, statuses
from leasectl.core.errors import UsageError
from leasectl.core.literal import echo
from leasectl.core.models import STATUS_BY_VALUE, JobStatus

# The statuses that set finished_at, and that the finished-history index covers: a filter of
# only these times finished_at (indexed), any other filter created_at.
FINISHED = statuses.FINISHED

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
DEFAULT_TIMEOUT = timedelta(seconds=5)
MAX_TIMEOUT = timedelta(minutes=10)

_BY_NAME = {status.value.lower(): status for status in JobStatus}


@dataclass(frozen=True)
class JobFilter:
    """Jobs that match every given part (None or empty: any).

    ``states``: the job's status is one of these. ``queue``: exactly this queue. ``owner``:
    ``lease_owner`` is exactly this (the holder of the current or last lease). ``error``:
    ``last_error`` contains this text, case-insensitively, every character literal.
    ``payload``: JSON text the payload contains (jsonb ``@>``). ``since`` / ``until``: the job's
    time (``time_column``) is at most ``since`` / more than ``until`` before the database's
    now.
    """

    states: frozenset[JobStatus] = frozenset()
    queue: str | None = None
    owner: str | None = None
    error: str | None = None
    payload: str | None = None
    since: timedelta | None = None
    until: timedelta | None = None

    @property
    def finished_only(self) -> bool:
        """Only finished states asked for: the times are finish times."""
        return bool(self.states) and self.states <= FINISHED

    @property
    def time_column(self) -> str:
        return "finished_at" if self.finished_only else "created_at"

    def parts(self) -> list[tuple[str, str]]:
        """(option, value as given) of each part set, in the options' order: what a listing
        says it was filtered by (values are the user's: show them through ``lit``)."""
        out: list[tuple[str, str]] = []
        if self.states:
            out.append(("--state", ",".join(s.value for s in JobStatus if s in self.states)))
        for option, value in (
            ("--queue", self.queue),
            ("--owner", self.owner),
            ("--error", self.error),
            ("--payload", self.payload),
        ):
            if value is not None:
                out.append((option, value))
        if self.since is not None:
            out.append(("--since", config.format_duration(self.since)))
        if self.until is not None:
            out.append(("--until", config.format_duration(self.until)))
        return out


def parse_states(values: Iterable[str], option: str = "--state") -> frozenset[JobStatus]:
    """Status names, any case, repeated or comma-separated (``-s failed -s stuck``,
    ``-s failed,stuck``)."""
    found: set[JobStatus] = set()
    for value in values:
        for name in value.split(","):
            status = _BY_NAME.get(name.strip().lower())
            if status is None:
                names = ", ".join(STATUS_BY_VALUE)
                raise UsageError(f"invalid {option} {echo(name.strip())}: use one of {names}")
            found.add(status)
    return frozenset(found)


def _text(value: str | None, option: str) -> str | None:
    if value is None:
        return None
    if value == "":
        raise UsageError(f"{option} must not be empty")
    return value


def parse_filter(
    *,
    states: Iterable[str] = (),
    queue: str | None = None,
    owner: str | None = None,
    error: str | None = None,
    payload: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> JobFilter:
    """A JobFilter from the options as typed; a UsageError (one line) for any bad part."""
    parsed_since = config.parse_duration(since, what="--since") if since is not None else None
    parsed_until = (
        config.parse_duration(until, allow_zero=True, what="--until") if until is not None else None
    )
    if parsed_since is not None and parsed_until is not None and parsed_until >= parsed_since:
        raise UsageError(
            f"--until ({config.format_duration(parsed_until)} ago) must be more recent than "
            f"--since ({config.format_duration(parsed_since)} ago): the window is empty"
        )
    if payload is not None:
        try:
            payload = config.parse_payload(payload)
        except UsageError as exc:
            raise UsageError(f"--payload: {exc}") from None
    return JobFilter(
        states=parse_states(states),
        queue=config.check_queue(queue) if queue is not None else None,
        owner=_text(owner, "--owner"),
        error=_text(error, "--error"),
        payload=payload,
        since=parsed_since,
        until=parsed_until,
    )


def parse_after(text: str | None) -> int | None:
    """--after: a job id (the last one of the previous page)."""
    if text is None:
        return None
    try:
        return config.parse_job_id(text)
    except UsageError:
        raise UsageError(
            f"invalid --after {echo(text)}: give the id the previous page ended at"
        ) from None


@dataclass(frozen=True)
class ListedJob:
    """A job as a listing shows it: its state and times, its error and payload cut short
    (``*_chars``: the whole text's length; ``inspect`` shows all of it)."""

    id: int
    queue: str
    status: JobStatus
    priority: int
    attempts: int
    max_attempts: int
    lease_owner: str | None
    last_error: str | None
    last_error_chars: int | None
    # None when its payload is stored in too many bytes to cast for a listing (db/history.py).
    payload_text: str | None
    payload_chars: int | None
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    payload_bytes: int | None = None  # its stored (maybe compressed) size
    # Its concurrency key (migration 18) and, for a Waiting job, the job holding the key now.
    concurrency_key: str | None = None
    key_holder: int | None = None


@dataclass(frozen=True)
class JobPage:
    """One page, newest first; ``next_after``: the ``--after`` of the next page, or None when
    this is the last one. ``db_now``: the database time the page was read at."""

    filter: JobFilter
    jobs: tuple[ListedJob, ...]
    next_after: int | None
    limit: int
    after: int | None
    db_now: datetime


_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code point order
    (the order of PostgreSQL's "C" collation on UTF-8 text), or None when there is none (the
    prefix is empty or all U+10FFFF: then every string at or above the prefix starts with it).

    ``starts_with(x, p)`` is ``p <= x < prefix_end(p)``: a range an index can walk, where a
    prefix match on a parameter in a generic plan reads every row."""
    chars = prefix.rstrip(chr(_MAX_CODE_POINT))
    if not chars:
        return None
    last = ord(chars[-1]) + 1
    if last in _SURROGATES:
        last = _SURROGATES.stop
    return chars[:-1] + chr(last)
