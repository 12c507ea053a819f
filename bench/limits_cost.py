"""The cost of flow control (migration 17): the drain with no limit against the same drain with
a limit set high enough not to bind, and a throttled queue's CPU.

    python -m bench.limits_cost --dsn DSN [--jobs 100000] [--repeats 3]
                                [--single 1 4] [--single-jobs 20000] [--throttled-seconds 30]

Drain: ``bench.drain``'s leasectl run at c=50 (2 processes x 25), and single-job mode (N
processes x 1, ready first), each in a fresh database, the two variants taking turns (the order
alternating by round); the limit is ``--concurrency 100000 --rate 1000000/s``, so every claim
takes the limited queue's path (its row locked, live leases counted, the bucket refilled and
spent) and none is cut. Figures: median steady jobs/s, every run kept.

Throttled: 4 worker processes at concurrency 16 on a queue of 100,000 jobs limited to 10/s:
the workers' and the server's CPU over ``--throttled-seconds`` (a worker that polled would burn
it), and the starts counted.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import psycopg

from bench.common import (
    QUEUE,
    QUICK,
    Ctx,
    Proc,
    ServerCpu,
    Sizes,
    cpu_seconds,
    leasectl_init,
    log,
    median,
    seed_pending,
    stop,
)
from bench.drain import System, drain_once, leasectl_system

LIMIT_SQL = (
    "SELECT leasectl.queue_limit_set(%s, 100000, 1000000, NULL, 'bench', 'not binding', "
    "'leasectl_bench')"
)


def limited(system: System) -> System:
    """``system`` with the queue limited by a limit that never binds, set before the jobs."""

    def seed(dsn: str, jobs: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(LIMIT_SQL, (QUEUE,))
        seed_pending(dsn, jobs, QUEUE)

    def prepare(dsn: str, jobs: int) -> None:
        leasectl_init(dsn)
        seed(dsn, jobs)

    return System(
        **{**system.__dict__, "name": "leasectl_limited", "prepare": prepare, "seed": seed}
    )


def compare(
    ctx: Ctx, jobs: int, repeats: int, single: list[int], single_jobs: int
) -> dict[str, Any]:
    plain = leasectl_system()
    variants = {"no limit": plain, "limit not binding": limited(plain)}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {v: {} for v in variants}
    cases = [("c=50", 50, jobs, None)] + [(f"single {n}", n, single_jobs, n) for n in single]
    for i in range(repeats):
        for case, concurrency, n_jobs, processes in cases:
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in order:
                log(f"limits_cost: round {i + 1}/{repeats}, {case}, {name}")
                r = drain_once(
                    ctx,
                    variants[name],
                    concurrency,
                    n_jobs,
                    processes=processes,
                    ready_first=processes is not None,
                )
                runs[name].setdefault(case, []).append(r)
    summary = {}
    for case, *_ in cases:
        base = median([r["jobs_per_s"] for r in runs["no limit"][case]])
        lim = median([r["jobs_per_s"] for r in runs["limit not binding"][case]])
        summary[case] = {
            "no_limit_jobs_per_s": base,
            "limited_jobs_per_s": lim,
            "share": round(lim / base, 3) if base else None,
            "no_limit_runs": [r["jobs_per_s"] for r in runs["no limit"][case]],
            "limited_runs": [r["jobs_per_s"] for r in runs["limit not binding"][case]],
        }
    return {"summary": summary, "runs": runs}


def throttled(ctx: Ctx, seconds: float, rate: float = 10.0) -> dict[str, Any]:
    dsn = ctx.fresh_db("leasectl_throttled")
    leasectl_init(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT leasectl.queue_limit_set(%s, NULL, %s, NULL, 'bench', 'throttled', "
            "'leasectl_bench')",
            (QUEUE, rate),
        )
    seed_pending(dsn, 100_000, QUEUE)
    argv = leasectl_system().worker_argv
    procs = [Proc(argv(dsn, 16)) for _ in range(4)]
    server = ServerCpu(dsn)
    try:
        time.sleep(5)  # past start-up and the first bucket
        before = cpu_seconds([p.pid for p in procs])
        server.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            time.sleep(seconds)
            t1 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            started = conn.execute(
                "SELECT count(*) FROM leasectl.job_attempts WHERE started_at >= %s "
                "AND started_at < %s",
                (t0, t1),
            ).fetchone()[0]  # type: ignore[index]
        after = cpu_seconds([p.pid for p in procs])
        server_cpu = server.stop()
    finally:
        stop(procs)
        ctx.drop_db(dsn)
    span = (t1 - t0).total_seconds()
    worker_cpu = sum(after[p] - before.get(p, 0.0) for p in after)
    return {
        "rate_per_s": rate,
        "seconds": round(span, 1),
        "starts": started,
        "starts_per_s": round(started / span, 2),
        "workers": "4 processes x 16",
        "worker_cpu_s": round(worker_cpu, 2),
        "worker_cpu_share": round(worker_cpu / span, 4),
        "server_cpu_s": server_cpu,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--single", type=int, nargs="*", default=[1, 4])
    p.add_argument("--single-jobs", type=int, default=20_000)
    p.add_argument("--throttled-seconds", type=float, default=30.0)
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--output")
    a = p.parse_args()
    sizes = Sizes(**{**QUICK.__dict__, "drain_timeout": a.drain_timeout})
    ctx = Ctx(a.dsn, sizes, ())
    result = {
        "drain": compare(ctx, a.jobs, a.repeats, a.single, a.single_jobs),
        "throttled": throttled(ctx, a.throttled_seconds),
    }
    print(json.dumps(result["drain"]["summary"], indent=2))
    print(json.dumps(result["throttled"], indent=2))
    if a.output:
        with open(a.output, "w") as f:
            json.dump(result, f, indent=2, default=str)


if __name__ == "__main__":
    main()
