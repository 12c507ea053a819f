"""The console's counts (console_counts) and `leasectl status`'s (status_live_counts), as they
run (the console's settings: generic plans, index paths only), stop at their caps on a backlog:
no node walks more than cap + 1 index entries per loop, where an exact count would walk every
Pending and Stuck row; and none reads finished history."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from bench.plans import generic_plan
from leasectl.core.counts import RECOUNT_CAP
from leasectl.db import sql as queries
from leasectl.db.console import ConsoleReads, console_settings
from tests.conftest import SCHEMA
from tests.integration.test_metrics_plans import seed
from tests.stores import Stores
from tests.util import vacuum_until_all_visible

pytestmark = pytest.mark.full

BUDGET, FLOOR = 3000, 100
ROWS = re.compile(r"actual (?:time=\S+ )?rows=(\d+)(?:\.\d+)? loops=(\d+)")
PARAMS: dict[str, Any] = {
    "queue": None,
    "budget": BUDGET,
    "floor": FLOOR,
    "stuck_floor": FLOOR,
    "group_limit": 1000,
    "risk_window": timedelta(seconds=10),
    # No recount here: these tests hold the counts to their caps (its own test below).
    "recount_cap": RECOUNT_CAP,
    "recount_budget": 0,
}
# What each statement's counts are capped at: console_counts counts every queue together up to
# the budget; status shares it between the 2 queues of the seed.
CAPS = {"console_counts": BUDGET, "status_live_counts": BUDGET // 2}


def plan_of(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    with generic_plan(conn, queries.get(name).render(SCHEMA), queries.CONSOLE_SETTINGS) as explain:
        explain(params)  # the first executions plan with the values; the generic plan comes later
        for _ in range(5):
            plan = explain(params)
    return plan


# Rows an index-only scan had to read from the table (pages not all-visible).
HEAP_FETCHES = re.compile(r"Heap Fetches: (\d+)")

# A bound evaluated once per statement: a parameter, printed as $N up to PostgreSQL 17 and as
# (InitPlan N).col1 from 18.
DUE_BOUND = re.compile(r"run_at <= (\$\d+|\(InitPlan \d+\)\.col1)\)")


@pytest.mark.parametrize("name", ["console_counts", "status_live_counts"])
def test_counts_stop_at_their_caps_on_a_backlog(
    sql_conn: psycopg.Connection[Any], name: str
) -> None:
    """The seed: 20,000 Pending (2 queues x 3 priorities, all due), 8,000 Stuck, 600
    Processing, 40,000 Completed."""
    seed(sql_conn)
    plan = plan_of(sql_conn, name, PARAMS)
    assert "Seq Scan on jobs" not in plan and "Bitmap" not in plan, plan
    assert "jobs_finished_idx" not in plan and "Gather" not in plan, plan
    cap = CAPS[name]
    per_loop = [int(rows) for rows, _ in ROWS.findall(plan)]
    # (600: the Processing rows, counted exactly: the fleet bounds them.)
    assert per_loop and max(per_loop) <= max(cap + 1, 600), plan
    assert str(cap + 1) in plan.replace(".00", ""), plan  # the cap was reached
    # The due count walks the groups' due ranges together, cap + 1 entries in all (per queue
    # for status): one node returns cap + 1 rows once per count, not once per group.
    # (run_at compared with the read clock, {now}: an InitPlan of read_clock's setting, else
    # now(), evaluated once: a parameter in the index condition.)
    due_nodes = [
        line for line in plan.splitlines() if DUE_BOUND.search(line) and "Index Cond" in line
    ]
    assert due_nodes, plan


def test_status_recounts_thinly_estimated_queues_within_its_budget(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """Past the cap, a queue estimated at most recount_cap is counted again, up to it: 10,000
    Pending jobs in each of 2 queues, each recounted exactly while the budget covers it, the
    walks bounded by the recount's cap; past the budget, the estimate."""
    seed(sql_conn)
    statement = queries.get("status_live_counts").render(SCHEMA)
    params = {**PARAMS, "recount_cap": 12_000}
    rows = sql_conn.execute(statement, {**params, "recount_budget": 40_000}).fetchall()
    pending = {r[0]: r for r in rows if r[1] == "Pending"}
    assert {q: (r[2], r[3], r[4]) for q, r in pending.items()} == {
        "q": (10_000, 12_000, 10_000),
        "other": (10_000, 12_000, 10_000),
    }
    plan = plan_of(sql_conn, "status_live_counts", {**params, "recount_budget": 40_000})
    per_loop = [int(rows) for rows, _ in ROWS.findall(plan)]
    assert max(per_loop) <= 12_001, plan
    # A budget for one of them: the other keeps its cap and its estimate.
    rows = sql_conn.execute(statement, {**params, "recount_budget": 15_000}).fetchall()
    pending = {r[0]: r for r in rows if r[1] == "Pending"}
    exact = [q for q, r in pending.items() if r[2] == 10_000]
    capped = [q for q, r in pending.items() if r[2] == BUDGET // 2 + 1]
    assert len(exact) == 1 and len(capped) == 1, pending
    assert pending[capped[0]][8] is not None  # its estimate


def test_a_queue_filter_keeps_the_counts_exact_below_the_cap(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """With the whole budget for one queue and a budget above its rows, status counts it
    exactly through the same plan."""
    seed(sql_conn)
    rows = sql_conn.execute(
        queries.get("status_live_counts").render(SCHEMA),
        {**PARAMS, "queue": "other", "budget": 20_000},
    ).fetchall()
    by_status = {r[1]: r for r in rows}
    assert by_status["Pending"][0] == "other"
    assert (by_status["Pending"][2], by_status["Pending"][4]) == (10_000, 10_000)
    assert by_status["Stuck"][2] == 4_000


def test_past_the_group_limit_the_due_count_and_the_oldest_come_from_the_whole_index(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Queue a's one group holds one job not yet due; queue b's holds two due ones. Reading
    only the first group (group_limit 1), the console still counts b's due jobs and finds its
    oldest: truncated, it reads them from the whole Pending index."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, run_at) VALUES ('a', now() + interval '1 hour'), "
        "('b', now() - interval '5 minutes'), ('b', now() - interval '1 minute')"
    )
    for group_limit in (1, 1000):
        rows = ConsoleReads(store.db).read(
            None,
            10,
            owner=None,
            job_id=None,
            risk_window=timedelta(seconds=10),
            minutes=5,
            since=None,
            timeout=timedelta(seconds=5),
            owner_window=timedelta(hours=1),
            owner_limit=10,
            group_limit=group_limit,
        )
        counts = rows.counts
        assert (counts["pending"], counts["due"]) == (3, 2), group_limit
        waited = counts["db_now"] - counts["oldest_due_at"]
        assert timedelta(minutes=4) < waited < timedelta(minutes=6), group_limit


# An owner filter on a backlog: the Pending jobs a worker held before (requeued, lease_owner
# kept) are a few among many fresh ones. Owners with prefixes that a careless range would get
# wrong: LIKE's wildcards, code points past the basic plane, the last code point itself.
OWNERS = ["w-1", "w-10", "w-2", "w-1%", "w_1", "wé", "w\U0010ffff", "w\U0010ffffx", "x"]


def _owner_seed(conn: psycopg.Connection[Any]) -> None:
    seed(conn)  # 20,000 fresh Pending jobs (no owner)
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, lease_owner, run_at) "
        "SELECT 'q', (%s::text[])[1 + i %% %s], now() - interval '1 ms' * i "
        "FROM generate_series(1, 900) AS i",
        (OWNERS, len(OWNERS)),
    )
    conn.execute("VACUUM ANALYZE leasectl.jobs")


def _all_visible(conn: psycopg.Connection[Any]) -> None:
    vacuum_until_all_visible(conn, "leasectl.jobs")


def _owner_params(owner: str) -> dict[str, Any]:
    from datetime import datetime

    from leasectl.core.filters import prefix_end
    from leasectl.core.throughput import GRACE

    return {
        **PARAMS,
        "owner": owner,
        "owner_end": prefix_end(owner),
        "job_id": None,
        "limit": 100,
        "budget": BUDGET,
        "minutes": 30,
        "since": datetime.now().astimezone(),
        "grace": GRACE,
        "failed_scan": 5000,
    }


@pytest.mark.parametrize("name", ["console_pending", "console_match_counts"])
def test_an_owner_filter_walks_only_the_owners_range_of_a_backlog(
    sql_conn: psycopg.Connection[Any], name: str
) -> None:
    """Filtered by an owner prefix, the Pending panel and its count read the prefix's range of
    the Pending owner index (the 300 rows of w-1, w-10 and w-1%), not the 20,000 Pending jobs
    without an owner nor the other 600 owned ones (as the console runs them: generic plans)."""
    _owner_seed(sql_conn)
    _all_visible(sql_conn)
    plan = plan_of(sql_conn, name, _owner_params("w-1"))
    assert "jobs_pending_owner_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    lines = plan.splitlines()
    walked = [
        int(r) for line in lines if "jobs_pending_owner_idx" in line for r, _ in ROWS.findall(line)
    ]
    assert walked and max(walked) <= 300, plan
    # What the filter needs of each match (run_at, id, queue) is in the index (migration 14):
    # after a vacuum, not one match is read from the table.
    fetched: list[int] = []
    for i, line in enumerate(lines):
        if "jobs_pending_owner_idx" in line:
            assert "Index Only Scan" in line, plan
            node = itertools.takewhile(lambda text: "->" not in text, lines[i + 1 :])
            fetched += [int(n) for text in node for n in HEAP_FETCHES.findall(text)]
    assert fetched and set(fetched) == {0}, plan
    # The unfiltered branches are in the plan, never executed.
    assert all("never executed" in line for line in lines if "jobs_claimable_idx" in line), plan


@pytest.mark.parametrize("owner", ["w-1", "w", "w-1%", "w_", "wé", "w\U0010ffff", "\U0010ffff", ""])
def test_an_owner_filter_finds_exactly_the_pending_jobs_whose_owner_has_the_prefix(
    sql_conn: psycopg.Connection[Any], owner: str
) -> None:
    _owner_seed(sql_conn)
    if not owner:
        return  # the console sends no filter for an empty one (ConsoleReads: owner or None)
    expected = {
        r[0]
        for r in sql_conn.execute(
            "SELECT id FROM leasectl.jobs WHERE status = 'Pending' AND lease_owner IS NOT NULL "
            "AND left(lease_owner, length(%s)) = %s",
            (owner, owner),
        )
    }
    params = {**_owner_params(owner), "limit": 1000}
    shown = sql_conn.execute(queries.get("console_pending").render(SCHEMA), params).fetchall()
    assert {r[0] for r in shown} == expected
    counted = sql_conn.execute(queries.get("console_match_counts").render(SCHEMA), params)
    row = counted.fetchone()
    assert row is not None and row[0] == len(expected)


def test_the_limits_read_counts_live_leases_through_the_processing_index(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """status_limits (status, the console, the scrape): each limited queue's live leases come
    from jobs_processing_idx, its Processing rows only (600 of the seed's 68,600 rows); no
    Pending, Stuck or finished row is read."""
    seed(sql_conn)
    for queue, cap, rate in (("q", 10, 20), ("other", None, 5)):  # (with their shards)
        sql_conn.execute(
            "SELECT leasectl.queue_limit_set(%s, %s, %s, NULL, 't', 'r', 'leasectl_test')",
            (queue, cap, rate),
        )
    plan = plan_of(sql_conn, "status_limits", {"queue": None, "limits_limit": 1000})
    assert "jobs_processing_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan and "Bitmap" not in plan, plan
    assert "jobs_finished_idx" not in plan and "jobs_claimable_idx" not in plan, plan
    per_loop = [int(rows) for rows, _ in ROWS.findall(plan)]
    assert per_loop and max(per_loop) <= 600, plan


REMOVED = re.compile(r"Rows Removed by Filter: (\d+)")


@pytest.mark.parametrize("custom", [True, False], ids=["as the console runs it", "generic"])
def test_a_queue_filter_walks_only_its_queue(
    sql_conn: psycopg.Connection[Any], custom: bool
) -> None:
    """Filtered to queue `q`, the console's counts walk `q`'s range of the claim index: with
    the settings the console uses under a queue filter (a custom plan: the name folds each
    `queue IS NULL OR queue = …` into an index condition), no walk passes over `other`'s
    10,000 Pending jobs (which sort first). A generic plan, as every refresh had before, reads
    them and filters them out: the case that shows the assertion can fail."""
    seed(sql_conn)
    settings = console_settings(custom=custom)
    text = queries.get("console_counts").render(SCHEMA)
    with generic_plan(sql_conn, text, settings) as explain:
        for _ in range(6):
            plan = explain({**PARAMS, "queue": "q"})
    removed = [int(n) for n in REMOVED.findall(plan)]
    if custom:
        assert max(removed, default=0) == 0, plan
    else:
        assert max(removed, default=0) >= 3000, plan
