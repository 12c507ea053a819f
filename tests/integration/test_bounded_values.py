"""Nothing a producer can insert stops monitoring or kills a worker.

The schema refuses what the core cannot hold (migration 5); what is already stored (rows from
before it, other tables) is displayed, and a job the worker cannot load is failed with the
reason, without calling its handler, while the worker goes on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl.core.models import JobStatus
from leasectl.core.timestamps import TIMESTAMP_MAX, TIMESTAMP_MIN
from leasectl.db import sql as queries
from leasectl.runtime.worker import JobContext
from tests.integration.test_cli import _env, cli
from tests.stores import Stores
from tests.util import wait_until

ROOT = Path(__file__).resolve().parents[2]
POISON = "(repeat('[', 5000) || repeat(']', 5000))::jsonb"
TOO_DEEP = (
    "payload cannot be decoded: nested deeper than Python's JSON decoder allows (RecursionError)"
)
MINUS_INFINITY = "job cannot be loaded: run_at is -infinity (or before the year 1)"


def _insert(conn: psycopg.Connection[Any], values: str) -> int:
    row = conn.execute(f"INSERT INTO leasectl.jobs {values} RETURNING id").fetchone()
    assert row is not None
    return int(row[0])


def _unbounded(conn: psycopg.Connection[Any]) -> None:
    """A schema as it was before migration 5: old rows may hold anything."""
    conn.execute("ALTER TABLE leasectl.jobs DROP CONSTRAINT jobs_bounded_values")


def _states(conn: psycopg.Connection[Any], ids: list[int]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, status::text, last_error FROM leasectl.jobs WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    ).fetchall()


# -- the schema ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        "(queue, run_at) VALUES ('q', '-infinity')",
        "(queue, run_at) VALUES ('q', 'infinity')",
        "(queue, run_at) VALUES ('q', '20000-01-01')",
        "(queue, run_at) VALUES ('q', '0044-03-15 BC')",
        "(queue, max_attempts) VALUES ('q', 2147483647)",
        "(queue, max_attempts) VALUES ('q', 1001)",
        "(queue) VALUES (repeat('q', 201))",
    ],
)
def test_the_schema_refuses_values_the_core_cannot_hold(
    sql_conn: psycopg.Connection[Any], values: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_bounded_values"):
        _insert(sql_conn, values)


def test_the_schema_takes_values_at_its_bounds(sql_conn: psycopg.Connection[Any]) -> None:
    _insert(
        sql_conn, "(queue, run_at, max_attempts) VALUES (repeat('é', 200), '0001-01-02Z', 1000)"
    )
    _insert(sql_conn, "(queue, run_at) VALUES ('q', '9999-12-30 00:00+00')")


def test_the_migration_clamps_rows_outside_the_bounds_and_records_it(empty_db_dsn: str) -> None:
    """A schema at version 4 with rows a producer could insert then: after `init` each is
    within the bounds, with an audit event holding its values before and after."""
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(queries.get("migrations_table_create").render("leasectl"))
            for migration in queries.migrations()[:4]:
                conn.execute(migration.render("leasectl"))
                conn.execute(
                    queries.get("migration_record").render("leasectl"),
                    {"version": migration.version, "name": migration.name},
                )
        bad = [
            _insert(conn, "(queue, run_at, max_attempts) VALUES ('q', '-infinity', 2147483647)"),
            _insert(conn, "(queue, run_at) VALUES ('q', 'infinity')"),
            _insert(conn, "(queue, run_at) VALUES (repeat('x', 300), '20000-01-01')"),
        ]
        good = _insert(conn, "(queue) VALUES ('q')")
    with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
        assert 5 in store.db.migrate()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        fixed = conn.execute(
            "SELECT id, length(queue), run_at::text, max_attempts FROM leasectl.jobs ORDER BY id"
        ).fetchall()
        # (The event's JSON holds run_at as the migration's session wrote it: compared as such.)
        events = conn.execute(
            "SELECT job_id, actor, action, before->>'run_at', "
            "(after->>'run_at')::timestamptz::text, before->>'queue' = repeat('x', 300), "
            "after->>'max_attempts' FROM leasectl.job_events ORDER BY job_id"
        ).fetchall()
    low, high = "0001-01-02 00:00:00+00", "9999-12-30 00:00:00+00"
    assert fixed == [
        (bad[0], 1, low, 1000),
        (bad[1], 1, high, 5),
        (bad[2], 200, high, 5),
        (good, 1, fixed[3][2], 5),
    ]
    assert [e[:3] for e in events] == [(i, "leasectl init", "bounded") for i in bad]
    assert [e[3][:5] for e in events] == ["-infi", "infin", "20000"]
    assert [e[4:] for e in events] == [(low, False, "1000"), (high, False, "5"), (high, True, "5")]


# -- the readers --------------------------------------------------------------------------------


@pytest.fixture
def infinite(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Rows from before the bounds: infinite and out-of-range timestamps, a poison payload,
    beside an expired lease (so that `status --check` has something to report)."""
    _unbounded(sql_conn)
    ids = {
        "minus": _insert(sql_conn, "(queue, run_at) VALUES ('q', '-infinity')"),
        "plus": _insert(
            sql_conn, "(queue, run_at, created_at) VALUES ('q', 'infinity', '20000-01-01')"
        ),
        "poison": _insert(sql_conn, f"(queue, payload) VALUES ('p', {POISON})"),
        "processing": _insert(
            sql_conn,
            "(queue, status, lease_owner, lease_until, heartbeat_at) "
            "VALUES ('q', 'Processing', 'w', '-infinity', 'infinity')",
        ),
    }
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.workers (worker_id, hostname, pid, queues, lease_ttl, "
            "heartbeat_every, started_at, last_seen_at) "
            "VALUES ('w', 'h', 1, '{q}', '30s', '10s', '-infinity', 'infinity')"
        )
    return ids  # fmt: skip


def test_status_and_its_check_report_beside_infinite_values(
    db_dsn: str, infinite: dict[str, int]
) -> None:
    plain = cli("status", dsn=db_dsn)
    assert plain.returncode == 0, plain.stderr
    assert "q" in plain.stdout
    check = cli("status", "--check", "--json", dsn=db_dsn)
    assert check.returncode == 3, check.stderr  # the expired lease, not a usage error
    doc = json.loads(check.stdout)
    assert doc["check"] == {"expired": 1, "stuck": 0, "ok": False}
    assert doc["totals"]["oldest_due_at"] == "-infinity"
    # Due since -infinity: waiting "forever", and no number of seconds (it was 6.4e10).
    assert doc["totals"]["oldest_due_age_s"] is None
    assert [q["oldest_due_age_s"] for q in doc["queues"] if q["queue"] == "q"] == [None]
    # (The queues' table, above the pickup latency's, where the Processing job counts too.)
    queues = plain.stdout.split("Pickup latency")[0]
    [row] = [line for line in queues.splitlines() if line.startswith("q ")]
    assert row.split()[3] == "forever"
    [owner] = doc["owners"]
    assert (owner["started_at"], owner["last_seen_at"]) == ("-infinity", "infinity")


def test_status_says_a_job_due_since_the_earliest_run_at_waited_forever(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """The schema's earliest run_at (what migration 5 made of '-infinity', and still allowed)
    is due since forever, in words and in JSON; a job due a minute ago is not."""
    _insert(sql_conn, "(queue, run_at) VALUES ('old', '0001-01-02 00:00+00')")
    _insert(sql_conn, "(queue, run_at) VALUES ('new', now() - interval '1 minute')")
    plain = cli("status", dsn=db_dsn)
    assert plain.returncode == 0, plain.stderr
    rows = [line.split() for line in plain.stdout.splitlines()]
    oldest = {row[0]: row[3] for row in rows if row and row[0] in ("old", "new", "total")}
    assert oldest["old"] == "forever" and oldest["total"] == "forever"
    assert oldest["new"].startswith("1m")
    doc = json.loads(cli("status", "--json", dsn=db_dsn).stdout)
    queues = {q["queue"]: q for q in doc["queues"]}
    assert queues["old"]["oldest_due_at"] == "0001-01-02T00:00:00+00:00"
    assert queues["old"]["oldest_due_age_s"] is None and doc["totals"]["oldest_due_age_s"] is None
    assert 60 <= queues["new"]["oldest_due_age_s"] < 600


def test_inspect_shows_infinite_values_and_a_poison_payload(
    db_dsn: str, infinite: dict[str, int]
) -> None:
    for key in ("minus", "plus", "processing"):
        human = cli("inspect", str(infinite[key]), dsn=db_dsn)
        assert human.returncode == 0, human.stderr
        assert "infinity" in human.stdout
    plus = json.loads(cli("inspect", str(infinite["plus"]), "--json", dsn=db_dsn).stdout)
    assert (plus["job"]["run_at"], plus["job"]["created_at"]) == ("infinity", "infinity")
    poison = cli("inspect", str(infinite["poison"]), "--json", dsn=db_dsn)
    assert poison.returncode == 0, poison.stderr
    assert '"payload": ' + "[" * 5000 + "]" * 5000 in poison.stdout
    assert json.loads(poison.stdout.replace("[" * 5000 + "]" * 5000, "0"))["job"]["payload"] == 0
    human = cli("inspect", str(infinite["poison"]), dsn=db_dsn)
    assert human.returncode == 0, human.stderr
    assert "payload: first 4,096 of 10,000 characters" in human.stdout


def test_inspect_json_of_a_deep_payload_is_exact(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    deep = '{"a": ' * 900 + "12345678901234567.89" + "}" * 900
    job_id = _insert(sql_conn, f"(queue, payload) VALUES ('q', '{deep}'::jsonb)")
    proc = cli("inspect", str(job_id), "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert deep in proc.stdout


def test_the_console_snapshot_and_the_watcher_read_infinite_values(
    store: Stores, infinite: dict[str, int]
) -> None:
    snapshot = store.panels.snapshot(None, 50)
    assert {j.id for j in snapshot.pending} >= {infinite["minus"], infinite["plus"]}
    [expired] = snapshot.stuck
    assert (expired.id, expired.lease_until, expired.heartbeat_at) == (
        infinite["processing"],
        TIMESTAMP_MIN,
        TIMESTAMP_MAX,
    )
    assert snapshot.counts.oldest_due_at == TIMESTAMP_MIN
    [listed] = store.ops.list_expired(limit=10, queue=None)
    assert listed.lease_until == TIMESTAMP_MIN
    assert store.ops.get_job(infinite["poison"]).payload.reason == TOO_DEEP  # type: ignore[union-attr]


# -- the worker --------------------------------------------------------------------------------


def test_a_worker_fails_jobs_it_cannot_load_and_goes_on(
    store: Stores, sql_conn: psycopg.Connection[Any], run_worker: Any
) -> None:
    _unbounded(sql_conn)
    poison = _insert(sql_conn, f"(queue, payload) VALUES ('p', {POISON})")
    minus = _insert(sql_conn, "(queue, run_at) VALUES ('p', '-infinity')")
    [good] = store.ops.enqueue([{"n": 1}], queue="p")
    handled: list[int] = []
    worker = run_worker(
        lambda ctx: handled.append(ctx.job.id), queues=("p",), poll_interval=timedelta(seconds=0.05)
    )
    wait_until(
        lambda: (
            _states(sql_conn, [poison, minus, good])
            == [
                (poison, "Failed", TOO_DEEP),
                (minus, "Failed", MINUS_INFINITY),
                (good, "Completed", None),
            ]
        ),
        what="the poison jobs failed and the good one completed",
    )
    assert handled == [good]  # the handler never saw the others
    assert not worker.closed.is_set() and worker.stats.failed == 2
    assert sql_conn.execute(
        "SELECT job_id, outcome::text, error FROM leasectl.job_attempts ORDER BY job_id"
    ).fetchall() == [
        (poison, "failed", TOO_DEEP),
        (minus, "failed", MINUS_INFINITY),
        (good, "completed", None),
    ]
    # And at concurrency > 1 (handler threads), a lapsed poison lease taken over.
    again = _insert(
        sql_conn,
        f"(queue, payload, status, lease_owner, lease_until, attempts) "
        f"VALUES ('c', {POISON}, 'Processing', 'dead', now() - interval '1 s', 1)",
    )
    [later] = store.ops.enqueue([{}], queue="c")
    run_worker(lambda ctx: handled.append(ctx.job.id), queues=("c",), concurrency=4,
               poll_interval=timedelta(seconds=0.05))  # fmt: skip
    wait_until(
        lambda: (
            _states(sql_conn, [again, later])
            == [(again, "Failed", TOO_DEEP), (later, "Completed", None)]
        ),
        what="the taken-over poison job failed",
    )


@pytest.fixture
def leasectl_worker(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []
    log = (tmp_path / "worker.log").open("wb")

    def start(queue: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "leasectl", "worker", "-q", queue, "--handler",
                "tests.handlers:noop", "--worker-id", "real", "--poll-interval", "50ms",
                "--grace", "1s",
            ],
            cwd=ROOT,
            env=_env(db_dsn),
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    log.close()


def test_the_leasectl_worker_command_fails_poison_jobs_and_stays_up(
    store: Stores, sql_conn: psycopg.Connection[Any], leasectl_worker: Any, tmp_path: Path
) -> None:
    _unbounded(sql_conn)
    poison = _insert(sql_conn, f"(queue, payload) VALUES ('r', {POISON})")
    minus = _insert(sql_conn, "(queue, run_at) VALUES ('r', '-infinity')")
    [good] = store.ops.enqueue([{}], queue="r")
    worker = leasectl_worker("r")
    wait_until(
        lambda: (
            _states(sql_conn, [poison, minus, good])
            == [
                (poison, "Failed", TOO_DEEP),
                (minus, "Failed", MINUS_INFINITY),
                (good, "Completed", None),
            ]
            or worker.poll() is not None
        ),
        what="the worker to fail the poison jobs and complete the good one",
    )
    assert worker.poll() is None, (tmp_path / "worker.log").read_text()
    [after] = store.ops.enqueue([{}], queue="r")
    wait_until(lambda: store.ops.get_job(after).status == JobStatus.COMPLETED, what="a later job")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()


def test_a_handler_never_sees_a_sentinel_when_the_payload_is_fine(
    store: Stores, run_worker: Any
) -> None:
    """The fallback loaders are for failures only: an ordinary job comes as always."""
    seen: list[JobContext] = []
    done = threading.Event()

    def handler(ctx: JobContext) -> None:
        seen.append(ctx)
        done.set()

    [job_id] = store.ops.enqueue([{"deep": [[[1]]]}], queue="f")
    run_worker(handler, queues=("f",), poll_interval=timedelta(seconds=0.05))
    assert done.wait(20)
    assert seen[0].payload == {"deep": [[[1]]]} and seen[0].lease.unusable is None
    assert seen[0].job.id == job_id
