"""Drain: N no-op jobs pre-enqueued, drained at total concurrency 1, 10, 50 by worker processes.

Every system gets a fresh database per measurement, the same split of concurrency into
processes (1 x 1, then 2 processes: one per core), and the same stopwatch: each system's own
record of when each job finished (leasectl ``jobs.finished_at``, PgQueuer's log, procrastinate's
events, Chancy's ``completed_at``), read after the run. The rate is the steady one: the middle
80% of the finishes (from the 10th to the 90th percentile of the finish times) over the time
they took, so process start-up, imports, connection set-up, the ramp while the second process
starts and the tail are excluded for everyone alike (a 100,000-job drain at 30,000 jobs/s lasts
3 s, of which these are a large part). The rate from the first to the last finish is recorded
beside it. The count of unfinished jobs is polled once a second only to
see the end (a 100 ms poll cost 15-35 ms of server CPU each time on a 100,000-job table, a load
the measurement itself put on every system). A run that has not finished within the timeout is
cut there and its rate is over what finished before the cut (marked ``partial``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    BENCH,
    QUEUE,
    Ctx,
    Proc,
    ServerCpu,
    cpu_seconds,
    leasectl_init,
    loadavg,
    log,
    median,
    seed_pending,
    stop,
    table,
)

PEERS_PY = BENCH / "peers" / ".venv" / "bin" / "python"
POLL_S = 1.0


def split(concurrency: int) -> tuple[int, int]:
    """Total concurrency -> (processes, per-process concurrency): one process per core."""
    if concurrency <= 1:
        return 1, 1
    procs = 2
    return procs, math.ceil(concurrency / procs)


@dataclass
class System:
    name: str
    version: str
    config: str
    remaining_sql: str
    # the finish time (column t) of each job finished by %(cut)s
    finished_sql: str
    prepare: Callable[[str, int], None]
    worker_argv: Callable[[str, int], list[str]]
    # Single-job mode's start: the schema alone, then the jobs once every worker is ready.
    init: Callable[[str], None] | None = None
    seed: Callable[[str, int], None] | None = None


def leasectl_system() -> System:
    from importlib import metadata

    def prepare(dsn: str, jobs: int) -> None:
        leasectl_init(dsn)
        seed_pending(dsn, jobs, QUEUE)

    return System(
        name="leasectl",
        version=metadata.version("leasectl"),
        config="the leasectl worker command (leases 30 s, heartbeats, fencing, attempt history); "
        "no-op handler; runtime defaults otherwise",
        remaining_sql="SELECT count(*) FROM leasectl.jobs "
        "WHERE status IN ('Pending', 'Processing')",
        finished_sql="SELECT finished_at AS t FROM leasectl.jobs "
        "WHERE status = 'Completed' AND finished_at <= %(cut)s",
        prepare=prepare,
        init=leasectl_init,
        seed=lambda dsn, jobs: seed_pending(dsn, jobs, QUEUE),
        worker_argv=lambda dsn, k: [
            sys.executable,
            "-m",
            "leasectl",
            "--dsn",
            dsn,
            "worker",
            "--queue",
            QUEUE,
            "--handler",
            "bench.handlers:noop",
            "--concurrency",
            str(k),
            "--lease-ttl",
            "30s",
            "--grace",
            "5s",
            "--log-level",
            "warning",
        ],
    )


def peers_available() -> dict[str, str]:
    """Peer name -> "" when installed, else why it is skipped."""
    if not PEERS_PY.exists():
        return {}
    skipped = {}
    marker = BENCH / "peers" / ".venv" / "SKIPPED"
    if marker.exists():
        for line in marker.read_text().splitlines():
            name, _, why = line.partition("\t")
            skipped[name] = why
    return skipped


def peer_system(name: str) -> System:
    driver = str(BENCH / "peers" / f"{name}_driver.py")
    info: dict[str, Any] = {}

    def prepare(dsn: str, jobs: int) -> None:
        out = subprocess.run(
            [str(PEERS_PY), driver, "prepare", "--dsn", dsn, "--jobs", str(jobs)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"{name} prepare failed: {out.stderr[-1500:]}")
        info.update(json.loads(out.stdout.strip().splitlines()[-1]))
        system.version = info["version"]
        system.config = info["config"]
        system.remaining_sql = info["remaining_sql"]
        system.finished_sql = info["finished_sql"]

    system = System(
        name=name,
        version="?",
        config="?",
        remaining_sql="",
        finished_sql="",
        prepare=prepare,
        worker_argv=lambda dsn, k: [
            str(PEERS_PY),
            driver,
            "work",
            "--dsn",
            dsn,
            "--concurrency",
            str(k),
        ],
    )
    return system


def drain_once(
    ctx: Ctx,
    system: System,
    concurrency: int,
    jobs: int,
    *,
    hold_xact: bool = False,
    keep_db: bool = False,
    processes: int | None = None,
    ready_first: bool = False,
    per_process: int = 1,
) -> dict[str, Any]:
    """One measurement in a fresh database; with hold_xact, another session keeps a transaction
    (with an xid) open and idle in the same database for the whole drain. With ready_first
    (leasectl only), the workers start on an empty queue and the jobs are seeded once every
    one of them is ready (``--ready-file``), so that the drain does not share the machine with
    the start-up of N Python processes (imports, connections: ``startup_cpu_s``)."""
    dsn = ctx.fresh_db(system.name)
    started = time.perf_counter()
    nproc, per = (processes, per_process) if processes else split(concurrency)
    procs: list[Proc] = []
    ready_dir = None
    if ready_first:
        assert system.init is not None and system.seed is not None
        system.init(dsn)
        ready_dir = tempfile.TemporaryDirectory(prefix="leasectl-ready-")
        procs = [
            Proc([*system.worker_argv(dsn, per), "--ready-file", f"{ready_dir.name}/{i}"])
            for i in range(nproc)
        ]
        try:
            wait_ready(procs, Path(ready_dir.name))
            system.seed(dsn, jobs)
        except BaseException:
            stop(procs)
            ready_dir.cleanup()
            ctx.drop_db(dsn)
            raise
    else:
        system.prepare(dsn, jobs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    prepare_s = time.perf_counter() - started
    holder = None
    if hold_xact:
        holder = psycopg.connect(dsn)
        holder.execute("SELECT txid_current()")  # BEGIN implied; stays idle in transaction
    server = ServerCpu(dsn)
    poll = psycopg.connect(dsn, autocommit=True)
    result: dict[str, Any] = {}
    try:
        server.start()
        spawned = time.perf_counter()
        if not procs:
            procs = [Proc(system.worker_argv(dsn, per)) for _ in range(nproc)]
        cpu_before = cpu_seconds([p.pid for p in procs])  # (ready_first: their start-up)
        deadline = spawned + ctx.sizes.drain_timeout
        poll_times: list[float] = []
        while True:
            asked = time.perf_counter()
            row = poll.execute(system.remaining_sql).fetchone()
            now = time.perf_counter()
            poll_times.append(now - asked)
            remaining = int(row[0]) if row else 0
            if remaining == 0 or now > deadline or not any(p.alive() for p in procs):
                break
            time.sleep(POLL_S)
        cut = poll.execute("SELECT clock_timestamp()").fetchone()
        died = [p for p in procs if not p.alive()]  # before the cut, not stopped by us
        worker_cpu = sum(
            v - cpu_before.get(pid, 0.0) for pid, v in cpu_seconds([p.pid for p in procs]).items()
        )
        server_cpu = server.stop()
        t_end = time.perf_counter()
        stop(procs)  # a peer may write its last finish records only now (buffered logs)
        finishes = finish_times(poll, system.finished_sql, cut[0] if cut else None)
        rate, elapsed = finishes["steady_rate"], finishes["steady_s"]
        finished = finishes["finished"]
        result = {
            "jobs": jobs,
            "processes": nproc,
            "per_process": per,
            "jobs_per_s": round(rate, 1),
            "drain_s": round(elapsed, 2),
            "wall_s": round(t_end - spawned, 2),
            "finished": finished,
            "first_to_last_jobs_per_s": round(finishes["rate"], 1),
            "first_to_last_s": round(finishes["span_s"], 2),
            "prepare_s": round(prepare_s, 2),
            "remaining": remaining,
            "partial": remaining > 0,
            "worker_cpu_s": round(worker_cpu, 2),
            "server_cpu_s": server_cpu,
            "poll_ms_median": round(median(poll_times) * 1000, 2),
            "ready_first": ready_first,
            "startup_cpu_s": round(sum(cpu_before.values()), 2) if ready_first else None,
        }
        if died and remaining > 0:
            result["error"] = died[0].tail()
    finally:
        stop(procs)
        poll.close()
        if holder is not None:
            holder.close()
        if ready_dir is not None:
            ready_dir.cleanup()
        if not keep_db:
            ctx.drop_db(dsn)
    return result


READY_TIMEOUT_S = 120.0


def wait_ready(procs: list[Proc], ready_dir: Path) -> None:
    """Until every worker wrote its --ready-file (registered, listening), or one died."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while sum(1 for _ in ready_dir.iterdir()) < len(procs):
        dead = [p for p in procs if not p.alive()]
        if dead:
            stop(procs)
            raise RuntimeError(f"a worker died while starting: {dead[0].tail()}")
        if time.monotonic() > deadline:
            stop(procs)
            raise RuntimeError(f"workers not ready within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


STEADY = (0.1, 0.9)  # the finishes the steady rate is taken over: these percentiles


def finish_times(conn: psycopg.Connection[Any], finished_sql: str, cut: Any) -> dict[str, Any]:
    """Count and spread of the finish times ``finished_sql`` gives (column t, jobs finished by
    ``cut``): the rate from the first to the last finish, and the steady rate over the middle
    finishes (STEADY)."""
    low, high = STEADY
    row = conn.execute(
        "SELECT count(*), extract(epoch FROM min(t)), extract(epoch FROM max(t)), "
        f"extract(epoch FROM percentile_disc({low}) WITHIN GROUP (ORDER BY t)), "
        f"extract(epoch FROM percentile_disc({high}) WITHIN GROUP (ORDER BY t)) "
        f"FROM ({finished_sql}) AS f",
        {"cut": cut},
    ).fetchone()
    n = int(row[0]) if row else 0
    out: dict[str, Any] = {
        "finished": n,
        "rate": 0.0,
        "span_s": 0.0,
        "steady_rate": 0.0,
        "steady_s": 0.0,
    }
    if row is None or n < 2 or row[1] is None or row[2] is None:
        return out
    first, last, t_low, t_high = (float(v) for v in row[1:5])
    if last > first:
        out.update(rate=(n - 1) / (last - first), span_s=last - first)
    if t_high > t_low:
        out.update(steady_rate=(high - low) * n / (t_high - t_low), steady_s=t_high - t_low)
    return out


def systems(ctx: Ctx) -> tuple[list[System], dict[str, str]]:
    out = [leasectl_system()]
    skipped: dict[str, str] = {}
    if not ctx.peers:
        return out, skipped
    if not PEERS_PY.exists():
        why = "bench/peers/.venv missing: run bash bench/peers/setup.sh"
        return out, dict.fromkeys(ctx.peers, why)
    marker = peers_available()
    for name in ctx.peers:
        if name in marker:
            skipped[name] = marker[name]
        else:
            out.append(peer_system(name))
    return out, skipped


def run(ctx: Ctx) -> dict[str, Any]:
    sizes = ctx.sizes
    found, skipped = systems(ctx)
    figures: dict[str, Any] = {
        "jobs": sizes.drain_jobs,
        "repeats": sizes.repeats,
        "timeout_s": sizes.drain_timeout,
        "systems": {},
    }
    for name, why in skipped.items():
        log(f"drain: skipping {name}: {why}")
    for system in found:
        entry: dict[str, Any] = {"runs": {}}
        try:
            for c in sizes.drain_concurrency:
                runs = []
                for i in range(sizes.repeats):
                    log(f"drain: {system.name} concurrency {c} run {i + 1}/{sizes.repeats}")
                    r = drain_once(ctx, system, c, sizes.drain_jobs)
                    r["loadavg"] = loadavg()
                    log(f"  -> {r['jobs_per_s']} jobs/s{' (partial)' if r['partial'] else ''}")
                    runs.append(r)
                entry["runs"][str(c)] = {
                    "median_jobs_per_s": median([r["jobs_per_s"] for r in runs]),
                    "runs": runs,
                }
        except Exception as exc:  # one peer failing must not lose the others' figures
            log(f"drain: {system.name} failed: {exc}")
            entry["error"] = str(exc)[-2000:]
        entry["version"] = system.version
        entry["config"] = system.config
        figures["systems"][system.name] = entry
    figures["skipped"] = skipped
    figures["single"] = single_mode(ctx, found[0])
    return figures


def single_mode(ctx: Ctx, leasectl: System) -> dict[str, Any]:
    """leasectl in single-job mode, the pattern of the raw single-row bound (`limit`): N worker
    processes at concurrency 1, each claiming one job and completing it per round trip, for
    N = the client counts of `limit`, started and ready before the jobs are seeded (pgbench's
    clients start in no time). One run each (median of one)."""
    out: dict[str, Any] = {}
    for n in ctx.sizes.limit_clients:
        log(f"drain: leasectl single-job mode, {n} processes x 1")
        r = drain_once(ctx, leasectl, n, ctx.sizes.drain_jobs, processes=n, ready_first=True)
        r["loadavg"] = loadavg()
        log(f"  -> {r['jobs_per_s']} jobs/s{' (partial)' if r['partial'] else ''}")
        out[str(n)] = r
    return out


def render(fig: dict[str, Any]) -> str:
    levels = sorted({int(c) for s in fig["systems"].values() for c in s["runs"]})
    rows = []
    for name, s in fig["systems"].items():
        row: list[Any] = [f"{name} {s.get('version', '')}"]
        for c in levels:
            r = s["runs"].get(str(c))
            if r is None:
                row.append("-")
                continue
            partial = any(x["partial"] for x in r["runs"])
            row.append(f"{r['median_jobs_per_s']:,.0f}{'*' if partial else ''}")
        rows.append(row)
    title = (
        f"drain: {fig['jobs']:,} no-op jobs, median of {fig['repeats']} "
        "(jobs/s, steady: the middle 80% of the finishes)"
    )
    text = table(title, ["system", *[f"c={c}" for c in levels]], rows)
    spans = []
    for name, s in fig["systems"].items():
        cells = []
        for c in levels:
            r = s["runs"].get(str(c))
            rates = [x.get("first_to_last_jobs_per_s") for x in r["runs"]] if r else []
            known = [v for v in rates if v is not None]
            cells.append(f"{median(known):,.0f}" if known else "-")
        spans.append([f"{name} {s.get('version', '')}", *cells])
    text += table(
        "drain: the same runs from the first to the last finish (jobs/s, median)",
        ["system", *[f"c={c}" for c in levels]],
        spans,
    )
    runs = [x for s in fig["systems"].values() for r in s["runs"].values() for x in r["runs"]]
    if any(x["partial"] for x in runs):
        text += (
            f"\n\\* partial: at least one run was cut at the {fig.get('timeout_s', '?')} s "
            "timeout; its rate is over what it drained by then.\n"
        )
    for name, why in fig.get("skipped", {}).items():
        text += f"\nskipped {name}: {why}\n"
    single = fig.get("single") or {}
    if single:
        text += "\n" + table(
            "single-job mode: leasectl, N processes x concurrency 1 (jobs/s)",
            ["processes", "jobs/s"],
            [
                [n, f"{r['jobs_per_s']:,.0f}{'*' if r['partial'] else ''}"]
                for n, r in single.items()
            ],
        )
    return text
