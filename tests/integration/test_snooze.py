"""Snooze (migration 21): a handler puts its job off without spending an attempt; fenced,
bounded, not counted as a failure, and sane with concurrency keys and limits."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl import AsyncJobContext, JobContext, NewJob, Snooze
from leasectl.core.config import MAX_SNOOZES
from leasectl.core.errors import UsageError
from leasectl.core.limits import LimitSpec
from leasectl.core.models import JobStatus
from leasectl.present.styles import OUTCOME_STYLE
from tests.integration.test_worker_processes import attempts
from tests.stores import Stores
from tests.util import wait_until

TTL = timedelta(seconds=30)


def counters(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    """The counters the database kept for ``queue`` (totals plus deltas not folded yet)."""
    rows = conn.execute(
        "SELECT counter, sum(v)::int FROM ("
        " SELECT counter, value AS v FROM leasectl.counter_totals WHERE queue = %(q)s"
        " UNION ALL SELECT counter, delta FROM leasectl.counter_deltas WHERE queue = %(q)s"
        " UNION ALL SELECT counter, delta FROM leasectl.queue_history_deltas"
        "  WHERE queue = %(q)s AND counter IN ('completed', 'failed', 'retried')"
        ") AS c GROUP BY counter",
        {"q": queue},
    ).fetchall()
    return dict(rows)


def job_row(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT status::text, attempts, max_attempts, snoozes, last_error "
        "FROM leasectl.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_a_snoozed_job_runs_again_later_without_spending_an_attempt(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    seen: list[int] = []

    def handler(ctx: JobContext) -> None:
        seen.append(ctx.job.snoozes)
        if ctx.job.snoozes < 2:
            raise Snooze(0.2)

    [job_id] = store.ops.enqueue([{}], queue="sz", max_attempts=1)
    worker = run_worker(handler, queues=("sz",), poll_interval=timedelta(milliseconds=50))
    wait_until(lambda: job_row(sql_conn, job_id)[0] == "Completed", timeout=20)
    # Two snoozes, then the run that completed: with max_attempts 1, a snooze that spent the
    # attempt would have left none.
    assert seen == [0, 1, 2]
    assert job_row(sql_conn, job_id) == ("Completed", 3, 3, 2, None)
    assert [a[2] for a in attempts(sql_conn, job_id)] == ["snoozed", "snoozed", "completed"]
    wait_until(lambda: worker.stats.snoozed == 2, timeout=10)
    assert worker.stats.failed == 0
    # Counted as neither failed nor retried.
    assert counters(sql_conn, "sz") == {"completed": 1}


def test_ctx_snooze_sets_run_at_by_the_delay_in_an_async_handler(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    async def handler(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)
        ctx.snooze(timedelta(hours=1))

    [job_id] = store.ops.enqueue([{}], queue="sa")
    run_worker(handler, queues=("sa",))
    wait_until(lambda: job_row(sql_conn, job_id)[3] == 1, timeout=20)
    status, attempt_count, max_attempts, _, _ = job_row(sql_conn, job_id)
    assert (status, attempt_count, max_attempts) == ("Pending", 1, 6)
    later = sql_conn.execute(
        "SELECT j.run_at - a.ended_at FROM leasectl.jobs AS j "
        "JOIN leasectl.job_attempts AS a ON a.job_id = j.id WHERE j.id = %s",
        (job_id,),
    ).fetchone()
    assert later is not None and later[0] == timedelta(hours=1)


def test_a_lost_lease_cannot_snooze(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    [job_id] = store.ops.enqueue([{}], queue="sl")
    [lease] = store.work.claim("sl", "w-old", TTL)
    # Taken over: the lease lapsed and another worker claimed the job (attempt 2).
    sql_conn.execute("UPDATE leasectl.jobs SET lease_until = now() - interval '1s'")
    [again] = store.work.claim("sl", "w-new", TTL)
    assert again.attempt == 2
    assert store.work.snooze(lease, timedelta(seconds=5)) is None
    assert job_row(sql_conn, job_id)[:4] == ("Processing", 2, 5, 0)
    # The same owner with a stale attempt is refused too; the live lease snoozes.
    stale = type(again)(again.job, again.owner, 1, again.until)
    assert store.work.snooze(stale, timedelta(seconds=5)) is None
    assert store.work.snooze(again, timedelta(seconds=5)) is not None
    assert job_row(sql_conn, job_id)[:4] == ("Pending", 2, 6, 1)


def test_a_snooze_past_the_bound_fails_the_attempt(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="sb", max_attempts=1)
    sql_conn.execute("UPDATE leasectl.jobs SET snoozes = %s WHERE id = %s", (MAX_SNOOZES, job_id))
    worker = run_worker(lambda ctx: ctx.snooze(1), queues=("sb",))
    wait_until(lambda: job_row(sql_conn, job_id)[0] == "Failed", timeout=20)
    _, _, _, snoozes, error = job_row(sql_conn, job_id)
    assert snoozes == MAX_SNOOZES
    assert error.startswith("leasectl.SnoozedTooOften: the job snoozed 100 times")
    assert [a[2] for a in attempts(sql_conn, job_id)] == ["failed"]
    wait_until(lambda: worker.stats.failed == 1, timeout=10)
    # The database refuses it too, whatever a worker sends (the fence's bound and the CHECK).
    [lease_job] = store.ops.enqueue([{}], queue="sb2")
    sql_conn.execute(
        "UPDATE leasectl.jobs SET snoozes = %s WHERE id = %s", (MAX_SNOOZES, lease_job)
    )
    [lease] = store.work.claim("sb2", "w", TTL)
    with pytest.raises(UsageError, match="jobs_run_bounds"):
        store.work.snooze(lease, timedelta(0), max_snoozes=MAX_SNOOZES + 1)
    assert store.work.snooze(lease, timedelta(0)) is None
    with pytest.raises(psycopg.errors.CheckViolation):
        sql_conn.execute("UPDATE leasectl.jobs SET snoozes = 101 WHERE id = %s", (lease_job,))


def test_a_bad_snooze_delay_fails_the_attempt_with_a_clear_error(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="sd", max_attempts=1)
    run_worker(lambda ctx: ctx.snooze(timedelta(days=8)), queues=("sd",))
    wait_until(lambda: job_row(sql_conn, job_id)[0] == "Failed", timeout=20)
    error = job_row(sql_conn, job_id)[4]
    assert error.startswith("ValueError: a snooze's delay must be between 0 and 7 days")


@pytest.mark.parametrize(
    ("delay", "kind"),
    [
        (-1, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (timedelta(days=7, seconds=1), ValueError),
        (True, TypeError),
        ("5", TypeError),
    ],
)
def test_snooze_delays_are_bounded(delay: Any, kind: type[Exception]) -> None:
    with pytest.raises(kind):
        Snooze(delay)


def test_snooze_takes_seconds_or_a_timedelta() -> None:
    assert Snooze(0).delay == timedelta(0)
    assert Snooze(1.5).delay == timedelta(seconds=1.5)
    assert Snooze(timedelta(days=7)).delay == timedelta(days=7)
    assert leasectl.Snooze is Snooze


def test_a_keyed_job_that_snoozes_keeps_its_key_and_its_place(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    """The key's head snoozes: it stays the head (Pending holds the key), the next job of the
    key stays Waiting behind it, and they still run in queue order."""
    order: list[str] = []
    let_go = threading.Event()

    def handler(ctx: JobContext) -> None:
        name = ctx.payload["name"]
        if name == "first" and ctx.job.snoozes == 0:
            raise Snooze(0.3)
        if name == "first":
            assert let_go.wait(20)
        order.append(name)

    jobs = [NewJob({"name": n}, queue="sk", concurrency_key="k") for n in ("first", "second")]
    first, second = (e.id for e in store.ops.enqueue_jobs(jobs))
    other = store.ops.enqueue_jobs([NewJob({"name": "other"}, queue="sk", concurrency_key="o")])
    run_worker(handler, queues=("sk",), concurrency=4, poll_interval=timedelta(milliseconds=50))
    wait_until(lambda: job_row(sql_conn, first)[3] == 1, timeout=20)
    # While the head is put off (and then running again), the second waits; another key runs.
    wait_until(lambda: job_row(sql_conn, other[0].id)[0] == "Completed", timeout=20)
    wait_until(lambda: job_row(sql_conn, first)[0] == "Processing", timeout=20)
    assert job_row(sql_conn, second)[0] == "Waiting"
    let_go.set()
    wait_until(lambda: job_row(sql_conn, second)[0] == "Completed", timeout=20)
    assert order == ["other", "first", "second"]


def test_a_snooze_frees_its_slot_under_a_concurrency_cap(
    store: Stores, run_worker: Any, sql_conn: psycopg.Connection[Any]
) -> None:
    """A queue capped at one running job: a job that snoozes (for long) lets the next run."""
    store.ops.set_limit("sc", LimitSpec(concurrency=1), actor="t", reason="test")
    first, second = store.ops.enqueue([{"n": 1}, {"n": 2}], queue="sc")

    def handler(ctx: JobContext) -> None:
        if ctx.payload["n"] == 1:
            ctx.snooze(timedelta(hours=1))

    run_worker(handler, queues=("sc",), concurrency=2, poll_interval=timedelta(milliseconds=50))
    wait_until(lambda: job_row(sql_conn, second)[0] == "Completed", timeout=20)
    assert job_row(sql_conn, first)[:4] == ("Pending", 1, 6, 1)
    assert store.ops.get_job(first).status == JobStatus.PENDING


def test_every_attempt_outcome_has_its_style_and_its_row_in_the_design(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """The outcomes the schema holds (migration 21 added `snoozed`) are the ones `inspect` and
    the console colour and docs/design.md describes."""
    row = sql_conn.execute("SELECT enum_range(NULL::leasectl.attempt_outcome)::text[]").fetchone()
    assert row is not None
    outcomes = set(row[0])
    assert "snoozed" in outcomes
    assert set(OUTCOME_STYLE) == outcomes
    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    table = design.split("### Attempt outcomes", 1)[1].split("\n## ", 1)[0]
    assert {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")} == outcomes
