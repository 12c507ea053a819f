"""Counts past the exact bound are the planner's estimates (migration 22): within 25% per queue
and per status at the incident's size (2M Pending behind one queue, 10M finished, skewed
queues), exact below the bound, the same in `status`, the console and the exporter's reads,
and cheap: a plan, not a scan."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.console.panels import Panels
from leasectl.core.counts import RECOUNT_CAP
from leasectl.db.connection import Database
from leasectl.db.console import ConsoleReads
from leasectl.db.metrics import MetricsReads
from leasectl.db.operations import Operations
from tests.conftest import SCHEMA

pytestmark = pytest.mark.full

# Pending per queue: one takes the backlog, the others are 20x, 200x and 600x smaller; sms
# stays below its cap (6,000 shared by 5 queues: 1,200 each).
PENDING = {"payments": 1_900_000, "mail": 90_000, "reports": 7_000, "new": 3_000, "sms": 1_000}
FINISHED = 10_000_000  # mail 60%, payments 30%, reports 10%; one in 50 Failed
STUCK = {"payments": 20_000}  # past its cap: one queue with Stuck jobs has 6,000


def within(estimate: int, actual: int, tolerance: float = 0.25) -> bool:
    return abs(estimate - actual) <= tolerance * actual


@pytest.fixture(scope="module")
def incident(server_dsn: str, template_db: str) -> Any:
    """One database for the module: seeding 12M rows takes minutes on a small machine."""
    import uuid

    from psycopg import conninfo, sql

    name = f"leasectl_estimates_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    dsn = conninfo.make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, finished_at) "
            "SELECT (ARRAY['mail','mail','mail','mail','mail','mail','payments','payments',"
            "'payments','reports'])[1 + i %% 10], "
            "(CASE WHEN i %% 50 = 0 THEN 'Failed' ELSE 'Completed' END)::leasectl.job_status, 1, "
            "now() - interval '1 day' - interval '1 ms' * i FROM generate_series(1, %s) AS i",
            [FINISHED],
        )
        for queue, n in PENDING.items():
            conn.execute(
                "INSERT INTO leasectl.jobs (queue, priority, run_at) "
                "SELECT %s, i %% 3, now() - interval '1 ms' * i FROM generate_series(1, %s) AS i",
                [queue, n],
            )
        for queue, n in STUCK.items():
            conn.execute(
                "INSERT INTO leasectl.jobs (queue, status) "
                "SELECT %s, 'Stuck' FROM generate_series(1, %s)",
                [queue, n],
            )
        conn.execute("VACUUM ANALYZE leasectl.jobs")
    yield dsn
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def test_status_estimates_each_queue_within_a_quarter(incident: str) -> None:
    with Database.connect(incident, SCHEMA) as db:
        report = Operations(db).status()
    by_queue = {q.queue: q for q in report.queues}
    for queue, actual in PENDING.items():
        q = by_queue[queue]
        if actual <= RECOUNT_CAP:  # below its cap, or recounted past it: exact
            assert (q.pending, q.pending_capped, q.pending_estimated) == (actual, False, False)
            assert q.due == actual and not q.due_estimated
            continue
        assert q.pending_capped and q.pending_estimated, queue
        assert within(q.pending, actual), (queue, q.pending, actual)
        assert q.due_estimated and within(q.due, actual), (queue, q.due, actual)
        assert q.due <= q.pending
    payments = by_queue["payments"]
    assert payments.stuck_estimated and within(payments.stuck, STUCK["payments"])


def test_the_console_the_exporter_and_status_agree(incident: str) -> None:
    """Past their caps each shows the planner's estimate, but a queue estimated at RECOUNT_CAP
    or fewer is counted again, exactly, by each of them (one rule: migration 29's
    pending_recount, status's inline): the console filtered to it, the exporter's gauge and
    `status` show the same count."""
    with Database.connect(incident, SCHEMA) as db:
        snap = Panels(ConsoleReads(db)).snapshot(None, 100)
        rows = MetricsReads(db).read(timedelta(seconds=30))
        by_queue = {q.queue: q for q in Operations(db).status().queues}
        filtered = {q: Panels(ConsoleReads(db)).snapshot(q, 100).counts for q in PENDING}
    total = sum(PENDING.values())
    assert snap.counts.pending_estimated and within(snap.counts.pending, total)
    assert snap.counts.due_estimated and within(snap.counts.due, total)
    pending = {p.queue: p.jobs for p in rows.pending}
    for queue, actual in PENDING.items():
        shown = {
            "exporter": (pending[queue].shown, pending[queue].estimated),
            "console": (filtered[queue].pending, filtered[queue].pending_estimated),
            "status": (by_queue[queue].pending, by_queue[queue].pending_estimated),
        }
        if actual <= RECOUNT_CAP:
            assert set(shown.values()) == {(actual, False)}, (queue, shown)
            assert filtered[queue].due == actual and not filtered[queue].due_estimated
        else:
            for who, (n, estimated) in shown.items():
                assert estimated and within(n, actual), (queue, who, n, actual)
    assert rows.stuck["payments"].estimated


def test_an_estimate_is_a_plan_not_a_scan(incident: str) -> None:
    """The estimate reads statistics, not the table: the buffers it touches do not grow with
    the 12M rows (the bounded count beside it reads its cap's worth)."""
    with psycopg.connect(incident, autocommit=True) as conn:
        pages = conn.execute("SELECT relpages FROM pg_class WHERE oid = 'leasectl.jobs'::regclass")
        total_pages = pages.fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT leasectl.estimate_jobs('Pending', 'payments')")  # catalog cached
        plan = "\n".join(
            line
            for (line,) in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "
                "SELECT leasectl.estimate_jobs('Pending', 'payments')"
            )
        )
    found = [int(n) for n in re.findall(r"shared hit=(\d+)", plan)]
    read = [int(n) for n in re.findall(r"read=(\d+)", plan)]
    assert total_pages > 100_000, total_pages
    assert sum(found) + sum(read) < 1_000, plan
