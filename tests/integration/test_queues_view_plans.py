"""The Queues view's statements, as the console runs them (its settings: index paths only;
generic plans for the overview, a custom plan per execution for one queue's screen), read the
window's history of every queue by its minute index, one queue's by its primary key, and no
statement of either read walks finished history or a whole live index: the plans PostgreSQL
really uses, on history and jobs much larger than the rows read. (The scrape's statements the
overview and the queue screen share are test_metrics_plans.py's; `errors` and `events`' are
test_incident_plans.py's, run here again under the queue screen's settings.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from bench.plans import generic_plan
from leasectl.db import sql as queries
from leasectl.db.console import settings_params
from tests.conftest import SCHEMA
from tests.integration.test_metrics_plans import HISTORY_QUEUES, rows_read, seed, seed_history
from tests.integration.test_plans import scans_of_big_tables

pytestmark = pytest.mark.full

HOUR = timedelta(hours=1)


def settings(*, custom: bool) -> dict[str, str]:
    """The settings the Queues view's transaction sets (db/queues_view.py), timeouts aside."""
    made = settings_params(timedelta(seconds=5), custom=custom)
    pairs = dict(zip(made["setting_names"], made["setting_values"], strict=True))
    return {k: v for k, v in pairs.items() if not k.endswith("_timeout")}


def test_the_overview_reads_the_windows_minutes_of_every_queue_by_index(
    sql_conn: psycopg.Connection[Any],
) -> None:
    seed_history(sql_conn)
    query = queries.get("queues_view_minutes").render(SCHEMA)
    params = {"since": HOUR, "sampled_since": timedelta(minutes=10), "row_limit": 30_500}
    with generic_plan(sql_conn, query, settings(custom=False)) as explain:
        explain(params)
        for _ in range(5):
            plan = explain(params)
    # Two days of 40 queues' minutes: the last hour's of each, no more, and of the backlog the
    # trend's minutes.
    for table, minutes in (("queue_history", 61), ("queue_backlog", 11)):
        assert f"Seq Scan on {table} " not in plan and "Bitmap" not in plan, plan
        assert 0 < rows_read(plan, f"{table}_minute_idx") <= minutes * HISTORY_QUEUES, plan


def test_the_paused_state_of_one_queue_is_one_probe(sql_conn: psycopg.Connection[Any]) -> None:
    query = queries.get("queues_view_paused").render(SCHEMA)
    with generic_plan(sql_conn, query, settings(custom=True)) as explain:
        plan = explain({"queue": "q7"})
    assert "queue_state_pkey" in plan and "Seq Scan" not in plan, plan


ONE: dict[str, Any] = {
    "queue": "q",
    "budget": 3000,
    "group_limit": 1000,
    "risk_window": timedelta(seconds=10),
    "since": HOUR,
}


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("status_limits", {**ONE, "limits_limit": 1}),
        ("stats_counts", {**ONE, "queue": "q7"}),
        ("stats_pickup", {**ONE, "queue": "q7"}),
        ("stats_backlog", {**ONE, "queue": "q7"}),
        ("errors_failures", {"since": HOUR, "queue": "q", "scan": 5000, "chars": 200}),
        (
            "events_jobs",
            {"since": HOUR, "actor": None, "queue": "q", "scan": 5000, "limit": 51},
        ),
    ],
)
def test_a_queues_screen_reads_by_index_under_its_settings(
    sql_conn: psycopg.Connection[Any], name: str, params: dict[str, Any]
) -> None:
    seed(sql_conn)
    seed_history(sql_conn)
    query = queries.get(name).render(SCHEMA)
    # (The limits as the overview reads them, a generic plan: db/queues_view.py.)
    with generic_plan(sql_conn, query, settings(custom=name != "status_limits")) as explain:
        for _ in range(6):
            plan = explain(params)
    assert scans_of_big_tables(plan) == [], plan
    assert "Seq Scan on queue_history " not in plan and "jobs_finished_idx" not in plan, plan
    if name.startswith("stats_"):
        table = "queue_backlog" if name == "stats_backlog" else "queue_history"
        assert 0 < rows_read(plan, f"{table}_pkey") <= 61, plan
