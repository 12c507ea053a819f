"""Claims resume after the previous one while a backlog drains, and still reach every job.

A busy worker starts each claim at the first job of its previous claim instead of at the
queue's head (store.work.complete_and_claim ``from_key``). Jobs that land ahead of that point are
reached when the worker reads the queue from its head again: at once after a short claim, on an
announced enqueue, and at the latest one poll interval after its last head read.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.models import JobStatus
from leasectl.runtime.worker import JobContext
from tests.stores import Stores
from tests.util import wait_until

TTL = timedelta(minutes=5)
BACKLOG = 300
GATE_AT = 5  # the backlog job during which the test places a job ahead of the worker
WORK_S = 0.005  # each backlog job's work: the backlog takes about 1.5 s after the gate


def test_a_claim_from_a_key_takes_jobs_at_and_after_it_in_claim_order(store: Stores) -> None:
    ids = [store.ops.enqueue([{}], queue="k", priority=p)[0] for p in (3, 1, 2, 1, 2)]
    jobs = sorted((store.ops.get_job(i) for i in ids), key=lambda j: j.claim_order)
    # Claim order: priority 1 (two jobs, by run_at and id), then 2 (two), then 3.
    assert [j.id for j in jobs] == [ids[1], ids[3], ids[2], ids[4], ids[0]]
    start = jobs[2].claim_order
    leases, _ = store.work.complete_and_claim([], "k", "w-1", TTL, 10, from_key=start)
    assert [lease.job_id for lease in leases] == [j.id for j in jobs[2:]]
    # From the head (no key): what the resumed claim stepped over.
    leases, _ = store.work.complete_and_claim([], "k", "w-1", TTL, 10)
    assert [lease.job_id for lease in leases] == [j.id for j in jobs[:2]]


def test_the_head_key_comes_before_any_job(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="h", priority=-(2**31))
    # (The earliest run_at the schema takes: migration 5.)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET run_at = '0001-01-02 00:00:00+00' WHERE id = %s", (job_id,)
    )
    [lease] = store.work.claim("h", "w-1", TTL)
    assert lease.job_id == job_id


def test_a_claim_key_must_be_an_aware_datetime(store: Stores) -> None:
    with pytest.raises(TypeError, match="aware datetime"):
        store.work.complete_and_claim([], "k", "w-1", TTL, 1, from_key=(0, datetime(2026, 1, 1), 1))
    aware = (0, datetime(2026, 1, 1, tzinfo=UTC), 1)
    assert store.work.complete_and_claim([], "k", "w-1", TTL, 1, from_key=aware) == ([], set())


class Backlog:
    """A worker draining BACKLOG jobs of priority 5, one at a time; during backlog job GATE_AT
    the test places a job of priority 0 (ahead of the worker's resume point) and records how
    many backlog jobs were left when that job ran."""

    def __init__(self, store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
        self.store = store
        self.sql = sql_conn
        self.backlog = store.ops.enqueue([{}] * BACKLOG, queue="r", priority=5)
        self.done = 0
        self.gate = threading.Event()
        self.placed = threading.Event()
        self.urgent_ran = threading.Event()
        self.left_when_urgent_ran: int | None = None

    def handler(self, ctx: JobContext) -> None:
        if ctx.job.priority == 0:
            self.left_when_urgent_ran = BACKLOG - self.done
            self.urgent_ran.set()
            return
        self.done += 1
        if self.done == GATE_AT:
            self.gate.set()
            assert self.placed.wait(20)
        time.sleep(WORK_S)  # the job's work

    def place(self, how: str) -> int:
        """Once the worker is inside the backlog, put a priority 0 job in its queue: with the
        enqueue API (announced by NOTIFY) or with a plain INSERT (not announced)."""
        assert self.gate.wait(20)
        try:
            if how == "announced":
                return self.store.ops.enqueue([{}], queue="r", priority=0)[0]
            row = self.sql.execute(
                "INSERT INTO leasectl.jobs (queue, priority) VALUES ('r', 0) RETURNING id"
            ).fetchone()
            assert row is not None
            return int(row[0])
        finally:
            self.placed.set()


@pytest.mark.parametrize(
    ("how", "poll_interval"),
    [
        # Not announced: the worker reads the queue from its head one poll interval after the
        # last time it did, even while every claim comes back full.
        ("not announced", timedelta(milliseconds=200)),
        # Announced: at once, however long the poll interval.
        ("announced", timedelta(hours=1)),
    ],
)
def test_a_job_placed_ahead_of_a_draining_worker_runs_before_the_backlog_ends(
    store: Stores,
    sql_conn: psycopg.Connection[Any],
    run_worker: Any,
    how: str,
    poll_interval: timedelta,
) -> None:
    backlog = Backlog(store, sql_conn)
    run_worker(backlog.handler, queues=("r",), poll_interval=poll_interval)
    urgent = backlog.place(how)
    assert backlog.urgent_ran.wait(30), "the job ahead of the worker never ran"
    wait_until(lambda: store.ops.get_job(urgent).status == JobStatus.COMPLETED, timeout=20)
    # The backlog after the gate takes about 1.5 s; the job ahead ran well before its end.
    assert backlog.left_when_urgent_ran is not None
    assert backlog.left_when_urgent_ran > BACKLOG // 3, backlog.left_when_urgent_ran


def test_a_short_claim_from_the_resume_point_reads_the_head_at_once(
    store: Stores, sql_conn: psycopg.Connection[Any], run_worker: Any
) -> None:
    """When the claims from the resume point run dry, the worker does not take the queue for
    empty (and sleep a poll interval): it reads it from its head on the next trip."""
    ids = store.ops.enqueue([{}] * 10, queue="r", priority=5)
    reached = threading.Event()
    placed = threading.Event()

    def handler(ctx: JobContext) -> None:
        if ctx.job.id == ids[3]:
            reached.set()
            assert placed.wait(20)

    run_worker(handler, queues=("r",), poll_interval=timedelta(hours=1))
    assert reached.wait(20)
    row = sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority) VALUES ('r', 0) RETURNING id"
    ).fetchone()  # not announced, and behind the worker
    placed.set()
    assert row is not None
    wait_until(lambda: store.ops.get_job(int(row[0])).status == JobStatus.COMPLETED, timeout=20)
    assert all(store.ops.get_job(i).status == JobStatus.COMPLETED for i in ids)
