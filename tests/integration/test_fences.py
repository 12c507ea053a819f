"""Every fence and guard of the lease statements, each with a fixed test that fails without it.

A lease is fenced by (job id, owner, attempt, status = Processing); a claim by status, due
run_at, queue and (for takeovers) an expired lease with attempts left; an operator action by the
state the operator saw (status, attempts, owner), the statuses it applies to and the live-lease
--force guard; the watcher by expiry and its queue filter. Each test below builds, on purpose
and with real commits, the one situation in which a single predicate is all that stands between
the stale party and the job. `python -m tests.mutation` deletes the predicates one at a time and
checks that the test named for each one fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.errors import LeaseLost
from leasectl.core.models import JobStatus, Lease, SeenState
from leasectl.db.handler_tx import HandlerTransactions
from leasectl.runtime import retention
from leasectl.runtime.watcher import WatcherConfig, run_pass
from tests.stores import Stores

TTL = timedelta(minutes=5)
Q = "q"


def expire(conn: psycopg.Connection[Any], *job_ids: int) -> None:
    """Move leases into the past: the test's way of advancing the database clock."""
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = ANY(%s)",
        (list(job_ids),),
    )


def state(store: Stores, job_id: int) -> tuple[JobStatus, int, str | None]:
    job = store.ops.get_job(job_id)
    return job.status, job.attempts, job.lease_owner


def watcher(
    store: Stores,
    *,
    mark: bool = False,
    batch: int = 500,
    queue: str | None = None,
    owner: str | None = None,
    dry_run: bool = False,
) -> Any:
    config = WatcherConfig(
        mode="mark" if mark else "requeue",
        batch_size=batch,
        queue=queue,
        owner=owner,
        actor="watcher@fence",
    )
    return run_pass(store.ops, config, dry_run=dry_run)


def stuck_with_a_lapsed_lease(store: Stores, conn: psycopg.Connection[Any], **enqueue: Any) -> int:
    """A job the watcher quarantined: Stuck, its lapsed lease_until kept (mark mode keeps it)."""
    [job_id] = store.ops.enqueue([{}], queue=Q, **enqueue)
    [lease] = store.work.claim(Q, "w-stuck", TTL)
    expire(conn, job_id)
    assert watcher(store, mark=True).marked_stuck == 1
    assert store.ops.get_job(job_id).status == JobStatus.STUCK
    return lease.job_id


# -- the same owner re-claims its own lapsed job ----------------------------------------------
#
# Owner w1 leases a job (attempt 1); the lease lapses while the handler still runs; w1's next
# round trip takes the job over again (attempt 2). The stale attempt-1 handler and the new
# attempt-2 lease have the same job and the same owner: only the attempt tells them apart.


@pytest.fixture
def reclaimed(store: Stores, sql_conn: psycopg.Connection[Any]) -> tuple[Lease, Lease]:
    """(stale attempt-1 lease, live attempt-2 lease) of one job, both held by w1."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    [stale] = store.work.claim(Q, "w1", TTL)
    expire(sql_conn, job_id)
    [live] = store.work.claim(Q, "w1", TTL)
    assert (live.job_id, live.owner, live.attempt) == (job_id, "w1", 2)
    assert (stale.owner, stale.attempt) == ("w1", 1)
    return stale, live


def _untouched_by_stale(store: Stores, stale: Lease, live: Lease) -> None:
    """The stale call changed nothing: the live lease still holds and still works."""
    assert state(store, live.job_id) == (JobStatus.PROCESSING, 2, "w1")
    assert store.ops.get_job(live.job_id).lease_until == live.until
    assert set(store.work.heartbeat([live], TTL)) == {live.job_id}


def test_same_owner_stale_attempt_heartbeat_is_refused(
    store: Stores, reclaimed: tuple[Lease, Lease]
) -> None:
    stale, live = reclaimed
    assert store.work.heartbeat([stale], TTL) == {}
    _untouched_by_stale(store, stale, live)


def test_same_owner_stale_attempt_complete_is_refused(
    store: Stores, reclaimed: tuple[Lease, Lease]
) -> None:
    stale, live = reclaimed
    assert store.work.complete([stale]) == set()
    _untouched_by_stale(store, stale, live)
    assert store.work.complete([live]) == {live.job_id}


def test_same_owner_stale_attempt_transaction_is_refused(
    store: Stores, reclaimed: tuple[Lease, Lease]
) -> None:
    stale, live = reclaimed
    assert complete_in_transaction(store, stale) is False
    _untouched_by_stale(store, stale, live)
    assert complete_in_transaction(store, live) is True


def test_same_owner_stale_attempt_fail_is_refused(
    store: Stores, reclaimed: tuple[Lease, Lease]
) -> None:
    stale, live = reclaimed
    assert store.work.fail(stale, "late", retry_delay=timedelta(0)) is None
    _untouched_by_stale(store, stale, live)
    assert store.ops.get_job(live.job_id).last_error is None


def test_same_owner_stale_attempt_release_is_refused(
    store: Stores, reclaimed: tuple[Lease, Lease]
) -> None:
    stale, live = reclaimed
    assert store.work.release([stale]) == set()
    _untouched_by_stale(store, stale, live)


def test_same_owner_stale_attempt_snooze_is_refused(
    store: Stores, reclaimed: tuple[Lease, Lease]
) -> None:
    stale, live = reclaimed
    assert store.work.snooze(stale, timedelta(seconds=1)) is None
    _untouched_by_stale(store, stale, live)
    assert store.ops.get_job(live.job_id).snoozes == 0


def test_a_snooze_past_the_bound_is_refused(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The fence holds the bound on snoozes too: the job stays the lease's, untouched."""
    [job_id] = store.ops.enqueue([{}], queue=Q)
    sql_conn.execute("UPDATE leasectl.jobs SET snoozes = 3 WHERE id = %s", (job_id,))
    [lease] = store.work.claim(Q, "w1", TTL)
    assert store.work.snooze(lease, timedelta(seconds=1), max_snoozes=3) is None
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")
    assert store.work.snooze(lease, timedelta(seconds=1), max_snoozes=4) is not None
    assert store.ops.get_job(job_id).snoozes == 4


# -- the owner, the status and the job id of a fence, each on its own ------------------------


def complete_in_transaction(store: Stores, lease: Lease) -> bool:
    """A handler's transaction (``ctx.transaction()``) that ends with the lease's completion."""
    transactions = HandlerTransactions(store.db, "fence test")
    try:
        with transactions.completing(lease, lambda: None) as conn:
            conn.execute("SELECT 1")
    except LeaseLost:
        return False
    finally:
        transactions.close()
    return True


LeaseCall = Callable[[Stores, Lease], bool]
"""A fenced call on one lease; True when the store accepted it."""

FENCED_CALLS: dict[str, LeaseCall] = {
    "heartbeat": lambda s, lease: bool(s.work.heartbeat([lease], TTL)),
    "complete": lambda s, lease: bool(s.work.complete([lease])),
    "transaction": complete_in_transaction,
    "fail": lambda s, lease: s.work.fail(lease, "x", retry_delay=timedelta(0)) is not None,
    "release": lambda s, lease: bool(s.work.release([lease])),
    "snooze": lambda s, lease: s.work.snooze(lease, timedelta(seconds=1)) is not None,
}


@pytest.mark.parametrize("call", FENCED_CALLS)
def test_a_lease_token_of_another_owner_is_refused(store: Stores, call: str) -> None:
    """Right job, right attempt, Processing: only the owner differs."""
    [job_id] = store.ops.enqueue([{}], queue=Q)
    [lease] = store.work.claim(Q, "w1", TTL)
    forged = dataclasses.replace(lease, owner="w2")
    assert FENCED_CALLS[call](store, forged) is False
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")
    assert store.ops.get_job(job_id).lease_until == lease.until


@pytest.mark.parametrize("call", FENCED_CALLS)
def test_a_lease_the_watcher_quarantined_is_not_touched_by_its_late_handler(
    store: Stores, sql_conn: psycopg.Connection[Any], call: str
) -> None:
    """Same job, owner and attempt, but the job is Stuck now: only the status differs."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    [lease] = store.work.claim(Q, "w1", TTL)
    expire(sql_conn, job_id)
    assert watcher(store, mark=True).marked_stuck == 1
    before = store.ops.get_job(job_id)
    assert FENCED_CALLS[call](store, lease) is False
    after = store.ops.get_job(job_id)
    assert (after.status, after.attempts, after.lease_until) == (
        JobStatus.STUCK,
        1,
        before.lease_until,
    )


@pytest.mark.parametrize("call", FENCED_CALLS)
def test_a_fenced_call_changes_only_its_own_job(store: Stores, call: str) -> None:
    """Two leases of one owner at the same attempt: a call on one never reaches the other."""
    store.ops.enqueue([{}, {}], queue=Q)
    mine, other = store.work.claim(Q, "w1", TTL, limit=2)
    assert (mine.attempt, other.attempt) == (1, 1)
    assert FENCED_CALLS[call](store, mine) is True
    assert state(store, other.job_id) == (JobStatus.PROCESSING, 1, "w1")
    assert store.ops.get_job(other.job_id).lease_until == other.until


def test_heartbeat_reports_only_the_leases_it_renewed(store: Stores) -> None:
    store.ops.enqueue([{}, {}], queue=Q)
    mine, _ = store.work.claim(Q, "w1", TTL, limit=2)
    assert set(store.work.heartbeat([mine], TTL)) == {mine.job_id}


# -- claims: due Pending jobs of the queue, in claim-key order --------------------------------


def test_claim_leaves_finished_and_stuck_jobs_alone(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [done] = store.ops.enqueue([{}], queue=Q)
    store.work.complete(store.work.claim(Q, "w1", TTL))
    stuck = stuck_with_a_lapsed_lease(store, sql_conn)
    assert store.work.complete_and_claim((), Q, "w2", TTL, 5, take_expired=False)[0] == []
    assert store.work.claim(Q, "w2", TTL, 5) == []
    assert state(store, done)[0] == JobStatus.COMPLETED
    assert state(store, stuck)[0] == JobStatus.STUCK


def test_claim_takes_only_its_queue(store: Stores) -> None:
    [other] = store.ops.enqueue([{}], queue="other")
    assert store.work.claim(Q, "w1", TTL, 5) == []
    assert state(store, other)[0] == JobStatus.PENDING


def test_claim_leaves_jobs_that_are_not_due(store: Stores) -> None:
    [later] = store.ops.enqueue([{}], queue=Q, delay=timedelta(hours=1))
    assert store.work.claim(Q, "w1", TTL, 5) == []
    assert state(store, later)[0] == JobStatus.PENDING


def test_claim_from_a_key_starts_there(store: Stores) -> None:
    first, second, third = store.ops.enqueue([{}, {}, {}], queue=Q)
    key = store.ops.get_job(second).claim_order
    leases, _ = store.work.complete_and_claim((), Q, "w1", TTL, 5, take_expired=False, from_key=key)
    assert [lease.job_id for lease in leases] == [second, third]
    assert state(store, first)[0] == JobStatus.PENDING


# -- takeovers: lapsed Processing leases of the queue with attempts left ------------------------


def test_takeover_never_takes_a_live_lease(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    store.work.claim(Q, "w1", TTL)
    assert store.work.claim(Q, "w2", TTL, 5) == []
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")


def test_takeover_is_not_hidden_by_a_live_lease_ahead_of_it(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The takeover reads `limit` candidates in priority order and locks them: a live lease
    among them would use up the batch and leave the lapsed one behind."""
    [live] = store.ops.enqueue([{}], queue=Q, priority=-1, max_attempts=3)
    store.work.claim(Q, "w1", TTL)
    [lapsed] = store.ops.enqueue([{}], queue=Q, priority=0, max_attempts=3)
    store.work.claim(Q, "w1", TTL)
    expire(sql_conn, lapsed)
    [lease] = store.work.claim(Q, "w2", TTL, 1)
    assert (lease.job_id, lease.attempt) == (lapsed, 2)
    assert state(store, live) == (JobStatus.PROCESSING, 1, "w1")


def test_takeover_takes_only_the_leases_it_picked(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    first, second = store.ops.enqueue([{}, {}], queue=Q, max_attempts=3)
    store.work.claim(Q, "w1", TTL, 2)
    expire(sql_conn, first, second)
    [lease] = store.work.claim(Q, "w2", TTL, 1)
    assert lease.job_id == first
    assert state(store, second) == (JobStatus.PROCESSING, 1, "w1")


def test_takeover_never_takes_a_stuck_job(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    stuck = stuck_with_a_lapsed_lease(store, sql_conn, max_attempts=3)
    assert store.work.claim(Q, "w2", TTL, 5) == []
    assert state(store, stuck)[0] == JobStatus.STUCK


def test_takeover_is_not_hidden_by_a_stuck_job_ahead_of_it(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    stuck = stuck_with_a_lapsed_lease(store, sql_conn, priority=-1, max_attempts=3)
    [lapsed] = store.ops.enqueue([{}], queue=Q, priority=0, max_attempts=3)
    store.work.claim(Q, "w1", TTL)
    expire(sql_conn, lapsed)
    [lease] = store.work.claim(Q, "w2", TTL, 1)
    assert lease.job_id == lapsed
    assert state(store, stuck)[0] == JobStatus.STUCK


def test_takeover_takes_only_its_queue(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    [job_id] = store.ops.enqueue([{}], queue="other", max_attempts=3)
    store.work.claim("other", "w1", TTL)
    expire(sql_conn, job_id)
    assert store.work.claim(Q, "w2", TTL, 5) == []
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")


def test_takeover_leaves_a_lapsed_lease_without_attempts_left_to_the_watcher(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=1)
    store.work.claim(Q, "w1", TTL)
    expire(sql_conn, job_id)
    assert store.work.claim(Q, "w2", TTL, 5) == []
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")


# -- claim by id: Pending, or Processing with a lapsed lease; that job only ---------------------


def test_claim_by_id_takes_a_pending_job_and_only_that_one(store: Stores) -> None:
    job_id, other = store.ops.enqueue([{}, {}], queue=Q)
    lease = store.work.claim_by_id(job_id, "w1", TTL)
    assert lease is not None and (lease.job_id, lease.attempt) == (job_id, 1)
    assert state(store, other) == (JobStatus.PENDING, 0, None)


def test_claim_by_id_refuses_finished_jobs(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    store.work.complete(store.work.claim(Q, "w1", TTL))
    assert store.work.claim_by_id(job_id, "w2", TTL) is None
    assert state(store, job_id) == (JobStatus.COMPLETED, 1, "w1")


def test_claim_by_id_refuses_a_stuck_job_with_a_lapsed_lease(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    stuck = stuck_with_a_lapsed_lease(store, sql_conn, max_attempts=3)
    assert store.work.claim_by_id(stuck, "w2", TTL) is None
    assert state(store, stuck)[0] == JobStatus.STUCK


def test_claim_by_id_refuses_a_live_lease_and_takes_a_lapsed_one(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)
    assert store.work.claim_by_id(job_id, "w2", TTL) is None
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")
    expire(sql_conn, job_id)
    lease = store.work.claim_by_id(job_id, "w2", TTL)
    assert lease is not None and (lease.owner, lease.attempt) == ("w2", 2)


# -- the watcher: expired Processing leases only, of its queue when it has one -----------------


def test_watcher_never_moves_a_live_lease(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)
    for mark in (False, True):
        assert watcher(store, mark=mark).jobs == ()
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")


def test_watcher_is_not_stopped_by_live_leases_in_its_batch(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """A batch that moved fewer jobs than its size ends the pass, so a live lease the locking
    read let into the batch would leave the expired ones behind."""
    store.ops.enqueue([{}] * 3, queue=Q)
    live = [lease.job_id for lease in store.work.claim(Q, "a-live", TTL, 3)]
    [lapsed] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "z-lapsed", TTL)
    expire(sql_conn, lapsed)
    result = watcher(store, batch=1)
    assert [job.id for job in result.jobs] == [lapsed]
    assert all(state(store, i) == (JobStatus.PROCESSING, 1, "a-live") for i in live)


def test_watcher_never_moves_a_stuck_job_again(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    stuck = stuck_with_a_lapsed_lease(store, sql_conn)
    [lapsed] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)
    expire(sql_conn, lapsed)
    result = watcher(store, batch=1)
    assert [job.id for job in result.jobs] == [lapsed]
    assert state(store, stuck)[0] == JobStatus.STUCK
    assert [e.action for e in store.ops.inspect(stuck).events] == ["mark_stuck"]


def test_watcher_with_a_queue_moves_only_that_queue(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [mine] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)
    [other] = store.ops.enqueue([{}], queue="other")
    store.work.claim("other", "w1", TTL)
    expire(sql_conn, mine, other)
    assert [job.id for job in watcher(store, queue=Q).jobs] == [mine]
    assert state(store, other) == (JobStatus.PROCESSING, 1, "w1")


# -- the watcher for one lease owner (`requeue-stuck --owner`): that owner's expired leases only -


@pytest.mark.parametrize("mark", [False, True], ids=["requeue", "mark"])
def test_watcher_with_an_owner_moves_only_that_owners_expired_leases(
    store: Stores, sql_conn: psycopg.Connection[Any], mark: bool
) -> None:
    """Batches of one: the other owner's expired leases come first in the Processing index
    (queue, lease_owner), so a locking read that let them in would use up each batch, and the
    pass, which ends at a short batch, would leave the owner's lease behind."""
    others = store.ops.enqueue([{}] * 2, queue=Q)
    store.work.claim(Q, "a-other", TTL, 2)
    [live] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "z-gone", TTL)
    [lapsed] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "z-gone", TTL)
    [elsewhere] = store.ops.enqueue([{}], queue="other")
    store.work.claim("other", "z-gone", TTL)
    expire(sql_conn, *others, lapsed, elsewhere)
    result = watcher(store, mark=mark, batch=1, owner="z-gone", queue=Q)
    assert [job.id for job in result.jobs] == [lapsed]
    assert state(store, lapsed)[0] == (JobStatus.STUCK if mark else JobStatus.PENDING)
    assert state(store, live) == (JobStatus.PROCESSING, 1, "z-gone")
    assert state(store, elsewhere) == (JobStatus.PROCESSING, 1, "z-gone")
    assert all(state(store, i) == (JobStatus.PROCESSING, 1, "a-other") for i in others)
    assert all(store.ops.inspect(i).events == () for i in (*others, live, elsewhere))
    # Without a queue: every queue, still that owner only.
    assert [job.id for job in watcher(store, owner="z-gone").jobs] == [elsewhere]
    assert all(state(store, i) == (JobStatus.PROCESSING, 1, "a-other") for i in others)


def test_watcher_with_an_owner_leaves_leases_renewed_or_taken_over_since_its_dry_run(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The operator lists the owner's expired leases, then runs the pass: a lease its owner
    renewed in between, or another worker took over (and let lapse), is not moved."""
    renewed, taken = store.ops.enqueue([{}, {}], queue=Q)
    leases = store.work.claim(Q, "w-gone", TTL, 2)
    expire(sql_conn, renewed, taken)
    listed = watcher(store, owner="w-gone", dry_run=True)
    assert sorted(job.id for job in listed.jobs) == [renewed, taken]
    store.work.heartbeat([lease for lease in leases if lease.job_id == renewed], TTL)
    [takeover] = store.work.claim(Q, "w-new", TTL)
    assert takeover.job_id == taken
    expire(sql_conn, taken)
    assert watcher(store, owner="w-gone").jobs == ()
    assert state(store, renewed) == (JobStatus.PROCESSING, 1, "w-gone")
    assert state(store, taken) == (JobStatus.PROCESSING, 2, "w-new")
    assert [job.id for job in watcher(store, owner="w-new").jobs] == [taken]


def test_dry_run_with_an_owner_lists_only_that_owners_expired_leases(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    mine, other, live = store.ops.enqueue([{}, {}, {}], queue=Q)
    store.work.claim(Q, "w-gone", TTL)
    store.work.claim(Q, "w-other", TTL)
    store.work.claim(Q, "w-gone", TTL)
    expire(sql_conn, mine, other)
    assert [job.id for job in watcher(store, owner="w-gone", dry_run=True).jobs] == [mine]
    assert state(store, mine) == state(store, live) == (JobStatus.PROCESSING, 1, "w-gone")


# -- operator actions: guarded by what the operator saw ------------------------------------------

Action = Callable[..., Any]


def requeue(store: Stores, seen: SeenState, force: bool = False) -> Any:
    return store.ops.operator_requeue([seen], actor="op", reason=None, force=force)


def mark_stuck(store: Stores, seen: SeenState, force: bool = False) -> Any:
    return store.ops.operator_mark_stuck([seen], actor="op", reason=None, force=force)


def cancel(store: Stores, seen: SeenState, force: bool = False) -> Any:
    return store.ops.operator_cancel([seen], actor="op", reason=None, force=force)


def delete(store: Stores, seen: SeenState, force: bool = False) -> Any:
    return store.ops.operator_delete([seen], actor="op", reason=None, force=force)


def lapsed(store: Stores, conn: psycopg.Connection[Any], owner: str = "w1") -> int:
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    store.work.claim(Q, owner, TTL)
    expire(conn, job_id)
    return job_id


def test_requeue_after_the_watcher_quarantined_the_job_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The operator saw an expired Processing job; the watcher then marked it Stuck (same
    attempts, same owner). The requeue the operator asked for was of a Processing job."""
    job_id = lapsed(store, sql_conn)
    seen = store.ops.get_job(job_id).seen()
    assert watcher(store, mark=True).marked_stuck == 1
    result = requeue(store, seen)
    assert result.changed == () and [s.id for s in result.skipped] == [job_id]
    assert state(store, job_id) == (JobStatus.STUCK, 1, "w1")


def test_mark_stuck_after_the_watcher_requeued_the_job_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The operator saw an expired Processing job; the watcher requeued it (Pending, same
    attempts, same owner) before the operator's mark-stuck arrived."""
    job_id = lapsed(store, sql_conn)
    seen = store.ops.get_job(job_id).seen()
    assert watcher(store).requeued == 1
    result = mark_stuck(store, seen)
    assert result.changed == ()
    assert state(store, job_id) == (JobStatus.PENDING, 1, "w1")


@pytest.mark.parametrize(
    "action", [requeue, mark_stuck, cancel], ids=["requeue", "mark-stuck", "cancel"]
)
def test_an_action_on_a_later_attempt_than_the_operator_saw_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any], action: Action
) -> None:
    """The operator saw attempt 1 lapsed; the same owner took the job over (attempt 2) and that
    lease lapsed too: same status, same owner, only the attempts differ."""
    job_id = lapsed(store, sql_conn)
    seen = store.ops.get_job(job_id).seen()
    [again] = store.work.claim(Q, "w1", TTL)
    assert again.attempt == 2
    expire(sql_conn, job_id)
    assert action(store, seen).changed == ()
    assert state(store, job_id) == (JobStatus.PROCESSING, 2, "w1")


@pytest.mark.parametrize(
    "action", [requeue, mark_stuck, cancel], ids=["requeue", "mark-stuck", "cancel"]
)
def test_an_action_on_another_owner_than_the_operator_saw_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any], action: Action
) -> None:
    job_id = lapsed(store, sql_conn)
    seen = dataclasses.replace(store.ops.get_job(job_id).seen(), lease_owner="w2")
    assert action(store, seen).changed == ()
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")


@pytest.mark.parametrize(
    "action", [requeue, mark_stuck, cancel], ids=["requeue", "mark-stuck", "cancel"]
)
def test_an_action_changes_only_the_job_the_operator_named(
    store: Stores, sql_conn: psycopg.Connection[Any], action: Action
) -> None:
    """Two lapsed leases in the same state (status, attempts, owner): only the named one moves."""
    named, other = lapsed(store, sql_conn), lapsed(store, sql_conn)
    assert action(store, store.ops.get_job(named).seen()).changed == (named,)
    assert state(store, other) == (JobStatus.PROCESSING, 1, "w1")


@pytest.mark.parametrize("action", [requeue, mark_stuck], ids=["requeue", "mark-stuck"])
def test_an_action_on_a_live_lease_needs_force(store: Stores, action: Action) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)
    seen = store.ops.get_job(job_id).seen()
    assert action(store, seen).changed == ()
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")
    assert action(store, seen, force=True).changed == (job_id,)


@pytest.mark.parametrize("action", [requeue, mark_stuck], ids=["requeue", "mark-stuck"])
def test_an_action_on_an_expired_lease_needs_no_force(
    store: Stores, sql_conn: psycopg.Connection[Any], action: Action
) -> None:
    job_id = lapsed(store, sql_conn)
    assert action(store, store.ops.get_job(job_id).seen()).changed == (job_id,)


def test_requeue_of_stuck_and_failed_jobs_needs_no_force(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Neither has a lease to override, even one the operator's mark-stuck kept in the future."""
    [forced] = store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)
    assert mark_stuck(store, store.ops.get_job(forced).seen(), force=True).changed == (forced,)
    [failed] = store.ops.enqueue([{}], queue=Q)
    [lease] = store.work.claim(Q, "w1", TTL)
    assert store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    for job_id in (forced, failed):
        assert requeue(store, store.ops.get_job(job_id).seen()).changed == (job_id,)
        assert state(store, job_id)[0] == JobStatus.PENDING


def test_requeue_of_a_job_that_spent_the_largest_budget_stays_within_it(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Requeue gives a Failed job one more attempt of budget, but never past the schema's
    bound on max_attempts (1000): a job that spent all 1000 is requeued, not refused."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=1000)
    sql_conn.execute("UPDATE leasectl.jobs SET attempts = 999 WHERE id = %s", (job_id,))
    lease = store.work.claim_by_id(job_id, "w1", TTL)
    assert lease is not None and lease.attempt == 1000
    assert store.work.fail(lease, "x", retry_delay=timedelta(0)) == JobStatus.FAILED
    assert requeue(store, store.ops.get_job(job_id).seen()).changed == (job_id,)
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.max_attempts) == (JobStatus.PENDING, 1000, 1000)


def test_requeue_applies_only_to_processing_stuck_and_failed_jobs(store: Stores) -> None:
    pending, done = store.ops.enqueue([{}, {}], queue=Q)
    store.work.complete([store.work.claim_by_id(done, "w1", TTL)])  # type: ignore[list-item]
    for job_id in (pending, done):
        assert requeue(store, store.ops.get_job(job_id).seen(), force=True).changed == ()
    assert state(store, pending)[0] == JobStatus.PENDING
    assert state(store, done)[0] == JobStatus.COMPLETED


def test_mark_stuck_applies_only_to_pending_and_processing_jobs(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [done] = store.ops.enqueue([{}], queue=Q)
    store.work.complete(store.work.claim(Q, "w1", TTL))
    [failed] = store.ops.enqueue([{}], queue=Q)
    [lease] = store.work.claim(Q, "w1", TTL)
    store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False)
    for job_id in (done, failed):
        assert mark_stuck(store, store.ops.get_job(job_id).seen(), force=True).changed == ()
    assert state(store, done)[0] == JobStatus.COMPLETED
    assert state(store, failed)[0] == JobStatus.FAILED
    [pending] = store.ops.enqueue([{}], queue=Q)
    assert mark_stuck(store, store.ops.get_job(pending).seen()).changed == (pending,)


# -- cancel and delete (migration 10): guarded like requeue; cancel revokes a lease --------------


def test_cancel_after_the_watcher_quarantined_the_job_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The operator saw an expired Processing job; the watcher marked it Stuck (same attempts,
    same owner, and Stuck may be cancelled too): only the status differs from what was seen."""
    job_id = lapsed(store, sql_conn)
    seen = store.ops.get_job(job_id).seen()
    assert watcher(store, mark=True).marked_stuck == 1
    result = cancel(store, seen)
    assert result.changed == () and [s.id for s in result.skipped] == [job_id]
    assert state(store, job_id) == (JobStatus.STUCK, 1, "w1")


def test_cancel_applies_only_to_pending_processing_and_stuck_jobs(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Finished jobs (Completed, Failed, Cancelled) are skipped, even with force; each of the
    three others is cancelled, a live lease without force."""
    stuck = stuck_with_a_lapsed_lease(store, sql_conn)
    done, failed, cancelled, pending, live = store.ops.enqueue([{}] * 5, queue=Q)
    store.work.complete([store.work.claim_by_id(done, "w1", TTL)])  # type: ignore[list-item]
    lease = store.work.claim_by_id(failed, "w1", TTL)
    assert lease is not None
    store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False)
    assert cancel(store, store.ops.get_job(cancelled).seen()).changed == (cancelled,)
    for job_id in (done, failed, cancelled):
        before = store.ops.get_job(job_id)
        result = cancel(store, before.seen(), force=True)
        assert result.changed == () and result.skipped[0].code == "not-eligible"
        assert store.ops.get_job(job_id).updated_at == before.updated_at
    store.work.claim_by_id(live, "w1", TTL)
    for job_id in (pending, stuck, live):
        assert cancel(store, store.ops.get_job(job_id).seen()).changed == (job_id,)
        assert store.ops.get_job(job_id).status == JobStatus.CANCELLED


@pytest.mark.parametrize("call", FENCED_CALLS)
def test_a_cancelled_lease_is_refused_to_its_holder(store: Stores, call: str) -> None:
    """A live lease cancelled by an operator: same job, owner and attempt, only the status is
    Cancelled. The holder's next fenced call is refused; the attempt stays `cancelled`."""
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    [lease] = store.work.claim(Q, "w1", TTL)
    assert cancel(store, store.ops.get_job(job_id).seen()).changed == (job_id,)
    assert FENCED_CALLS[call](store, lease) is False
    job = store.ops.inspect(job_id)
    assert (job.job.status, job.job.attempts, job.job.lease_until) == (JobStatus.CANCELLED, 1, None)
    assert [a.outcome for a in job.attempts] == ["cancelled"]


def test_no_claim_takes_a_cancelled_job(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    """A cancelled lease (its lease_until in the past) is no takeover; a cancelled Pending job
    is claimed neither by the queue's claim nor by id."""
    pending, leased = store.ops.enqueue([{}, {}], queue=Q, max_attempts=3)
    store.work.claim_by_id(leased, "w1", TTL)
    for job_id in (pending, leased):
        assert cancel(store, store.ops.get_job(job_id).seen()).changed == (job_id,)
    sql_conn.execute("UPDATE leasectl.jobs SET lease_until = now() - interval '1 second'")
    assert store.work.claim(Q, "w2", TTL, limit=5) == []
    assert store.work.claim_by_id(pending, "w2", TTL) is None
    assert state(store, leased) == (JobStatus.CANCELLED, 1, "w1")


def failed_job(store: Stores, owner: str = "w1") -> int:
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    lease = store.work.claim_by_id(job_id, owner, TTL)
    assert lease is not None
    assert store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    return job_id


def exists(conn: psycopg.Connection[Any], job_id: int) -> bool:
    return (
        conn.execute("SELECT 1 FROM leasectl.jobs WHERE id = %s", (job_id,)).fetchone() is not None
    )


def test_delete_after_an_operator_cancelled_the_stuck_job_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The operator saw a Stuck job; another operator cancelled it (same attempts, same owner,
    and Cancelled may be deleted too): only the status differs from what was seen."""
    job_id = stuck_with_a_lapsed_lease(store, sql_conn)
    seen = store.ops.get_job(job_id).seen()
    assert cancel(store, seen).changed == (job_id,)
    result = delete(store, seen)
    assert result.changed == () and result.skipped[0].code == "moved"
    assert state(store, job_id) == (JobStatus.CANCELLED, 1, "w-stuck")


def test_delete_of_a_later_attempt_than_the_operator_saw_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Failed at attempt 1 when seen; requeued, run and Failed again by the same owner."""
    job_id = failed_job(store)
    seen = store.ops.get_job(job_id).seen()
    assert requeue(store, seen).changed == (job_id,)
    lease = store.work.claim_by_id(job_id, "w1", TTL)
    assert lease is not None and lease.attempt == 2
    store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False)
    assert delete(store, seen).changed == ()
    assert state(store, job_id) == (JobStatus.FAILED, 2, "w1") and exists(sql_conn, job_id)


def test_delete_of_another_owner_than_the_operator_saw_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    job_id = failed_job(store)
    seen = dataclasses.replace(store.ops.get_job(job_id).seen(), lease_owner="w2")
    assert delete(store, seen).changed == ()
    assert exists(sql_conn, job_id)


def test_delete_removes_only_the_job_the_operator_named(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Two Failed jobs in the same state (status, attempts, owner): only the named one goes."""
    named, other = failed_job(store), failed_job(store)
    assert delete(store, store.ops.get_job(named).seen()).changed == (named,)
    assert not exists(sql_conn, named) and exists(sql_conn, other)


def test_delete_never_removes_a_pending_or_processing_job(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Not with force, not a lapsed lease: seen exactly as they are, they stay."""
    stuck = stuck_with_a_lapsed_lease(store, sql_conn)
    expired = lapsed(store, sql_conn)
    [pending, live] = store.ops.enqueue([{}, {}], queue=Q)
    store.work.claim_by_id(live, "w1", TTL)
    for job_id in (pending, expired, live):
        result = delete(store, store.ops.get_job(job_id).seen(), force=True)
        assert result.changed == () and result.skipped[0].code == "not-eligible"
        assert exists(sql_conn, job_id)
    done = store.ops.enqueue([{}], queue=Q)[0]
    store.work.complete([store.work.claim_by_id(done, "w1", TTL)])  # type: ignore[list-item]
    gone = [done, failed_job(store), stuck]
    [cancelled] = store.ops.enqueue([{}], queue=Q)
    assert cancel(store, store.ops.get_job(cancelled).seen()).changed == (cancelled,)
    gone.append(cancelled)
    for job_id in gone:
        assert delete(store, store.ops.get_job(job_id).seen()).changed == (job_id,)
        assert not exists(sql_conn, job_id)


# -- status --check and prune --queue, through the command line ---------------------------------


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASECTL_")}
    return subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        env={**env, "LEASECTL_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_status_check_fails_on_stuck_jobs_alone(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    stuck_with_a_lapsed_lease(store, sql_conn)
    store.ops.enqueue([{}], queue=Q)
    store.work.claim(Q, "w1", TTL)  # a live lease: nothing expired
    proc = _cli(db_dsn, "status", "--check", "--json")
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["check"] == {"expired": 0, "stuck": 1, "ok": False}
    assert "0 expired lease(s), 1 Stuck job(s)" in proc.stderr
    assert _cli(db_dsn, "status", "--check", "--queue", "other").returncode == 0


def _finished_long_ago(store: Stores, conn: psycopg.Connection[Any], queue: str) -> int:
    [job_id] = store.ops.enqueue([{}], queue=queue)
    store.work.complete(store.work.claim(queue, "w1", TTL))
    conn.execute(
        "UPDATE leasectl.jobs SET finished_at = now() - interval '30 days' WHERE id = %s",
        (job_id,),
    )
    return job_id


def test_prune_with_a_queue_leaves_other_queues_alone(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    mine = _finished_long_ago(store, sql_conn, Q)
    other = _finished_long_ago(store, sql_conn, "other")
    dry = _cli(db_dsn, "prune", "--older-than", "7d", "--queue", Q, "--dry-run", "--json")
    assert json.loads(dry.stdout)["jobs"] == 1, dry.stderr
    assert retention.prune(store.ops, older_than=timedelta(days=7), queue=Q, dry_run=True).jobs == 1
    done = _cli(db_dsn, "prune", "--older-than", "7d", "--queue", Q, "--json")
    assert json.loads(done.stdout)["jobs"] == 1, done.stderr
    left = sql_conn.execute("SELECT id FROM leasectl.jobs ORDER BY id").fetchall()
    assert left == [(other,)]
    assert mine != other


# -- a paused queue: no claim of any kind takes its jobs; other queues are not affected --------
#
# Each claim statement has one pause predicate, `NOT EXISTS (a queue_state row of the queue)`:
# deleting it lets a claim take a paused queue's job; tying it to any row instead of the
# queue's (`WHERE TRUE`) lets a pause of one queue stop every other.

PAUSER = "operator:fence"


def pause(store: Stores, queue: str = Q) -> None:
    _, changed = store.ops.pause(queue, actor=PAUSER, reason="fence test")
    assert changed


def test_claim_takes_nothing_from_a_paused_queue(store: Stores) -> None:
    ids = store.ops.enqueue([{}, {}], queue=Q)
    pause(store)
    assert store.work.complete_and_claim((), Q, "w1", TTL, 5, take_expired=False)[0] == []
    assert [state(store, i) for i in ids] == [(JobStatus.PENDING, 0, None)] * 2
    assert store.ops.resume(Q, actor=PAUSER) is not None
    leases, _ = store.work.complete_and_claim((), Q, "w1", TTL, 5, take_expired=False)
    assert sorted(lease.job_id for lease in leases) == ids


def test_takeover_takes_nothing_from_a_paused_queue(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    store.work.claim(Q, "w1", TTL)
    expire(sql_conn, job_id)
    pause(store)
    assert store.work.claim(Q, "w2", TTL, 5) == []  # the round trip, then the takeover
    assert state(store, job_id) == (JobStatus.PROCESSING, 1, "w1")


def test_claim_by_id_refuses_a_job_of_a_paused_queue(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    pause(store)
    assert store.work.claim_by_id(job_id, "w1", TTL) is None
    assert state(store, job_id) == (JobStatus.PENDING, 0, None)


@pytest.mark.parametrize("claim", ["claim", "takeover", "claim by id"])
def test_a_pause_of_another_queue_stops_no_claim_of_this_one(
    store: Stores, sql_conn: psycopg.Connection[Any], claim: str
) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=3)
    pause(store, "other")
    if claim == "claim":
        leases, _ = store.work.complete_and_claim((), Q, "w1", TTL, 5, take_expired=False)
        assert [lease.job_id for lease in leases] == [job_id]
    elif claim == "takeover":
        store.work.claim(Q, "w1", TTL)
        expire(sql_conn, job_id)
        assert [lease.job_id for lease in store.work.claim(Q, "w2", TTL, 5)] == [job_id]
        assert state(store, job_id) == (JobStatus.PROCESSING, 2, "w2")
    else:
        lease = store.work.claim_by_id(job_id, "w1", TTL)
        assert lease is not None and lease.job_id == job_id


def test_a_pause_stops_claims_not_the_leases_held(store: Stores) -> None:
    """Jobs in flight finish: heartbeat, completion (riding a claim that takes nothing), failure
    and release are not claims; enqueue goes on."""
    ids = store.ops.enqueue([{}] * 4, queue=Q, max_attempts=3)
    leases = store.work.claim(Q, "w1", TTL, 4)
    pause(store)
    assert set(store.work.heartbeat(leases, TTL)) == set(ids)
    new, refused = store.work.complete_and_claim(leases[:1], Q, "w1", TTL, 5)
    assert (new, refused) == ([], set())
    assert store.work.fail(leases[1], "boom", retry_delay=timedelta(0)) == JobStatus.PENDING
    assert store.work.release(leases[2:3]) == {ids[2]}
    assert store.work.complete(leases[3:]) == {ids[3]}
    [later] = store.ops.enqueue([{}], queue=Q)
    assert [state(store, i)[0] for i in [*ids, later]] == [
        JobStatus.COMPLETED,
        JobStatus.PENDING,
        JobStatus.PENDING,
        JobStatus.COMPLETED,
        JobStatus.PENDING,
    ]
    assert store.work.claim(Q, "w2", TTL, 5) == []
