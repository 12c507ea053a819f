"""Watcher at scale: N expired leases (each with its open attempt), requeued by one
``leasectl.watcher.run_pass`` while workers drain another queue of the same table.

Figures: the pass's wall time, its batches and the longest single batch statement (each
``store.requeue_expired`` call is timed; one call is one statement, so that is also the longest
time any row lock of the pass is held), and the workers' claim throughput during the pass
against the same workers' throughput just before it.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import psycopg

from bench.common import Ctx, Proc, leasectl_init, log, seed_pending, stop, table
from bench.drain import leasectl_system, split
from leasectl.store import Store
from leasectl.watcher import WatcherConfig, run_pass

WORKER_CONCURRENCY = 10
STUCK_QUEUE = "stuck"


def seed_expired(dsn: str, n: int) -> None:
    """n Processing jobs whose lease lapsed a minute ago, each with its `running` attempt."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "WITH j AS ("
            " INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until,"
            " heartbeat_at, created_at, updated_at)"
            " SELECT %s, 'Processing', 1, 'dead-worker-' || (i %% 20),"
            " now() - interval '1 minute', now() - interval '2 minutes',"
            " now() - interval '3 minutes', now() - interval '2 minutes'"
            " FROM generate_series(1, %s) AS i RETURNING id, lease_owner)"
            " INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at,"
            " heartbeat_at) SELECT id, 1, lease_owner, now() - interval '3 minutes',"
            " now() - interval '2 minutes' FROM j",
            (STUCK_QUEUE, n),
        )
        conn.execute("VACUUM ANALYZE leasectl.jobs")
        conn.execute("VACUUM ANALYZE leasectl.job_attempts")


def claim_plan(dsn: str, limit: int) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the workers' claim, with the generic plan they use (rolled back) on
    this table: time, and whether it reads the whole table."""
    from datetime import timedelta

    from leasectl import queries

    query = queries.get("jobs_complete_and_claim").render("leasectl")
    params = {
        "done_ids": [],
        "done_attempts": [],
        "queue": "default",
        "owner": "explain",
        "ttl": timedelta(seconds=30),
        "limit": limit,
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        lines = queries.explain_generic(conn, query, params).splitlines()
    ms = next((float(x.split(":")[1].split()[0]) for x in lines if "Execution Time" in x), None)
    return {"ms": ms, "seq_scan_of_jobs": any("Seq Scan on jobs" in x for x in lines)}


class Completions:
    """Samples the completed count every 100 ms in a thread: (time, count) pairs."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            row = self.conn.execute(
                "SELECT count(*) FROM leasectl.jobs WHERE queue = 'default' "
                "AND status IN ('Pending', 'Processing')"
            ).fetchone()
            self.samples.append((time.perf_counter(), -int(row[0]) if row else 0))
            self.stopping.wait(0.1)

    def rate(self, start: float, end: float) -> float:
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")

    def __enter__(self) -> Completions:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.conn.close()


def run(ctx: Ctx) -> dict[str, Any]:
    n = ctx.sizes.watcher_jobs
    quick = n < 50_000
    baseline_s = 3.0 if quick else 10.0
    pending = 60_000 if quick else 300_000
    dsn = ctx.fresh_db("watcher")
    procs: list[Proc] = []
    try:
        leasectl_init(dsn)
        log(f"watcher: seeding {n:,} expired leases and {pending:,} pending jobs")
        seed_expired(dsn, n)
        seed_pending(dsn, pending)
        nproc, per = split(WORKER_CONCURRENCY)
        plan = claim_plan(dsn, per)
        system = leasectl_system()
        with Store.connect(dsn, "leasectl", max_size=2) as store, Completions(dsn) as done:
            procs = [Proc(system.worker_argv(dsn, per)) for _ in range(nproc)]
            while len(done.samples) < 2 or done.samples[-1][1] == done.samples[0][1]:
                time.sleep(0.1)  # workers are up and completing
            time.sleep(1.0)
            base_start = time.perf_counter()
            time.sleep(baseline_s)
            base_end = time.perf_counter()

            statements: list[float] = []
            original = store.requeue_expired

            def timed_requeue(**kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return original(**kwargs)
                finally:
                    statements.append((time.perf_counter() - start) * 1000)

            store.requeue_expired = timed_requeue  # type: ignore[method-assign]
            config = WatcherConfig()
            log(f"watcher: run_pass (batch {config.batch_size}) with workers running")
            pass_start = time.perf_counter()
            result = run_pass(store, config)
            pass_end = time.perf_counter()
            time.sleep(0.3)
            left = -done.samples[-1][1]
        baseline = done.rate(base_start, base_end)
        during = done.rate(pass_start, pass_end)  # NaN when the pass is shorter than 2 samples
        if math.isnan(during):
            during = None
        fig: dict[str, Any] = {
            "expired": n,
            "moved": result.total,
            "batches": result.batches,
            "batch_size": config.batch_size,
            "pass_s": round(pass_end - pass_start, 2),
            "longest_statement_ms": round(max(statements), 1) if statements else None,
            "median_statement_ms": round(sorted(statements)[len(statements) // 2], 1)
            if statements
            else None,
            "workers": f"{nproc} x {per}",
            "claims_per_s_before": round(baseline, 1),
            "claims_per_s_during": round(during, 1) if during is not None else None,
            "kept": round(during / baseline, 3) if baseline and during is not None else None,
            "pending_left": left,
            "claim_ms_with_expired_present": plan["ms"],
            "claim_seq_scans_jobs": plan["seq_scan_of_jobs"],
        }
        if left == 0:
            fig["warning"] = "the workers ran out of pending jobs: raise the seeded pending count"
        return fig
    finally:
        stop(procs)
        ctx.drop_db(dsn)


def render(fig: dict[str, Any]) -> str:
    rows = [
        ["expired leases requeued", f"{fig['moved']:,} of {fig['expired']:,}"],
        ["run_pass wall time (s)", fig["pass_s"]],
        ["batches (size)", f"{fig['batches']} ({fig['batch_size']})"],
        ["longest batch statement (ms)", fig["longest_statement_ms"]],
        ["median batch statement (ms)", fig["median_statement_ms"]],
        [f"worker throughput before ({fig['workers']}, jobs/s)", fig["claims_per_s_before"]],
        ["worker throughput during the pass (jobs/s)", fig["claims_per_s_during"]],
        ["kept", f"{fig['kept']:.0%}" if fig["kept"] is not None else "-"],
        [
            "claim statement beside the expired leases (ms)",
            fig.get("claim_ms_with_expired_present"),
        ],
        ["claim reads the whole jobs table", fig.get("claim_seq_scans_jobs")],
    ]
    return table("watcher: one requeue-stuck pass with workers running", ["", "value"], rows)
