"""A multi-host DSN (``host=a,b port=p1,p2 target_session_attrs=read-write``) over a primary
and its synchronous standby: the worker, ``status`` and the data layer follow a failover.

These start their own replicated pair even when LEASECTL_TEST_DSN is set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from leasectl.console.source import DatabaseSource
from leasectl.console.view import ConsoleFilter
from leasectl.core.errors import ConnectionFailed
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.auth import read_password
from leasectl.db.embedded.replication import (
    kill_primary,
    multi_host_dsn,
    promote,
    replicated_pair,
    wait_caught_up,
)
from leasectl.runtime.watcher import Watcher, WatcherConfig
from tests.stores import Stores
from tests.util import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.full, pytest.mark.serial]

SCHEMA = "leasectl"
REPO_ROOT = Path(__file__).resolve().parents[2]

Pair = tuple[EmbeddedServer, EmbeddedServer]
T = TypeVar("T")


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A migrated synchronous pair."""
    with replicated_pair(synchronous=True) as (primary, standby):
        with Stores.connect(primary.dsn(), SCHEMA, check_schema=False) as store:
            store.db.migrate()
        wait_caught_up(primary, standby)
        yield primary, standby


def leasectl(dsn: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "LEASECTL_DSN": dsn, "LEASECTL_SCHEMA": SCHEMA},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_worker(dsn: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [
                sys.executable, "-m", "leasectl", "worker",
                "--queue", "q", "--handler", "tests.handlers:noop", "--lease-ttl", "3s",
                "--heartbeat-every", "500ms", "--poll-interval", "100ms", "--grace", "1s",
                *args,
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "LEASECTL_DSN": dsn, "LEASECTL_SCHEMA": SCHEMA},
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def completed(dsn: str) -> int:
    """Completed jobs, or -1 while no primary answers."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute(
                "SELECT count(*) FROM leasectl.jobs WHERE status = 'Completed'"
            ).fetchone()
    except psycopg.OperationalError:
        return -1
    assert row is not None
    return int(row[0])


def enqueue(dsn: str, count: int) -> list[int]:
    """Enqueue on whichever server is the primary, retried while there is none."""

    def attempt() -> list[int] | None:
        try:
            with Stores.connect(dsn, SCHEMA) as store:
                return store.ops.enqueue([{"n": n} for n in range(count)], queue="q")
        except ConnectionFailed:
            return None

    return wait_until(attempt, timeout=60, interval=0.2, what="an enqueue on the primary")


def eventually(fn: Callable[[], T], what: str) -> T:
    """fn's result once it stops raising ConnectionFailed (while no primary answers)."""

    def attempt() -> tuple[T] | None:
        try:
            return (fn(),)
        except ConnectionFailed:
            return None

    return wait_until(attempt, timeout=60, interval=0.1, what=what)[0]


def status_totals(dsn: str) -> dict[str, int]:
    result = leasectl(dsn, "status", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    totals: dict[str, int] = document["totals"]
    return totals


def test_a_worker_on_a_multi_host_dsn_keeps_completing_jobs_after_a_failover(
    pair: Pair, tmp_path: Path
) -> None:
    primary, standby = pair
    dsn = multi_host_dsn(primary, standby)
    enqueue(dsn, 20)
    log = tmp_path / "worker.log"
    ready = tmp_path / "ready"
    proc = cli_worker(dsn, log, "--ready-file", str(ready))
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, what="the worker to start")
        wait_until(lambda: completed(dsn) == 20, timeout=30, what="the first jobs to complete")
        assert status_totals(dsn)["completed_recent"] == 20

        kill_primary(primary)
        promote(standby)
        enqueue(dsn, 20)
        wait_until(
            lambda: completed(standby.dsn()) == 40 or proc.poll() is not None,
            timeout=60,
            what="the jobs enqueued after the failover to complete",
        )
        assert proc.poll() is None, log.read_text()
        assert status_totals(dsn)["completed_recent"] == 40
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_status_on_a_multi_host_dsn_names_every_server_and_no_password(pair: Pair) -> None:
    primary, standby = pair
    password = read_password(primary.passfile)  # a standby's password is its primary's
    assert password is not None
    dsn = multi_host_dsn(primary, standby) + f" password={password}"
    assert status_totals(dsn)["completed_recent"] == 0
    kill_primary(primary)
    failed = leasectl(dsn, "status")
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1, failed.stderr
    assert f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}/postgres" in lines[0]
    assert password not in failed.stderr + failed.stdout
    promote(standby)
    assert status_totals(dsn)["completed_recent"] == 0


def test_a_read_only_server_is_a_lost_connection_and_its_connection_is_dropped(
    pair: Pair,
) -> None:
    """A standby reached without target_session_attrs refuses the write as read-only
    (SQLSTATE 25006): the caller sees ConnectionFailed, and the pool replaces the connection
    rather than handing the same standby session out again."""
    standby = pair[1]
    with Stores.connect(standby.dsn(), SCHEMA, max_size=1) as store:
        with store.db.connection() as conn:
            before = conn.info.backend_pid
        with pytest.raises(ConnectionFailed, match="read-only"):
            store.ops.enqueue([{}], queue="q")
        with store.db.connection() as conn:
            replaced = conn.info.backend_pid
        assert replaced != before
        # The worker's hot path borrows the pool's one connection and keeps it between
        # round trips; refused as read-only, it is dropped too.
        with pytest.raises(ConnectionFailed, match="read-only"):
            store.work.claim("q", "w-standby", ttl=timedelta(seconds=5))
        with store.db.connection() as conn:
            assert conn.info.backend_pid != replaced


def test_the_watcher_and_the_console_follow_a_failover(pair: Pair) -> None:
    """Both keep their pools across the failover and find the promoted primary by themselves:
    the console refreshes again, and the watcher requeues a lease that lapses afterwards."""
    primary, standby = pair
    dsn = multi_host_dsn(primary, standby)
    store = Stores.connect(dsn, SCHEMA, pool_timeout=2)
    watcher_store = Stores.connect(dsn, SCHEMA, pool_timeout=2)
    watcher = Watcher(
        watcher_store.ops,
        WatcherConfig(interval=timedelta(milliseconds=200), actor="watcher@failover"),
    )
    thread = threading.Thread(target=watcher.run, daemon=True)
    source = DatabaseSource.connect(dsn, SCHEMA)
    thread.start()
    try:
        store.ops.enqueue([{}] * 3, queue="q")
        assert source.snapshot(ConsoleFilter(), 10).counts.pending == 3

        kill_primary(primary)
        promote(standby)

        snap = eventually(lambda: source.snapshot(ConsoleFilter(), 10), "a console refresh")
        assert snap.counts.pending == 3
        [ghost] = eventually(lambda: store.ops.enqueue([{}], queue="ghosts"), "an enqueue")
        store.work.claim("ghosts", "ghost-owner", timedelta(seconds=30))
        with psycopg.connect(standby.dsn(), autocommit=True) as conn:
            conn.execute(
                "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
                (ghost,),
            )
        wait_until(lambda: watcher.moved >= 1, timeout=60, what="the watcher to requeue it")
        with psycopg.connect(standby.dsn(), autocommit=True) as conn:
            row = conn.execute("SELECT status::text FROM leasectl.jobs WHERE id = %s", (ghost,))
            assert row.fetchone() == ("Pending",)
    finally:
        watcher.stop()
        thread.join(30)
        source.close()
        watcher_store.close()
        store.close()
