"""Drain with handlers that complete in their own transaction (``ctx.transaction()``) beside
the no-op handler, whose jobs complete on the worker's round trip.

Each run is ``bench.drain``'s (a fresh database, N jobs pre-enqueued, ``leasectl worker``
processes, the steady rate over the middle 80% of ``finished_at``). With ``--baseline ROOT``,
the no-op drain also runs on the leasectl package at ROOT (an older checkout), interleaved run
by run with the others, to see that handlers which do not use ``ctx.transaction()`` pay nothing
for it::

    python -m bench.transaction [--dsn DSN] [--jobs 20000] [--concurrency 1 10] [--repeats 3]
        [--baseline /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import Ctx, Sizes, loadavg, log, median, server_dsn, table
from bench.drain import System, drain_once, leasectl_system


def variant(handler: str, root: Path | None = None) -> System:
    """leasectl's drain system with another handler; with ``root``, its workers run the
    leasectl package found there."""
    system = leasectl_system()
    base = system.worker_argv

    def argv(dsn: str, k: int) -> list[str]:
        args = [handler if a == "bench.handlers:noop" else a for a in base(dsn, k)]
        if root is None:
            return args
        start = (
            "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
            "runpy.run_module('leasectl', run_name='__main__', alter_sys=True)"
        )
        return [args[0], "-c", start, str(root), *args[3:]]

    system.worker_argv = argv
    return system


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.transaction", description=__doc__)
    p.add_argument("--dsn", default=None, help="default: a temporary embedded server")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 10])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--baseline", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    variants = {
        "noop": variant("bench.handlers:noop"),
        "in_transaction": variant("bench.handlers:in_transaction"),
    }
    if a.baseline is not None:
        variants["noop (baseline)"] = variant("bench.handlers:noop", a.baseline.resolve())
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        name: {c: [] for c in a.concurrency} for name in variants
    }
    with server_dsn(a.dsn) as dsn:
        sizes = Sizes(drain_jobs=a.jobs, drain_timeout=a.timeout)
        ctx = Ctx(dsn, sizes, ())
        for r in range(a.repeats):
            for c in a.concurrency:
                for name, system in variants.items():
                    result = drain_once(ctx, system, c, a.jobs)
                    result["loadavg"] = loadavg()
                    runs[name][c].append(result)
                    log(f"run {r + 1}: {name} c={c}: {result['jobs_per_s']} jobs/s")
    rows = []
    for name, by_c in runs.items():
        for c, results in by_c.items():
            rates = [x["jobs_per_s"] for x in results]
            each = " ".join(f"{x:,.0f}" for x in rates)
            rows.append([name, str(c), f"{median(rates):,.0f}", each])
    title = f"drain: {a.jobs} jobs, median of {a.repeats} (jobs/s)"
    print(table(title, ["handler", "concurrency", "median jobs/s", "runs"], rows))
    print(f"{a.jobs} jobs per run; load average at the end {loadavg()}")
    if a.json is not None:
        a.json.write_text(json.dumps(runs, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
