"""`errors` and `events` read a bounded number of rows through an index, whatever the size of
the history: the plans PostgreSQL really runs, on finished history much larger than the rows
read (a scaled-down 10M; BENCHMARKS.md has the figures at size)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import ClientCursor

from leasectl.db import sql as queries
from tests.conftest import SCHEMA
from tests.integration.test_plans import scans_of_big_tables
from tests.util import vacuum_until_all_visible

pytestmark = pytest.mark.full


@pytest.fixture
def history(sql_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """100,000 finished jobs with an attempt each, 5,000 of them failed over two days (stored
    with their kind and queue, as job_fail writes them since migration 29), and an audit row
    for each of 50,000 of them (a week ago)."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at) "
        "SELECT (ARRAY['payments', 'mail'])[1 + i % 2], "
        "CASE WHEN i % 20 = 0 THEN 'Failed' ELSE 'Completed' END::leasectl.job_status, 1, 'w', "
        "now() - interval '1 s' * i FROM generate_series(1, 100000) AS i"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, ended_at, outcome, "
        "error, error_detail, queue, error_kind) "
        "SELECT id, 1, 'w', finished_at, CASE WHEN status = 'Failed' THEN 'failed' "
        "ELSE 'completed' END::leasectl.attempt_outcome, "
        "CASE WHEN status = 'Failed' THEN 'PSPError: 503 for invoice ' || id END, "
        "CASE WHEN status = 'Failed' THEN 'Traceback' END, "
        "CASE WHEN status = 'Failed' THEN queue END, "
        "CASE WHEN status = 'Failed' THEN 'PSPError' END FROM leasectl.jobs"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.job_events (job_id, at, actor, action, reason) "
        "SELECT id, now() - interval '7 days', 'watcher', 'requeue-expired', 'lapsed' "
        "FROM leasectl.jobs WHERE id <= 50000"
    )
    for table in ("jobs", "job_attempts", "job_events", "queue_events"):
        vacuum_until_all_visible(sql_conn, f"leasectl.{table}")
    return sql_conn


def plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    query = queries.get(name).render(SCHEMA)
    with conn.transaction(force_rollback=True):
        cur = ClientCursor(conn)
        rows = cur.execute(
            b"EXPLAIN (ANALYZE, COSTS OFF) " + query.as_bytes(conn), params
        ).fetchall()
    return "\n".join(line for (line,) in rows)


@pytest.mark.parametrize("since", [timedelta(hours=1), timedelta(days=30)])
@pytest.mark.parametrize("queue", [None, "payments"])
def test_errors_read_the_newest_failures_from_their_index_alone(
    history: psycopg.Connection[Any], since: timedelta, queue: str | None
) -> None:
    """Their kinds and queues from the covering index (vacuumed: no heap fetch): one queue's
    from its own (migration 30), the other branch never run; and neither the attempts' rows
    nor the jobs' read."""
    shown = plan(
        history,
        "errors_failures",
        {"since": since, "queue": queue, "scan": 1000, "chars": 200},
    )
    used, unused = ("job_attempts_failed_queue_idx", "job_attempts_failed_idx ")
    if queue is None:
        used, unused = unused.strip(), used
    assert f"Index Only Scan Backward using {used}" in shown, shown
    lines = [line for line in shown.splitlines() if f"using {unused}" in line]
    assert all("never executed" in line for line in lines), shown
    assert "Heap Fetches: 0" in shown, shown
    assert scans_of_big_tables(shown) == [], shown
    assert "Seq Scan" not in shown, shown
    lines = [line for line in shown.splitlines() if "jobs_pkey" in line]
    assert lines and all("never executed" in line for line in lines), shown


def test_errors_read_attempts_stored_without_a_kind_by_primary_key(
    history: psycopg.Connection[Any],
) -> None:
    """Attempts failed before migration 29: their rows through their own index, their jobs by
    primary key, merged with the others."""
    history.execute(
        "UPDATE leasectl.job_attempts SET queue = NULL, error_kind = NULL "
        "WHERE outcome = 'failed' AND ended_at > now() - interval '1 hour'"
    )
    vacuum_until_all_visible(history, "leasectl.job_attempts")
    shown = plan(
        history,
        "errors_failures",
        {"since": timedelta(hours=1), "queue": None, "scan": 1000, "chars": 200},
    )
    assert "Index Only Scan Backward using job_attempts_failed_idx" in shown, shown
    assert "Index Scan Backward using job_attempts_failed_unkinded_idx" in shown, shown
    assert "Index Scan using jobs_pkey" in shown, shown
    assert scans_of_big_tables(shown) == [], shown
    assert "Seq Scan" not in shown, shown


@pytest.mark.parametrize("actor", [None, "nobody"])
def test_events_read_the_newest_audit_rows_by_primary_key(
    history: psycopg.Connection[Any], actor: str | None
) -> None:
    params = {
        "since": timedelta(hours=1),
        "actor": actor,
        "queue": "payments",
        "scan": 2000,
        "limit": 200,
    }
    shown = plan(history, "events_jobs", params)
    assert "Index Scan Backward using job_events_pkey" in shown, shown
    assert "Seq Scan" not in shown, shown
    assert scans_of_big_tables(shown) == [], shown
    shown = plan(history, "events_queues", params)
    assert "Seq Scan on job_events" not in shown and "Seq Scan on jobs" not in shown, shown
