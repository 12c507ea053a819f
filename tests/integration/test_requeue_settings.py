"""Requeue with intent (migration 26): `--priority N` and `--attempts N`, guarded and audited.

Each test builds, with real commits, the one situation in which a SET expression or an audit
field of the requeue is all that decides the outcome; `python -m tests.mutation` mutates them
one at a time (the `requeue-priority-*`, `requeue-attempts-*` and `requeue-audit-*` mutants)
and checks that the test named for each one fails.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.actions import JobSettings, OperatorAction
from leasectl.core.errors import UsageError
from leasectl.core.filters import JobFilter
from leasectl.core.models import JobStatus
from leasectl.runtime import bulk as engine
from tests.stores import Stores

TTL = timedelta(minutes=5)
Q = "q"


def failed_job(store: Stores, *, max_attempts: int = 1, priority: int = 0) -> int:
    """A job whose only attempt failed for good: Failed, attempts 1, max_attempts 1."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=max_attempts, priority=priority)
    [lease] = store.work.claim(Q, "w1", TTL)
    assert lease.job_id == job_id
    assert store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    return job_id


def requeue(store: Stores, job_id: int, **settings: Any) -> tuple[int, ...]:
    seen = store.ops.get_job(job_id).seen()
    result = store.ops.operator_requeue(
        [seen], actor="op", reason="incident", settings=JobSettings(**settings)
    )
    return result.changed


def event(conn: psycopg.Connection[Any], job_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    row = conn.execute(
        "SELECT before, after FROM leasectl.job_events WHERE job_id = %s AND action = 'requeue' "
        "ORDER BY id DESC LIMIT 1",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_requeue_with_a_priority_sets_it(store: Stores) -> None:
    job_id = failed_job(store, priority=5)
    assert requeue(store, job_id, priority=-100) == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.status, job.priority) == (JobStatus.PENDING, -100)


def test_requeue_without_a_priority_keeps_it(store: Stores) -> None:
    job_id = failed_job(store, priority=5)
    assert requeue(store, job_id) == (job_id,)
    assert store.ops.get_job(job_id).priority == 5


def test_a_requeued_job_with_a_smaller_priority_is_claimed_before_the_backlog(
    store: Stores,
) -> None:
    """The incident: a retried job went behind the queue's backlog. With a smaller priority it
    is claimed first, ahead of jobs that were due before it."""
    job_id = failed_job(store)
    backlog = store.ops.enqueue([{}, {}, {}], queue=Q)
    assert requeue(store, job_id, priority=-1) == (job_id,)
    [lease] = store.work.claim(Q, "w2", TTL)
    assert lease.job_id == job_id
    [after] = store.work.claim(Q, "w2", TTL)
    assert after.job_id == backlog[0]


def test_requeue_with_attempts_gives_that_many_more_from_now(store: Stores) -> None:
    """max_attempts := attempts + N; the attempt counter (the lease's fencing token) stays."""
    job_id = failed_job(store)
    assert requeue(store, job_id, attempts=3) == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.max_attempts) == (JobStatus.PENDING, 1, 4)


def test_requeue_with_attempts_counts_from_the_attempts_made_not_the_old_budget(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """A Stuck job that made 1 of 10 attempts, requeued with 2 more: budget 3, not 12."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=10)
    store.work.claim(Q, "w1", TTL)
    seen = store.ops.get_job(job_id).seen()
    assert store.ops.operator_mark_stuck([seen], actor="op", reason=None, force=True).changed
    assert requeue(store, job_id, attempts=2) == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.attempts, job.max_attempts) == (1, 3)


def test_requeue_without_attempts_gives_a_spent_budget_one_more(store: Stores) -> None:
    job_id = failed_job(store)
    assert requeue(store, job_id) == (job_id,)
    assert store.ops.get_job(job_id).max_attempts == 2


def test_requeue_without_attempts_keeps_a_budget_not_spent(store: Stores) -> None:
    """A Stuck job that made 1 of 10 attempts, requeued without --attempts: still 10 (one
    more is given only to a spent budget), not attempts + 1."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=10)
    store.work.claim(Q, "w1", TTL)
    seen = store.ops.get_job(job_id).seen()
    assert store.ops.operator_mark_stuck([seen], actor="op", reason=None, force=True).changed
    assert requeue(store, job_id) == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.attempts, job.max_attempts) == (1, 10)


def test_requeue_with_attempts_stays_within_the_largest_budget(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """999 attempts made, 5 more asked: the budget is the schema's bound (1000), not 1004
    (which its CHECK would refuse, failing the whole batch)."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=1000)
    sql_conn.execute("UPDATE leasectl.jobs SET attempts = 998 WHERE id = %s", (job_id,))
    lease = store.work.claim_by_id(job_id, "w1", TTL)
    assert lease is not None and lease.attempt == 999
    assert store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    assert requeue(store, job_id, attempts=5) == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.max_attempts) == (JobStatus.PENDING, 999, 1000)


def test_the_function_gives_at_least_one_more_attempt_whatever_its_caller_passes(
    store: Stores,
) -> None:
    """The CLI and the console refuse --attempts below 1; the function, which an operator may
    call directly, never lowers a budget below one more attempt either."""
    job_id = failed_job(store, max_attempts=1)
    assert requeue(store, job_id, attempts=-5) == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.attempts, job.max_attempts) == (1, 2)


def test_the_event_records_priority_and_budget_before_and_after(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    job_id = failed_job(store, priority=5)
    assert requeue(store, job_id, priority=-7, attempts=4) == (job_id,)
    before, after = event(sql_conn, job_id)
    assert (before["priority"], before["max_attempts"], before["attempts"]) == (5, 1, 1)
    assert (after["priority"], after["max_attempts"], after["attempts"]) == (-7, 5, 1)


def test_a_requeue_with_settings_of_a_job_that_moved_since_the_operator_looked_changes_nothing(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The operator saw the Failed job; another operator requeued it and a worker failed it
    again (Failed, attempts 2). The first operator's priority and budget are not applied."""
    job_id = failed_job(store, priority=5)
    seen = store.ops.get_job(job_id).seen()
    assert requeue(store, job_id) == (job_id,)
    [lease] = store.work.claim(Q, "w2", TTL)
    assert store.work.fail(lease, "y", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    result = store.ops.operator_requeue(
        [seen], actor="op", reason=None, settings=JobSettings(priority=-100, attempts=50)
    )
    assert result.changed == () and [s.id for s in result.skipped] == [job_id]
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.max_attempts, job.priority) == (
        JobStatus.FAILED, 2, 2, 5,
    )  # fmt: skip


def test_settings_on_an_action_that_takes_none_are_refused_before_any_change(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    job_id = failed_job(store)
    seen = store.ops.get_job(job_id).seen()
    with pytest.raises(UsageError, match="requeue only"):
        store.ops.operator_action(
            OperatorAction.DELETE, [seen], actor="op", reason=None, settings=JobSettings(priority=1)
        )
    assert store.ops.get_job(job_id).status == JobStatus.FAILED


def test_a_requeue_on_a_filter_applies_the_settings_to_every_job(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ids = [failed_job(store) for _ in range(3)]
    result = engine.run(
        store.ops,
        engine.action("requeue"),
        JobFilter(states=frozenset({JobStatus.FAILED}), queue=Q),
        actor="op",
        reason="incident",
        settings=JobSettings(priority=-3, attempts=2),
        batch_size=2,
    )
    assert result.complete and result.changed == 3
    jobs = [store.ops.get_job(i) for i in ids]
    assert [(j.status, j.priority, j.max_attempts) for j in jobs] == [
        (JobStatus.PENDING, -3, 3)
    ] * 3
