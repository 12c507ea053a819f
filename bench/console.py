"""Console at scale: one full console refresh on tables with N completed jobs plus 20k pending,
2k processing and 500 expired leases (seeded by bench/explain.py's routine).

The refresh is the console's ``Panels.snapshot(None, limit)`` (all the console's queries, in
its one transaction, read by ``leasectl.db.console.ConsoleReads``). The render
is the console app's own ``MainScreen.refresh_view(full=True)`` plus one idle cycle of a headless
160x50 Textual app fed that snapshot, when the console package is importable: "render" when the
poll brings the same rows again (the panels update only changed cells), "rows changed" when
every panel's rows changed (alternating with the rows reversed: every visible cell changes).

The same refresh against a growing Pending backlog (10k / 1M / 10M), with `leasectl status`,
before and after a change: ``bench/backlog.py``.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.common import Ctx, leasectl_init, log, percentile, scalar, table
from bench.explain import seed
from leasectl.console.panels import Panels
from leasectl.core.throughput import GRACE
from leasectl.db.connection import Database
from leasectl.db.console import ConsoleReads

LIMIT = 100
PENDING, PROCESSING, EXPIRED = 20_000, 2_000, 500


def time_calls(fn: Callable[[], Any], runs: int) -> list[float]:
    for _ in range(3):
        fn()  # warm: connection, plans, caches
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


CONSOLE_QUERIES = (
    "console_counts",
    "console_throughput",
    "console_pending",
    "console_processing",
    "console_stuck",
    "console_failed",
    "status_finished_estimate",
    "status_owners",
)


def query_times(dsn: str, runs: int) -> dict[str, float]:
    """p50 ms of each query a refresh runs, one by one (where the refresh time goes)."""
    from leasectl.db import sql as queries

    params: dict[str, Any] = {
        "queue": None,
        "owner": None,
        "owner_end": None,
        "job_id": None,
        "limit": LIMIT,
        "risk_window": timedelta(seconds=10),
        "minutes": 30,
        "since": None,  # console_throughput: a refresh's own count (set per call below)
        "grace": GRACE,
        "schema": "leasectl",
        "window": timedelta(hours=1),
        "failed_scan": 5000,
        "budget": 6000,
        "group_limit": 1000,
    }
    out = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in CONSOLE_QUERIES:
            try:
                query = queries.get(name).render("leasectl")
            except KeyError:
                continue
            if name == "console_throughput":
                # A running console counts what finished since its last refresh (1 s ago) and
                # the unsettled GRACE before it; its first refresh counts the whole window.
                out[name + " (first)"] = round(
                    percentile(time_calls(lambda q=query: conn.execute(q, params), runs), 50), 2
                )

                def since() -> dict[str, Any]:
                    return {**params, "since": datetime.now(UTC) - GRACE - timedelta(seconds=1)}

                times = time_calls(lambda q=query: conn.execute(q, since()).fetchall(), runs)
            else:
                times = time_calls(lambda q=query: conn.execute(q, params).fetchall(), runs)
            out[name] = round(percentile(times, 50), 2)
    return out


def changed(snapshot: Any) -> Any:
    """The snapshot with every panel's rows in reverse order: each table must replace its rows."""
    from dataclasses import replace

    return replace(
        snapshot,
        pending=snapshot.pending[::-1],
        processing=snapshot.processing[::-1],
        stuck=snapshot.stuck[::-1],
        owners=snapshot.owners[::-1],
    )


def render_times(snapshot: Any, runs: int) -> dict[str, list[float]] | str:
    """ms per full render by the real console app, headless, or why not: ``same``, the poll
    brought the same rows again; ``changed``, every panel's rows changed (alternating order)."""
    try:
        from leasectl.console.app import ConsoleApp
        from leasectl.console.source import StaticSource
    except Exception as exc:
        return f"console not importable: {type(exc).__name__}: {exc}"

    async def go() -> dict[str, list[float]]:
        app = ConsoleApp(StaticSource(snapshot), refresh=timedelta(hours=1))
        other = changed(snapshot)
        out: dict[str, list[float]] = {"same": [], "changed": []}
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.5)
            for kind, snaps in (("same", [snapshot]), ("changed", [other, snapshot])):
                for i in range(runs + 3):
                    app.snapshot = snaps[i % len(snaps)]
                    start = time.perf_counter()
                    app.main.refresh_view(full=True)
                    await pilot.pause()
                    out[kind].append((time.perf_counter() - start) * 1000)
                out[kind] = out[kind][3:]
        return out

    try:
        return asyncio.run(go())
    except Exception as exc:
        return f"render failed: {type(exc).__name__}: {exc}"


def run(ctx: Ctx) -> dict[str, Any]:
    sizes = ctx.sizes
    fig: dict[str, Any] = {"runs": sizes.console_runs, "limit": LIMIT, "sizes": {}}
    for n in sizes.console_sizes:
        dsn = ctx.fresh_db("console")
        try:
            leasectl_init(dsn)
            log(f"console: seeding {n:,} completed + {PENDING:,}/{PROCESSING:,}/{EXPIRED}")
            started = time.perf_counter()
            seed(dsn, n, PENDING, PROCESSING, EXPIRED)
            seeded = time.perf_counter() - started
            with Database.connect(dsn, "leasectl", max_size=2) as db:
                panels = Panels(ConsoleReads(db))
                what = "Panels.snapshot"
                fn = functools.partial(panels.snapshot, None, LIMIT)
                times = time_calls(fn, sizes.console_runs)
                entry: dict[str, Any] = {
                    "refresh": what,
                    "refresh_p50_ms": round(percentile(times, 50), 2),
                    "refresh_p99_ms": round(percentile(times, 99), 2),
                    "table_bytes": scalar(dsn, "SELECT pg_total_relation_size('leasectl.jobs')"),
                    "seed_s": round(seeded, 1),
                }
                entry["query_p50_ms"] = query_times(dsn, sizes.console_runs)
                rendered = render_times(fn(), sizes.console_runs)
                if isinstance(rendered, str):
                    entry["render"] = rendered
                else:
                    entry["render_p50_ms"] = round(percentile(rendered["same"], 50), 2)
                    entry["render_p99_ms"] = round(percentile(rendered["same"], 99), 2)
                    changed_ms = rendered["changed"]
                    entry["render_changed_p50_ms"] = round(percentile(changed_ms, 50), 2)
                    entry["render_changed_p99_ms"] = round(percentile(changed_ms, 99), 2)
            fig["sizes"][str(n)] = entry
            log(f"  -> refresh p50 {entry['refresh_p50_ms']} ms, p99 {entry['refresh_p99_ms']} ms")
        finally:
            ctx.drop_db(dsn)
    done = sorted(int(k) for k in fig["sizes"])
    if len(done) >= 2:
        lo, hi = fig["sizes"][str(done[0])], fig["sizes"][str(done[-1])]
        fig["ratio"] = {
            "of": f"{done[-1]:,} / {done[0]:,}",
            "refresh_p50": round(hi["refresh_p50_ms"] / lo["refresh_p50_ms"], 2),
        }
    return fig


def render(fig: dict[str, Any]) -> str:
    rows = []
    for n, e in sorted(fig["sizes"].items(), key=lambda kv: int(kv[0])):
        rows.append(
            [
                int(n),
                e["refresh_p50_ms"],
                e["refresh_p99_ms"],
                e.get("render_p50_ms", "-"),
                e.get("render_p99_ms", "-"),
                e.get("render_changed_p50_ms", "-"),
                e.get("render_changed_p99_ms", "-"),
                f"{e['table_bytes'] / 2**20:,.0f} MiB",
            ]
        )
    first = next(iter(fig["sizes"].values()), {})
    title = f"console: one refresh ({first.get('refresh', '?')}), {fig['runs']} runs, ms"
    text = table(
        title,
        [
            "completed jobs",
            "refresh p50",
            "refresh p99",
            "render p50",
            "render p99",
            "render, rows changed p50",
            "p99",
            "jobs table",
        ],
        rows,
    )
    if "ratio" in fig:
        text += f"\nratio {fig['ratio']['of']} (refresh p50): {fig['ratio']['refresh_p50']}\n"
    names = [
        n
        for n in (*CONSOLE_QUERIES, "console_throughput (first)")
        if any(n in e.get("query_p50_ms", {}) for e in fig["sizes"].values())
    ]
    if names:
        qrows = [
            [
                n,
                *[
                    e.get("query_p50_ms", {}).get(n)
                    for _, e in sorted(fig["sizes"].items(), key=lambda kv: int(kv[0]))
                ],
            ]
            for n in names
        ]
        heads = [f"{int(k):,}" for k in sorted(fig["sizes"], key=int)]
        text += table("console: each refresh query alone, p50 ms", ["query", *heads], qrows)
    why = {e["render"] for e in fig["sizes"].values() if "render" in e}
    for w in why:
        text += f"\nrender not measured: {w}\n"
    return text
