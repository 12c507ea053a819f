"""The worker's statements are planned once per connection (``force_generic_plan``): the plan
made without the parameter values must still be the index plan, whatever the table holds.

A generic plan that fell back to a sequential or bitmap scan of ``jobs`` would make every
claim cost in proportion to the table; these tests look at the plan PostgreSQL really uses.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl import queries
from tests.conftest import SCHEMA

TTL = timedelta(seconds=30)


@pytest.fixture
def seeded(sql_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Finished history much larger than the live set, as in production; statistics fresh."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at) "
        "SELECT 'q', 'Completed', 1, 'old', now() FROM generate_series(1, 40000)"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, outcome) "
        "SELECT id, 1, 'old', 'completed' FROM leasectl.jobs"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT (ARRAY['q', 'other'])[1 + i % 2], i % 3, now() - interval '1 ms' * i "
        "FROM generate_series(1, 60000) AS i"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'q', 'Processing', 1, 'w-' || (i % 20), "
        "now() + CASE WHEN i <= 50 THEN interval '-1 minute' ELSE interval '1 minute' END "
        "FROM generate_series(1, 600) AS i"
    )
    sql_conn.execute("VACUUM ANALYZE leasectl.jobs")
    sql_conn.execute("VACUUM ANALYZE leasectl.job_attempts")
    return sql_conn


def held(conn: psycopg.Connection[Any], owner: str) -> tuple[list[int], list[int]]:
    rows = conn.execute(
        "SELECT id, attempts FROM leasectl.jobs WHERE status = 'Processing' AND lease_owner = %s",
        (owner,),
    ).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]


def scans_of_big_tables(plan: str) -> list[str]:
    """Scans whose cost grows with the table: sequential scans, and bitmap scans of any index
    but the one of Processing rows (bounded by the fleet's concurrency)."""
    return [
        line.strip()
        for line in plan.splitlines()
        if "never executed" not in line
        and (
            ("Seq Scan on jobs" in line or "Seq Scan on job_attempts" in line)
            or ("Bitmap Index Scan" in line and "jobs_processing_idx" not in line)
        )
    ]


@pytest.mark.parametrize("limit", [1, 25, 500])
def test_complete_and_claim_walks_the_claim_index_in_its_generic_plan(
    seeded: psycopg.Connection[Any], limit: int
) -> None:
    ids, attempts = held(seeded, "w-1")
    plan = queries.explain_generic(
        seeded,
        queries.get("jobs_complete_and_claim").render(SCHEMA),
        {
            "done_ids": ids,
            "done_attempts": attempts,
            "owner": "w-1",
            "queue": "q",
            "ttl": TTL,
            "limit": limit,
        },
    )
    assert scans_of_big_tables(plan) == [], plan
    assert "Index Scan using jobs_claimable_idx on jobs" in plan, plan
    assert "Index Scan using jobs_pkey on jobs j " in plan, plan  # the completions, by id
    assert f"rows={limit} " in plan.split("CTE picked")[1].split("CTE claimed")[0], plan


def test_takeover_of_lapsed_leases_closes_attempts_by_primary_key(
    seeded: psycopg.Connection[Any],
) -> None:
    plan = queries.explain_generic(
        seeded,
        queries.get("jobs_claim_expired").render(SCHEMA),
        {"owner": "w-x", "queue": "q", "ttl": TTL, "limit": 10},
    )
    assert scans_of_big_tables(plan) == [], plan
    assert "jobs_processing_idx" in plan, plan
    assert "Index Scan using job_attempts_pkey on job_attempts" in plan, plan
    assert "rows=10 " in plan.split("CTE claimed")[1].split("CTE closed")[0], plan


def test_heartbeat_finds_leases_by_primary_key_in_its_generic_plan(
    seeded: psycopg.Connection[Any],
) -> None:
    ids, attempts = held(seeded, "w-2")
    plan = queries.explain_generic(
        seeded,
        queries.get("jobs_heartbeat").render(SCHEMA),
        {"ids": ids, "attempts": attempts, "owner": "w-2", "ttl": TTL},
    )
    assert scans_of_big_tables(plan) == [], plan
    assert "Index Scan using jobs_pkey on jobs" in plan, plan
