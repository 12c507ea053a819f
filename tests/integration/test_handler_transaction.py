"""``with ctx.transaction() as conn:``: a handler's writes and its job's fenced completion commit
together or not at all (real workers, real concurrency, the lease lost on purpose)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl import AsyncJobContext, LeaseLost
from leasectl.core.models import JobStatus
from leasectl.runtime.worker import JobContext
from tests.integration.test_worker_processes import WorkerProc
from tests.stores import Stores
from tests.util import wait_until

Q = "tx"
LONG = timedelta(minutes=10)  # a lease no heartbeat needs to renew during the test


@pytest.fixture
def business(sql_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """A business table (a payment captured per job) next to the queue's."""
    sql_conn.execute(
        "CREATE TABLE public.captured (job_id bigint PRIMARY KEY, attempt int NOT NULL, "
        "worker text NOT NULL)"
    )
    return sql_conn


def capture(conn: psycopg.Connection[Any], ctx: JobContext) -> None:
    conn.execute(
        "INSERT INTO public.captured (job_id, attempt, worker) VALUES (%s, %s, %s)",
        (ctx.job.id, ctx.lease.attempt, ctx.lease.owner),
    )


def captured(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT job_id, attempt, worker FROM public.captured ORDER BY 1").fetchall()


def attempts(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT attempt, lease_owner, outcome::text FROM leasectl.job_attempts "
        "WHERE job_id = %s ORDER BY attempt",
        (job_id,),
    ).fetchall()


def db_clock(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


class Gate:
    """The handler tells the test it is inside its transaction, then waits to be let go."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.go = threading.Event()
        self.seen: list[BaseException] = []

    def hold(self) -> None:
        self.inside.set()
        assert self.go.wait(30), "the test never let the handler go"

    def capture_and_hold(self, ctx: JobContext) -> None:
        """A handler: the business row written inside ``ctx.transaction()``, then held there."""
        with ctx.transaction() as conn:
            capture(conn, ctx)
            self.hold()


def test_the_business_row_and_the_completion_commit_together(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    gate = Gate()
    handler = gate.capture_and_hold

    worker = run_worker(handler, queues=(Q,), lease_ttl=LONG)
    [job_id] = store.ops.enqueue([{}], queue=Q)
    assert gate.inside.wait(10)
    # Inside the block: neither the write nor the completion is visible to anyone else.
    assert captured(business) == []
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING
    let_go_at = db_clock(business)
    gate.go.set()
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert captured(business) == [(job_id, 1, worker.worker_id)]
    job = store.ops.get_job(job_id)
    assert (job.attempts, job.lease_until, job.last_error) == (1, None, None)
    # The completion's times are its statement's, not the transaction's start (now()).
    assert job.finished_at is not None and job.finished_at >= let_go_at
    assert attempts(business, job_id) == [(1, worker.worker_id, "completed")]
    row = business.execute(
        "SELECT ended_at FROM leasectl.job_attempts WHERE job_id = %s", (job_id,)
    ).fetchone()
    assert row is not None and row[0] >= let_go_at
    wait_until(lambda: worker.stats.completed == 1)
    assert (worker.stats.lost, worker.stats.failed) == (0, 0)


def test_a_lease_taken_over_during_the_transaction_is_refused_at_its_end(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    """The clock: the transaction opens (and writes) while the lease is valid; the lease lapses
    and another worker takes the job over; then the block ends. The fence
    (owner, attempt, status) refuses, whatever the transaction's now() says: all rolled back."""
    gate = Gate()
    returned: list[str] = []

    def handler(ctx: JobContext) -> None:
        if ctx.lease.attempt > 1:  # the new owner's run
            with ctx.transaction() as conn:
                capture(conn, ctx)
            return
        try:
            with ctx.transaction() as conn:
                capture(conn, ctx)
                gate.hold()
        except LeaseLost as exc:
            gate.seen.append(exc)
            assert ctx.cancelled.is_set()
        returned.append("normally")  # the worst case: the handler swallows it and returns

    first = run_worker(handler, queues=(Q,), lease_ttl=LONG, worker_id="first")
    [job_id] = store.ops.enqueue([{}], queue=Q)
    assert gate.inside.wait(10)
    business.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )
    second = run_worker(
        handler, queues=(Q,), worker_id="second", poll_interval=timedelta(milliseconds=50)
    )
    wait_until(lambda: store.ops.get_job(job_id).lease_owner == "second")
    # (The second owner's insert of the same key now waits for the first transaction's end.)
    gate.go.set()
    wait_until(lambda: returned == ["normally"])
    assert len(gate.seen) == 1 and isinstance(gate.seen[0], LeaseLost)
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    wait_until(lambda: first.stats.lost == 1)
    # The first worker wrote nothing: not its completion, not a failure.
    assert captured(business) == [(job_id, 2, "second")]
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.lease_owner) == (JobStatus.COMPLETED, 2, "second")
    assert attempts(business, job_id) == [(1, "first", "expired"), (2, "second", "completed")]
    assert (first.stats.completed, first.stats.failed) == (0, 0)
    wait_until(lambda: second.stats.completed == 1)


def test_a_job_cancelled_during_the_transaction_keeps_no_business_row(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    gate = Gate()

    def handler(ctx: JobContext) -> None:
        try:
            with ctx.transaction() as conn:
                capture(conn, ctx)
                gate.hold()
        except LeaseLost as exc:
            gate.seen.append(exc)
            raise

    worker = run_worker(handler, queues=(Q,), lease_ttl=LONG)
    [job_id] = store.ops.enqueue([{}], queue=Q)
    assert gate.inside.wait(10)
    seen = store.ops.seen_now([job_id])
    assert store.ops.operator_cancel(seen, actor="op", reason="x").changed == (job_id,)
    gate.go.set()
    wait_until(lambda: worker.stats.lost == 1)
    assert len(gate.seen) == 1
    assert captured(business) == []
    assert store.ops.get_job(job_id).status == JobStatus.CANCELLED
    assert attempts(business, job_id) == [(1, worker.worker_id, "cancelled")]
    assert (worker.stats.completed, worker.stats.failed) == (0, 0)


def test_an_exception_in_the_block_rolls_back_and_the_job_is_retried(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    def handler(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            capture(conn, ctx)
            if ctx.lease.attempt == 1:
                raise RuntimeError("card declined")

    worker = run_worker(
        handler,
        queues=(Q,),
        retry_base=timedelta(milliseconds=1),
        poll_interval=timedelta(milliseconds=50),
    )
    [job_id] = store.ops.enqueue([{}], queue=Q)
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert captured(business) == [(job_id, 2, worker.worker_id)]
    outcomes = [a[2] for a in attempts(business, job_id)]
    assert outcomes == ["failed", "completed"]
    wait_until(lambda: (worker.stats.failed, worker.stats.completed) == (1, 1))


def test_heartbeats_renew_the_lease_while_the_transaction_is_open(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    gate = Gate()
    handler = gate.capture_and_hold

    worker = run_worker(
        handler,
        queues=(Q,),
        lease_ttl=timedelta(seconds=1),
        heartbeat_every=timedelta(milliseconds=100),
    )
    [job_id] = store.ops.enqueue([{}], queue=Q)
    assert gate.inside.wait(10)
    claimed = store.ops.get_job(job_id)
    assert claimed.lease_until is not None
    # Longer than the TTL past the claim: only heartbeats can have kept the lease.
    wait_until(
        lambda: (
            (until := store.ops.get_job(job_id).lease_until) is not None
            and until > claimed.lease_until + timedelta(seconds=1.5)  # type: ignore[operator]
        ),
        timeout=20,
    )
    gate.go.set()
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert captured(business) == [(job_id, 1, worker.worker_id)]
    wait_until(lambda: worker.stats.completed == 1)
    assert worker.stats.lost == 0


def test_a_heartbeat_that_waits_for_the_completions_row_lock_loses_nothing(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    """The completion locks the job's row until the commit; a heartbeat of the same lease
    waits for it, then finds the job Completed: not a lost lease, and no deadlock. (The commit
    is held open by a deferred trigger that waits for an advisory lock the test holds.)"""
    business.execute(
        "CREATE FUNCTION public.hold_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END$$"
    )
    business.execute(
        "CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON public.captured "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.hold_commit()"
    )
    business.execute("SELECT pg_advisory_lock(4242)")
    gate = Gate()
    seen: list[JobContext] = []

    def handler(ctx: JobContext) -> None:
        seen.append(ctx)
        with ctx.transaction() as conn:
            capture(conn, ctx)
        gate.hold()  # still running after the commit: its lease is still held, not renewed

    worker = run_worker(
        handler,
        queues=(Q,),
        lease_ttl=timedelta(seconds=5),
        heartbeat_every=timedelta(milliseconds=100),
    )
    [job_id] = store.ops.enqueue([{}], queue=Q)
    # The commit waits for the advisory lock, the heartbeat for the job's row.
    wait_until(
        lambda: (
            business.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            == (2,)
        ),
        what="the commit and a heartbeat both waiting",
    )
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING
    business.execute("SELECT pg_advisory_unlock(4242)")
    assert gate.inside.wait(10)
    assert store.ops.get_job(job_id).status == JobStatus.COMPLETED
    try:
        worker.beat()  # a heartbeat past the commit: refused (Completed), which is no lost lease
        assert worker.stats.lost == 0 and not seen[0].is_cancelled()
    finally:
        gate.go.set()
    wait_until(lambda: worker.stats.completed == 1)
    assert (worker.stats.lost, worker.stats.failed) == (0, 0)
    assert captured(business) == [(job_id, 1, worker.worker_id)]


def test_a_second_transaction_is_an_error_and_a_raise_after_the_commit_keeps_the_completion(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    errors: list[Exception] = []

    def handler(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            capture(conn, ctx)
        try:
            ctx.transaction()
        except RuntimeError as exc:
            errors.append(exc)
        raise RuntimeError("after the commit")

    worker = run_worker(handler, queues=(Q,))
    [job_id] = store.ops.enqueue([{}], queue=Q)
    wait_until(lambda: worker.stats.completed == 1)
    assert "once per attempt" in str(errors[0])
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.last_error) == (JobStatus.COMPLETED, 1, None)
    assert captured(business) == [(job_id, 1, worker.worker_id)]
    assert (worker.stats.failed, worker.stats.lost) == (0, 0)


def test_transaction_outside_a_worker_is_an_error(store: Stores) -> None:
    store.ops.enqueue([{}], queue=Q)
    [lease] = store.work.claim(Q, "w", LONG)
    with pytest.raises(RuntimeError, match="only in a handler run by a worker"):
        JobContext(lease).transaction()


# -- a worker process killed inside its transaction -------------------------------------------


@pytest.fixture
def worker_procs(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(worker_id: str, *args: str) -> WorkerProc:
        proc = WorkerProc(
            db_dsn,
            Q,
            "tests.handlers:capture_in_transaction",
            worker_id,
            tmp_path / f"{worker_id}.log",
            *args,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


@pytest.mark.slow
def test_a_worker_killed_inside_its_transaction_leaves_no_business_row(
    store: Stores, business: psycopg.Connection[Any], worker_procs: Any, tmp_path: Path
) -> None:
    victim = worker_procs("victim", "--lease-ttl", "1s", "--heartbeat-every", "200ms")
    [job_id] = store.ops.enqueue([{"dir": str(tmp_path)}], queue=Q)
    wait_until(lambda: (tmp_path / "inside").exists(), what="the handler inside its transaction")
    victim.signal(signal.SIGKILL)
    victim.wait()
    # The server rolls the dead client's transaction back once it sees the socket close.
    wait_until(
        lambda: (
            business.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                ("leasectl handler victim",),
            ).fetchone()
            == (0,)
        ),
        what="the killed worker's handler connection to end",
    )
    assert captured(business) == []
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING
    heir = worker_procs("heir")
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED, timeout=30)
    assert captured(business) == [(job_id, 2, "heir")]
    assert attempts(business, job_id) == [(1, "victim", "expired"), (2, "heir", "completed")]
    heir.signal(signal.SIGTERM)
    assert heir.wait() == 0


def test_a_transaction_still_open_after_the_grace_period_is_rolled_back(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    """Shutdown hands the job back while its handler's transaction is open: the block's end is
    refused, nothing of it stays, and the job is Pending again for the next worker."""
    gate = Gate()
    ended = threading.Event()

    def handler(ctx: JobContext) -> None:
        try:
            with ctx.transaction() as conn:
                capture(conn, ctx)
                gate.hold()
        except LeaseLost as exc:
            gate.seen.append(exc)
        finally:
            ended.set()

    worker = run_worker(handler, queues=(Q,), concurrency=2, grace=timedelta(milliseconds=100))
    [job_id] = store.ops.enqueue([{}], queue=Q)
    assert gate.inside.wait(10)
    worker.stop()
    assert worker.closed.wait(15)
    assert worker.stats.released == 1
    gate.go.set()
    assert ended.wait(10)
    assert len(gate.seen) == 1
    assert captured(business) == []
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert attempts(business, job_id) == [(1, worker.worker_id, "released")]


@pytest.mark.parametrize("statement", ["COMMIT", "ROLLBACK"])
def test_a_transaction_the_handler_ended_itself_fails_the_attempt(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any], statement: str
) -> None:
    """A raw COMMIT or ROLLBACK inside the block: the completion would have run on its own,
    outside the handler's transaction (a cancelled job's writes kept, or a job completed
    without them). The attempt fails instead, saying why."""

    def handler(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            capture(conn, ctx)
            conn.execute(statement)

    worker = run_worker(handler, queues=(Q,))
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=1)
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.FAILED)
    error = store.ops.get_job(job_id).last_error or ""
    assert "TransactionEnded" in error and "COMMIT or ROLLBACK" in error
    assert attempts(business, job_id) == [(1, worker.worker_id, "failed")]
    assert len(captured(business)) == (1 if statement == "COMMIT" else 0)


@pytest.mark.parametrize("statement", ["COMMIT", "ROLLBACK"])
def test_an_async_transaction_the_handler_ended_itself_fails_the_attempt(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any], statement: str
) -> None:
    async def handler(ctx: AsyncJobContext) -> None:
        async with ctx.transaction() as conn:
            await conn.execute("INSERT INTO public.captured VALUES (%s, 1, 'w')", (ctx.job.id,))
            await conn.execute(statement)

    run_worker(handler, queues=(Q,))
    [job_id] = store.ops.enqueue([{}], queue=Q, max_attempts=1)
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.FAILED)
    assert "TransactionEnded" in (store.ops.get_job(job_id).last_error or "")
