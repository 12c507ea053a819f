"""Worker processes per core against `--concurrency` per process: a drain of no-op jobs for each
pair, the workers ready before the jobs are seeded (as `drain`'s single-job mode), so that the
start-up of many Python processes is left out. For docs/operations.md.

    python -m bench.procs [--dsn DSN | --durable] [--per-core 1 2 4] [--concurrency 1 4 16]
                          [--jobs 20000] [--repeats 1]

Each figure is the steady rate (the middle 80% of the finishes, as `drain`), the median of
``--repeats`` runs, with the workers' and the server's CPU per job.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from bench.common import QUICK, Ctx, log, median, server_dsn, table
from bench.drain import drain_once, leasectl_system


def run(ctx: Ctx, per_core: list[int], concurrency: list[int], jobs: int, repeats: int) -> Any:
    cores = os.cpu_count() or 1
    system = leasectl_system()
    rows = []
    for k in per_core:
        for c in concurrency:
            runs = []
            for _ in range(repeats):
                log(f"procs: {k * cores} processes x concurrency {c}")
                runs.append(
                    drain_once(
                        ctx,
                        system,
                        k * cores * c,
                        jobs,
                        processes=k * cores,
                        per_process=c,
                        ready_first=True,
                    )
                )
            rate = median([r["jobs_per_s"] for r in runs])
            per_job = [
                [(r[key] or 0.0) / max(1, r["finished"]) * 1e6 for r in runs]
                for key in ("worker_cpu_s", "server_cpu_s")
            ]
            rows.append([k, k * cores, c, rate, *(round(median(v)) for v in per_job)])
    return cores, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--durable", action="store_true")
    p.add_argument("--per-core", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    with server_dsn(args.dsn, durable=args.durable) as dsn:
        ctx = Ctx(dsn=dsn, sizes=dataclasses.replace(QUICK, drain_timeout=120.0), peers=())
        cores, rows = run(ctx, args.per_core, args.concurrency, args.jobs, args.repeats)
    headers = ["per core", "processes", "concurrency", "jobs/s", "worker µs/job", "server µs/job"]
    title = f"procs: {args.jobs:,} no-op jobs, {cores} cores, median of {args.repeats}"
    print(table(title, headers, rows))


if __name__ == "__main__":
    main()
