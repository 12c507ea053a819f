"""The console on a backlog (the real console against PostgreSQL): the counts of a backlog past
the cap are the planner's estimates and say so (``≈20,502``) in the summary, the panel titles ("N
of M") and the narrow layout's tabs, unless estimated at RECOUNT_CAP or fewer (then counted
again, exactly, as `status` does); a small queue's counts stay exact; the expired leases the
console acts on stay exact."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from textual.pilot import Pilot
from textual.widgets import Static

from leasectl.console.app import ConsoleApp
from leasectl.console.view import ConsoleFilter
from leasectl.core.counts import COUNT_BUDGET, RECOUNT_CAP, approx
from tests.console.test_console_db import drive
from tests.console.test_operator_view import filter_to, summary, titles
from tests.stores import Stores

# Pending past the recount's cap too (below it, the console recounts: tests/integration/
# test_recounts.py); Stuck is never recounted.
BIG_PENDING, BIG_STUCK, EXPIRED = RECOUNT_CAP + 500, COUNT_BUDGET + 200, 3
ALL_PENDING, ALL_STUCK = BIG_PENDING + 2, BIG_STUCK + 1


def within(estimate: int, actual: int, tolerance: float = 0.25) -> bool:
    return abs(estimate - actual) <= tolerance * actual


def seed(sql_conn: psycopg.Connection[Any]) -> None:
    """big: RECOUNT_CAP + 500 due Pending jobs and COUNT_BUDGET + 200 Stuck ones; small: 2
    Pending (one due), 1 Stuck, 3 expired leases."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT 'big', i %% 3, now() - interval '1 second' * i FROM generate_series(1, %s) AS i",
        (BIG_PENDING,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) "
        "SELECT 'big', 'Stuck', now() FROM generate_series(1, %s)",
        (BIG_STUCK,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, run_at) VALUES "
        "('small', now() - interval '5 minutes'), ('small', now() + interval '1 hour')"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) VALUES ('small', 'Stuck', now())"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'small', 'Processing', 1, 'w-1', now() - interval '1 minute' "
        "FROM generate_series(1, %s)",
        (EXPIRED,),
    )
    sql_conn.execute("ANALYZE leasectl.jobs")


def tabs(app: ConsoleApp) -> str:
    return str(app.main.query_one("#tabs", Static).render())


def test_a_backlog_shows_as_an_estimate_and_a_small_queue_exactly(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(sql_conn)
    seen: dict[str, Any] = {}

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        snap = app.snapshot
        assert snap is not None
        counts = snap.counts
        assert counts.pending_estimated and within(counts.pending, ALL_PENDING), counts
        assert counts.due_estimated and within(counts.due, BIG_PENDING + 1), counts
        assert counts.stuck_estimated and within(counts.stuck, ALL_STUCK), counts
        assert (counts.expired, counts.processing) == (EXPIRED, EXPIRED)  # exact
        pending, due, stuck = (approx(n) for n in (counts.pending, counts.due, counts.stuck))
        panel = approx(counts.stuck + EXPIRED)  # exact expired + estimated Stuck
        assert f"Pending {pending} ({due} due" in summary(app)
        assert f"Stuck {stuck}" in summary(app)
        assert titles(app)[0] == f"1 Pending · {pending}"
        assert titles(app)[2] == f"3 Expired & Stuck · {panel} ({EXPIRED} expired + {stuck} Stuck)"
        seen["subtitle"] = str(app.main.query(".panel").first().border_subtitle)
        seen["pending"] = pending
        # The small queue alone: exact counts, "N of M" against the estimated whole.
        await filter_to(app, pilot, ConsoleFilter(queue="small"))
        small = app.snapshot
        assert small is not None
        assert (small.counts.pending, small.counts.pending_capped) == (2, False)
        assert (small.counts.due, small.counts.due_capped) == (1, False)
        assert (small.counts.stuck, small.counts.stuck_capped) == (1, False)
        assert not (small.counts.pending_estimated or small.counts.stuck_estimated)
        assert small.counts.oldest_due_at is not None
        assert "Pending 2 (1 due" in summary(app) and "Stuck 1" in summary(app)
        assert titles(app)[0] == f"1 Pending · 2 of {pending}"
        assert titles(app)[2].startswith(f"3 Expired & Stuck · 4 of {panel} (3 expired + 1 Stuck)")

    drive(db_dsn, scenario)
    assert seen["subtitle"] == f"showing 100 of {seen['pending']}, oldest first"


def test_the_narrow_layout_tabs_show_the_estimate(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.pause()
        text = tabs(app)
        # At 80 columns the other panels' names shorten; every count stays (Failed's too).
        assert re.search(r"1 Pend(ing)? ≈\d", text), text
        assert re.search(r"3 (Expired & Stuck|Exp\+Stuck) ≈\d", text), text
        assert re.search(r"5 Fail(ed)? \d", text), text
        assert len(text.rstrip()) <= 80, text

    drive(db_dsn, scenario, size=(80, 24))
