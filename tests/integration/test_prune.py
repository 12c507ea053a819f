"""Retention: `prune` deletes old finished history in batches and leaves everything else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import psycopg

from leasectl.runtime import retention
from tests.stores import Stores


def _age_finished(conn: psycopg.Connection[Any], ids: list[int], days: int) -> None:
    conn.execute(
        "UPDATE leasectl.jobs SET finished_at = now() - make_interval(days => %s) "
        "WHERE id = ANY(%s)",
        (days, ids),
    )


def _finish(store: Stores, queue: str, n: int) -> list[int]:
    ids = store.ops.enqueue([{}] * n, queue=queue)
    leases = store.work.claim(queue, "w", timedelta(minutes=1), n)
    store.work.complete(leases)
    return ids


def test_prune_deletes_old_finished_jobs_with_attempts_in_batches(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    old = _finish(store, "q", 7)
    recent = _finish(store, "q", 2)
    _age_finished(sql_conn, old, 10)
    live = store.ops.enqueue([{}], queue="q")
    sql_conn.execute(
        "INSERT INTO leasectl.job_events (job_id, actor, action) VALUES (%s, 'op', 'requeue')",
        (old[0],),
    )
    dry = retention.prune(store.ops, older_than=timedelta(days=7), dry_run=True)
    assert (dry.jobs, dry.dry_run) == (7, True)
    result = retention.prune(store.ops, older_than=timedelta(days=7), batch=3)
    assert (result.jobs, result.batches, result.events) == (7, 3, 0)
    remaining = sql_conn.execute("SELECT id FROM leasectl.jobs ORDER BY id").fetchall()
    assert [r[0] for r in remaining] == recent + live
    attempts = sql_conn.execute(
        "SELECT count(*) FROM leasectl.job_attempts WHERE job_id = ANY(%s)", (old,)
    ).fetchone()
    assert attempts == (0,)
    events = sql_conn.execute("SELECT count(*) FROM leasectl.job_events").fetchone()
    assert events == (1,), "the audit trail is kept by default"


def test_prune_cli_can_drop_events_and_prints_json(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    old = _finish(store, "q", 3)
    _age_finished(sql_conn, old, 30)
    sql_conn.execute(
        "INSERT INTO leasectl.job_events (job_id, actor, action) VALUES (%s, 'op', 'requeue')",
        (old[0],),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "leasectl",
            "prune",
            "--older-than",
            "7d",
            "--drop-events",
            "--json",
        ],
        env={**os.environ, "LEASECTL_DSN": db_dsn},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == {
        "dry_run": False,
        "jobs": 3,
        "events": 1,
        "batches": 1,
        "older_than_s": 604800.0,
        "history_rows": 0,
        "schedule_slots": 0,
    }
    bad = subprocess.run(
        [sys.executable, "-m", "leasectl", "prune", "--older-than", "soon"],
        env={**os.environ, "LEASECTL_DSN": db_dsn},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "invalid --older-than" in bad.stderr
