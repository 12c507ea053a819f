"""Least privilege with real roles: `leasectl grant`, what each role may do and what it may not.

The test servers trust local logins, so a role connects by ``user=`` alone; every DSN still
carries a password, which must never be printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, errors, sql

from leasectl.console.source import DatabaseSource
from leasectl.console.view import ConsoleFilter
from leasectl.core.actions import OperatorAction
from leasectl.core.errors import PermissionDenied
from leasectl.core.models import JobStatus
from leasectl.db import grants
from leasectl.db import sql as queries
from leasectl.db.handler_tx import HandlerTransactions
from tests.integration.test_cli import SECRET, _env, assert_one_line_error, cli, snapshot
from tests.seed import seed_states_at
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full

KINDS = ("viewer", "operator", "worker", "producer")


@dataclass
class Roles:
    names: dict[str, str]
    db_dsn: str

    def dsn(self, kind: str) -> str:
        return conninfo.make_conninfo(self.db_dsn, user=self.names[kind], password=SECRET)


@contextlib.contextmanager
def login_roles(server_dsn: str, db_dsn: str, names: dict[str, str]) -> Iterator[Roles]:
    """Login roles named ``names`` (kind -> role) for the database ``db_dsn``; afterwards what
    they were granted there and the roles themselves are dropped."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in names.values():
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(name), sql.Literal(SECRET)
                )
            )
    try:
        yield Roles(names, db_dsn)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def roles(server_dsn: str, db_dsn: str) -> Iterator[Roles]:
    tag = secrets.token_hex(4)
    names = {kind: f"lc_{kind}_{tag}" for kind in KINDS}
    names["nobody"] = f"lc_nobody_{tag}"
    with login_roles(server_dsn, db_dsn, names) as made:
        yield made


@pytest.fixture
def granted(roles: Roles, db_dsn: str) -> Roles:
    with Stores.connect(db_dsn, "leasectl") as store:
        grants.apply(store.db, [grants.Grant(grants.Kind(k), roles.names[k]) for k in KINDS])
    return roles


def test_grant_command_prints_what_it_granted_and_is_idempotent(roles: Roles, db_dsn: str) -> None:
    args = [a for kind in KINDS for a in (f"--{kind}", roles.names[kind])]
    for _ in range(2):
        proc = cli("grant", *args, dsn=conninfo.make_conninfo(db_dsn, password=SECRET))
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == "" and SECRET not in proc.stdout
        for kind in KINDS:
            assert (
                f"granted {kind} privileges on schema 'leasectl' to role '{roles.names[kind]}'"
                in (proc.stdout)
            )
    status = cli("status", dsn=roles.dsn("viewer"))
    assert status.returncode == 0, status.stderr


def refused(roles: Roles, kind: str, db_dsn: str, *args: str) -> None:
    """Exit 1 with one error line; long-running commands (worker, watch) log their start first."""
    before = snapshot(db_dsn)
    proc = cli(*args, dsn=roles.dsn(kind))
    if args[0] in ("worker", "watch"):
        shown = f"{args}: exit {proc.returncode}, stderr {proc.stderr!r}"
        errors_shown = [ln for ln in proc.stderr.splitlines() if ln.startswith("leasectl: ")]
        assert proc.returncode == 1, shown
        assert errors_shown == [proc.stderr.splitlines()[-1]], shown
        assert errors_shown[0].startswith("leasectl: error: permission denied"), shown
        assert "Traceback" not in proc.stderr and SECRET not in proc.stderr + proc.stdout
    else:
        line = assert_one_line_error(proc, 1, "permission denied")
        assert "permission denied: permission denied" not in line
    assert snapshot(db_dsn) == before


DESTRUCTIVE = [
    "DROP TABLE leasectl.jobs",
    "DROP SCHEMA leasectl CASCADE",
    "TRUNCATE leasectl.jobs",
    "TRUNCATE leasectl.job_events",
    "DELETE FROM leasectl.jobs",
    "DELETE FROM leasectl.job_events",
    "DELETE FROM leasectl.job_attempts",
    "UPDATE leasectl.job_events SET reason = 'rewritten'",
    "ALTER TABLE leasectl.jobs DISABLE TRIGGER ALL",
]


def test_no_role_can_drop_truncate_delete_or_rewrite_history(granted: Roles, db_dsn: str) -> None:
    seed_states_at(db_dsn)
    before = snapshot(db_dsn)
    for kind in KINDS:
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            for statement in DESTRUCTIVE:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(statement)
    assert snapshot(db_dsn) == before


def test_a_role_allowed_to_delete_jobs_takes_their_attempts_along(
    roles: Roles, db_dsn: str
) -> None:
    """A role the owner let delete jobs (and nothing on job_attempts) deletes a job with its
    attempts, as the foreign key's cascade did: the trigger of migration 3 deletes with the
    owner's rights. A direct DELETE on job_attempts stays refused."""
    seeded = seed_states_at(db_dsn)
    name = sql.Identifier(roles.names["nobody"])

    def attempts() -> tuple[int, int] | None:
        """(the deleted job's attempts, every other job's)"""
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FILTER (WHERE job_id = %(id)s), "
                "count(*) FILTER (WHERE job_id <> %(id)s) FROM leasectl.job_attempts",
                {"id": seeded.completed},
            ).fetchone()

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA leasectl TO {}").format(name))
        conn.execute(sql.SQL("GRANT SELECT, DELETE ON leasectl.jobs TO {}").format(name))
    before = attempts()
    with psycopg.connect(roles.dsn("nobody"), autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("DELETE FROM leasectl.job_attempts")
        conn.execute("DELETE FROM leasectl.jobs WHERE id = %s", (seeded.completed,))
    assert before is not None and before[1] != 0
    assert attempts() == (0, before[1])


def test_viewer_reads_everything_and_changes_nothing(granted: Roles, db_dsn: str) -> None:
    s = seed_states_at(db_dsn)
    before = snapshot(db_dsn)
    for args in (
        ["status"],
        ["status", "--json"],
        ["inspect", str(s.stuck)],
        ["inspect", str(s.expired), "--json"],
        ["requeue-stuck", "--dry-run"],
        ["list", "--error", "x", "--payload", "{}"],
        ["list", "-s", "completed", "--since", "1h", "--json"],
    ):
        proc = cli(*args, dsn=granted.dsn("viewer"))
        assert proc.returncode == 0, (args, proc.stderr)
        assert SECRET not in proc.stdout + proc.stderr
    assert snapshot(db_dsn) == before
    for args in (
        ["requeue", str(s.stuck)],
        ["mark-stuck", str(s.pending)],
        ["requeue-stuck"],
        ["enqueue", "-q", "q"],
        ["worker", "-q", "q", "--handler", "tests.handlers:noop"],
        ["watch", "--interval", "1s"],
        ["grant", "--viewer", granted.names["nobody"]],
    ):
        refused(granted, "viewer", db_dsn, *args)


def test_viewer_console_is_read_only(granted: Roles, db_dsn: str) -> None:
    s = seed_states_at(db_dsn)
    before = snapshot(db_dsn)
    source = DatabaseSource.connect(granted.dsn("viewer"), "leasectl")
    try:
        assert source.can_update() is False
        snap = source.snapshot(ConsoleFilter(), 50)
        assert snap.counts.stuck == 1 and snap.counts.pending == 1
        assert [j.id for j in snap.stuck] == [s.expired, s.stuck]
        assert source.inspect(s.stuck).job.status == JobStatus.STUCK
        with pytest.raises(PermissionDenied, match=r"^permission denied"):
            source.act(OperatorAction.REQUEUE, [snap.stuck[1].seen()], "should not happen")
        assert SECRET not in source.where
    finally:
        source.close()
    assert snapshot(db_dsn) == before


def cli_env(*args: str, dsn: str, env: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    """``cli`` with environment variables set (or, None, unset)."""
    full = _env(dsn)
    for name, value in env.items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return subprocess.run(
        [sys.executable, "-m", "leasectl", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def audit(db_dsn: str) -> list[tuple[int, str, str, str | None]]:
    """(job_id, action, actor, db_role) of every job_events row, oldest first."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT job_id, action, actor, db_role FROM leasectl.job_events ORDER BY id"
        ).fetchall()


def test_operator_requeues_and_marks_stuck_with_audit_events(granted: Roles, db_dsn: str) -> None:
    """Through the audited functions: each change has its row, with the operator's name (from
    $USER) as actor and the operator's database role (recorded by the database) as db_role."""
    s = seed_states_at(db_dsn)
    dsn = granted.dsn("operator")
    for args in (
        ["requeue", str(s.stuck), "--reason", "ops"],
        ["mark-stuck", str(s.pending), "--reason", "poison"],
        ["requeue-stuck", "--reason", "cron"],
        ["status", "--json"],
        ["inspect", str(s.pending)],
    ):
        proc = cli_env(*args, dsn=dsn, env={"USER": "ops-alice"})
        assert proc.returncode == 0, (args, proc.stderr)
        assert SECRET not in proc.stdout + proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        events = conn.execute(
            "SELECT job_id, action, reason FROM leasectl.job_events ORDER BY id"
        ).fetchall()
        statuses = dict(conn.execute("SELECT id, status::text FROM leasectl.jobs").fetchall())
        owner_role = conn.execute("SELECT session_user::text").fetchone()
    assert events[1:] == [
        (s.stuck, "requeue", "ops"),
        (s.pending, "mark_stuck", "poison"),
        (s.expired, "requeue", "cron"),
    ]
    operator, host = granted.names["operator"], socket.gethostname()
    [seeded, requeued, marked, watched] = audit(db_dsn)
    assert seeded[2:] == ("operator:test", owner_role[0] if owner_role else None)
    assert requeued[2:] == marked[2:] == (f"operator:ops-alice@{host}", operator)
    assert watched[2].startswith(f"watcher@{host}:") and watched[3] == operator
    shown = cli("inspect", str(s.pending), "--json", dsn=dsn)
    assert [e["db_role"] for e in json.loads(shown.stdout)["events"]] == [operator], shown.stderr
    assert statuses == {
        s.completed: "Completed",
        s.expired: "Pending",
        s.stuck: "Pending",
        s.pending: "Stuck",
    }
    source = DatabaseSource.connect(dsn, "leasectl")
    try:
        assert source.can_update() is True
        result = source.act(
            OperatorAction.REQUEUE, [source.inspect(s.pending).job.seen()], "from the console"
        )
        assert result.changed == (s.pending,)
    finally:
        source.close()
    for args in (
        ["enqueue", "-q", "q"],
        ["worker", "-q", "q", "--handler", "tests.handlers:noop"],
        ["prune", "--older-than", "1s"],
        ["grant", "--operator", granted.names["nobody"]],
    ):
        refused(granted, "operator", db_dsn, *args)


# What an operator role could do before migration 6: change any column of any job, close
# attempts and write audit rows, all without its audit row.
UNAUDITED = [
    "UPDATE leasectl.jobs SET payload = '{\"evil\": 1}'",
    "UPDATE leasectl.jobs SET queue = 'hijacked'",
    "UPDATE leasectl.jobs SET status = 'Pending', lease_owner = NULL, lease_until = NULL",
    "UPDATE leasectl.job_attempts SET outcome = 'completed', error = 'forged'",
    "INSERT INTO leasectl.job_events (job_id, actor, action) VALUES (1, 'forged', 'requeue')",
    "INSERT INTO leasectl.jobs (queue) VALUES ('q')",
]


def test_operator_changes_jobs_only_through_the_audited_operations(
    granted: Roles, db_dsn: str
) -> None:
    seed_states_at(db_dsn)
    before = snapshot(db_dsn)
    with psycopg.connect(granted.dsn("operator"), autocommit=True) as conn:
        for statement in UNAUDITED:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
    assert snapshot(db_dsn) == before


# The audited operations, called as a role would call them directly.
FUNCTION_CALLS = [
    "SELECT * FROM leasectl.jobs_operator_requeue("
    "'{1}', '{Stuck}', '{1}', '{owner-1}', true, 'x', NULL)",
    "SELECT * FROM leasectl.jobs_operator_mark_stuck("
    "'{1}', '{Pending}', '{0}', '{NULL}', true, 'x', NULL)",
    "SELECT * FROM leasectl.jobs_requeue_expired(500, NULL, false, 'x', NULL, true)",
    "SELECT * FROM leasectl.jobs_operator_cancel("
    "'{1}', '{Pending}', '{0}', '{NULL}', false, 'x', NULL)",
    "SELECT * FROM leasectl.jobs_operator_delete("
    "'{1}', '{Completed}', '{1}', '{owner-1}', false, 'x', NULL)",
]


def test_only_operators_may_run_the_audited_operations(granted: Roles, db_dsn: str) -> None:
    """EXECUTE is revoked from PUBLIC: a viewer or a worker role (both may use the schema)
    cannot run them, and a role with UPDATE on jobs but not EXECUTE gets no console actions."""
    seed_states_at(db_dsn)
    before = snapshot(db_dsn)
    for kind in ("viewer", "worker"):
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            for call in FUNCTION_CALLS:
                with pytest.raises(errors.InsufficientPrivilege, match="function"):
                    conn.execute(call)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        public = conn.execute(
            "SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') "
            "FROM pg_proc AS p WHERE p.pronamespace = 'leasectl'::regnamespace "
            "AND p.proname LIKE 'jobs\\_%%' AND p.prorettype <> 'trigger'::regtype ORDER BY 1"
        ).fetchall()
        conn.execute(
            sql.SQL("GRANT UPDATE ON leasectl.jobs TO {}").format(
                sql.Identifier(granted.names["viewer"])
            )
        )
    assert public == [
        ("jobs_key_lock", False),
        ("jobs_key_lock_class", False),
        ("jobs_key_lock_id", False),
        ("jobs_key_promote", False),
        ("jobs_keys_heal", False),
        ("jobs_operator_cancel", False),
        ("jobs_operator_delete", False),
        ("jobs_operator_mark_stuck", False),
        ("jobs_operator_requeue", False),
        ("jobs_requeue_expired", False),
    ]
    assert snapshot(db_dsn) == before
    source = DatabaseSource.connect(granted.dsn("viewer"), "leasectl")
    try:
        assert source.can_update() is False  # UPDATE on jobs alone offers no action now
    finally:
        source.close()


def test_watch_as_operator_moves_expired_leases_with_audit_rows(
    granted: Roles, db_dsn: str
) -> None:
    s = seed_states_at(db_dsn)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "watch", "--interval", "200ms"],
        env=_env(granted.dsn("operator")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: any(e[0] == s.expired for e in audit(db_dsn)),
            timeout=30,
            what="the watcher's audit row",
        )
        watcher.send_signal(signal.SIGTERM)
        _, err = watcher.communicate(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 0, err
    assert "watcher: requeued 1, failed 0, marked stuck 0" in err
    [(_, action, actor, db_role)] = [e for e in audit(db_dsn) if e[0] == s.expired]
    assert (action, db_role) == ("requeue", granted.names["operator"])
    assert actor.startswith(f"watcher@{socket.gethostname()}:")


def test_operator_name_falls_back_to_the_os_account(granted: Roles, db_dsn: str) -> None:
    """Without $USER and $LOGNAME (cron, systemd) the actor is the process's account, not
    "unknown"; the role is recorded either way."""
    s = seed_states_at(db_dsn)
    proc = cli_env(
        "mark-stuck",
        str(s.pending),
        dsn=granted.dsn("operator"),
        env={"USER": None, "LOGNAME": None},
    )
    assert proc.returncode == 0, proc.stderr
    account = pwd.getpwuid(os.getuid()).pw_name
    assert audit(db_dsn)[-1] == (
        s.pending,
        "mark_stuck",
        f"operator:{account}@{socket.gethostname()}",
        granted.names["operator"],
    )


# The operator grant of leasectl before migration 6.
OLD_OPERATOR_GRANT = """
GRANT USAGE ON SCHEMA leasectl TO {role};
GRANT SELECT ON leasectl.jobs, leasectl.job_attempts, leasectl.job_events, leasectl.workers,
    leasectl.schema_migrations TO {role};
GRANT UPDATE ON leasectl.jobs TO {role};
GRANT UPDATE (outcome, ended_at, heartbeat_at, error) ON leasectl.job_attempts TO {role};
GRANT INSERT (job_id, actor, action, reason, before, after) ON leasectl.job_events TO {role};
"""


def direct_privileges(db_dsn: str, role: str) -> dict[str, bool]:
    """Whether ``role`` may change each table directly (any column), and run the operations."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT has_table_privilege(%(r)s, 'leasectl.jobs', 'UPDATE'),"
            " has_any_column_privilege(%(r)s, 'leasectl.jobs', 'UPDATE'),"
            " has_any_column_privilege(%(r)s, 'leasectl.job_attempts', 'UPDATE'),"
            " has_any_column_privilege(%(r)s, 'leasectl.job_events', 'INSERT'),"
            " (SELECT bool_and(has_function_privilege(%(r)s, p.oid, 'EXECUTE')) FROM pg_proc AS p"
            "  WHERE p.pronamespace = 'leasectl'::regnamespace AND p.proname = ANY(%(f)s))",
            {
                "r": role,
                "f": ["jobs_operator_requeue", "jobs_operator_mark_stuck", "jobs_requeue_expired"],
            },
        ).fetchone()
    assert row is not None
    names = ("update jobs", "update a job column", "update attempts", "insert events", "execute")
    return dict(zip(names, row, strict=True))


def test_grant_operator_takes_the_old_privileges_back(roles: Roles, db_dsn: str) -> None:
    """An installation whose operators were granted by an older leasectl: granting --operator
    again (idempotent) revokes the direct privileges and grants EXECUTE; --print-sql shows it."""
    role = roles.names["operator"]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(OLD_OPERATOR_GRANT).format(role=sql.Identifier(role)))
    assert direct_privileges(db_dsn, role) == {
        "update jobs": True,
        "update a job column": True,
        "update attempts": True,
        "insert events": True,
        "execute": False,
    }
    shown = cli("grant", "--operator", role, "--print-sql", dsn=None)
    assert f'REVOKE UPDATE ON "leasectl".jobs FROM "{role}";' in shown.stdout, shown.stderr
    assert f'REVOKE INSERT ON "leasectl".job_events FROM "{role}";' in shown.stdout
    for _ in range(2):
        proc = cli("grant", "--operator", role, dsn=db_dsn)
        assert proc.returncode == 0, proc.stderr
        assert direct_privileges(db_dsn, role) == {
            "update jobs": False,
            "update a job column": False,
            "update attempts": False,
            "insert events": False,
            "execute": True,
        }
    s = seed_states_at(db_dsn)
    with psycopg.connect(roles.dsn("operator"), autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(UNAUDITED[0])
    proc = cli("requeue", str(s.stuck), dsn=roles.dsn("operator"))
    assert proc.returncode == 0, proc.stderr
    source = DatabaseSource.connect(roles.dsn("operator"), "leasectl")
    try:
        assert source.can_update() is True
    finally:
        source.close()


def test_a_role_granted_operator_and_worker_in_one_command_keeps_both(
    roles: Roles, db_dsn: str
) -> None:
    """The operator grant's REVOKEs run before the worker's GRANTs."""
    role = roles.names["worker"]
    proc = cli("grant", "--worker", role, "--operator", role, dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    [job_id] = seed_pending(db_dsn, 1)
    with Stores.connect(roles.dsn("worker"), "leasectl") as store:
        [lease] = store.work.claim("q", "w-both", timedelta(seconds=30))
        moved = store.ops.operator_requeue([lease.job.seen()], actor="x", reason=None, force=True)
        assert moved.changed == (job_id,)
        [again] = store.work.claim("q", "w-both", timedelta(seconds=30))
        assert store.work.complete([again]) == {job_id}


def test_worker_role_runs_the_lease_protocol_only(granted: Roles, db_dsn: str) -> None:
    [job_id, other, third] = seed_pending(db_dsn, 3)
    ttl = timedelta(seconds=30)
    with Stores.connect(granted.dsn("worker"), "leasectl") as store:
        store.work.worker_register(
            "w-role", hostname="h", pid=1, queues=["q"], lease_ttl=ttl, heartbeat_every=ttl / 3
        )
        leases = store.work.claim("q", "w-role", ttl, 2)
        assert [lease.job_id for lease in leases] == [job_id, other]
        assert set(store.work.heartbeat(leases, ttl)) == {job_id, other}
        # Heartbeats carry progress (migration 21).
        progress = [(0.5, "half"), None]
        assert set(store.work.heartbeat(leases, ttl, progress=progress)) == {job_id, other}
        assert store.work.complete(leases[:1]) == {job_id}
        assert store.work.fail(leases[1], "boom", retry_delay=timedelta(0)) == JobStatus.PENDING
        # A snooze (migration 21): its attempt not spent.
        [again] = store.work.claim("q", "w-role", ttl, 1)
        assert store.work.snooze(again, timedelta(seconds=1)) is not None
        lease = store.work.claim_by_id(third, "w-role", ttl)
        assert lease is not None and store.work.release([lease]) == {third}
        # A handler's ctx.transaction() completes with the worker's privileges, in its own
        # connection.
        lease = store.work.claim_by_id(third, "w-role", ttl)
        assert lease is not None
        transactions = HandlerTransactions(store.db, "w-role handler")
        with transactions.completing(lease, lambda: None) as conn:
            conn.execute("SELECT 1")
        assert store.ops.get_job(third).status == JobStatus.COMPLETED
        store.work.worker_seen("w-role")
        store.work.worker_stopped("w-role")
        with pytest.raises(PermissionDenied, match=r"^permission denied"):
            store.ops.operator_requeue(store.ops.seen_now([third]), actor="w-role", reason=None)
    before = snapshot(db_dsn)
    for args in (["requeue-stuck"], ["mark-stuck", str(third)], ["status"]):
        proc = cli(*args, dsn=granted.dsn("worker"))
        if args == ["status"]:
            assert proc.returncode == 0, proc.stderr  # a worker may look at the queue
            continue
        assert_one_line_error(proc, 1, "permission denied")
    assert snapshot(db_dsn) == before


def seed_pending(db_dsn: str, n: int) -> list[int]:
    with Stores.connect(db_dsn, "leasectl") as store:
        return store.ops.enqueue([{"i": i} for i in range(n)], queue="q")


def test_producer_role_enqueues_only(granted: Roles, db_dsn: str) -> None:
    proc = cli(
        "enqueue",
        "-q",
        "q",
        "--count",
        "2",
        "--timeout",
        "1m",
        "--json",
        dsn=granted.dsn("producer"),
    )
    assert proc.returncode == 0, proc.stderr
    for duplicate in (False, True):
        keyed = cli(
            "enqueue", "-q", "q", "--unique-key", "k", "--json", dsn=granted.dsn("producer")
        )
        assert keyed.returncode == 0, keyed.stderr
        assert json.loads(keyed.stdout)["duplicate"] is duplicate
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone() == (3,)
    for args in (["status"], ["inspect", "1"], ["requeue", "1"]):
        refused(granted, "producer", db_dsn, *args)


def test_grant_errors_are_one_line_and_change_nothing(roles: Roles, db_dsn: str) -> None:
    before = snapshot(db_dsn)
    proc = cli("grant", "--viewer", "lc_no_such_role_x", dsn=roles.db_dsn)
    assert_one_line_error(proc, 1, "role 'lc_no_such_role_x' does not exist", "CREATE ROLE")
    # All or nothing: one missing role means nobody got anything.
    both = cli(
        "grant", "--viewer", roles.names["viewer"], "--viewer", "lc_no_such_role_x", dsn=db_dsn
    )
    assert both.returncode == 1
    proc = cli("grant", "--viewer", roles.names["viewer"], dsn=roles.dsn("nobody"))
    assert_one_line_error(proc, 1, "permission denied")
    assert snapshot(db_dsn) == before
    with psycopg.connect(roles.dsn("viewer"), autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM leasectl.jobs")
    usage = cli("grant", dsn=db_dsn)
    assert_one_line_error(usage, 2, "name at least one role")
    blank = cli("grant", "--operator", " ", dsn=db_dsn)
    assert_one_line_error(blank, 2, "invalid role name")


def test_print_sql_quotes_identifiers_and_needs_no_database() -> None:
    proc = cli(
        "--schema", 'odd"schema', "grant", "--viewer", 'x"; DROP TABLE jobs; --', "--print-sql",
        dsn=None,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert 'GRANT USAGE ON SCHEMA "odd""schema" TO "x""; DROP TABLE jobs; --";' in proc.stdout
    assert "DELETE" not in proc.stdout and "TRUNCATE" not in proc.stdout
    rendered = grants.render([grants.Grant(grants.Kind.OPERATOR, "ops")], "leasectl")
    assert "GRANT UPDATE" not in rendered and "GRANT INSERT" not in rendered
    assert 'REVOKE UPDATE ON "leasectl".jobs FROM "ops";' in rendered
    assert 'GRANT EXECUTE ON FUNCTION "leasectl".jobs_operator_requeue' in rendered


def test_operators_pause_and_resume_only_through_the_audited_functions(
    granted: Roles, db_dsn: str
) -> None:
    """An operator pauses and resumes (each with its queue_events row and database role) and
    cannot write queue_state or queue_events itself; a viewer, a worker and a producer cannot
    pause at all; a viewer and a worker see the pause; PUBLIC may not run the functions."""
    seed_pending(db_dsn, 1)
    for kind in ("viewer", "worker", "producer"):
        refused(granted, kind, db_dsn, "pause", "q", "--reason", "no")
    proc = cli("pause", "q", "--reason", "deploy", dsn=granted.dsn("operator"))
    assert proc.returncode == 0, proc.stderr
    before = snapshot(db_dsn)
    calls = [
        "SELECT * FROM leasectl.queue_pause('r', 'x', 'why', 'c')",
        "SELECT * FROM leasectl.queue_resume('q', 'x', NULL, 'c')",
    ]
    for kind in ("viewer", "worker", "producer"):
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            for call in calls:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(call)
        refused(granted, kind, db_dsn, "resume", "q")
    with psycopg.connect(granted.dsn("operator"), autocommit=True) as conn:
        for statement in (
            "INSERT INTO leasectl.queue_state (queue, paused_by, reason) VALUES ('r', 'x', 'y')",
            "DELETE FROM leasectl.queue_state",
            "UPDATE leasectl.queue_state SET reason = 'rewritten'",
            "INSERT INTO leasectl.queue_events (queue, actor, action) VALUES ('q', 'x', 'pause')",
            "DELETE FROM leasectl.queue_events",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
    assert snapshot(db_dsn) == before
    for kind in ("viewer", "worker"):
        status = cli("status", "--json", dsn=granted.dsn(kind))
        assert status.returncode == 0, status.stderr
        [shown] = json.loads(status.stdout)["paused"]
        assert (shown["queue"], shown["reason"]) == ("q", "deploy")
    with Stores.connect(granted.dsn("worker"), "leasectl") as store:
        assert store.work.claim("q", "w-role", timedelta(seconds=30)) == []
    proc = cli("resume", "q", dsn=granted.dsn("operator"))
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        events = conn.execute(
            "SELECT queue, action, reason, db_role FROM leasectl.queue_events ORDER BY id"
        ).fetchall()
        public = conn.execute(
            "SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') "
            "FROM pg_proc AS p WHERE p.pronamespace = 'leasectl'::regnamespace "
            "AND p.proname LIKE 'queue\\_%%' ORDER BY 1"
        ).fetchall()
    operator = granted.names["operator"]
    assert events == [("q", "pause", "deploy", operator), ("q", "resume", None, operator)]
    assert public == [
        ("queue_limit_bucket_share", False),
        ("queue_limit_clear", False),
        ("queue_limit_json", False),
        ("queue_limit_now", False),
        ("queue_limit_ramp", False),
        ("queue_limit_reshard", False),
        ("queue_limit_set", False),
        ("queue_limit_shard_count", False),
        ("queue_limit_shard_terms", False),
        ("queue_limit_shards_bounds_refused", False),
        ("queue_limit_summed", False),
        ("queue_pause", False),
        ("queue_ramp", False),
        ("queue_resume", False),
    ]


# What later versions added to `leasectl grant`'s statements: an older version's grants are
# today's without them.
ADDED_BY_7 = (
    ", {schema}.queue_state",
    ", {schema}.queue_events",
    ", {schema}.queue_pause, {schema}.queue_resume",
)
ADDED_BY_8 = (", error_detail",)
ADDED_BY_10 = (",\n    {schema}.jobs_operator_cancel, {schema}.jobs_operator_delete",)
ADDED_BY_11 = (
    ",\n    {schema}.counter_totals, {schema}.counter_deltas",
    "\nGRANT EXECUTE ON FUNCTION {schema}.counters_fold TO {role}",
    ", {schema}.counters_fold",
)
ADDED_BY_12 = (", unique_key", ", queue, status")
ADDED_BY_18 = (",\n    {schema}.jobs_keys_heal", ", concurrency_key")
ADDED_BY_19 = (
    ",\n    {schema}.schedules, {schema}.schedule_slots, {schema}.schedule_events",
    ",\n    {schema}.schedule_put, {schema}.schedule_remove, {schema}.schedule_pause,"
    "\n    {schema}.schedule_resume, {schema}.schedule_run, {schema}.schedule_enqueue",
)
ADDED_BY_20 = (
    ",\n    {schema}.queue_history, {schema}.queue_history_deltas, {schema}.queue_backlog,"
    "\n    {schema}.queue_backlog_minutes",
    ", {schema}.history_fold, {schema}.history_prune",
)
# (Removed first: it restores the text these pieces were added to.)
# Migration 21's (snooze, progress, timeouts): removed from every older grant before the rest
# (every caller stands for a version before 21), since ", concurrency_key" is followed by it.
ADDED_BY_21 = (", snoozes, max_attempts, progress, progress_message", ",\n    timeout")
# Migration 24's (the limits' shards): removed from every older grant first, as migration 21's.
ADDED_BY_24 = (
    ",\n    {schema}.queue_limit_shards",
    ", {schema}.queue_limit_shards",
    ", limit_shard",
)
# Migration 25's (pruning the schedules' slots): removed first too, as 21's (every caller stands
# for a version before it), since the schedule functions' line is followed by it.
ADDED_BY_25 = (",\n    {schema}.schedule_slots_prune",)
# Migration 28's (the enqueuing span's trace context): removed first too, as 21's.
ADDED_BY_28 = (", trace_context", "-- (trace_context: the enqueuing span's, migration 28.)\n")
# Migration 29's (a failure's kind and queue, written by job_fail): removed first too.
ADDED_BY_29 = (
    ", queue, error_kind",
    "-- (queue, error_kind: a failure's, job_fail; migration 29.)\n",
)
# Migration 31's (each claim writes its attempt's queue and due time): removed first too.
ADDED_BY_31 = (
    ", queue, due_at",
    "-- (queue, due_at: each claim's, for the history's pickup when the attempt ends; migration "
    "31.)\n",
)
# Migration 32's (the attempt a heartbeat's progress is of): removed first too.
ADDED_BY_32 = (",\n    progress_attempt",)
# What the grants gained after version 27 (30's is no longer in them): removed, today's grants
# are version 27's.
ADDED_AFTER_27 = (*ADDED_BY_32, *ADDED_BY_31, *ADDED_BY_29, *ADDED_BY_28)
# Migration 30's, which 31 took back (each claim appended its pickups to the history): a grant
# as at version 30 adds it to today's without 31's.
GRANTED_BY_30 = (
    "GRANT INSERT (queue, minute, counter, bucket, delta) ON leasectl.queue_history_deltas TO {}"
)
ADDED_BY_17 = (
    *ADDED_BY_19,
    ",\n    {schema}.queue_limit_set, {schema}.queue_limit_clear, {schema}.queue_ramp",
    "\nGRANT EXECUTE ON FUNCTION {schema}.queue_limit_now, {schema}.queue_limit_ramp TO {role}",
    "\nGRANT EXECUTE ON FUNCTION {schema}.claim_budget, {schema}.claim_settle TO {role}",
    ", {schema}.queue_limits",
)


def migrate_to(conn: psycopg.Connection[Any], version: int) -> None:
    """The schema as an installation at ``version`` has it (migrations 1 to ``version``)."""
    conn.execute(queries.get("migrations_table_create").render("leasectl"))
    for migration in queries.migrations()[:version]:
        conn.execute(migration.render("leasectl"))
        conn.execute(
            queries.get("migration_record").render("leasectl"),
            {"version": migration.version, "name": migration.name},
        )


def init_to(
    dsn: str, version: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[queries.Migration, ...]:
    """The empty database ``dsn`` migrated up to ``version``, through the migrator as an older
    leasectl's `init` ran it; returns every migration (the rest for the upgrade under test)."""
    every = queries.migrations()
    with Stores.connect(dsn, "leasectl", check_schema=False) as store:
        monkeypatch.setattr(queries, "migrations", lambda: every[:version])
        store.db.migrate()
        monkeypatch.setattr(queries, "migrations", lambda: every)
    return every


def grant_without(
    conn: psycopg.Connection[Any], kind: str, role: str, pieces: Sequence[str]
) -> None:
    """`leasectl grant --KIND ROLE` as today's, without ``pieces`` (what later migrations added)."""
    text = queries.get(f"grant_{kind}").text
    for piece in pieces:
        text = text.replace(piece, "")
    conn.execute(
        sql.SQL(text.replace("{schema}", "{s}").replace("{role}", "{r}")).format(
            s=sql.Identifier("leasectl"), r=sql.Identifier(role)
        )
    )


def grant_as_before(
    conn: psycopg.Connection[Any], kind: str, role: str, added: Sequence[str]
) -> None:
    """`leasectl grant --KIND ROLE` as an older version ran it: today's without ``added``."""
    grant_without(
        conn,
        kind,
        role,
        (
            *ADDED_BY_32,
            *ADDED_BY_31,
            *ADDED_BY_29,
            *ADDED_BY_28,
            *ADDED_BY_25,
            *ADDED_BY_24,
            *ADDED_BY_21,
            *added,
        ),
    )


def stats_sums(dsn: str, queue: str) -> dict[str, int]:
    """`leasectl stats --queue QUEUE --json` as the role of ``dsn`` reads it (it must succeed):
    each count of the last hour summed over its minutes."""
    proc = cli("stats", "--queue", queue, "--json", dsn=dsn)
    assert proc.returncode == 0, proc.stderr
    buckets = json.loads(proc.stdout)["buckets"]
    return {k: sum(b[k] for b in buckets) for k in ("enqueued", "started", "completed")}


def test_roles_granted_before_migration_7_keep_working_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """Roles granted at version 6 (without queue_state) go on working once `init` adds pauses:
    a worker's claim reads queue_state, a viewer reads the pauses and their history, an
    operator pauses and resumes; a producer gets nothing new. No `leasectl grant` is re-run."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_old_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            migrate_to(conn, 6)
            for kind, name in names.items():
                grant_as_before(
                    conn,
                    kind,
                    name,
                    ADDED_BY_20
                    + ADDED_BY_17
                    + ADDED_BY_7
                    + ADDED_BY_8
                    + ADDED_BY_10
                    + ADDED_BY_11
                    + ADDED_BY_12
                    + ADDED_BY_18,
                )
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in queries.migrations()][6:]
            [job_id] = store.ops.enqueue([{}], queue="q")
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            [lease] = store.work.claim("q", "w-old", timedelta(seconds=30))
            assert lease.job_id == job_id and store.work.complete([lease]) == {job_id}
        proc = cli("pause", "q", "--reason", "upgrade", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        status = cli("status", "--json", dsn=roles.dsn("viewer"))
        assert status.returncode == 0, status.stderr
        assert [p["queue"] for p in json.loads(status.stdout)["paused"]] == ["q"]
        with psycopg.connect(roles.dsn("viewer"), autocommit=True) as conn:
            events = conn.execute("SELECT action FROM leasectl.queue_events").fetchall()
            assert events == [("pause",)]
        with psycopg.connect(roles.dsn("producer"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM leasectl.queue_state")
        with psycopg.connect(roles.dsn("worker"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM leasectl.queue_events")
        proc = cli("resume", "q", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr


def test_workers_granted_before_migration_8_still_fail_jobs_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """A worker role granted at version 7 (UPDATE on job_attempts' columns without
    error_detail) fails a job with its traceback once `init` has added the column: the
    migration gives it UPDATE (error_detail). No `leasectl grant` is re-run."""
    name = f"lc_old_worker_{secrets.token_hex(4)}"
    with login_roles(server_dsn, empty_db_dsn, {"worker": name}) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            migrate_to(conn, 7)
            assert ", error_detail, queue, error_kind)" in queries.get("grant_worker").text
            grant_as_before(
                conn,
                "worker",
                name,
                ADDED_BY_20
                + ADDED_BY_17
                + ADDED_BY_8
                + ADDED_BY_10
                + ADDED_BY_11
                + ADDED_BY_12
                + ADDED_BY_18,
            )
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in queries.migrations()][7:]
            [job_id] = store.ops.enqueue([{}], queue="q")
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            [lease] = store.work.claim("q", "w-old", timedelta(seconds=30))
            status = store.work.fail(
                lease, "boom", retry_delay=timedelta(0), detail="Traceback\nboom"
            )
            assert status == JobStatus.PENDING
        with Stores.connect(empty_db_dsn, "leasectl") as store:
            [attempt] = store.ops.inspect(job_id).attempts
            assert (attempt.error, attempt.error_detail) == ("boom", "Traceback\nboom")


def test_roles_granted_at_version_7_run_the_owner_pass_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """Migration 9 drops the watcher's batch function and creates it again (with an owner):
    the roles that could run it before still can, with no `leasectl grant` re-run, and the
    function is still closed to PUBLIC and to the other roles."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v7_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            migrate_to(conn, 7)
            for kind, name in names.items():
                grant_as_before(
                    conn,
                    kind,
                    name,
                    ADDED_BY_20
                    + ADDED_BY_17
                    + ADDED_BY_8
                    + ADDED_BY_10
                    + ADDED_BY_11
                    + ADDED_BY_12
                    + ADDED_BY_18,
                )
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert 9 in store.db.migrate()
            gone, other, again = store.ops.enqueue([{}, {}, {}], queue="q")
            store.work.claim("q", "w-gone", timedelta(seconds=30))
            store.work.claim("q", "w-other", timedelta(seconds=30))
            store.work.claim("q", "w-gone", timedelta(seconds=30))
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            conn.execute("UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute'")
        proc = cli("requeue-stuck", "--owner", "w-gone", "--json", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        assert sorted(j["id"] for j in json.loads(proc.stdout)["jobs"]) == [gone, again]
        proc = cli("requeue-stuck", "--json", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        assert [j["id"] for j in json.loads(proc.stdout)["jobs"]] == [other]
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            roles_moved = conn.execute(
                "SELECT DISTINCT db_role FROM leasectl.job_events"
            ).fetchall()
            allowed = conn.execute(
                "SELECT has_function_privilege(r, 'leasectl.jobs_requeue_expired'::regproc, "
                "'EXECUTE') FROM unnest(%s::text[]) AS r",
                [["public", *(names[kind] for kind in KINDS)]],
            ).fetchall()
        assert roles_moved == [(names["operator"],)]
        assert [a for (a,) in allowed] == [False, *(kind == "operator" for kind in KINDS)]
        for kind in ("viewer", "worker", "producer"):
            refused(roles, kind, empty_db_dsn, "requeue-stuck", "--owner", "w-gone")


def test_operator_cancels_and_deletes_only_through_the_audited_functions(
    granted: Roles, db_dsn: str
) -> None:
    """An operator role cancels and deletes through the commands (audit rows with its role)
    but cannot make either change to the tables itself."""
    s = seed_states_at(db_dsn)
    dsn = granted.dsn("operator")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in (
            "UPDATE leasectl.jobs SET status = 'Cancelled'",
            f"DELETE FROM leasectl.jobs WHERE id = {s.completed}",
            f"DELETE FROM leasectl.job_events WHERE job_id = {s.stuck}",
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
    proc = cli_env("cancel", str(s.pending), "--reason", "stop", dsn=dsn, env={"USER": "bob"})
    assert proc.returncode == 0, proc.stderr
    proc = cli_env("delete", str(s.completed), str(s.stuck), dsn=dsn, env={"USER": "bob"})
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT job_id, action, db_role FROM leasectl.job_events "
            "WHERE action IN ('cancel', 'delete') ORDER BY id"
        ).fetchall()
        left = conn.execute("SELECT id, status::text FROM leasectl.jobs ORDER BY id").fetchall()
    operator = granted.names["operator"]
    assert rows == [
        (s.pending, "cancel", operator),
        (s.completed, "delete", operator),
        (s.stuck, "delete", operator),
    ]
    assert left == sorted([(s.expired, "Processing"), (s.pending, "Cancelled")])
    for kind in ("viewer", "worker", "producer"):
        refused(granted, kind, db_dsn, "cancel", str(s.expired), "--reason", "x")


def test_operators_granted_at_version_9_cancel_and_delete_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """Migration 10 adds the two functions: the roles that could run the operator's requeue
    (operators granted by version 9) run them, with no `leasectl grant` re-run; the others and
    PUBLIC do not. The enum values it adds are committed before it uses them (an upgrade)."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v9_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            migrate_to(conn, 9)
            for kind, name in names.items():
                grant_as_before(
                    conn,
                    kind,
                    name,
                    ADDED_BY_20
                    + ADDED_BY_17
                    + ADDED_BY_10
                    + ADDED_BY_11
                    + ADDED_BY_12
                    + ADDED_BY_18,
                )
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            # (A job of version 9, written as that version's enqueue wrote it.)
            row = conn.execute("INSERT INTO leasectl.jobs (queue) VALUES ('q') RETURNING id")
            [job] = row.fetchone() or ()
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in queries.migrations()][9:]
        proc = cli("cancel", str(job), "--reason", "upgrade", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        proc = cli("delete", str(job), dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            allowed = conn.execute(
                "SELECT f, has_function_privilege(r, ('leasectl.' || f)::regproc, 'EXECUTE') "
                "FROM unnest(%s::text[]) AS r, "
                "unnest(ARRAY['jobs_operator_cancel', 'jobs_operator_delete']) AS f",
                [["public", *(names[kind] for kind in KINDS)]],
            ).fetchall()
            actions = conn.execute(
                "SELECT action FROM leasectl.job_events WHERE job_id = %s ORDER BY id", (job,)
            ).fetchall()
        expected = [False, *(kind == "operator" for kind in KINDS)]
        assert [a for f, a in allowed if f == "jobs_operator_cancel"] == expected
        assert [a for f, a in allowed if f == "jobs_operator_delete"] == expected
        assert actions == [("cancel",), ("delete",)]


def test_roles_granted_at_version_10_read_and_fold_the_counters_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """Migration 11 adds the counters: the roles that could read job_events (viewers and
    operators granted by version 10) read them, and operators fold them (migration 16 takes the
    fold from viewers), with no `leasectl grant` re-run; a worker's completion is counted
    although it may not write the counters."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v10_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            with conn.transaction():
                migrate_to(conn, 9)
            # Migration 10's enum values are committed before the rest uses them (as init does).
            conn.execute("ALTER TYPE leasectl.job_status ADD VALUE 'Cancelled'")
            conn.execute("ALTER TYPE leasectl.attempt_outcome ADD VALUE 'cancelled'")
            with conn.transaction():
                ten = queries.migrations()[9]
                conn.execute(ten.render("leasectl"))
                conn.execute(
                    queries.get("migration_record").render("leasectl"),
                    {"version": ten.version, "name": ten.name},
                )
                for kind, name in names.items():
                    grant_as_before(
                        conn,
                        kind,
                        name,
                        ADDED_BY_20 + ADDED_BY_17 + ADDED_BY_11 + ADDED_BY_12 + ADDED_BY_18,
                    )
            # (A job of version 10, written as that version's enqueue wrote it.)
            row = conn.execute("INSERT INTO leasectl.jobs (queue) VALUES ('q') RETURNING id")
            [job] = row.fetchone() or ()
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in queries.migrations()][10:]
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            assert store.work.complete(store.work.claim("q", "w", timedelta(seconds=30))) == {job}
        with psycopg.connect(roles.dsn("operator"), autocommit=True) as conn:
            # The whole fold: a completion's count is the history's delta (migration 27).
            conn.execute("SELECT leasectl.counters_fold(10), leasectl.history_fold(10, 10, 9, 1)")
        for kind in ("viewer", "operator"):
            with psycopg.connect(roles.dsn(kind), autocommit=True) as conn:
                total = conn.execute(
                    "SELECT sum(value) FROM leasectl.counter_totals WHERE counter = 'completed'"
                ).fetchone()
                assert total == (1,)
        for kind in ("viewer", "worker", "producer"):
            with psycopg.connect(roles.dsn(kind), autocommit=True) as conn:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute("SELECT leasectl.counters_fold(10)")
            with psycopg.connect(roles.dsn(kind), autocommit=True) as conn:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(
                        "INSERT INTO leasectl.counter_deltas VALUES ('completed', '', 'q', 1)"
                    )


def test_viewers_granted_the_fold_before_migration_16_lose_it_and_operators_keep_it(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """A viewer that could run counters_fold froze every later fold (and the
    exporter and the watcher behind it) by leaving its transaction open. Migration 16 takes
    EXECUTE from the roles `leasectl grant --viewer` (or migration 11) gave it to, and from no
    operator; `leasectl grant --viewer` no longer grants it."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v15_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            with conn.transaction():
                migrate_to(conn, 9)
            # Migration 10's enum values are committed before the rest uses them (as init does).
            conn.execute("ALTER TYPE leasectl.job_status ADD VALUE 'Cancelled'")
            conn.execute("ALTER TYPE leasectl.attempt_outcome ADD VALUE 'cancelled'")
            with conn.transaction():
                for migration in queries.migrations()[9:15]:
                    conn.execute(migration.render("leasectl"))
                    conn.execute(
                        queries.get("migration_record").render("leasectl"),
                        {"version": migration.version, "name": migration.name},
                    )
                for kind, name in names.items():
                    grant_as_before(conn, kind, name, ADDED_BY_20 + ADDED_BY_17 + ADDED_BY_18)
                # What grant_viewer granted before migration 16.
                conn.execute(
                    sql.SQL("GRANT EXECUTE ON FUNCTION leasectl.counters_fold TO {}").format(
                        sql.Identifier(names["viewer"])
                    )
                )
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in queries.migrations()][15:]
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            may = conn.execute(
                "SELECT r, has_function_privilege(r, 'leasectl.counters_fold(integer)', "
                "'EXECUTE') FROM unnest(%s::text[]) AS r",
                [["public", *(names[kind] for kind in KINDS)]],
            ).fetchall()
        assert [m for _, m in may] == [False, False, True, False, False]
        with psycopg.connect(roles.dsn("viewer"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT leasectl.counters_fold(10)")
        with psycopg.connect(roles.dsn("operator"), autocommit=True) as conn:
            assert conn.execute("SELECT leasectl.counters_fold(10)").fetchone() == (0,)
        with Stores.connect(empty_db_dsn, "leasectl") as store:  # today's grant, again
            grants.apply(store.db, [grants.Grant(grants.Kind.VIEWER, names["viewer"])])
        with psycopg.connect(roles.dsn("viewer"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT leasectl.counters_fold(10)")


def test_producers_granted_before_migration_12_enqueue_unique_jobs_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str
) -> None:
    """Migration 12 adds unique keys: a producer granted by an older leasectl (INSERT on the
    job's columns, SELECT (id)) enqueues, with a key too, and gets a duplicate's id, with no
    `leasectl grant` re-run; the other roles get nothing new."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v9p_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            # (Version 9: migration 10's enum values are committed by Database.migrate.)
            migrate_to(conn, 9)
            for kind, name in names.items():
                grant_as_before(
                    conn,
                    kind,
                    name,
                    ADDED_BY_20
                    + ADDED_BY_17
                    + ADDED_BY_10
                    + ADDED_BY_11
                    + ADDED_BY_12
                    + ADDED_BY_18,
                )
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in queries.migrations()][9:]
        first = cli("enqueue", "-q", "q", "--unique-key", "k", "--json", dsn=roles.dsn("producer"))
        assert first.returncode == 0, first.stderr
        again = cli("enqueue", "-q", "q", "--unique-key", "k", "--json", dsn=roles.dsn("producer"))
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["ids"] == json.loads(first.stdout)["ids"]
        assert json.loads(again.stdout)["duplicate"] is True
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            granted = conn.execute(
                "SELECT r, has_column_privilege(r, 'leasectl.jobs', 'unique_key', 'INSERT') "
                "FROM unnest(%s::text[]) AS r",
                [["public", *(names[kind] for kind in KINDS)]],
            ).fetchall()
        assert [g for _, g in granted] == [False, *(kind == "producer" for kind in KINDS)]


def test_concurrency_keys_work_with_each_roles_own_grants(granted: Roles, db_dsn: str) -> None:
    """A producer enqueues keyed jobs (Waiting behind the first) without any right to write a
    status; a worker's completion promotes the next; an operator cancels a Waiting job and runs
    the healing pass (migration 18's functions run with the owner's rights)."""
    for _ in range(3):
        proc = cli(
            "enqueue", "-q", "q", "--concurrency-key", "acct", "--json",
            dsn=granted.dsn("producer"),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:

        def states() -> list[str]:
            rows = conn.execute("SELECT status::text FROM leasectl.jobs ORDER BY id").fetchall()
            return [r[0] for r in rows]

        assert states() == ["Pending", "Waiting", "Waiting"]
        ttl = timedelta(seconds=30)
        with Stores.connect(granted.dsn("worker"), "leasectl") as store:
            (lease,) = store.work.claim("q", "w-role", ttl, 5)
            assert store.work.complete([lease]) == {lease.job_id}
        assert states() == ["Completed", "Pending", "Waiting"]
        with Stores.connect(granted.dsn("operator"), "leasectl") as store:
            cancelled = store.ops.operator_cancel(store.ops.seen_now([3]), actor="op", reason="x")
            assert list(cancelled.changed) == [3]
            assert store.ops.heal_keys(max_keys=10, after=None) == ([], None)
        assert states() == ["Completed", "Pending", "Cancelled"]


def test_operators_limit_queues_only_through_the_audited_functions(
    granted: Roles, db_dsn: str
) -> None:
    """An operator limits and lifts limits (audited with its role); a viewer, a worker and a
    producer cannot; no role may UPDATE or lock queue_limits or its shards, so a worker holds a
    limited queue's shards only through claim_budget; a worker role claims within the limits."""
    seed_pending(db_dsn, 5)
    for kind in ("viewer", "worker", "producer"):
        refused(granted, kind, db_dsn, "limit", "q", "--concurrency", "1", "--reason", "no")
    proc = cli("limit", "q", "--concurrency", "2", "--reason", "503s", dsn=granted.dsn("operator"))
    assert proc.returncode == 0, proc.stderr
    for kind in ("viewer", "operator", "worker", "producer"):
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            for statement in (
                "UPDATE leasectl.queue_limits SET concurrency = 100",
                "SELECT * FROM leasectl.queue_limits FOR UPDATE",
                "SELECT * FROM leasectl.queue_limits FOR KEY SHARE",
                "DELETE FROM leasectl.queue_limits",
                "INSERT INTO leasectl.queue_limits (queue, concurrency, set_by, reason) "
                "VALUES ('r', 1, 'x', 'y')",
                "UPDATE leasectl.queue_limit_shards SET tokens = 100",
                "SELECT * FROM leasectl.queue_limit_shards FOR UPDATE",
                "SELECT * FROM leasectl.queue_limit_shards FOR KEY SHARE",
                "DELETE FROM leasectl.queue_limit_shards",
            ):
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(statement)
    for kind in ("viewer", "producer"):
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM leasectl.claim_budget('q', 5, '{}', 'x')")
    with Stores.connect(granted.dsn("worker"), "leasectl") as store:
        # A worker role that holds every shard of the limit (2: a budget of 2 takes one slot
        # of each) through claim_budget in a transaction it leaves open: the others' claims
        # wait at most its lock_timeout, then take nothing (no error).
        with psycopg.connect(granted.dsn("worker")) as holder:
            holder.execute("SELECT * FROM leasectl.claim_budget('q', 2, '{}', 'hostile')")
            started = time.monotonic()
            assert store.work.trip([], "q", "w-role", timedelta(seconds=30), 5).leases == []
            assert time.monotonic() - started < 10  # (bounded: 1 s lock_timeout, not forever)
            holder.rollback()
        assert len(store.work.claim("q", "w-role", timedelta(seconds=30), 5)) == 2
    shown = cli("limits", "--json", dsn=granted.dsn("viewer"))
    assert shown.returncode == 0, shown.stderr
    [limit] = json.loads(shown.stdout)["limits"]
    assert (limit["concurrency"], limit["now"]["live"]) == (2, 2)
    proc = cli("limit", "q", "--clear", "--reason", "over", dsn=granted.dsn("operator"))
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        events = conn.execute(
            "SELECT action, reason, db_role FROM leasectl.queue_events ORDER BY id"
        ).fetchall()
    operator = granted.names["operator"]
    assert events == [("limit", "503s", operator), ("unlimit", "over", operator)]


def test_roles_granted_at_version_16_limit_and_claim_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 17 gives what `leasectl grant` now gives to the roles granted before it: a
    worker claims (claim_budget, claim_settle) within a limit, an operator sets it, a viewer
    reads it; a producer gets nothing new. No `leasectl grant` is re-run."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v16_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        # (Through the migrator, stopped at 16: migration 10 adds an enum value that one
        # transaction could not use.)
        every = init_to(empty_db_dsn, 16, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_as_before(conn, kind, name, ADDED_BY_20 + ADDED_BY_17 + ADDED_BY_18)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][16:]
            store.ops.enqueue([{}, {}, {}], queue="q")
        proc = cli("limit", "q", "--concurrency", "1", "--reason", "r", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            assert len(store.work.claim("q", "w-old", timedelta(seconds=30), 3)) == 1
        shown = cli("limits", "--json", dsn=roles.dsn("viewer"))
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["limits"][0]["now"]["live"] == 1
        with psycopg.connect(roles.dsn("producer"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM leasectl.queue_limits")


def test_history_is_read_by_viewers_and_folded_and_pruned_by_operators_only(
    granted: Roles, db_dsn: str
) -> None:
    """Migration 20's history: a producer's enqueue and a worker's claim and completion are
    counted although neither may write it; a viewer reads it (`stats`, `status`); only an
    operator folds and prunes it; producers and workers cannot read it."""
    with psycopg.connect(granted.dsn("producer"), autocommit=True) as conn:
        conn.execute("INSERT INTO leasectl.jobs (queue) VALUES ('hq'), ('hq')")
    with Stores.connect(granted.dsn("worker"), "leasectl") as store:
        leases = store.work.claim("hq", "w-role", timedelta(seconds=30), 2)
        assert store.work.complete(leases) == {lease.job_id for lease in leases}
    counted = stats_sums(granted.dsn("viewer"), "hq")
    assert (counted["enqueued"], counted["completed"]) == (2, 2)
    status = cli("status", "--json", dsn=granted.dsn("viewer"))
    assert status.returncode == 0, status.stderr
    assert [p["queue"] for p in json.loads(status.stdout)["pickup"]] == ["hq"]
    calls = (
        "SELECT leasectl.history_fold(10, 10, 100, 10)",
        "SELECT leasectl.history_prune(interval '7 days', 10)",
        "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, delta) "
        "VALUES ('hq', now(), 'completed', 1000)",
        "UPDATE leasectl.queue_history SET completed = 1000",
    )
    for kind in ("viewer", "worker", "producer"):
        for call in calls:
            with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(call)
    for kind in ("worker", "producer"):
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM leasectl.queue_history")
    # A worker writes no delta at all since migration 31 (its pickups come from its attempts),
    # not even a pickup of the current minute as migration 30's claims appended.
    with psycopg.connect(granted.dsn("worker"), autocommit=True) as conn:
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, bucket, delta) "
                "VALUES ('hq', date_trunc('minute', now(), 'UTC'), 'pickup', 3, 1)"
            )
    # A worker may run status: its pickup latency is not readable, null, and nothing fails.
    worker_status = cli("status", "--json", dsn=granted.dsn("worker"))
    assert worker_status.returncode == 0, worker_status.stderr
    assert json.loads(worker_status.stdout)["pickup"] is None
    with psycopg.connect(granted.dsn("operator"), autocommit=True) as conn:
        # Delta rows: one per statement and counter (enqueued; completed and pickup, by the
        # completion).
        assert conn.execute(calls[0]).fetchone() == (3,)
        assert conn.execute(calls[1]).fetchone() == (0,)
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(calls[2])


def test_roles_granted_at_version_19_read_and_fold_the_history_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 20 carries the history's grants to the roles granted before it: viewers and
    operators read it, operators fold it; no `leasectl grant` is re-run."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v19_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 19, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_as_before(conn, kind, name, ADDED_BY_20)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][19:]
            store.ops.enqueue([{}], queue="q")
        with psycopg.connect(roles.dsn("operator"), autocommit=True) as conn:
            assert conn.execute("SELECT leasectl.history_fold(10, 10, 100, 10)").fetchone() == (1,)
        for kind in ("viewer", "operator"):
            assert stats_sums(roles.dsn(kind), "q")["enqueued"] == 1
        with psycopg.connect(roles.dsn("viewer"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT leasectl.history_fold(10, 10, 100, 10)")


def test_operators_manage_schedules_only_through_the_audited_functions(
    granted: Roles, db_dsn: str
) -> None:
    """An operator adds, pauses, runs and removes schedules (audited with its role) and its
    `watch` enqueues their slots; a viewer lists them; a viewer, a worker and a producer change
    none; no role writes or locks the schedules' tables itself (a role that could hold a
    schedule's row would stall every watcher's step for it: only schedule_enqueue locks it,
    under its lock_timeout)."""
    for kind in ("viewer", "worker", "producer"):
        refused(granted, kind, db_dsn, "schedule", "add", "s", "--cron", "@daily", "--queue", "q")
    proc = cli("schedule", "add", "s", "--cron", "* * * * *", "--queue", "q", "--reason", "r",
               dsn=granted.dsn("operator"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for kind in ("viewer", "worker", "producer"):
        refused(granted, kind, db_dsn, "schedule", "pause", "s", "--reason", "no")
        refused(granted, kind, db_dsn, "schedule", "run", "s")
    for kind in KINDS:
        with psycopg.connect(granted.dsn(kind), autocommit=True) as conn:
            for statement in (
                "UPDATE leasectl.schedules SET next_slot = now()",
                "SELECT * FROM leasectl.schedules FOR UPDATE",
                "SELECT * FROM leasectl.schedules FOR KEY SHARE",
                "DELETE FROM leasectl.schedules",
                "DELETE FROM leasectl.schedule_slots",
                "INSERT INTO leasectl.schedule_slots (schedule, slot) VALUES ('s', now())",
                "INSERT INTO leasectl.schedule_events (schedule, actor, action) "
                "VALUES ('s', 'x', 'add')",
                *(
                    ()
                    if kind == "operator"  # (`watch` runs it: an operator's watcher)
                    else (
                        "SELECT * FROM leasectl.schedule_enqueue('s', now(), '{}', now(), 0, 'c')",
                        "SELECT leasectl.schedule_slots_prune(interval '7 days', 10)",
                    )
                ),
            ):
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(statement)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE leasectl.schedules SET next_slot = date_trunc('minute', now()) - "
            "interval '2 minutes'"
        )
    from leasectl.runtime.schedules import prune_slots, schedule_pass

    with Stores.connect(granted.dsn("operator"), "leasectl") as store:
        assert schedule_pass(store.ops).enqueued == 1
        assert prune_slots(store.ops) == 0  # (its `watch` and `prune` prune the slots)
    shown = cli("schedule", "list", "--json", dsn=granted.dsn("viewer"))
    assert shown.returncode == 0, shown.stderr
    [listed] = json.loads(shown.stdout)["schedules"]
    assert listed["last_status"] == "Pending" and listed["last_slot"] is not None
    for args in (("pause", "s", "--reason", "p"), ("resume", "s"), ("run", "s"), ("remove", "s")):
        proc = cli("schedule", *args, dsn=granted.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        events = conn.execute(
            "SELECT action, db_role FROM leasectl.schedule_events ORDER BY id"
        ).fetchall()
        public = conn.execute(
            "SELECT count(*) FROM pg_proc AS p WHERE p.pronamespace = 'leasectl'::regnamespace "
            "AND p.proname LIKE 'schedule\\_%%' AND has_function_privilege('public', p.oid, "
            "'EXECUTE')"
        ).fetchone()
    operator = granted.names["operator"]
    assert events == [(a, operator) for a in ("add", "pause", "resume", "run", "remove")]
    assert public == (0,)
    # `status` as a worker: no schedules to read, and no error for it.
    status = cli("status", "--json", dsn=granted.dsn("worker"))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["late_schedules"] is None
    # Checking them as a worker: refused in one line, not passed for want of reading them.
    refused(granted, "worker", db_dsn, "status", "--max-late-schedules", "0")
    viewed = cli("status", "--json", dsn=granted.dsn("viewer"))
    assert json.loads(viewed.stdout)["late_schedules"] == []


def test_roles_granted_at_version_18_manage_schedules_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 19 gives what `leasectl grant` now gives to the roles granted before it: an
    operator adds a schedule, a viewer lists it; a worker and a producer get nothing new."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v18_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 18, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_as_before(conn, kind, name, ADDED_BY_20 + ADDED_BY_19)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][18:]
        proc = cli("schedule", "add", "s", "--cron", "@daily", "--queue", "q",
                   dsn=roles.dsn("operator"))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        shown = cli("schedule", "list", "--json", dsn=roles.dsn("viewer"))
        assert shown.returncode == 0, shown.stderr
        assert [s["name"] for s in json.loads(shown.stdout)["schedules"]] == ["s"]
        for kind in ("worker", "producer"):
            with psycopg.connect(roles.dsn(kind), autocommit=True) as conn:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute("SELECT * FROM leasectl.schedule_events")


def test_roles_granted_at_version_24_prune_the_schedule_slots_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 25 gives the prune of the schedules' slots to whoever runs their watcher step
    (an operator granted before it), and to no other role, with no second `leasectl grant`."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v24_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 24, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_as_before(conn, kind, name, ())
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][24:]
        prune = "SELECT leasectl.schedule_slots_prune(interval '7 days', 10)"
        with psycopg.connect(roles.dsn("operator"), autocommit=True) as conn:
            assert conn.execute(prune).fetchone() == (0,)
        for kind in ("viewer", "worker", "producer"):
            with psycopg.connect(roles.dsn(kind), autocommit=True) as conn:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(prune)


def test_roles_granted_at_version_20_snooze_report_progress_and_set_timeouts_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 21 gives the roles granted before it what `leasectl grant` now gives: a worker
    heartbeats with progress, claims (which clear it) and snoozes; a producer sets a timeout. No
    `leasectl grant` is re-run."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v20_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 20, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_as_before(conn, kind, name, ())
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][20:]
        proc = cli("enqueue", "-q", "q", "--timeout", "30s", dsn=roles.dsn("producer"))
        assert proc.returncode == 0, proc.stderr
        ttl = timedelta(seconds=30)
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            [lease] = store.work.claim("q", "w-old", ttl, 1)
            assert lease.job.timeout == ttl
            assert set(store.work.heartbeat([lease], ttl, progress=[(0.25, "a")])) == {1}
            assert store.work.snooze(lease, timedelta(0)) is not None
            [again] = store.work.claim("q", "w-old", ttl, 1)
            assert (again.job.snoozes, again.job.progress) == (1, None)


def test_roles_granted_at_version_18_claim_a_sharded_limit_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 24 gives what `leasectl grant` now gives to the roles granted before it: a
    worker claims under a shard of a limit (claim_budget, claim_settle made again, the lease's
    limit_shard written), a viewer reads the limit's use from its shards. No `leasectl grant`
    is re-run."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v18s_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 18, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_as_before(conn, kind, name, ADDED_BY_20 + ADDED_BY_19)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][18:]
            store.ops.enqueue([{}, {}, {}, {}], queue="q")
        proc = cli("limit", "q", "--concurrency", "2", "--reason", "r", dsn=roles.dsn("operator"))
        assert proc.returncode == 0, proc.stderr
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            assert len(store.work.claim("q", "w-old", timedelta(seconds=30), 4)) == 2
        shown = cli("limits", "--json", dsn=roles.dsn("viewer"))
        assert shown.returncode == 0, shown.stderr
        [limit] = json.loads(shown.stdout)["limits"]
        assert limit["now"]["live"] == 2 and limit["throttled"] == 1


def test_operators_granted_at_version_25_requeue_with_settings_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 26 drops the operator's requeue and creates it again (a new priority, more
    attempts): the roles that could run it before still can, with no `leasectl grant` re-run,
    and it is still closed to PUBLIC and to the other roles."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v25_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 25, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():  # as at 25 (26 and 27 granted nothing new)
                grant_without(conn, kind, name, ADDED_AFTER_27)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][25:]
            [job] = store.ops.enqueue([{}], queue="q", max_attempts=1)
            [lease] = store.work.claim("q", "w-old", timedelta(seconds=30))
            assert store.work.fail(lease, "x", retry_delay=timedelta(0), retry=False)
        proc = cli(
            "requeue", str(job), "--priority", "-3", "--attempts", "2", "--json",
            dsn=roles.dsn("operator"),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT status::text, priority, max_attempts FROM leasectl.jobs WHERE id = %s",
                (job,),
            ).fetchone()
            allowed = conn.execute(
                "SELECT has_function_privilege(r, 'leasectl.jobs_operator_requeue'::regproc, "
                "'EXECUTE') FROM unnest(%s::text[]) AS r",
                [["public", *(names[kind] for kind in KINDS)]],
            ).fetchall()
        assert row == ("Pending", -3, 3)
        assert [a for (a,) in allowed] == [False, *(kind == "operator" for kind in KINDS)]


def test_workers_granted_at_version_29_claim_and_count_their_pickups_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrations 30 and 31 move the pickups to the attempts: a worker granted before them (no
    INSERT of an attempt's queue and due time) claims and completes after the upgrade with no
    `leasectl grant` re-run, and its pickups are counted; it may write no count itself."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v29_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 29, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_without(conn, kind, name, (*ADDED_BY_32, *ADDED_BY_31))
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][29:]
            store.ops.enqueue([{}] * 3, queue="q")
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            leases = store.work.claim("q", "w-old", timedelta(seconds=30), 3)
            assert len(leases) == 3
            assert store.work.complete(leases) == {lease.job_id for lease in leases}
        with psycopg.connect(roles.dsn("worker"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, delta) "
                    "VALUES ('q', date_trunc('minute', now(), 'UTC'), 'completed', 1)"
                )
        assert stats_sums(roles.dsn("viewer"), "q")["started"] == 3


def test_workers_granted_at_version_30_lose_the_deltas_and_count_no_pickup_twice(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 31 takes back migration 30's INSERT on the history's deltas from the workers
    that had it (granted then), and gives them their attempts' queue and due time: they claim
    and complete with no `leasectl grant` re-run. An attempt opened at version 30, whose claim
    counted its pickup then, counts none when it ends after the upgrade."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v30_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 30, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_without(conn, kind, name, (*ADDED_BY_32, *ADDED_BY_31))
            conn.execute(sql.SQL(GRANTED_BY_30).format(sql.Identifier(names["worker"])))
            # A lease taken at version 30: its attempt without a due time, its pickup counted.
            conn.execute("INSERT INTO leasectl.jobs (queue) VALUES ('q'), ('q'), ('q')")
            conn.execute(
                "UPDATE leasectl.jobs SET status = 'Processing', lease_owner = 'w-old', "
                "attempts = 1, lease_until = now() + interval '1 minute' "
                "WHERE id = (SELECT min(id) FROM leasectl.jobs)"
            )
            conn.execute(
                "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at) "
                "SELECT min(id), 1, 'w-old', now() FROM leasectl.jobs"
            )
            conn.execute(
                "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, bucket, delta) "
                "VALUES ('q', date_trunc('minute', now(), 'UTC'), 'pickup', 0, 1)"
            )
            [(old_job,)] = conn.execute("SELECT min(id) FROM leasectl.jobs").fetchall()
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][30:]
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            leases = store.work.claim("q", "w-new", timedelta(seconds=30), 3)
            assert len(leases) == 2
            done = store.work.complete(leases)
            assert done == {lease.job_id for lease in leases}
        # The lease of version 30, still running, is counted once (by its claim), not as a
        # running attempt too.
        assert stats_sums(roles.dsn("viewer"), "q")["started"] == 3
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            # The lease of version 30 ends now: completed, its pickup not counted again.
            conn.execute(
                "UPDATE leasectl.job_attempts SET outcome = 'completed', ended_at = now() "
                "WHERE job_id = %s AND attempt = 1",
                (old_job,),
            )
        with psycopg.connect(roles.dsn("worker"), autocommit=True) as conn:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO leasectl.queue_history_deltas (queue, minute, counter, bucket, "
                    "delta) VALUES ('q', date_trunc('minute', now(), 'UTC'), 'pickup', 3, 1)"
                )
        counted = stats_sums(roles.dsn("viewer"), "q")
        assert (counted["started"], counted["completed"]) == (3, 3)


def test_workers_granted_at_version_31_report_progress_after_the_upgrade(
    server_dsn: str, empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 32 gives the workers granted before it the attempt of the progress they
    report: a heartbeat with progress succeeds with no `leasectl grant` re-run, and the report
    reads as its attempt's; a progress reported before the upgrade reads as none."""
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v31_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as roles:
        every = init_to(empty_db_dsn, 31, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                grant_without(conn, kind, name, ADDED_BY_32)
            # A lease of version 31 with its handler's report, as its heartbeat wrote it.
            [(before,)] = conn.execute(
                "INSERT INTO leasectl.jobs (queue, status, lease_owner, lease_until, attempts, "
                "progress, progress_message) VALUES ('q', 'Processing', 'w-old', "
                "now() + interval '1 minute', 1, 0.25, 'a') RETURNING id"
            ).fetchall()
            conn.execute("INSERT INTO leasectl.jobs (queue) VALUES ('q')")
        ttl = timedelta(seconds=30)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][31:]
        with Stores.connect(roles.dsn("worker"), "leasectl") as store:
            assert store.ops.get_job(before).progress is None
            [lease] = store.work.claim("q", "w-new", ttl, 1)
            assert set(store.work.heartbeat([lease], ttl, progress=[(0.5, "b")])) == {lease.job_id}
            job = store.ops.get_job(lease.job_id)
            assert (job.progress, job.progress_message) == (0.5, "b")
