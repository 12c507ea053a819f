"""Profile one leasectl worker process while it drains, with py-spy (``pip install py-spy``).

    python -m bench.profile [--dsn DSN] [--concurrency 50] [--jobs 100000] [--seconds 8]

Starts the same worker processes as the `drain` benchmark on a fresh database, attaches py-spy
to the first one once jobs flow, and prints where its CPU time goes (own time per function,
and time under each leasectl function), plus the CPU split between the workers and the server.
The collapsed stacks are kept in bench/results/ for flame graphs.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.common import BENCH, QUICK, Ctx, Proc, ServerCpu, cpu_seconds, log, stop
from bench.drain import leasectl_system, split


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn")
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--seconds", type=int, default=8)
    a = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy")
    server = None
    dsn = a.dsn
    if dsn is None:
        from leasectl.db.embedded import EmbeddedServer

        server = EmbeddedServer.temporary()
        server.start()
        dsn = server.dsn()
    ctx = Ctx(dsn=dsn, sizes=QUICK, peers=())
    out_dir = BENCH / "results"
    out_dir.mkdir(exist_ok=True)
    raw = out_dir / f"profile-leasectl-c{a.concurrency}.txt"
    procs: list[Proc] = []
    system = leasectl_system()
    db = ctx.fresh_db("profile")
    try:
        system.prepare(db, a.jobs)
        nproc, per = split(a.concurrency)
        cpu = ServerCpu(db)
        with psycopg.connect(db, autocommit=True) as conn:
            procs = [Proc(system.worker_argv(db, per)) for _ in range(nproc)]
            while True:
                row = conn.execute(system.remaining_sql).fetchone()
                if row and row[0] < a.jobs:
                    break
                time.sleep(0.05)
            cpu.start()
            before = cpu_seconds([x.pid for x in procs])
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
            after = cpu_seconds([x.pid for x in procs])
            server_cpu = cpu.stop()
            row = conn.execute(system.remaining_sql).fetchone()
            left1 = row[0] if row else 0
        workers = sum(after.get(pid, 0.0) - before.get(pid, 0.0) for pid in after)
        print(f"concurrency {a.concurrency} ({nproc} x {per}), {elapsed:.1f} s window")
        print(f"jobs/s in the window: {(left0 - left1) / elapsed:,.0f}")
        print(
            f"CPU over the window: workers {workers / elapsed:.2f} cores, "
            f"server {(server_cpu or 0) / elapsed:.2f} cores (of 2)"
        )
        print(summarize(raw))
        log(f"collapsed stacks in {raw}")
    finally:
        stop(procs)
        ctx.drop_db(db)
        if server is not None:
            server.stop(remove=True)


if __name__ == "__main__":
    main()
