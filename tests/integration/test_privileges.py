"""Least privilege with real roles: `leasectl grant`, what each role may do and what it may not.

The test servers trust local logins, so a role connects by ``user=`` alone; every DSN still
carries a password, which must never be printed.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from psycopg import conninfo, errors, sql

from leasectl import grants
from leasectl.console.source import DatabaseSource
from leasectl.console.view import ConsoleFilter
from leasectl.errors import PermissionDenied
from leasectl.models import JobStatus
from leasectl.store import Store
from tests.integration.test_cli import SECRET, assert_one_line_error, cli, snapshot

KINDS = ("viewer", "operator", "worker", "producer")


@dataclass
class Roles:
    names: dict[str, str]
    db_dsn: str

    def dsn(self, kind: str) -> str:
        return conninfo.make_conninfo(self.db_dsn, user=self.names[kind], password=SECRET)


@pytest.fixture
def roles(server_dsn: str, db_dsn: str) -> Iterator[Roles]:
    tag = secrets.token_hex(4)
    names = {kind: f"lc_{kind}_{tag}" for kind in KINDS}
    names["nobody"] = f"lc_nobody_{tag}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in names.values():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
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
def granted(roles: Roles, db_dsn: str) -> Roles:
    with Store.connect(db_dsn, "leasectl") as store:
        grants.apply(store, [grants.Grant(grants.Kind(k), roles.names[k]) for k in KINDS])
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


@dataclass
class Seeded:
    pending: int
    expired: int
    stuck: int
    completed: int


def seed(db_dsn: str) -> Seeded:
    with Store.connect(db_dsn, "leasectl") as store:
        completed, expired, stuck, pending = store.enqueue([{"n": i} for i in range(4)], queue="q")
        leases = store.claim("q", "owner-1", timedelta(seconds=30), 3)
        store.complete(leases[:1])
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' "
                "WHERE id = ANY(%s)",
                [[expired, stuck]],
            )
        store.operator_mark_stuck(store.seen_now([stuck]), actor="operator:test", reason="seed")
    return Seeded(pending, expired, stuck, completed)


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
    seed(db_dsn)
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
    seeded = seed(db_dsn)
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
    s = seed(db_dsn)
    before = snapshot(db_dsn)
    for args in (
        ["status"],
        ["status", "--json"],
        ["inspect", str(s.stuck)],
        ["inspect", str(s.expired), "--json"],
        ["requeue-stuck", "--dry-run"],
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
    s = seed(db_dsn)
    before = snapshot(db_dsn)
    source = DatabaseSource.connect(granted.dsn("viewer"), "leasectl")
    try:
        assert source.can_update() is False
        snap = source.snapshot(ConsoleFilter(), 50)
        assert snap.counts.stuck == 1 and snap.counts.pending == 1
        assert [j.id for j in snap.stuck] == [s.expired, s.stuck]
        assert source.inspect(s.stuck).job.status == JobStatus.STUCK
        with pytest.raises(PermissionDenied, match=r"^permission denied"):
            source.requeue([snap.stuck[1].seen()], "should not happen")
        assert SECRET not in source.where
    finally:
        source.close()
    assert snapshot(db_dsn) == before


def test_operator_requeues_and_marks_stuck_with_audit_events(granted: Roles, db_dsn: str) -> None:
    s = seed(db_dsn)
    dsn = granted.dsn("operator")
    for args in (
        ["requeue", str(s.stuck), "--reason", "ops"],
        ["mark-stuck", str(s.pending), "--reason", "poison"],
        ["requeue-stuck", "--reason", "cron"],
        ["status", "--json"],
        ["inspect", str(s.pending)],
    ):
        proc = cli(*args, dsn=dsn)
        assert proc.returncode == 0, (args, proc.stderr)
        assert SECRET not in proc.stdout + proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        events = conn.execute(
            "SELECT job_id, action, reason FROM leasectl.job_events ORDER BY id"
        ).fetchall()
        statuses = dict(conn.execute("SELECT id, status::text FROM leasectl.jobs").fetchall())
    assert events[1:] == [
        (s.stuck, "requeue", "ops"),
        (s.pending, "mark_stuck", "poison"),
        (s.expired, "requeue", "cron"),
    ]
    assert statuses == {
        s.completed: "Completed",
        s.expired: "Pending",
        s.stuck: "Pending",
        s.pending: "Stuck",
    }
    source = DatabaseSource.connect(dsn, "leasectl")
    try:
        assert source.can_update() is True
        result = source.requeue([source.inspect(s.pending).job.seen()], "from the console")
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


def test_worker_role_runs_the_lease_protocol_only(granted: Roles, db_dsn: str) -> None:
    [job_id, other, third] = seed_pending(db_dsn, 3)
    ttl = timedelta(seconds=30)
    with Store.connect(granted.dsn("worker"), "leasectl") as store:
        store.worker_register(
            "w-role", hostname="h", pid=1, queues=["q"], lease_ttl=ttl, heartbeat_every=ttl / 3
        )
        leases = store.claim("q", "w-role", ttl, 2)
        assert [lease.job_id for lease in leases] == [job_id, other]
        assert set(store.heartbeat(leases, ttl)) == {job_id, other}
        assert store.complete(leases[:1]) == {job_id}
        assert store.fail(leases[1], "boom", retry_delay=timedelta(0)) == JobStatus.PENDING
        lease = store.claim_by_id(third, "w-role", ttl)
        assert lease is not None and store.release([lease]) == {third}
        store.worker_seen("w-role")
        store.worker_stopped("w-role")
        with pytest.raises(PermissionDenied, match=r"^permission denied"):
            store.operator_requeue(store.seen_now([third]), actor="w-role", reason=None)
    before = snapshot(db_dsn)
    for args in (["requeue-stuck"], ["mark-stuck", str(third)], ["status"]):
        proc = cli(*args, dsn=granted.dsn("worker"))
        if args == ["status"]:
            assert proc.returncode == 0, proc.stderr  # a worker may look at the queue
            continue
        assert_one_line_error(proc, 1, "permission denied")
    assert snapshot(db_dsn) == before


def seed_pending(db_dsn: str, n: int) -> list[int]:
    with Store.connect(db_dsn, "leasectl") as store:
        return store.enqueue([{"i": i} for i in range(n)], queue="q")


def test_producer_role_enqueues_only(granted: Roles, db_dsn: str) -> None:
    proc = cli("enqueue", "-q", "q", "--count", "2", "--json", dsn=granted.dsn("producer"))
    assert proc.returncode == 0, proc.stderr
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone() == (2,)
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
    assert 'GRANT UPDATE ON "leasectl".jobs TO "ops";' in rendered
