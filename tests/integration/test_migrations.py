"""`init`: idempotent, safe to run concurrently, and the schema it leaves is the designed one."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from leasectl import queries
from leasectl.errors import SchemaMissing
from leasectl.store import Store


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
    with Store.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
        latest = [m.version for m in queries.migrations()]
        assert store.migrate() == latest
        with psycopg.connect(empty_db_dsn) as conn:
            first = _schema_shape(conn, "leasectl")
        assert store.migrate() == []
        with psycopg.connect(empty_db_dsn) as conn:
            assert _schema_shape(conn, "leasectl") == first
    assert [t[0] for t in first["tables"]] == [
        "job_attempts",
        "job_events",
        "jobs",
        "schema_migrations",
        "workers",
    ]
    assert ("jobs_claimable_idx",) in first["indexes"]
    assert ("jobs_processing_idx",) in first["indexes"]


def test_concurrent_migrations_leave_one_schema(empty_db_dsn: str) -> None:
    stores = [Store.connect(empty_db_dsn, "leasectl", check_schema=False) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    applied: list[list[int]] = []
    errors: list[BaseException] = []

    def run(store: Store) -> None:
        try:
            barrier.wait()
            applied.append(store.migrate())
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
    with Store.connect(empty_db_dsn, odd, check_schema=False) as store:
        store.migrate()
        store.check_schema()
        [job_id] = store.enqueue([{"x": 1}])
        assert store.get_job(job_id).payload == {"x": 1}


def test_missing_schema_is_reported_with_the_fix(empty_db_dsn: str) -> None:
    with pytest.raises(SchemaMissing, match="run `leasectl init`"):
        Store.connect(empty_db_dsn, "leasectl")
