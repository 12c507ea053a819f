"""`leasectl errors`' read on a large history: the SQL alone and `Incident.errors` end to end.

One scratch database (``--db``, kept with ``--keep`` and reused when it is there), seeded once:
``--finished`` finished jobs, one attempt each, their end times a quarter of a second apart
going back from now (10M: 29 days), one in fifty failed, and every one of the last
``--burst`` failed (an incident: 40,000 is the last 2.8 hours, 14,400 of them in the last hour,
more than the read's cap of 10,000), beside ``--pending`` Pending jobs; five queues. A failure's
error is a handler's ``Class: message`` with a traceback of about 3 kB beside it, or, one in
four, a multi-line error of about 3,000 characters without one (a job whose values could not be
loaded). VACUUM ANALYZEd once.

At each window (1h, 24h) and filter (every queue, one queue), ``--runs`` reads: the
``errors_failures`` statement's server time (EXPLAIN (ANALYZE, TIMING OFF)'s execution time:
no per-node clock) p50 and max,
and ``Incident.errors`` end to end (its transaction and the grouping in Python) p50 and max;
with the plan of the last (its buffers). Whichever ``leasectl`` is first on
``sys.path`` is measured: run it from the tree before a change (``PYTHONPATH=/old/tree``) and
after, on the same database.

``--stamp`` stores the seeded failures' kinds and queues as a worker of migration 29 or later
writes them (seeded rows have none: without it the read takes the path of failures recorded
before that migration). ``--no-migrate`` measures an older leasectl on a database this one
migrated (main's ``job_attempts_failed_idx`` must then be made again beside the new ones).

    python -m bench.errors --dsn "host=127.0.0.1 user=postgres dbname=postgres" --keep --stamp
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import ClientCursor, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import leasectl_init, loadavg, log, percentile, table
from leasectl.core import errorgroups
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.incident import Incident

QUEUES = ("payments", "emails", "reports", "exports", "webhooks")

_SEED_JOBS = """
INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at, created_at)
SELECT (ARRAY['payments','emails','reports','exports','webhooks'])[1 + i %% 5],
       CASE WHEN i %% 50 = 0 OR i <= %(burst)s THEN 'Failed' ELSE 'Completed' END
           ::leasectl.job_status,
       1, 'w-' || (i %% 20), now() - interval '250 milliseconds' * i,
       now() - interval '250 milliseconds' * i - interval '1 second'
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS i
"""

# One attempt per finished job, in the order the jobs were made (the table's physical order is
# the attempts' start order, as a worker writes them).
_SEED_ATTEMPTS = """
INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, ended_at, outcome,
                                   error, error_detail)
SELECT j.id, 1, j.lease_owner, j.finished_at - interval '1 second', j.finished_at,
       CASE WHEN j.status = 'Failed' THEN 'failed' ELSE 'completed' END
           ::leasectl.attempt_outcome,
       CASE WHEN j.status <> 'Failed' THEN NULL
            WHEN j.id %% 4 = 0 THEN 'could not load job ' || j.id || ': bad payload'
                 || repeat(E'\n  at ' || md5(j.id::text) || md5((j.id + 1)::text), 40)
            ELSE (ARRAY['PSPError', 'TimeoutError', 'app.errors.Throttled'])[1 + j.id %% 3]
                 || ': 503 for invoice ' || j.id END,
       CASE WHEN j.status = 'Failed' AND j.id %% 4 <> 0
            THEN repeat('  File "handler.py", line ' || j.id || E', in run\\n    '
                        || md5(j.id::text) || E'\\n', 40) END
FROM leasectl.jobs AS j
WHERE j.id BETWEEN %(lo)s AND %(hi)s AND j.status IN ('Completed', 'Failed')
"""


def seed(dsn: str, finished: int, burst: int, pending: int) -> None:
    """The history described above, in batches of a million jobs."""
    leasectl_init(dsn)
    step = 1_000_000
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The newest first, so that ids grow backwards in time like the attempts' order: the
        # ids of the jobs finished last are the highest, as a live queue makes them.
        for lo in range(1, finished + 1, step):
            hi = min(finished, lo + step - 1)
            conn.execute(
                _SEED_JOBS,
                {"lo": finished - hi + 1, "hi": finished - lo + 1, "burst": burst},
            )
            log(f"  jobs {hi:,} of {finished:,}")
        for lo in range(1, finished + 1, step):
            conn.execute(_SEED_ATTEMPTS, {"lo": lo, "hi": lo + step - 1})
            log(f"  attempts up to {lo + step - 1:,}")
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, run_at) "
            "SELECT (ARRAY['payments','emails','reports','exports','webhooks'])[1 + i %% 5], "
            "now() - interval '1 millisecond' * i FROM generate_series(1, %s) AS i",
            (pending,),
        )
        log("  pending")
        for table_name in ("jobs", "job_attempts"):
            conn.execute(sql.SQL("VACUUM ANALYZE leasectl.{}").format(sql.Identifier(table_name)))
        log("  vacuumed")


# The kinds and queues job_fail writes since migration 29, for the failures seeded above (their
# errors' shapes are known: `stamp` checks a sample against core/errorgroups.py).
_STAMP = """
UPDATE leasectl.job_attempts AS a
SET queue = j.queue,
    error_kind = CASE WHEN a.error_detail IS NOT NULL THEN split_part(a.error, ':', 1)
                      ELSE 'could not load job <n>: bad payload' END
FROM leasectl.jobs AS j
WHERE j.id = a.job_id AND a.outcome = 'failed' AND a.error_kind IS NULL
  AND a.job_id BETWEEN %(lo)s AND %(hi)s
"""


def stamp(dsn: str, finished: int) -> None:
    """The seeded failures as a worker of this version stores them: with their kind and queue."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(1, finished + 1, 1_000_000):
            conn.execute(_STAMP, {"lo": lo, "hi": lo + 999_999})
        sample = conn.execute(
            "SELECT error, error_detail IS NOT NULL, error_kind FROM leasectl.job_attempts "
            "WHERE outcome = 'failed' ORDER BY job_id DESC LIMIT 1000"
        ).fetchall()
        for error, traced, kind in sample:
            assert errorgroups.attempt_kind(error, traced=traced) == kind, (error, kind)
        conn.execute("VACUUM ANALYZE leasectl.job_attempts")


def explain(dsn: str, params: dict[str, Any]) -> tuple[float, str]:
    """The statement's execution time (ms) and plan, with buffers (the statement of this tree, or
    of the older one first on ``sys.path``; each takes the parameters it names)."""
    query = queries.get("errors_failures").render("leasectl")
    with psycopg.connect(dsn) as conn, conn.transaction(force_rollback=True):
        cur = ClientCursor(conn)
        rows = cur.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + query.as_bytes(conn), params
        ).fetchall()
    text = "\n".join(line for (line,) in rows)
    ms = float(text.rsplit("Execution Time: ", 1)[1].split(" ms", 1)[0])
    return ms, text


def server_cpu_ms(dsn: str, params: dict[str, Any], runs: int) -> float:
    """The server's CPU time per execution of the statement (its backend's utime + stime from
    /proc, over ``runs`` executions on one connection): what the read costs whatever else the
    machine runs (the server must be on this machine)."""
    query = queries.get("errors_failures").render("leasectl")
    with psycopg.connect(dsn) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]

        def ticks() -> int:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime, stime

        conn.execute(query, params).fetchall()  # (planned once, as a session would)
        before = ticks()
        for _ in range(runs):
            conn.execute(query, params).fetchall()
        spent = ticks() - before
    return spent / os.sysconf("SC_CLK_TCK") * 1000 / runs


def measure(dsn: str, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": loadavg(), "cases": {}}
    # (No schema check: an older leasectl measured on a database this one migrated.)
    with Database.connect(dsn, "leasectl", check_schema=False) as db:
        incident = Incident(db)
        for since in (timedelta(hours=1), timedelta(hours=24)):
            for queue in (None, "payments"):
                params = {
                    "since": since,
                    "queue": queue,
                    "scan": errorgroups.SCAN_CAP,
                    "chars": errorgroups.KIND_CHARS,
                }
                sql_ms, plans = [], []
                for _ in range(runs):
                    ms, text = explain(dsn, params)
                    sql_ms.append(ms)
                    plans.append(text)
                e2e = []
                for _ in range(runs):
                    started = time.perf_counter()
                    report = incident.errors(since=since, queue=queue)
                    e2e.append((time.perf_counter() - started) * 1000)
                key = f"{int(since.total_seconds() // 3600)}h {queue or 'all'}"
                cpu = server_cpu_ms(dsn, params, runs * 4)
                out["cases"][key] = {
                    "sql_p50_ms": percentile(sql_ms, 50),
                    "sql_max_ms": max(sql_ms),
                    "sql_min_ms": min(sql_ms),
                    "buffers": next(
                        (line.strip() for line in plans[-1].splitlines() if "Buffers:" in line), ""
                    ),
                    "errors_p50_ms": percentile(e2e, 50),
                    "errors_max_ms": max(e2e),
                    "errors_min_ms": min(e2e),
                    "server_cpu_ms": cpu,
                    "groups": len(report.groups),
                    "counted": sum(g.count for g in report.groups),
                    "truncated": report.truncated,
                    "plan": plans[-1],
                }
                log(f"  {key}: sql p50 {percentile(sql_ms, 50):.1f} ms")
    out["load_after"] = loadavg()
    return out


def render(fig: dict[str, Any]) -> str:
    rows = [
        [
            key,
            f"{c['sql_min_ms']:.1f} / {c['sql_p50_ms']:.1f} / {c['sql_max_ms']:.1f}",
            c["buffers"].replace("Buffers: ", ""),
            f"{c['server_cpu_ms']:.1f}",
            f"{c['errors_min_ms']:.1f} / {c['errors_p50_ms']:.1f} / {c['errors_max_ms']:.1f}",
            f"{c['counted']:,}{' (cap)' if c['truncated'] else ''}",
            str(c["groups"]),
        ]
        for key, c in fig["cases"].items()
    ]
    return table(
        f"errors: the read on a large history, load {fig['load_before']} -> {fig['load_after']}",
        [
            "window",
            "SQL min / p50 / max ms",
            "SQL buffers",
            "server CPU ms / read",
            "Incident.errors min / p50 / max ms",
            "counted",
            "groups",
        ],
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", default=os.environ.get("LEASECTL_TEST_DSN", ""))
    ap.add_argument("--db", default="bench_errors")
    ap.add_argument("--keep", action="store_true", help="keep the database (and reuse it)")
    ap.add_argument("--finished", type=int, default=10_000_000)
    ap.add_argument("--burst", type=int, default=40_000)
    ap.add_argument("--pending", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed-only", action="store_true")
    ap.add_argument("--no-migrate", action="store_true", help="measure an older leasectl")
    ap.add_argument(
        "--stamp",
        action="store_true",
        help="store the seeded failures' kinds and queues (as job_fail does since migration 29)",
    )
    ap.add_argument("--plans", action="store_true", help="print the last plan of each case")
    ap.add_argument("--out")
    args = ap.parse_args()
    dsn = make_conninfo(args.dsn, dbname=args.db)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        there = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.db,)).fetchone()
        if not there:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(args.db)))
    try:
        if not there:
            log(f"seeding {conninfo_to_dict(dsn)['dbname']}")
            seed(dsn, args.finished, args.burst, args.pending)
        elif not args.no_migrate:
            leasectl_init(dsn)  # this tree's migrations, if the database predates them
        if args.stamp:
            log("stamping kinds")
            stamp(dsn, args.finished)
        if args.seed_only:
            return
        fig = measure(dsn, args.runs)
        print(render(fig))
        if args.plans:
            for key, c in fig["cases"].items():
                print(f"\n-- {key}\n{c['plan']}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump(fig, f, indent=2, default=str)
    finally:
        if not args.keep:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(args.db)
                    )
                )


if __name__ == "__main__":
    main()
