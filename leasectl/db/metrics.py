"""The metrics exporter's reads: one scrape's rows, read in one round trip, as facts.

Every read walks a live state's partial index a bounded number of steps (``db/sql/metrics.sql``);
finished history is only the planner's estimate; the owners are the console's
(``status_owners``, judged by ``core/health.py``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
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
from leasectl.core.models import OwnerHealth, PausedQueue
from leasectl.core.stats import PickupLatency
from leasectl.db import counters as counter_folds
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.console import settings_params
from leasectl.db.counters import FOLD_LIMIT
from leasectl.db.operations import owner_health
from leasectl.db.rows import limit_from_row, paused_from_row
from leasectl.db.stats import PICKUP_ROW_LIMIT, pickup_from_rows


@dataclass(frozen=True)
class PendingQueue:
    queue: str
    jobs: BoundedCount
    oldest_due_age: float | None  # seconds, on the database clock; None: nothing is due


@dataclass(frozen=True)
class QueueOwnerLeases:
    queue: str
    owner: str
    processing: int
    expired: int
    at_risk: int


@dataclass(frozen=True)
class CounterValue:
    """One counter's value (migration 11): ``counter`` is ``completed``, ``failed``, ``retried``,
    ``watcher`` or ``operator``; ``action`` the audit action of the last two, else ''."""

    counter: str
    action: str
    queue: str
    value: int


@dataclass(frozen=True)
class ScheduleGauge:
    name: str
    last_enqueued_at: datetime | None
    lateness: float  # seconds its next slot is overdue (0: paused, or not due)


@dataclass(frozen=True)
class MetricsRows:
    """One scrape as read, at one instant (``db_now``)."""

    db_now: datetime
    pending: tuple[PendingQueue, ...]
    stuck: dict[str, BoundedCount]  # by queue
    waiting: dict[str, BoundedCount]  # by queue: behind their concurrency key (migration 18)
    leases: tuple[QueueOwnerLeases, ...]
    owners: tuple[OwnerHealth, ...]
    finished_estimate: dict[str, int]  # by status, from planner statistics
    paused: tuple[PausedQueue, ...]
    counters: tuple[CounterValue, ...]
    limits: tuple[QueueLimit, ...]  # the limited queues, by name (at most ``limit_limit``)
    # Each queue's pickup latency over the current and the previous minute (migration 20).
    pickup: tuple[PickupLatency, ...]
    # Which reads stopped at their limit of queues, groups or rows (their gauges miss some).
    truncated: frozenset[str]
    schedules: tuple[ScheduleGauge, ...] = ()  # by name (at most ``schedule_limit``)


class MetricsReads:
    """The exporter's scrape, over a ``Database`` of its own."""

    def __init__(
        self,
        db: Database,
        *,
        budget: int = COUNT_BUDGET,
        floor: int = COUNT_FLOOR,
        group_limit: int = 1000,
        queue_limit: int = 1000,
        lease_limit: int = 2000,
        owner_limit: int = 500,
        owner_window: timedelta = timedelta(hours=1),
        paused_limit: int = 1000,
        risk_window: timedelta = timedelta(seconds=10),
        counter_limit: int = 20000,  # series per counter
        limit_limit: int = 1000,  # limited queues
        schedule_limit: int = 1000,  # schedules
        fold_limit: int = FOLD_LIMIT,
    ) -> None:
        self.db = db
        self.budget = budget
        self.floor = floor
        self.limits: dict[str, int] = {
            "group_limit": group_limit,
            "queue_limit": queue_limit,
            "lease_limit": lease_limit,
            "paused_limit": paused_limit,
            "counter_limit": counter_limit,
            "limits_limit": limit_limit,
            "schedules_limit": schedule_limit,
            "fold_limit": fold_limit,
            "row_limit": PICKUP_ROW_LIMIT,
        }
        self.owner_limit = owner_limit
        self.owner_params: dict[str, Any] = {"window": owner_window, "limit": owner_limit}
        self.risk_window = risk_window
        self._may_fold: bool | None = None
        self._socket: int | None = None  # the descriptor abort() shuts
        self._socket_lock = threading.Lock()

    def close(self) -> None:
        self.db.close(timeout=1.0)

    def fold(self, timeout: timedelta = counter_folds.FOLD_TIMEOUT) -> int:
        """Move up to ``fold_limit`` counter deltas into their totals (one short write
        transaction, bounded by ``timeout``); returns how many. No value changes: a scrape
        reads both."""
        with self._tracked(timeout=counter_folds.TIMED_OUT) as conn:
            return counter_folds.fold_on(conn, self.db.schema, self.limits["fold_limit"], timeout)

    @contextlib.contextmanager
    def _tracked(self, **mapping: Any) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection whose socket ``abort`` may shut meanwhile (a duplicate of its
        descriptor, so that it names this socket even if the connection closes)."""
        with self.db.connection(**mapping) as conn:
            fd = os.dup(conn.pgconn.socket)
            with self._socket_lock:
                self._socket = fd
            try:
                yield conn
            finally:
                with self._socket_lock:
                    self._socket = None
                os.close(fd)

    def abort(self) -> None:
        """From another thread: shut the socket of the call in progress, so that a call that
        waits for a server that no longer answers (a black-holed network) fails now."""
        with self._socket_lock:
            if self._socket is None:
                return
            with (
                contextlib.suppress(OSError),
                socket.fromfd(self._socket, socket.AF_INET, socket.SOCK_STREAM) as sock,
            ):
                sock.shutdown(socket.SHUT_RDWR)

    @property
    def may_fold(self) -> bool:
        """Whether this role may fold (an operator's; a viewer's reads only), asked once."""
        if self._may_fold is None:
            self._may_fold = counter_folds.may_fold(self.db)
        return self._may_fold

    def read(self, timeout: timedelta) -> MetricsRows:
        """Every gauge's rows in one read-only REPEATABLE READ transaction (one round trip),
        each statement bounded by ``timeout``."""
        schema = self.db.schema
        params: dict[str, Any] = {
            **self.limits,
            "budget": self.budget,
            "floor": self.floor,
            "recount_cap": RECOUNT_CAP,
            "recount_budget": RECOUNT_BUDGET,
            "risk_window": self.risk_window,
            "schema": schema,
            **settings_params(timeout),
        }
        reads: list[tuple[str, str, dict[str, Any]]] = [
            ("begin", "console_snapshot_begin", params),
            ("settings", "console_settings", params),
            ("clock", "metrics_clock", params),
            ("pending", "metrics_pending", params),
            ("stuck", "metrics_stuck", params),
            ("waiting", "metrics_waiting", params),
            ("leases", "metrics_leases", params),
            ("owners", "status_owners", self.owner_params),
            ("estimate", "status_finished_estimate", params),
            ("paused", "console_paused", params),
            ("counters", "metrics_counters", params),
            ("limits", "status_limits", {**params, "queue": None}),
            ("schedules", "metrics_schedules", params),
            ("pickup", "history_pickup_recent", params),
        ]
        with self._tracked(timeout="the scrape's reads took longer than --timeout") as conn:
            with conn.pipeline(), conn.transaction():
                cursors: dict[str, psycopg.Cursor[dict[str, Any]]] = {}
                for label, name, args in reads:
                    cursors[label] = conn.cursor(row_factory=dict_row)
                    cursors[label].execute(queries.get(name).render(schema), args, binary=True)
            rows = {label: cursors[label].fetchall() for label in cursors if label != "begin"}
        db_now: datetime = rows["clock"][0]["db_now"]
        truncated = {
            name
            for name in ("pending", "stuck", "waiting")
            if rows[name] and rows[name][0]["truncated"]
        }
        if len(rows["leases"]) >= self.limits["lease_limit"]:
            truncated.add("leases")
        if len(rows["owners"]) >= self.owner_limit:
            truncated.add("owners")
        if rows["paused"] and int(rows["paused"][0]["total"]) > len(rows["paused"]):
            truncated.add("paused")
        if rows["limits"] and int(rows["limits"][0]["total"]) > len(rows["limits"]):
            truncated.add("limits")
        if rows["schedules"] and int(rows["schedules"][0]["total"]) > len(rows["schedules"]):
            truncated.add("schedules")
        if len(rows["pickup"]) >= self.limits["row_limit"]:
            truncated.add("pickup")
        counter_rows = _per_counter(rows["counters"], self.limits["counter_limit"])
        if len(counter_rows) < len(rows["counters"]):
            truncated.add("counters")
        return MetricsRows(
            db_now=db_now,
            pending=tuple(
                PendingQueue(
                    r["queue"],
                    recounted(
                        BoundedCount.read(int(r["jobs"]), int(r["cap"]), r["estimate"]),
                        r["recounted"],
                    ),
                    r["oldest_due_age"],
                )
                for r in rows["pending"]
            ),
            stuck={
                r["queue"]: BoundedCount.read(int(r["jobs"]), int(r["cap"]), r["estimate"])
                for r in rows["stuck"]
            },
            waiting={
                r["queue"]: BoundedCount.read(int(r["jobs"]), int(r["cap"]), r["estimate"])
                for r in rows["waiting"]
            },
            leases=tuple(
                QueueOwnerLeases(
                    r["queue"],
                    r["owner"],
                    int(r["processing"]),
                    int(r["expired"]),
                    int(r["at_risk"]),
                )
                for r in rows["leases"]
            ),
            owners=tuple(owner_health(rows["owners"], db_now)),
            finished_estimate={r["status"]: int(r["jobs"]) for r in rows["estimate"]},
            paused=tuple(paused_from_row(r) for r in rows["paused"]),
            counters=tuple(
                CounterValue(r["counter"], r["action"], r["queue"], int(r["value"]))
                for r in counter_rows
            ),
            limits=tuple(limit_from_row(r) for r in rows["limits"]),
            pickup=pickup_from_rows(rows["pickup"]),
            truncated=frozenset(truncated),
            schedules=tuple(
                ScheduleGauge(r["name"], r["last_enqueued_at"], float(r["lateness"]))
                for r in rows["schedules"]
            ),
        )


def _per_counter(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` rows of each counter (metrics_counters reads one more of a counter
    that has more: that one is truncated, the others whole)."""
    kept: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["counter"]] = seen.get(r["counter"], 0) + 1
        if seen[r["counter"]] <= limit:
            kept.append(r)
    return kept
