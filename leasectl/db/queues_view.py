"""The console's Queues view and queue screen: each read in one round trip, one read-only
REPEATABLE READ transaction under the console's settings (index paths only) and a statement
timeout, as facts (``core/queues.py``).

The overview reuses the scrape's bounded reads (``metrics.sql``: each queue's Pending and Stuck
jobs counted to a shared cap, then estimated; its leases, exact), the paused and limited
queues, the recent pickup latency, and reads the window's per-minute history of every queue
(``queues_view.sql``: one row per queue, its minutes in arrays). The queue screen reads one
queue: the console's counts, `stats`' minutes, `errors`' groups and `events`' timeline of it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from leasectl.core.counts import (
    COUNT_BUDGET,
    COUNT_FLOOR,
    RECOUNT_BUDGET,
    RECOUNT_CAP,
    BoundedCount,
    recounted,
)
from leasectl.core.limits import QueueLimit
from leasectl.core.models import PausedQueue
from leasectl.core.queues import (
    TREND_MINUTES,
    WINDOW,
    QueueDetail,
    QueueRow,
    QueuesOverview,
    attention_order,
)
from leasectl.core.stats import (
    MINUTE,
    MinuteStats,
    PickupLatency,
    QueueStats,
    add,
    fill,
    minute_of,
)
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.console import settings_params
from leasectl.db.incident import error_report, errors_params, events_params, timeline_of
from leasectl.db.rows import from_tuples, limit_from_row, paused_from_row
from leasectl.db.stats import PICKUP_ROW_LIMIT, minutes_from_rows, pickup_from_rows

# The most queues the overview lists (the attention order decides which), and the most minutes
# of history of each kind (counts, backlog samples) it reads: that many queues' window.
QUEUE_LIMIT = 500
HISTORY_ROW_LIMIT = QUEUE_LIMIT * 61
# The overview reads the backlog's samples of the minutes its trend compares, no more (the
# view shows nothing else of them; the queue screen reads the window's).
SAMPLED_SINCE = timedelta(minutes=TREND_MINUTES)
# The queue screen reads at most this many failed attempts (of every queue, the newest) and
# audit rows of each table: a tenth of a second at most, every refresh.
ERRORS_SCAN = 5_000
EVENTS_SCAN = 5_000
EVENTS_SHOWN = 50
LEASE_LIMIT = 2000  # (queue, owner) rows of leases, most expired first
TIMEOUT = timedelta(seconds=5)
RISK_WINDOW = timedelta(seconds=10)


class QueuesReads:
    """The Queues view's reads, over a ``Database`` (the console's poll connection)."""

    def __init__(self, db: Database, *, queue_limit: int = QUEUE_LIMIT) -> None:
        self.db = db
        self.queue_limit = queue_limit

    def _read(
        self,
        reads: list[tuple[str, str, dict[str, Any]]],
        timeout: timedelta,
        defaults: dict[str, Any],
    ) -> dict[str, list[dict[str, Any]]]:
        """``reads`` (label, statement, parameters over ``defaults``) in one read-only snapshot,
        one round trip."""
        schema = self.db.schema
        message = f"the queues' read took longer than {timeout.total_seconds():g}s"
        with self.db.connection(timeout=message) as conn:
            with conn.pipeline(), conn.transaction():
                conn.execute(queries.get("console_snapshot_begin").render(schema))
                cursors: dict[str, psycopg.Cursor[dict[str, Any]]] = {}
                for label, name, params in reads:
                    cursors[label] = conn.cursor(row_factory=dict_row)
                    statement = queries.get(name).render(schema)
                    cursors[label].execute(statement, {**defaults, **params})
            return {label: cur.fetchall() for label, cur in cursors.items()}

    def _limits(self) -> dict[str, Any]:
        """The scrape's statements' parameters (metrics.sql), and the paused and limited
        queues' and the recent pickup latency's."""
        return {
            "budget": COUNT_BUDGET,
            "floor": COUNT_FLOOR,
            "group_limit": 1000,
            "queue_limit": self.queue_limit,
            "lease_limit": LEASE_LIMIT,
            "risk_window": RISK_WINDOW,
            "paused_limit": self.queue_limit,
            "limits_limit": self.queue_limit,
            "queue": None,
            "row_limit": PICKUP_ROW_LIMIT,
            "recount_cap": RECOUNT_CAP,
            "recount_budget": RECOUNT_BUDGET,
        }

    def overview(
        self, *, window: timedelta = WINDOW, timeout: timedelta = TIMEOUT
    ) -> QueuesOverview:
        """Every queue with live jobs, a pause, a limit or history in ``window``, in attention
        order (at most ``queue_limit``)."""
        limits = self._limits()
        history = {"since": window, "sampled_since": SAMPLED_SINCE, "row_limit": HISTORY_ROW_LIMIT}
        rows = self._read(
            [
                ("settings", "console_settings", settings_params(timeout)),
                *_LIVE_READS,
                ("paused", "console_paused", limits),
                ("limits", "status_limits", limits),
                ("pickup", "history_pickup_recent", limits),
                ("history", "queues_view_minutes", history),
                ("sampled", "stats_sampled", {"since": SAMPLED_SINCE}),
            ],
            timeout,
            limits,
        )
        db_now: datetime = rows["clock"][0]["db_now"]
        truncated = _truncated(rows)
        if len(rows["pickup"]) >= PICKUP_ROW_LIMIT:
            truncated.add("pickup")
        read: dict[str, int] = defaultdict(int)
        for r in rows["history"]:
            read[r["kind"]] += len(r["at"])
        for kind, n in read.items():
            if n >= HISTORY_ROW_LIMIT:
                truncated.add("backlog" if kind == "backlog" else "history")
        for name in ("paused", "limits"):
            if rows[name] and int(rows[name][0]["total"]) > len(rows[name]):
                truncated.add(name)
        live = _Live(rows)
        paused = {p.queue: p for p in map(paused_from_row, rows["paused"])}
        limited = {lim.queue: lim for lim in map(limit_from_row, rows["limits"])}
        pickup = {p.queue: p for p in pickup_from_rows(rows["pickup"])}
        since = db_now - window
        window_minutes = _Window(since, db_now, (r["minute"] for r in rows["sampled"]))
        minutes = window_minutes.per_queue(rows["history"])
        names = {*live.names, *paused, *limited, *minutes}
        found = [
            live.row(
                name,
                paused=paused.get(name),
                limit=limited.get(name),
                minutes=minutes.get(name) or window_minutes.empty(),
                pickup=pickup.get(name),
            )
            for name in names
        ]
        ordered = attention_order(found)
        if len(ordered) > self.queue_limit:
            truncated.add("queues")
        return QueuesOverview(
            db_now=db_now,
            since=minute_of(since),
            rows=tuple(ordered[: self.queue_limit]),
            truncated=frozenset(truncated),
        )

    def queue(
        self, queue: str, *, window: timedelta = WINDOW, timeout: timedelta = TIMEOUT
    ) -> QueueDetail:
        """One queue: its counts and limits now (the overview's statements, as the scrape runs
        them: generic plans), the window's minutes, its error groups and audit events (one
        queue's statements: a custom plan each, its name folding the other branches)."""
        one = {"queue": queue, "limits_limit": 1, "since": window}
        errors = errors_params(window, queue, ERRORS_SCAN)
        events = events_params(window, None, queue, EVENTS_SCAN, EVENTS_SHOWN)
        rows = self._read(
            [
                ("settings", "console_settings", settings_params(timeout)),
                *_LIVE_READS,
                # (A generic plan, the overview's: planned for one queue, it took longer than
                # it runs.)
                ("limits", "status_limits", one),
                ("custom", "console_settings", settings_params(timeout, custom=True)),
                ("paused", "queues_view_paused", one),
                ("counts", "stats_counts", one),
                ("pickup", "stats_pickup", one),
                ("backlog", "stats_backlog", one),
                ("sampled", "stats_sampled", one),
                ("errors", "errors_failures", errors),
                ("job_events", "events_jobs", events),
                ("queue_events", "events_queues", events),
            ],
            timeout,
            self._limits(),
        )
        db_now: datetime = rows["clock"][0]["db_now"]
        minutes = fill(
            db_now - window,
            db_now,
            minutes_from_rows(rows["counts"], rows["pickup"], rows["backlog"]),
            (r["minute"] for r in rows["sampled"]),
        )
        recent: tuple[int, ...] = ()
        for m in minutes[-2:]:  # the current and the previous minute, as the overview's
            recent = add(recent, m.pickup)
        row = _Live(rows).row(
            queue,
            paused=next(map(paused_from_row, rows["paused"]), None),
            limit=next(map(limit_from_row, rows["limits"]), None),
            minutes=minutes,
            pickup=PickupLatency.of(queue, recent) if sum(recent) else None,
        )
        return QueueDetail(
            row=row,
            stats=QueueStats(queue=queue, since=db_now - window, until=db_now, minutes=minutes),
            errors=error_report(
                rows["errors"], queue=queue, since=window, db_now=db_now, scan=ERRORS_SCAN
            ),
            events=timeline_of(
                rows["job_events"],
                rows["queue_events"],
                since=window,
                actor=None,
                queue=queue,
                db_now=db_now,
                scan=EVENTS_SCAN,
                limit=EVENTS_SHOWN,
            ),
            truncated=frozenset(_truncated(rows)),
        )


# The live counts of every queue, as the scrape reads them (metrics.sql; ``_Live``), with the
# clock. (Not console_counts for one queue: its loose index scan seeks by the pair (queue,
# priority) only in a generic plan, and a custom one walks the queue's whole Pending index.)
_LIVE_READS: list[tuple[str, str, dict[str, Any]]] = [
    ("clock", "metrics_clock", {}),
    ("pending", "metrics_pending", {}),
    ("stuck", "metrics_stuck", {}),
    ("leases", "metrics_leases", {}),
]


def _truncated(rows: dict[str, list[dict[str, Any]]]) -> set[str]:
    """Which of the live reads stopped at their limit of queues or rows."""
    found = {name for name in ("pending", "stuck") if rows[name] and rows[name][0]["truncated"]}
    if len(rows["leases"]) >= LEASE_LIMIT:
        found.add("leases")
    return found


class _Live:
    """The live reads' rows, by queue."""

    def __init__(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        self.pending = {r["queue"]: r for r in rows["pending"]}
        self.stuck = {r["queue"]: _bounded(r) for r in rows["stuck"]}
        self.leases: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in rows["leases"]:
            self.leases[r["queue"]][0] += int(r["processing"])
            self.leases[r["queue"]][1] += int(r["expired"])
        self.names = {*self.pending, *self.stuck, *self.leases}

    def row(
        self,
        name: str,
        *,
        paused: PausedQueue | None,
        limit: QueueLimit | None,
        minutes: tuple[MinuteStats, ...],
        pickup: PickupLatency | None,
    ) -> QueueRow:
        pending = self.pending.get(name)
        processing, expired = self.leases.get(name, (0, 0))
        return QueueRow(
            queue=name,
            pending=recounted(_bounded(pending), pending["recounted"])
            if pending
            else BoundedCount(0, False),
            oldest_due_age=pending["oldest_due_age"] if pending else None,
            processing=processing,
            expired=expired,
            stuck=self.stuck.get(name, BoundedCount(0, False)),
            paused=paused,
            limit=limit,
            minutes=minutes,
            pickup=pickup,
        )


def _bounded(row: dict[str, Any]) -> BoundedCount:
    return BoundedCount.read(int(row["jobs"]), int(row["cap"]), row["estimate"])


class _Window:
    """The window's minutes, from ``since``'s to ``until``'s (as ``fill`` makes them), of each
    queue from its ``queues_view_minutes`` rows: a minute it has no row for is empty, with 0
    pending where the backlog was sampled (``sampled``: the minutes of ``SAMPLED_SINCE``, as
    the rows' samples; the older ones' pending is None, as not sampled)."""

    def __init__(self, since: datetime, until: datetime, sampled: Iterable[datetime]) -> None:
        first = minute_of(since)
        n = int((minute_of(until) - first) / MINUTE) + 1
        self.starts = tuple(first + i * MINUTE for i in range(n))
        were_sampled = {int((minute_of(s) - first) / MINUTE) for s in sampled}
        self.pending: tuple[int | None, ...] = tuple(
            0 if i in were_sampled else None for i in range(n)
        )

    def per_queue(self, rows: Iterable[dict[str, Any]]) -> dict[str, tuple[MinuteStats, ...]]:
        """Each queue's minutes (of the queues with a row)."""
        n = len(self.starts)
        found: dict[str, _Columns] = {}
        for r in rows:
            c = found.get(r["queue"]) or found.setdefault(r["queue"], _Columns(n, self.pending))
            if r["kind"] == "backlog":
                c.sampled(r["at"], r["pending"], r["capped_at"] or (), r["estimated_at"] or ())
            else:  # folded history, then the deltas not folded yet: added
                c.counted(r["at"], r["enqueued"], r["completed"], r["failed"])
        return {queue: c.minutes(self.starts) for queue, c in found.items()}

    def empty(self) -> tuple[MinuteStats, ...]:
        """The minutes of a queue without history in the window."""
        return _Columns(len(self.starts), self.pending).minutes(self.starts)


class _Columns:
    """One queue's window, a list per figure (a minute a place) until made into minutes."""

    def __init__(self, n: int, pending: tuple[int | None, ...]) -> None:
        self.n = n
        self.enqueued, self.completed, self.failed = [0] * n, [0] * n, [0] * n
        self.pending = list(pending)
        self.capped, self.estimated = [False] * n, [False] * n

    def counted(
        self, at: list[int], enqueued: list[int], completed: list[int], failed: list[int]
    ) -> None:
        for i, e, c, f in zip(at, enqueued, completed, failed, strict=True):
            if 0 <= i < self.n:  # (a delta of a minute past the read's clock: not shown)
                self.enqueued[i] += e
                self.completed[i] += c
                self.failed[i] += f

    def sampled(
        self,
        at: list[int],
        pending: list[int],
        capped_at: Iterable[int],
        estimated_at: Iterable[int],
    ) -> None:
        for i, p in zip(at, pending, strict=True):
            if 0 <= i < self.n:
                self.pending[i] = p
        for i in capped_at:
            if 0 <= i < self.n:
                self.capped[i] = True
        for i in estimated_at:
            if 0 <= i < self.n:
                self.estimated[i] = True

    def minutes(self, starts: tuple[datetime, ...]) -> tuple[MinuteStats, ...]:
        # (Without a MinuteStats.__init__ each: 43 queues x 61 minutes at each refresh.)
        return from_tuples(
            MinuteStats,
            _MINUTE_COLUMNS,
            zip(
                starts,
                self.enqueued,
                self.completed,
                self.failed,
                self.pending,
                self.capped,
                self.estimated,
                strict=True,
            ),
        )


_MINUTE_COLUMNS = (
    "start",
    "enqueued",
    "completed",
    "failed",
    "pending",
    "pending_capped",
    "pending_estimated",
)
