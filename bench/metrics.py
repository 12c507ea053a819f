"""The metrics exporter at scale: one scrape's reads, and a real exporter's HTTP scrape, at 10M
finished jobs and then with 2M pending jobs added (plus, as in bench/console.py, 2k processing
and 500 expired leases, 20 lease owners, 3 queues).

Usage: python -m bench.metrics [DSN] [--finished 10000000] [--pending 2000000] [--runs 50]
Without a DSN it starts a temporary embedded server. Prints a table and a JSON line of figures.
Each phase measures (1) ``MetricsReads.read`` (the scrape's one round trip), (2) an HTTP GET of
/metrics from `leasectl metrics` running as a subprocess, and (3) each query alone (p50).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import conninfo, sql

from bench.common import leasectl_init, loadavg, log, percentile, server_dsn
from bench.explain import seed
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.metrics import MetricsReads

QUERIES = (
    "metrics_pending",
    "metrics_stuck",
    "metrics_waiting",
    "metrics_leases",
    "status_owners",
    "status_finished_estimate",
    "console_paused",
    "metrics_counters",
    "status_limits",
)


def timed(fn: Any, runs: int) -> list[float]:
    for _ in range(3):
        fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def query_p50(dsn: str, runs: int) -> dict[str, float]:
    """Each statement of a scrape alone, with the exporter's parameters and settings."""
    with Database.connect(dsn, "leasectl", max_size=1) as db:
        reads = MetricsReads(db)
        params: dict[str, Any] = {
            **reads.limits,
            **reads.owner_params,
            "budget": reads.budget,
            "floor": reads.floor,
            "risk_window": reads.risk_window,
            "schema": "leasectl",
            "queue": None,
        }
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in queries.CONSOLE_SETTINGS.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        for name in QUERIES:
            statement = queries.get(name).render("leasectl")
            out[name] = round(
                percentile(timed(lambda s=statement: conn.execute(s, params).fetchall(), runs), 50),
                2,
            )
    return out


def scrape_times(dsn: str, runs: int) -> list[float]:
    env = {**os.environ, "LEASECTL_DSN": dsn}
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "metrics", "--listen", "127.0.0.1:0", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["listen"]

        def get() -> None:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = r.read().decode()
            assert "leasectl_up 1.0" in body, body[:500]

        return timed(get, runs)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def measure(dsn: str, runs: int, label: str) -> dict[str, Any]:
    log(f"{label}: measuring (load {loadavg()})")
    with Database.connect(dsn, "leasectl", max_size=1) as db:
        reads = MetricsReads(db)
        rows = reads.read(timedelta(seconds=30))
        read_ms = timed(lambda: reads.read(timedelta(seconds=30)), runs)
    http_ms = scrape_times(dsn, runs)
    return {
        "label": label,
        "loadavg": loadavg(),
        "read_p50_ms": round(percentile(read_ms, 50), 2),
        "read_p99_ms": round(percentile(read_ms, 99), 2),
        "http_p50_ms": round(percentile(http_ms, 50), 2),
        "http_p99_ms": round(percentile(http_ms, 99), 2),
        "queries_p50_ms": query_p50(dsn, runs),
        "pending": {p.queue: str(p.jobs) for p in rows.pending},
        "truncated": sorted(rows.truncated),
    }


def seed_limits(dsn: str) -> None:
    """The 3 queues limited (flow control): a cap and a rate, a rate, a cap; their live leases
    are what the scrape counts (the seed's Processing jobs)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.queue_limits (queue, concurrency, rate, burst, set_by, reason) "
            "VALUES ('payments', 2000, 500, 1000, 'bench', 'bench'), "
            "('emails', NULL, 50, NULL, 'bench', 'bench'), "
            "('reports', 100, NULL, NULL, 'bench', 'bench')"
        )


def seed_counters(dsn: str) -> None:
    """Counters as a busy fleet leaves them: every counter and action of the 3 queues in the
    totals, and 5,000 deltas not folded yet (a second's counting statements at 5,000 a second:
    the exporter folds every second)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.counter_totals (counter, action, queue, value) "
            "SELECT c.counter, c.action, q, 1000000 "
            "FROM unnest(ARRAY['payments', 'emails', 'reports']) AS q, (VALUES "
            "('completed', ''), ('failed', ''), ('retried', ''), ('watcher', 'requeue'), "
            "('watcher', 'mark_stuck'), ('watcher', 'fail'), ('operator', 'requeue'), "
            "('operator', 'requeue_forced'), ('operator', 'mark_stuck'), "
            "('operator', 'mark_stuck_forced'), ('operator', 'cancel'), ('operator', 'delete'), "
            "('operator', 'pause'), ('operator', 'resume')) AS c(counter, action)"
        )
        conn.execute(
            "INSERT INTO leasectl.counter_deltas (counter, action, queue, delta) "
            "SELECT (ARRAY['completed', 'failed', 'retried'])[1 + i % 3], '', "
            "(ARRAY['payments', 'emails', 'reports'])[1 + i % 3], 1 + i % 10 "
            "FROM generate_series(1, 5000) AS i"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn", nargs="?")
    parser.add_argument("--durable", action="store_true", help="embedded server: fsync etc. on")
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--pending", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with server_dsn(args.dsn, args.durable) as admin:
        name = f"bench_metrics_{os.getpid()}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        dsn = conninfo.make_conninfo(admin, dbname=name)
        figures: dict[str, Any] = {"loadavg_at_start": loadavg(), "phases": []}
        try:
            with psycopg.connect(dsn) as conn:
                figures["server"] = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
            leasectl_init(dsn)
            started = time.perf_counter()
            log(
                f"seeding {args.finished:,} finished + 20,000 pending, 2,000 processing, "
                "500 expired"
            )
            seed(dsn, args.finished, 20_000, 2_000, 500)
            seed_counters(dsn)
            seed_limits(dsn)
            figures["seed_s"] = round(time.perf_counter() - started, 1)
            figures["phases"].append(measure(dsn, args.runs, f"{args.finished:,} finished"))
            log(f"adding {args.pending:,} pending (3 queues x 3 priorities), ANALYZE only")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO leasectl.jobs (queue, priority, run_at) "
                    "SELECT (ARRAY['payments','emails','reports'])[1 + i %% 3], i %% 3, "
                    "now() - interval '1 millisecond' * i FROM generate_series(1, %s) AS i",
                    (args.pending,),
                )
                conn.execute("ANALYZE leasectl.jobs")
            label = f"+{args.pending:,} pending"
            figures["phases"].append(measure(dsn, args.runs, f"{label}, not vacuumed"))
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE leasectl.jobs")
            figures["phases"].append(measure(dsn, args.runs, f"{label}, vacuumed"))
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    figures["loadavg_at_end"] = loadavg()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
