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

from bench.plans import generic_plan
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
