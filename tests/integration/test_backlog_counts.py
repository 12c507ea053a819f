"""`leasectl status` on a backlog: a queue past its cap shows a lower bound (text ``3000+``,
JSON ``"pending_capped": true``), a small queue stays exact, and ``--check``'s thresholds
still decide correctly, the Stuck count being counted past ``--max-stuck``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from rich.console import Console

from leasectl.core.counts import COUNT_BUDGET, COUNT_FLOOR, RECOUNT_BUDGET, RECOUNT_CAP, approx
from leasectl.db import sql as queries
from leasectl.present.jsonout import status_json
from leasectl.present.status import status_renderables
from tests.integration.test_cli import cli
from tests.stores import Stores

# Two queues share the budget: each is counted up to COUNT_BUDGET / 2.
CAP = COUNT_BUDGET // 2
BIG_DUE, BIG_LATER, BIG_STUCK = CAP + 1000, 200, CAP + 500


def seed_backlog(sql_conn: psycopg.Connection[Any]) -> None:
    """big: CAP + 1000 due Pending jobs (3 priorities), 200 not due yet (priority 5), CAP + 500
    Stuck. small: 3 Pending (one due 10 minutes ago, two due in an hour), 2 Stuck."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT 'big', i %% 3, now() - interval '1 second' * i FROM generate_series(1, %s) AS i",
        (BIG_DUE,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT 'big', 5, now() + interval '1 hour' FROM generate_series(1, %s)",
        (BIG_LATER,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) "
        "SELECT 'big', 'Stuck', now() FROM generate_series(1, %s)",
        (BIG_STUCK,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, run_at) VALUES "
        "('small', now() - interval '10 minutes'), ('small', now() + interval '1 hour'), "
        "('small', now() + interval '1 hour')"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) "
        "SELECT 'small', 'Stuck', now() FROM generate_series(1, 2)"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")


def cells_of(line: str) -> list[str]:
    """A table row's cells, without the box's characters."""
    return [c for c in line.replace("│", " ").replace("┃", " ").split() if c]


def status_doc(dsn: str, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = cli("status", "--json", *args, dsn=dsn)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def within(estimate: int, actual: int, tolerance: float = 0.25) -> bool:
    return abs(estimate - actual) <= tolerance * actual


def test_status_shows_a_big_queue_as_an_estimate_and_a_small_one_exactly(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Past the cap: Stuck is the planner's estimate, marked as such (and as capped); Pending,
    estimated below RECOUNT_CAP, is counted again, exactly."""
    seed_backlog(sql_conn)
    code, doc, _ = status_doc(db_dsn)
    assert code == 0
    by_queue = {q["queue"]: q for q in doc["queues"]}
    big, small = by_queue["big"], by_queue["small"]
    assert big["stuck_capped"] and big["stuck_estimated"]
    assert big["stuck"] > CAP and within(big["stuck"], BIG_STUCK), big["stuck"]
    assert (big["pending"], big["pending_capped"], big["pending_estimated"]) == (
        BIG_DUE + BIG_LATER,
        False,
        False,
    )
    assert (big["due"], big["due_capped"], big["due_estimated"]) == (BIG_DUE, False, False)
    assert big["oldest_due_age_s"] >= BIG_DUE - 60  # the oldest due, from the groups' heads
    assert (small["pending"], small["pending_capped"], small["pending_estimated"]) == (
        3,
        False,
        False,
    )
    assert (small["due"], small["due_capped"], small["due_estimated"]) == (1, False, False)
    assert (small["stuck"], small["stuck_capped"], small["stuck_estimated"]) == (2, False, False)
    assert 590 <= small["oldest_due_age_s"] <= 700
    # A sum with an estimate in it is an estimate.
    totals = doc["totals"]
    assert (totals["pending"], totals["pending_estimated"]) == (BIG_DUE + BIG_LATER + 3, False)
    assert totals["stuck"] == big["stuck"] + 2 and totals["stuck_estimated"]
    assert doc["truncated"] is False

    # The text shows the estimate as one, and says what "≈" means; the small queue stays exact.
    text = cli("status", dsn=db_dsn)
    assert text.returncode == 0, text.stderr
    rows = {cells[0]: cells for cells in map(cells_of, text.stdout.splitlines()) if cells}
    # queue, pending, due, oldest due, proc., expired, stuck, done, failed
    assert rows["big"][1:3] == [str(BIG_DUE + BIG_LATER), str(BIG_DUE)]
    assert rows["big"][6] == f"≈{big['stuck']:,}"
    assert rows["small"][1:3] == ["3", "1"] and rows["small"][6] == "2"
    assert not any("+" in cell or "≈" in cell for cell in rows["small"]), rows["small"]
    assert rows["total"][6].startswith("≈"), rows["total"]
    assert "≈N: past the exact count's cap, the planner's estimate" in " ".join(text.stdout.split())
    assert "N+: at least N" not in text.stdout


def test_past_the_recount_budget_a_pending_count_is_the_estimate(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Recounts share a budget: a queue it does not cover keeps the planner's estimate (and a
    queue estimated above RECOUNT_CAP is never recounted)."""
    seed_backlog(sql_conn)
    params = {
        "queue": None,
        "budget": COUNT_BUDGET,
        "floor": COUNT_FLOOR,
        "stuck_floor": COUNT_FLOOR,
        "group_limit": 1000,
    }
    statement = queries.get("status_live_counts").render("leasectl")
    for recount_cap, recount_budget in ((RECOUNT_CAP, 0), (BIG_DUE, RECOUNT_BUDGET)):
        rows = sql_conn.execute(
            statement,
            {**params, "recount_cap": recount_cap, "recount_budget": recount_budget},
        ).fetchall()
        (big,) = [r for r in rows if r[0] == "big" and r[1] == "Pending"]
        # queue, status, jobs, cap, due, oldest_due_at, expired, truncated, estimate, due_estimate
        assert big[2] == CAP + 1 and big[3] == CAP, big
        assert big[8] is not None and within(big[8], BIG_DUE + BIG_LATER), big
        assert big[9] is not None and big[9] <= big[8], big


def test_without_statistics_a_big_queue_is_a_lower_bound(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """A table never analyzed gives the planner nothing to estimate from: the count stays the
    cap, a lower bound (``3000+``), not a made-up number."""
    seed_backlog(sql_conn)
    sql_conn.execute(
        "DELETE FROM pg_catalog.pg_statistic WHERE starelid = 'leasectl.jobs'::regclass"
    )
    code, doc, _ = status_doc(db_dsn)
    assert code == 0
    big = {q["queue"]: q for q in doc["queues"]}["big"]
    assert (big["pending"], big["pending_capped"], big["pending_estimated"]) == (CAP, True, False)
    text = cli("status", dsn=db_dsn)
    rows = {cells[0]: cells for cells in map(cells_of, text.stdout.splitlines()) if cells}
    assert rows["big"][1] == f"{CAP}+"
    assert "N+: at least N" in text.stdout


def test_an_exact_count_below_the_cap_stays_exact_with_a_queue_filter(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """One queue alone has the whole budget: CAP + 1000 is below it, so it is exact."""
    seed_backlog(sql_conn)
    _, doc, _ = status_doc(db_dsn, "--queue", "big")
    (big,) = doc["queues"]
    assert (big["pending"], big["pending_capped"]) == (BIG_DUE + BIG_LATER, False)
    assert (big["due"], big["due_capped"]) == (BIG_DUE, False)
    assert (big["stuck"], big["stuck_capped"]) == (BIG_STUCK, False)


@pytest.mark.full  # seeds a backlog past the cap
def test_max_stuck_is_decided_by_a_count_taken_past_it(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Above the shared cap, status counts Stuck jobs up to --max-stuck + 1: a queue with more
    than the limit fails the check (its count shown as a lower bound), one with exactly as many
    as the limit passes."""
    seed_backlog(sql_conn)
    # A limit below the cap: the capped count is already more than the limit.
    code, doc, stderr = status_doc(db_dsn, "--max-stuck", "100")
    assert code == 3
    (v,) = [v for v in doc["check"]["violations"] if v["queue"] == "big"]
    assert v["measure"] == "stuck" and v["value"] >= 100
    # A limit above the cap: counted up to the limit + 1, past it; the planner's estimate
    # (never below the count) is the number shown, as one, or without statistics the count
    # as a lower bound.
    code, doc, stderr = status_doc(db_dsn, "--max-stuck", str(CAP + 100))
    assert code == 3
    (v,) = doc["check"]["violations"]
    assert (v["queue"], v["capped"]) == ("big", True)
    shown = approx(v["value"]) if v["estimated"] else f"{v['value']:,}+"
    assert v["value"] >= CAP + 101 and (v["estimated"] or v["value"] == CAP + 101)
    assert f"{shown} Stuck job(s), more than --max-stuck {CAP + 100:,}" in stderr
    # Exactly as many as the limit: counted exactly, no violation.
    code, doc, stderr = status_doc(db_dsn, "--max-stuck", str(BIG_STUCK))
    assert code == 0, stderr
    big = next(q for q in doc["queues"] if q["queue"] == "big")
    assert (big["stuck"], big["stuck_capped"]) == (BIG_STUCK, False)
    # One fewer than there are: a violation by an exact count.
    code, doc, _ = status_doc(db_dsn, "--max-stuck", str(BIG_STUCK - 1))
    assert code == 3
    (v,) = doc["check"]["violations"]
    assert (v["value"], v["capped"]) == (BIG_STUCK, False)


def test_a_queue_with_nothing_due_has_no_oldest_due(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The oldest due is a group's head only when that head is due."""
    seed_backlog(sql_conn)
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) VALUES "
        "('later', 0, now() + interval '1 hour'), ('later', 3, now() + interval '2 hours')"
    )
    _, doc, _ = status_doc(db_dsn, "--queue", "later")
    (later,) = doc["queues"]
    assert (later["pending"], later["due"], later["oldest_due_at"]) == (2, 0, None)


def test_more_groups_than_status_reads_is_said(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Past group_limit (queue, priority) groups some queues are not listed: the report says
    so, in text and JSON, rather than leave them out silently."""
    seed_backlog(sql_conn)
    assert store.ops.status().truncated is False
    report = store.ops.status(group_limit=1)
    assert report.truncated is True
    assert status_json(report)["truncated"] is True
    console = Console(width=200, record=True)
    for part in status_renderables(report):
        console.print(part)
    assert "not every queue is listed; pass --queue" in console.export_text()


def test_the_estimate_is_of_the_queue_the_status_and_the_due_ones_asked_for(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """estimate_jobs (migration 22): the planner's rows for its own predicate, each part of it
    applied; NULL where there are no statistics to estimate from."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, run_at) "
        "SELECT 'a', now() + CASE WHEN i % 2 = 0 THEN interval '1 day' ELSE interval '-1 hour' END "
        "FROM generate_series(1, 10000) AS i"
    )
    sql_conn.execute("INSERT INTO leasectl.jobs (queue) SELECT 'b' FROM generate_series(1, 100)")
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status) SELECT 'a', 'Stuck' FROM generate_series(1, 300)"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")

    def estimate(*args: Any) -> int | None:
        placeholders = ", ".join(["%s"] * len(args))
        row = sql_conn.execute(f"SELECT leasectl.estimate_jobs({placeholders})", args).fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    assert within(estimate("Pending", "a") or 0, 10_000)
    assert within(estimate("Pending", "b") or 0, 100)
    assert within(estimate("Stuck", "a") or 0, 300)
    assert within(estimate("Pending") or 0, 10_100)  # every queue's
    assert within(estimate("Pending", "a", datetime.now(UTC)) or 0, 5_000)  # the due ones
    sql_conn.execute(
        "DELETE FROM pg_catalog.pg_statistic WHERE starelid = 'leasectl.jobs'::regclass"
    )
    assert estimate("Pending", "a") is None
