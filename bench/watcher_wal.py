"""The WAL a watcher pass writes per job it moves, and its parts.

    python -m bench.watcher_wal [--dsn DSN | --durable] [--jobs 20000] [--runs 2]

Seeds ``--jobs`` expired leases (as bench/watcher.py), takes a CHECKPOINT, then runs
``jobs_requeue_expired`` (batches of 500, counting only, as the `watch` daemon) until none is
left, and reads the WAL written from the insert position, and the records and full-page images
from pg_stat_wal (reset before the pass). Three variants of migration 9's function, each in a
fresh database: as shipped; without the audit rows (the ``events`` part); without closing the
attempts (the ``closed`` part). The differences are what those parts write; the variants are
measurements only, never a way to run the watcher. A full-page image is written for the first
change of a page after a checkpoint: a pass right after one pays for every page it touches.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import psycopg

from bench.common import QUICK, Ctx, leasectl_init, log, server_dsn, table
from bench.watcher import seed_expired
from leasectl.db import sql as queries

BATCH = 500


def variants() -> dict[str, str | None]:
    """Variant -> the function's CREATE statement (None: as the migrations made it)."""
    [text] = [m.text for m in queries.migrations() if m.version == 9]
    start = text.index("CREATE FUNCTION {schema}.jobs_requeue_expired(")
    function = text[start : text.index("$$;", start) + 3].replace("{schema}", "leasectl")
    events = re.compile(r"\), events AS \(.*?\n    \)\n", re.S)
    closed = re.compile(r"\), closed AS \(.*?\n    \), events", re.S)
    assert len(events.findall(function)) == 1 and len(closed.findall(function)) == 1
    return {
        "shipped": None,
        "without the audit rows": events.sub(")\n", function),
        "without closing the attempts": closed.sub("), events", function),
    }


def measure(ctx: Ctx, create: str | None, jobs: int) -> dict[str, Any]:
    dsn = ctx.fresh_db("watcher_wal")
    try:
        leasectl_init(dsn)
        seed_expired(dsn, jobs)
        with psycopg.connect(dsn, autocommit=True) as conn:
            if create is not None:
                conn.execute("DROP FUNCTION leasectl.jobs_requeue_expired")
                conn.execute(create)
            conn.execute("CHECKPOINT")
            conn.execute("SELECT pg_stat_reset_shared('wal')")
            row = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            assert row is not None
            start = row[0]
            moved = 0
            while True:
                rows = conn.execute(
                    "SELECT n FROM leasectl.jobs_requeue_expired(%s, NULL, false, "
                    "'watcher:bench@localhost', 'lease expired', false, NULL)",
                    (BATCH,),
                ).fetchall()
                n = sum(int(r[0]) for r in rows)
                moved += n
                if n < BATCH:
                    break
            conn.execute("SELECT pg_stat_force_next_flush()")
            wal = conn.execute(
                "SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", (start,)
            ).fetchone()
            stats = conn.execute("SELECT wal_records, wal_fpi FROM pg_stat_wal").fetchone()
        assert wal is not None and stats is not None and moved
        return {
            "moved": moved,
            "wal_bytes_per_job": round(float(wal[0]) / moved, 1),
            "records_per_job": round(float(stats[0]) / moved, 2),
            "fpi_per_job": round(float(stats[1]) / moved, 3),
        }
    finally:
        ctx.drop_db(dsn)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.watcher_wal", description=__doc__.split("\n")[0]
    )
    p.add_argument("--dsn", help="server to measure (default: a temporary embedded server)")
    p.add_argument("--durable", action="store_true", help="the embedded server, fsync etc. on")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args(argv)
    with server_dsn(args.dsn, args.durable) as dsn:
        ctx = Ctx(dsn=dsn, sizes=QUICK, peers=())
        rows = []
        for name, create in variants().items():
            for i in range(args.runs):
                log(f"watcher_wal: {name}, run {i + 1}/{args.runs}")
                r = measure(ctx, create, args.jobs)
                rows.append([name, r["wal_bytes_per_job"], r["records_per_job"], r["fpi_per_job"]])
    print(
        table(
            f"watcher_wal: one pass over {args.jobs:,} expired leases after a CHECKPOINT",
            ["variant", "WAL bytes per job", "WAL records per job", "full-page images per job"],
            rows,
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
