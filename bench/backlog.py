"""Console refresh and `leasectl status` against a growing Pending backlog.

One scratch database, grown in steps to each size of Pending jobs (``--sizes``, due now, over
three queues and three priorities, beside 2,000 Processing leases and 500 expired ones, as
bench/console.py seeds them), VACUUM ANALYZEd after each step. At each size: a full console
refresh (``Panels.snapshot(None, 100)``, the console's one transaction) p50 and max over
``--runs`` calls, the same filtered by an owner prefix (``owner="w-1"``; one Pending job in a
hundred was held by one of 20 owners before), and ``Operations.status()`` (every statement
`leasectl status` runs) p50 and max. Whichever ``leasectl`` is first on ``sys.path`` is
measured: run it once from the tree before a change (``PYTHONPATH=/path/to/old/tree``) and once
after, on the same database.

    python -m bench.backlog --dsn postgresql://postgres@127.0.0.1:5432/postgres \
        --sizes 10000,1000000,10000000 --out /tmp/backlog.json

`python -m bench.run` runs it too (``backlog``, at ``--backlog-sizes``, in a fresh database of its
own). The figures are in BENCHMARKS.md ("console, status and the metrics scrape"; "backlog").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import Ctx, leasectl_init, log, percentile, table
from leasectl.console.panels import Panels
from leasectl.db.connection import Database
from leasectl.db.console import ConsoleReads
from leasectl.db.operations import Operations

QUEUES = ("payments", "emails", "reports")


def grow(dsn: str, have: int, want: int) -> None:
    """Pending jobs ``have + 1 .. want``, due (run_at in the past), 3 queues x 3 priorities;
    one in a hundred was held before (requeued: ``lease_owner`` kept) by one of 20 owners."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, priority, run_at, lease_owner) "
            "SELECT (ARRAY['payments','emails','reports'])[1 + i %% 3], i %% 3, "
            "now() - interval '1 millisecond' * i, "
            "CASE WHEN i %% 100 = 0 THEN 'w-' || (i / 100 %% 20) END "
            "FROM generate_series(%s::bigint, %s::bigint) AS i",
            (have + 1, want),
        )
        conn.execute("VACUUM ANALYZE leasectl.jobs")


def leases(dsn: str, processing: int = 2000, expired: int = 500) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until, "
            "heartbeat_at) SELECT (ARRAY['payments','emails','reports'])[1 + i %% 3], "
            "'Processing', 1, 'w-' || (i %% 20), "
            "now() + CASE WHEN i <= %s THEN - interval '1 minute' ELSE interval '1 minute' END, "
            "now() FROM generate_series(1, %s) AS i",
            (expired, processing + expired),
        )


def timed(fn: Any, runs: int) -> dict[str, float]:
    for _ in range(3):
        fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(percentile(out, 50), 2), "max_ms": round(max(out), 2)}


def measure(dsn: str, runs: int) -> dict[str, Any]:
    with Database.connect(dsn, "leasectl", max_size=2) as db:
        panels = Panels(ConsoleReads(db))
        snap_fn = functools.partial(panels.snapshot, None, 100, timeout=timedelta(minutes=1))
        refresh = timed(snap_fn, runs)
        # Filtered by an owner prefix: "w-1" is w-1 and w-10 .. w-19, as an on-call engineer
        # narrows the console to a silent host's workers.
        owner_fn = functools.partial(snap_fn, owner="w-1")
        refresh_owner = timed(owner_fn, runs)
        ops = Operations(db)
        status = timed(ops.status, max(5, runs // 4))
        snap = snap_fn()
        counts = snap.counts
        shown = {
            "pending": counts.pending,
            "pending_capped": getattr(counts, "pending_capped", False),
            "due": counts.due,
        }
    return {"refresh": refresh, "refresh_owner": refresh_owner, "status": status, "counts": shown}


def measure_sizes(dsn: str, sizes: Sequence[int], runs: int) -> dict[str, Any]:
    """Grow the database's Pending backlog to each of ``sizes`` in turn (it never shrinks) and
    measure at each: ``{"sizes": {n: figures}, "ratio": ...}``."""
    out: dict[str, Any] = {"sizes": {}}
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM leasectl.jobs WHERE status = 'Pending'").fetchone()
        have = int(row[0]) if row else 0
    for want in sizes:
        if want > have:
            log(f"backlog: growing to {want:,} Pending")
            started = time.perf_counter()
            grow(dsn, have, want)
            log(f"  seeded in {time.perf_counter() - started:.0f} s")
            have = want
        entry = measure(dsn, runs)
        entry["loadavg"] = list(os.getloadavg())
        out["sizes"][str(want)] = entry
        log(f"  {want:,}: {json.dumps(entry)}")
    done = sorted(int(k) for k in out["sizes"])
    if len(done) >= 2:
        lo, hi = out["sizes"][str(done[0])], out["sizes"][str(done[-1])]
        out["ratio"] = {
            "of": f"{done[-1]:,} / {done[0]:,}",
            "refresh_p50": round(hi["refresh"]["p50_ms"] / lo["refresh"]["p50_ms"], 2),
        }
    return out


def run(ctx: Ctx) -> dict[str, Any]:
    """``bench.run``'s backlog: one fresh database, 2,000 Processing and 500 expired leases,
    grown to each of ``backlog_sizes`` Pending jobs, ``console_runs`` refreshes at each."""
    dsn = ctx.fresh_db("backlog")
    try:
        leasectl_init(dsn)
        leases(dsn)
        fig = measure_sizes(dsn, ctx.sizes.backlog_sizes, ctx.sizes.console_runs)
    finally:
        ctx.drop_db(dsn)
    fig["runs"] = ctx.sizes.console_runs
    return fig


def render(fig: dict[str, Any]) -> str:
    rows = []
    for n, e in sorted(fig["sizes"].items(), key=lambda kv: int(kv[0])):
        shown = e["counts"]
        rows.append(
            [
                f"{int(n):,}",
                f"{e['refresh']['p50_ms']:.1f} / {e['refresh']['max_ms']:.1f}",
                f"{e['refresh_owner']['p50_ms']:.1f} / {e['refresh_owner']['max_ms']:.1f}",
                f"{e['status']['p50_ms']:.1f} / {e['status']['max_ms']:.1f}",
                f"{shown['pending']:,}{'+' if shown['pending_capped'] else ''}",
            ]
        )
    text = table(
        f"backlog: a console refresh and `leasectl status` by Pending jobs, {fig['runs']} "
        "refreshes, ms",
        ["Pending", "refresh p50 / max", "owner-filtered p50 / max", "status p50 / max", "shown"],
        rows,
    )
    if "ratio" in fig:
        text += f"\nratio {fig['ratio']['of']} (refresh p50): {fig['ratio']['refresh_p50']}\n"
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", default=os.environ.get("LEASECTL_TEST_DSN", ""))
    ap.add_argument("--sizes", default="10000,1000000,10000000")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--db", default=f"bench_backlog_{os.getpid()}")
    ap.add_argument("--keep", action="store_true", help="keep the database (and reuse it)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dsn = make_conninfo(args.dsn, dbname=args.db)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.db,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(args.db)))
    result: dict[str, Any] = {"loadavg_before": list(os.getloadavg())}
    try:
        if not exists:
            leasectl_init(dsn)
            leases(dsn)
        sizes = [int(s) for s in args.sizes.split(",")]
        result.update(measure_sizes(dsn, sizes, args.runs))
    finally:
        if not args.keep:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(str(conninfo_to_dict(dsn)["dbname"]))
                    )
                )
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
