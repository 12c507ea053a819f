"""No role may freeze, blind or crash what others depend on: what a worker or an
operator writes is bounded by the schema (migration 15), the readers bound what they read of
rows from before it, and a worker fails alone a job whose attempts it cannot count."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors

from leasectl.console.source import DatabaseSource
from leasectl.console.view import ConsoleFilter
from leasectl.db import sql as queries
from tests.exporter import exporter, scrape
from tests.integration.test_cli import _env, assert_one_line_error, cli
from tests.integration.test_privileges import (  # noqa: F401 (fixtures)
    Roles,
    granted,
    roles,
)
from tests.stores import Stores
from tests.util import wait_until

HOSTILE_WORKER = (
    "INSERT INTO leasectl.workers (worker_id, hostname, pid, queues, lease_ttl, heartbeat_every)"
    " VALUES ('{id}', 'h', 1, '{{q}}', '{interval}', '{interval}')"
)
INT_MAX = 2**31 - 1
TTL = timedelta(seconds=30)


def _pending(db_dsn: str, n: int, queue: str = "q") -> list[int]:
    with Stores.connect(db_dsn, "leasectl") as store:
        return store.ops.enqueue([{"i": i} for i in range(n)], queue=queue)


@pytest.mark.parametrize(
    "statement",
    [
        HOSTILE_WORKER.format(id="w1", interval="100000000 years"),
        HOSTILE_WORKER.format(id="w2", interval="-100000000 years"),
        "INSERT INTO leasectl.workers (worker_id, hostname, pid, queues, lease_ttl, "
        "heartbeat_every) VALUES ('w3', repeat('h', 401), 1, '{q}', '30s', '10s')",
        "UPDATE leasectl.jobs SET lease_owner = repeat('o', 401)",
        "UPDATE leasectl.jobs SET last_error = repeat('e', 4001)",
        "UPDATE leasectl.job_attempts SET error = repeat('e', 4001)",
    ],
)
def test_the_schema_refuses_unbounded_values_from_a_worker_role(
    granted: Roles,  # noqa: F811
    db_dsn: str,
    statement: str,
) -> None:
    [job_id] = _pending(db_dsn, 1)
    with Stores.connect(db_dsn, "leasectl") as store:
        [lease] = store.work.claim("q", "w", TTL)
        assert lease.job_id == job_id
    with psycopg.connect(granted.dsn("worker"), autocommit=True) as conn:
        with pytest.raises(errors.CheckViolation, match="bounded_values"):
            conn.execute(statement)


def test_the_schema_takes_values_at_its_bounds(granted: Roles, db_dsn: str) -> None:  # noqa: F811
    _pending(db_dsn, 1)
    with psycopg.connect(granted.dsn("worker"), autocommit=True) as conn:
        conn.execute(HOSTILE_WORKER.format(id="w", interval="3650 days"))
        conn.execute(
            "UPDATE leasectl.jobs "
            "SET lease_owner = repeat('é', 400), last_error = repeat('é', 4000)"
        )


@pytest.fixture
def hostile_worker_row(db_dsn: str) -> Iterator[None]:
    """A workers row from before migration 15 (its constraint is NOT VALID: such rows stay),
    beside a Processing job so that the readers weigh leases at risk."""
    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.enqueue([{}], queue="q")
        store.work.claim("q", "evil", TTL)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE leasectl.workers DROP CONSTRAINT workers_bounded_values")
        conn.execute(HOSTILE_WORKER.format(id="evil", interval="100000000 years"))
        conn.execute(HOSTILE_WORKER.format(id="evil2", interval="-100000000 years"))
        conn.execute(
            "UPDATE leasectl.workers SET queues = ARRAY[repeat('Q', 100000)] "
            "WHERE worker_id = 'evil2'"
        )
        conn.execute(
            "ALTER TABLE leasectl.workers ADD CONSTRAINT workers_bounded_values "
            "CHECK (lease_ttl <= interval '3650 days') NOT VALID"
        )
    yield


def test_status_and_its_check_read_a_hostile_workers_row(
    db_dsn: str, hostile_worker_row: None
) -> None:
    plain = cli("status", dsn=db_dsn)
    assert plain.returncode == 0, plain.stderr
    assert "3650d/3650d" in plain.stdout
    assert len(plain.stdout) < 5000
    check = cli("status", "--check", dsn=db_dsn)
    assert check.returncode in (0, 3), check.stderr
    doc = json.loads(cli("status", "--json", dsn=db_dsn).stdout)
    ttls = sorted(o["lease_ttl_s"] for o in doc["owners"])
    assert ttls[0] == 0 and ttls[-1] == 3650 * 86400


def test_the_console_refreshes_beside_a_hostile_workers_row(
    db_dsn: str, hostile_worker_row: None
) -> None:
    source = DatabaseSource.connect(db_dsn, "leasectl")
    try:
        snap = source.snapshot(ConsoleFilter(), 50)
        assert snap.counts.processing == 1
        [held] = snap.processing
        assert held.lease_owner == "evil"
    finally:
        source.close()


def test_the_exporter_scrapes_beside_a_hostile_workers_row(
    db_dsn: str, hostile_worker_row: None
) -> None:
    with exporter(db_dsn) as (_, url):
        metrics = scrape(url)
        assert metrics.value("leasectl_up") == 1


def test_a_worker_fails_alone_a_job_whose_attempts_it_cannot_count(
    granted: Roles,  # noqa: F811
    db_dsn: str,
) -> None:
    """A worker role sets a Pending job's attempts to the integer's maximum: each claim's +1
    failed, and every `leasectl worker` of the queue exited 2 at its first claim. Now that job
    is failed with the reason and the others are handled."""
    ids = _pending(db_dsn, 5)
    bad = ids[2]
    with psycopg.connect(granted.dsn("worker"), autocommit=True) as conn:
        conn.execute("UPDATE leasectl.jobs SET attempts = %s WHERE id = %s", (INT_MAX, bad))
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leasectl",
            "worker",
            "-q",
            "q",
            "--handler",
            "tests.handlers:noop",
            "--concurrency",
            "8",
        ],
        env=_env(granted.dsn("worker")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def states() -> list[tuple[Any, ...]]:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            return conn.execute(
                "SELECT id, status::text, attempts, last_error FROM leasectl.jobs ORDER BY id"
            ).fetchall()

    try:
        wait_until(
            lambda: all(s[1] in ("Completed", "Failed") for s in states()) or worker.poll(),
            timeout=60,
            what="the queue drained",
        )
        assert worker.poll() is None, worker.communicate()[1]
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    rows = {s[0]: s[1:] for s in states()}
    assert rows[bad] == (
        "Failed",
        INT_MAX,
        f"attempts is {INT_MAX}, the most its integer holds: no attempt can be counted; "
        "failed unrun",
    )
    assert all(rows[i][0] == "Completed" for i in ids if i != bad)
    assert f"failed jobs {bad}: attempts at the integer's maximum" in err


def test_inspect_prints_the_beginning_of_megabytes_of_text_and_says_how_to_see_all(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """A 19 MB lease_owner made inspect take 292 s and print 26 MB; a 2 MB last_error printed
    2.4 MB. (Rows from before migration 15: its constraint is dropped to write them.)"""
    sql_conn.execute("ALTER TABLE leasectl.jobs DROP CONSTRAINT jobs_bounded_values")
    big, small = (
        sql_conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, lease_owner, last_error) "
            "VALUES ('q', 'Failed', repeat('O', %s), repeat('E', %s)) RETURNING id",
            sizes,
        ).fetchone()[0]  # type: ignore[index]
        for sizes in ((19_000_000, 2_000_000), (10, 20_000))
    )
    started = time.monotonic()
    shown = cli("inspect", str(big), dsn=db_dsn)
    assert time.monotonic() - started < 20
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout) < 50_000
    words = " ".join(shown.stdout.split())  # (the note is folded to the terminal's width)
    assert "lease owner (first 4,096 characters of 19,000,000 bytes)" in words
    assert "last error (first 4,096 characters of 2,000,000 bytes)" in words
    assert f"leasectl inspect {big} --full (or --json)" in words
    full = cli("inspect", str(small), "--full", dsn=db_dsn)
    assert full.returncode == 0, full.stderr
    assert full.stdout.count("E") >= 20_000 and "cut:" not in full.stdout
    doc = json.loads(cli("inspect", str(small), "--json", dsn=db_dsn).stdout)
    assert doc["job"]["last_error"] == "E" * 20_000


def test_worker_id_longer_than_the_bound_is_refused(db_dsn: str) -> None:
    proc = cli(
        "worker",
        "-q",
        "q",
        "--handler",
        "tests.handlers:noop",
        "--worker-id",
        "w" * 401,
        dsn=db_dsn,
    )
    assert_one_line_error(proc, 2, "--worker-id: at most 400 characters, got 401")


def test_list_pages_through_big_payloads_without_casting_them(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """`list` over 16 MB payloads cast each to text (a third of a second each) and answered
    "the filter had to scan" at its timeout; a payload too big to cast now shows its size."""
    sql_conn.execute(
        "WITH b AS (SELECT string_agg(md5(g::text), '') AS s FROM generate_series(1, 500000) g) "
        "INSERT INTO leasectl.jobs (queue, payload, status, finished_at) "
        "SELECT 'big', jsonb_build_object('blob', b.s), 'Completed', now() "
        "FROM b, generate_series(1, 6)"
    )
    [small] = _pending(db_dsn, 1, queue="big")
    shown = cli("list", "-q", "big", "--timeout", "1s", "--json", dsn=db_dsn)
    assert shown.returncode == 0, shown.stderr
    jobs = json.loads(shown.stdout)["jobs"]
    assert len(jobs) == 7
    assert jobs[0]["id"] == small and jobs[0]["payload_text"] == '{"i": 0}'
    assert {(j["payload_text"], j["payload_bytes"] > 16_000_000) for j in jobs[1:]} == {
        (None, True)
    }
    table = cli("list", "-q", "big", "--timeout", "1s", dsn=db_dsn)
    assert table.returncode == 0, table.stderr


def test_status_shows_the_first_paused_queues_and_how_many_more(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """20,000 paused queues made `status` print 20,000 lines."""
    sql_conn.execute(
        "INSERT INTO leasectl.queue_state (queue, paused_by, reason) "
        "SELECT 'q' || lpad(i::text, 5, '0'), 'op', 'why' FROM generate_series(1, 1200) AS i"
    )
    plain = cli("status", dsn=db_dsn)
    assert plain.returncode == 0, plain.stderr
    assert len(plain.stdout.splitlines()) < 100
    assert "q00020" in plain.stdout and "q00021" not in plain.stdout
    assert "…and 1,180 more paused queues (all: status --json)" in plain.stdout
    doc = json.loads(cli("status", "--json", dsn=db_dsn).stdout)
    assert len(doc["paused"]) == 1000 and doc["paused_total"] == 1200
    one = json.loads(cli("status", "--json", "--queue", "q00500", dsn=db_dsn).stdout)
    assert [p["queue"] for p in one["paused"]] == ["q00500"] and one["paused_total"] == 1


def test_the_migration_cuts_text_that_others_update_and_records_it(empty_db_dsn: str) -> None:
    """A schema at version 14 with a job and an attempt holding megabytes a role wrote: after
    `init` both are cut to migration 15's bounds (or every statement that updates them again
    would fail its constraint), the job with a `bounded` event holding the lengths; a workers
    row stays as it was (its constraint NOT VALID: the readers cope)."""
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute(queries.get("migrations_table_create").render("leasectl"))
        for migration in queries.migrations()[:14]:
            for statement in migration.enum_values_for("leasectl"):  # (committed first)
                conn.execute(statement)
            conn.execute(migration.render("leasectl"))
            conn.execute(
                queries.get("migration_record").render("leasectl"),
                {"version": migration.version, "name": migration.name},
            )
        [bad] = conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until, "
            "last_error) VALUES ('q', 'Processing', 1, repeat('o', 100000), now(), "
            "repeat('é', 5000)) RETURNING id"
        ).fetchone()  # type: ignore[misc]
        [good] = conn.execute(
            "INSERT INTO leasectl.jobs (queue, last_error) VALUES ('q', 'e') RETURNING id"
        ).fetchone()  # type: ignore[misc]
        conn.execute(
            "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, error) "
            "VALUES (%s, 1, repeat('o', 100000), repeat('e', 5000))",
            (bad,),
        )
        conn.execute(HOSTILE_WORKER.format(id="evil", interval="100000000 years"))
    with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
        assert 15 in store.db.migrate()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        jobs = conn.execute(
            "SELECT id, char_length(lease_owner), char_length(last_error) FROM leasectl.jobs "
            "ORDER BY id"
        ).fetchall()
        attempt = conn.execute(
            "SELECT char_length(lease_owner), char_length(error) FROM leasectl.job_attempts"
        ).fetchall()
        events = conn.execute(
            "SELECT job_id, actor, action, before, after FROM leasectl.job_events"
        ).fetchall()
        kept = conn.execute("SELECT lease_ttl::text FROM leasectl.workers").fetchall()
    assert jobs == [(bad, 400, 4000), (good, None, 1)]
    assert attempt == [(400, 4000)]
    assert events == [
        (
            bad,
            "leasectl init",
            "bounded",
            {"lease_owner_chars": 100000, "last_error_chars": 5000},
            {"lease_owner_chars": 400, "last_error_chars": 4000},
        )
    ]
    assert kept == [("100000000 years",)]
