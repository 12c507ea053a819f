"""What the demo tells a person: that it reuses an earlier demo's jobs (and how old they are),
progress on the terminal until the console opens, and no closing line naming a file it
deleted."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from leasectl.db.embedded.binaries import server_version
from leasectl.demo import run_demo
from leasectl.demo.target import embedded_target, external_target
from tests.integration.test_demo import FAST, new_run_id
from tests.stores import Stores

pytestmark = [pytest.mark.full, pytest.mark.serial]


def test_a_reused_demo_schema_says_so_with_its_age(empty_db_dsn: str) -> None:
    notes: list[str] = []
    with external_target(empty_db_dsn, "leasectl", False, notes.append) as target:
        with Stores.connect(target.dsn, target.schema) as store:
            store.ops.enqueue([{}], queue="q")
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO leasectl_demo.workers (worker_id, hostname, pid, queues, lease_ttl, "
                "heartbeat_every, started_at, last_seen_at, stopped_at) VALUES ('w', 'h', 1, "
                "'{q}', '30s', '10s', now() - interval '20 minutes', "
                "now() - interval '14 minutes', now() - interval '13 minutes')"
            )
    assert not any("reusing" in n for n in notes)  # a new schema: nothing to reuse
    with external_target(empty_db_dsn, "leasectl", False, notes.append):
        pass
    [line] = [n for n in notes if "reusing" in n]
    assert line.startswith("reusing the demo's schema 'leasectl_demo' from 13m")
    assert line.endswith("ago (use --fresh for a clean one)")
    with external_target(empty_db_dsn, "leasectl", True, notes.append):
        pass
    assert len([n for n in notes if "reusing" in n]) == 1  # --fresh: a clean one


def test_with_the_console_progress_shows_until_it_opens_and_demo_log_is_kept(
    empty_db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    inside: list[str] = []

    def console(
        dsn: str, schema: str, *, refresh: timedelta, queue: str | None, read_only: bool
    ) -> None:
        inside.append(capsys.readouterr().err)  # what the terminal showed before
        threading.Event().wait(30)  # closed by the duration's SIGINT

    summary = run_demo(
        dsn=empty_db_dsn,
        schema="leasectl",
        fresh=False,
        headless=False,
        duration=timedelta(seconds=3),
        fleet=FAST,
        run_id=new_run_id(),
        console=console,
    )
    after = capsys.readouterr().err
    assert "fleet up:" in inside[0], inside[0]  # progress, before the console
    assert "done:" in after
    assert "console open" not in inside[0] + after  # (demo.log only: the console's screen)
    assert summary.ok and summary.log_dir is not None
    demo_log = Path(summary.log_dir) / "demo.log"
    assert demo_log.is_file() and "console open" in demo_log.read_text()
    assert f"fleet events in {demo_log}" in inside[0] + after
    assert [p.name for p in Path(summary.log_dir).iterdir()] == ["demo.log"]


def test_the_embedded_demo_names_its_server_and_says_when_it_reuses_its_database(
    embedded_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASECTL_EMBEDDED_DIR", str(embedded_dir))
    notes: list[str] = []
    with embedded_target("leasectl", False, notes.append) as target:
        with Stores.connect(target.dsn, target.schema) as store:
            store.ops.enqueue([{}], queue="q")
    assert notes[0] == f"starting PostgreSQL {server_version()} in {embedded_dir} …"
    assert not any("reusing the demo database" in n for n in notes)
    with embedded_target("leasectl", False, notes.append):
        pass
    assert "reusing the demo database (use --fresh for a clean one)" in notes
