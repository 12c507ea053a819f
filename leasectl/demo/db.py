"""The demo's named queries (demo.sql) and the few database chores of setting a demo up."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout

from leasectl import queries
from leasectl.config import safe_dsn
from leasectl.errors import ConnectionFailed, LeasectlError
from leasectl.store import Store


@cache
def demo_queries() -> dict[str, queries.Query]:
    text = resources.files(__package__).joinpath("demo.sql").read_text(encoding="utf-8")
    return queries.parse(text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip().removeprefix("connection failed: ").strip()


@contextlib.contextmanager
def db_errors(where: str) -> Iterator[None]:
    """Database failures become one-line, password-free errors (as in the Store)."""
    try:
        yield
    except LeasectlError:
        raise
    except PoolTimeout:
        raise ConnectionFailed(f"cannot reach the database at {where}") from None
    except psycopg.OperationalError as exc:
        raise ConnectionFailed(f"lost the database at {where}: {_first_line(exc)}") from None
    except psycopg.Error as exc:
        raise LeasectlError(f"demo: database error at {where}: {_first_line(exc)}") from None


def connect(dsn: str, application_name: str) -> psycopg.Connection[dict[str, Any]]:
    """A plain autocommit session (the demo's lock lives as long as it does)."""
    try:
        return psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=5,
            application_name=application_name,
            row_factory=dict_row,
        )
    except psycopg.Error as exc:
        raise ConnectionFailed(f"cannot connect to {safe_dsn(dsn)}: {_first_line(exc)}") from None


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
    with db_errors(safe_dsn(conn.info.dsn)):
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def rows(store: Store, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one named demo query through a Store's pool, in its schema."""
    statement = demo_queries()[name].render(store.schema)
    with db_errors(store.where), store.pool.connection() as conn:
        cur = conn.cursor(row_factory=dict_row)
        cur.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


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


def tally(store: Store, ids: list[int], *, watcher: str, operator: str) -> Tally:
    if not ids:
        return Tally()
    params = {"ids": ids, "watcher": watcher, "operator": operator}
    counts: dict[str, Any] = {}
    for name in ("demo_jobs_tally", "demo_attempts_tally", "demo_events_tally"):
        counts.update(rows(store, name, params)[0])
    return Tally(**{k: int(v or 0) for k, v in counts.items()})
