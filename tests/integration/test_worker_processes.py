"""The worker runtime as real processes: SIGKILL, SIGSTOP zombies, SIGTERM, handler failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl.core.models import JobStatus
from leasectl.runtime.watcher import WatcherConfig, run_pass
from tests.stores import Stores
from tests.util import wait_until

pytestmark = [pytest.mark.full, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]


class WorkerProc:
    """A real `leasectl worker` process (the command users run); ready once its --ready-file
    exists. The DSN goes in $LEASECTL_DSN, as a deployment would pass it."""

    def __init__(self, dsn: str, queue: str, handler: str, worker_id: str, log: Path, *args: str):
        self.worker_id = worker_id
        self.log = log
        self.out = log.open("w")
        ready = log.with_suffix(".ready")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leasectl",
                "worker",
                "--queue",
                queue,
                "--handler",
                handler,
                "--worker-id",
                worker_id,
                "--poll-interval",
                "50ms",
                "--ready-file",
                str(ready),
                *args,
            ],
            cwd=ROOT,
            env={**os.environ, "LEASECTL_DSN": dsn, "LEASECTL_SCHEMA": "leasectl"},
            stdout=self.out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until(
            lambda: ready.exists() or self.proc.poll() is not None,
            what=f"{worker_id} to start",
        )
        assert self.proc.poll() is None, self.log.read_text()

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def text(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.out.close()


@pytest.fixture
def workers(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(queue: str, handler: str, worker_id: str, *args: str) -> WorkerProc:
        w = WorkerProc(db_dsn, queue, handler, worker_id, tmp_path / f"{worker_id}.log", *args)
        started.append(w)
        return w

    yield start
    for w in started:
        w.signal(signal.SIGCONT) if w.proc.poll() is None else None
        w.close()


def jobs_state(conn: psycopg.Connection[Any], ids: list[int]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, status::text, attempts, lease_owner, lease_until < now() "
        "FROM leasectl.jobs WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    ).fetchall()


def attempts(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT attempt, lease_owner, outcome::text FROM leasectl.job_attempts "
        "WHERE job_id = %s ORDER BY attempt",
        (job_id,),
    ).fetchall()


@pytest.mark.slow
def test_sigkilled_worker_jobs_are_requeued_by_the_watcher_and_finished_by_another(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    ids = store.ops.enqueue([{}] * 3, queue="k")
    victim = workers(
        "k",
        "tests.handlers:block",
        "victim",
        "--concurrency",
        "3",
        "--lease-ttl",
        "1s",
        "--heartbeat-every",
        "200ms",
    )
    wait_until(
        lambda: all(s[1] == "Processing" and s[3] == "victim" for s in jobs_state(sql_conn, ids)),
        what="the victim to hold all jobs",
    )
    victim.signal(signal.SIGKILL)
    victim.wait()
    wait_until(
        lambda: all(s[4] for s in jobs_state(sql_conn, ids) if s[1] == "Processing"),
        what="the leases to lapse",
    )
    result = run_pass(store.ops, WatcherConfig(actor="watcher@test"))
    assert sorted(j.id for j in result.jobs) == ids and result.requeued == 3
    assert all(s[1:3] == ("Pending", 1) for s in jobs_state(sql_conn, ids))
    assert all(s[2] == 1 for s in jobs_state(sql_conn, ids))
    workers("k", "tests.handlers:noop", "rescuer", "--concurrency", "2")
    wait_until(
        lambda: all(s[1] == "Completed" for s in jobs_state(sql_conn, ids)),
        what="the rescuer to complete the jobs",
    )
    for job_id in ids:
        assert store.ops.get_job(job_id).attempts == 2
        assert attempts(sql_conn, job_id) == [
            (1, "victim", "expired"),
            (2, "rescuer", "completed"),
        ]
    events = sql_conn.execute(
        "SELECT count(*) FROM leasectl.job_events "
        "WHERE actor = 'watcher@test' AND action = 'requeue'"
    ).fetchone()
    assert events == (3,)


@pytest.mark.slow
def test_zombie_worker_resumed_after_takeover_cannot_heartbeat_or_complete(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    [job_id] = store.ops.enqueue([{"seconds": 1.5}], queue="z")
    zombie = workers(
        "z",
        "tests.handlers:sleep_ignoring_cancel",
        "zombie",
        "--lease-ttl",
        "1s",
        "--heartbeat-every",
        "250ms",
    )
    wait_until(lambda: jobs_state(sql_conn, [job_id])[0][3] == "zombie", what="zombie to claim")
    zombie.signal(signal.SIGSTOP)
    wait_until(lambda: jobs_state(sql_conn, [job_id])[0][4], what="the zombie's lease to lapse")
    lease = store.work.claim_by_id(job_id, "rescuer", timedelta(seconds=30))
    assert lease is not None and lease.attempt == 2
    zombie.signal(signal.SIGCONT)
    wait_until(
        lambda: f"job {job_id} attempt 1" in zombie.text(),
        timeout=15,
        what="the zombie to notice it lost the lease",
    )
    # Whichever it noticed first: its own lease deadline passing while it was frozen, its
    # heartbeat being rejected, or its result being refused. Nothing it did reached the job.
    assert any(
        why in zombie.text()
        for why in ("no heartbeat got through", "heartbeat rejected", "refused the result")
    )
    state = jobs_state(sql_conn, [job_id])[0]
    assert state[1:4] == ("Processing", 2, "rescuer")
    # And had it tried, its token (owner zombie, attempt 1) is fenced off in the database.
    stale = replace(lease, owner="zombie", attempt=1)
    assert store.work.heartbeat([stale], timedelta(seconds=30)) == {}
    assert store.work.complete([stale]) == set()
    assert store.work.fail(stale, "late", retry_delay=timedelta(0)) is None
    assert store.work.release([stale]) == set()
    assert store.work.complete([lease]) == {job_id}
    assert attempts(sql_conn, job_id) == [(1, "zombie", "expired"), (2, "rescuer", "completed")]
    zombie.signal(signal.SIGTERM)
    assert zombie.wait() == 0


@pytest.mark.slow
def test_a_job_cancelled_under_a_running_worker_is_never_completed(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any], workers: Any, tmp_path: Path
) -> None:
    """A real worker holds a job (its handler waits on ctx.cancelled, then returns normally);
    an operator cancels it from another connection. The worker's next heartbeat is refused
    and its handler sees ctx.cancelled within a heartbeat interval; the success it then
    returns is never written: the job stays Cancelled, its attempt `cancelled`."""
    out = tmp_path / "job"
    out.mkdir()
    [job_id] = store.ops.enqueue([{"dir": str(out)}], queue="c")
    worker = workers(
        "c",
        "tests.handlers:succeed_once_cancelled",
        "holder",
        "--lease-ttl",
        "30s",
        "--heartbeat-every",
        "300ms",
    )
    wait_until(lambda: (out / "started").exists(), what="the handler to start")
    seen = store.ops.get_job(job_id).seen()
    assert (seen.status, seen.lease_owner) == (JobStatus.PROCESSING, "holder")
    with Stores.connect(db_dsn, "leasectl") as operator:
        result = operator.ops.operator_cancel([seen], actor="oncall", reason="bad deploy")
    assert result.changed == (job_id,)
    wait_until(
        lambda: (out / "cancelled").exists(),
        timeout=3,  # a heartbeat interval (300 ms), with room for a loaded machine
        what="the handler to see ctx.cancelled",
    )
    wait_until(
        lambda: "cancelled by an operator" in worker.text(),
        what="the worker to log why it lost the job",
    )
    # The worker has done with the job (it logged the loss after the handler returned or the
    # heartbeat was refused); nothing it wrote reached the job or its attempt.
    assert jobs_state(sql_conn, [job_id])[0][1:4] == ("Cancelled", 1, "holder")
    assert attempts(sql_conn, job_id) == [(1, "holder", "cancelled")]
    completed = sql_conn.execute(
        "SELECT count(*) FROM leasectl.jobs WHERE status = 'Completed'"
    ).fetchone()
    assert completed == (0,)
    events = sql_conn.execute(
        "SELECT action, actor, reason FROM leasectl.job_events WHERE job_id = %s", (job_id,)
    ).fetchall()
    assert events == [("cancel", "oncall", "bad deploy")]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert jobs_state(sql_conn, [job_id])[0][1] == "Cancelled"


@pytest.mark.slow
def test_sigterm_releases_unfinished_jobs_and_marks_the_worker_stopped(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    ids = store.ops.enqueue([{}] * 2, queue="t")
    w = workers(
        "t",
        "tests.handlers:sleep_ignoring_cancel",
        "graceful",
        "--concurrency",
        "2",
        "--grace",
        "300ms",
    )
    wait_until(lambda: all(s[3] == "graceful" for s in jobs_state(sql_conn, ids)))
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    for job_id in ids:
        job = store.ops.get_job(job_id)
        assert (job.status, job.attempts, job.lease_until) == (JobStatus.PENDING, 1, None)
        assert attempts(sql_conn, job_id) == [(1, "graceful", "released")]
    stopped = sql_conn.execute(
        "SELECT stopped_at IS NOT NULL FROM leasectl.workers WHERE worker_id = 'graceful'"
    ).fetchone()
    assert stopped == (True,)


@pytest.mark.slow
def test_sigterm_lets_a_short_handler_finish_within_the_grace_period(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    [job_id] = store.ops.enqueue([{"seconds": 0.5}], queue="g")
    w = workers("g", "tests.handlers:sleep_ignoring_cancel", "patient", "--grace", "20s")
    wait_until(lambda: jobs_state(sql_conn, [job_id])[0][3] == "patient")
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert store.ops.get_job(job_id).status == JobStatus.COMPLETED


@pytest.mark.slow
def test_handler_exceptions_become_failures_with_backoff(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    [retry_id] = store.ops.enqueue([{}], queue="f", max_attempts=3)
    [perm_id] = store.ops.enqueue([{}], queue="p", max_attempts=3)
    # A long backoff keeps the second attempt away while the first failure is looked at.
    workers("f", "tests.handlers:boom", "failing", "--retry-base", "30s")
    workers("p", "tests.handlers:permanent", "permanent")
    wait_until(lambda: store.ops.get_job(retry_id).last_error is not None)
    job = store.ops.get_job(retry_id)
    assert job.status == JobStatus.PENDING and "RuntimeError: boom on attempt 1" in (
        job.last_error or ""
    )
    assert job.run_at > job.updated_at, "retry is delayed by the backoff"
    wait_until(lambda: store.ops.get_job(perm_id).status == JobStatus.FAILED)
    assert store.ops.get_job(perm_id).attempts == 1


def test_a_failed_attempt_keeps_the_handlers_traceback_bounded(
    store: Stores, sql_conn: psycopg.Connection[Any], workers: Any
) -> None:
    """The worker stores the handler's traceback with the failed attempt, in the statement that
    records the failure: the handler's frames and the exception; a 100,000-character message is
    cut in the middle, keeping the frames and the end of the message, and says so; a NUL in a
    message (which PostgreSQL's text cannot hold) does not stop the failure being written."""
    huge = "start of the message " + "x" * 100_000 + " end of the message"
    messages = {"short": "total does not match", "huge": huge, "nul": "before<NUL>after"}
    ids = {
        name: store.ops.enqueue([{"message": m}], queue="t", max_attempts=1)[0]
        for name, m in messages.items()
    }
    workers("t", "tests.handlers:raise_message", "tracing")
    for job_id in ids.values():
        wait_until(lambda job_id=job_id: store.ops.get_job(job_id).status == JobStatus.FAILED)
    detail = {
        name: sql_conn.execute(
            "SELECT error, error_detail FROM leasectl.job_attempts WHERE job_id = %s",
            (job_id,),
        ).fetchone()
        for name, job_id in ids.items()
    }
    error, short = detail["short"]
    assert error == "ValueError: total does not match"
    assert short.startswith("Traceback (most recent call last):\n")
    for frame in ("in raise_message", "in _parse_invoice", "in _check_totals"):
        assert frame in short, frame
    assert short.endswith("\nValueError: total does not match")

    _, cut = detail["huge"]
    assert len(cut) <= 16_384 + 120
    assert cut.startswith("Traceback (most recent call last):\n")
    assert "in _check_totals" in cut and "ValueError: start of the message xxx" in cut
    assert cut.endswith("xxx end of the message")
    [note] = [line for line in cut.splitlines() if line.startswith("… (")]
    assert "characters cut here" in note
    assert "x" * 12_000 in cut and "x" * 16_384 not in cut

    error, nul = detail["nul"]
    assert error == "ValueError: before\\x00after"
    assert nul.endswith("ValueError: before\\x00after")
    [attempt] = store.ops.inspect(ids["short"]).attempts
    assert attempt.error_detail == short


def test_a_ready_file_in_a_missing_directory_is_a_usage_error(db_dsn: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable, "-m", "leasectl", "worker", "--queue", "q",
            "--handler", "tests.handlers:noop", "--ready-file", str(tmp_path / "no" / "ready"),
        ],
        cwd=ROOT,
        env={**os.environ, "LEASECTL_DSN": db_dsn, "LEASECTL_SCHEMA": "leasectl"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--ready-file: no directory" in proc.stderr
