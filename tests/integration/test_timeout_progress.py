"""Per-job timeouts and progress (migration 21), with real workers: a handler past its job's
timeout is cancelled and its attempt fails (retried as any failure); progress rides the
heartbeats, bounded, and belongs to the attempt that reported it; the bounds are a trigger
that only the statements naming the columns read (migration 32)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl import AsyncJobContext, JobContext, NewJob
from leasectl.core.errors import UsageError
from leasectl.core.models import JobStatus
from leasectl.runtime.worker.context import progress_value
from tests.integration.test_cli import assert_one_line_error, cli
from tests.integration.test_worker_processes import attempts
from tests.stores import Stores
from tests.util import wait_until

TTL = timedelta(seconds=30)


def row(conn: psycopg.Connection[Any], job_id: int, columns: str) -> tuple[Any, ...]:
    found = conn.execute(f"SELECT {columns} FROM leasectl.jobs WHERE id = %s", (job_id,))
    result = found.fetchone()
    assert result is not None
    return tuple(result)


def test_the_claim_returns_the_jobs_timeout(store: Stores) -> None:
    [done] = store.ops.enqueue_jobs([NewJob({}, queue="tc", timeout=timedelta(seconds=5))])
    [plain] = store.ops.enqueue([{}], queue="tc")
    leases = store.work.claim("tc", "w", TTL, limit=2)
    timeouts = {lease.job_id: lease.job.timeout for lease in leases}
    assert timeouts == {done.id: timedelta(seconds=5), plain: None}


@pytest.mark.parametrize(
    "timeout", [timedelta(0), timedelta(milliseconds=999), timedelta(days=7, seconds=1), 5]
)
def test_a_timeout_out_of_bounds_is_refused_before_any_sql(store: Stores, timeout: Any) -> None:
    with pytest.raises(UsageError, match="timeout must be"):
        store.ops.enqueue_jobs([NewJob({}, queue="tb", timeout=timeout)])
    assert store.ops.enqueue([{}], queue="tb") == [1]  # nothing was inserted before


def test_a_sync_handler_past_its_timeout_is_cancelled_and_its_attempt_retried(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    told: list[bool] = []

    def handler(ctx: JobContext) -> None:
        if ctx.lease.attempt == 1:
            told.append(ctx.cancelled.wait(60))  # returns once the worker cancels it
            return  # a success the worker must not write: the attempt timed out

    job = NewJob({}, queue="ts", timeout=timedelta(seconds=1))
    [e] = store.ops.enqueue_jobs([job])
    worker = run_worker(
        handler,
        queues=("ts",),
        retry_base=timedelta(milliseconds=100),
        poll_interval=timedelta(milliseconds=50),
    )
    wait_until(lambda: row(sql_conn, e.id, "status::text")[0] == "Completed", timeout=30)
    assert told == [True]
    assert [a[2] for a in attempts(sql_conn, e.id)] == ["failed", "completed"]
    error = sql_conn.execute(
        "SELECT error FROM leasectl.job_attempts WHERE job_id = %s AND attempt = 1", (e.id,)
    ).fetchone()
    assert error == ("leasectl.JobTimedOut: the handler ran past the job's timeout (1s)",)
    assert worker.stats.timed_out == 1
    assert worker.stats.lost == 0


def test_an_async_handler_past_its_timeout_is_cancelled(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    cancelled = threading.Event()

    async def handler(ctx: AsyncJobContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    [e] = store.ops.enqueue_jobs(
        [NewJob({}, queue="ta", timeout=timedelta(seconds=1), max_attempts=1)]
    )
    worker = run_worker(handler, queues=("ta",))
    wait_until(lambda: row(sql_conn, e.id, "status::text")[0] == "Failed", timeout=30)
    assert cancelled.is_set()
    assert row(sql_conn, e.id, "last_error") == (
        "leasectl.JobTimedOut: the handler ran past the job's timeout (1s)",
    )
    assert worker.stats.timed_out == 1


def test_a_job_within_its_timeout_completes(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    [e] = store.ops.enqueue_jobs([NewJob({}, queue="tw", timeout=timedelta(seconds=30))])
    worker = run_worker(lambda ctx: None, queues=("tw",))
    wait_until(lambda: row(sql_conn, e.id, "status::text")[0] == "Completed", timeout=20)
    assert worker.stats.timed_out == 0


def test_progress_rides_the_heartbeat_and_belongs_to_its_attempt(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    """A heartbeat writes the latest report with its attempt; readers show it while that is
    the job's attempt (the next claim writes no progress: migration 32)."""
    go_on = threading.Event()

    def handler(ctx: JobContext) -> None:
        if ctx.lease.attempt == 1:
            for n in range(1, 101):  # many reports: only the latest of a heartbeat is written
                ctx.progress(n / 200, f"step {n}")
            go_on.wait(30)
        raise RuntimeError("again")

    [job_id] = store.ops.enqueue([{}], queue="pr", max_attempts=2)
    run_worker(
        handler,
        queues=("pr",),
        lease_ttl=timedelta(seconds=3),
        heartbeat_every=timedelta(milliseconds=200),
        retry_base=timedelta(hours=1),
        poll_interval=timedelta(milliseconds=50),
    )
    wait_until(lambda: row(sql_conn, job_id, "progress")[0] is not None, timeout=20)
    assert row(sql_conn, job_id, "progress, progress_message, progress_attempt") == (
        0.5,
        "step 100",
        1,
    )
    go_on.set()
    wait_until(lambda: row(sql_conn, job_id, "status::text")[0] == "Pending", timeout=20)
    # Shown while the job waits (what the last attempt got to); not once the next one runs.
    job = store.ops.get_job(job_id)
    assert (job.progress, job.progress_message) == (0.5, "step 100")
    sql_conn.execute("UPDATE leasectl.jobs SET run_at = now() WHERE id = %s", (job_id,))
    wait_until(lambda: row(sql_conn, job_id, "status::text")[0] == "Failed", timeout=20)
    assert row(sql_conn, job_id, "attempts, progress_attempt") == (2, 1)
    job = store.ops.get_job(job_id)
    assert (job.attempts, job.progress, job.progress_message) == (2, None, None)
    assert store.ops.inspect(job_id).job.progress is None


def test_a_report_the_database_refuses_costs_no_lease(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any], caplog: Any
) -> None:
    """A message the database refuses (here one past its column, as a server in another
    encoding refuses characters it cannot hold) is dropped; the heartbeat goes on."""
    go_on = threading.Event()

    def handler(ctx: JobContext) -> None:
        ctx._progress = (0.5, "x" * 300)  # (past ctx.progress's checks)
        wait_until(lambda: ctx.progress_due() is None, timeout=20, what="the report dropped")
        ctx.progress(0.9, "ok")
        go_on.wait(30)

    [job_id] = store.ops.enqueue([{}], queue="pe")
    worker = run_worker(
        handler,
        queues=("pe",),
        lease_ttl=timedelta(seconds=3),
        heartbeat_every=timedelta(milliseconds=200),
    )
    wait_until(lambda: row(sql_conn, job_id, "progress")[0] == pytest.approx(0.9), timeout=20)
    go_on.set()
    wait_until(lambda: row(sql_conn, job_id, "status::text")[0] == "Completed", timeout=20)
    assert worker.stats.lost == 0
    assert "progress not written" in caplog.text


def test_progress_of_a_lost_lease_is_not_written(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="pl")
    [lease] = store.work.claim("pl", "w-old", TTL)
    sql_conn.execute("UPDATE leasectl.jobs SET lease_until = now() - interval '1s'")
    store.work.claim("pl", "w-new", TTL)
    assert store.work.heartbeat([lease], TTL, progress=[(0.9, "stale")]) == {}
    assert row(sql_conn, job_id, "progress, progress_message") == (None, None)


def test_a_heartbeat_without_progress_keeps_the_stored_one(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [a, b] = store.ops.enqueue([{}, {}], queue="pk")
    leases = store.work.claim("pk", "w", TTL, limit=2)
    assert len(store.work.heartbeat(leases, TTL, progress=[(0.25, None), (1.0, "done")])) == 2
    assert len(store.work.heartbeat(leases, TTL, progress=[None, (0.5, None)])) == 2
    assert row(sql_conn, a, "progress, progress_message") == (0.25, None)
    assert row(sql_conn, b, "progress, progress_message") == (0.5, None)
    assert len(store.work.heartbeat(leases, TTL)) == 2
    assert row(sql_conn, b, "progress") == (0.5,)


def test_the_consoles_processing_panel_reads_the_progress(store: Stores) -> None:
    store.ops.enqueue([{}, {}], queue="pc")
    first, second = store.work.claim("pc", "w", TTL, limit=2)
    store.work.heartbeat([first, second], TTL, progress=[(0.42, "m"), None])
    rows = {job.id: job.progress for job in store.panels.snapshot(None, 10).processing}
    assert rows == {first.job_id: pytest.approx(0.42), second.job_id: None}


@pytest.mark.parametrize(
    ("fraction", "message", "kind"),
    [
        (1.5, None, ValueError),
        (-0.1, None, ValueError),
        (math.nan, None, ValueError),
        (True, None, TypeError),
        ("0.5", None, TypeError),
        (0.5, 7, TypeError),
    ],
)
def test_progress_values_are_checked(fraction: Any, message: Any, kind: type[Exception]) -> None:
    with pytest.raises(kind):
        progress_value(fraction, message)


def test_a_progress_message_is_cut_and_made_storable() -> None:
    assert progress_value(1, "x" * 500) == (1.0, "x" * 200)
    assert progress_value(0, "a\x00b\ud800") == (0.0, "ab?")


def test_ctx_progress_is_kept_for_the_next_heartbeat_only_once(
    store: Stores,
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="po")
    [lease] = store.work.claim("po", "w", TTL)
    ctx = JobContext(lease)
    ctx.progress(0.3, "a third")
    assert ctx.progress_due() == (0.3, "a third")
    ctx._progress_sent = ctx._progress  # (what a heartbeat that carried it does)
    assert ctx.progress_due() is None
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING


# -- the CLI: enqueue --timeout, inspect ----------------------------------------------------


def test_enqueue_timeout_is_stored_and_inspect_shows_it_with_progress_and_snoozes(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    proc = cli("enqueue", "-q", "ct", "--timeout", "90s", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    [job_id] = json.loads(proc.stdout)["ids"]
    assert row(sql_conn, job_id, "timeout") == (timedelta(seconds=90),)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET snoozes = 2, progress = 0.375, progress_message = 'rows 3/8', "
        "progress_attempt = attempts WHERE id = %s",
        (job_id,),
    )
    shown = cli("inspect", str(job_id), dsn=db_dsn)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[1]: line for line in shown.stdout.splitlines() if len(line.split()) > 2}
    assert "1m30s" in lines["timeout"]
    assert "38%  rows 3/8" in lines["progress"]
    assert "2  (each put the job off" in lines["snoozes"]
    doc = json.loads(cli("inspect", str(job_id), "--json", dsn=db_dsn).stdout)["job"]
    assert (doc["timeout"], doc["snoozes"], doc["progress_message"]) == (90.0, 2, "rows 3/8")
    assert doc["progress"] == pytest.approx(0.375)


@pytest.mark.parametrize("value", ["0", "500ms", "8d", "soon", "-5s"])
def test_enqueue_refuses_a_timeout_out_of_bounds(
    db_dsn: str, sql_conn: psycopg.Connection[Any], value: str
) -> None:
    proc = cli("enqueue", "-q", "ct", "--timeout", value, dsn=db_dsn)
    assert_one_line_error(proc, 2, "--timeout")
    assert sql_conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("progress", 1.5),
        ("progress", -0.1),
        ("progress", float("nan")),
        ("progress", float("inf")),
        ("snoozes", 101),
        ("snoozes", -1),
        ("timeout", timedelta(days=8)),
        ("timeout", timedelta(milliseconds=500)),
    ],
)
def test_the_run_bounds_refuse_a_value_out_of_them_as_a_check_did(
    store: Stores, sql_conn: psycopg.Connection[Any], column: str, value: Any
) -> None:
    """Written by an UPDATE or an INSERT (a hostile worker or producer may write these
    columns): the statement fails with check_violation naming jobs_run_bounds, and the row is
    unchanged."""
    [job_id] = store.ops.enqueue([{}], queue="rb")
    before = row(sql_conn, job_id, "progress, snoozes, timeout")
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_run_bounds") as refused:
        sql_conn.execute(f"UPDATE leasectl.jobs SET {column} = %s WHERE id = %s", (value, job_id))
    assert refused.value.diag.constraint_name == "jobs_run_bounds"
    assert row(sql_conn, job_id, "progress, snoozes, timeout") == before
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_run_bounds"):
        sql_conn.execute(f"INSERT INTO leasectl.jobs (queue, {column}) VALUES ('rb', %s)", (value,))
    assert sql_conn.execute("SELECT count(*) FROM leasectl.jobs WHERE queue = 'rb'").fetchone() == (
        1,
    )


def test_only_statements_that_write_the_bounded_columns_check_them(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The claim and the completion do not read the bounds (a CHECK constraint is read by
    every statement that writes a row: it cost each single-job round trip about 5% of its server
    CPU); a heartbeat does. Shown with a row out of the bounds, which only the table's owner can
    make, with the trigger disabled."""
    [job_id] = store.ops.enqueue([{}], queue="ob")
    sql_conn.execute("ALTER TABLE leasectl.jobs DISABLE TRIGGER jobs_run_bounds")
    try:
        sql_conn.execute("UPDATE leasectl.jobs SET snoozes = 500 WHERE id = %s", (job_id,))
    finally:
        sql_conn.execute("ALTER TABLE leasectl.jobs ENABLE TRIGGER jobs_run_bounds")
    [lease] = store.work.claim("ob", "w", TTL)
    for progress in ([(0.5, "half")], None):  # (every heartbeat names the progress column)
        with pytest.raises(UsageError, match="jobs_run_bounds"):
            store.work.heartbeat([lease], TTL, progress=progress)
    assert store.work.complete([lease]) == {job_id}
    assert row(sql_conn, job_id, "status::text, snoozes") == ("Completed", 500)
