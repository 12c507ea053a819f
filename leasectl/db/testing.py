"""The data layer of ``leasectl.testing``: a fresh migrated schema and its removal, the jobs of
a queue as a test's assertions read them, and the DSN behind an application's connection."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.rows import dict_row

from leasectl.core.errors import UsageError
from leasectl.core.models import Job
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.rows import job_from_row

# How long dropping a test's schema waits for a lock another session holds on it.
DROP_LOCK_TIMEOUT_MS = 10_000


def migrate_schema(dsn: str, schema: str) -> list[int]:
    """Create ``schema`` with every migration applied (as ``leasectl init`` does)."""
    db = Database.connect(dsn, schema, max_size=1, check_schema=False)
    try:
        return db.migrate()
    finally:
        db.close()


def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it, waiting at most DROP_LOCK_TIMEOUT_MS for locks."""
    db = Database.connect(dsn, schema, max_size=1, check_schema=False)
    try:
        db.rows_waiting_at_most("testing_schema_drop", {}, DROP_LOCK_TIMEOUT_MS)
    finally:
        db.close()


def dsn_of(conn: Any, what: str) -> str:
    """The DSN a connection was opened with, its password included (``info.dsn`` leaves it out).

    A connection inside a transaction is refused: what it enqueued there is not committed, and a
    worker (on connections of its own) cannot see it."""
    if not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
        raise UsageError(f"{what}: give a DSN or a psycopg connection, not {type(conn).__name__}")
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise UsageError(
            f"{what}: the connection is inside a transaction: commit it first (the drain runs "
            "on connections of its own, as a worker does, and sees only committed jobs)"
        )
    dsn = conn.info.dsn
    password = conn.info.password
    if password:
        dsn = psycopg.conninfo.make_conninfo(dsn, password=password)
    return dsn


def jobs_of_queue(
    conn: Any, schema: str, queue: str, payload_contains: Any = None, limit: int = 100
) -> list[Job]:
    """The jobs of ``queue`` whose payload contains ``payload_contains`` (JSON containment,
    ``@>``), read on ``conn`` inside whatever transaction it has open (so uncommitted enqueues
    are seen), oldest first, at most ``limit``."""
    if not isinstance(conn, psycopg.Connection):
        raise UsageError(f"give a psycopg Connection, not {type(conn).__name__}")
    payload = None if payload_contains is None else json.dumps(payload_contains)
    statement = queries.get("testing_jobs_of_queue").render(schema)
    # A cursor of its own: the connection's row factory is the caller's.
    with psycopg.Cursor(conn, row_factory=dict_row) as cur:
        cur.execute(statement, {"queue": queue, "payload": payload, "limit": limit})
        return [job_from_row(row) for row in cur.fetchall()]
