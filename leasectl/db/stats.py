"""The per-minute history (migration 20): `leasectl stats`'s read, the recent pickup latency
(the exporter, `status`), its fold's statement and its prune, as facts (``core/stats.py``).

Every read adds the deltas no fold has moved yet, so that a database whose exporter and watcher
do not run still answers exactly (the deltas then grow until a fold runs: `watch` or an
operator's exporter)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from psycopg.rows import dict_row

from leasectl.core.counts import COUNT_BUDGET, COUNT_FLOOR
from leasectl.core.stats import BUCKETS, MinuteStats, PickupLatency, QueueStats, fill, minute_of
from leasectl.db import sql as queries
from leasectl.db.connection import Database

# The most (queue, bucket) rows of the recent pickup latency a read returns: 500 queues' worth.
PICKUP_ROW_LIMIT = 500 * BUCKETS
# Queues whose backlog one fold samples (as the exporter's scrape finds at most 1000 queues).
SAMPLE_QUEUE_LIMIT = 1000
# History rows one prune statement deletes, per table.
PRUNE_BATCH = 5000


def _ms(limit: timedelta) -> str:
    return str(max(1, int(limit.total_seconds() * 1000)))


def read_stats(
    db: Database, queue: str | None, since: timedelta, timeout: timedelta = timedelta(seconds=30)
) -> QueueStats:
    """The minutes of the last ``since`` of ``queue`` (None: every queue, summed), each one,
    empty ones as zeros, in one read-only snapshot (one round trip)."""
    params: dict[str, Any] = {"since": since, "queue": queue, "timeout_ms": _ms(timeout)}
    names = ("stats_settings", "stats_counts", "stats_pickup", "stats_backlog", "stats_sampled")
    with db.connection(timeout="reading the history took longer than its limit") as conn:
        with conn.pipeline(), conn.transaction():
            conn.execute(queries.get("console_snapshot_begin").render(db.schema))
            cursors = {}
            for name in names:
                cursors[name] = conn.cursor(row_factory=dict_row)
                cursors[name].execute(queries.get(name).render(db.schema), params)
        rows = {name: cur.fetchall() for name, cur in cursors.items()}
    until = rows["stats_settings"][0]["db_now"]
    return QueueStats(
        queue=queue,
        since=until - since,
        until=until,
        minutes=fill(
            until - since,
            until,
            minutes_from_rows(rows["stats_counts"], rows["stats_pickup"], rows["stats_backlog"]),
            (r["minute"] for r in rows["stats_sampled"]),
        ),
    )


def minutes_from_rows(
    counts: Iterable[dict[str, Any]],
    pickup: Iterable[dict[str, Any]],
    backlog: Iterable[dict[str, Any]],
) -> list[MinuteStats]:
    """``stats_counts``', ``stats_pickup``'s and ``stats_backlog``'s rows as the minutes they
    describe (only those with a row)."""
    found: dict[Any, dict[str, Any]] = defaultdict(dict)
    for r in counts:
        found[minute_of(r["minute"])].update(
            {k: int(r[k]) for k in ("enqueued", "started", "completed", "failed", "retried")}
        )
    histograms: dict[Any, list[int]] = defaultdict(lambda: [0] * BUCKETS)
    for r in pickup:
        histograms[minute_of(r["minute"])][int(r["bucket"])] += int(r["n"])
    for minute, histogram in histograms.items():
        found[minute]["pickup"] = tuple(histogram)
    for r in backlog:
        found[minute_of(r["minute"])].update(
            {
                "pending": int(r["pending"]),
                "pending_capped": bool(r["capped"]),
                "pending_estimated": bool(r["estimated"]),
            }
        )
    return [MinuteStats(minute, **values) for minute, values in found.items()]


def pickup_from_rows(rows: Iterable[dict[str, Any]]) -> tuple[PickupLatency, ...]:
    """``history_pickup_recent``'s rows (queue, bucket, n) made into each queue's latency."""
    histograms: dict[str, list[int]] = {}
    for r in rows:
        histograms.setdefault(r["queue"], [0] * BUCKETS)[int(r["bucket"])] += int(r["n"])
    return tuple(PickupLatency.of(q, h) for q, h in sorted(histograms.items()))


def pickup_recent(db: Database) -> tuple[PickupLatency, ...]:
    """Each queue's pickup latency over the current and the previous minute (queues that
    started none are not in it)."""
    return pickup_from_rows(db.rows("history_pickup_recent", {"row_limit": PICKUP_ROW_LIMIT}))


def fold_params(limit: int) -> dict[str, Any]:
    """``history_fold``'s parameters (the backlog's sample shares the scrape's budget)."""
    return {
        "fold_limit": limit,
        "queue_limit": SAMPLE_QUEUE_LIMIT,
        "budget": COUNT_BUDGET,
        "floor": COUNT_FLOOR,
    }


def prune(db: Database, keep: timedelta, batch: int = PRUNE_BATCH) -> int:
    """Delete history older than ``keep``, ``batch`` rows of each table a statement, until
    none is left; how many rows (a lock another session holds is skipped: its rows go next
    time)."""
    total = 0
    while True:
        row = db.one("history_prune", {"keep": keep, "batch": batch})
        deleted = int(row["deleted"]) if row else 0
        total += deleted
        if deleted < batch:
            return total
