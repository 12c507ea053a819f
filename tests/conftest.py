"""Test databases: LEASECTL_TEST_DSN when set, else one session-wide embedded server (one per
xdist worker). Every test that asks for ``db_dsn`` gets a fresh database cloned from a migrated
template.

Two tiers: ``python -m pytest`` runs the fast tier; ``--full`` adds the tests marked ``full``
(subprocess sweeps, more servers, soaks, chaos, terminals), which are otherwise deselected.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from leasectl.db.embedded import EmbeddedServer
from leasectl.runtime.worker import Worker, WorkerConfig
from tests.stores import Stores
from tests.util import SUPERUSER_PASSWORD, scratch_parent

SCHEMA = "leasectl"

# tests/unit/test_tiers.py runs pytest on a made-up module with this file's tier hooks.
pytest_plugins = ["pytester"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="run the full tier: also the tests marked full (CI runs it; see README)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --full, the full tier's tests (marked full, or slow) are deselected, not skipped:
    the closing line counts them apart from what ran, and -ra does not list hundreds of skips."""
    if config.getoption("--full"):
        return
    fast: list[pytest.Item] = []
    full: list[pytest.Item] = []
    for item in items:
        in_full = item.get_closest_marker("full") or item.get_closest_marker("slow")
        (full if in_full else fast).append(item)
    if full:
        config.hook.pytest_deselected(items=full)
        config.stash[_FULL_LEFT_OUT] = len(full)
        items[:] = fast


_FULL_LEFT_OUT = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    left_out = config.stash.get(_FULL_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"fast tier: {left_out} tests of the full tier deselected (--full runs them)"
        )


def _drop(name: str) -> sql.Composed:
    return sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))


def _with_db(dsn: str, dbname: str) -> str:
    return conninfo.make_conninfo(dsn, dbname=dbname)


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """An admin DSN of a server we may create databases on."""
    given = os.environ.get("LEASECTL_TEST_DSN")
    if given:
        yield given
        return
    from leasectl.db.embedded import EmbeddedServer
    from leasectl.db.embedded.auth import write_passfile

    server = EmbeddedServer.temporary(parent=scratch_parent())
    # The tests that show a DSN's password must never be printed give the superuser's own.
    write_passfile(server.passfile, SUPERUSER_PASSWORD)
    server.start()
    try:
        yield server.dsn()
    finally:
        server.stop(remove=True)


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    name = f"leasectl_tpl_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    store = Stores.connect(_with_db(server_dsn, name), SCHEMA, check_schema=False)
    try:
        store.db.migrate()
    finally:
        store.close()
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def empty_db_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database without the leasectl schema."""
    yield from _fresh_db(server_dsn, None)


@pytest.fixture
def db_dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    """A fresh database with the leasectl schema, cloned from the template."""
    yield from _fresh_db(server_dsn, template_db)


def _fresh_db(server_dsn: str, template: str | None) -> Iterator[str]:
    name = f"leasectl_t_{uuid.uuid4().hex[:12]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(create)
    try:
        yield _with_db(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(_drop(name))


@pytest.fixture
def store(db_dsn: str) -> Iterator[Stores]:
    s = Stores.connect(db_dsn, SCHEMA, max_size=4)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sql_conn(db_dsn: str) -> Iterator[psycopg.Connection]:
    """A plain autocommit connection to the test database, for arranging and asserting state."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def run_worker(db_dsn: str) -> Iterator[Any]:
    """start(handler, **WorkerConfig fields) -> a Worker running in a thread of this process,
    started; every one is stopped (and must end) after the test."""
    running: list[tuple[Worker, threading.Thread]] = []

    def start(handler: Any, **config: Any) -> Worker:
        worker = Worker(db_dsn, SCHEMA, WorkerConfig(**config), handler)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
        thread.start()
        assert worker.started.wait(10)
        running.append((worker, thread))
        return worker

    yield start
    for worker, thread in running:
        worker.stop()
        thread.join(15)
        assert not thread.is_alive()


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A directory for EmbeddedServer.default() that the server user can reach when root."""
    parent = Path(tempfile.mkdtemp(prefix="leasectl-demo-test-"))
    os.chmod(parent, 0o755)  # we created it; as root, `nobody` must traverse it
    try:
        yield parent / "embedded"
    finally:
        EmbeddedServer(parent / "embedded").stop(remove=True, mode="immediate")
        shutil.rmtree(parent, ignore_errors=True)
