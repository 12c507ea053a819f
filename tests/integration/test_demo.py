"""`leasectl demo` end to end, with real worker processes: the headless run and its summary, the
console path, the demo SIGKILLed mid-run, and the schemas it refuses to touch."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from leasectl.core.errors import LeasectlError
from leasectl.db.embedded import EmbeddedServer
from leasectl.demo import DemoSummary, FleetConfig, run_demo
from leasectl.demo.fleet import FLEET, HANDLER, RUN_ENV
from leasectl.demo.target import external_target
from tests.stores import Stores
from tests.util import wait_until

pytestmark = [pytest.mark.full, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
WORKER_MARK = HANDLER.encode()  # demo workers are `leasectl worker --handler` this

# Short leases and a chaos period that fits a stall and a SIGKILL into a few seconds.
FAST = FleetConfig(
    lease_ttl=timedelta(seconds=3),
    heartbeat_every=timedelta(seconds=0.5),
    watch_interval=timedelta(seconds=1),
    chaos_every=timedelta(seconds=5),
    restart_delay=timedelta(seconds=0.5),
    drain_timeout=timedelta(seconds=20),  # a bound, not a wait: drains take 3-10s
    progress_every=timedelta(seconds=2),
    seed=7,
)


def demo_workers(run_id: str) -> list[tuple[int, int]]:
    """(pid, ppid) of live demo worker processes whose environment carries this run's token."""
    found = []
    token = f"{RUN_ENV}={run_id}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if WORKER_MARK in argv and token in environ and stat[0] not in ("Z", "X"):
            found.append((int(name), int(stat[1])))
    return found


def my_children() -> list[int]:
    """Demo workers of any run whose parent is this test process."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if WORKER_MARK in argv and int(stat[1]) == os.getpid() and stat[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def new_run_id() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def statuses(dsn: str, schema: str) -> dict[str, int]:
    query = sql.SQL("SELECT status::text, count(*) FROM {}.jobs GROUP BY 1").format(
        sql.Identifier(schema)
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {s: n for s, n in conn.execute(query).fetchall()}


def assert_sound(summary: DemoSummary) -> None:
    assert summary.lost == 0, summary.render()
    assert summary.ok, summary.render()
    assert summary.workers_left == 0
    assert summary.workers_started == summary.workers_stopped >= len(FLEET)
    assert summary.enqueued == (
        summary.completed + summary.failed + summary.stuck + summary.pending + summary.processing
    )


@pytest.mark.slow
def test_headless_demo_runs_the_chaos_and_loses_nothing(empty_db_dsn: str, tmp_path: Path) -> None:
    run_id = new_run_id()
    out = io.StringIO()
    summary = run_demo(
        dsn=empty_db_dsn,
        schema="leasectl",
        fresh=True,
        headless=True,
        duration=timedelta(seconds=8),
        log=out,
        fleet=FAST,
        run_id=run_id,
        log_dir=tmp_path / "logs",
    )
    text = out.getvalue()
    print(summary.render(), text, sep="\n")  # shown when an assertion fails
    # An external DSN: the demo keeps to a schema of its own, and says so.
    assert summary.schema == "leasectl_demo" and summary.server == "external"
    assert "using schema 'leasectl_demo'" in text
    assert_sound(summary)
    assert summary.drained and not summary.interrupted and summary.unfinished == 0
    assert summary.enqueued > 20 and summary.completed > 10
    # The chaos happened, and the watcher and the retries repaired it.
    assert summary.worker_kills >= 1 and summary.worker_restarts >= 1
    assert summary.worker_stalls >= 1 and summary.worker_crashes == 0
    assert summary.workers_started == len(FLEET) + summary.worker_restarts
    assert summary.requeued_by_watcher >= 1
    assert summary.leases_expired >= summary.requeued_by_watcher
    assert summary.retried >= 2  # the poison job alone fails twice before its quarantine
    assert summary.quarantined >= 1 and summary.stuck >= 1
    for line in ("SIGSTOP reports-1", "SIGKILL payments-2", "restarted payments-2", "fenced"):
        assert line in text, text
    # The database agrees with the summary.
    counts = statuses(empty_db_dsn, "leasectl_demo")
    assert sum(counts.values()) == summary.enqueued
    assert counts.get("Completed", 0) == summary.completed
    assert counts.get("Processing", 0) == 0
    # No worker process survives the demo.
    assert demo_workers(run_id) == [] and my_children() == []
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        running = conn.execute(
            "SELECT count(*) FROM leasectl_demo.workers WHERE stopped_at IS NULL"
        ).fetchone()
    assert running == (summary.worker_kills,), "only the SIGKILLed workers never said goodbye"


@pytest.mark.slow
def test_console_runs_in_the_foreground_while_the_fleet_works(empty_db_dsn: str) -> None:
    run_id = new_run_id()
    seen: dict[str, Any] = {}

    def console(
        dsn: str, schema: str, *, refresh: timedelta, queue: str | None, read_only: bool
    ) -> None:
        seen.update(schema=schema, refresh=refresh, queue=queue, read_only=read_only)
        with Stores.connect(dsn, schema) as store:
            wait_until(
                lambda: sum(q.processing for q in store.ops.status().queues) > 0,
                what="the fleet to lease jobs behind the console",
            )
        seen["workers"] = len(demo_workers(run_id))
        threading.Event().wait(30)  # an idle console: the duration closes it with a SIGINT

    summary = run_demo(
        dsn=empty_db_dsn,
        schema="leasectl",
        fresh=False,
        headless=False,
        duration=timedelta(seconds=4),
        refresh=timedelta(milliseconds=500),
        log=io.StringIO(),
        fleet=FAST,
        run_id=run_id,
        console=console,
    )
    assert seen == {
        "schema": "leasectl_demo",
        "refresh": timedelta(milliseconds=500),
        "queue": None,
        "read_only": False,
        "workers": len(FLEET),
    }
    assert not summary.interrupted and not summary.drained
    assert summary.lost == 0 and summary.workers_left == 0
    assert demo_workers(run_id) == [] and my_children() == []


KILLED_DEMO = """
import sys
from datetime import timedelta
from pathlib import Path
from leasectl.demo import FleetConfig, run_demo
run_demo(dsn=None, schema="leasectl", fresh=True, headless=True, duration=None,
         fleet=FleetConfig(lease_ttl=timedelta(seconds=3), heartbeat_every=timedelta(seconds=1),
                           chaos_every=timedelta(seconds=600)),
         run_id=sys.argv[1], log_dir=Path(sys.argv[2]))
"""


def leases(dsn: str) -> list[tuple[int, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT id, lease_owner FROM leasectl.jobs WHERE status = 'Processing' ORDER BY id"
        ).fetchall()


@pytest.mark.slow
def test_a_sigkilled_demo_takes_its_workers_along_and_the_next_run_recovers(
    embedded_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first, second = new_run_id(), new_run_id()
    monkeypatch.setenv("LEASECTL_EMBEDDED_DIR", str(embedded_dir))
    server = EmbeddedServer(embedded_dir)
    with (tmp_path / "first.log").open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "-c", KILLED_DEMO, first, str(tmp_path / "first")],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: len(demo_workers(first)) == len(FLEET) or demo.poll() is not None,
            timeout=60,
            what="the first demo's fleet",
        )
        assert demo.poll() is None, (tmp_path / "first.log").read_text()
        dsn = server.dsn("leasectl_demo")
        held = wait_until(lambda: leases(dsn), what="the fleet to hold leases")
        demo.send_signal(signal.SIGKILL)
        assert demo.wait(10) == -signal.SIGKILL
        # PR_SET_PDEATHSIG: the workers die with the demo, even though they have sessions of
        # their own; the server, a daemon, outlives it.
        wait_until(lambda: not demo_workers(first), timeout=10, what="the orphans to die")
        assert server.is_running()
        assert (embedded_dir / "demo.owner").exists()

        summary = run_demo(
            dsn=None,
            schema="leasectl",
            fresh=False,
            headless=True,
            duration=timedelta(seconds=3),
            log=io.StringIO(),
            fleet=dataclasses.replace(FAST, drain_timeout=timedelta(seconds=3)),
            run_id=second,
        )
        assert summary.server == "adopted"  # left running by a dead demo: this run stops it
        assert_sound(summary)
        assert not server.is_running()
        assert not (embedded_dir / "demo.owner").exists()
        assert demo_workers(second) == [] and my_children() == []

        server.start()  # and the first run's leases were recovered, not left behind
        assert leases(dsn) == []
        with psycopg.connect(dsn, autocommit=True) as conn:
            states = conn.execute(
                "SELECT status::text FROM leasectl.jobs WHERE id = ANY(%s)",
                ([job_id for job_id, _ in held],),
            ).fetchall()
        assert {s for (s,) in states} <= {"Completed", "Pending", "Failed", "Stuck"}
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(10)
        for pid, _ in demo_workers(first) + demo_workers(second):
            os.kill(pid, signal.SIGKILL)


def test_the_demo_keeps_to_schemas_it_created(empty_db_dsn: str) -> None:
    notes: list[str] = []
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA mine")
        conn.execute("CREATE TABLE mine.precious (v int)")
    for fresh in (False, True):
        with (
            pytest.raises(LeasectlError, match="was not created by leasectl demo"),
            external_target(empty_db_dsn, "mine", fresh, notes.append),
        ):
            pass
    with external_target(empty_db_dsn, "leasectl", True, notes.append) as target:
        assert target.schema == "leasectl_demo"
        # One demo at a time per schema.
        with (
            pytest.raises(LeasectlError, match="another leasectl demo is running"),
            external_target(empty_db_dsn, "leasectl_demo", False, notes.append),
        ):
            pass
    # Its own, labelled schema it may drop and recreate.
    with external_target(empty_db_dsn, "leasectl_demo", True, notes.append) as target:
        assert statuses(target.dsn, target.schema) == {}
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM mine.precious").fetchone() == (0,)
    assert any("dropping the demo's schema 'leasectl_demo'" in n for n in notes)
