"""A bulk requeue by filter: 100,000 Failed jobs through `leasectl requeue --state failed ...`.

    python -m bench.bulk DSN [--jobs 100000] [--history 500000] [--batch-sizes 500 1000 2000 5000]

One fresh database: an unrelated finished history (``--history`` Completed jobs, older ids,
other queue), then, for each batch size, ``--jobs`` Failed jobs of queue ``payments`` with the
error ``timeout after 30s`` (the previous size's jobs deleted first), VACUUM ANALYZE, and the
shipped command run as a subprocess: ``leasectl requeue --state failed --queue payments
--error timeout --batch-size N --json``. Prints, per batch size, the command's wall time, its
own elapsed time, the batches, and the median and longest guarded batch (each batch's guarded
statement: the only statement that takes row locks; from the command's ``batch_ms``), and
checks that every job moved and has its audit event. Writes ``benchmarks.bulk`` of
bench/results.json (with this run's machine block), leaving the other benchmarks as they are.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import psycopg
from psycopg import conninfo, sql

from bench.common import ROOT, SCHEMA, loadavg, log, table
from bench.run import RESULTS, machine
from leasectl.db.connection import Database

NAME = "leasectl_bench_bulk"
FILTER = ["--state", "failed", "--queue", "payments", "--error", "timeout"]
REASON = ["--reason", "bench", "--json"]


def batch_args(n: int) -> list[str]:
    return ["--batch-size", str(n)]


def seed_history(dsn: str, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, finished_at, created_at, "
            "last_error) SELECT 'reports', 'Completed', 1, now() - interval '1 s' * i, "
            "now() - interval '1 s' * i - interval '1 minute', NULL "
            "FROM generate_series(1, %s) AS i",
            (n,),
        )


def seed_failed(dsn: str, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM leasectl.job_events")
        conn.execute("DELETE FROM leasectl.jobs WHERE queue = 'payments'")
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, max_attempts, finished_at, "
            "last_error, lease_owner) SELECT 'payments', 'Failed', 5, 5, "
            "now() - interval '1 ms' * i, 'timeout after 30s (upstream ' || i %% 7 || ')', "
            "'host-' || i %% 5 FROM generate_series(1, %s) AS i",
            (n,),
        )
        conn.execute("VACUUM ANALYZE leasectl.jobs")
        conn.execute("VACUUM ANALYZE leasectl.job_events")


def run_cli(dsn: str, batch: int) -> tuple[float, dict[str, Any]]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", "requeue", *FILTER, *batch_args(batch), *REASON],
        env={"LEASECTL_DSN": dsn, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"exit {proc.returncode}: {proc.stderr}")
    return wall, json.loads(proc.stdout)


def check(dsn: str, jobs: int) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'Pending'), "
            "(SELECT count(*) FROM leasectl.job_events WHERE action = 'requeue') "
            "FROM leasectl.jobs WHERE queue = 'payments'"
        ).fetchone()
    assert row == (jobs, jobs), f"moved/audited {row}, expected {jobs}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--history", type=int, default=500_000)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[500, 1000, 2000, 5000])
    p.add_argument("--no-write", action="store_true", help="print only")
    a = p.parse_args()
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(NAME))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(NAME)))
    dsn = conninfo.make_conninfo(a.dsn, dbname=NAME)
    load = loadavg()
    runs: list[dict[str, Any]] = []
    try:
        with Database.connect(dsn, SCHEMA, check_schema=False) as db:
            db.migrate()
        seed_history(dsn, a.history)
        for batch in a.batch_sizes:
            seed_failed(dsn, a.jobs)
            wall, doc = run_cli(dsn, batch)
            check(dsn, a.jobs)
            run = {
                "batch_size": batch,
                "jobs": a.jobs,
                "wall_s": round(wall, 2),
                "elapsed_s": doc["elapsed_s"],
                "batches": doc["batches"],
                "batch_p50_ms": doc["batch_ms"]["p50"],
                "batch_max_ms": doc["batch_ms"]["max"],
            }
            log(f"batch {batch}: {run}")
            runs.append(run)
    finally:
        with psycopg.connect(a.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(NAME))
            )
    print(
        table(
            f"bulk requeue by filter: {a.jobs:,} Failed jobs beside {a.history:,} Completed "
            f"(load average at start {load})",
            ["batch size", "command s", "engine s", "batches", "p50 batch ms", "max batch ms"],
            [
                [
                    r["batch_size"],
                    r["wall_s"],
                    r["elapsed_s"],
                    r["batches"],
                    r["batch_p50_ms"],
                    r["batch_max_ms"],
                ]
                for r in runs
            ],
        )
    )
    if a.no_write:
        return
    results = json.loads(RESULTS.read_text())
    results.setdefault("benchmarks", {})["bulk"] = {
        "command": "python -m bench.bulk " + " ".join(sys.argv[2:]),
        "filter": " ".join(FILTER),
        "history_jobs": a.history,
        "machine": machine(a.dsn, False),
        "runs": runs,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
