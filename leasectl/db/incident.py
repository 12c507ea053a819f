"""Reads for an incident: `leasectl errors` (failed attempts grouped by kind) and `leasectl
events` (the audit timeline). Each reads a bounded number of rows through an index, under a
statement timeout, and says how many it read (``db/sql/incident.sql``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import dict_row

from leasectl.core import errorgroups, timeline
from leasectl.core.errorgroups import ErrorReport, FailureTally
from leasectl.core.timeline import Timeline, TimelineEntry
from leasectl.db import sql as queries
from leasectl.db.connection import Database


def _timeout_message(timeout: timedelta) -> str:
    return f"no answer within {timeout.total_seconds():g}s: the server is slow or busy; try again"


class Incident:
    """The incident reads, over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _read(
        self, timeout: timedelta, statements: list[tuple[str, dict[str, Any]]]
    ) -> tuple[datetime, list[list[dict[str, Any]]]]:
        """The statements in one read-only transaction under ``timeout``: now() and their rows."""
        settings = queries.get("incident_settings").render(self.db.schema)
        timeout_ms = max(1, int(timeout.total_seconds() * 1000))
        results = []
        with (
            self.db.connection(timeout=_timeout_message(timeout)) as conn,
            conn.transaction(),
        ):
            cur = conn.cursor(row_factory=dict_row)
            cur.execute(queries.get("console_snapshot_begin").render(self.db.schema))
            db_now = cur.execute(settings, {"timeout_ms": timeout_ms}).fetchall()[0]["db_now"]
            for name, params in statements:
                statement = queries.get(name).render(self.db.schema)
                results.append(cur.execute(statement, params).fetchall())
        return db_now, results

    def errors(
        self,
        *,
        since: timedelta,
        queue: str | None = None,
        scan: int = errorgroups.SCAN_CAP,
        timeout: timedelta = timedelta(seconds=10),
    ) -> ErrorReport:
        """The failed attempts of the last ``since`` (of ``queue``), grouped by kind; at most
        ``scan`` of them read, the newest. The database counts equal stored kinds (and equal
        first lines of attempts stored without one); ``group_tallies`` makes the groups."""
        params = errors_params(since, queue, scan)
        db_now, (rows,) = self._read(timeout, [("errors_failures", params)])
        return error_report(rows, queue=queue, since=since, db_now=db_now, scan=scan)

    def events(
        self,
        *,
        since: timedelta,
        actor: str | None = None,
        queue: str | None = None,
        scan: int = timeline.SCAN_CAP,
        limit: int = timeline.ENTRY_LIMIT,
        timeout: timedelta = timedelta(seconds=10),
    ) -> Timeline:
        """The operator and watcher actions of the last ``since`` (of ``actor``, on
        ``queue``), newest first; at most ``scan`` rows of each audit table read."""
        params = events_params(since, actor, queue, scan, limit)
        db_now, (job_rows, queue_rows) = self._read(
            timeout, [("events_jobs", params), ("events_queues", params)]
        )
        return timeline_of(
            job_rows,
            queue_rows,
            since=since,
            actor=actor,
            queue=queue,
            db_now=db_now,
            scan=scan,
            limit=limit,
        )


def errors_params(since: timedelta, queue: str | None, scan: int) -> dict[str, Any]:
    """``errors_failures``' parameters: ``queue``'s failures stored with a kind (every
    queue's when None), and the newest of every queue's stored without one (an older worker's:
    ``error_report`` keeps ``queue``'s)."""
    return {"since": since, "queue": queue, "scan": scan, "chars": errorgroups.KIND_CHARS}


def error_report(
    rows: list[dict[str, Any]],
    *,
    queue: str | None,
    since: timedelta,
    db_now: datetime,
    scan: int,
) -> ErrorReport:
    """``errors_failures``' rows (one per kind, first line, traced and queue, with its count)
    as the groups of failures they hold, of ``queue`` when given."""
    tallies = [
        FailureTally(
            kind=r["kind"],
            error=r["error"],
            traced=r["traced"],
            count=int(r["failures"]),
            first_at=r["first_at"],
            last_at=r["last_at"],
            example_job=r["example_job"],
            queues=(r["queue"],) if r["queue"] is not None else (),
        )
        for r in rows
    ]
    # Read: the newest failures of every queue, one count per queue (--queue keeps its own).
    scanned = sum(t.count for t in tallies)
    if queue is not None:
        tallies = [t for t in tallies if t.queues == (queue,)]
    return ErrorReport(
        queue=queue,
        since=since,
        db_now=db_now,
        groups=errorgroups.group_tallies(tallies),
        scanned=scanned,
        scan_cap=scan,
    )


def events_params(
    since: timedelta, actor: str | None, queue: str | None, scan: int, limit: int
) -> dict[str, Any]:
    """``events_jobs``' and ``events_queues``' parameters (one row more than ``limit``: whether
    there were more)."""
    return {"since": since, "actor": actor, "queue": queue, "scan": scan, "limit": limit + 1}


def timeline_of(
    job_rows: list[dict[str, Any]],
    queue_rows: list[dict[str, Any]],
    *,
    since: timedelta,
    actor: str | None,
    queue: str | None,
    db_now: datetime,
    scan: int,
    limit: int,
) -> Timeline:
    """``events_jobs``' and ``events_queues``' rows as one timeline, newest first."""
    start = db_now - since
    complete = all(
        not rows or int(rows[0]["scanned"]) < scan or rows[0]["oldest"] < start
        for rows in (job_rows, queue_rows)
    )
    jobs = [
        TimelineEntry(
            at=r["at"],
            kind="job",
            actor=r["actor"],
            db_role=r["db_role"],
            action=r["action"],
            reason=r["reason"],
            queues=tuple(sorted(r["queues"] or ())),
            jobs=int(r["jobs"]),
            first_job=r["first_job"],
            last_job=r["last_job"],
        )
        for r in job_rows
        if r["at"] is not None
    ]
    queues = [
        TimelineEntry(
            at=r["at"],
            kind="queue",
            actor=r["actor"],
            db_role=r["db_role"],
            action=r["action"],
            reason=r["reason"],
            queues=(r["queue"],),
            jobs=0,
            first_job=None,
            last_job=None,
        )
        for r in queue_rows
        if r["at"] is not None
    ]
    entries, shown_all = timeline.merge(jobs, queues, limit)
    return Timeline(
        since=since,
        actor=actor,
        queue=queue,
        db_now=db_now,
        entries=entries,
        scanned=sum(int(rows[0]["scanned"]) for rows in (job_rows, queue_rows) if rows),
        complete=complete,
        shown_all=shown_all,
    )
