"""The console's snapshot (Panels over ConsoleReads) against real PostgreSQL: counts, order,
bounds, filters, plans."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import psycopg
import pytest

from bench.plans import generic_plan
from leasectl.core.models import ConsoleCounts, Freshness, JobStatus
from leasectl.core.throughput import GRACE, minute_of
from leasectl.db import sql as queries
from tests.seed import ALIVE, SILENT, seed_console
from tests.stores import Stores


def test_counts_rows_and_order(store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_console(store, sql_conn)
    snap = store.panels.snapshot(None, 50)
    c = snap.counts
    assert (c.pending, c.due) == (5, 4)  # 3 payments + 1 email due, 1 retry delayed
    assert (c.processing, c.expired, c.at_risk, c.stuck) == (5, 2, 1, 1)
    assert snap.db_now is not None and snap.server_version and snap.database

    assert [j.id for j in snap.pending][-1] == seeded.delayed  # delayed retries come last
    assert snap.pending[-1].run_at > snap.db_now

    lease_order = [j.lease_until for j in snap.processing if j.lease_until is not None]
    assert lease_order == sorted(lease_order)  # soonest expiry first, expired first of all
    assert {j.id for j in snap.processing[:2]} == {le.job_id for le in seeded.expired}
    assert all(j.risk_window == timedelta(seconds=10) for j in snap.processing)

    stuck_ids = [j.id for j in snap.stuck]
    assert set(stuck_ids) == {seeded.stuck, *(le.job_id for le in seeded.expired)}
    lapsed = [j.lapsed_at for j in snap.stuck if j.lapsed_at is not None]
    assert lapsed == sorted(lapsed)  # longest lapsed first

    owners = {o.owner: o for o in snap.owners}
    assert owners[ALIVE].freshness == Freshness.FRESH
    assert owners[SILENT].freshness == Freshness.SILENT
    assert owners[SILENT].expired == 2


def test_panels_are_bounded_but_counts_are_not(store: Stores) -> None:
    store.ops.enqueue([{} for _ in range(30)], queue="bulk")
    snap = store.panels.snapshot(None, 7)
    assert len(snap.pending) == 7
    assert snap.counts.pending == 30


def test_filters(store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_console(store, sql_conn)
    emails = store.panels.snapshot("emails", 50)
    assert emails.counts.pending == 1 and emails.counts.processing == 0
    assert {j.queue for j in emails.pending} == {"emails"}
    assert emails.owners == ()  # no owner declares or holds emails

    silent = store.panels.snapshot(None, 50, owner="silent-host")
    assert {j.lease_owner for j in silent.processing} == {SILENT}
    assert [o.owner for o in silent.owners] == [SILENT]

    one = store.panels.snapshot(None, 50, job_id=seeded.stuck)
    assert [j.id for j in one.stuck] == [seeded.stuck]
    assert one.pending == () and one.processing == ()


def test_counts_under_a_filter_and_every_queue(store: Stores, sql_conn: psycopg.Connection) -> None:
    """Under a queue filter the counts of every queue come along; under an owner filter, what
    it matches; the names of every queue with live jobs, whatever the filter."""
    seeded = seed_console(store, sql_conn)
    plain = store.panels.snapshot(None, 50)
    assert plain.all_counts is None and plain.matched is None
    assert plain.queues == ("emails", "payments")
    emails = store.panels.snapshot("emails", 50)
    assert emails.totals == plain.counts and emails.counts.pending == 1
    assert emails.queues == ("emails", "payments")
    silent = store.panels.snapshot(None, 1, owner="silent-host")
    assert silent.matching == ConsoleCounts(pending=0, processing=2, expired=2, stuck=1)
    assert len(silent.processing) == 1  # the rows are bounded, the count is not
    assert silent.all_owners == tuple(o.owner for o in plain.owners)
    one = store.panels.snapshot(None, 50, job_id=seeded.stuck)
    assert one.matching == ConsoleCounts(stuck=1)


def test_a_stuck_job_comes_with_the_event_that_last_quarantined_it(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    [job] = [j for j in store.panels.snapshot(None, 50).stuck if j.id == seeded.stuck]
    assert (job.quarantined_by, job.quarantine_reason) == ("test", "seed")
    assert job.quarantined_at is not None
    # Requeued, then quarantined again: the last event says who and why.
    assert store.ops.operator_requeue(
        store.ops.seen_now([seeded.stuck]), actor="operator:bob", reason="retry"
    ).changed == (seeded.stuck,)
    assert store.ops.operator_mark_stuck(
        store.ops.seen_now([seeded.stuck]), actor="operator:carol", reason="poison, INC-9"
    ).changed == (seeded.stuck,)
    [job] = [j for j in store.panels.snapshot(None, 50).stuck if j.id == seeded.stuck]
    assert (job.quarantined_by, job.quarantine_reason) == ("operator:carol", "poison, INC-9")
    # An expired lease (Processing) is no quarantine.
    assert all(j.quarantined_by is None for j in store.panels.snapshot(None, 50).processing)


def test_a_quarantined_jobs_last_error_is_not_the_reason_written_over_it(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """mark-stuck writes its reason over last_error: the panel shows the error the job's
    attempts recorded before, and the reason as the reason."""
    seeded = seed_console(store, sql_conn)  # the delayed retry failed with "gateway 503"
    assert store.ops.operator_mark_stuck(
        store.ops.seen_now([seeded.delayed]), actor="operator:dave", reason="poison"
    ).changed == (seeded.delayed,)
    assert store.ops.get_job(seeded.delayed).last_error == "poison"
    stuck = {j.id: j for j in store.panels.snapshot(None, 50).stuck}
    retry = stuck[seeded.delayed]
    assert (retry.last_error, retry.quarantine_reason) == ("gateway 503", "poison")
    # Quarantined while its first attempt ran: no error was ever recorded.
    assert stuck[seeded.stuck].last_error is None


def window_of(db_now: datetime, minutes: int = 30) -> list[datetime]:
    first = minute_of(db_now) - timedelta(minutes=minutes - 1)
    return [first + timedelta(minutes=i) for i in range(minutes)]


def test_throughput_per_clock_minute(store: Stores, sql_conn: psycopg.Connection) -> None:
    t = sql_conn.execute("SELECT date_trunc('minute', now())").fetchone()[0]
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (status, finished_at) "
        "SELECT 'Completed'::leasectl.job_status, %(t)s - make_interval(mins => m) "
        "FROM generate_series(0, 29) AS m, generate_series(1, 3) "
        "UNION ALL SELECT 'Completed', now() - interval '2 hours' "
        "UNION ALL SELECT 'Failed', now() - interval '10 seconds'",
        {"t": t},
    )
    snap = store.panels.snapshot(None, 10)
    # The rows sit in the 30 minutes ending with t; the snapshot's window ends with its own
    # minute (t, or the next one if the clock turned a minute meanwhile).
    expected = tuple(
        3 if t - timedelta(minutes=29) <= m <= t else 0 for m in window_of(snap.db_now)
    )
    assert snap.throughput == expected
    assert snap.failed_recent == 1


def test_throughput_counts_each_settled_minute_once(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Later refreshes count only what finished since the last one: a row given a finished_at
    before the last refresh's settled point is not counted again (the proof that the window is
    not recounted); rows that finish after it are, also each refresh in between."""
    finish = (
        "INSERT INTO leasectl.jobs (queue, status, finished_at) "
        "SELECT %s, 'Completed'::leasectl.job_status, now() - %s::interval "
        "FROM generate_series(1, %s)"
    )
    sql_conn.execute(finish, ("a", "1 second", 4))
    first = store.panels.snapshot(None, 10)
    assert sum(first.throughput) == 4
    sql_conn.execute(finish, ("a", "1 hour", 1))  # outside the window
    sql_conn.execute(finish, ("a", "0 seconds", 2))
    second = store.panels.snapshot(None, 10)
    assert sum(second.throughput) == 6
    # Behind the settled point of the second refresh (its now() - GRACE): not counted again.
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (status, finished_at) SELECT 'Completed', %s",
        (second.db_now - GRACE - timedelta(seconds=1),),
    )
    sql_conn.execute(finish, ("b", "0 seconds", 3))
    third = store.panels.snapshot(None, 10)
    assert sum(third.throughput) == 9
    # Another queue filter has its own count, made whole the first time.
    assert sum(store.panels.snapshot("a", 10).throughput) == 6
    assert sum(store.panels.snapshot("b", 10).throughput) == 3
    # A new store (a console started afresh) counts the window: all 10 rows in it.
    with Stores.connect(store.db.dsn, "leasectl", max_size=1) as fresh:
        assert sum(fresh.panels.snapshot(None, 10).throughput) == 10


def test_finished_history_is_an_estimate(store: Stores, sql_conn: psycopg.Connection) -> None:
    snap = store.panels.snapshot(None, 10)
    assert snap.counts.completed_estimate is None  # no statistics yet: unknown, not zero
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (status, finished_at) "
        "SELECT 'Completed', now() - interval '1 day' FROM generate_series(1, 2000)"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")
    snap = store.panels.snapshot(None, 10)
    assert snap.counts.completed_estimate == pytest.approx(2000, rel=0.2)
    assert snap.counts.failed_estimate == 0  # none in the sample: about zero, as `status` says


def test_failed_panel_newest_first_among_the_last_finished(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The Failed panel: Failed jobs newest first (by finished_at), the error cut to 300
    characters, the queue filter applied; it looks only among the last ``failed_scan``
    finished jobs, so an older failure behind more Completed jobs than that is not listed."""
    rows = sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, finished_at, last_error) "
        "SELECT CASE WHEN g % 2 = 0 THEN 'payments' ELSE 'emails' END, 'Failed', 5, "
        "now() - make_interval(secs => g * 10), 'ValueError: ' || repeat('x', 400) "
        "FROM generate_series(1, 6) AS g RETURNING id, finished_at"
    ).fetchall()
    newest_first = [i for i, _ in sorted(rows, key=lambda r: r[1], reverse=True)]
    # Completed jobs in between, and one older failure behind 50 of them.
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, finished_at) "
        "SELECT 'payments', 'Completed', 1, now() - make_interval(secs => 65 + g) "
        "FROM generate_series(1, 50) AS g"
    )
    old = sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, finished_at, last_error) "
        "VALUES ('payments', 'Failed', 5, now() - interval '1 hour', 'old') RETURNING id"
    ).fetchone()
    assert old is not None
    snap = store.panels.snapshot(None, 4)
    assert [j.id for j in snap.failed] == newest_first[:4]  # bounded by the panel's limit
    assert all(j.status == JobStatus.FAILED for j in snap.failed)
    assert snap.failed[0].last_error is not None and len(snap.failed[0].last_error) == 300
    assert snap.failed[0].finished_at is not None and snap.failed_scan == 5000
    payments = store.panels.snapshot("payments", 50)
    assert {j.queue for j in payments.failed} == {"payments"}
    assert [j.id for j in payments.failed][-1] == old[0]  # within the last 5,000 finished
    # Only the last 20 finished are looked at: the old failure is beyond them.
    near = store.panels.snapshot(None, 50, failed_scan=20)
    assert [j.id for j in near.failed] == newest_first
    assert old[0] not in [j.id for j in near.failed]


CONSOLE_QUERIES = [
    "console_counts",
    "console_throughput",
    "console_pending",
    "console_processing",
    "console_stuck",
    "console_match_counts",
    "console_queues",
    "console_failed",
    "console_paused",
]
# The console queries' parameters (status_owners' too), unfiltered.
PARAMS = {
    "queue": None,
    "owner": None,
    "owner_end": None,
    "job_id": None,
    "limit": 100,
    "risk_window": timedelta(seconds=10),
    "minutes": 30,
    "since": None,
    "grace": GRACE,
    "window": timedelta(hours=1),
    "queue_limit": 200,
    "failed_scan": 5000,
    "paused_limit": 100,
    "budget": 6000,
    "recount_cap": 20_000,
    "recount_budget": 40_000,
    "group_limit": 1000,
}


@pytest.mark.slow
def test_refresh_queries_use_indexes_on_a_big_history(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """No console query scans the finished history (here 300k Completed rows)."""
    seed_console(store, sql_conn)
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, finished_at) "
        "SELECT 'payments', 'Completed', 1, now() - make_interval(secs => g * 3) "
        "FROM generate_series(1, 300000) AS g"
    )
    sql_conn.execute("VACUUM ANALYZE leasectl.jobs")
    for name in CONSOLE_QUERIES:
        for extra in ({}, {"queue": "payments"}):
            query = queries.get(name).render("leasectl").as_string(sql_conn)
            plan = "\n".join(
                r[0] for r in sql_conn.execute("EXPLAIN (COSTS OFF) " + query, {**PARAMS, **extra})
            )
            assert not re.search(r"Seq Scan on jobs", plan), f"{name} {extra}:\n{plan}"
    # The console runs them with generic plans (CONSOLE_SETTINGS), made once for any filter.
    filters = ({}, {"queue": "payments"}, {"owner": "w-", "owner_end": "w."}, {"job_id": 1})
    for name in [*CONSOLE_QUERIES, "status_owners"]:
        query = queries.get(name).render("leasectl")
        with generic_plan(sql_conn, query, queries.CONSOLE_SETTINGS) as explain:
            for extra in filters:
                plan = explain({**PARAMS, **extra}, analyze=False)
                assert "Seq Scan on jobs" not in plan, f"{name} generic {extra}:\n{plan}"
    snap = store.panels.snapshot(None, 100)
    # 29 whole minutes and the current one so far, of the read's clock: every finished job in
    # them (at one every 3 s, 20 a minute, from the seed's clock, seconds before on a busy
    # machine: so counted, not assumed).
    [(expected,)] = sql_conn.execute(
        "SELECT count(*) FROM leasectl.jobs WHERE status IN ('Completed', 'Failed') "
        "AND finished_at >= date_trunc('minute', %(now)s::timestamptz) - interval '29 minutes' "
        "AND finished_at < date_trunc('minute', %(now)s::timestamptz) + interval '1 minute'",
        {"now": snap.db_now},
    ).fetchall()
    assert sum(snap.throughput) == expected and 28 * 20 <= expected <= 30 * 20 + 1
    assert snap.counts.processing == 5 and snap.pending[0].status == JobStatus.PENDING


def test_refresh_plans_made_on_empty_tables_read_only_through_indexes(
    sql_conn: psycopg.Connection,
) -> None:
    """A console started on a new install keeps the generic plans it made then: none of them
    may scan or hash a whole table, which would read the history that arrives later."""
    sql_conn.execute("ANALYZE leasectl.jobs")
    for name in [*CONSOLE_QUERIES, "status_owners"]:
        query = queries.get(name).render("leasectl")
        with generic_plan(sql_conn, query, queries.CONSOLE_SETTINGS) as explain:
            for extra in ({}, {"queue": "payments", "owner": "w-", "owner_end": "w.", "job_id": 1}):
                plan = explain({**PARAMS, **extra}, analyze=False)
                assert not re.search(r"Seq Scan on jobs|Hash Join|Merge Join|Bitmap", plan), (
                    f"{name} {extra}:\n{plan}"
                )


def test_an_owner_that_fell_out_of_the_window_keeps_its_intervals(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A worker last seen before the owners window that still holds a lease is listed with the
    intervals it declared (status_owners joins its workers row)."""
    store.work.worker_register(
        "old-host:1:aa",
        hostname="old-host",
        pid=1,
        queues=["slow"],
        lease_ttl=timedelta(minutes=5),
        heartbeat_every=timedelta(seconds=7),
    )
    store.ops.enqueue([{}], queue="slow")
    assert store.work.claim("slow", "old-host:1:aa", timedelta(minutes=5))
    sql_conn.execute(
        "UPDATE leasectl.workers SET last_seen_at = now() - interval '2 hours' "
        "WHERE worker_id = 'old-host:1:aa'"
    )
    for owners in (store.panels.snapshot(None, 10).owners, tuple(store.ops.owners())):
        [old] = [o for o in owners if o.owner == "old-host:1:aa"]
        assert (old.hostname, old.held) == ("old-host", 1)
        assert old.heartbeat_every == timedelta(seconds=7)
        assert old.last_seen_at is not None
