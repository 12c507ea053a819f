"""Watcher at scale: N expired leases (each with its open attempt), requeued by one
``leasectl.runtime.watcher.run_pass`` while workers drain another queue of the same table.

Figures: the pass's wall time, its batches and the longest single batch statement (each
``Operations.requeue_expired`` call is timed; one call is one statement, so that is also the longest
time any row lock of the pass is held), and the workers' throughput during the pass against the
same workers' throughput in the 10 s just before it (jobs completed in each interval, counted
afterwards from finished_at: nothing polls the server meanwhile). Three settings: the default
(the adaptive pace of ``leasectl.core.pace``), ``--pace 0`` (batches back to back, the default
before the adaptive pace) and ``--pace 1.0`` (the watcher waits as long as each batch took).
Each setting runs ``repeats`` times (3; 1 with --quick), each in a fresh database, the settings
taking turns so that a drift of the machine's speed falls on all three: the varying figures are
medians, with every run's value kept beside them. Over three windows (the baseline, the pass,
and as long as the baseline again after it) the run also records what the server and the
workers did (``Window``): the whole server's CPU, the workers' processes' CPU, WAL written,
flushes, full-page images and commits; and the WAL the pass wrote per job it moved. Those say
what takes the workers' throughput: CPU, or the WAL their commits wait behind. Then one pass
of the default and one of ``--pace 0`` alone on the server (no workers): the adaptive pace
should then run flat out.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any

import psycopg

from bench.common import (
    QUEUE,
    Ctx,
    Proc,
    ServerCpu,
    leasectl_init,
    log,
    median,
    seed_pending,
    stop,
    table,
)
from bench.common import cpu_seconds as processes_cpu
from bench.drain import leasectl_system, split
from bench.profile import server_counters
from leasectl.db.connection import Database
from leasectl.db.operations import Operations
from leasectl.db.work import CLAIM_FROM_HEAD
from leasectl.present.actions import LISTED_JOBS
from leasectl.runtime.watcher import WatcherConfig, run_pass

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

    from bench.plans import explain_generic
    from leasectl.db import sql as queries

    query = queries.get("jobs_complete_and_claim").render("leasectl")
    params = {
        "done_ids": [],
        "done_attempts": [],
        "queue": "default",
        "owner": "explain",
        "ttl": timedelta(seconds=30),
        "limit": limit,
        **CLAIM_FROM_HEAD,
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        lines = explain_generic(conn, query, params).splitlines()
    ms = next((float(x.split(":")[1].split()[0]) for x in lines if "Execution Time" in x), None)
    return {"ms": ms, "seq_scan_of_jobs": any("Seq Scan on jobs" in x for x in lines)}


def server_process(conn: psycopg.Connection[Any]) -> int | None:
    """The pid of this connection's server process, when it runs on this machine (its CPU time
    can then be read from /proc); None for a server elsewhere."""
    row = conn.execute(
        "SELECT pg_backend_pid(), coalesce(host(inet_server_addr()) IN ('127.0.0.1', '::1'), true)"
    ).fetchone()
    if not row or not row[1]:
        return None
    try:
        with open(f"/proc/{row[0]}/comm") as comm:
            return int(row[0]) if comm.read().strip() == "postgres" else None
    except OSError:
        return None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process of this machine so far."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Completions:
    """The workers' completions, counted afterwards from their ``finished_at`` (the database
    clock): nothing polls the server while it is measured."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)

    def now(self) -> datetime:
        row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None and isinstance(row[0], datetime)
        return row[0]

    def started(self) -> bool:
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM leasectl.jobs WHERE status = 'Completed')"
        ).fetchone()
        return bool(row and row[0])

    def rate(self, start: datetime, end: datetime) -> float:
        """Jobs of the workers' queue completed per second in [start, end)."""
        row = self.conn.execute(
            "SELECT count(*) FROM leasectl.jobs WHERE status = 'Completed' AND queue = %s "
            "AND finished_at >= %s AND finished_at < %s",
            (QUEUE, start, end),
        ).fetchone()
        seconds = (end - start).total_seconds()
        return int(row[0]) / seconds if row and seconds > 0 else float("nan")

    def pending(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM leasectl.jobs WHERE status = 'Pending' AND queue = %s", (QUEUE,)
        ).fetchone()
        return int(row[0]) if row else 0

    def __enter__(self) -> Completions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


class Window:
    """What the server and the workers did over one interval: the whole server's CPU (every
    process of it), the workers' processes' CPU, the WAL written (from the insert position:
    exact), and the server's cumulative counters (commits, full-page images, WAL flushes:
    bench.profile.server_counters), per second. A backend reports to those counters when it
    goes idle, at most once a second: over a window of several seconds they are close, over a
    shorter one they are not."""

    def __init__(self, conn: psycopg.Connection[Any], dsn: str, procs: list[Proc]) -> None:
        self.conn = conn
        self.pids = [p.pid for p in procs]
        self.server = ServerCpu(dsn)

    def __enter__(self) -> Window:
        self.started = time.perf_counter()
        self.counters = server_counters(self.conn)
        self.lsn = self._lsn()
        self.workers = sum(processes_cpu(self.pids).values())
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started
        self.server_cpu = self.server.stop()
        self.workers = sum(processes_cpu(self.pids).values()) - self.workers
        after = server_counters(self.conn)
        self.delta = {k: v - self.counters.get(k, 0.0) for k, v in after.items()}
        self.delta["wal_bytes"] = self._lsn() - self.lsn

    def _lsn(self) -> float:
        row = self.conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
        return float(row[0]) if row else 0.0

    def figures(self) -> dict[str, Any]:
        s = self.seconds
        out: dict[str, Any] = {
            "server_cores": round(self.server_cpu / s, 2) if self.server_cpu is not None else None,
            "worker_cores": round(self.workers / s, 2),
        }
        for key in ("commits", "wal_bytes", "wal_fpi", "wal_flushes"):
            if key in self.delta:
                out[f"{key}_per_s"] = round(self.delta[key] / s, 1)
        return out


# The settings' --pace: None is the default (adaptive), 0 back to back, 1.0 at most half the
# pass's time in statements.
SETTINGS: tuple[float | None, ...] = (None, 0.0, 1.0)
# The figures that vary from run to run (the workers and the pass share two cores): each
# setting's table shows their median over the repeats, and every run's value beside it.
VARYING = (
    "pass_s",
    "statements_s",
    "longest_statement_ms",
    "median_statement_ms",
    "claims_per_s_before",
    "claims_per_s_during",
    "kept",
    "claims_per_s_after",
    "kept_after",
    "pass_wal_bytes_per_job",
    "pass_server_cpu_s",
    "pass_client_cpu_s",
)


def label(pace: float | None) -> str:
    return "default" if pace is None else f"--pace {pace:g}"


def run(ctx: Ctx) -> dict[str, Any]:
    """``repeats`` passes per setting beside the workers, the settings taking turns, each in a
    fresh database; then the default and --pace 0 alone."""
    runs: dict[float | None, list[dict[str, Any]]] = {pace: [] for pace in SETTINGS}
    for i in range(ctx.sizes.repeats):
        for pace in SETTINGS:
            log(f"watcher: {label(pace)} run {i + 1}/{ctx.sizes.repeats}")
            runs[pace].append(measure(ctx, pace))
    fig = summarise(runs[None])
    fig["others"] = [summarise(runs[pace]) for pace in SETTINGS[1:]]
    fig["alone"] = [measure_alone(ctx, pace) for pace in (None, 0.0)]
    return fig


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    # The run whose pass time is the median stands for the others in the fixed figures; the
    # varying ones are medians, with every run's value kept.
    fig = dict(sorted(runs, key=lambda r: r["pass_s"])[len(runs) // 2])
    for key in VARYING:
        values = [r[key] for r in runs if r.get(key) is not None]
        fig[key] = round(median(values), 3) if values else None
        fig[f"{key}_runs"] = [r.get(key) for r in runs]
    fig["runs"] = runs
    return fig


def measure_alone(ctx: Ctx, pace: float | None) -> dict[str, Any]:
    """One pass over N expired leases with nothing else running on the server."""
    n = ctx.sizes.watcher_jobs
    dsn = ctx.fresh_db("watcher_alone")
    try:
        leasectl_init(dsn)
        log(f"watcher: {label(pace)} alone over {n:,} expired leases")
        seed_expired(dsn, n)
        with Database.connect(dsn, "leasectl", max_size=1) as db:
            store = Operations(db)
            statements = timed_statements(store)
            start = time.perf_counter()
            result = run_pass(store, WatcherConfig(pace=pace), listed=LISTED_JOBS)
            took = time.perf_counter() - start
        return {
            "pace": pace,
            "moved": result.total,
            "batches": result.batches,
            "pass_s": round(took, 2),
            "statements_s": round(sum(statements) / 1000, 2),
        }
    finally:
        ctx.drop_db(dsn)


def timed_statements(store: Operations) -> list[float]:
    """Time every batch statement of ``store`` from now on (ms, in order)."""
    statements: list[float] = []
    original = store.requeue_expired

    def timed_requeue(**kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(**kwargs)
        finally:
            statements.append((time.perf_counter() - start) * 1000)

    store.requeue_expired = timed_requeue  # type: ignore[method-assign]
    return statements


def measure(ctx: Ctx, pace: float | None) -> dict[str, Any]:
    n = ctx.sizes.watcher_jobs
    quick = n < 50_000
    baseline_s = 3.0 if quick else 10.0
    # The workers' queue must outlast the baseline and the pass: they drain 15,000 to 20,000
    # jobs/s here, for 11 s before the pass and up to 13 s of a paced one (with 300,000, the
    # paced runs recorded at 6b44a5b ran it dry before their pass ended).
    pending = 60_000 if quick else 900_000
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
        # One connection, so that the pass's server process is known and its CPU time measured.
        with Database.connect(dsn, "leasectl", max_size=1) as db, Completions(dsn) as done:
            store = Operations(db)
            with db.connection() as conn:
                server = server_process(conn)
            procs = [Proc(system.worker_argv(dsn, per)) for _ in range(nproc)]
            deadline = time.monotonic() + 60
            while not done.started():  # workers are up and completing
                if time.monotonic() > deadline:
                    raise RuntimeError("the workers completed nothing within 60 s")
                time.sleep(0.1)
            time.sleep(1.0)
            base_start = done.now()
            with Window(done.conn, dsn, procs) as before_window:
                time.sleep(baseline_s)
            base_end = done.now()

            statements = timed_statements(store)
            config = WatcherConfig(pace=pace)
            log(f"watcher: run_pass (batch {config.batch_size}, {label(pace)}), workers running")
            pass_start = done.now()
            server_cpu, client_cpu = cpu_seconds(server), time.thread_time()
            # As `leasectl requeue-stuck` runs it: its table lists the first jobs and counts the
            # rest (`watch` lists none; --json lists every job, about 0.6 CPU-s more per 100,000
            # in the client, measured alone).
            with Window(done.conn, dsn, procs) as pass_window:
                result = run_pass(store, config, listed=LISTED_JOBS)
            client_cpu = time.thread_time() - client_cpu
            server_after = cpu_seconds(server)
            pass_end = done.now()
            # The aftermath: the workers over as long again as the baseline, once the pass ended.
            with Window(done.conn, dsn, procs) as after_window:
                time.sleep(baseline_s)
            after_end = done.now()
            stop(procs)
            left = done.pending()
            baseline = done.rate(base_start, base_end)
            during = done.rate(pass_start, pass_end)
            after = done.rate(pass_end, after_end)
        fig: dict[str, Any] = {
            "expired": n,
            "moved": result.total,
            "batches": result.batches,
            "batch_size": config.batch_size,
            "pace": pace,
            "pass_s": round((pass_end - pass_start).total_seconds(), 2),
            "statements_s": round(sum(statements) / 1000, 2),
            "longest_statement_ms": round(max(statements), 1) if statements else None,
            # (batch number from 1, ms) of the three slowest statements
            "slowest_statements": [
                (i + 1, round(ms, 1))
                for i, ms in sorted(enumerate(statements), key=lambda x: -x[1])[:3]
            ],
            "median_statement_ms": round(sorted(statements)[len(statements) // 2], 1)
            if statements
            else None,
            # CPU time of the pass: its server process and this client's thread that ran it
            "pass_server_cpu_s": round(server_after - server_cpu, 2)
            if server_after is not None and server_cpu is not None
            else None,
            "pass_client_cpu_s": round(client_cpu, 2),
            "workers": f"{nproc} x {per}",
            "claims_per_s_before": round(baseline, 1),
            "claims_per_s_during": round(during, 1),
            "kept": round(during / baseline, 3) if baseline else None,
            "claims_per_s_after": round(after, 1),
            "kept_after": round(after / baseline, 3) if baseline else None,
            # The server and the workers in each window (Window.figures); WAL bytes of the pass
            # per job moved: the pass's window less the workers' own WAL per job (baseline's)
            # times the jobs they completed during the pass.
            "windows": {
                "before": before_window.figures(),
                "pass": pass_window.figures(),
                "after": after_window.figures(),
            },
            "pass_wal_bytes_per_job": pass_wal_per_job(
                before_window, pass_window, baseline, during, result.total
            ),
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


def pass_wal_per_job(
    before: Window, during: Window, rate_before: float, rate_during: float, moved: int
) -> float | None:
    """WAL bytes the pass wrote per job it moved: its window's WAL less what the workers wrote
    in it (their WAL per completed job before the pass, times the jobs they completed during
    it)."""
    if "wal_bytes" not in during.delta or not rate_before or not moved:
        return None
    workers_per_job = before.delta["wal_bytes"] / (rate_before * before.seconds)
    workers = workers_per_job * rate_during * during.seconds
    return round((during.delta["wal_bytes"] - workers) / moved, 1)


def render(fig: dict[str, Any]) -> str:
    figs = [fig, *fig.get("others", [])]

    def spread(f: dict[str, Any], key: str, form: str = "g") -> str:
        """The median, and each run's value when there were several."""
        runs = [r for r in f.get(f"{key}_runs", []) if r is not None]
        each = f" ({', '.join(format(r, form) for r in runs)})" if len(runs) > 1 else ""
        return f"{format(f[key], form)}{each}" if f[key] is not None else "-"

    def windows(f: dict[str, Any], key: str, scale: float = 1.0) -> str:
        w = f.get("windows") or {}
        values = [w.get(name, {}).get(key) for name in ("before", "pass", "after")]
        return " / ".join("-" if v is None else f"{v * scale:,.4g}" for v in values)

    lines: list[tuple[str, Any]] = [
        ("expired leases requeued", lambda f: f"{f['moved']:,} of {f['expired']:,}"),
        ("run_pass wall time (s)", lambda f: spread(f, "pass_s")),
        ("of which in batch statements (s)", lambda f: spread(f, "statements_s")),
        ("batches (size)", lambda f: f"{f['batches']} ({f['batch_size']})"),
        ("longest batch statement (ms)", lambda f: spread(f, "longest_statement_ms")),
        ("median batch statement (ms)", lambda f: spread(f, "median_statement_ms")),
        (
            f"worker throughput before ({fig['workers']}, jobs/s)",
            lambda f: spread(f, "claims_per_s_before", ",.0f"),
        ),
        (
            "worker throughput during the pass (jobs/s)",
            lambda f: spread(f, "claims_per_s_during", ",.0f"),
        ),
        ("kept", lambda f: spread(f, "kept", ".0%")),
        ("kept in as long again after the pass", lambda f: spread(f, "kept_after", ".0%")),
        ("WAL the pass wrote per job moved (bytes)", lambda f: spread(f, "pass_wal_bytes_per_job")),
        ("before / during / after the pass (the run of the median pass time):", lambda f: ""),
        ("  WAL written (MB/s)", lambda f: windows(f, "wal_bytes_per_s", 1e-6)),
        ("  WAL flushes (/s)", lambda f: windows(f, "wal_flushes_per_s")),
        ("  full-page images (/s)", lambda f: windows(f, "wal_fpi_per_s")),
        ("  commits (/s)", lambda f: windows(f, "commits_per_s")),
        ("  server CPU (cores)", lambda f: windows(f, "server_cores")),
        ("  workers' processes' CPU (cores)", lambda f: windows(f, "worker_cores")),
        ("CPU of the pass: server process (s)", lambda f: spread(f, "pass_server_cpu_s")),
        ("CPU of the pass: client (s)", lambda f: spread(f, "pass_client_cpu_s")),
        ("pending jobs left to the workers", lambda f: f"{f['pending_left']:,}"),
        (
            "claim statement beside the expired leases (ms)",
            lambda f: f.get("claim_ms_with_expired_present"),
        ),
        ("claim reads the whole jobs table", lambda f: f.get("claim_seq_scans_jobs")),
    ]
    alone = {a.get("pace"): a for a in fig.get("alone", [])}
    lines.append(
        (
            "alone on the server: wall time (s)",
            lambda f: alone[f.get("pace")]["pass_s"] if f.get("pace") in alone else "-",
        )
    )
    rows = [[name, *(value(f) for f in figs)] for name, value in lines]
    heads = ["", *(label(f.get("pace")) for f in figs)]
    n = len(fig.get("runs", [])) or 1
    title = "watcher: one requeue-stuck pass with workers running"
    if n > 1:
        title += f" (median of {n} passes per setting, each run in brackets)"
    return table(title, heads, rows)
