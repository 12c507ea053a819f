"""`init`: idempotent, safe to run concurrently, and the schema it leaves is the designed one."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from leasectl.core.errors import SchemaMissing
from leasectl.db import sql as queries
from tests.stores import Stores


def _schema_shape(conn: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    tables = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (schema,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s ORDER BY 1", (schema,)
    ).fetchall()
    versions = conn.execute(
        f'SELECT version FROM "{schema}".schema_migrations ORDER BY 1'
    ).fetchall()
    return {"tables": tables, "indexes": indexes, "versions": versions}


def test_migrate_twice_is_a_no_op(empty_db_dsn: str) -> None:
    with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
        latest = [m.version for m in queries.migrations()]
        assert store.db.migrate() == latest
        with psycopg.connect(empty_db_dsn) as conn:
            first = _schema_shape(conn, "leasectl")
        assert store.db.migrate() == []
        with psycopg.connect(empty_db_dsn) as conn:
            assert _schema_shape(conn, "leasectl") == first
    assert [t[0] for t in first["tables"]] == [
        "counter_deltas",
        "counter_totals",
        "job_attempts",
        "job_events",
        "jobs",
        "queue_backlog",
        "queue_backlog_minutes",
        "queue_events",
        "queue_history",
        "queue_history_deltas",
        "queue_limit_shards",
        "queue_limits",
        "queue_state",
        "schedule_events",
        "schedule_slots",
        "schedules",
        "schema_migrations",
        "workers",
    ]
    assert ("jobs_claimable_idx",) in first["indexes"]
    assert ("jobs_processing_idx",) in first["indexes"]


def test_concurrent_migrations_leave_one_schema(empty_db_dsn: str) -> None:
    stores = [Stores.connect(empty_db_dsn, "leasectl", check_schema=False) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    applied: list[list[int]] = []
    errors: list[BaseException] = []

    def run(store: Stores) -> None:
        try:
            barrier.wait()
            applied.append(store.db.migrate())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    latest = [m.version for m in queries.migrations()]
    assert sorted(applied) == [[], [], [], latest]
    with psycopg.connect(empty_db_dsn) as conn:
        assert _schema_shape(conn, "leasectl")["versions"] == [(v,) for v in latest]


def test_custom_schema_name_with_quotes_is_an_identifier(empty_db_dsn: str) -> None:
    odd = 'Ops "queue"; drop'
    with Stores.connect(empty_db_dsn, odd, check_schema=False) as store:
        store.db.migrate()
        store.db.check_schema()
        [job_id] = store.ops.enqueue([{"x": 1}])
        assert store.ops.get_job(job_id).payload == {"x": 1}


def test_missing_schema_is_reported_with_the_fix(empty_db_dsn: str) -> None:
    with pytest.raises(SchemaMissing, match="run `leasectl init`"):
        Stores.connect(empty_db_dsn, "leasectl")


def _attempts_of(conn: psycopg.Connection[Any], schema: str, ids: list[int]) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.job_attempts WHERE job_id = ANY(%s)").format(
            sql.Identifier(schema)
        ),
        (ids,),
    ).fetchone()
    return int(row[0]) if row else -1


def test_deleting_or_truncating_jobs_empties_their_attempts(empty_db_dsn: str) -> None:
    """The attempts go with their jobs (the statement triggers of migration 3 that replaced the
    foreign key's cascade), on DELETE and on TRUNCATE, also in a schema whose name needs
    quoting, and only theirs."""
    odd = 'Ops "queue"; $$ drop'
    with Stores.connect(empty_db_dsn, odd, check_schema=False) as store:
        store.db.migrate()
        ids = store.ops.enqueue([{"n": n} for n in range(3)])
        for _ in ids:
            assert store.work.claim("default", "worker-a", timedelta(seconds=30))
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert _attempts_of(conn, odd, ids) == 3
        conn.execute(
            sql.SQL("DELETE FROM {}.jobs WHERE id = ANY(%s)").format(sql.Identifier(odd)),
            (ids[:2],),
        )
        assert _attempts_of(conn, odd, ids[:2]) == 0
        assert _attempts_of(conn, odd, ids[2:]) == 1
        conn.execute(sql.SQL("TRUNCATE {}.jobs").format(sql.Identifier(odd)))
        assert _attempts_of(conn, odd, ids) == 0
        conn.execute(  # both in one command, as before (the attempts are still open then)
            sql.SQL("TRUNCATE {0}.jobs, {0}.job_attempts").format(sql.Identifier(odd))
        )


def test_upgrade_from_version_2_keeps_history_and_its_cascade(empty_db_dsn: str) -> None:
    """A schema made by migrations 1-2 (attempts under a foreign key) upgrades with its history
    intact, and deleting a job still deletes its attempts."""
    schema = "leasectl"
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(queries.get("migrations_table_create").render(schema))
            for migration in queries.migrations()[:2]:
                conn.execute(migration.render(schema))
                conn.execute(
                    queries.get("migration_record").render(schema),
                    {"version": migration.version, "name": migration.name},
                )
    with Stores.connect(empty_db_dsn, schema, check_schema=False) as store:
        # Two jobs as that version's enqueue wrote them (today's writes migration 12's key).
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "INSERT INTO leasectl.jobs (payload) VALUES ('{\"n\": 1}'), ('{\"n\": 2}') "
                    "RETURNING id"
                ).fetchall()
            ]
        # Two leases as a worker of that version took them (today's claim needs migration 7's
        # queue_state).
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE leasectl.jobs SET status = 'Processing', lease_owner = 'worker-a', "
                "lease_until = now() + interval '30 seconds', attempts = 1"
            )
            conn.execute(
                "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner) "
                "SELECT id, 1, 'worker-a' FROM leasectl.jobs"
            )
        assert store.db.migrate() == [m.version for m in queries.migrations()][2:]
        store.db.check_schema()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert _attempts_of(conn, schema, ids) == 2
        conn.execute("DELETE FROM leasectl.jobs WHERE id = %s", (ids[0],))
        assert _attempts_of(conn, schema, ids) == 1


def test_pages_that_status_changes_rewrite_keep_room_for_new_versions(
    empty_db_dsn: str,
) -> None:
    """The jobs' primary key and the attempts (table and key) are filled to 70%, in a custom
    schema too: the room that status changes and attempt closes write their new versions into."""
    odd = 'Lease "Q"'
    with Stores.connect(empty_db_dsn, odd, check_schema=False) as store:
        store.db.migrate()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class AS c JOIN pg_namespace AS n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (odd, ["jobs_pkey", "job_attempts", "job_attempts_pkey"]),
        ).fetchall()
    options = {name: sorted(opts) for name, opts in rows}
    assert options == {
        "jobs_pkey": ["fillfactor=70"],
        "job_attempts": sorted(
            [
                "autovacuum_vacuum_insert_scale_factor=0.05",
                "fillfactor=70",
                # migration 23's (tests/integration/test_storage_settings.py)
                "autovacuum_vacuum_threshold=1000",
                "autovacuum_vacuum_scale_factor=0.01",
                "autovacuum_analyze_scale_factor=0.02",
                "autovacuum_vacuum_cost_delay=0",
                "vacuum_truncate=false",
            ]
        ),
        "job_attempts_pkey": ["fillfactor=70"],
    }


def test_events_from_before_migration_6_keep_no_role_and_new_ones_must_have_one(
    empty_db_dsn: str,
) -> None:
    """Who wrote the audit rows of an older installation was not recorded: they keep NULL, not
    the role that ran the upgrade. Every row written after it names its role."""
    schema = "leasectl"
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(queries.get("migrations_table_create").render(schema))
            for migration in queries.migrations()[:5]:
                conn.execute(migration.render(schema))
                conn.execute(
                    queries.get("migration_record").render(schema),
                    {"version": migration.version, "name": migration.name},
                )
        conn.execute(
            "INSERT INTO leasectl.job_events (job_id, actor, action) VALUES (1, 'old', 'requeue')"
        )
    with Stores.connect(empty_db_dsn, schema, check_schema=False) as store:
        assert store.db.migrate() == [m.version for m in queries.migrations()][5:]
        [job_id] = store.ops.enqueue([{}])
        store.ops.operator_mark_stuck(store.ops.seen_now([job_id]), actor="new", reason=None)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        me = conn.execute("SELECT session_user::text").fetchone()
        rows = conn.execute("SELECT actor, db_role FROM leasectl.job_events ORDER BY id").fetchall()
        assert me is not None and rows == [("old", None), ("new", me[0])]
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO leasectl.job_events (job_id, actor, action, db_role) "
                "VALUES (1, 'x', 'requeue', NULL)"
            )
