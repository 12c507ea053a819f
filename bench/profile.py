"""Profile one leasectl worker process while it drains, with py-spy (``pip install py-spy``).

    python -m bench.profile [--dsn DSN] [--durable] [--concurrency 50] [--processes N]
                            [--jobs 100000] [--seconds 8] [--handler MODULE:FN]

Starts the same worker processes as the `drain` benchmark on a fresh database (``--processes
N``: N processes at ``--concurrency`` each, e.g. ``--processes 16 --concurrency 1`` for
single-job mode), attaches py-spy to the first one once jobs flow, and prints where its CPU
time goes (own time per function, and time under each leasectl function), plus the CPU split
between the workers and the server, each worker thread's CPU, and the server side over the
same window: what the database's backends were doing (pg_stat_activity sampled every 10 ms:
on CPU, or the wait event), commits and WAL flushes per job (pg_stat_database, pg_stat_wal:
how many commits one flush carried, the group commit).
The collapsed stacks are kept in bench/results/ for flame graphs.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.common import BENCH, QUICK, Ctx, Proc, ServerCpu, cpu_seconds, log, server_dsn, stop
from bench.drain import split
from bench.transaction import variant


def frames(line: str) -> tuple[list[str], int]:
    stack, _, count = line.rpartition(" ")
    return stack.split(";"), int(count)


def summarize(raw: Path, top: int = 20) -> str:
    own: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, n = frames(line)
        total += n
        own[stack[-1]] += n
        for f in set(stack):
            if "leasectl/" in f or "psycopg" in f:
                under[f] += n
    out = [f"{total} samples"]
    out.append("\nown time (leaf frames):")
    out += [f"  {n / total:6.1%}  {f}" for f, n in own.most_common(top)]
    out.append("\ntime under (leasectl and psycopg frames):")
    out += [f"  {n / total:6.1%}  {f}" for f, n in under.most_common(top)]
    return "\n".join(out)


class ServerSampler:
    """What the benchmark database's backends do, sampled every ``every`` seconds from
    pg_stat_activity on a connection of its own: "CPU" (active, no wait event), or the wait
    event of an active backend, or "idle" (a client's turn: between statements)."""

    def __init__(self, dsn: str, every: float = 0.01) -> None:
        self.dsn = dsn
        self.every = every
        self.samples: collections.Counter[str] = collections.Counter()
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            query = (
                "SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ':' || "
                "wait_event, 'CPU') ELSE coalesce(state, '?') END FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
            while not self._stop.wait(self.every):
                self.rounds += 1
                for (what,) in conn.execute(query).fetchall():
                    self.samples[what] += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def render(self) -> str:
        total = sum(self.samples.values()) or 1
        out = [f"server backends over {self.rounds} samples (share of backend-samples):"]
        out += [f"  {n / total:6.1%}  {w}" for w, n in self.samples.most_common(12)]
        return "\n".join(out)


def server_counters(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """Cumulative counters: this database's commits; the server's WAL records, full-page
    images and bytes (pg_stat_wal) and its WAL flushes (pg_stat_wal's wal_sync up to
    PostgreSQL 17, pg_stat_io's WAL fsyncs from 18 on)."""
    out: dict[str, float] = {}
    row = conn.execute(
        "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    if row:
        out["commits"], out["rollbacks"] = float(row[0]), float(row[1])
    wal = conn.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
    if wal:
        out.update(zip(("wal_records", "wal_fpi", "wal_bytes"), map(float, wal), strict=True))
    if conn.info.server_version >= 180000:
        query = "SELECT sum(fsyncs) FROM pg_stat_io WHERE object = 'wal'"
    else:
        query = "SELECT wal_sync FROM pg_stat_wal"
    try:
        flushes = conn.execute(query).fetchone()
    except psycopg.Error:  # (autocommit: the connection stays usable)
        flushes = None
    if flushes and flushes[0] is not None:
        out["wal_flushes"] = float(flushes[0])
    return out


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process (thread id -> seconds)."""
    try:
        return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
    except psutil.Error:
        return {}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn")
    p.add_argument("--durable", action="store_true", help="embedded server: fsync etc. on")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--processes", type=int, help="N processes at --concurrency each")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--handler", default="bench.handlers:noop", help="module:function")
    a = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy")
    with server_dsn(a.dsn, a.durable) as dsn:
        ctx = Ctx(dsn=dsn, sizes=QUICK, peers=())
        out_dir = BENCH / "results"
        out_dir.mkdir(exist_ok=True)
        label = f"p{a.processes}c{a.concurrency}" if a.processes else f"c{a.concurrency}"
        if a.handler != "bench.handlers:noop":
            label += "-" + a.handler.rpartition(":")[2]
        raw = out_dir / f"profile-leasectl-{label}.txt"
        procs: list[Proc] = []
        system = variant(a.handler)
        db = ctx.fresh_db("profile")
        try:
            system.prepare(db, a.jobs)
            nproc, per = (a.processes, a.concurrency) if a.processes else split(a.concurrency)
            cpu = ServerCpu(db)
            sampler = ServerSampler(db)
            with psycopg.connect(db, autocommit=True) as conn:
                procs = [Proc(system.worker_argv(db, per)) for _ in range(nproc)]
                while True:
                    row = conn.execute(system.remaining_sql).fetchone()
                    if row and row[0] < a.jobs:
                        break
                    time.sleep(0.05)
                cpu.start()
                before = cpu_seconds([x.pid for x in procs])
                threads_before = thread_cpu(procs[0].pid)
                counters_before = server_counters(conn)
                sampler.start()
                started = time.perf_counter()
                left0 = row[0] if row else 0
                subprocess.run(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(procs[0].pid),
                        "--duration",
                        str(a.seconds),
                        "--rate",
                        "200",
                        "--format",
                        "raw",
                        "--output",
                        str(raw),
                        "--nonblocking",
                    ],
                    check=True,
                    capture_output=True,
                )
                elapsed = time.perf_counter() - started
                sampler.stop()
                counters_after = server_counters(conn)
                threads_after = thread_cpu(procs[0].pid)
                after = cpu_seconds([x.pid for x in procs])
                server_cpu = cpu.stop()
                row = conn.execute(system.remaining_sql).fetchone()
                left1 = row[0] if row else 0
            workers = sum(after.get(pid, 0.0) - before.get(pid, 0.0) for pid in after)
            jobs = left0 - left1
            print(f"{nproc} processes x concurrency {per}, {elapsed:.1f} s window")
            print(f"jobs/s in the window: {jobs / elapsed:,.0f}")
            server_s = server_cpu or 0.0
            print(
                f"CPU over the window: workers {workers / elapsed:.2f} cores, "
                f"server {server_s / elapsed:.2f} cores (of 2); per job: workers "
                f"{workers / max(jobs, 1) * 1e6:.0f} us, "
                f"server {server_s / max(jobs, 1) * 1e6:.0f} us"
            )
            per_thread = sorted(
                ((threads_after[t] - threads_before.get(t, 0.0), t) for t in threads_after),
                reverse=True,
            )
            print(
                "threads of the first worker (CPU s over the window; the main thread is the "
                "dispatcher): "
                + ", ".join(f"{'main' if t == procs[0].pid else t}={s:.2f}" for s, t in per_thread)
            )
            delta = {k: counters_after[k] - counters_before.get(k, 0.0) for k in counters_after}
            if jobs and delta:
                print(
                    "server per job: "
                    + ", ".join(f"{k} {v / jobs:.3f}" for k, v in delta.items())
                    + (
                        f"; commits per WAL flush {delta['commits'] / delta['wal_flushes']:.2f}"
                        if delta.get("wal_flushes")
                        else ""
                    )
                )
            print(sampler.render())
            print(summarize(raw))
            log(f"collapsed stacks in {raw}")
        finally:
            stop(procs)
            ctx.drop_db(db)


if __name__ == "__main__":
    main()
