"""Reads of the job history for `leasectl list`: one page of the jobs a ``JobFilter`` matches,
newest first, under a statement timeout.

A filter the indexes serve (a state's partial index, the finished history by ``finished_at``,
the primary key for ``--after``) answers in milliseconds on millions of rows; one they do not
(an owner, an error text, a payload over all finished history) must scan, so it runs under a
``statement_timeout`` and says so when it runs out. Figures: BENCHMARKS.md, "list".
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from psycopg.rows import dict_row

from leasectl.core.filters import JobFilter, JobPage, ListedJob
from leasectl.core.models import STATUS_BY_VALUE, JobStatus
from leasectl.db import sql as queries
from leasectl.db.connection import Database

# What a listing shows of an error and a payload (inspect shows them whole).
TEXT_CHARS = 1000
# A payload stored in more bytes is not cast to text for a listing (its size is shown instead).
PAYLOAD_CAST_BYTES = 256 * 1024

# The boolean parameter of jobs_list that admits each status.
STATE_PARAMS = {
    JobStatus.PENDING: "pending",
    JobStatus.PROCESSING: "processing",
    JobStatus.STUCK: "stuck",
    JobStatus.COMPLETED: "completed",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELLED: "cancelled",
    JobStatus.WAITING: "waiting",
}


def scan_timeout_message(timeout: timedelta) -> str:
    seconds = f"{timeout.total_seconds():g}s"
    return (
        f"no answer within {seconds}: the filter had to scan; narrow it with "
        "--since/--queue/--state, or raise --timeout"
    )


def like_pattern(text: str) -> str:
    """An ILIKE pattern that finds ``text`` anywhere, each of its characters literal (``%``,
    ``_`` and the escape character ``\\`` escaped)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _window_first(flt: JobFilter) -> bool:
    """Whether to read a window of finish times whole (through the finished-history index)
    rather than walk the ids down from the newest until the page is full: for a window
    narrower than the time since its end. Jobs finish at some rate, so each way reads about as
    many rows as its span holds: the window's, or those finished after it, which the walk
    passes first (the planner, not knowing that ids follow finish times, would walk)."""
    if not flt.finished_only or flt.since is None or flt.until is None:
        return False
    return flt.since - flt.until < flt.until


def list_params(
    flt: JobFilter, *, limit: int, after: int | None, floor: int | None = None
) -> dict[str, Any]:
    """jobs_list's parameters for a filter and a page (``limit`` + 1 rows are asked for: the
    extra one says whether there is a next page); ``floor``: only ids from this one up."""
    finished = flt.finished_only
    params: dict[str, Any] = {
        "after": after,
        "floor": floor,
        "any_state": not flt.states,
        **{name: status in flt.states for status, name in STATE_PARAMS.items()},
        "queue": flt.queue,
        "owner": flt.owner,
        "error": like_pattern(flt.error) if flt.error is not None else None,
        "payload": flt.payload,
        "created_since": None if finished else flt.since,
        "created_until": None if finished else flt.until,
        "finished_since": flt.since if finished else None,
        "finished_until": flt.until if finished else None,
        "window_first": _window_first(flt),
        "limit": limit + 1,
        "text_chars": TEXT_CHARS,
        "payload_cast_bytes": PAYLOAD_CAST_BYTES,
    }
    return params


class History:
    """The history reads, over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def list_jobs(
        self,
        flt: JobFilter,
        *,
        limit: int,
        after: int | None,
        timeout: timedelta,
        floor: int | None = None,
    ) -> JobPage:
        """The page of jobs ``flt`` matches with ids below ``after`` (and from ``floor`` up,
        when given: a range of the primary key, which bounds what the read may scan); a
        QueryTimeout when it takes longer than ``timeout``."""
        params = list_params(flt, limit=limit, after=after, floor=floor)
        settings = queries.get("history_settings").render(self.db.schema)
        statement = queries.get("jobs_list").render(self.db.schema)
        timeout_ms = max(1, int(timeout.total_seconds() * 1000))
        with (
            self.db.connection(timeout=scan_timeout_message(timeout)) as conn,
            conn.transaction(),
        ):
            cur = conn.cursor(row_factory=dict_row)
            db_now = cur.execute(settings, {"timeout_ms": timeout_ms}).fetchall()[0]["db_now"]
            # Never prepared: a prepared statement may get a generic plan, in which the parts
            # not given no longer fold away.
            rows = cur.execute(statement, params, prepare=False).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        jobs = tuple(ListedJob(**{**row, "status": STATUS_BY_VALUE[row["status"]]}) for row in rows)
        return JobPage(
            filter=flt,
            jobs=jobs,
            next_after=jobs[-1].id if more else None,
            limit=limit,
            after=after,
            db_now=db_now,
        )

    def count_jobs(
        self,
        flt: JobFilter,
        *,
        timeout: timedelta,
        after: int | None = None,
        cap: int | None = None,
    ) -> tuple[int, bool]:
        """How many jobs ``flt`` matches (with ids below ``after``): (count, capped), capped
        when counting stopped at ``cap`` (there are at least that many); a QueryTimeout when
        it takes longer than ``timeout`` (a filter no index serves scans the table)."""
        params = {**list_params(flt, limit=0, after=after), "cap": cap}
        settings = queries.get("history_settings").render(self.db.schema)
        statement = queries.get("jobs_count").render(self.db.schema)
        timeout_ms = max(1, int(timeout.total_seconds() * 1000))
        with (
            self.db.connection(timeout=scan_timeout_message(timeout)) as conn,
            conn.transaction(),
        ):
            cur = conn.cursor(row_factory=dict_row)
            cur.execute(settings, {"timeout_ms": timeout_ms})
            row = cur.execute(statement, params, prepare=False).fetchone()
        count = int(row["jobs"]) if row else 0
        return count, cap is not None and count >= cap

    def id_range(self) -> tuple[int, int] | None:
        """The lowest and the highest job id; None when there are no jobs."""
        row = self.db.one("jobs_id_range")
        if row is None or row["low"] is None:
            return None
        return int(row["low"]), int(row["high"])
