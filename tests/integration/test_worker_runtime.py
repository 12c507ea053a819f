"""The worker runtime in-process: NOTIFY wake-ups, batched completions, lost-lease cancellation."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl import AsyncJobContext
from leasectl.core.errors import ConnectionFailed
from leasectl.core.models import JobStatus
from leasectl.runtime.worker import JobContext, PermanentError
from tests.integration.test_worker_processes import attempts
from tests.stores import Stores
from tests.util import wait_until


def test_an_idle_worker_is_woken_by_notify_not_by_polling(store: Stores, run_worker: Any) -> None:
    done = threading.Event()
    worker = run_worker(lambda ctx: done.set(), queues=("n",), poll_interval=timedelta(hours=1))
    [first] = store.ops.enqueue([{}], queue="n")
    # The worker polled an empty queue at start-up and now sleeps for an hour unless woken.
    wait_until(lambda: store.ops.get_job(first).status == JobStatus.COMPLETED, timeout=10)
    [second] = store.ops.enqueue([{}], queue="n")
    wait_until(lambda: store.ops.get_job(second).status == JobStatus.COMPLETED, timeout=10)
    # The worker counts a result once its statement has returned: a moment after the commit.
    wait_until(lambda: worker.stats.completed == 2, timeout=10)


def test_many_jobs_complete_with_batched_statements(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    ids = store.ops.enqueue([{}] * 300, queue="b")
    worker = run_worker(lambda ctx: None, queues=("b",), concurrency=20)
    wait_until(
        lambda: (
            sql_conn.execute(
                "SELECT count(*) FROM leasectl.jobs WHERE status = 'Completed'"
            ).fetchone()
            == (300,)
        ),
        timeout=60,
    )
    # The worker counts a batch once its statement has returned: a moment after the commit.
    wait_until(lambda: worker.stats.completed == 300, timeout=10)
    assert worker.stats.lost == 0
    outcomes = sql_conn.execute(
        "SELECT outcome::text, count(*) FROM leasectl.job_attempts GROUP BY 1"
    ).fetchall()
    assert outcomes == [("completed", 300)]
    assert len(ids) == 300


def test_a_handler_sees_cancellation_when_its_lease_is_taken(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    seen: list[JobContext] = []
    cancelled = threading.Event()

    def handler(ctx: JobContext) -> None:
        seen.append(ctx)
        if ctx.cancelled.wait(30):
            cancelled.set()

    worker = run_worker(
        handler,
        queues=("c",),
        lease_ttl=timedelta(seconds=2),
        heartbeat_every=timedelta(milliseconds=200),
    )
    [job_id] = store.ops.enqueue([{}], queue="c")
    wait_until(lambda: seen)
    # Another owner takes the job over (as after an expiry); the next heartbeat notices.
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )
    assert store.work.claim_by_id(job_id, "thief", timedelta(seconds=60)) is not None
    assert cancelled.wait(10)
    wait_until(lambda: worker.stats.lost == 1)
    job = store.ops.get_job(job_id)
    assert (job.status, job.lease_owner, job.attempts) == (JobStatus.PROCESSING, "thief", 2)


def test_heartbeats_continue_while_running_handlers_finish_after_stop(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    """The grace period outlasts the lease: the lease must stay valid until the result lands."""
    from leasectl.runtime.watcher import WatcherConfig, run_pass

    started = threading.Event()

    def slow(ctx: JobContext) -> None:
        started.set()
        ctx.cancelled.wait(2.5)  # outlives the 1 s lease unless heartbeats keep it

    worker = run_worker(
        slow,
        queues=("g",),
        lease_ttl=timedelta(seconds=1),
        heartbeat_every=timedelta(milliseconds=200),
        grace=timedelta(seconds=20),
    )
    [job_id] = store.ops.enqueue([{}], queue="g")
    assert started.wait(10)
    worker.stop()
    moved = 0

    def finished() -> bool:
        nonlocal moved
        moved += run_pass(store.ops, WatcherConfig()).total  # a watcher keeps looking meanwhile
        return store.ops.get_job(job_id).status != JobStatus.PROCESSING

    wait_until(finished, timeout=15)
    job = store.ops.get_job(job_id)
    assert (job.status, job.attempts, moved) == (JobStatus.COMPLETED, 1, 0)


def test_a_slot_freed_by_a_failure_is_used_while_the_others_stay_busy(
    store: Stores, run_worker: Any
) -> None:
    """Slots come free by failures too, not only by completions: with 7 of 8 handlers busy for
    as long as the test likes, a job enqueued after another one failed still starts."""
    release = threading.Event()
    started: list[int] = []

    def handler(ctx: JobContext) -> None:
        started.append(ctx.job.id)
        if ctx.payload.get("fail"):
            raise PermanentError("no")
        if ctx.payload.get("block"):
            release.wait(30)

    blocked = store.ops.enqueue([{"block": True}] * 7, queue="s")
    run_worker(handler, queues=("s",), concurrency=8, poll_interval=timedelta(milliseconds=50))
    wait_until(lambda: len(started) == 7, timeout=10)
    [failing] = store.ops.enqueue([{"fail": True}], queue="s")
    wait_until(lambda: store.ops.get_job(failing).status == JobStatus.FAILED, timeout=10)
    [later] = store.ops.enqueue([{}], queue="s")
    try:
        wait_until(lambda: store.ops.get_job(later).status == JobStatus.COMPLETED, timeout=5)
    finally:
        release.set()
    assert all(store.ops.get_job(j).status != JobStatus.FAILED for j in blocked)


PAYLOADS = [
    {},
    {"amount": 12345678901234567890, "rate": 0.1, "ok": True, "none": None},
    {"name": 'Zoë 支払い \u2028 "quoted" \\ back', "nested": {"list": [1, [2, {"x": []}]]}},
    ["a", 1, -2.5e-7],
    "just a string",
    42,
    None,
]


@pytest.mark.parametrize("generic_plans", [False, True], ids=["store", "worker-store"])
def test_a_claim_returns_each_payload_as_it_was_enqueued(db_dsn: str, generic_plans: bool) -> None:
    """The claim's jsonb loader (leasectl's own, on every connection) gives back what was
    enqueued: unicode, escapes, big integers, floats, nesting, and non-object JSON."""
    with Stores.connect(db_dsn, "leasectl", generic_plans=generic_plans) as s:
        ids = s.ops.enqueue(PAYLOADS, queue="p")
        leases, _ = s.work.complete_and_claim([], "p", "w1", timedelta(minutes=1), len(PAYLOADS))
    assert [lease.job.id for lease in leases] == ids
    assert [lease.job.payload for lease in leases] == PAYLOADS


def test_cancelled_is_one_event_made_on_first_use_by_any_thread(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue="c")
    [lease], _ = store.work.complete_and_claim([], "c", "w1", timedelta(minutes=1), 1)
    ctx = JobContext(lease)
    assert not ctx.is_cancelled()
    start = threading.Barrier(8)
    seen: list[threading.Event] = []

    def touch() -> None:
        start.wait(5)
        seen.append(ctx.cancelled)

    threads = [threading.Thread(target=touch) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(seen) == 8 and all(event is seen[0] for event in seen)
    assert not ctx.is_cancelled()
    ctx.cancelled.set()
    assert ctx.is_cancelled() and ctx.cancelled.wait(0)
    assert job_id == lease.job_id


@pytest.mark.parametrize("kind", ["threads", "async"])
def test_a_worker_that_takes_over_its_own_lapsed_lease_keeps_heartbeating_the_new_one(
    store: Stores,
    run_worker: Any,
    sql_conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """No heartbeat gets through (the database is away for this worker), so attempt 1's lease
    lapses while its handler runs, and this very worker takes the job over as attempt 2. When
    attempt 1's handler then ends, the worker must go on holding (and heartbeating) attempt 2:
    it once let go of the job by its id, attempt 2's lease lapsed in turn, and the worker took
    it over again and again (attempts 6, 7, 8 of one job in a chaos soak)."""
    blocked = threading.Event()
    blocked.set()
    second = threading.Event()  # attempt 2's handler is running
    finish = threading.Event()  # the test lets attempt 2 end

    def work(ctx: JobContext) -> None:
        if ctx.lease.attempt == 1:
            assert second.wait(30)
            return  # (its lease is lost: nothing is written)
        second.set()
        blocked.clear()  # heartbeats get through again
        assert finish.wait(30)

    async def work_async(ctx: AsyncJobContext) -> None:
        await asyncio.to_thread(work, ctx)  # type: ignore[arg-type]

    worker = run_worker(
        work if kind == "threads" else work_async,
        queues=("self",),
        concurrency=2,
        lease_ttl=timedelta(seconds=1),
        heartbeat_every=timedelta(milliseconds=200),
        poll_interval=timedelta(milliseconds=100),
        grace=timedelta(seconds=5),
    )
    heartbeat = worker.store.heartbeat

    def heartbeat_unless_blocked(*args: Any, **kwargs: Any) -> Any:
        if blocked.is_set():
            raise ConnectionFailed("the database is away (the test)")
        return heartbeat(*args, **kwargs)

    monkeypatch.setattr(worker.store, "heartbeat", heartbeat_unless_blocked)
    [job_id] = store.ops.enqueue([{}], queue="self")
    try:
        assert second.wait(30)
        started = store.ops.get_job(job_id).heartbeat_at
        assert started is not None
        # Attempt 1's handler has ended meanwhile; attempt 2's heartbeats go on well past the
        # 1 s its lease would last without them.
        wait_until(
            lambda: (
                (store.ops.get_job(job_id).heartbeat_at or started)
                > started + timedelta(seconds=2.5)
            ),
            what="attempt 2's heartbeats, 2.5 s on",
        )
        job = store.ops.get_job(job_id)
        assert (job.status, job.attempts, job.lease_owner) == (
            JobStatus.PROCESSING,
            2,
            worker.worker_id,
        )
    finally:
        finish.set()
    wait_until(lambda: store.ops.get_job(job_id).status == JobStatus.COMPLETED)
    assert [row[2] for row in attempts(sql_conn, job_id)] == ["expired", "completed"]
