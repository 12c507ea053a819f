"""``async def`` handlers: the jobs of a worker run as tasks of one event loop thread, with the
same claims, heartbeats, fences, failures and shutdown as threaded handlers (real `leasectl
worker` processes where the behaviour is the command's; in-process workers to hold a handler
at a precise point)."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl import AsyncJobContext, LeaseLost
from leasectl.core.models import JobStatus
from leasectl.runtime.worker import is_async_handler
from tests.integration.test_worker_processes import WorkerProc, attempts, jobs_state
from tests.stores import Stores
from tests.util import wait_until

LONG = timedelta(minutes=10)  # a lease no heartbeat needs to renew during the test


@pytest.fixture
def workers(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(queue: str, handler: str, worker_id: str, *args: str) -> WorkerProc:
        w = WorkerProc(db_dsn, queue, handler, worker_id, tmp_path / f"{worker_id}.log", *args)
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


def test_async_functions_and_objects_are_told_from_sync_ones() -> None:
    async def fn(ctx: AsyncJobContext) -> None:
        return None

    class Callable:
        async def __call__(self, ctx: AsyncJobContext) -> None:
            return None

    def sync(ctx: Any) -> None:
        return None

    assert is_async_handler(fn) and is_async_handler(Callable())
    assert not is_async_handler(sync)


def test_a_sync_handler_that_returns_a_coroutine_fails_the_job_and_says_why(
    store: Stores, run_worker: Any
) -> None:
    async def work(ctx: AsyncJobContext) -> None:
        return None

    worker = run_worker(lambda ctx: work(ctx), queues=("w",))
    assert not worker.is_async
    [job_id] = store.ops.enqueue([{}], queue="w", max_attempts=1)
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.FAILED)
    assert "returned a coroutine" in (store.ops.get_job(job_id).last_error or "")


@pytest.mark.parametrize(
    ("choice", "loop"), [((), "uvloop"), (("--event-loop", "asyncio"), "asyncio")]
)
def test_jobs_run_at_once_as_tasks_of_one_loop_thread(
    store: Stores, workers: Any, tmp_path: Path, choice: tuple[str, ...], loop: str
) -> None:
    """Four jobs meet inside the handler (an asyncio.Event rendezvous: none returns until all
    four are in it), on one thread: the loop's, with no handler threads in the process. The
    loop is uvloop's unless asyncio's is asked for, and the log says which."""
    out = tmp_path / "seen"
    out.mkdir()
    ids = store.ops.enqueue([{"dir": str(out), "n": 4}] * 4, queue="a")
    w = workers("a", "tests.handlers:rendezvous", "looper", "--concurrency", "4", *choice)
    for job_id in ids:
        wait_until(lambda job_id=job_id: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    seen = [json.loads((out / str(job_id)).read_text()) for job_id in ids]
    assert {s["loop"] for s in seen} == {loop}
    assert f"(async handler, {loop} event loop)" in w.text()
    assert {s["thread"] for s in seen} == {"leasectl-loop"}
    assert len({s["ident"] for s in seen}) == 1
    for s in seen:
        assert s["arrived"] == 4
        assert s["threads"].count("leasectl-loop") == 1
        assert not [t for t in s["threads"] if t.startswith("leasectl-job")]


def test_many_async_jobs_complete_on_the_claim_round_trips(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    ids = store.ops.enqueue([{}] * 300, queue="m")
    workers("m", "tests.handlers:noop_async", "many", "--concurrency", "20")
    wait_until(lambda: all(s[1] == "Completed" for s in jobs_state(sql_conn, ids)), timeout=60)
    assert {a for job_id in ids[:10] for a in attempts(sql_conn, job_id)} == {
        (1, "many", "completed")
    }


def test_async_handler_exceptions_become_failures_with_their_traceback(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    [retry_id] = store.ops.enqueue([{}], queue="f", max_attempts=3)
    [perm_id] = store.ops.enqueue([{}], queue="p", max_attempts=3)
    workers("f", "tests.handlers:boom_async", "failing", "--retry-base", "30s")
    workers("p", "tests.handlers:permanent_async", "permanent", "--concurrency", "2")
    wait_until(lambda: store.ops.get_job(retry_id).last_error is not None)
    job = store.ops.get_job(retry_id)
    assert job.status == JobStatus.PENDING
    assert job.last_error == "RuntimeError: async boom on attempt 1"
    assert job.run_at > job.updated_at, "retry is delayed by the backoff"
    row = sql_conn.execute(
        "SELECT outcome::text, error_detail FROM leasectl.job_attempts WHERE job_id = %s",
        (retry_id,),
    ).fetchone()
    assert row is not None and row[0] == "failed"
    assert row[1].startswith("Traceback (most recent call last):\n")
    assert "in boom_async" in row[1] and "in _charge_async" in row[1]
    wait_until(lambda: store.ops.get_job(perm_id).status == JobStatus.FAILED)
    perm = store.ops.get_job(perm_id)
    assert perm.attempts == 1
    assert (perm.last_error or "").endswith("PermanentError: bad payload (async)")


@pytest.mark.parametrize("how", ["await ctx.cancelled", "await ctx.cancelled.wait()"])
def test_an_operator_cancel_wakes_the_awaiting_handler_and_its_success_is_not_written(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any, tmp_path: Path, how: str
) -> None:
    payload = {"dir": str(tmp_path), "wait": how.endswith("wait()")}
    [job_id] = store.ops.enqueue([payload], queue="c")
    worker = workers(
        "c",
        "tests.handlers:succeed_once_cancelled_async",
        "holder",
        "--heartbeat-every",
        "300ms",
    )
    wait_until(lambda: (tmp_path / "started").exists(), what="the handler to start")
    seen = store.ops.get_job(job_id).seen()
    assert store.ops.operator_cancel([seen], actor="oncall", reason="x").changed == (job_id,)
    wait_until(
        lambda: (tmp_path / "cancelled").exists(),
        timeout=5,  # a heartbeat interval (300 ms), with room for a loaded machine
        what="the handler to see ctx.cancelled",
    )
    assert json.loads((tmp_path / "cancelled").read_text()) == {"is_cancelled": True}
    wait_until(lambda: "cancelled by an operator" in worker.text())
    assert jobs_state(sql_conn, [job_id])[0][1:4] == ("Cancelled", 1, "holder")
    assert attempts(sql_conn, job_id) == [(1, "holder", "cancelled")]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert jobs_state(sql_conn, [job_id])[0][1] == "Cancelled"


def test_a_task_that_ignores_its_lost_lease_is_cancelled_after_the_grace_period(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any, tmp_path: Path
) -> None:
    """The lease is lost (an operator cancel); the handler never looks at ctx.cancelled. After
    --grace the worker cancels its task, which frees the worker's one slot for the next job."""
    [held] = store.ops.enqueue([{"dir": str(tmp_path), "hold": True}], queue="i")
    worker = workers(
        "i", "tests.handlers:ignore_cancelled", "ignorer", "--heartbeat-every", "300ms",
        "--grace", "500ms",
    )  # fmt: skip
    wait_until(lambda: (tmp_path / "started").exists(), what="the handler to start")
    [after] = store.ops.enqueue([{}], queue="i")
    seen = store.ops.get_job(held).seen()
    assert store.ops.operator_cancel([seen], actor="oncall", reason="x").changed == (held,)
    wait_until(lambda: (tmp_path / "task-cancelled").exists(), what="the task to be cancelled")
    assert json.loads((tmp_path / "task-cancelled").read_text()) == {"is_cancelled": True}
    assert "cancelling its task" in worker.text()
    wait_until(lambda: store.ops.get_job(after).status == JobStatus.COMPLETED)
    assert attempts(sql_conn, held) == [(1, "ignorer", "cancelled")]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_lease_that_lapses_while_heartbeats_are_stuck_wakes_the_handler(
    store: Stores, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline thread, not a refused heartbeat: every heartbeat hangs (the network), so
    the lease lapses unrenewed and the handler's ``await ctx.cancelled`` returns."""
    woke = threading.Event()
    stuck = threading.Event()
    release = threading.Event()

    async def handler(ctx: AsyncJobContext) -> None:
        if ctx.lease.attempt > 1:
            return
        await asyncio.wait_for(ctx.cancelled, 30)
        woke.set()

    worker = run_worker(
        handler,
        queues=("d",),
        lease_ttl=timedelta(seconds=1),
        heartbeat_every=timedelta(milliseconds=200),
        # Not looking for lapsed leases again during the test (the job's own, once lapsed,
        # would be taken over by this very worker).
        poll_interval=timedelta(seconds=60),
        grace=timedelta(milliseconds=200),
    )

    def hang(*args: Any, **kwargs: Any) -> Any:
        stuck.set()
        release.wait(30)
        return {}

    monkeypatch.setattr(worker.store, "heartbeat", hang)
    # Enqueued after the first trip, which looked for lapsed leases and found none: else the
    # job could come with that trip, a full one, and the next trip (when the lease is lost)
    # would look again and take the job over, its own (completed == 1; failed under load).
    wait_until(lambda: worker.stats.trips >= 1, what="the worker's first trip")
    [job_id] = store.ops.enqueue([{}], queue="d")
    try:
        assert woke.wait(15)
        assert stuck.is_set()
        wait_until(lambda: worker.stats.lost == 1)
        assert worker.stats.completed == 0
    finally:
        release.set()
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING  # the watcher's to requeue


def test_sigterm_lets_an_async_handler_finish_within_the_grace_period(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    ids = store.ops.enqueue([{"seconds": 0.5}] * 3, queue="g")
    w = workers(
        "g", "tests.handlers:sleep_async", "patient", "--concurrency", "3", "--grace", "20s"
    )
    wait_until(lambda: all(s[1] == "Processing" for s in jobs_state(sql_conn, ids)))
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert all(store.ops.get_job(job_id).status == JobStatus.COMPLETED for job_id in ids)


def test_sigterm_past_the_grace_period_releases_the_jobs_and_cancels_their_tasks(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any, tmp_path: Path
) -> None:
    [job_id] = store.ops.enqueue([{"dir": str(tmp_path), "hold": True}], queue="t")
    w = workers("t", "tests.handlers:ignore_cancelled", "graceful", "--grace", "300ms")
    wait_until(lambda: (tmp_path / "started").exists(), what="the handler to start")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert json.loads((tmp_path / "task-cancelled").read_text()) == {"is_cancelled": True}
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.lease_until) == (JobStatus.PENDING, 1, None)
    assert attempts(sql_conn, job_id) == [(1, "graceful", "released")]
    assert "Traceback" not in w.text()


# -- async with ctx.transaction() -------------------------------------------------------------


@pytest.fixture
def business(sql_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    sql_conn.execute(
        "CREATE TABLE public.captured (job_id bigint PRIMARY KEY, attempt int NOT NULL, "
        "worker text NOT NULL)"
    )
    return sql_conn


async def capture(conn: psycopg.AsyncConnection[Any], ctx: AsyncJobContext) -> None:
    await conn.execute(
        "INSERT INTO public.captured (job_id, attempt, worker) VALUES (%s, %s, %s)",
        (ctx.job.id, ctx.lease.attempt, ctx.lease.owner),
    )


def captured(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT job_id, attempt, worker FROM public.captured ORDER BY 1").fetchall()


def handler_sessions(conn: psycopg.Connection[Any], worker_id: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        (f"leasectl handler {worker_id}",),
    ).fetchone()
    assert row is not None
    return int(row[0])


class Gate:
    """The handler says it is inside its transaction (from the loop), then awaits the test."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.go = threading.Event()
        self.seen: list[BaseException] = []

    async def hold(self) -> None:
        self.inside.set()
        while not self.go.is_set():
            await asyncio.sleep(0.01)


def test_the_business_row_and_the_completion_commit_together(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    gate = Gate()

    async def handler(ctx: AsyncJobContext) -> None:
        async with ctx.transaction() as conn:
            assert isinstance(conn, psycopg.AsyncConnection)
            await capture(conn, ctx)
            await gate.hold()

    worker = run_worker(handler, queues=("x",), lease_ttl=LONG, concurrency=4)
    [job_id] = store.ops.enqueue([{}], queue="x")
    assert gate.inside.wait(10)
    assert captured(business) == []
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING
    gate.go.set()
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert captured(business) == [(job_id, 1, worker.worker_id)]
    wait_until(lambda: worker.stats.completed == 1)
    assert (worker.stats.lost, worker.stats.failed) == (0, 0)
    # More jobs reuse the connection the loop keeps (one transaction at a time here).
    ids = store.ops.enqueue([{}] * 5, queue="x")
    for later in ids:
        wait_until(lambda later=later: store.ops.get_job(later).status == JobStatus.COMPLETED)
    assert len(captured(business)) == 6
    assert 1 <= handler_sessions(business, worker.worker_id) <= 4
    worker.stop()
    assert worker.closed.wait(15)
    wait_until(lambda: handler_sessions(business, worker.worker_id) == 0)


def test_a_lease_taken_over_during_the_transaction_is_refused_and_rolled_back(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    gate = Gate()
    returned: list[str] = []

    async def handler(ctx: AsyncJobContext) -> None:
        try:
            async with ctx.transaction() as conn:
                await capture(conn, ctx)
                await gate.hold()
        except LeaseLost as exc:
            gate.seen.append(exc)
            assert ctx.is_cancelled()
        returned.append("normally")

    # (Polling once a minute: the worker does not take its own lapsed lease over first.)
    first = run_worker(
        handler,
        queues=("x",),
        lease_ttl=LONG,
        worker_id="first",
        poll_interval=timedelta(minutes=1),
    )
    [job_id] = store.ops.enqueue([{}], queue="x")
    assert gate.inside.wait(10)
    business.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )
    assert store.work.claim_by_id(job_id, "second", timedelta(seconds=60)) is not None
    gate.go.set()
    wait_until(lambda: returned == ["normally"])
    assert len(gate.seen) == 1 and isinstance(gate.seen[0], LeaseLost)
    wait_until(lambda: first.stats.lost == 1)
    assert captured(business) == []
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, job.lease_owner) == (JobStatus.PROCESSING, 2, "second")
    assert (first.stats.completed, first.stats.failed) == (0, 0)


def test_an_exception_in_the_block_rolls_back_and_the_job_is_retried(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    async def handler(ctx: AsyncJobContext) -> None:
        async with ctx.transaction() as conn:
            await capture(conn, ctx)
            if ctx.lease.attempt == 1:
                raise RuntimeError("card declined")

    worker = run_worker(
        handler,
        queues=("x",),
        retry_base=timedelta(milliseconds=1),
        poll_interval=timedelta(milliseconds=50),
    )
    [job_id] = store.ops.enqueue([{}], queue="x")
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert captured(business) == [(job_id, 2, worker.worker_id)]
    wait_until(lambda: (worker.stats.failed, worker.stats.completed) == (1, 1))


def test_a_task_cancelled_inside_its_transaction_rolls_back_and_closes_nothing_it_keeps(
    store: Stores, run_worker: Any, business: psycopg.Connection[Any]
) -> None:
    """Shutdown past the grace period cancels the task in the middle of its transaction (a
    statement in flight): rolled back, the job handed back, the connection not kept open."""
    inside = threading.Event()
    ended: list[str] = []

    async def handler(ctx: AsyncJobContext) -> None:
        try:
            async with ctx.transaction() as conn:
                await capture(conn, ctx)
                inside.set()
                await conn.execute("SELECT pg_sleep(60)")
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    worker = run_worker(handler, queues=("x",), concurrency=2, grace=timedelta(milliseconds=200))
    [job_id] = store.ops.enqueue([{}], queue="x")
    assert inside.wait(10)
    worker.stop()
    assert worker.closed.wait(15)
    assert ended == ["cancelled"]
    assert worker.stats.released == 1
    assert captured(business) == []
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    wait_until(lambda: handler_sessions(business, worker.worker_id) == 0)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_worker_command_commits_async_transactions_and_rolls_back_at_sigterm(
    store: Stores, business: psycopg.Connection[Any], workers: Any, tmp_path: Path, loop: str
) -> None:
    """(psycopg's AsyncConnection on either event loop.)"""
    ids = store.ops.enqueue([{}] * 6, queue="x")
    w = workers(
        "x", "tests.handlers:capture_in_transaction_async", "txw", "--concurrency", "3",
        "--grace", "300ms", "--event-loop", loop,
    )  # fmt: skip
    for job_id in ids:
        wait_until(lambda job_id=job_id: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert captured(business) == [(job_id, 1, "txw") for job_id in ids]
    [held] = store.ops.enqueue([{"hold": True, "dir": str(tmp_path)}], queue="x")
    wait_until(lambda: (tmp_path / "inside").exists(), what="the handler inside its transaction")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert captured(business) == [(job_id, 1, "txw") for job_id in ids]
    job = store.ops.get_job(held)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert attempts(business, held) == [(1, "txw", "released")]
    assert "Traceback" not in w.text()


def test_a_second_transaction_is_an_error_and_outside_a_worker_too(store: Stores) -> None:
    store.ops.enqueue([{}], queue="x")
    [lease] = store.work.claim("x", "w", LONG)
    with pytest.raises(RuntimeError, match="only in a handler run by a worker"):
        AsyncJobContext(lease).transaction()
