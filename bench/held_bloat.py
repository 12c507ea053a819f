"""Bloat under a held xmin horizon: dead row versions per table while another session keeps a
transaction (with an xid) open and idle for ``hold`` seconds at a steady job rate, and the time
each table takes to come back to its baseline once the horizon is released.

Real processes: ``leasectl worker`` (no-op handler) and ``leasectl watch`` (its passes fold the
counters' deltas), a producer enqueueing ``rate`` jobs a second through ``Operations``.
Variants (``--variants``), each in a fresh database: ``023`` (the schema as shipped, with the
storage settings as migration 023 leaves them), ``pre-023`` (the same schema with migration
023's settings put back as before it) and ``026`` (the completion's counts written twice, to
counter_deltas and the history's deltas, as before migration 27).

Per table (``pg_stat_user_tables``, sampled every second): the baseline ``n_dead_tup`` (median
over the warm-up), its peak while held, the dead versions at the release and those the hold
added per job enqueued meanwhile, the seconds from the
release until ``n_dead_tup`` is back under ``max(2 * baseline, baseline + 1000)`` (``-`` if not
within ``recover`` seconds), autovacuum runs, and the table's size (with its indexes) before the
hold and at the end. The autovacuum cycle is the server's (``autovacuum_naptime``: 10 s on the
embedded server, 1 min by default): the time back includes the wait for the next cycle.

    python -m bench.held_bloat [--dsn DSN] [--hold 30] [--rate 200] [--recover 120]
                               [--concurrency 4] [--history 0] [--variants 023,026]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

import psycopg

from bench.common import (
    QUEUE,
    Ctx,
    Proc,
    Sizes,
    leasectl_init,
    log,
    median,
    server_dsn,
    stop,
    table,
)
from bench.drain import leasectl_system, split
from leasectl.db.connection import Database
from leasectl.db.operations import Operations

SAMPLE_S = 1.0
TICK_S = 0.1

STATS_SQL = """
SELECT relname, n_dead_tup, autovacuum_count + vacuum_count AS vacuums,
       pg_total_relation_size(relid) AS bytes
FROM pg_stat_user_tables WHERE schemaname = 'leasectl' ORDER BY relname
"""

# Migration 023's settings undone: the storage settings as migrations 2, 4 and 11 left them.
PRE_023 = (
    "ALTER TABLE leasectl.jobs RESET (autovacuum_vacuum_cost_delay, vacuum_truncate)",
    "ALTER TABLE leasectl.jobs SET (autovacuum_vacuum_cost_delay = 1)",
    "ALTER TABLE leasectl.job_attempts RESET (autovacuum_vacuum_threshold, "
    "autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay, vacuum_truncate)",
    "ALTER TABLE leasectl.job_attempts SET (autovacuum_vacuum_scale_factor = 0.02)",
    "ALTER TABLE leasectl.workers RESET (autovacuum_vacuum_threshold, "
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_cost_delay)",
    "ALTER TABLE leasectl.counter_deltas RESET (autovacuum_vacuum_cost_delay)",
)


def _as_026() -> tuple[str, ...]:
    """The completion's counts written twice, as at migration 26 (migration 20's trigger)."""
    from bench.history_cost import _function

    return (_function(20, "counters_from_attempts"),)


# "023": the schema as shipped (with migration 23's settings and everything after it).
VARIANTS = {"023": lambda: (), "pre-023": lambda: PRE_023, "026": _as_026}


class Producer(threading.Thread):
    """``rate`` jobs a second, one statement every TICK_S."""

    def __init__(self, dsn: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate = dsn, rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        with Database.connect(self.dsn, "leasectl") as db:
            ops = Operations(db)
            started = time.monotonic()
            while not self.stopping.is_set():
                due = int((time.monotonic() - started) * self.rate) - self.sent
                if due > 0:
                    ops.enqueue([None] * due, queue=QUEUE)
                    self.sent += due
                self.stopping.wait(TICK_S)  # pacing, not synchronisation


def sample(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int, int]]:
    return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(STATS_SQL).fetchall()}


def seed_history(conn: psycopg.Connection[Any], n: int) -> None:
    """``n`` Completed jobs of an hour ago, each with its ended attempt: the finished history a
    production queue keeps until `prune`, which every vacuum's index passes go through."""
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, created_at, "
        "updated_at, finished_at, run_at) SELECT %s, 'Completed', 1, 'w-' || (i %% 20), ts, ts, "
        "ts, ts FROM generate_series(1, %s) AS i, "
        "LATERAL (SELECT now() - interval '1 hour' - interval '1 millisecond' * i AS ts) AS t",
        (QUEUE, n),
    )
    conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, ended_at, "
        "outcome) SELECT id, 1, lease_owner, finished_at, finished_at, 'completed' "
        "FROM leasectl.jobs WHERE status = 'Completed'"
    )


def one_variant(
    ctx: Ctx,
    name: str,
    *,
    hold: int,
    rate: int,
    warmup: int,
    recover: int,
    concurrency: int,
    history: int = 0,
) -> dict[str, Any]:
    dsn = ctx.fresh_db(f"bloat_{name.replace('-', '_')}")
    leasectl_init(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in VARIANTS[name]():
            conn.execute(statement)
        if history:
            seed_history(conn, history)
        conn.execute("VACUUM (FREEZE, ANALYZE)")
    system = leasectl_system()
    nproc, per = split(concurrency)
    procs = [Proc(system.worker_argv(dsn, per)) for _ in range(nproc)]
    argv = [sys.executable, "-m", "leasectl", "--dsn", dsn, "watch", "--interval", "1s"]
    procs.append(Proc([*argv, "--log-level", "warning"]))
    producer = Producer(dsn, rate)
    poll = psycopg.connect(dsn, autocommit=True)
    holder: psycopg.Connection[Any] | None = None
    timeline: list[tuple[float, dict[str, tuple[int, int, int]]]] = []
    try:
        producer.start()
        start = time.monotonic()

        def until(t: float) -> None:
            while time.monotonic() - start < t:
                timeline.append((time.monotonic() - start, sample(poll)))
                time.sleep(SAMPLE_S)  # sampling interval, not synchronisation

        until(warmup)
        base = {t: median([s[t][0] for _, s in timeline if t in s]) for t in timeline[-1][1]}
        before = timeline[-1][1]
        holder = psycopg.connect(dsn)
        holder.execute("SELECT txid_current()")  # BEGIN implied; stays idle in transaction
        log(f"bloat {name}: horizon held for {hold}s at {rate} jobs/s")
        held_from = time.monotonic() - start
        sent_held = producer.sent
        until(held_from + hold)
        holder.rollback()
        released = time.monotonic() - start
        sent_released = producer.sent
        at_release = sample(poll)
        log(f"bloat {name}: released; waiting up to {recover}s for the baseline")
        back: dict[str, float | None] = {t: None for t in base}
        while time.monotonic() - start < released + recover and None in back.values():
            now = time.monotonic() - start
            s = sample(poll)
            timeline.append((now, s))
            for t, (dead, _, _) in s.items():
                if back.get(t, 0) is None and dead <= max(2 * base[t], base[t] + 1000):
                    back[t] = round(now - released, 1)
            time.sleep(SAMPLE_S)  # sampling interval, not synchronisation
        end = timeline[-1][1]
    finally:
        producer.stopping.set()
        producer.join(30)
        stop(procs)
        if holder is not None:
            holder.close()
        poll.close()
        ctx.drop_db(dsn)
    tables = {}
    for t in sorted(base):
        held = [s[t][0] for when, s in timeline if held_from <= when <= released and t in s]
        tables[t] = {
            "baseline_dead": base[t],
            "peak_dead_held": max(held, default=0),
            "dead_at_release": at_release.get(t, (0, 0, 0))[0],
            # The dead versions the hold added per job enqueued meanwhile (the workers keep up).
            "dead_per_job": round(
                (at_release.get(t, (0, 0, 0))[0] - before[t][0])
                / max(1, sent_released - sent_held),
                2,
            ),
            "seconds_back": back[t],
            "vacuums": end[t][1] - before[t][1],
            "kib_before": before[t][2] // 1024,
            "kib_end": end[t][2] // 1024,
        }
    return {"jobs_sent": producer.sent, "tables": tables}


def run(ctx: Ctx, names: tuple[str, ...] = ("023", "pre-023")) -> dict[str, Any]:
    sizes = ctx.sizes
    fig: dict[str, Any] = {
        "hold_s": sizes.held_bloat_seconds,
        "rate": sizes.held_bloat_rate,
        "recover_s": sizes.held_bloat_recover,
        "concurrency": sizes.held_concurrency,
        "history": sizes.held_bloat_history,
        "variants": {},
    }
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        fig["autovacuum_naptime"] = conn.execute("SHOW autovacuum_naptime").fetchone()[0]  # type: ignore[index]
    for name in names:
        fig["variants"][name] = one_variant(
            ctx,
            name,
            hold=sizes.held_bloat_seconds,
            rate=sizes.held_bloat_rate,
            warmup=10,
            recover=sizes.held_bloat_recover,
            concurrency=sizes.held_concurrency,
            history=sizes.held_bloat_history,
        )
    return fig


def render(fig: dict[str, Any]) -> str:
    rows = []
    for name, v in fig["variants"].items():
        for t, f in v["tables"].items():
            back = f["seconds_back"]
            rows.append(
                [
                    name,
                    t,
                    f["baseline_dead"],
                    f["peak_dead_held"],
                    f["dead_at_release"],
                    f["dead_per_job"],
                    back if back is not None else f"> {fig['recover_s']}",
                    f["vacuums"],
                    f["kib_before"],
                    f["kib_end"],
                ]
            )
    title = (
        f"held_xact bloat: horizon held {fig['hold_s']}s at {fig['rate']} jobs/s, concurrency "
        f"{fig['concurrency']}, {fig['history']:,} finished jobs before, autovacuum_naptime "
        f"{fig['autovacuum_naptime']}"
    )
    headers = ["settings", "table", "dead base", "peak held", "at release", "per job", "s back",
               "vacuums", "KiB before", "KiB end"]  # fmt: skip
    return table(title, headers, rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", help="a server to create the databases on (default: embedded)")
    p.add_argument("--hold", type=int, default=30)
    p.add_argument("--rate", type=int, default=200)
    p.add_argument("--recover", type=int, default=120)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--history", type=int, default=0, help="finished jobs seeded before")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument(
        "--variants",
        default="023,pre-023",
        help="comma-separated: 023 (as shipped), pre-023 (without migration 23's settings), "
        "026 (the completion's counts written twice, as before migration 27)",
    )
    args = p.parse_args()
    sizes = Sizes(
        held_bloat_seconds=args.hold,
        held_bloat_rate=args.rate,
        held_bloat_recover=args.recover,
        held_concurrency=args.concurrency,
        held_bloat_history=args.history,
    )
    with server_dsn(args.dsn) as dsn:
        fig = run(Ctx(dsn=dsn, sizes=sizes, peers=()), tuple(args.variants.split(",")))
    print(render(fig))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(fig, f, indent=2)


if __name__ == "__main__":
    main()
