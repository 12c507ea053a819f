"""The scrape's statements, as the exporter runs them (the console's settings: generic plans,
index paths only), walk the live states' partial indexes a bounded number of rows, and never
finished history: the plans PostgreSQL really uses, on a table whose history outweighs the live
set."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from bench.plans import explain_nested, generic_plan
from leasectl.db import sql as queries
from tests.conftest import SCHEMA

pytestmark = pytest.mark.full

BUDGET, FLOOR = 3000, 100


def seed(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at) "
        "SELECT 'q', 'Completed', 1, 'old', now() FROM generate_series(1, 40000)"
    )
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT (ARRAY['q', 'other'])[1 + i % 2], i % 3, now() - interval '1 ms' * i "
        "FROM generate_series(1, 20000) AS i"
    )
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, updated_at) "
        "SELECT (ARRAY['q', 'other'])[1 + i % 2], 'Stuck', now() FROM generate_series(1, 8000) AS i"
    )
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'q', 'Processing', 1, 'w-' || (i % 20), "
        "now() + CASE WHEN i <= 50 THEN interval '-1 minute' ELSE interval '1 minute' END "
        "FROM generate_series(1, 600) AS i"
    )
    # Waiting jobs behind one head per key, made directly (migration 18's triggers off).
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, concurrency_key) "
            "SELECT (ARRAY['q', 'other'])[1 + i % 2], 'Waiting', 'k' || (i % 50) "
            "FROM generate_series(1, 8000) AS i"
        )
    conn.execute("VACUUM ANALYZE leasectl.jobs")


PARAMS: dict[str, Any] = {
    "budget": BUDGET,
    "floor": FLOOR,
    "group_limit": 1000,
    "queue_limit": 1000,
    "lease_limit": 2000,
    "risk_window": timedelta(seconds=10),
    # No recount here: these tests hold the counts to their caps (test_recounts.py recounts).
    "recount_cap": 20_000,
    "recount_budget": 0,
}
ROWS = re.compile(r"actual (?:time=\S+ )?rows=(\d+)(?:\.\d+)? loops=(\d+)")


@pytest.mark.parametrize(
    "name", ["metrics_pending", "metrics_stuck", "metrics_waiting", "metrics_leases"]
)
def test_scrape_queries_walk_live_indexes_a_bounded_number_of_rows(
    sql_conn: psycopg.Connection[Any], name: str
) -> None:
    seed(sql_conn)
    with generic_plan(
        sql_conn, queries.get(name).render(SCHEMA), queries.CONSOLE_SETTINGS
    ) as explain:
        explain(PARAMS)  # the first executions plan with the values; the generic plan comes later
        for _ in range(5):
            plan = explain(PARAMS)
    # (The workers table is read whole for the widest heartbeat interval, as console_counts does.)
    assert "Seq Scan on jobs" not in plan and "Bitmap" not in plan, plan
    assert "jobs_finished_idx" not in plan, plan
    # 2 queues share the budget: no node returns more than BUDGET / 2 + 1 rows per loop (an
    # exact count of a queue's 10,000 Pending or 4,000 Stuck rows would).
    per_loop = [int(rows) for rows, _ in ROWS.findall(plan)]
    assert per_loop and max(per_loop) <= max(BUDGET // 2 + 1, 600), plan
    if name != "metrics_leases":
        assert str(BUDGET // 2 + 1) in plan.replace(".00", ""), plan  # the cap was reached


# -- the per-minute history (migration 20) -------------------------------------------------------

HISTORY_QUEUES, HISTORY_MINUTES = 40, 3000  # 120,000 rows: two days of minutes of 40 queues


def seed_history(conn: psycopg.Connection[Any]) -> None:
    """Two days of every queue's minutes, with histograms, samples and a few unfolded deltas."""
    conn.execute(
        "INSERT INTO leasectl.queue_history (queue, minute, enqueued, started, pickup) "
        "SELECT 'q' || q, date_trunc('minute', now(), 'UTC') - make_interval(mins => m), 10, 10, "
        "ARRAY[1, 2, 3, 4]::bigint[] "
        "FROM generate_series(1, %(q)s) AS q, generate_series(0, %(m)s - 1) AS m",
        {"q": HISTORY_QUEUES, "m": HISTORY_MINUTES},
    )
    conn.execute(
        "INSERT INTO leasectl.queue_backlog (queue, minute, pending, capped) "
        "SELECT queue, minute, 5, false FROM leasectl.queue_history"
    )
    conn.execute(
        "INSERT INTO leasectl.queue_backlog_minutes (minute) "
        "SELECT DISTINCT minute FROM leasectl.queue_history"
    )
    conn.execute(
        "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, bucket, delta) "
        "SELECT 'q' || (i % 5), date_trunc('minute', now(), 'UTC'), 'pickup', i % 7, 1 "
        "FROM generate_series(1, 50) AS i"
    )
    for table in (
        "queue_history",
        "queue_backlog",
        "queue_backlog_minutes",
        "queue_history_deltas",
    ):
        conn.execute(f"VACUUM ANALYZE leasectl.{table}")


def rows_read(plan: str, index: str) -> int:
    """The rows the scans of ``index`` returned, all loops (an index scan's or a bitmap's)."""
    total = 0
    for line in plan.splitlines():
        if f"using {index} on" in line or f"Bitmap Index Scan on {index} " in line:
            found = ROWS.search(line)
            assert found, line
            total += int(found.group(1)) * int(found.group(2))
    return total


def test_the_scrapes_pickup_latency_reads_two_minutes_of_history(
    sql_conn: psycopg.Connection[Any],
) -> None:
    seed(sql_conn)
    seed_history(sql_conn)
    seed_running(sql_conn, 2000)
    query = queries.get("history_pickup_recent").render(SCHEMA)
    with generic_plan(sql_conn, query, queries.CONSOLE_SETTINGS) as explain:
        for _ in range(6):
            plan = explain({"row_limit": 1000})
    assert "Seq Scan on queue_history " not in plan and "Bitmap" not in plan, plan
    # The current and the previous minute of each of the 40 queues, no more.
    assert 0 < rows_read(plan, "queue_history_minute_idx") <= 2 * HISTORY_QUEUES, plan
    assert_reads_running_attempts_by_index(plan)


def assert_reads_running_attempts_by_index(plan: str) -> None:
    """The running attempts (migration 31): inlined, through the Processing jobs' index alone,
    beside the history of every finished job."""
    assert "history_running_pickups" not in plan and "Seq Scan on job" not in plan, plan
    assert "jobs_processing_idx" in plan and "job_attempts" not in plan, plan


def seed_running(conn: psycopg.Connection[Any], jobs: int) -> None:
    """``jobs`` Processing jobs of 5 queues, each with its running attempt as a claim opens it
    (queue, due time); half of them started two hours ago."""
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'q' || (i %% 5), 'Processing', 1, 'w', now() + interval '1 minute' "
        "FROM generate_series(1, %s) AS i",
        (jobs,),
    )
    conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, queue, "
        "due_at) SELECT id, 1, 'w', now() - (id % 2) * interval '2 hours', queue, created_at "
        "FROM leasectl.jobs WHERE status = 'Processing'"
    )
    conn.execute("VACUUM ANALYZE leasectl.jobs")
    conn.execute("VACUUM ANALYZE leasectl.job_attempts")


CUSTOM = {"plan_cache_mode": "force_custom_plan", "jit": "off"}


@pytest.mark.parametrize("queue", ["q7", None])
@pytest.mark.parametrize("name", ["stats_counts", "stats_pickup", "stats_backlog"])
def test_stats_reads_an_hour_of_one_queue_or_of_every_queue_by_index(
    sql_conn: psycopg.Connection[Any], name: str, queue: str | None
) -> None:
    seed(sql_conn)
    seed_history(sql_conn)
    seed_running(sql_conn, 2000)
    query = queries.get(name).render(SCHEMA)
    with generic_plan(sql_conn, query, CUSTOM) as explain:
        plan = explain({"since": timedelta(hours=1), "queue": queue})
    table = "queue_backlog" if name == "stats_backlog" else "queue_history"
    assert f"Seq Scan on {table} " not in plan, plan
    if name != "stats_backlog":  # and the running attempts, as in the scrape's
        assert_reads_running_attempts_by_index(plan)
    if queue is None:
        assert rows_read(plan, f"{table}_minute_idx") <= 61 * HISTORY_QUEUES, plan
    else:
        assert rows_read(plan, f"{table}_pkey") <= 61, plan
        assert rows_read(plan, f"{table}_pkey") > 0, plan


def test_the_folds_backlog_sample_walks_the_claim_index_to_its_caps(
    sql_conn: psycopg.Connection[Any],
) -> None:
    seed(sql_conn)
    plans = explain_nested(
        sql_conn, "SELECT leasectl.history_fold(1000, 1000, %s, %s)", (BUDGET, FLOOR), counters=True
    )
    [(_, plan)] = [(t, p) for t, p in plans if "INTO queue_backlog " in t]
    assert "Seq Scan on jobs" not in plan and "Bitmap" not in plan, plan
    assert "jobs_claimable_idx" in plan and "jobs_finished_idx" not in plan, plan
    # 2 queues with Pending jobs share the budget: each counted to BUDGET / 2 + 1 at most.
    per_loop = [int(rows) for rows, _ in ROWS.findall(plan)]
    assert max(per_loop) <= BUDGET // 2 + 1, plan


def test_prune_finds_old_minutes_by_the_minute_index(sql_conn: psycopg.Connection[Any]) -> None:
    seed_history(sql_conn)
    plans = explain_nested(
        sql_conn, "SELECT leasectl.history_prune(interval '1 day', 500)", counters=True
    )
    deletes = [p for t, p in plans if "DELETE FROM queue_" in t]
    assert len(deletes) == 3, plans
    for plan in deletes[:2]:
        assert "_minute_idx" in plan and "Seq Scan on queue_" not in plan, plan


def test_attempts_opened_are_counted_by_the_claims_not_by_a_trigger(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """Migration 30: the claims write their pickups from the rows their UPDATE returns. An INSERT
    of attempts runs no statement that writes a pickup (migration 20's trigger read each job
    again by its key, most of the history's cost on a worker's round trip)."""
    seed(sql_conn)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET status = 'Processing', lease_owner = 'w', attempts = 1, "
        "lease_until = now() + interval '1 minute' "
        "WHERE id IN (SELECT id FROM leasectl.jobs WHERE status = 'Pending' LIMIT 300)"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")
    plans = explain_nested(
        sql_conn,
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at) "
        "SELECT id, 1, 'w', now() FROM leasectl.jobs WHERE status = 'Processing' "
        "AND lease_owner = 'w'",
        counters=True,
    )
    assert [t for t, _ in plans if "'pickup'" in t] == [], plans


def test_the_folds_outcome_totals_are_found_by_their_key(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """history_fold adds the attempts' outcomes to counter_totals (migration 27): among the
    totals of many queues, the rows of the few queues it folds are read and updated through
    the primary key, never the table whole."""
    seed_history(sql_conn)
    sql_conn.execute(
        "INSERT INTO leasectl.counter_totals (counter, action, queue, value) "
        "SELECT c, '', 'q' || q, 1 FROM unnest(ARRAY['completed', 'failed', 'retried']) AS c, "
        "generate_series(1, 20000) AS q"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, delta) "
        "SELECT 'q' || (i % 3), date_trunc('minute', now(), 'UTC'), "
        "(ARRAY['completed', 'failed', 'retried'])[1 + i % 3], 1 FROM generate_series(1, 30) AS i"
    )
    sql_conn.execute("VACUUM ANALYZE leasectl.counter_totals")
    sql_conn.execute("ANALYZE leasectl.queue_history_deltas")
    plans = explain_nested(
        sql_conn, "SELECT leasectl.history_fold(1000, 1000, %s, %s)", (BUDGET, FLOOR), counters=True
    )
    [(_, plan)] = [(t, p) for t, p in plans if "UPDATE counter_totals" in t]
    assert "Seq Scan on counter_totals" not in plan, plan
    assert rows_read(plan, "counter_totals_pkey") <= 30, plan
    assert "AND (queue = " in plan, plan  # the key whole, not its counters' range filtered
    # (The totals' first rows exist: the loop that would make them reads the key too.)
    creating = [p for t, p in plans if "FROM counter_totals AS t" in t and "NOT EXISTS" in t]
    for p in creating:
        assert "Seq Scan on counter_totals" not in p, p
