"""What a handler's exception makes of its attempt, and the one log line each failed attempt gets.

Any BaseException a handler raises fails its attempt (``SystemExit: 3``), as an Exception does:
left uncaught, a SystemExit killed its handler thread (the job stayed held, its slot lost) or
closed the event loop of every async job. ``KeyboardInterrupt`` alone means "stop", as Ctrl+C does:
the worker shuts down and hands the job back."""

from __future__ import annotations

import traceback
from datetime import timedelta
from typing import Any

from leasectl.core.literal import echo, shorten
from leasectl.core.models import JobStatus, Lease
from leasectl.core.tracebacks import no_nul

ERROR_LIMIT = 4000
LOG_ERROR_LIMIT = 200
# The ``extra`` key of a log record about one job or queue: its fields (``job_fields``), which
# ``--log-format json`` writes as fields of their own (docs/design.md, "Log lines").
LOG_FIELDS = "leasectl_fields"


def stops_worker(error: BaseException) -> bool:
    return isinstance(error, KeyboardInterrupt)


def fails_attempt(error: BaseException) -> bool:
    """Everything but a request to stop (an async task cancelled by the worker is a lost
    lease: its caller sees the lease lost and writes nothing)."""
    return not stops_worker(error)


def error_text(error: BaseException) -> str:
    """``Class: message``, as the job's last error keeps it."""
    lines = traceback.format_exception_only(type(error), error)
    return no_nul("".join(lines).strip())[:ERROR_LIMIT]


def first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0]


def failure_line(
    worker_id: str,
    lease: Lease,
    error: str,
    status: JobStatus,
    retry_delay: timedelta,
) -> str:
    """One line for the log: the job, attempt and queue, the error's first line (untrusted: cut
    short and escaped), and what becomes of the job."""
    if status is JobStatus.PENDING:
        then = f"retrying in {retry_delay.total_seconds():g}s"
    else:
        then = f"now {status.value}"
    return (
        f"worker {worker_id}: job {lease.job_id} attempt {lease.attempt} "
        f"(queue {echo(lease.job.queue)}) failed: "
        f"{echo(first_line(error), LOG_ERROR_LIMIT)}; {then}"
    )


def lost_line(worker_id: str, lease: Lease, why: str) -> str:
    return (
        f"worker {worker_id}: job {lease.job_id} attempt {lease.attempt} "
        f"(queue {echo(lease.job.queue)}): {why}"
    )


def shown(error: BaseException) -> str:
    return echo(shorten(first_line(error_text(error)), LOG_ERROR_LIMIT))


def job_fields(lease: Lease, outcome: str | None, error: str | None = None) -> dict[str, Any]:
    """A log record's ``extra`` for a line about one job's attempt: its id, attempt, queue,
    what became of it (``outcome``) and the error's first line (cut short), if any."""
    fields: dict[str, Any] = {
        "job": lease.job_id,
        "attempt": lease.attempt,
        "queue": lease.job.queue,
        "outcome": outcome,
    }
    if error is not None:
        fields["error"] = shorten(first_line(error), LOG_ERROR_LIMIT)
    return {LOG_FIELDS: fields}


def queue_fields(queue: str) -> dict[str, Any]:
    """A log record's ``extra`` for a line about one queue (paused, resumed)."""
    return {LOG_FIELDS: {"queue": queue}}
