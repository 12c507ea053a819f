"""One delta per attempt outcome (migration 27): the completion's trigger writes the history's
delta only, history_fold adds it to the counters' totals too, and the counters stay exact and
monotonic across the upgrade, the folds and the history's prune."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.db import counters
from leasectl.db import sql as queries
from leasectl.db import stats as history
from leasectl.db.metrics import MetricsReads
from tests.stores import Stores

TTL = timedelta(seconds=30)
OUTCOMES = ("completed", "failed", "retried")


def exported(store: Stores, queue: str) -> dict[str, int]:
    """The outcome counters of ``queue`` as a scrape reads them (totals plus unfolded deltas)."""
    rows = MetricsReads(store.db).read(timedelta(seconds=10)).counters
    return {c.counter: c.value for c in rows if c.queue == queue and c.counter in OUTCOMES}


def in_history(store: Stores, queue: str) -> dict[str, int]:
    """The same counts summed over `stats`' minutes of the last hour."""
    minutes = history.read_stats(store.db, queue, timedelta(hours=1)).minutes
    return {name: sum(getattr(m, name) for m in minutes) for name in OUTCOMES}


def run(store: Stores, queue: str, completed: int, retried: int) -> None:
    """``completed`` completions and ``retried`` retried failures, one statement each."""
    ids = store.ops.enqueue([{}] * (completed + retried), queue=queue, max_attempts=3)
    for n in range(len(ids)):
        (lease,) = store.work.claim(queue, "w", TTL)
        if n < retried:
            assert store.work.fail(lease, "x", retry_delay=timedelta(hours=1)) == "Pending"
        else:
            assert store.work.complete([lease]) == {lease.job_id}


def run_at_26(dsn: str, queue: str, completed: int, retried: int) -> None:
    """``run`` as version 26 wrote it, in SQL of its own (today's enqueue and failure write
    columns of later migrations): each job leased with its attempt opened, then ended in one
    statement of attempts each, its job's status first (a retried failure's job is Pending)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(completed + retried):
            row = conn.execute(
                "INSERT INTO leasectl.jobs (queue, status, attempts, max_attempts, lease_owner, "
                "lease_until, heartbeat_at) VALUES (%s, 'Processing', 1, 3, 'w', "
                "now() + interval '30 s', now()) RETURNING id",
                (queue,),
            ).fetchone()
            assert row is not None
            job = row[0]
            conn.execute(
                "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, "
                "heartbeat_at) VALUES (%s, 1, 'w', now(), now())",
                (job,),
            )
            retry = n < retried
            conn.execute(
                "UPDATE leasectl.jobs SET status = %s, lease_owner = NULL, lease_until = NULL, "
                "finished_at = CASE WHEN %s THEN NULL ELSE now() END WHERE id = %s",
                ("Pending" if retry else "Completed", retry, job),
            )
            conn.execute(
                "UPDATE leasectl.job_attempts SET outcome = %s, ended_at = now(), "
                "error = CASE WHEN %s THEN 'x' END WHERE job_id = %s AND attempt = 1",
                ("failed" if retry else "completed", retry, job),
            )


def deltas(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM leasectl.{table} WHERE counter IN ('completed', 'failed', 'retried')"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_attempts_trigger_writes_one_delta_per_outcome(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    run(store, "q", completed=3, retried=2)
    assert deltas(sql_conn, "counter_deltas") == 0
    assert deltas(sql_conn, "queue_history_deltas") == 3 + 2 + 2  # completed, failed, retried
    want = {"completed": 3, "failed": 2, "retried": 2}
    assert exported(store, "q") == in_history(store, "q") == want
    counters.fold(store.db)
    assert deltas(sql_conn, "queue_history_deltas") == 0
    assert exported(store, "q") == in_history(store, "q") == want


def test_upgrade_from_26_with_unfolded_deltas_keeps_the_totals(
    empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 26 each outcome was written twice (counter_deltas and the history's deltas): the
    upgrade leaves the counter_deltas to counters_fold and moves the history's copies into
    queue_history alone, so nothing is counted twice, folded before the upgrade or not."""
    every = queries.migrations()
    assert every[25].version == 26
    with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
        monkeypatch.setattr(queries, "migrations", lambda: every[:26])
        store.db.migrate()
        run_at_26(empty_db_dsn, "a", completed=4, retried=1)
        store.db.one("metrics_counters_fold", {"fold_limit": 1000})  # 26's folds, committed
        store.db.one("history_fold", history.fold_params(1000))
        run_at_26(empty_db_dsn, "a", completed=2, retried=1)  # left unfolded at 26
        run_at_26(empty_db_dsn, "b", completed=1, retried=0)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            assert deltas(conn, "counter_deltas") == deltas(conn, "queue_history_deltas") == 5
        monkeypatch.setattr(queries, "migrations", lambda: every)
        assert store.db.migrate() == [m.version for m in every][26:]
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            assert deltas(conn, "counter_deltas") == 5  # the counters' copies, for their fold
            assert deltas(conn, "queue_history_deltas") == 0  # in queue_history now
        want_a = {"completed": 6, "failed": 2, "retried": 2}
        want_b = {"completed": 1, "failed": 0, "retried": 0}
        assert exported(store, "a") == {k: v for k, v in want_a.items() if v}
        assert exported(store, "b") == {k: v for k, v in want_b.items() if v}
        assert in_history(store, "a") == want_a and in_history(store, "b") == want_b
        run(store, "a", completed=1, retried=1)  # after the upgrade: the history's delta only
        want_a = {"completed": 7, "failed": 3, "retried": 3}
        for _ in range(2):
            assert exported(store, "a") == want_a and in_history(store, "a") == want_a
            counters.fold(store.db)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            assert deltas(conn, "counter_deltas") == deltas(conn, "queue_history_deltas") == 0


def test_pruning_the_history_lowers_no_counter(store: Stores, sql_conn: psycopg.Connection) -> None:
    run(store, "q", completed=2, retried=0)
    # An outcome's delta of eight days ago (a fold that never ran since), then every fold.
    sql_conn.execute(
        "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, delta) "
        "VALUES ('q', date_trunc('minute', now() - interval '8 days', 'UTC'), 'completed', 5)"
    )
    assert exported(store, "q") == {"completed": 7}
    counters.fold(store.db)
    assert exported(store, "q") == {"completed": 7}
    assert history.prune(store.db, timedelta(days=7)) >= 1
    old = "SELECT count(*) FROM leasectl.queue_history WHERE minute < now() - interval '7 days'"
    assert sql_conn.execute(old).fetchone() == (0,)
    assert exported(store, "q") == {"completed": 7}
    assert in_history(store, "q")["completed"] == 2


def test_a_fold_skips_an_outcome_whose_total_another_fold_holds(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The totals row of an outcome counter held by a fold left open (its minute's row free):
    a second fold moves the minute's other deltas and leaves the outcome's for later, without
    waiting; no value changes, and the held one is counted once the holder ends."""
    run(store, "q", completed=1, retried=0)
    counters.fold(store.db)  # the totals row and the minute's row exist, committed
    holder = psycopg.connect(db_dsn)
    try:
        holder.execute(
            "SELECT 1 FROM leasectl.counter_totals WHERE counter = 'completed' AND queue = 'q' "
            "FOR UPDATE"
        )
        run(store, "q", completed=2, retried=0)
        assert counters.fold(store.db, timeout=timedelta(seconds=5)) == 0
        assert deltas(sql_conn, "queue_history_deltas") == 2  # the completions wait
        left = sql_conn.execute("SELECT count(*) FROM leasectl.queue_history_deltas").fetchone()
        assert left == (2,)  # the enqueue and the pickups moved
        assert exported(store, "q") == {"completed": 3}
        assert in_history(store, "q")["completed"] == 3
    finally:
        holder.rollback()
        holder.close()
    counters.fold(store.db)
    assert deltas(sql_conn, "queue_history_deltas") == 0
    assert exported(store, "q") == {"completed": 3}
    assert in_history(store, "q")["completed"] == 3
