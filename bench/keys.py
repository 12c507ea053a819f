"""Concurrency keys: N no-op jobs spread over K concurrency keys, drained at total concurrency C
by `leasectl worker` processes, beside the same N jobs without keys (``python -m bench.keys``).

Each run is `drain`'s measurement (a fresh database, the steady rate of the middle 80% of the
finishes) with a seed of keyed jobs: each key's first job Pending, the others Waiting, as
enqueue leaves them (written in one statement with the triggers off: the producer is not what is
measured). With K keys at most K jobs can run at once, so K below C caps the rate by design;
every promotion is one trigger call in the completing statement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import psycopg

from bench.common import QUEUE, Ctx, Sizes, leasectl_init, log, server_dsn
from bench.drain import System, drain_once, leasectl_system


def seed_keyed(dsn: str, n: int, keys: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, run_at, concurrency_key, status) "
            "SELECT %(q)s, now() - interval '1 minute', 'k' || (i %% %(keys)s), "
            "CASE WHEN i < %(keys)s THEN 'Pending' ELSE 'Waiting' END::leasectl.job_status "
            "FROM generate_series(0, %(n)s - 1) AS i",
            {"q": QUEUE, "n": n, "keys": keys},
        )


def keyed_system(keys: int) -> System:
    base = leasectl_system()

    def prepare(dsn: str, jobs: int) -> None:
        leasectl_init(dsn)
        seed_keyed(dsn, jobs, keys)

    return dataclasses.replace(
        base,
        name=f"leasectl, {keys:,} keys",
        remaining_sql="SELECT count(*) FROM leasectl.jobs "
        "WHERE status IN ('Pending', 'Processing', 'Waiting')",
        prepare=prepare,
        init=None,
        seed=None,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.keys", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", help="server to benchmark (default: a temporary embedded server)")
    p.add_argument("--jobs", type=int, default=60_000)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000, 50])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--output", type=Path)
    args = p.parse_args(argv)
    sizes = dataclasses.replace(Sizes(), drain_timeout=args.timeout)
    runs: list[dict[str, Any]] = []
    with server_dsn(args.dsn, False) as dsn:
        ctx = Ctx(dsn=dsn, sizes=sizes, peers=())
        for _ in range(args.repeats):
            for system in [leasectl_system()] + [keyed_system(k) for k in args.keys]:
                log(f"keys: {system.name}, concurrency {args.concurrency}")
                result = drain_once(ctx, system, args.concurrency, args.jobs)
                log(f"  -> {result['jobs_per_s']:,} jobs/s ({result['finished']:,} finished)")
                runs.append({"system": system.name, **result})
    doc = json.dumps({"jobs": args.jobs, "concurrency": args.concurrency, "runs": runs}, indent=1)
    if args.output:
        args.output.write_text(doc)
    else:
        print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
