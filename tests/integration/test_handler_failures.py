"""A handler's failures: any BaseException fails its attempt and the worker goes on (threads,
inline, async); KeyboardInterrupt stops the worker and hands the job back; every failed attempt
has one log line, its error text escaped; the recorded error names the public class."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from leasectl import AsyncJobContext, JobContext, PermanentError
from leasectl.core.models import JobStatus
from tests.integration.test_worker_processes import WorkerProc
from tests.stores import Stores
from tests.util import wait_until

WORKER_LOG = "leasectl.worker"
REPO_ROOT = Path(__file__).resolve().parents[2]


def exits(ctx: JobContext) -> None:
    if ctx.payload.get("exit"):
        raise SystemExit(3)


async def exits_async(ctx: AsyncJobContext) -> None:
    if ctx.payload.get("exit"):
        raise SystemExit(3)


def status(store: Stores, job_id: int) -> JobStatus:
    return store.ops.get_job(job_id).status


@pytest.mark.parametrize(
    ("handler", "concurrency"),
    [(exits, 1), (exits, 3), (exits_async, 3)],
    ids=["inline", "threads", "async"],
)
def test_a_handler_that_raises_system_exit_fails_its_attempt_and_the_worker_goes_on(
    store: Stores, run_worker: Any, handler: Any, concurrency: int
) -> None:
    worker = run_worker(handler, queues=("x",), concurrency=concurrency)
    [exited] = store.ops.enqueue([{"exit": True}], queue="x", max_attempts=1)
    wait_until(lambda: status(store, exited) == JobStatus.FAILED, what="the job to fail")
    assert store.ops.get_job(exited).last_error == "SystemExit: 3"
    others = store.ops.enqueue([{}] * 11, queue="x")  # every slot is still there
    for job_id in others:
        wait_until(lambda job_id=job_id: status(store, job_id) == JobStatus.COMPLETED)
    assert not worker.stopping.is_set()
    assert not worker.held()


@pytest.mark.parametrize("concurrency", [1, 3], ids=["inline", "threads"])
def test_a_handler_that_raises_keyboard_interrupt_stops_the_worker_and_hands_the_job_back(
    store: Stores, run_worker: Any, concurrency: int
) -> None:
    def interrupt(ctx: JobContext) -> None:
        raise KeyboardInterrupt

    worker = run_worker(interrupt, queues=("k",), concurrency=concurrency)
    [job_id] = store.ops.enqueue([{}], queue="k")
    assert worker.closed.wait(15), "the worker did not stop"
    job = store.ops.get_job(job_id)
    assert job.status == JobStatus.PENDING
    assert worker.stats.released == 1 and worker.stats.failed == 0


def test_an_async_handler_that_raises_keyboard_interrupt_stops_the_worker(
    store: Stores, run_worker: Any
) -> None:
    async def interrupt(ctx: AsyncJobContext) -> None:
        raise KeyboardInterrupt

    worker = run_worker(interrupt, queues=("k",), concurrency=2)
    [job_id] = store.ops.enqueue([{}], queue="k")
    assert worker.closed.wait(15), "the worker did not stop"
    assert status(store, job_id) == JobStatus.PENDING


def test_every_failed_attempt_is_one_log_line_with_its_error_escaped(
    store: Stores, run_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(ctx: JobContext) -> None:
        if ctx.payload.get("permanent"):
            raise PermanentError("no such invoice")
        raise ValueError("bad \x1b[31mred\x1b[0m\nsecond line")

    caplog.set_level(logging.INFO, logger=WORKER_LOG)
    run_worker(fail, queues=("q\x07",))
    [retried, permanent] = store.ops.enqueue(
        [{}, {"permanent": True}], queue="q\x07", max_attempts=3
    )
    # The log line follows the outcome's commit: wait for each line, not for the status.
    wait_until(lambda: len(lines(caplog, f"job {permanent} attempt 1 ")) == 1)
    wait_until(lambda: len(lines(caplog, f"job {retried} attempt 1 ")) == 1)
    [line] = lines(caplog, f"job {retried} attempt 1 ")
    assert "(queue 'q\\x07') failed: 'ValueError: bad \\x1b[31mred\\x1b[0m'; retrying in" in line
    assert "\x1b" not in line and "second line" not in line
    [line] = lines(caplog, f"job {permanent} attempt 1 ")
    assert "failed: 'leasectl.PermanentError: no such invoice'; now Failed" in line
    assert store.ops.get_job(permanent).last_error == "leasectl.PermanentError: no such invoice"


def test_a_lost_lease_is_one_log_line_naming_its_queue(
    store: Stores, run_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def hold(ctx: JobContext) -> None:
        ctx.cancelled.wait(30)
        release.set()

    caplog.set_level(logging.INFO, logger=WORKER_LOG)
    run_worker(hold, queues=("c",), concurrency=2, heartbeat_every=timedelta(milliseconds=300))
    [job_id] = store.ops.enqueue([{}], queue="c")
    wait_until(lambda: status(store, job_id) == JobStatus.PROCESSING)
    seen = store.ops.get_job(job_id).seen()
    assert store.ops.operator_cancel([seen], actor="oncall", reason="x").changed == (job_id,)
    assert release.wait(30)
    [line] = lines(caplog, f"job {job_id} attempt 1 ")
    assert "(queue 'c'): heartbeat rejected: the job was cancelled by an operator" in line


def lines(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if needle in r.getMessage()]


def test_a_handler_module_not_found_says_where_it_looked(tmp_path: Path) -> None:
    """From the wrong directory: the error names it, the head of sys.path, and PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO_ROOT)  # leasectl itself, not the handler's package
    args = ["--dsn", "host=db.invalid", "worker", "-q", "q", "--handler", "myapp.jobs:send"]
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert "cannot import handler module 'myapp.jobs': no such module" in line
    assert f"the working directory {str(tmp_path)!r}" in line
    assert "sys.path" in line and "PYTHONPATH" in line and "'myapp'" in line


def test_a_worker_process_whose_async_handler_exits_goes_on_and_stops_cleanly(
    store: Stores, db_dsn: str, tmp_path: Path
) -> None:
    """`leasectl worker` itself: its event loop survives the SystemExit, runs every other job,
    and a SIGTERM still ends it with status 0."""
    exited, *others = store.ops.enqueue([{"exit": True}] + [{}] * 11, queue="e", max_attempts=1)
    worker = WorkerProc(
        db_dsn, "e", "tests.handlers:exit_async", "exiter", tmp_path / "w.log", "--concurrency", "4"
    )
    try:
        for job_id in [exited, *others]:
            wait_until(lambda job_id=job_id: status(store, job_id).value in ("Completed", "Failed"))
        assert status(store, exited) == JobStatus.FAILED
        assert {status(store, job_id) for job_id in others} == {JobStatus.COMPLETED}
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.text()
        assert f"job {exited} attempt 1 (queue 'e') failed: 'SystemExit: 3'" in worker.text()
    finally:
        worker.close()
