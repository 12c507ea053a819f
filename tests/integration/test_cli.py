"""The real `leasectl` command line, run as a subprocess against real PostgreSQL.

Every bad input must give one line on stderr, no traceback, the documented exit code, no
password, and leave the database exactly as it was.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from leasectl.db import sql as queries
from leasectl.present.text import format_ids
from tests.inproc import run_in_process
from tests.seed import OWNER, seed_states
from tests.stores import Stores
from tests.util import SUPERUSER_PASSWORD, wait_until

SCHEMA = "leasectl"
SECRET = SUPERUSER_PASSWORD  # (the embedded test server's: it asks for it)
_ENV_DROP = {"LEASECTL_DSN", "DATABASE_URL", "LEASECTL_SCHEMA", "LEASECTL_DEBUG", "COLUMNS"}


def _env(dsn: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    if dsn is not None:
        env["LEASECTL_DSN"] = dsn
    return env


def cli(*args: str, dsn: str | None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        env=_env(dsn),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str],
    code: int,
    *fragments: str,
    prefix: str = "leasectl: error: ",
) -> str:
    """Exit code, exactly one stderr line with the fragments, no traceback, no password."""
    shown = f"exit {proc.returncode}\nstdout: {proc.stdout!r}\nstderr: {proc.stderr!r}"
    assert proc.returncode == code, shown
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, shown
    assert lines[0].startswith(prefix), shown
    for fragment in fragments:
        assert fragment in lines[0], shown
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert SECRET not in proc.stderr + proc.stdout, shown
    return lines[0]


def with_password(dsn: str, password: str = SECRET) -> str:
    return conninfo.make_conninfo(dsn, password=password)


# -- database snapshots -----------------------------------------------------------------------


def snapshot(dsn: str) -> dict[str, Any]:
    """Every user schema, table and row of the database, to prove a command changed nothing."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        schemas = [
            r[0]
            for r in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
                "AND nspname <> 'information_schema' ORDER BY 1"
            )
        ]
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
        ).fetchall()
        rows: dict[str, Any] = {}
        for schema, table in tables:
            query = sql.SQL("SELECT to_jsonb(t)::text FROM {}.{} AS t ORDER BY 1").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            rows[f"{schema}.{table}"] = [r[0] for r in conn.execute(query)]
        return {"schemas": schemas, "rows": rows}


# -- bad input: one line, exit code, nothing changed --------------------------------------------

BAD_INPUT = [
    pytest.param(["inspect", "999999"], 1, ["job 999999 not found"], id="inspect-unknown-id"),
    pytest.param(["inspect", "abc"], 2, ["invalid job id 'abc'"], id="inspect-non-numeric"),
    pytest.param(["requeue", "{stuck}", "x1"], 2, ["invalid job id 'x1'"], id="requeue-non-num"),
    pytest.param(["mark-stuck", "{pending}", "0"], 2, ["invalid job id '0'"], id="mark-zero-id"),
    # requeue's settings: bounds checked before anything is read, ids and filter forms alike
    pytest.param(
        ["requeue", "{stuck}", "--priority", "high"],
        2,
        ["--priority: an integer from -2,147,483,648 to 2,147,483,647, not 'high'"],
        id="requeue-priority-text",
    ),
    pytest.param(
        ["requeue", "{stuck}", "--priority", "2147483648"],
        2,
        ["--priority"],
        id="requeue-priority-past-int32",
    ),
    pytest.param(
        ["requeue", "{stuck}", "--attempts", "0"],
        2,
        ["--attempts: an integer from 1 to 1,000, not '0'"],
        id="requeue-attempts-0",
    ),
    pytest.param(
        ["requeue", "--state", "stuck", "--attempts", "1001"],
        2,
        ["--attempts: an integer from 1 to 1,000, not '1001'"],
        id="requeue-filter-attempts-1001",
    ),
    pytest.param(
        ["requeue", "--state", "stuck", "--attempts", "-3", "--dry-run"],
        2,
        ["--attempts"],
        id="requeue-dry-run-attempts-negative",
    ),
    pytest.param(
        ["cancel", "{stuck}", "--priority", "1", "--reason", "x"],
        2,
        ["No such option: --priority"],
        id="cancel-priority",
    ),
    pytest.param(["enqueue", "-q", "q", "--delay", "5x"], 2, ["invalid --delay '5x'"], id="delay"),
    pytest.param(
        ["worker", "-q", "q", "--handler", "os:getcwd", "--lease-ttl", "abc"],
        2,
        ["invalid --lease-ttl 'abc'"],
        id="lease-ttl",
    ),
    pytest.param(["watch", "--interval", "-1"], 2, ["invalid --interval '-1'"], id="interval"),
    pytest.param(
        ["enqueue", "-q", "q", "--payload", '{"a": 1,}'],
        2,
        ["invalid JSON payload", "line 1 column 9"],
        id="payload",
    ),
    pytest.param(
        ["worker", "-q", "q", "--handler", "nosuchmod:fn"],
        2,
        ["cannot import handler module 'nosuchmod': no such module"],
        id="handler-module",
    ),
    pytest.param(
        ["worker", "-q", "q", "--handler", "os:nosuchfn"],
        2,
        ["module 'os' has no 'nosuchfn'"],
        id="handler-attr",
    ),
    pytest.param(
        ["worker", "-q", "q", "--handler", "nocolon"],
        2,
        ["invalid handler 'nocolon': use module:function"],
        id="handler-form",
    ),
    pytest.param(
        [
            "worker",
            "-q",
            "q",
            "--handler",
            "os:getcwd",
            "--lease-ttl",
            "5s",
            "--heartbeat-every",
            "10s",
        ],
        2,
        ["--heartbeat-every (10s) must be shorter than --lease-ttl (5s)"],
        id="heartbeat-vs-ttl",
    ),
    pytest.param(
        ["worker", "-q", "q", "--handler", "os:getcwd", "--event-loop", "trio"],
        2,
        ["--event-loop must be one of auto, uvloop, asyncio"],
        id="event-loop",
    ),
    pytest.param(
        ["enqueue", "-q", "q", "--priority", str(2**31)], 2, ["'--priority'"], id="priority"
    ),
    pytest.param(["enqueue", "-q", "q", "--count", "0"], 2, ["'--count'"], id="count"),
    pytest.param(
        ["enqueue", "-q", "q", "--max-attempts", "0"], 2, ["'--max-attempts'"], id="attempts"
    ),
    pytest.param(["requeue-stuck", "--limit", "0"], 2, ["'--limit'"], id="limit"),
    pytest.param(["status", "--bogus"], 2, ["No such option: --bogus"], id="unknown-option"),
    pytest.param(["requeue-stuck", "--mode", "nuke"], 2, ["'--mode'"], id="mode"),
    pytest.param(["nosuchcommand"], 2, ["No such command 'nosuchcommand'"], id="command"),
]


@pytest.mark.parametrize(("args", "code", "fragments"), BAD_INPUT)
def test_bad_input(
    db_dsn: str,
    store: Stores,
    sql_conn: psycopg.Connection,
    args: list[str],
    code: int,
    fragments: list[str],
) -> None:
    seeded = seed_states(store, sql_conn)
    for name, value in vars(seeded).items():
        args = [a.replace(f"{{{name}}}", str(value)) for a in args]
    before = snapshot(db_dsn)
    # In this process (tests/inproc.py), for speed; test_bad_input.py checks that a real process
    # prints the same for each kind of case.
    proc = run_in_process(args, _env(with_password(db_dsn)))
    assert_one_line_error(proc, code, *fragments)
    assert proc.stdout == ""
    assert snapshot(db_dsn) == before


def test_requeue_unknown_id_is_skipped(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_states(store, sql_conn)
    before = snapshot(db_dsn)
    proc = cli("requeue", "999999", dsn=db_dsn)
    line = assert_one_line_error(proc, 1, "999999: no such job", prefix="leasectl: ")
    assert "not requeued" in line
    assert "no such job" in proc.stdout
    assert snapshot(db_dsn) == before


def test_requeue_with_priority_and_attempts(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The id form: the Stuck job (1 attempt made) is Pending with priority -5 and 2 more
    attempts; its event records both, before and after."""
    seeded = seed_states(store, sql_conn)
    proc = cli(
        "requeue", str(seeded.stuck), "--priority", "-5", "--attempts", "2", "--reason", "INC-1",
        "--json", dsn=db_dsn,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] == [seeded.stuck]
    job = store.ops.get_job(seeded.stuck)
    assert (job.status, job.priority, job.attempts, job.max_attempts) == ("Pending", -5, 1, 3)
    before, after = sql_conn.execute(
        "SELECT before, after FROM leasectl.job_events WHERE job_id = %s AND action = 'requeue'",
        (seeded.stuck,),
    ).fetchone()
    assert (before["priority"], before["max_attempts"]) == (0, 5)
    assert (after["priority"], after["max_attempts"]) == (-5, 3)


def test_unreachable_server(db_dsn: str) -> None:
    before = snapshot(db_dsn)
    dsn = f"host=127.0.0.1 port=1 dbname=orders user=app password={SECRET} connect_timeout=5"
    proc = cli("enqueue", "-q", "q", dsn=dsn)
    assert_one_line_error(proc, 1, "cannot connect to 127.0.0.1:1/orders")
    assert snapshot(db_dsn) == before


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port=1 dbname=leasectl_longhorizon_bench user=app password=bench "
        "connect_timeout=5",
        "postgresql://app:bench@127.0.0.1:1/leasectl_longhorizon_bench?connect_timeout=5",
    ],
    ids=["key-value", "uri"],
)
def test_a_short_password_leaves_the_names_that_hold_it(dsn: str) -> None:
    """The password `bench` is taken out where it is the password, not from a database name (or
    a queue, a worker id) that holds its text."""
    proc = cli("enqueue", "-q", "bench-r0-p0", dsn=dsn)
    line = assert_one_line_error(
        proc, 1, "cannot connect to 127.0.0.1:1/leasectl_longhorizon_bench"
    )
    assert "***" not in line and "password" not in line


@pytest.mark.parametrize(
    ("dsn", "fragment"),
    [
        pytest.param(f"host=127.0.0.1 password='{SECRET}", "invalid DSN", id="kv-open-quote"),
        pytest.param(f"host=127.0.0.1 password={SECRET} nosuchkey=1", "invalid DSN", id="kv-key"),
        pytest.param(
            f"postgresql://app:{SECRET}@127.0.0.1:5432/db?nosuch=1", "invalid DSN", id="uri-param"
        ),
        pytest.param(
            f"postgresql://app:{SECRET}@127.0.0.1:port/db",
            "the port is not a number",
            id="uri-port",
        ),
    ],
)
def test_bad_dsn_syntax(dsn: str, fragment: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "leasectl", "--dsn", dsn, "status"],
        env=_env(None),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert_one_line_error(proc, 1, fragment)


def test_no_dsn_points_at_demo() -> None:
    proc = cli("status", dsn=None)
    assert_one_line_error(proc, 1, "no database given", "--dsn", "LEASECTL_DSN", "leasectl demo")


def test_database_that_does_not_exist(server_dsn: str) -> None:
    dsn = conninfo.make_conninfo(server_dsn, dbname="leasectl_no_such_db", password=SECRET)
    proc = cli("status", dsn=dsn)
    assert_one_line_error(proc, 1, "cannot connect to", 'database "leasectl_no_such_db"')


class FakeAuthServer:
    """Speaks just enough of the PostgreSQL protocol to reject a password (SQLSTATE 28P01).

    The test servers trust local logins, so a wrong password would be accepted there; this
    stands in for a server that checks passwords.
    """

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port: int = self.listener.getsockname()[1]
        self.passwords: list[bytes] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self._login(conn)
                except (OSError, struct.error):
                    pass

    @staticmethod
    def _recv(conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise OSError("client went away")
            data += chunk
        return data

    def _login(self, conn: socket.socket) -> None:
        while True:
            (length,) = struct.unpack("!I", self._recv(conn, 4))
            body = self._recv(conn, length - 4)
            if struct.unpack("!I", body[:4])[0] in (80877103, 80877104):  # SSL/GSS requests
                conn.sendall(b"N")
                continue
            break
        conn.sendall(b"R" + struct.pack("!II", 8, 3))  # AuthenticationCleartextPassword
        self._recv(conn, 1)
        (length,) = struct.unpack("!I", self._recv(conn, 4))
        self.passwords.append(self._recv(conn, length - 4).rstrip(b"\0"))
        fields = b'SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed for user "app"\0\0'
        conn.sendall(b"E" + struct.pack("!I", len(fields) + 4) + fields)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.listener.close()


@pytest.fixture
def fake_auth_server() -> Iterator[FakeAuthServer]:
    server = FakeAuthServer()
    try:
        yield server
    finally:
        server.close()


def test_wrong_password(fake_auth_server: FakeAuthServer) -> None:
    dsn = f"postgresql://app:{SECRET}@127.0.0.1:{fake_auth_server.port}/orders?connect_timeout=5"
    proc = cli("status", dsn=dsn)
    assert_one_line_error(
        proc,
        1,
        f"cannot connect to 127.0.0.1:{fake_auth_server.port}/orders",
        'password authentication failed for user "app"',
    )
    assert SECRET.encode() in fake_auth_server.passwords  # the password was really sent


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["inspect", "1"],
        ["enqueue", "-q", "q"],
        ["requeue", "1"],
        ["requeue-stuck"],
        ["worker", "-q", "q", "--handler", "os:getcwd"],
        ["watch"],
    ],
    ids=lambda args: args[0],
)
def test_schema_not_initialised(empty_db_dsn: str, args: list[str]) -> None:
    before = snapshot(empty_db_dsn)
    proc = cli(*args, dsn=with_password(empty_db_dsn))
    assert_one_line_error(proc, 1, "leasectl schema 'leasectl' is not initialised", "leasectl init")
    assert snapshot(empty_db_dsn) == before


def test_internal_errors_are_one_line(db_dsn: str) -> None:
    """A bug still ends in one line without a traceback unless LEASECTL_DEBUG=1."""
    env = _env(db_dsn)
    code = (
        "import sys; from leasectl import cli; from leasectl.db.connection import Database; "
        "Database.connect = lambda *a, **k: 1 / 0; "
        "sys.exit(cli.main(['status']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert_one_line_error(
        proc, 1, "ZeroDivisionError", "LEASECTL_DEBUG=1", prefix="leasectl: internal error: "
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "LEASECTL_DEBUG": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_interrupt_exits_130_quietly(db_dsn: str) -> None:
    code = (
        "import sys; from leasectl import cli; from leasectl.db.connection import Database\n"
        "def interrupted(*a, **k): raise KeyboardInterrupt\n"
        "Database.connect = interrupted\n"
        "sys.exit(cli.main(['status']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=_env(db_dsn), capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "")


# -- happy paths --------------------------------------------------------------------------------


def test_init_twice(empty_db_dsn: str) -> None:
    first = cli("init", dsn=empty_db_dsn)
    assert first.returncode == 0, first.stderr
    latest = queries.migrations()[-1].version
    versions = format_ids([m.version for m in queries.migrations()])
    assert f"applied migration(s) {versions}" in first.stdout
    second = cli("init", dsn=empty_db_dsn)
    assert second.returncode == 0, second.stderr
    assert f"schema 'leasectl' is up to date (version {latest})" in second.stdout
    assert second.stderr == ""
    assert cli("status", "--check", dsn=empty_db_dsn).returncode == 0


def test_init_other_schema(empty_db_dsn: str) -> None:
    proc = cli("--schema", "jobs_b", "init", dsn=empty_db_dsn)
    assert proc.returncode == 0, proc.stderr
    enq = cli("--schema", "jobs_b", "enqueue", "-q", "q", "--json", dsn=empty_db_dsn)
    assert enq.returncode == 0, enq.stderr
    assert json.loads(enq.stdout)["ids"] == [1]
    missing = cli("status", dsn=empty_db_dsn)
    assert_one_line_error(missing, 1, "schema 'leasectl' is not initialised")


def test_enqueue(db_dsn: str, sql_conn: psycopg.Connection) -> None:
    proc = cli(
        "enqueue", "-q", "emails", "--payload", '{"to": "a@example.com"}', "--priority", "-3",
        "--delay", "1h", "--max-attempts", "2", "--count", "5", "--json",
        dsn=db_dsn,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["queue"] == "emails" and len(doc["ids"]) == 5 == doc["count"]
    rows = sql_conn.execute(
        "SELECT id, payload, priority, max_attempts, status::text, "
        "run_at > now() + interval '59 minutes' FROM leasectl.jobs ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == doc["ids"]
    assert all(r[1:] == ({"to": "a@example.com"}, -3, 2, "Pending", True) for r in rows)

    human = cli("enqueue", "-q", "emails", "--count", "3", dsn=db_dsn)
    assert human.returncode == 0, human.stderr
    first = doc["ids"][-1] + 1
    assert f"enqueued 3 job(s) on queue 'emails': {first}-{first + 2}" in human.stdout


def test_status_json_and_check(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    store.ops.enqueue([{}, {}], queue="q")
    (lease,) = store.work.claim("q", OWNER, timedelta(minutes=5))

    proc = cli("status", "--json", "--check", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc) == [
        "db_now", "recent_window_s", "queues", "totals", "finished_estimate", "owners", "paused",
        "paused_total", "check", "truncated", "read_lag_s", "countdowns_stale", "limits",
        "limits_total", "writable_schemas", "late_schedules", "pickup",
    ]  # fmt: skip
    # Read from the primary: no lag, nothing stale.
    assert doc["read_lag_s"] is None and doc["countdowns_stale"] is False
    assert doc["paused"] == [] and (doc["limits"], doc["limits_total"]) == ([], 0)
    assert doc["queues"] == [
        {
            "queue": "q",
            "pending": 1,
            "due": 1,
            "oldest_due_at": doc["queues"][0]["oldest_due_at"],
            "oldest_due_age_s": doc["queues"][0]["oldest_due_age_s"],
            "processing": 1,
            "expired": 0,
            "stuck": 0,
            "waiting": 0,
            "completed_recent": 0,
            "failed_recent": 0,
            "cancelled_recent": 0,
            "pending_capped": False,
            "due_capped": False,
            "stuck_capped": False,
            "waiting_capped": False,
            "pending_estimated": False,
            "due_estimated": False,
            "stuck_estimated": False,
            "waiting_estimated": False,
        }
    ]
    assert re.match(r"\d{4}-\d\d-\d\dT.*[+-]\d\d:\d\d$", doc["db_now"])
    assert doc["check"] == {"expired": 0, "stuck": 0, "ok": True}
    assert [o["owner"] for o in doc["owners"]] == [OWNER]
    assert set(doc["owners"][0]) >= {"freshness", "held", "next_expiry_at", "lease_ttl_s"}

    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = %s",
        [lease.job_id],
    )
    failing = cli("status", "--check", dsn=db_dsn)
    assert_one_line_error(
        failing, 3, "check failed: 1 expired lease(s), 0 Stuck job(s)", prefix="leasectl: "
    )
    assert "queues at" in failing.stdout and OWNER in failing.stdout
    as_json = cli("status", "--check", "--json", "--queue", "q", dsn=db_dsn)
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["check"] == {"expired": 1, "stuck": 0, "ok": False}
    other = cli("status", "--check", "--queue", "other", dsn=db_dsn)
    assert other.returncode == 0, other.stderr


def test_requeue_stuck(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_states(store, sql_conn)
    before = snapshot(db_dsn)

    dry = cli("requeue-stuck", "--dry-run", dsn=db_dsn)
    assert dry.returncode == 0, dry.stderr
    assert "dry run: 1 expired lease(s) would be moved (1 -> Pending)" in dry.stdout
    assert re.search(rf"^\s*{seeded.expired}\s+q\s", dry.stdout, re.MULTILINE), dry.stdout
    dry_json = json.loads(cli("requeue-stuck", "--dry-run", "--json", dsn=db_dsn).stdout)
    assert dry_json["dry_run"] is True and [j["id"] for j in dry_json["jobs"]] == [seeded.expired]
    assert dry_json["jobs"][0]["lease_owner"] == OWNER
    assert snapshot(db_dsn) == before

    proc = cli("requeue-stuck", "--json", "--reason", "cron sweep", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["dry_run"], doc["requeued"], doc["failed"], doc["marked_stuck"]) == (
        False, 1, 0, 0,
    )  # fmt: skip
    assert doc["jobs"][0]["id"] == seeded.expired and doc["jobs"][0]["status"] == "Pending"
    status, outcome, reason = sql_conn.execute(
        "SELECT j.status::text, a.outcome::text, e.reason FROM leasectl.jobs j "
        "JOIN leasectl.job_attempts a ON a.job_id = j.id "
        "JOIN leasectl.job_events e ON e.job_id = j.id WHERE j.id = %s",
        [seeded.expired],
    ).fetchone() or (None, None, None)
    assert (status, outcome, reason) == ("Pending", "expired", "cron sweep")

    again = cli("requeue-stuck", dsn=db_dsn)
    assert again.returncode == 0 and "requeued 0, failed 0" in again.stdout


def test_requeue_stuck_with_an_owner_moves_only_that_owners_expired_leases(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """An incident: one worker went silent. `--owner` lists and moves its expired leases only,
    as a watcher pass (attempt `expired`, audit action `requeue`, the budget unchanged)."""
    ttl = timedelta(minutes=5)
    gone, other, live = store.ops.enqueue([{}, {}, {}], queue="q", max_attempts=3)
    store.work.claim("q", "w-gone", ttl)
    store.work.claim("q", "w-other", ttl)
    store.work.claim("q", "w-gone", ttl)
    [elsewhere] = store.ops.enqueue([{}], queue="other", max_attempts=3)
    store.work.claim("other", "w-gone", ttl)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = ANY(%s)",
        [[gone, other, elsewhere]],
    )
    before = snapshot(db_dsn)

    dry = cli("requeue-stuck", "--owner", "w-gone", "--dry-run", dsn=db_dsn)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("only the expired leases of owner w-gone\n"), dry.stdout
    assert "dry run: 2 expired lease(s) would be moved (2 -> Pending)" in dry.stdout
    listed = re.findall(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s", dry.stdout, re.MULTILINE)
    assert sorted(listed) == sorted(
        [(str(gone), "q", "w-gone"), (str(elsewhere), "other", "w-gone")]
    )
    dry_json = json.loads(
        cli(
            "requeue-stuck", "--owner", "w-gone", "-q", "q", "--dry-run", "--json", dsn=db_dsn
        ).stdout
    )
    assert (dry_json["dry_run"], dry_json["owner"]) == (True, "w-gone")
    assert [(j["id"], j["lease_owner"]) for j in dry_json["jobs"]] == [(gone, "w-gone")]
    assert snapshot(db_dsn) == before

    marked = cli(
        "requeue-stuck", "--owner", "w-gone", "-q", "other", "--mode", "mark", "--json",
        dsn=db_dsn,
    )  # fmt: skip
    assert marked.returncode == 0, marked.stderr
    doc = json.loads(marked.stdout)
    assert (doc["owner"], doc["marked_stuck"], doc["requeued"]) == ("w-gone", 1, 0)
    assert [j["id"] for j in doc["jobs"]] == [elsewhere]

    proc = cli("requeue-stuck", "--owner", "w-gone", "--limit", "5", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("only the expired leases of owner w-gone\n"), proc.stdout
    assert "requeued 1, failed 0 (attempts spent), marked stuck 0" in proc.stdout
    rows = sql_conn.execute(
        "SELECT j.id, j.status::text, j.lease_owner, j.max_attempts, a.outcome::text, e.action "
        "FROM leasectl.jobs j JOIN leasectl.job_attempts a ON a.job_id = j.id "
        "LEFT JOIN leasectl.job_events e ON e.job_id = j.id ORDER BY j.id"
    ).fetchall()
    assert rows == [
        (gone, "Pending", "w-gone", 3, "expired", "requeue"),
        (other, "Processing", "w-other", 3, "running", None),
        (live, "Processing", "w-gone", 3, "running", None),
        (elsewhere, "Stuck", "w-gone", 3, "expired", "mark_stuck"),
    ]
    again = cli("requeue-stuck", "--owner", "w-gone", "--json", dsn=db_dsn)
    assert json.loads(again.stdout)["jobs"] == []


def test_requeue_and_mark_stuck(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_states(store, sql_conn)

    marked = cli("mark-stuck", str(seeded.pending), "--reason", "poison", dsn=db_dsn)
    assert marked.returncode == 0, marked.stderr
    assert f"marked stuck 1 job(s): {seeded.pending}" in marked.stdout

    proc = cli(
        "requeue", str(seeded.pending), str(seeded.completed), "--json", "--reason", "retry",
        dsn=db_dsn,
    )  # fmt: skip
    assert_one_line_error(proc, 1, f"{seeded.completed}: a Completed job", prefix="leasectl: ")
    assert json.loads(proc.stdout) == {
        "action": "requeue",
        "changed": [seeded.pending],
        "skipped": [{"id": seeded.completed, "reason": "a Completed job cannot be requeued"}],
    }
    human = cli("requeue", str(seeded.completed), str(seeded.stuck), dsn=db_dsn)
    assert human.returncode == 1
    assert f"requeued 1 job(s): {seeded.stuck}" in human.stdout
    assert "a Completed job cannot be requeued" in human.stdout

    (live,) = store.work.claim("q", OWNER, timedelta(minutes=5))
    refused = cli("requeue", str(live.job_id), dsn=db_dsn)
    assert_one_line_error(refused, 1, "lease live", "--force", prefix="leasectl: ")
    forced = cli("requeue", str(live.job_id), "--force", "--reason", "on-call", dsn=db_dsn)
    assert forced.returncode == 0, forced.stderr
    actions = sql_conn.execute(
        "SELECT job_id, action, reason FROM leasectl.job_events ORDER BY id"
    ).fetchall()
    assert actions[-4:] == [
        (seeded.pending, "mark_stuck", "poison"),
        (seeded.pending, "requeue", "retry"),
        (seeded.stuck, "requeue", None),
        (live.job_id, "requeue_forced", "on-call"),
    ]


def test_inspect(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_states(store, sql_conn)
    assert cli("requeue-stuck", dsn=db_dsn).returncode == 0

    proc = cli("inspect", str(seeded.expired), "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc) == ["job", "attempts", "events", "db_now", "queue_paused"]
    assert doc["queue_paused"] is None
    assert doc["job"]["id"] == seeded.expired and doc["job"]["status"] == "Pending"
    assert doc["job"]["payload"] == {"n": 1}
    assert [(a["attempt"], a["outcome"], a["lease_owner"]) for a in doc["attempts"]] == [
        (1, "expired", OWNER)
    ]
    assert [e["action"] for e in doc["events"]] == ["requeue"]
    assert doc["events"][0]["actor"].startswith("watcher@")
    assert doc["events"][0]["before"]["status"] == "Processing"

    human = cli("inspect", str(seeded.stuck), dsn=db_dsn)
    assert human.returncode == 0, human.stderr
    out = human.stdout
    assert f"job {seeded.stuck}" in out and "Stuck" in out and "marked_stuck" in out
    assert "lapsed" in out and "1/5" in out and '"n": 2' in out
    assert all(len(line) <= 80 for line in out.splitlines())


HANDLER_MODULE = """
from __future__ import annotations


def handle(ctx):
    if ctx.payload.get("fail"):
        raise RuntimeError("told to fail")
"""


def test_worker_completes_jobs_and_stops_on_sigterm(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection, tmp_path: Path
) -> None:
    (tmp_path / "cli_test_handlers.py").write_text(textwrap.dedent(HANDLER_MODULE))
    ids = store.ops.enqueue([{"n": i} for i in range(6)], queue="work")
    (failing,) = store.ops.enqueue([{"fail": True}], queue="work", max_attempts=1)
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "leasectl", "worker", "-q", "work",
            "--handler", "cli_test_handlers:handle", "--concurrency", "3",
            "--lease-ttl", "10s", "--poll-interval", "100ms", "--grace", "5s",
            "--worker-id", "cli-test-worker",
        ],
        cwd=tmp_path,
        env=_env(db_dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:

        def statuses() -> dict[int, str]:
            rows = sql_conn.execute("SELECT id, status::text FROM leasectl.jobs").fetchall()
            return dict(rows)

        wait_until(
            lambda: set(statuses().values()) <= {"Completed", "Failed"},
            timeout=30,
            what="the worker to finish every job",
        )
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    assert statuses() == {**dict.fromkeys(ids, "Completed"), failing: "Failed"}
    assert "Traceback" not in err
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO", err, re.MULTILINE), err
    assert "cli-test-worker stopped" in err
    (stopped,) = sql_conn.execute(
        "SELECT stopped_at IS NOT NULL FROM leasectl.workers WHERE worker_id = 'cli-test-worker'"
    ).fetchone() or (None,)
    assert stopped is True
    error = sql_conn.execute(
        "SELECT last_error FROM leasectl.jobs WHERE id = %s", [failing]
    ).fetchone()
    assert error is not None and "told to fail" in error[0]


def test_watch_requeues_and_stops_on_sigterm(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_states(store, sql_conn)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "watch", "--interval", "200ms", "--queue", "q"],
        env=_env(db_dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def status() -> str:
            row = sql_conn.execute(
                "SELECT status::text FROM leasectl.jobs WHERE id = %s", [seeded.expired]
            ).fetchone()
            return row[0] if row else ""

        wait_until(lambda: status() == "Pending", timeout=30, what="the watcher to requeue")
        watcher.send_signal(signal.SIGTERM)
        _, err = watcher.communicate(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 0, err
    assert "watcher: requeued 1, failed 0, marked stuck 0" in err
    assert "watcher stopped after" in err


def test_version_and_help() -> None:
    version = cli("--version", dsn=None)
    assert version.returncode == 0 and version.stdout.startswith("leasectl ")
    for args in (["--help"], ["status", "--help"], ["worker", "--help"]):
        proc = cli(*args, dsn=None)
        assert proc.returncode == 0 and proc.stderr == "" and "Usage" in proc.stdout
        assert "<bool>" not in proc.stdout  # a flag takes no value


def test_help_shows_flags_without_a_value_and_options_with_one() -> None:
    root = cli("--help", dsn=None).stdout
    assert re.search(r"--version +Show the version", root), root
    status = cli("status", "--help", dsn=None).stdout
    assert re.search(r"--json +Print JSON", status), status
    worker = cli("worker", "--help", dsn=None).stdout
    assert re.search(r"--concurrency +<int range>", worker), worker


def test_tui_validates_before_starting(db_dsn: str) -> None:
    bad = cli("tui", "--refresh", "soon", dsn=db_dsn)
    assert_one_line_error(bad, 2, "invalid --refresh 'soon'")
    no_dsn = cli("tui", dsn=None)
    assert_one_line_error(no_dsn, 1, "leasectl demo")
