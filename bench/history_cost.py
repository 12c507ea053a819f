"""What the per-minute history (migration 20) costs the worker: the drain, A/B, interleaved.

    python -m bench.history_cost DSN [--rounds 3] [--jobs 20000] [--single-jobs 5000]

Each round drains in fresh databases, the two variants taking turns (the order alternating by
round): *after*, the schema as shipped; *before*, the same schema with the history's writes
taken out (its two triggers dropped and migration 11's ``counters_from_attempts`` put back, so
the counters are kept as before migration 20). The drain is ``bench/drain.py``'s: the ``leasectl
worker`` command, no-op handler, its steady rate (the middle 80 % of the finishes), at c=50 (2
processes x 25) and in single-job mode (1 process at concurrency 1, ready before the jobs are
seeded). Prints every run and the medians; on a shared machine the spread is the figure to read.
"""

from __future__ import annotations

import argparse
import re
import statistics
from typing import Any

import psycopg

from bench.common import QUICK, Ctx, leasectl_init, log
from bench.drain import System, drain_once, leasectl_system
from leasectl.db import sql as queries

_COUNTERS_FN = re.compile(
    r"CREATE FUNCTION \{schema\}\.counters_from_attempts\(\).*?\n\$\$;", re.DOTALL
)


def strip_history(dsn: str) -> None:
    """The schema as before migration 20's writes: no history triggers, the counters' trigger
    function as migration 11 made it."""
    eleven = next(m for m in queries.migrations() if m.version == 11).render("leasectl")
    found = _COUNTERS_FN.search(eleven)
    assert found, "migration 11's counters_from_attempts not found"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER history_from_jobs ON leasectl.jobs")
        conn.execute("DROP TRIGGER history_from_attempts_opened ON leasectl.job_attempts")
        conn.execute(found.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))


def variant(before: bool) -> System:
    system = leasectl_system()
    if not before:
        return system
    seed, init = system.seed, system.init
    assert seed is not None and init is not None

    def init_before(dsn: str) -> None:
        leasectl_init(dsn)
        strip_history(dsn)

    def prepare_before(dsn: str, jobs: int) -> None:
        init_before(dsn)
        seed(dsn, jobs)

    system.name = "leasectl_nohist"
    system.init = init_before
    system.prepare = prepare_before
    return system


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per c=50 drain")
    p.add_argument("--single-jobs", type=int, default=5_000, help="jobs per single-job drain")
    a = p.parse_args()
    sizes = QUICK.__class__(**{**QUICK.__dict__, "drain_timeout": 120.0})
    ctx = Ctx(a.dsn, sizes, ())
    runs: dict[str, dict[str, list[float]]] = {
        mode: {"before": [], "after": []} for mode in ("c=50", "single")
    }
    cpu: dict[str, dict[str, list[float]]] = {
        mode: {"before": [], "after": []} for mode in ("c=50", "single")
    }
    for r in range(a.rounds):
        order = [("before", True), ("after", False)]
        for name, before in order if r % 2 == 0 else order[::-1]:
            system = variant(before)
            for mode in ("c=50", "single"):
                kwargs: dict[str, Any] = (
                    {} if mode == "c=50" else {"processes": 1, "ready_first": True}
                )
                jobs = a.jobs if mode == "c=50" else a.single_jobs
                res = drain_once(ctx, system, 50 if mode == "c=50" else 1, jobs, **kwargs)
                runs[mode][name].append(res["jobs_per_s"])
                per_job = (res["worker_cpu_s"] + (res["server_cpu_s"] or 0)) / res["finished"]
                cpu[mode][name].append(per_job * 1e6)
                log(
                    f"round {r + 1} {mode} {name}: {res['jobs_per_s']} jobs/s, "
                    f"{per_job * 1e6:.1f} µs CPU/job (worker+server), partial={res['partial']}"
                )
    for mode in runs:
        b, af = (statistics.median(runs[mode][k]) for k in ("before", "after"))
        cb, ca = (statistics.median(cpu[mode][k]) for k in ("before", "after"))
        print(
            f"{mode}: before {b:.0f} jobs/s, after {af:.0f} jobs/s ({(af - b) / b:+.1%}); "
            f"CPU per job {cb:.1f} -> {ca:.1f} µs ({(ca - cb) / cb:+.1%}); medians of "
            f"{a.rounds}; runs before {runs[mode]['before']}, after {runs[mode]['after']}"
        )


if __name__ == "__main__":
    main()
