"""`leasectl list` on a long history: N finished jobs (2% Failed) spread over 30 days, plus
live ones, in a database of its own; each typical filter run as `leasectl list` runs it
(``Operations.list_jobs``), its p50/max over several runs and its plan.

Usage: python -m bench.history DSN [--rows 10000000] [--runs 7] [--keep] [--reuse]
[--gin]. ``--keep`` leaves the database (``leasectl_history_bench``) for another run,
``--reuse`` measures a kept one without seeding again, ``--gin`` also measures the filters
with an (opt-in, not shipped) GIN index on payload.

The seed makes each kind of filter have a known, small answer: 1 owner in 200,000 rows
(``rare-host:1:abc``), 1 error text in 100,000 (``disk full on /var/spool``), one payload
per order number; 40 other owners and two other error texts share the rest.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import ClientCursor, conninfo, sql

from bench.common import fmt, log, percentile, table
from leasectl.core.errors import LeasectlError
from leasectl.core.filters import JobFilter, parse_filter
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.history import History, list_params

SCHEMA = "leasectl"
NAME = "leasectl_history_bench"
SPAN = "30 days"


def seed(dsn: str, rows: int) -> None:
    """``rows`` finished jobs, ids in finishing order over the last 30 days, in chunks of 1M
    (one statement each), then live ones; then VACUUM ANALYZE."""
    chunk = 1_000_000
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(1, rows + 1, chunk):
            end = min(rows, start + chunk - 1)
            t0 = time.monotonic()
            conn.execute(
                "INSERT INTO leasectl.jobs (queue, payload, status, attempts, max_attempts, "
                "lease_owner, heartbeat_at, last_error, created_at, updated_at, finished_at, "
                "run_at) "
                "SELECT (ARRAY['payments','emails','reports','webhooks'])[1 + i %% 4], "
                "jsonb_build_object('tenant', i %% 1000, 'order', i), "
                "CASE WHEN i %% 50 = 0 THEN 'Failed' ELSE 'Completed' END::leasectl.job_status, "
                "1, 5, "
                "CASE WHEN i %% 200000 = 7 THEN 'rare-host:1:abc' "
                "ELSE 'host-' || (i %% 40) || ':' || (1000 + i %% 7) || ':w' END, "
                "ts, "
                "CASE WHEN i %% 50 = 0 THEN CASE WHEN i %% 100000 = 0 "
                "THEN 'disk full on /var/spool' WHEN i %% 100 = 0 THEN 'HTTP 503 from upstream' "
                "ELSE 'timeout after 30s' END END, "
                "ts - interval '2 seconds', ts, ts, ts - interval '2 seconds' "
                "FROM generate_series(%(start)s::bigint, %(end)s::bigint) AS i, "
                "LATERAL (SELECT now() - interval '" + SPAN + "' * "
                "((%(rows)s - i)::float8 / %(rows)s) AS ts) AS t",
                {"start": start, "end": end, "rows": rows},
            )
            log(f"seeded {end:,} finished jobs ({time.monotonic() - t0:.1f}s for this chunk)")
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, priority, payload) "
            "SELECT (ARRAY['payments','emails','reports','webhooks'])[1 + i % 4], i % 3, "
            "jsonb_build_object('tenant', i % 1000) FROM generate_series(1, 20000) AS i"
        )
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until, "
            "heartbeat_at) SELECT (ARRAY['payments','emails','reports','webhooks'])[1 + i % 4], "
            "'Processing', 1, 'host-' || (i % 40) || ':1000:w', now() + interval '1 minute', "
            "now() FROM generate_series(1, 2000) AS i"
        )
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until, "
            "last_error) SELECT 'payments', 'Stuck', 1, 'host-1:1000:w', "
            "now() - interval '5 minutes', 'marked stuck by watcher' "
            "FROM generate_series(1, 500) AS i"
        )
        t0 = time.monotonic()
        conn.execute("VACUUM ANALYZE leasectl.jobs")
        log(f"VACUUM ANALYZE {time.monotonic() - t0:.1f}s")


def filters(rows: int) -> list[tuple[str, list[str]]]:
    """(label, `leasectl list` arguments) of the typical filters."""
    middle = rows // 2
    return [
        ("newest page (no filter)", []),
        ("--after (id range, deep page)", ["--after", str(middle)]),
        ("queue + state + since (Failed, 1h)", ["-q", "payments", "-s", "failed", "--since", "1h"]),
        ("state + since (Completed, 10m)", ["-s", "completed", "--since", "10m"]),
        (
            "finished, since 2d until 1d",
            ["-s", "completed", "-s", "failed", "--since", "2d", "--until", "1d"],
        ),
        (
            "finished, a day a month back",
            ["-s", "completed", "-s", "failed", "--since", "30d", "--until", "29d"],
        ),
        (
            "owner, finished, since 1d",
            ["--owner", "rare-host:1:abc", "-s", "completed", "--since", "1d"],
        ),
        ("owner alone (rare: 1 in 200k)", ["--owner", "rare-host:1:abc"]),
        ("error text alone (rare: 1 in 100k)", ["--error", "disk full"]),
        (
            "error text + Failed + since 3d",
            ["--error", "disk full", "-s", "failed", "--since", "3d"],
        ),
        ("payload alone (one order)", ["--payload", '{"order": 4321}']),
        (
            "payload + queue + since 1h",
            ["--payload", '{"tenant": 5}', "-q", "emails", "--since", "1h", "-s", "completed"],
        ),
        ("Stuck, one queue", ["-s", "stuck", "-q", "payments"]),
        ("Processing, one owner", ["-s", "processing", "--owner", "host-3:1000:w"]),
        ("Pending, one queue", ["-s", "pending", "-q", "reports"]),
        ("created since 1h (no state)", ["--since", "1h"]),
    ]


def measure(
    db: Database, label: str, args: list[str], runs: int, timeout: timedelta
) -> dict[str, Any]:
    flt, limit, after = parse_args(args)
    history = History(db)
    times: list[float] = []
    shown = -1
    timed_out = False
    for _ in range(runs):
        t0 = time.perf_counter()
        try:
            page = history.list_jobs(flt, limit=limit, after=after, timeout=timeout)
        except LeasectlError:
            timed_out = True
            times.append(time.perf_counter() - t0)
            break
        times.append(time.perf_counter() - t0)
        shown = len(page.jobs)
    plan = explain(db.dsn, flt, limit, after)
    return {
        "label": label,
        "args": " ".join(args),
        "rows": shown,
        "p50_ms": percentile(times, 50) * 1000,
        "max_ms": max(times) * 1000,
        "timed_out": timed_out,
        "plan": plan,
    }


def explain(dsn: str, flt: JobFilter, limit: int, after: int | None) -> str:
    """EXPLAIN ANALYZE of the listing with its values as literals: the custom plan the
    command gets (at most 60 s)."""
    query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ") + queries.get("jobs_list").render(
        SCHEMA
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '60s'")
        rows = ClientCursor(conn).execute(query, list_params(flt, limit=limit, after=after))
        return "\n".join(line for (line,) in rows.fetchall())


def parse_args(args: list[str]) -> tuple[JobFilter, int, int | None]:
    """The few options the bench uses, as the CLI parses them (through parse_filter)."""
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        opts.setdefault(args[i], []).append(args[i + 1])
        i += 2
    flt = parse_filter(
        states=opts.get("-s", []),
        queue=(opts.get("-q") or [None])[0],
        owner=(opts.get("--owner") or [None])[0],
        error=(opts.get("--error") or [None])[0],
        payload=(opts.get("--payload") or [None])[0],
        since=(opts.get("--since") or [None])[0],
        until=(opts.get("--until") or [None])[0],
    )
    after = int(opts["--after"][0]) if "--after" in opts else None
    return flt, 50, after


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--seed-only", action="store_true")
    p.add_argument("--gin", action="store_true")
    a = p.parse_args()
    dsn = conninfo.make_conninfo(a.dsn, dbname=NAME)
    if not a.reuse:
        with psycopg.connect(a.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(NAME))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(NAME)))
        with Database.connect(dsn, SCHEMA, check_schema=False) as db:
            db.migrate()
        t0 = time.monotonic()
        seed(dsn, a.rows)
        log(f"seeded in {time.monotonic() - t0:.0f}s")
    try:
        if a.seed_only:
            return
        timeout = timedelta(seconds=a.timeout)
        variants = [("", None)]
        if a.gin:
            variants.append((" + GIN(payload jsonb_path_ops)", "gin"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP INDEX IF EXISTS leasectl.jobs_payload_gin")  # (a kept database's)
        with Database.connect(dsn, SCHEMA) as db:
            with psycopg.connect(dsn) as conn:
                row = conn.execute(
                    "SELECT pg_size_pretty(pg_total_relation_size('leasectl.jobs'))"
                ).fetchone()
                size = row[0] if row else "?"
            for suffix, extra in variants:
                if extra == "gin":
                    t0 = time.monotonic()
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute(
                            "CREATE INDEX IF NOT EXISTS jobs_payload_gin ON leasectl.jobs "
                            "USING gin (payload jsonb_path_ops)"
                        )
                        row = conn.execute(
                            "SELECT pg_size_pretty(pg_relation_size('leasectl.jobs_payload_gin'))"
                        ).fetchone()
                    log(f"GIN index built in {time.monotonic() - t0:.0f}s, {row and row[0]}")
                results = [
                    measure(db, label, args, a.runs, timeout) for label, args in filters(a.rows)
                ]
                for r in results:
                    print(f"== {r['label']}{suffix}: leasectl list {r['args']}")
                    print(
                        f"   rows {r['rows']}, p50 {fmt(r['p50_ms'])} ms, max {fmt(r['max_ms'])} ms"
                        + (" (timed out)" if r["timed_out"] else "")
                    )
                    for line in r["plan"].splitlines():
                        print("   " + line)
                print(
                    table(
                        f"leasectl list, {a.rows:,} finished jobs ({size}){suffix}, "
                        f"timeout {a.timeout:g}s",
                        ["filter", "rows", "p50 ms", "max ms", "timed out"],
                        [
                            [r["label"], r["rows"], r["p50_ms"], r["max_ms"], r["timed_out"]]
                            for r in results
                        ],
                    )
                )
    finally:
        if not a.keep and not a.seed_only:
            with psycopg.connect(a.dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(NAME))
                )


if __name__ == "__main__":
    main()
