"""Where the demo runs, and the demo's claim on it.

Where it runs:
- no DSN: the embedded PostgreSQL (`EmbeddedServer.default()`), database ``leasectl_demo``,
  in the schema given. It is started on demand and reused when running. On exit it is stopped
  when this run started it, or when an earlier demo left it running (a demo that did not exit
  cleanly; ``demo.owner`` in the server directory marks a server a demo started). A server
  that was running for any other reason is left running. ``fresh`` drops the demo database.
- a DSN: that server, in a schema of the demo's own: ``leasectl_demo`` when the schema is the
  default ``leasectl`` (the demo never mixes its jobs into a real queue). The demo labels the
  schemas it creates and refuses any schema it did not create; ``fresh`` drops and recreates
  only such a labelled schema.
One demo at a time per embedded server or external schema (a session advisory lock, which a
SIGKILLed demo cannot leave behind).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasectl.core.config import DEFAULT_SCHEMA
from leasectl.core.errors import EmbeddedServerError, LeasectlError
from leasectl.db import demo as demo_db
from leasectl.db.connection import Database
from leasectl.db.dsn import safe_dsn, validate_dsn
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.binaries import server_version
from leasectl.present.times import ago

DEMO_DATABASE = "leasectl_demo"
DEMO_SCHEMA = "leasectl_demo"
OWNER_FILE = "demo.owner"
EMBEDDED_LOCK_KEY = "leasectl demo: embedded server"


@dataclass(frozen=True)
class Target:
    dsn: str
    schema: str
    where: str
    server: str
    # Stops the embedded server this demo owns, for an exit that cannot unwind (_abandon).
    release: Callable[[], None] | None = None


def _try_lock(conn: Any, key: str) -> bool:
    return bool(demo_db.execute(conn, "demo_lock_try", {"key": key})[0]["locked"])


def _migrate(dsn: str, schema: str) -> None:
    with Database.connect(
        dsn, schema, check_schema=False, application_name="leasectl demo"
    ) as database:
        database.migrate()


def _say_reused(dsn: str, schema: str, what: str, say: Callable[[str], None]) -> None:
    """Old Stuck and Failed jobs and silent owners look like an incident: say they are old."""
    conn = demo_db.connect(dsn, "leasectl demo")
    try:
        row = demo_db.execute(conn, "demo_last_run", schema=schema)[0]
    finally:
        conn.close()
    if not row["has_jobs"]:
        return
    when = f" from {ago(row['db_now'], row['last_seen'])}" if row["last_seen"] else ""
    say(f"reusing {what}{when} (use --fresh for a clean one)")


def _write_owner(path: Path) -> None:
    path.write_text(f"pid {os.getpid()}: this embedded server was started by `leasectl demo`\n")


@contextlib.contextmanager
def embedded_target(schema: str, fresh: bool, say: Callable[[str], None]) -> Iterator[Target]:
    server = EmbeddedServer.default()
    was_running = server.is_running()
    _ = server.port  # creates the server directory (with the right modes) and fixes the port
    owner_file = server.base_dir / OWNER_FILE
    if was_running:
        say(f"reusing the embedded PostgreSQL running in {server.base_dir}")
    else:
        _write_owner(owner_file)  # before starting: a demo killed mid-start still marks it
        say(f"starting PostgreSQL {server_version()} in {server.base_dir} …")
    server.start()
    mode = "reused" if was_running else "started"
    owns = False
    conn = demo_db.connect(server.dsn("postgres"), "leasectl demo")
    try:
        if not _try_lock(conn, EMBEDDED_LOCK_KEY):
            raise LeasectlError(
                f"another leasectl demo is running on the embedded server in {server.base_dir}; "
                "stop it first, or point this one elsewhere with --dsn"
            )
        if was_running and owner_file.exists():
            mode = "adopted"
            say("an earlier demo that did not exit cleanly left it running: stopping it on exit")
        owns = mode != "reused"
        if owns:
            _write_owner(owner_file)
        exists = demo_db.execute(conn, "demo_database_exists", {"name": DEMO_DATABASE})[0][
            "present"
        ]
        if fresh and exists:
            say(f"fresh: dropping database {DEMO_DATABASE}")
            demo_db.execute(conn, "demo_database_drop", database=DEMO_DATABASE)
        if fresh or not exists:
            demo_db.execute(conn, "demo_database_create", database=DEMO_DATABASE)
        dsn = server.dsn(DEMO_DATABASE)
        _migrate(dsn, schema)
        if exists and not fresh:
            _say_reused(dsn, schema, "the demo database", say)
        release = server.stop if owns else None
        yield Target(dsn, schema, safe_dsn(dsn), mode, release)
    finally:
        conn.close()
        if owns:
            say("stopping the embedded PostgreSQL")
            try:
                server.stop()
                owner_file.unlink(missing_ok=True)
            except EmbeddedServerError as exc:
                say(f"could not stop the embedded PostgreSQL: {exc}")
        elif mode == "reused":
            say("leaving the embedded PostgreSQL running: it was running before the demo")


@contextlib.contextmanager
def external_target(
    dsn: str, schema: str, fresh: bool, say: Callable[[str], None]
) -> Iterator[Target]:
    validate_dsn(dsn)
    where = safe_dsn(dsn)
    effective = DEMO_SCHEMA if schema == DEFAULT_SCHEMA else schema
    if effective != schema:
        say(
            f"using schema {effective!r} in {where}: the demo stays out of the default "
            f"{DEFAULT_SCHEMA!r} schema of a real database (choose another with --schema)"
        )
    conn = demo_db.connect(dsn, "leasectl demo")
    try:
        if not _try_lock(conn, f"leasectl demo: schema {effective}"):
            raise LeasectlError(
                f"another leasectl demo is running in schema {effective!r} at {where}"
            )
        state = demo_db.execute(conn, "demo_schema_state", {"schema": effective})[0]
        if state["present"] and not state["ours"]:
            raise LeasectlError(
                f"schema {effective!r} at {where} was not created by leasectl demo; refusing to "
                f"{'drop' if fresh else 'run the demo in'} it: pass --schema with an unused name"
            )
        if fresh and state["present"]:
            say(f"fresh: dropping the demo's schema {effective!r} at {where}")
            demo_db.execute(conn, "demo_schema_drop", schema=effective)
        if fresh or not state["present"]:
            demo_db.execute(conn, "demo_schema_create", schema=effective)
            demo_db.execute(conn, "demo_schema_mark", schema=effective)
        _migrate(dsn, effective)
        if state["present"] and not fresh:
            _say_reused(dsn, effective, f"the demo's schema {effective!r}", say)
        yield Target(dsn, effective, where, "external")
    finally:
        conn.close()
