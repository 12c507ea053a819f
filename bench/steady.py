"""Steady state: a producer at 50% and 90% of leasectl's drain peak, for a fixed time each.

The producer enqueues through ``Operations.enqueue`` (one statement per 20 ms tick, the jobs due by
then). Workers run with the concurrency at which leasectl peaked in `drain`. Figures:

* enqueue -> start latency, p50/p99: ``job_attempts.started_at - jobs.created_at`` of first
  attempts (both the database's clock), for jobs enqueued after the first 10% of the run;
* dead tuples: row versions made dead per 1,000 jobs (``n_tup_upd + n_tup_del``, and the HOT
  share of the updates) and the standing ``n_dead_tup`` (median and max of the samples);
* table and index sizes of ``jobs`` and ``job_attempts``, sampled every 5 s.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import psycopg

from bench.common import Ctx, Proc, leasectl_init, log, median, stop, table
from bench.drain import drain_once, leasectl_system, split
from leasectl.db.connection import Database
from leasectl.db.operations import Operations

TICK_S = 0.02
SAMPLE_S = 5.0
WARMUP = 0.1
BUCKET_S = 10

STATS_SQL = """
SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count,
       pg_relation_size(relid) AS table_bytes, pg_indexes_size(relid) AS index_bytes
FROM pg_stat_user_tables
WHERE schemaname = 'leasectl' AND relname IN ('jobs', 'job_attempts')
"""


def peak(ctx: Ctx) -> tuple[float, int]:
    """leasectl's best drain median and its concurrency: from this run, else a short probe."""
    drain = ctx.results.get("drain", {}).get("systems", {}).get("leasectl", {}).get("runs", {})
    best = max(
        ((r["median_jobs_per_s"], int(c)) for c, r in drain.items()),
        default=None,
    )
    if best is not None:
        return best
    c = max(ctx.sizes.drain_concurrency)
    log(f"steady: no drain figures in this run; probing leasectl's drain at concurrency {c}")
    r = drain_once(ctx, leasectl_system(), c, min(ctx.sizes.drain_jobs, 20_000))
    return r["jobs_per_s"], c


class Sampler:
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.samples: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.t0 = time.perf_counter()

    def sample(self) -> None:
        rows = self.conn.execute(STATS_SQL).fetchall()
        entry: dict[str, Any] = {"t": round(time.perf_counter() - self.t0, 1)}
        for name, live, dead, upd, hot, dele, av, tb, ib in rows:
            entry[name] = {
                "live": live,
                "dead": dead,
                "upd": upd,
                "hot_upd": hot,
                "del": dele,
                "autovacuums": av,
                "table_bytes": tb,
                "index_bytes": ib,
            }
        self.samples.append(entry)

    def _loop(self) -> None:
        while not self.stopping.wait(SAMPLE_S):
            self.sample()

    def __enter__(self) -> Sampler:
        self.sample()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.sample()
        self.conn.close()


def produce(store: Operations, rate: float, seconds: float) -> int:
    """Enqueue at `rate` jobs/s for `seconds`; returns how many were enqueued."""
    start = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            return sent
        due = int(rate * (now - start)) - sent
        if due > 0:
            store.enqueue([{}] * due)
            sent += due
        time.sleep(max(0.0, TICK_S - (time.perf_counter() - now)))


def one(ctx: Ctx, rate: float, concurrency: int, seconds: int) -> dict[str, Any]:
    dsn = ctx.fresh_db("steady")
    procs: list[Proc] = []
    try:
        leasectl_init(dsn)
        nproc, per = split(concurrency)
        system = leasectl_system()
        with Database.connect(dsn, "leasectl", max_size=2) as db, Sampler(dsn) as sampler:
            store = Operations(db)
            procs = [Proc(system.worker_argv(dsn, per)) for _ in range(nproc)]
            time.sleep(2.0)  # workers up (they then wait on an empty queue)
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute("SELECT now()").fetchone()
            t_start = row[0] if row else None
            sent = produce(store, rate, seconds)
            deadline = time.perf_counter() + 30
            with psycopg.connect(dsn, autocommit=True) as conn:
                while time.perf_counter() < deadline:
                    row = conn.execute(
                        "SELECT count(*) FROM leasectl.jobs "
                        "WHERE status IN ('Pending', 'Processing')"
                    ).fetchone()
                    if row and row[0] == 0:
                        break
                    time.sleep(0.2)
                backlog = int(row[0]) if row else -1
                lat = conn.execute(
                    "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP "
                    "(ORDER BY extract(epoch FROM a.started_at - j.created_at)), count(*) "
                    "FROM leasectl.jobs AS j JOIN leasectl.job_attempts AS a "
                    "ON a.job_id = j.id AND a.attempt = 1 "
                    "WHERE j.created_at >= %s + %s * interval '1 second'",
                    (t_start, seconds * WARMUP),
                ).fetchone()
                buckets = conn.execute(
                    "SELECT floor(extract(epoch FROM j.created_at - %s) / %s)::int AS b,"
                    " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
                    " (ORDER BY extract(epoch FROM a.started_at - j.created_at)), count(*)"
                    " FROM leasectl.jobs AS j JOIN leasectl.job_attempts AS a"
                    " ON a.job_id = j.id AND a.attempt = 1 GROUP BY 1 ORDER BY 1",
                    (t_start, BUCKET_S),
                ).fetchall()
        assert lat is not None
        (p50, p99), measured = lat[0] or [math.nan, math.nan], lat[1]
        first, last = sampler.samples[0], sampler.samples[-1]
        fig: dict[str, Any] = {
            "target_jobs_per_s": round(rate, 1),
            "achieved_enqueue_per_s": round(sent / seconds, 1),
            "seconds": seconds,
            "concurrency": concurrency,
            "jobs": sent,
            "backlog_after_30s": backlog,
            "latency_jobs": measured,
            "latency_p50_ms": round(p50 * 1000, 1),
            "latency_p99_ms": round(p99 * 1000, 1),
            "latency_by_10s": [
                {
                    "from_s": b * BUCKET_S,
                    "p50_ms": round(q[0] * 1000, 1),
                    "p99_ms": round(q[1] * 1000, 1),
                    "jobs": n,
                }
                for b, q, n in buckets
            ],
            "samples": sampler.samples,
        }
        for rel in ("jobs", "job_attempts"):
            a, b = first.get(rel, {}), last.get(rel, {})
            if not a or not b:
                continue
            upd = b["upd"] - a["upd"]
            made_dead = upd + b["del"] - a["del"]
            dead = [s[rel]["dead"] for s in sampler.samples if rel in s]
            fig[rel] = {
                "dead_made_per_1000_jobs": round(made_dead * 1000 / sent, 1) if sent else None,
                "hot_update_share": round((b["hot_upd"] - a["hot_upd"]) / upd, 3) if upd else None,
                "n_dead_tup_median": median(dead),
                "n_dead_tup_max": max(dead),
                "autovacuums": b["autovacuums"] - a["autovacuums"],
                "table_mib_end": round(b["table_bytes"] / 2**20, 1),
                "index_mib_end": round(b["index_bytes"] / 2**20, 1),
            }
        return fig
    finally:
        stop(procs)
        ctx.drop_db(dsn)


def run(ctx: Ctx) -> dict[str, Any]:
    best, concurrency = peak(ctx)
    fig: dict[str, Any] = {"peak_jobs_per_s": best, "concurrency": concurrency, "runs": {}}
    for frac in ctx.sizes.steady_fractions:
        rate = best * frac
        seconds = ctx.sizes.steady_seconds
        log(f"steady: {frac:.0%} of {best:,.0f} = {rate:,.0f} jobs/s for {seconds}s")
        r = one(ctx, rate, concurrency, ctx.sizes.steady_seconds)
        log(f"  -> p50 {r['latency_p50_ms']} ms, p99 {r['latency_p99_ms']} ms")
        fig["runs"][f"{frac:.0%}"] = r
    return fig


def render(fig: dict[str, Any]) -> str:
    rows = []
    for label, r in fig["runs"].items():
        j, a = r.get("jobs", {}), r.get("job_attempts", {})
        rows.append(
            [
                label,
                r["target_jobs_per_s"],
                r["achieved_enqueue_per_s"],
                r["latency_p50_ms"],
                r["latency_p99_ms"],
                j.get("dead_made_per_1000_jobs"),
                j.get("hot_update_share"),
                j.get("n_dead_tup_max"),
                a.get("dead_made_per_1000_jobs"),
                f"{j.get('table_mib_end')}+{j.get('index_mib_end')}",
                f"{a.get('table_mib_end')}+{a.get('index_mib_end')}",
            ]
        )
    title = (
        f"steady: producer at a share of leasectl's drain peak ({fig['peak_jobs_per_s']:,.0f} "
        f"jobs/s at concurrency {fig['concurrency']})"
    )
    return table(
        title,
        [
            "load",
            "target/s",
            "enqueued/s",
            "p50 ms",
            "p99 ms",
            "jobs dead/1k",
            "HOT",
            "jobs n_dead max",
            "attempts dead/1k",
            "jobs MiB tbl+idx",
            "attempts MiB tbl+idx",
        ],
        rows,
    )
