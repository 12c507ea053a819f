"""The console's Queues view and queue screen as read from PostgreSQL (db/queues_view.py): every
queue with jobs, a pause, a limit or history in the window, its counts, failures, trend and
pickup latency from the per-minute history (folded rows and unfolded deltas), one queue's
minutes, error groups and events; as an operator and as a viewer (read-only)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.limits import LimitSpec
from leasectl.core.queues import Trend
from leasectl.db import counters
from leasectl.db.connection import Database
from leasectl.db.queues_view import QueuesReads
from tests.conftest import SCHEMA
from tests.integration.test_privileges import Roles
from tests.integration.test_privileges import granted as granted  # (fixtures)
from tests.integration.test_privileges import roles as roles
from tests.stores import Stores

TTL = timedelta(seconds=30)
# Markup, an OSC title sequence and a bidi override (tests/hostile.py's kinds) in a queue name.
HOSTILE_QUEUE = "[@click=app.quit]q[/]\x1b]0;PWNED\x07\u202eevil"


def backlog(conn: psycopg.Connection[Any], queue: str, samples: list[int]) -> None:
    """The fold's samples of ``queue``'s due backlog, one a minute up to the current one."""
    n = len(samples)
    for i, pending in enumerate(samples):
        minute = f"date_trunc('minute', now(), 'UTC') - interval '{n - 1 - i} minutes'"
        conn.execute(
            f"INSERT INTO leasectl.queue_backlog_minutes (minute) VALUES ({minute}) "
            "ON CONFLICT DO NOTHING"
        )
        conn.execute(
            "INSERT INTO leasectl.queue_backlog (queue, minute, pending, capped) "
            f"VALUES (%s, {minute}, %s, false)",
            (queue, pending),
        )


def seed(store: Stores, conn: psycopg.Connection[Any]) -> None:
    """payments: 6 Pending, 2 completed, 3 failed for good (one error kind), one leased and
    expired, a growing backlog; emails: one Pending, paused; reports: limited, nothing else; a
    hostile queue with one job."""
    store.ops.enqueue([{"n": i} for i in range(12)], queue="payments")
    done = store.work.claim("payments", "w-1", TTL, limit=2)
    assert store.work.complete(done) == {lease.job_id for lease in done}
    for i in range(3):
        (lease,) = store.work.claim("payments", "w-1", TTL)
        store.work.fail(lease, f"PSPError: 503 for invoice {i}", retry_delay=TTL, retry=False)
    (expired,) = store.work.claim("payments", "w-2", TTL)
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = %s",
        (expired.job_id,),
    )
    store.ops.enqueue([{"mail": 1}], queue="emails")
    store.ops.pause("emails", actor="ops:alice", reason="smtp down")
    store.ops.set_limit("reports", LimitSpec(concurrency=10, rate=20.0), actor="t", reason="r")
    store.ops.enqueue([{}], queue=HOSTILE_QUEUE)
    backlog(conn, "payments", [1, 2, 3, 4, 5, 6])


def test_the_overview_lists_every_queue_with_its_figures_in_attention_order(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(store, sql_conn)
    view = QueuesReads(store.db).overview()
    by_name = {r.queue: r for r in view.rows}
    assert set(by_name) == {"payments", "emails", "reports", HOSTILE_QUEUE}
    assert view.rows[0].queue == "payments"  # growing, failing, an expired lease
    pay = by_name["payments"]
    assert (pay.pending.value, pay.pending.capped) == (6, False)
    assert (pay.processing, pay.expired) == (1, 1)
    # The history's deltas (no fold has run): the minutes' counts are there already.
    assert (sum(m.enqueued for m in pay.minutes), pay.completed, pay.failed) == (12, 2, 3)
    assert len(pay.minutes) == 61 and pay.trend is Trend.GROWING and pay.failing
    assert pay.pickup is not None and pay.pickup.started == 6
    assert by_name["emails"].paused is not None
    assert by_name["emails"].paused.reason == "smtp down"
    reports = by_name["reports"]
    assert reports.limit is not None and reports.limit.concurrency == 10
    # Sampled with none due (the minutes of the seed's samples): steady.
    assert reports.pending.value == 0 and reports.trend is Trend.STEADY
    assert view.truncated == frozenset()
    # Folded, the same figures.
    with store.db.connection() as conn, conn.transaction():
        counters.fold_on(conn, SCHEMA, 10_000, timedelta(seconds=5))
    again = {r.queue: r for r in QueuesReads(store.db).overview().rows}["payments"]
    assert (again.completed, again.failed, again.pending.value) == (2, 3, 6)
    # Folded and not folded yet (in the same minute, but at a minute's turn): added.
    (lease,) = store.work.claim("payments", "w-1", TTL)
    store.work.fail(lease, "PSPError: 503 for invoice 9", retry_delay=TTL, retry=False)
    both = {r.queue: r for r in QueuesReads(store.db).overview().rows}["payments"]
    assert (both.completed, both.failed, sum(m.enqueued for m in both.minutes)) == (2, 4, 12)


def test_the_overview_reads_the_trends_samples_as_the_fold_wrote_them(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    backlog(sql_conn, "big", [7000, 8000])
    sql_conn.execute(
        "UPDATE leasectl.queue_backlog SET capped = true, estimated = (pending = 8000) "
        "WHERE queue = 'big'"
    )
    # A sample older than the trend's minutes: not read (the view shows nothing of it).
    old = "date_trunc('minute', now(), 'UTC') - interval '30 minutes'"
    sql_conn.execute(f"INSERT INTO leasectl.queue_backlog_minutes (minute) VALUES ({old})")
    sql_conn.execute(
        f"INSERT INTO leasectl.queue_backlog (queue, minute, pending, capped) "
        f"VALUES ('big', {old}, 5, false)"
    )
    [big] = QueuesReads(store.db).overview().rows
    samples = [(m.pending, m.pending_capped, m.pending_estimated) for m in big.minutes if m.pending]
    assert samples == [(7000, True, False), (8000, True, True)]
    assert len(big.minutes) == 61 and big.minutes[-31].pending is None


def test_the_overview_stops_at_its_queue_limit(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(store, sql_conn)
    view = QueuesReads(store.db, queue_limit=2).overview()
    assert len(view.rows) == 2 and "queues" in view.truncated
    assert view.rows[0].queue == "payments"


def test_a_queues_screen_reads_its_minutes_errors_and_events(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(store, sql_conn)
    store.ops.pause("payments", actor="ops:bob", reason="looking")
    detail = QueuesReads(store.db).queue("payments")
    row = detail.row
    assert (row.pending.value, row.processing, row.expired, row.stuck.value) == (6, 1, 1, 0)
    assert row.oldest_due_age is not None
    assert row.paused is not None and row.paused.paused_by == "ops:bob"
    assert row.limit is None
    assert len(detail.stats.minutes) == 61
    assert sum(m.completed for m in detail.stats.minutes) == 2
    assert sum(m.started for m in detail.stats.minutes) == 6
    assert detail.stats.minutes[-1].pickup_p95_ms is not None
    [group] = detail.errors.groups
    assert (group.error, group.count) == ("PSPError: <n> for invoice <n>", 3)
    actions = [e.action for e in detail.events.entries]
    assert actions == ["pause"], actions
    # Another queue's screen holds none of it: its own limit only.
    other = QueuesReads(store.db).queue("reports")
    assert other.errors.groups == ()
    assert [e.action for e in other.events.entries] == ["limit"]
    assert other.row.limit is not None and other.row.pending.value == 0


def test_a_queue_nobody_knows_reads_as_empty(store: Stores) -> None:
    detail = QueuesReads(store.db).queue("nope")
    assert detail.row.pending.value == 0 and detail.row.paused is None
    assert all(m.enqueued == 0 for m in detail.stats.minutes)


@pytest.mark.full
def test_a_viewer_reads_both(
    granted: Roles, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The Queues view needs no privilege beyond `leasectl grant --viewer`'s."""
    seed(store, sql_conn)
    db = Database.connect(granted.dsn("viewer"), SCHEMA)
    try:
        reads = QueuesReads(db)
        assert {r.queue for r in reads.overview().rows} >= {"payments", "emails"}
        assert reads.queue("payments").errors.groups
    finally:
        db.close()
