"""Held transaction: leasectl's drain while another session of the same database keeps a
transaction open and idle (``BEGIN; SELECT txid_current();``) for the whole run, holding back
the xmin horizon so that no dead row version can be pruned or vacuumed; against a clean run.

Each run is a fresh database, the same jobs and concurrency; the median of ``repeats`` runs.
Then the dead row versions per table a held horizon leaves at a steady job rate, and the time
back to the baseline after it is released (bench/held_bloat.py).
"""

from __future__ import annotations

from typing import Any

from bench import held_bloat
from bench.common import Ctx, log, median, table
from bench.drain import drain_once, leasectl_system


def run(ctx: Ctx) -> dict[str, Any]:
    sizes = ctx.sizes
    system = leasectl_system()
    fig: dict[str, Any] = {
        "jobs": sizes.held_jobs,
        "concurrency": sizes.held_concurrency,
        "repeats": sizes.repeats,
    }
    for label, hold in (("clean", False), ("held", True)):
        runs = []
        for i in range(sizes.repeats):
            log(f"held_xact: {label} run {i + 1}/{sizes.repeats}")
            r = drain_once(ctx, system, sizes.held_concurrency, sizes.held_jobs, hold_xact=hold)
            log(f"  -> {r['jobs_per_s']} jobs/s")
            runs.append(r)
        fig[label] = {"median_jobs_per_s": median([r["jobs_per_s"] for r in runs]), "runs": runs}
    clean = fig["clean"]["median_jobs_per_s"]
    fig["ratio"] = round(fig["held"]["median_jobs_per_s"] / clean, 3) if clean else None
    fig["bloat"] = held_bloat.run(ctx)
    return fig


def render(fig: dict[str, Any]) -> str:
    rows = [
        ["clean", fig["clean"]["median_jobs_per_s"]],
        ["transaction held open", fig["held"]["median_jobs_per_s"]],
        ["held / clean", fig["ratio"]],
    ]
    title = (
        f"held_xact: drain of {fig['jobs']:,} jobs at concurrency {fig['concurrency']}, "
        f"median of {fig['repeats']} (jobs/s)"
    )
    out = table(title, ["run", "jobs/s"], rows)
    return out + (held_bloat.render(fig["bloat"]) if "bloat" in fig else "")
