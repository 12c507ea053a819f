"""The chaos soak's invariants are functions (bench/chaos/invariants.py): they hold on what real
workers running the soak's handler leave behind, and each one catches the violation it is
there for (a second business row, an execution without its own lease, a job not completed, a
completion nobody executed)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import bench.chaos_handlers
from bench.chaos import invariants
from bench.chaos.model import QUEUE, Tally
from tests.conftest import SCHEMA
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full

TTL = timedelta(seconds=5)
JOBS = 6


@pytest.fixture
def q(db_dsn: str) -> Iterator[invariants.Query]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:

        def query(text: str, params: Any = None) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql.SQL(text).format(s=sql.Identifier(SCHEMA)), params)
            return cur.fetchall() if cur.description is not None else []

        yield query


@pytest.fixture
def soaked(
    q: invariants.Query,
    db_dsn: str,
    store: Stores,
    run_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[invariants.Query]:
    """A few jobs as the soak makes them (some completed in their transaction, one failing its
    first attempt inside it), run to completion by a real worker and the soak's handler."""
    invariants.create_tables(q)
    monkeypatch.setenv("LEASECTL_DSN", db_dsn)
    monkeypatch.setenv("LEASECTL_SCHEMA", SCHEMA)
    monkeypatch.setattr(bench.chaos_handlers, "_RECORDER", None)
    # The recorder keeps a connection per handler thread for the process's life: closed here.
    opened: list[psycopg.Connection[Any]] = []
    connect = bench.chaos_handlers.Recorder._conn

    def tracked(self: bench.chaos_handlers.Recorder) -> psycopg.Connection[Any]:
        conn = connect(self)
        if conn not in opened:
            opened.append(conn)
        return conn

    monkeypatch.setattr(bench.chaos_handlers.Recorder, "_conn", tracked)
    payloads = [
        {"n": n, "ms": 1, "stubborn": False, "fail": n in (2, 3), "tx": n % 2 == 0}
        for n in range(JOBS)
    ]
    store.ops.enqueue(payloads, queue=QUEUE, max_attempts=5)
    run_worker(
        bench.chaos_handlers.handle,
        queues=(QUEUE,),
        concurrency=2,
        lease_ttl=TTL,
        retry_base=timedelta(milliseconds=10),
        retry_cap=timedelta(milliseconds=10),
    )
    wait_until(
        lambda: q("SELECT count(*) FROM {s}.jobs WHERE status = 'Completed'")[0][0] == JOBS,
        what="every job completed",
    )
    yield q
    for conn in opened:
        conn.close()


def failed(checks: list[Any]) -> list[str]:
    return [c.name for c in checks if not c.ok]


def test_every_invariant_holds_after_a_clean_run(soaked: invariants.Query) -> None:
    checks, found = invariants.database_checks(soaked, JOBS, TTL, Tally(), watcher_moved=0)
    assert failed(checks) == [], [c for c in checks if not c.ok]
    assert len(checks) == 14
    assert found["transaction_jobs"] == found["business_rows"] == JOBS // 2
    counts = invariants.counts(soaked)
    assert counts["attempts_by_outcome"] == {"completed": JOBS, "failed": 2}


def test_each_invariant_catches_its_violation(soaked: invariants.Query) -> None:
    q = soaked
    assert not invariants.all_completed(q, JOBS + 1).ok  # a job lost

    tx_job, attempt, worker = q(
        "SELECT id, attempts, lease_owner FROM {s}.jobs WHERE (payload->>'tx')::boolean LIMIT 1"
    )[0]
    assert invariants.business_rows(q)[0].ok
    q("INSERT INTO {s}.chaos_business VALUES (%s, %s, %s)", (tx_job, attempt, worker))
    business, rows, _ = invariants.business_rows(q)
    assert not business.ok and rows == JOBS // 2 + 1
    assert str(tx_job) in business.sample[0]

    assert invariants.executions_leased(q).ok
    q(
        "INSERT INTO {s}.chaos_executions VALUES (%s, %s, %s, 'a zombie', now(), now(), 'ok')",
        (uuid.uuid4(), tx_job, attempt),
    )
    assert not invariants.executions_leased(q).ok

    assert invariants.completions_executed(q).ok
    q("CREATE TABLE {s}.kept AS SELECT * FROM {s}.chaos_executions")
    q("DROP TRIGGER chaos_append_only ON {s}.chaos_executions")
    q("DELETE FROM {s}.chaos_executions WHERE job_id = %s AND outcome = 'ok'", (tx_job,))
    assert not invariants.completions_executed(q).ok


def test_the_watcher_count_allows_a_gap_only_for_passes_of_unknown_outcome() -> None:
    assert invariants.watcher_count(3, 3, 0).ok
    assert not invariants.watcher_count(4, 3, 0).ok
    assert invariants.watcher_count(4, 3, 1).ok
    assert not invariants.watcher_count(2, 3, 1).ok  # fewer events than moves: never
