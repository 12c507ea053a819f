"""The console's reads: everything one refresh shows, read in one round trip, as rows.

The panels (the Stuck panel's order, which owners a filter keeps) and the throughput kept
between refreshes are the console's (``console/panels.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from leasectl.core.counts import COUNT_BUDGET, RECOUNT_BUDGET, RECOUNT_CAP
from leasectl.core.filters import prefix_end
from leasectl.core.limits import QueueLimit
from leasectl.core.models import OwnerHealth, PanelJob, PausedQueue
from leasectl.core.throughput import GRACE
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.operations import owner_health
from leasectl.db.rows import limit_from_row, panel_jobs, paused_from_row


@dataclass(frozen=True)
class ConsoleRows:
    """One refresh as read, at one instant (the database time ``counts["db_now"]``)."""

    counts: dict[str, Any]  # console_counts' row: db_now, server_version, database, counts
    per_minute: list[dict[str, Any]]  # console_throughput's rows (counted from ``since``)
    finished_estimate: dict[str, int]  # by status
    owners: list[OwnerHealth]
    pending: tuple[PanelJob, ...]
    processing: tuple[PanelJob, ...]  # soonest expiry first: the expired leases come first
    stuck: tuple[PanelJob, ...]  # the Stuck jobs (not the expired leases)
    # console_counts' row for every queue: read only under a queue filter (else ``counts``).
    all_counts: dict[str, Any] | None = None
    # console_match_counts' row: what an owner filter matches (read only under one).
    matched: dict[str, Any] | None = None
    queues: tuple[str, ...] = ()  # every queue with live jobs (console_queues)
    failed: tuple[PanelJob, ...] = ()  # console_failed: newest first
    paused: tuple[PausedQueue, ...] = ()  # console_paused: by name, at most ``paused_limit``
    paused_total: int = 0  # how many queues are paused (``paused`` may list fewer)
    limits: tuple[QueueLimit, ...] = ()  # status_limits: by name, at most ``limits_limit``
    limits_total: int = 0  # how many queues are limited
    # read_clock's lag: how far a hot standby is behind its primary (None: read from a primary).
    read_lag: timedelta | None = None

    @property
    def db_now(self) -> datetime:
        value: datetime = self.counts["db_now"]
        return value


def console_settings(*, custom: bool) -> dict[str, str]:
    """The console's session settings for one read (a refresh, the Queues view's). For one
    queue's reads (``custom``), a custom plan per statement: the queue's name folds each
    `queue IS NULL OR queue = ...` branch into an index condition, where the generic plan
    walked the claim index from its start through every other queue's Pending jobs (1.5 s a
    refresh at 2M Pending)."""
    settings = dict(queries.CONSOLE_SETTINGS)
    if custom:
        settings["plan_cache_mode"] = "force_custom_plan"
    return settings


def settings_params(
    timeout: timedelta, *, custom: bool = False, lock_timeout: bool = True
) -> dict[str, Any]:
    """``console_settings`` statement's parameters: ``console_settings(custom=custom)`` and a
    statement timeout of ``timeout`` (and a lock timeout as long, with ``lock_timeout``), as
    the names and the values it sets, in one order."""
    settings = console_settings(custom=custom)
    ms = str(max(1, int(timeout.total_seconds() * 1000)))
    settings["statement_timeout"] = ms
    if lock_timeout:
        settings["lock_timeout"] = ms
    return {"setting_names": list(settings), "setting_values": list(settings.values())}


class ConsoleReads:
    """The console's poll, over a ``Database`` of its own."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def read(
        self,
        queue: str | None,
        limit: int,
        *,
        owner: str | None,
        job_id: int | None,
        risk_window: timedelta,
        minutes: int,
        since: datetime | None,
        timeout: timedelta,
        owner_window: timedelta,
        owner_limit: int,
        queue_limit: int = 200,
        failed_scan: int = 5000,
        paused_limit: int = 100,
        limits_limit: int = 100,
        count_budget: int = COUNT_BUDGET,
        group_limit: int = 1000,
    ) -> ConsoleRows:
        """What the console shows, read in one read-only REPEATABLE READ transaction so that
        every count, every panel row, the owners and the read clock (``read_clock``: on a hot
        standby behind its primary, the time of the last transaction it replayed) describe the
        same instant. Panels hold at most ``limit`` rows each; finished history is only ever
        estimated. ``since``: where the throughput count starts (None: the whole window).
        ``queue_limit``: at most this many names of queues with live jobs. ``failed_scan``:
        the Failed panel looks for Failed jobs among this many of the last finished.
        ``paused_limit``: at most this many of the paused queues (all are counted), and
        ``limits_limit`` of the limited ones, with their limits in force and use.
        ``count_budget``: Pending, due and Stuck counts stop past this many (a row's "cap"),
        read through ``BoundedCount``; ``group_limit``: the (queue, priority) groups of Pending
        jobs the due count and the oldest due are read from (past it, the whole index)."""
        schema = self.db.schema
        params: dict[str, Any] = {
            "queue": queue,
            "owner": owner or None,
            "owner_end": prefix_end(owner) if owner else None,
            "job_id": job_id,
            "limit": limit,
            "risk_window": risk_window,
            "minutes": minutes,
            "since": since,
            "grace": GRACE,
            **settings_params(timeout, custom=queue is not None, lock_timeout=False),
            "failed_scan": failed_scan,
            "schema": schema,
            "budget": count_budget,
            "recount_cap": RECOUNT_CAP,
            "recount_budget": RECOUNT_BUDGET,
            "group_limit": group_limit,
        }
        owner_params = {"window": owner_window, "limit": owner_limit}
        panels = ("console_pending", "console_processing", "console_stuck", "console_failed")
        # (label, query, parameters): what this refresh reads besides the panels. The counts
        # for every queue and what an owner filter matches are read only under such a filter.
        # read_clock comes first: it sets the read clock ({now}) the other statements use.
        reads: list[tuple[str, str, dict[str, Any]]] = [
            ("begin", "console_snapshot_begin", params),
            ("clock", "read_clock", {}),
            ("settings", "console_settings", params),
            ("counts", "console_counts", params),
            ("throughput", "console_throughput", params),
            ("estimate", "status_finished_estimate", params),
            ("owners", "status_owners", owner_params),
            ("queues", "console_queues", {"queue_limit": queue_limit}),
            ("paused", "console_paused", {"paused_limit": paused_limit}),
            ("limits", "status_limits", {"queue": None, "limits_limit": limits_limit}),
        ]
        if queue is not None:
            reads.append(("all_counts", "console_counts", {**params, "queue": None}))
        if owner:
            reads.append(("matched", "console_match_counts", params))
        with self.db.connection() as conn:
            # BEGIN, every statement and COMMIT go out together: one round trip.
            with conn.pipeline(), conn.transaction():
                results: dict[str, psycopg.Cursor[dict[str, Any]]] = {}
                for label, name, args in reads:
                    results[label] = conn.cursor(row_factory=dict_row)
                    results[label].execute(queries.get(name).render(schema), args, binary=True)
                # The panels' rows come as tuples, for rows.panel_jobs.
                panel_cursors = [conn.cursor() for _ in panels]
                for name, cur in zip(panels, panel_cursors, strict=True):
                    cur.execute(queries.get(name).render(schema), params, binary=True)
            clock, counts, per_minute, estimated, owner_rows, queue_rows, paused_rows, limited = (
                results[label].fetchall()
                for label in (
                    "clock",
                    "counts",
                    "throughput",
                    "estimate",
                    "owners",
                    "queues",
                    "paused",
                    "limits",
                )
            )
            extra = {
                label: results[label].fetchone()
                for label in ("all_counts", "matched")
                if label in results
            }
            pending, processing, stuck, failed = (
                panel_jobs([c.name for c in cur.description or ()], cur.fetchall())
                for cur in panel_cursors
            )
        db_now = counts[0]["db_now"]
        return ConsoleRows(
            counts=counts[0],
            per_minute=per_minute,
            finished_estimate={r["status"]: int(r["jobs"]) for r in estimated},
            owners=owner_health(owner_rows, db_now),
            pending=pending,
            processing=processing,
            stuck=stuck,
            all_counts=extra.get("all_counts"),
            matched=extra.get("matched"),
            queues=tuple(r["queue"] for r in queue_rows),
            failed=failed,
            paused=tuple(paused_from_row(r) for r in paused_rows),
            paused_total=int(paused_rows[0]["total"]) if paused_rows else 0,
            limits=tuple(limit_from_row(r) for r in limited),
            limits_total=int(limited[0]["total"]) if limited else 0,
            read_lag=clock[0]["lag"],
        )
