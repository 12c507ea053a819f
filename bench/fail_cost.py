"""What recording a failure costs the worker: ``WorkerStore.fail`` on leases already claimed.

A fresh database per round (migrated by whichever ``leasectl`` is first on ``sys.path``), 2,000
jobs claimed at once, then failed one by one (a traceback beside each error, as a handler's
exception has): the wall time of each call, the server's CPU per call (its backend's utime +
stime from /proc, the server on this machine) and the client's. Run it from the tree before a
change (``PYTHONPATH=/old/tree``) and after, alternated:

    python -m bench.fail_cost --dsn "host=127.0.0.1 user=postgres dbname=postgres" --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta

import psycopg
from psycopg import sql

from bench.common import leasectl_init, loadavg, log
from leasectl.db.connection import Database
from leasectl.db.work import WorkerStore

ERROR = "PSPError: 503 for invoice 12345 (upstream timeout after 30s)"
DETAIL = "Traceback (most recent call last):\n" + '  File "handler.py", line 12, in run\n' * 20


def server_ticks(dsn: str, dbname: str) -> int:
    """The CPU ticks (utime + stime, from /proc) of every backend on ``dbname`` but this one."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            pid
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchall()
        ]
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def one_round(admin: str, jobs: int) -> dict[str, float]:
    name = f"bench_fail_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(admin, dbname=name)
    try:
        leasectl_init(dsn)
        with Database.connect(dsn, "leasectl") as db:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO leasectl.jobs (queue, run_at) "
                    "SELECT 'q', now() - interval '1 minute' FROM generate_series(1, %s)",
                    (jobs,),
                )
            store = WorkerStore(db)
            leases = store.claim("q", "w-1", timedelta(minutes=10), limit=jobs)
            before = server_ticks(admin, name)
            cpu0 = time.process_time()
            started = time.perf_counter()
            walls = []
            for lease in leases:
                t = time.perf_counter()
                store.fail(lease, ERROR, retry_delay=timedelta(0), retry=False, detail=DETAIL)
                walls.append(time.perf_counter() - t)
            elapsed = time.perf_counter() - started
            client = time.process_time() - cpu0
            after = server_ticks(admin, name)
        n = len(leases)
        tick = os.sysconf("SC_CLK_TCK")
        return {
            "wall_us_p50": statistics.median(walls) * 1e6,
            "wall_us_mean": elapsed / n * 1e6,
            "server_cpu_us": (after - before) / tick / n * 1e6,
            "client_cpu_us": client / n * 1e6,
        }
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", default=os.environ.get("LEASECTL_TEST_DSN", ""))
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for i in range(args.rounds):
        load = loadavg()
        fig = one_round(args.dsn, args.jobs)
        log(f"round {i + 1}, load {load}")
        print(" ".join(f"{k}={v:.1f}" for k, v in fig.items()), flush=True)


if __name__ == "__main__":
    main()
