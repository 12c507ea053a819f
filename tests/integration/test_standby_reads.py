"""The console and `status` reading from a real hot standby (`--read-dsn`): what is sent there,
the one read clock (the standby's replay time while it is behind), and actions on the primary.

A streaming pair of embedded servers (db/embedded/replication.py), started for this module even
when LEASECTL_TEST_DSN is set: a standby needs a primary whose files we own. Each test migrates
a schema of its own on the primary.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from textual.pilot import Pilot
from textual.widgets import Static

from leasectl.console.app import ConsoleApp
from leasectl.console.source import DatabaseSource
from leasectl.console.view import ConsoleFilter, DbClock
from leasectl.core.actions import OperatorAction
from leasectl.core.errors import ConnectionFailed
from leasectl.core.models import JobStatus, SeenState, Snapshot
from leasectl.core.readlag import countdowns_stale
from leasectl.db import grants
from leasectl.db.connection import Database
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.replication import replicated_pair, wait_caught_up
from tests.stores import Stores
from tests.util import wait_until, wait_until_pilot

pytestmark = [pytest.mark.slow, pytest.mark.full]

Pair = tuple[EmbeddedServer, EmbeddedServer]
OWNER = "worker-standby-test"
VIEWER_PASSWORD = "viewer-Zq9"
# What a statement that changes a job, a lease or a queue would contain (comments removed):
# writes, row locks, and the audited operator functions (migrations 6, 7, 9).
WRITES = re.compile(
    r"\b(INSERT|UPDATE|DELETE|MERGE|TRUNCATE)\b|jobs_operator_|requeue_expired|queue_pause|"
    r"queue_resume|cannot execute",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with replicated_pair(synchronous=False) as servers:
        yield servers


def one(dsn: str, query: str, params: list[Any] | None = None) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query.encode(), params).fetchone()
        assert row is not None
        return row[0]


@pytest.fixture
def schema(pair: Pair) -> Iterator[str]:
    """A migrated schema of this test's own on the primary, replayed on the standby."""
    primary, standby = pair
    name = f"t_{uuid.uuid4().hex[:10]}"
    with Stores.connect(primary.dsn(), name, check_schema=False) as s:
        s.db.migrate()
    wait_caught_up(primary, standby, timeout=20)
    yield name
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(psycopg.sql.Identifier(name)))


@pytest.fixture
def resumes(pair: Pair) -> Iterator[EmbeddedServer]:
    """The standby, whose replay is resumed after the test whatever happens (a test pauses it)."""
    _, standby = pair
    try:
        yield standby
    finally:
        one(standby.dsn(), "SELECT pg_wal_replay_resume()::text")


def pause_replay(standby: EmbeddedServer) -> None:
    one(standby.dsn(), "SELECT pg_wal_replay_pause()::text")
    wait_until(
        lambda: one(standby.dsn(), "SELECT pg_get_wal_replay_pause_state()") == "paused",
        what="the standby's replay to pause",
    )


def cli(*args: str, schema: str) -> subprocess.CompletedProcess[str]:
    drop = {"LEASECTL_DSN", "DATABASE_URL", "LEASECTL_SCHEMA", "LEASECTL_READ_DSN", "COLUMNS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run(
        [sys.executable, "-m", "leasectl", "--schema", schema, *args],
        env={**env, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def logged_statements(log: Path, offset: int) -> list[str]:
    """The standby log's lines written after ``offset``, SQL comments removed."""
    with open(log, encoding="utf-8", errors="replace") as f:
        f.seek(offset)
        return [line.split("--", 1)[0] for line in f.read().splitlines()]


def lease_left(snap: Snapshot, job_id: int) -> timedelta:
    (job,) = [j for j in snap.processing if j.id == job_id]
    assert job.lease_until is not None
    return job.lease_until - snap.db_now


def test_reads_go_to_the_standby_and_send_it_nothing_that_writes(pair: Pair, schema: str) -> None:
    """Every statement the console's poll and `status --read-dsn` send the standby is logged
    there (log_statement=all on the read sessions only): none writes, while the console's
    action goes to the primary and changes the job."""
    primary, standby = pair
    with Stores.connect(primary.dsn(), schema) as s:
        ids = s.ops.enqueue([{}, {}, {}], queue="q")
        (lease,) = s.work.claim("q", OWNER, timedelta(minutes=5))
    wait_caught_up(primary, standby, timeout=20)
    read_dsn = make_conninfo(standby.dsn(), options="-c log_statement=all")
    offset = standby.log_path.stat().st_size

    source = DatabaseSource.connect(primary.dsn(), schema, read_dsn=read_dsn)
    try:
        assert source.read_where is not None and str(standby.port) in source.read_where
        snap = source.snapshot(ConsoleFilter(), 100)
        assert [j.id for j in snap.processing] == [lease.job_id]
        assert snap.read_lag is not None and snap.read_lag >= timedelta(0)
        waiting = [j for j in snap.pending if j.id in ids]
        assert len(waiting) == 2
        # An action on what the standby showed: sent to the primary, guarded as ever.
        job = waiting[0]
        seen = SeenState(job.id, job.status, job.attempts, job.lease_owner)
        result = source.act(OperatorAction.MARK_STUCK, [seen], "seen on the standby")
        assert result.changed == (job.id,)
        wait_caught_up(primary, standby, timeout=20)
        after = source.snapshot(ConsoleFilter(), 100)
        assert [j.id for j in after.stuck] == [job.id]
    finally:
        source.close()

    status = cli("status", "--json", "--read-dsn", read_dsn, schema=schema)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["read_lag_s"] is not None and doc["totals"]["processing"] == 1

    lines = logged_statements(standby.log_path, offset)
    sent = "\n".join(lines)
    # The log holds the reads (read_clock, the console's counts), so it would hold any write.
    assert "pg_last_xact_replay_timestamp" in sent and "'leasectl.clock'" in sent
    assert "default_transaction_read_only" in sent  # the read-only session
    assert [line for line in lines if WRITES.search(line)] == []
    # The action reached the primary only.
    with Stores.connect(primary.dsn(), schema) as s:
        assert s.ops.inspect(job.id, payload_chars=0).job.status is JobStatus.STUCK


def test_countdowns_use_the_standbys_replay_time_not_the_clock(
    pair: Pair, schema: str, resumes: EmbeddedServer
) -> None:
    """Replay paused: the read clock is the last replayed commit's time, and stays there while
    the standby's own clock moves on; a lease that lapsed by the standby's clock (and the
    primary's) is still live as of the data read; behind by more than the owner's lease TTL,
    the countdowns are said to be stale."""
    primary, standby = pair
    with Stores.connect(primary.dsn(), schema) as s:
        s.ops.enqueue([{}], queue="q")
        s.work.worker_register(
            OWNER,
            hostname="h",
            pid=1,
            queues=["q"],
            lease_ttl=timedelta(seconds=1),
            heartbeat_every=timedelta(milliseconds=300),
        )
        (lease,) = s.work.claim("q", OWNER, timedelta(seconds=5))
    wait_caught_up(primary, standby, timeout=20)
    pause_replay(standby)
    with Stores.connect(primary.dsn(), schema) as s:
        (later,) = s.ops.enqueue([{}], queue="q")  # received, never replayed while paused
    replayed_at: datetime = one(standby.dsn(), "SELECT pg_last_xact_replay_timestamp()")

    source = DatabaseSource.connect(primary.dsn(), schema, read_dsn=standby.dsn())
    try:
        first = source.snapshot(ConsoleFilter(), 100)
        assert first.db_now == replayed_at
        left = lease_left(first, lease.job_id)
        until = first.db_now + left
        assert timedelta(0) < left <= timedelta(seconds=5)
        assert later not in {j.id for j in first.pending}
        # The standby's (and the primary's) clock passes the lease's end...
        wait_until(
            lambda: one(standby.dsn(), "SELECT now()") > until + timedelta(seconds=1),
            timeout=30,
            what="the standby's clock to pass the lease's end",
        )
        second = source.snapshot(ConsoleFilter(), 100)
        # ...but not the read clock: the same instant, the same countdown, still live.
        assert second.db_now == first.db_now
        assert lease_left(second, lease.job_id) == left
        assert second.counts.expired == 0 and second.counts.processing == 1
        assert not second.stuck
        assert second.read_lag is not None and first.read_lag is not None
        assert second.read_lag > first.read_lag + timedelta(seconds=1)
        # Between refreshes the console's clock does not move either.
        clock = DbClock.of(second, 100.0)
        assert clock.frozen and clock.at(160.0) == second.db_now
        # Behind by more than the owner's 1 s lease TTL: stale.
        assert countdowns_stale(second.read_lag, second.owners)
        # The primary's own view: that lease has lapsed.
        with Stores.connect(primary.dsn(), schema) as s:
            live = s.panels.snapshot(None, 100)
        assert live.read_lag is None and live.counts.expired == 1

        text = cli("status", "--read-dsn", standby.dsn(), schema=schema)
        assert text.returncode == 0, text.stderr
        assert "⚠ countdowns stale: standby" in text.stdout, text.stdout
        doc = json.loads(cli("status", "--json", "--read-dsn", standby.dsn(), schema=schema).stdout)
        assert doc["countdowns_stale"] is True and doc["totals"]["expired"] == 0
        assert datetime.fromisoformat(doc["db_now"]) == replayed_at

        # Replay resumed: the standby catches up, its clock is live again.
        one(standby.dsn(), "SELECT pg_wal_replay_resume()::text")
        wait_caught_up(primary, standby, timeout=20)
        third = wait_until(
            lambda: (
                (snap := source.snapshot(ConsoleFilter(), 100)).read_lag == timedelta(0) and snap
            ),
            what="a caught-up read",
        )
        assert third.db_now > second.db_now
        assert later in {j.id for j in third.pending}
        assert third.counts.expired == 1
        assert not DbClock.of(third, 0.0).frozen
    finally:
        source.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_an_unreachable_read_server_leaves_the_actions_working(pair: Pair, schema: str) -> None:
    primary, _ = pair
    with Stores.connect(primary.dsn(), schema) as s:
        (job_id,) = s.ops.enqueue([{}], queue="q")
    nowhere = make_conninfo("", host="127.0.0.1", port=free_port(), user="postgres")
    source = DatabaseSource.connect(primary.dsn(), schema, read_dsn=nowhere)
    try:
        with pytest.raises(ConnectionFailed):
            source.snapshot(ConsoleFilter(), 100)
        assert source.can_update()
        seen = SeenState(job_id, JobStatus.PENDING, 0, None)
        assert source.act(OperatorAction.MARK_STUCK, [seen], "the standby is down").changed == (
            job_id,
        )
    finally:
        source.close()
    # `status --read-dsn` has nothing else to read from: one line, non-zero exit.
    proc = cli("status", "--read-dsn", nowhere, schema=schema)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_the_console_header_says_the_countdowns_are_stale_then_caught_up(
    pair: Pair, schema: str, resumes: EmbeddedServer
) -> None:
    """The console on a standby whose replay is paused: the header names the read server and
    says how far behind it is, the countdowns' clock stays at its replay time while the app
    ticks; resumed, the header says it caught up."""
    primary, standby = pair
    with Stores.connect(primary.dsn(), schema) as s:
        s.work.worker_register(
            OWNER,
            hostname="h",
            pid=1,
            queues=["q"],
            lease_ttl=timedelta(seconds=1),
            heartbeat_every=timedelta(milliseconds=300),
        )
        s.ops.enqueue([{}], queue="q")
        s.work.claim("q", OWNER, timedelta(minutes=5))
    wait_caught_up(primary, standby, timeout=20)
    pause_replay(standby)
    source = DatabaseSource.connect(primary.dsn(), schema, read_dsn=standby.dsn())
    app = ConsoleApp(source, refresh=timedelta(milliseconds=300))

    def header() -> str:
        left = str(app.main.query_one("#status-left", Static).render())
        return left + " | " + str(app.main.query_one("#status-right", Static).render())

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_until_pilot(
            pilot, lambda: "countdowns stale: standby" in header(), "the stale warning", 30
        )
        assert source.read_where is not None and f"reads {source.read_where}" in header()
        assert app.snapshot is not None
        frozen = app.snapshot.db_now
        await pilot.pause(1.2)  # the app ticks and polls meanwhile
        assert app.db_now() == frozen
        await asyncio.to_thread(one, standby.dsn(), "SELECT pg_wal_replay_resume()::text")
        await wait_until_pilot(
            pilot, lambda: "standby caught up" in header(), "the standby to catch up", 30
        )
        assert "countdowns stale" not in header()

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await scenario(pilot)

    try:
        asyncio.run(run())
    finally:
        source.close()


def test_a_viewer_role_reads_a_standby_that_is_behind(
    pair: Pair, schema: str, resumes: EmbeddedServer
) -> None:
    """The role a standby console runs as (`leasectl grant --viewer`) may call everything the
    read clock reads (replay state and time), on a standby that is behind."""
    primary, standby = pair
    role = f"lc_viewer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(VIEWER_PASSWORD)
            )
        )
    try:
        with Stores.connect(primary.dsn(), schema) as s:
            grants.apply(s.db, [grants.Grant(grants.Kind.VIEWER, role)])
            s.ops.enqueue([{}], queue="q")
        wait_caught_up(primary, standby, timeout=20)
        pause_replay(standby)
        with Stores.connect(primary.dsn(), schema) as s:
            s.ops.enqueue([{}], queue="q")  # not replayed: the standby is behind
        viewer = make_conninfo(standby.dsn(), user=role, password=VIEWER_PASSWORD)
        proc = cli("status", "--json", "--read-dsn", viewer, schema=schema)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["read_lag_s"] > 0 and doc["totals"]["pending"] == 1
        source = DatabaseSource.connect(primary.dsn(), schema, read_dsn=viewer)
        try:
            snap = source.snapshot(ConsoleFilter(), 100)
        finally:
            source.close()
        assert snap.read_lag is not None and snap.read_lag > timedelta(0)
        assert len(snap.pending) == 1
    finally:
        one(standby.dsn(), "SELECT pg_wal_replay_resume()::text")
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            ident = psycopg.sql.Identifier(role)
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(ident))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(ident))


def test_the_read_session_cannot_write_even_on_a_primary(pair: Pair, schema: str) -> None:
    """A read DSN that names a primary by mistake still gets a read-only session."""
    primary, _ = pair
    db = Database.connect(primary.dsn(), schema, read_only=True)
    try:
        with db.connection() as conn:
            assert conn.execute(b"SHOW default_transaction_read_only").fetchone() == ("on",)
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute(b"CREATE TABLE written_through_the_read_session (v int)")
    finally:
        db.close()
