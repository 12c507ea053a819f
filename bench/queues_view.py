"""The console's Queues view at scale: its two reads (``db/queues_view.py``), each one
transaction, on a database of N finished jobs (1 in 50 Failed, each with its failed attempt,
its kind stored as a worker stores it since migration 29; ``--unkinded``: as before it) and M
Pending, with a week of per-minute history for Q queues.

    python -m bench.queues_view ADMIN_DSN [--finished 10000000] [--pending 2000000]
        [--queues 40] [--runs 50] [--unkinded] [--keep NAME | --reuse NAME]

Prints the p50 and p95 (ms) of the overview (`Q`: every queue) and of one queue's screen
(`enter`), as the console runs them (its poll connection, its settings), of `leasectl stats`'
read of the same history (every queue, one queue), and the load average.
The database is created afresh and dropped afterwards; with ``--keep NAME`` it is called NAME
and kept, and ``--reuse NAME`` measures on it again without seeding (the seed takes minutes):
its history is first brought up to the current minute, as a running fold would have. The
history's deltas that seeding wrote are folded before measuring, as on a system where `watch`
or the exporter runs.
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg

from bench.common import leasectl_init, log, percentile
from bench.explain import seed
from leasectl.core.queues import WINDOW
from leasectl.db.connection import Database
from leasectl.db.queues_view import QueuesReads
from leasectl.db.stats import read_stats


def seed_history(dsn: str, queues: int, *, kinded: bool = True) -> None:
    """A week of minutes of ``queues`` queues (and the three of the jobs), each with counts, a
    pickup histogram and a backlog sample; failed attempts for the Failed jobs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.queue_history (queue, minute, enqueued, started, completed, "
            "failed, pickup) "
            "SELECT q, date_trunc('minute', now(), 'UTC') - make_interval(mins => m), 100, 100, "
            "98, 2, ARRAY[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 50, 30, 20]::bigint[] "
            "FROM unnest(ARRAY['payments', 'emails', 'reports'] || ARRAY(SELECT 'q' || i "
            "FROM generate_series(1, %s) AS i)) AS q, generate_series(0, 7 * 1440 - 1) AS m "
            # (A minute's rows together, oldest first, as the fold writes them: the window's
            # are in a few pages, not one a queue.)
            "ORDER BY m DESC, q",
            (queues,),
        )
        conn.execute(
            "INSERT INTO leasectl.queue_backlog (queue, minute, pending, capped) "
            "SELECT queue, minute, 5000, false FROM leasectl.queue_history "
            "ORDER BY minute, queue"
        )
        conn.execute(
            "INSERT INTO leasectl.queue_backlog_minutes (minute) "
            "SELECT DISTINCT minute FROM leasectl.queue_history"
        )
        # With their queue and kind, as a worker of migration 29 or later stores them (the
        # kind of a traced "PSPError: ..." is its class); --unkinded: as an older one did,
        # which `errors` reads by first line, one group per invoice number in SQL.
        conn.execute(
            "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, "
            "ended_at, outcome, error, error_detail, queue, error_kind) "
            "SELECT id, 1, 'w', finished_at, finished_at, 'failed', "
            "'PSPError: 503 for invoice ' || id, 'Traceback', "
            "CASE WHEN %(kinded)s THEN queue END, CASE WHEN %(kinded)s THEN 'PSPError' END "
            "FROM leasectl.jobs WHERE status = 'Failed'",
            {"kinded": kinded},
        )
        for table in ("jobs", "job_attempts", "queue_history", "queue_backlog"):
            conn.execute(f"VACUUM ANALYZE leasectl.{table}")


def top_up_history(dsn: str) -> None:
    """A reused database's history brought up to the current minute: each queue's minutes
    since the last seeded one, as seeded, a minute's rows together as the fold writes them
    (appended: the week before is kept, none deleted, so that no minute's rows go to the free
    space of many pages, as no running system's do)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.queue_history (queue, minute, enqueued, started, completed, "
            "failed, pickup) "
            "SELECT q.queue, m, 100, 100, 98, 2, "
            "ARRAY[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 50, 30, 20]::bigint[] "
            "FROM (SELECT DISTINCT queue FROM leasectl.queue_backlog) AS q, "
            "generate_series((SELECT max(minute) FROM leasectl.queue_backlog_minutes) "
            "+ interval '1 minute', date_trunc('minute', now(), 'UTC'), interval '1 minute') AS m "
            "ORDER BY m, q.queue ON CONFLICT DO NOTHING"
        )
        conn.execute(
            "INSERT INTO leasectl.queue_backlog (queue, minute, pending, capped) "
            "SELECT h.queue, h.minute, 5000, false FROM leasectl.queue_history AS h "
            "WHERE h.minute > (SELECT max(minute) FROM leasectl.queue_backlog_minutes) "
            "ORDER BY h.minute, h.queue"
        )
        conn.execute(
            "INSERT INTO leasectl.queue_backlog_minutes (minute) "
            "SELECT DISTINCT minute FROM leasectl.queue_history "
            "WHERE minute > (SELECT max(minute) FROM leasectl.queue_backlog_minutes)"
        )
        conn.execute(
            "VACUUM ANALYZE leasectl.queue_history, leasectl.queue_backlog, "
            "leasectl.queue_backlog_minutes"
        )


def times(fn: object, runs: int) -> list[float]:
    assert callable(fn)
    for _ in range(3):
        fn()  # warm: plans, caches
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--pending", type=int, default=2_000_000)
    parser.add_argument("--queues", type=int, default=40)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--unkinded", action="store_true", help="failures without a kind")
    reuse = parser.add_mutually_exclusive_group()
    reuse.add_argument("--keep", metavar="NAME", help="seed database NAME and keep it")
    reuse.add_argument("--reuse", metavar="NAME", help="measure on NAME, seeded by --keep")
    args = parser.parse_args()
    name = args.keep or args.reuse or f"bench_queues_view_{os.getpid()}"
    dsn = psycopg.conninfo.make_conninfo(args.dsn, dbname=name)
    if args.reuse:
        log(f"reusing {name}: its history up to the current minute")
        top_up_history(dsn)
        measure(dsn, args.runs)
        return
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        leasectl_init(dsn)
        log(f"seeding {args.finished:,} finished, {args.pending:,} pending")
        seed(dsn, args.finished, args.pending, 2000, 500)
        log(f"seeding a week of history of {args.queues + 3} queues, the failed attempts")
        seed_history(dsn, args.queues, kinded=not args.unkinded)
        # The deltas the seed's enqueues wrote (12M jobs: about 50,000 rows), folded as `watch`
        # or an operator's exporter folds them within a second on a running system; unfolded,
        # every read of the history scans them (design.md, "History").
        with psycopg.connect(dsn, autocommit=True) as conn:
            while conn.execute(
                "SELECT leasectl.history_fold(100000, 1000, 6000, 100)"
            ).fetchone() != (0,):
                pass
            conn.execute("VACUUM ANALYZE leasectl.queue_history_deltas, leasectl.queue_history")
        print(f"database: {args.finished:,} finished + {args.pending:,} pending, "
              f"{args.queues + 3} queues' week of minutes")  # fmt: skip
        measure(dsn, args.runs)
    finally:
        if not args.keep:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def measure(dsn: str, runs: int) -> None:
    log("measuring")
    with Database.connect(dsn, "leasectl", max_size=1) as db:
        reads = QueuesReads(db)
        view = reads.overview()
        overview = times(reads.overview, runs)
        detail = reads.queue("payments")
        queue = times(lambda: reads.queue("payments"), runs)
        # `leasectl stats`' read of the same history (its default hour): every queue, one.
        stats_all = times(lambda: read_stats(db, None, WINDOW), runs)
        stats_one = times(lambda: read_stats(db, "payments", WINDOW), runs)
    print(f"{runs} runs each")
    print(f"overview ({len(view.rows)} queues): p50 {percentile(overview, 50):.1f} ms, "
          f"p95 {percentile(overview, 95):.1f} ms")  # fmt: skip
    print(f"queue screen ({len(detail.errors.groups)} error groups, "
          f"{detail.errors.scanned:,} failures read): p50 {percentile(queue, 50):.1f} ms, "
          f"p95 {percentile(queue, 95):.1f} ms")  # fmt: skip
    for what, values in (("every queue", stats_all), ("one queue", stats_one)):
        print(f"`leasectl stats` ({what}, the last hour): p50 {percentile(values, 50):.1f} ms, "
              f"p95 {percentile(values, 95):.1f} ms")  # fmt: skip
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
