"""The schedules' scheduled reads stay index scans however many schedules there are and however
much history jobs holds: the watcher's due query every pass (schedules_due_idx), and the
listing's and `status`'s last-job lookups (jobs' primary key)."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from bench.plans import explain_nested, generic_plan
from leasectl.db import sql as queries
from tests.conftest import SCHEMA
from tests.integration.test_plans import analyze, scans_of_big_tables, seed

pytestmark = pytest.mark.full


def seed_schedules(conn: psycopg.Connection[Any], n: int = 50_000) -> None:
    """``n`` schedules, a tenth paused, their next slots over the next days; 20 of them due;
    each has a last job."""
    conn.execute(
        "INSERT INTO leasectl.schedules (name, cron, queue, next_slot, created_by, updated_by, "
        "paused_at, paused_by, last_job_id) "
        "SELECT 's' || i, '* * * * *', 'q', now() + interval '1 minute' * (i - 20), 'x', 'x', "
        "CASE WHEN i %% 10 = 0 THEN now() END, CASE WHEN i %% 10 = 0 THEN 'x' END, i "
        "FROM generate_series(1, %s) AS i",
        (n,),
    )
    conn.execute("VACUUM ANALYZE leasectl.schedules")


@pytest.mark.parametrize("order", ["planned with rows", "planned on empty tables"])
def test_the_due_query_walks_its_index(sql_conn: psycopg.Connection[Any], order: str) -> None:
    query = queries.get("schedules_due").render(SCHEMA)
    with generic_plan(sql_conn, query) as explain:
        if order == "planned on empty tables":
            sql_conn.execute("ANALYZE leasectl.schedules")
            explain({"limit": 100})
        seed(sql_conn)
        seed_schedules(sql_conn)
        analyze(sql_conn)
        plan = explain({"limit": 100})
    assert "Seq Scan on schedules" not in plan, plan
    assert "Index Scan using schedules_due_idx on schedules" in plan, plan


# (schedules_list reads the schedules in name order, at most its LIMIT: a listing of them all.)
@pytest.mark.parametrize(
    "name", ["schedules_list", "schedules_late", "schedule_get", "metrics_schedules"]
)
def test_the_last_jobs_are_read_by_primary_key(
    sql_conn: psycopg.Connection[Any], name: str
) -> None:
    seed(sql_conn)
    seed_schedules(sql_conn)
    analyze(sql_conn)
    query = queries.get(name).render(SCHEMA)
    params = {"name": "s5", "limit": 100, "grace": "2 minutes", "schedules_limit": 1000}
    with generic_plan(sql_conn, query) as explain:
        plan = explain({k: v for k, v in params.items() if f"%({k})s" in queries.get(name).text})
    assert scans_of_big_tables(plan) == [], plan
    assert "Seq Scan on jobs" not in plan, plan
    if name != "metrics_schedules":
        assert "Index Scan using jobs_pkey on jobs j" in plan, plan
    else:
        assert "Index Scan using schedules_pkey on schedules" in plan, plan
    if name == "schedules_late":
        assert "Index Scan using schedules_due_idx" in plan, plan
    if name == "schedule_get":
        assert "Index Cond: (name = " in plan, plan


def test_the_slots_prune_walks_the_slot_index_to_its_batch(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """`watch` runs it once a minute: the oldest slots by schedule_slots_slot_idx (migration
    25), each one's schedule by its key, a batch's worth read, not the table: 300,000 slot rows
    (a year of an every-minute schedule is 525,000), most of them past the retention."""
    seed_schedules(sql_conn, 3000)
    sql_conn.execute(
        "INSERT INTO leasectl.schedule_slots (schedule, slot, job_id) "
        "SELECT 's' || (i % 3000 + 1), now() - interval '1 minute' * (i / 3000 + 1) "
        "- interval '30 days', i FROM generate_series(0, 299999) AS i"
    )
    sql_conn.execute("VACUUM ANALYZE leasectl.schedule_slots")
    plans = explain_nested(sql_conn, "SELECT leasectl.schedule_slots_prune(interval '7 days', 500)")
    [(_, plan)] = [(t, p) for t, p in plans if "DELETE FROM schedule_slots" in t]
    assert "Seq Scan on schedule_slots" not in plan, plan
    assert "Seq Scan on schedules" not in plan, plan
    assert "Index Scan using schedule_slots_slot_idx on schedule_slots t" in plan, plan
    assert "schedules_pkey" in plan, plan
    walked = re.search(r"schedule_slots_slot_idx on schedule_slots t .*actual rows=(\d+)", plan)
    assert walked is not None and int(walked.group(1)) == 500, plan  # a batch, not the table
