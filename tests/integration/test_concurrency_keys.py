"""Concurrency keys (migration 18): at most one job per queue and key in the head states
(Pending, Processing, Stuck), guaranteed by jobs_key_head_idx; the key's other jobs are
Waiting, promoted one at a time in queue order (priority, run_at, id) as each head leaves."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl.core.enqueue import NewJob
from leasectl.core.models import JobStatus
from tests.stores import Stores

TTL = timedelta(seconds=30)


def states(conn: psycopg.Connection[Any], key: str, queue: str = "pay") -> list[tuple[int, str]]:
    return conn.execute(
        "SELECT id, status::text FROM leasectl.jobs WHERE queue = %s AND concurrency_key = %s "
        "ORDER BY id",
        (queue, key),
    ).fetchall()


def test_a_keys_first_job_is_pending_and_the_others_wait(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        a = leasectl.enqueue(conn, queue="pay", payload=1, concurrency_key="card-1")
        b = leasectl.enqueue(conn, queue="pay", payload=2, concurrency_key="card-1")
        many = leasectl.enqueue_many(
            conn, [NewJob(i, queue="pay", concurrency_key="card-1") for i in range(3)]
        )
        other = leasectl.enqueue(conn, queue="pay", payload=3, concurrency_key="card-2")
        other_queue = leasectl.enqueue(conn, queue="refund", payload=4, concurrency_key="card-1")
        plain = leasectl.enqueue(conn, queue="pay", payload=5)
    assert states(sql_conn, "card-1") == [(a.id, "Pending"), (b.id, "Waiting")] + [
        (e.id, "Waiting") for e in many
    ]
    assert states(sql_conn, "card-2") == [(other.id, "Pending")]
    assert states(sql_conn, "card-1", "refund") == [(other_queue.id, "Pending")]
    status = sql_conn.execute("SELECT status::text FROM leasectl.jobs WHERE id = %s", (plain.id,))
    assert status.fetchone() == ("Pending",)


def test_a_batch_of_one_key_keeps_its_order(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        jobs = leasectl.enqueue_many(
            conn, [NewJob(i, queue="pay", concurrency_key="k") for i in range(5)]
        )
    assert [s for _, s in states(sql_conn, "k")] == ["Pending"] + ["Waiting"] * 4
    assert [i for i, _ in states(sql_conn, "k")] == [e.id for e in jobs]


def test_the_head_leaving_promotes_the_next_in_queue_order(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ops, work = store.ops, store.work
    first = ops.enqueue_jobs([NewJob("a", queue="pay", concurrency_key="k")])[0]
    # Waiting jobs in another order than their ids: priority first, then run_at, then id.
    late = ops.enqueue_jobs([NewJob("late", queue="pay", concurrency_key="k", priority=5)])[0]
    urgent = ops.enqueue_jobs([NewJob("urgent", queue="pay", concurrency_key="k", priority=-1)])[0]
    normal = ops.enqueue_jobs([NewJob("normal", queue="pay", concurrency_key="k")])[0]
    order = []
    for _ in range(4):
        leases = work.claim("pay", "w1", TTL, limit=10)
        assert len(leases) == 1  # never two of one key
        order.append(leases[0].job_id)
        assert work.complete(leases) == {leases[0].job_id}
    assert order == [first.id, urgent.id, normal.id, late.id]
    assert work.claim("pay", "w1", TTL, limit=10) == []
    assert {s for _, s in states(sql_conn, "k")} == {"Completed"}


def test_other_keys_are_not_held_up(store: Stores) -> None:
    ops, work = store.ops, store.work
    # A busy key with many jobs enqueued first, then one job each of other keys.
    ops.enqueue_jobs([NewJob(i, queue="pay", concurrency_key="busy") for i in range(200)])
    others = ops.enqueue_jobs(
        [NewJob(i, queue="pay", concurrency_key=f"other-{i}") for i in range(5)]
    )
    leases = work.claim("pay", "w1", TTL, limit=100)
    claimed = {lease.job_id for lease in leases}
    assert len(leases) == 6  # the busy key's head and every other key's job
    assert {e.id for e in others} <= claimed


def test_a_retried_failure_keeps_its_key_and_runs_before_the_later_jobs(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ops, work = store.ops, store.work
    first, second = ops.enqueue_jobs(
        [
            NewJob("a", queue="pay", concurrency_key="k"),
            NewJob("b", queue="pay", concurrency_key="k"),
        ]
    )
    (lease,) = work.claim("pay", "w1", TTL, limit=10)
    assert lease.job_id == first.id
    assert work.fail(lease, "boom", retry_delay=timedelta(0)) == JobStatus.PENDING
    # Still the head: the later job waits, the retry is claimed next.
    assert states(sql_conn, "k") == [(first.id, "Pending"), (second.id, "Waiting")]
    (again,) = work.claim("pay", "w1", TTL, limit=10)
    assert again.job_id == first.id
    assert work.fail(again, "final", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    assert states(sql_conn, "k") == [(first.id, "Failed"), (second.id, "Pending")]


def test_the_database_refuses_a_second_head(
    sql_conn: psycopg.Connection[Any], store: Stores
) -> None:
    a, b = store.ops.enqueue_jobs(
        [
            NewJob("a", queue="pay", concurrency_key="k"),
            NewJob("b", queue="pay", concurrency_key="k"),
        ]
    )
    with pytest.raises(psycopg.errors.UniqueViolation):
        sql_conn.execute("UPDATE leasectl.jobs SET status = 'Pending' WHERE id = %s", (b.id,))
