"""Single-job mode against the raw single-row patterns, side by side, repeated.

    python -m bench.single [--dsn DSN | --durable] [--clients 1 2 4 16] [--jobs 20000]
                           [--repeats 3] [--output bench/results-single.json]

For each N, three systems drain the same number of jobs from a fresh database of the leasectl
schema on one server: the raw single-row pattern (`bench/pgbench/claim_one.sql`, N pgbench
clients), the same with the attempt history leasectl keeps (`claim_one_history.sql`), and
leasectl's single-job mode (N `leasectl worker` processes at concurrency 1, started and ready
before the jobs are seeded, as `drain` runs it). The systems and the N take turns round by
round, the order of the systems rotating, so that a drift of the machine falls on all alike;
each figure is the median over ``--repeats`` rounds, every run kept. ``python -m bench.run``
runs it too (``--only single``), at its own sizes.

The rates: a pgbench run's completed jobs per second (``-t``, no initial connection time, as
`limit`); a leasectl run's steady rate (the middle 80% of its finishes, as `drain`). The
`drain` benchmark's single-job figures are one run each; this is the comparison the
single-job targets are judged on.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import BENCH, Ctx, Sizes, loadavg, log, median, server_dsn, table
from bench.drain import drain_once, leasectl_system
from bench.limit import drain_raw
from bench.run import machine

RAW = {"raw single": "claim_one.sql", "raw single+history": "claim_one_history.sql"}
LEASECTL = "leasectl N x 1"
SYSTEMS = (*RAW, LEASECTL)
RESULTS = BENCH / "results-single.json"


def run(ctx: Ctx) -> dict[str, Any]:
    """As part of ``bench.run`` (``--only single``): limit's client counts, a fifth of the drain's
    jobs per run (20,000 at full size), the suite's repeats."""
    sizes = ctx.sizes
    return compare(ctx, sizes.limit_clients, max(1, sizes.drain_jobs // 5), sizes.repeats)


def compare(ctx: Ctx, clients: tuple[int, ...], jobs: int, repeats: int) -> dict[str, Any]:
    leasectl = leasectl_system()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {str(n): [] for n in clients} for s in SYSTEMS
    }
    for i in range(repeats):
        for k, n in enumerate(clients):
            turn = (i + k) % len(SYSTEMS)
            for system in SYSTEMS[turn:] + SYSTEMS[:turn]:
                log(f"single: round {i + 1}/{repeats}, N={n}, {system}")
                if system == LEASECTL:
                    r = drain_once(ctx, leasectl, n, jobs, processes=n, ready_first=True)
                else:
                    r = drain_raw(ctx, RAW[system], n, jobs)
                r["loadavg"] = loadavg()
                log(f"  -> {r['jobs_per_s']} jobs/s")
                runs[system][str(n)].append(r)
    figures: dict[str, Any] = {"jobs": jobs, "repeats": repeats, "systems": {}}
    for system, by_n in runs.items():
        figures["systems"][system] = {
            n: {"median_jobs_per_s": median([r["jobs_per_s"] for r in rs]), "runs": rs}
            for n, rs in by_n.items()
        }
    return figures


def render(fig: dict[str, Any]) -> str:
    systems = fig["systems"]
    rows = []
    for n in systems[LEASECTL]:
        med = {s: systems[s][n]["median_jobs_per_s"] for s in SYSTEMS}
        each = {
            s: ", ".join(f"{r['jobs_per_s']:,.0f}" for r in systems[s][n]["runs"]) for s in SYSTEMS
        }
        ours = med[LEASECTL]
        rows.append(
            [
                n,
                f"{med['raw single']:,.0f} ({each['raw single']})",
                f"{med['raw single+history']:,.0f} ({each['raw single+history']})",
                f"{ours:,.0f} ({each[LEASECTL]})",
                f"{ours / med['raw single']:.0%}" if med["raw single"] else "-",
                f"{ours / med['raw single+history']:.0%}" if med["raw single+history"] else "-",
            ]
        )
    return table(
        f"single-job mode, {fig['jobs']:,} jobs per run, median of {fig['repeats']} "
        "(each run in brackets), jobs/s",
        ["N", "raw single", "raw single+history", LEASECTL, "of single", "of single+history"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.single", description=__doc__.split("\n")[0])
    p.add_argument("--dsn", help="server to benchmark (default: a temporary embedded server)")
    p.add_argument("--durable", action="store_true", help="the embedded server, fsync etc. on")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 16])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120.0, help="a leasectl run's cut, seconds")
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.durable and args.dsn:
        p.error("--durable is for the embedded server; a --dsn server runs as it is configured")
    sizes = dataclasses.replace(Sizes(), drain_timeout=args.timeout)
    with server_dsn(args.dsn, args.durable) as dsn:
        ctx = Ctx(dsn=dsn, sizes=sizes, peers=())
        started = datetime.datetime.now(datetime.UTC)
        results: dict[str, Any] = {
            "machine": machine(dsn, args.dsn is None),
            "command": " ".join(["python -m bench.single", *(argv or sys.argv[1:])]),
            "single": compare(ctx, tuple(args.clients), args.jobs, args.repeats),
        }
    took = datetime.datetime.now(datetime.UTC) - started
    results["seconds"] = round(took.total_seconds())
    print(render(results["single"]), flush=True)
    args.output.write_text(json.dumps(results, indent=2, default=str) + "\n")
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
