"""Paused queues with real `leasectl worker` processes and the `pause`/`resume` commands.

When a pause commits, no claim that starts after it takes a job of the queue; the jobs in
flight finish normally; a resume is announced, so the drain goes on at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.test_worker_processes import ROOT, WorkerProc
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full

QUEUE = "p"


@pytest.fixture
def workers(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    """start(queue, handler, worker_id, *args) -> a real `leasectl worker`; all stopped after."""
    started: list[WorkerProc] = []

    def start(queue: str, handler: str, worker_id: str, *args: str) -> WorkerProc:
        w = WorkerProc(db_dsn, queue, handler, worker_id, tmp_path / f"{worker_id}.log", *args)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.signal(signal.SIGTERM)
            w.wait()
        w.close()


def leasectl(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        cwd=ROOT,
        env={**os.environ, "LEASECTL_DSN": dsn, "LEASECTL_SCHEMA": "leasectl"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def db_clock(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def claimed_since(conn: psycopg.Connection[Any], worker_id: str, since: datetime) -> bool:
    """The worker's session ran a claim statement (jobs_complete_and_claim or
    jobs_claim_expired: `WITH budget AS`, within the first 1024 bytes of the text that
    pg_stat_activity keeps) that started after ``since`` and has finished: the worker had its
    chance to claim."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND state = 'idle' AND query LIKE '%%WITH budget AS%%' AND query_start > %s",
        (f"leasectl worker {worker_id}"[:63], since),
    ).fetchone()
    return bool(row and row[0])


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status::text, count(*) FROM leasectl.jobs WHERE queue = %s GROUP BY status",
        (QUEUE,),
    ).fetchall()
    return dict(rows)


def last_start(conn: psycopg.Connection[Any]) -> datetime | None:
    row = conn.execute(
        "SELECT max(a.started_at) FROM leasectl.job_attempts AS a "
        "JOIN leasectl.jobs AS j ON j.id = a.job_id WHERE j.queue = %s",
        (QUEUE,),
    ).fetchone()
    return row[0] if row else None


@pytest.mark.slow
def test_a_pause_stops_the_drain_and_a_resume_restarts_it(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    total = 1500
    store.ops.enqueue([{}] * total, queue=QUEUE)
    fleet = [
        workers(QUEUE, "tests.handlers:brief", f"drain-{n}", "--concurrency", "4") for n in range(2)
    ]
    wait_until(lambda: counts(sql_conn).get("Completed", 0) >= 100, what="the drain to start")

    paused = leasectl(db_dsn, "pause", QUEUE, "--reason", "deploy")
    assert paused.returncode == 0, paused.stderr
    committed = db_clock(sql_conn)  # after the pause's commit, on the database clock
    # Every worker has run a claim since, and has heard of the pause; the jobs in flight end.
    for w in fleet:
        wait_until(lambda w=w: claimed_since(sql_conn, w.worker_id, committed), what="a claim")
        wait_until(lambda w=w: "is paused" in w.text(), what=f"{w.worker_id} to log the pause")
    wait_until(lambda: "Processing" not in counts(sql_conn), what="the jobs in flight to end")
    # Enqueue goes on; the announcement wakes the workers, whose claims take nothing.
    enqueued = db_clock(sql_conn)
    [late] = store.ops.enqueue([{}], queue=QUEUE)
    for w in fleet:
        wait_until(lambda w=w: claimed_since(sql_conn, w.worker_id, enqueued), what="a claim")

    [(paused_at,)] = sql_conn.execute("SELECT paused_at FROM leasectl.queue_state").fetchall()
    started = last_start(sql_conn)
    assert started is not None and started <= committed, (started, paused_at, committed)
    stopped = counts(sql_conn)
    assert stopped.get("Pending", 0) > 0 and set(stopped) <= {"Completed", "Pending"}, stopped
    # The jobs in flight at the pause finished normally: every attempt completed.
    outcomes = sql_conn.execute(
        "SELECT outcome::text, count(*) FROM leasectl.job_attempts GROUP BY outcome"
    ).fetchall()
    assert outcomes == [("completed", stopped["Completed"])], outcomes

    resumed = leasectl(db_dsn, "resume", QUEUE)
    assert resumed.returncode == 0, resumed.stderr
    wait_until(
        lambda: counts(sql_conn) == {"Completed": total + 1},
        what="the drain to finish after the resume",
        timeout=60,
    )
    assert store.ops.get_job(late).attempts == 1
    for w in fleet:
        assert w.text().count("is paused") == 1, w.text()
        wait_until(lambda w=w: "was resumed" in w.text(), what=f"{w.worker_id} to log the resume")
    events = sql_conn.execute(
        "SELECT queue, action, reason, db_role = session_user FROM leasectl.queue_events "
        "ORDER BY id"
    ).fetchall()
    assert events == [(QUEUE, "pause", "deploy", True), (QUEUE, "resume", None, True)]


@pytest.mark.slow
def test_a_worker_started_on_a_paused_queue_waits_and_says_so_once(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    store.ops.pause(QUEUE, actor="operator:test", reason="\x1b[31mnot yet")
    w = workers(QUEUE, "tests.handlers:noop", "waiting")
    wait_until(lambda: "is paused" in w.text(), what="the worker to log the pause")
    assert "\\x1b[31mnot yet" in w.text() and "\x1b" not in w.text()
    enqueued = db_clock(sql_conn)  # (before: the claim the enqueue's NOTIFY wakes is after)
    [job_id] = store.ops.enqueue([{}], queue=QUEUE)
    wait_until(lambda: claimed_since(sql_conn, w.worker_id, enqueued), what="a claim")
    assert store.ops.get_job(job_id).attempts == 0

    resumed_at = db_clock(sql_conn)
    assert store.ops.resume(QUEUE, actor="operator:test") is not None
    wait_until(lambda: counts(sql_conn) == {"Completed": 1}, what="the job to run")
    [(started,)] = sql_conn.execute("SELECT started_at FROM leasectl.job_attempts").fetchall()
    assert started > resumed_at
    assert w.text().count("is paused") == 1, w.text()


def test_a_resume_is_announced_idle_workers_claim_at_once_not_at_their_next_poll(
    store: Stores, sql_conn: psycopg.Connection[Any], run_worker: Any, caplog: Any
) -> None:
    """A worker polling every 30 s, idle on a paused queue with a job waiting: the resume's
    NOTIFY wakes it, and the job runs within seconds."""
    caplog.set_level(logging.INFO, logger="leasectl.worker")
    store.ops.pause(QUEUE, actor="operator:test", reason="maintenance")
    ran = threading.Event()
    worker = run_worker(lambda ctx: ran.set(), queues=(QUEUE,), poll_interval=timedelta(seconds=30))
    assert worker.listening.wait(10)
    enqueued = db_clock(sql_conn)  # (before: the claim the enqueue's NOTIFY wakes is after)
    [job_id] = store.ops.enqueue([{}], queue=QUEUE)
    wait_until(lambda: claimed_since(sql_conn, worker.worker_id, enqueued), what="a claim")
    assert not ran.is_set() and store.ops.get_job(job_id).attempts == 0
    started = time.monotonic()
    assert store.ops.resume(QUEUE, actor="operator:test") is not None
    assert ran.wait(10), "the resume was not announced: the worker waited for its poll"
    assert time.monotonic() - started < 10
    wait_until(lambda: "was resumed" in caplog.text, what="the worker to log the resume")
    assert caplog.text.count("is paused") == 1, caplog.text


def test_inspect_says_a_due_job_of_a_paused_queue_waits_for_the_resume(
    db_dsn: str, store: Stores
) -> None:
    [job_id] = store.ops.enqueue([{"n": 1}], queue="payments")
    [other] = store.ops.enqueue([{"n": 2}], queue="emails")
    store.ops.pause("payments", actor="alice", reason="card processor down")
    human = leasectl(db_dsn, "inspect", str(job_id))
    assert human.returncode == 0, human.stderr
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", human.stdout).split())  # the panel's lines wrap
    assert "payments ⏸ paused since " in text and "by alice: card processor down" in text
    assert "(due, but its queue is paused: no worker claims it until" in text
    doc = json.loads(leasectl(db_dsn, "inspect", str(job_id), "--json").stdout)
    assert doc["queue_paused"]["queue"] == "payments"
    assert doc["queue_paused"]["paused_by"] == "alice"
    running = leasectl(db_dsn, "inspect", str(other))
    assert "(due)" in running.stdout and "paused" not in running.stdout
    other_doc = json.loads(leasectl(db_dsn, "inspect", str(other), "--json").stdout)
    assert other_doc["queue_paused"] is None
