"""Operator actions never wait on a lock another session holds: a held job
is skipped with that reason, a statement that cannot skip fails in one line, and a Ctrl-C while
one runs leaves nothing to apply later."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from leasectl.core.models import JobStatus, SkipCode
from leasectl.db.connection import LOCK_TIMEOUT_MS
from leasectl.db.held import RETRY_BUDGET_S
from tests.integration.test_cli import _env, assert_one_line_error, cli, snapshot
from tests.stores import Stores
from tests.util import wait_until


@pytest.fixture
def holder(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session (a worker's, a handler's transaction) that can hold rows locked."""
    with psycopg.connect(db_dsn) as conn:
        yield conn
        conn.rollback()


def statuses(db_dsn: str) -> dict[int, str]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id, status::text FROM leasectl.jobs ORDER BY id").fetchall()
    return dict(rows)


def test_cancel_skips_a_job_another_session_holds_and_changes_nothing(
    db_dsn: str, store: Stores, holder: psycopg.Connection[Any]
) -> None:
    (job,) = store.ops.enqueue([{}], queue="q")
    holder.execute("SELECT 1 FROM leasectl.jobs WHERE id = %s FOR UPDATE", (job,))
    before = snapshot(db_dsn)
    started = time.monotonic()
    proc = cli("cancel", str(job), "--reason", "x", dsn=db_dsn, timeout=30)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert "held by another session" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 10, took  # a CLI's start-up, and one lock timeout
    assert snapshot(db_dsn) == before
    holder.rollback()
    assert statuses(db_dsn) == {job: "Pending"}


def test_a_batch_changes_every_job_but_the_held_one_without_waiting_on_it(
    store: Stores, holder: psycopg.Connection[Any]
) -> None:
    ids = store.ops.enqueue([{}] * 40, queue="q")
    held = ids[17]
    holder.execute("SELECT 1 FROM leasectl.jobs WHERE id = %s FOR UPDATE", (held,))
    started = time.monotonic()
    result = store.ops.operator_cancel(store.ops.seen_now(ids), actor="t", reason="x")
    took = time.monotonic() - started
    assert sorted(result.changed) == sorted(set(ids) - {held})
    assert [(s.id, s.code) for s in result.skipped] == [(held, SkipCode.HELD)]
    # One lock timeout per halving (40 jobs: 6), bounded by the retry budget.
    assert took < RETRY_BUDGET_S + 2 * LOCK_TIMEOUT_MS / 1000 + 2, took
    holder.rollback()
    assert store.ops.get_job(held).status == JobStatus.PENDING


def test_pause_fails_in_one_line_when_another_session_holds_the_queues_lock(
    db_dsn: str, store: Stores, holder: psycopg.Connection[Any]
) -> None:
    """Pause cannot skip: its lock wait ends as a one-line error, nothing changed."""
    holder.execute("LOCK TABLE leasectl.queue_state IN ACCESS EXCLUSIVE MODE")
    before_proc = time.monotonic()
    proc = cli("pause", "q", "--reason", "x", dsn=db_dsn, timeout=30)
    assert time.monotonic() - before_proc < 10
    assert_one_line_error(proc, 1, "another session holds a lock", "nothing changed")
    holder.rollback()
    assert store.ops.paused() == []


def test_sigint_during_an_action_on_a_filter_leaves_the_held_job_unchanged(
    db_dsn: str, store: Stores, holder: psycopg.Connection[Any]
) -> None:
    """The filter form finishes its batch in flight on the first Ctrl-C: that batch no longer
    waits on the held job, so the CLI ends promptly, and nothing applies once the lock goes."""
    (job,) = store.ops.enqueue([{}], queue="q")
    holder.execute("SELECT 1 FROM leasectl.jobs WHERE id = %s FOR UPDATE", (job,))
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "cancel", "--queue", "q", "--reason", "x"],
        env=_env(db_dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(db_dsn, autocommit=True) as watch:
            wait_until(
                lambda: (
                    proc.poll() is not None
                    or watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND datname = current_database()"
                    ).fetchone()
                    == (1,)
                ),
                what="the CLI waiting on the held job (or done)",
            )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err
    holder.rollback()
    store.close()  # (its own sessions are "leasectl" too)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # No session of the CLI is left to apply anything after it ended.
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'leasectl%'"
                    " AND datname = current_database()"
                ).fetchone()
                == (0,)
            ),
            what="the CLI's sessions gone",
        )
    assert statuses(db_dsn) == {job: "Pending"}, (out, err)
