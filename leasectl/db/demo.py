"""The demo's named queries (``sql/demo/demo.sql``) and the few database chores of setting a
demo up."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from leasectl.core.errors import ConnectionFailed
from leasectl.db import sql as queries
from leasectl.db.connection import Database, ErrorMapping, first_line
from leasectl.db.dsn import safe_dsn
from leasectl.db.session import session_kwargs


@cache
def demo_queries() -> dict[str, queries.Query]:
    folder = resources.files(queries.__name__).joinpath("demo")
    return queries.parse(folder.joinpath("demo.sql").read_text(encoding="utf-8"))


def _other(where: str) -> str:
    """The prefix of a database error the demo does not expect."""
    return f"demo: database error at {where}"


def connect(dsn: str, application_name: str) -> psycopg.Connection[dict[str, Any]]:
    """A plain autocommit session (the demo's lock lives as long as it does)."""
    try:
        return psycopg.connect(
            dsn, row_factory=dict_row, **session_kwargs(dsn, application_name=application_name)
        )
    except psycopg.Error as exc:
        raise ConnectionFailed(f"cannot connect to {safe_dsn(dsn)}: {first_line(exc)}") from None


def execute(
    conn: psycopg.Connection[dict[str, Any]],
    name: str,
    params: dict[str, Any] | None = None,
    *,
    schema: str | None = None,
    database: str | None = None,
) -> list[dict[str, Any]]:
    """Run one named demo query on a plain connection."""
    query = demo_queries()[name]
    statement: sql.Composable
    if database is not None:
        statement = sql.SQL(query.text).format(database=sql.Identifier(database))
    elif schema is not None:
        statement = query.render(schema)
    else:
        statement = sql.SQL(query.text)
    where = safe_dsn(conn.info.dsn)
    with ErrorMapping(where, other=_other(where)):
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def rows(db: Database, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one named demo query through a Database's pool, in its schema."""
    return db.run(demo_queries()[name], params, schema=False, other=_other(db.where))


@dataclass(frozen=True)
class Tally:
    """The run's own jobs and attempts, counted in the database."""

    present: int = 0
    pending: int = 0
    processing: int = 0
    leased: int = 0
    completed: int = 0
    failed: int = 0
    stuck: int = 0
    failed_attempts: int = 0
    expired_leases: int = 0
    released: int = 0
    completed_twice: int = 0
    watcher_requeued: int = 0
    watcher_moved: int = 0
    quarantined: int = 0

    @property
    def open(self) -> int:
        return self.pending + self.processing


def tally(db: Database, ids: list[int], *, watcher: str, operator: str) -> Tally:
    if not ids:
        return Tally()
    params = {"ids": ids, "watcher": watcher, "operator": operator}
    counts: dict[str, Any] = {}
    for name in ("demo_jobs_tally", "demo_attempts_tally", "demo_events_tally"):
        counts.update(rows(db, name, params)[0])
    return Tally(**{k: int(v or 0) for k, v in counts.items()})
