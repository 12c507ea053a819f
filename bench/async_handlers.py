"""Drain with an ``async def`` no-op handler (tasks of one event loop per worker: uvloop, and
asyncio's own loop) beside the threaded no-op handler (``--concurrency`` handler threads per
worker).

Each run is ``bench.drain``'s (a fresh database, N jobs pre-enqueued, ``leasectl worker``
processes: 2 processes x 25 at concurrency 50; the steady rate over the middle 80% of
``finished_at``); the two handlers alternate run by run::

    python -m bench.async_handlers [--dsn DSN] [--jobs 20000] [--concurrency 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import Ctx, Sizes, loadavg, log, median, server_dsn, table
from bench.drain import System, drain_once
from bench.transaction import variant


def on_loop(system: System, loop: str) -> System:
    """The system's workers with ``--event-loop loop``."""
    base = system.worker_argv
    system.worker_argv = lambda dsn, k: [*base(dsn, k), "--event-loop", loop]
    return system


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.async_handlers", description=__doc__)
    p.add_argument("--dsn", default=None, help="default: a temporary embedded server")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, nargs="+", default=[50])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    variants = {
        "noop (threads)": variant("bench.handlers:noop"),
        "noop_async (uvloop)": on_loop(variant("bench.handlers:noop_async"), "uvloop"),
        "noop_async (asyncio loop)": on_loop(variant("bench.handlers:noop_async"), "asyncio"),
    }
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        name: {c: [] for c in a.concurrency} for name in variants
    }
    with server_dsn(a.dsn) as dsn:
        ctx = Ctx(dsn, Sizes(drain_jobs=a.jobs, drain_timeout=a.timeout), ())
        for r in range(a.repeats):
            for c in a.concurrency:
                for name, system in variants.items():
                    result = drain_once(ctx, system, c, a.jobs)
                    result["loadavg"] = loadavg()
                    runs[name][c].append(result)
                    log(
                        f"run {r + 1}: {name} c={c}: {result['jobs_per_s']} jobs/s, "
                        f"worker CPU {result['worker_cpu_s']} s"
                    )
    rows = []
    for name, by_c in runs.items():
        for c, results in by_c.items():
            rates = [x["jobs_per_s"] for x in results]
            cpu = [x["worker_cpu_s"] for x in results]
            each = " ".join(f"{x:,.0f}" for x in rates)
            rows.append([name, str(c), f"{median(rates):,.0f}", each, f"{median(cpu):.2f}"])
    title = f"drain: {a.jobs} jobs, median of {a.repeats} (jobs/s)"
    print(table(title, ["handler", "concurrency", "median jobs/s", "runs", "worker CPU s"], rows))
    print(f"{a.jobs} jobs per run; load average at the end {loadavg()}")
    if a.json is not None:
        a.json.write_text(json.dumps(runs, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
