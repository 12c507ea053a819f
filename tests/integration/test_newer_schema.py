"""A schema a newer leasectl migrated: writers refuse it, read-only commands warn (design.md)."""

from __future__ import annotations

import psycopg
import pytest

from leasectl.console.source import DatabaseSource
from leasectl.core.errors import SchemaNewer
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from tests.integration.test_cli import assert_one_line_error, cli, snapshot, with_password

pytestmark = pytest.mark.full

SCHEMA = "leasectl"
LATEST = queries.migrations()[-1].version
NEWER = LATEST + 1


@pytest.fixture
def newer_dsn(db_dsn: str, sql_conn: psycopg.Connection) -> str:
    """A database whose schema records a migration this leasectl does not have, and one job."""
    sql_conn.execute(
        "INSERT INTO leasectl.schema_migrations (version, name) VALUES (%s, 'from_the_future')",
        (NEWER,),
    )
    sql_conn.execute("INSERT INTO leasectl.jobs (queue, payload) VALUES ('q', '{}')")
    return db_dsn


def test_connecting_refuses_a_newer_schema_unless_told_what_to_do(newer_dsn: str) -> None:
    with pytest.raises(SchemaNewer) as refused:
        Database.connect(newer_dsn, SCHEMA)
    assert f"version {NEWER}" in str(refused.value)
    assert f"version {LATEST}" in str(refused.value)
    assert "upgrade leasectl" in str(refused.value)
    warned: list[str] = []
    with Database.connect(newer_dsn, SCHEMA, on_newer=warned.append) as db:
        assert db.one("migrations_applied") is not None
    assert len(warned) == 1 and warned[0].startswith("warning: ")
    assert f"version {NEWER}" in warned[0] and f"version {LATEST}" in warned[0]


def test_the_console_refuses_a_newer_schema_before_it_starts(newer_dsn: str) -> None:
    with pytest.raises(SchemaNewer, match=f"version {NEWER}.*version {LATEST}"):
        DatabaseSource.connect(newer_dsn, SCHEMA)


def test_migrate_changes_nothing_under_a_newer_schema(newer_dsn: str) -> None:
    before = snapshot(newer_dsn)
    with Database.connect(newer_dsn, SCHEMA, check_schema=False) as db:
        with pytest.raises(SchemaNewer, match=f"version {NEWER}"):
            db.migrate()
    assert snapshot(newer_dsn) == before


@pytest.mark.parametrize(
    "args",
    [
        ["init"],
        ["worker", "-q", "q", "--handler", "tests.handlers:noop"],
        ["enqueue", "-q", "q"],
        ["requeue-stuck"],
        ["cancel", "1", "--reason", "r"],
        ["pause", "q", "--reason", "r"],
        ["prune", "--older-than", "1s"],
    ],
    ids=lambda args: args[0],
)
def test_writers_refuse_a_newer_schema(newer_dsn: str, args: list[str]) -> None:
    before = snapshot(newer_dsn)
    proc = cli(*args, dsn=with_password(newer_dsn), timeout=30)
    assert_one_line_error(proc, 1, f"version {NEWER}", f"version {LATEST}", "upgrade leasectl")
    assert snapshot(newer_dsn) == before


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--json"], ["list"], ["inspect", "1"]],
    ids=lambda args: " ".join(args),
)
def test_read_only_commands_warn_and_answer(newer_dsn: str, args: list[str]) -> None:
    proc = cli(*args, dsn=with_password(newer_dsn), timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("leasectl: warning: "), proc.stderr
    assert f"version {NEWER}" in lines[0] and f"version {LATEST}" in lines[0]
    assert proc.stdout.strip()
