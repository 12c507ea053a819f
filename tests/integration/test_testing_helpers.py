"""``leasectl.testing``: ``drain`` runs jobs through the worker's own claim, fence, completion
and failure path (checked in the database, not only in what it returns), the enqueue assertions
read the test's own transaction and fail with a readable message, and the pytest plugin's
fixture makes and drops a schema of its own."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl import AsyncJobContext, JobContext, PermanentError
from leasectl.core.errors import LeasectlError, UsageError
from leasectl.core.literal import visible
from leasectl.runtime.worker import WorkerConfig
from leasectl.testing import (
    DrainTimeout,
    Outcome,
    assert_enqueued,
    assert_not_enqueued,
    drain,
    fresh_schema,
)
from tests.hostile import NAMES, literal_probe

Q = "emails"


def statuses(conn: psycopg.Connection[Any]) -> dict[int, tuple[str, int]]:
    rows = conn.execute("SELECT id, status::text, attempts FROM leasectl.jobs").fetchall()
    return {job_id: (status, attempts) for job_id, status, attempts in rows}


def attempt_outcomes(conn: psycopg.Connection[Any], job_id: int) -> list[str]:
    rows = conn.execute(
        "SELECT outcome::text FROM leasectl.job_attempts WHERE job_id = %s ORDER BY attempt",
        (job_id,),
    ).fetchall()
    return [row[0] for row in rows]


def welcome(ctx: JobContext) -> None:
    if ctx.payload["to"] == "bounce":
        raise ValueError("mailbox full")
    if ctx.payload["to"] == "nobody":
        raise PermanentError("no such user")


def test_drain_completes_retries_and_fails_as_the_worker_does(
    sql_conn: psycopg.Connection[Any],
) -> None:
    ids = [
        leasectl.enqueue(sql_conn, queue=Q, payload={"to": to}).id
        for to in ("ada", "bounce", "nobody")
    ]
    other = leasectl.enqueue(sql_conn, queue="other", payload={"to": "ada"}).id

    runs = drain(sql_conn, Q, welcome)

    assert [(r.id, r.outcome, r.attempts) for r in runs] == [
        (ids[0], Outcome.COMPLETED, 1),
        (ids[1], Outcome.RETRYING, 1),
        (ids[2], Outcome.FAILED, 1),
    ]
    assert [r.error for r in runs] == [
        None,
        "ValueError: mailbox full",
        "leasectl.PermanentError: no such user",
    ]
    assert isinstance(runs[1].exception, ValueError)
    assert runs.outcomes() == {ids[0]: "completed", ids[1]: "retrying", ids[2]: "failed"}
    # What the database holds is what the worker's statements wrote (attempts closed too).
    now = statuses(sql_conn)
    assert now[ids[0]] == ("Completed", 1)
    assert now[ids[1]] == ("Pending", 1)  # due after its backoff: the drain stopped before it
    assert now[ids[2]] == ("Failed", 1)
    assert now[other] == ("Pending", 0)  # another queue's job is not run
    assert attempt_outcomes(sql_conn, ids[0]) == ["completed"]
    assert attempt_outcomes(sql_conn, ids[1]) == ["failed"]
    # The drain registered as a worker and stopped as one.
    stopped = sql_conn.execute(
        "SELECT count(*) FROM leasectl.workers WHERE stopped_at IS NOT NULL"
    ).fetchone()
    assert stopped == (1,)


def test_drain_runs_every_attempt_when_retries_are_due_at_once(
    sql_conn: psycopg.Connection[Any],
) -> None:
    job = leasectl.enqueue(sql_conn, queue=Q, payload={"to": "bounce"}, max_attempts=3).id

    runs = drain(sql_conn, Q, welcome, config=WorkerConfig(retry_base=timedelta(0)))

    assert [(r.attempts, r.outcome) for r in runs] == [
        (1, Outcome.RETRYING),
        (2, Outcome.RETRYING),
        (3, Outcome.FAILED),
    ]
    assert statuses(sql_conn)[job] == ("Failed", 3)


def test_drain_stops_after_max_jobs(sql_conn: psycopg.Connection[Any]) -> None:
    for n in range(3):
        leasectl.enqueue(sql_conn, queue=Q, payload={"to": f"user{n}"})

    runs = drain(sql_conn, Q, welcome, max_jobs=2)

    assert len(runs.completed) == 2
    # The second job's completion was written before the drain stopped.
    assert sorted(s for s, _ in statuses(sql_conn).values()) == [
        "Completed",
        "Completed",
        "Pending",
    ]


def test_drain_runs_an_async_handler_and_its_transaction(
    sql_conn: psycopg.Connection[Any],
) -> None:
    sql_conn.execute("CREATE TABLE public.sent (job_id bigint PRIMARY KEY)")
    ids = [leasectl.enqueue(sql_conn, queue=Q, payload={"to": "ada"}).id for _ in range(2)]

    async def send(ctx: AsyncJobContext) -> None:
        await asyncio.sleep(0)
        async with ctx.transaction() as conn:
            await conn.execute("INSERT INTO public.sent VALUES (%s)", (ctx.job.id,))

    runs = drain(sql_conn, Q, send)

    assert [(r.id, r.outcome) for r in runs] == [(i, Outcome.COMPLETED) for i in ids]
    assert sql_conn.execute("SELECT job_id FROM public.sent ORDER BY 1").fetchall() == [
        (i,) for i in ids
    ]
    assert {statuses(sql_conn)[i] for i in ids} == {("Completed", 1)}


def test_a_sync_handlers_transaction_commits_with_the_completion(
    sql_conn: psycopg.Connection[Any],
) -> None:
    sql_conn.execute("CREATE TABLE public.sent (job_id bigint PRIMARY KEY)")
    job = leasectl.enqueue(sql_conn, queue=Q, payload={}).id

    def send(ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute("INSERT INTO public.sent VALUES (%s)", (ctx.job.id,))

    runs = drain(sql_conn, Q, send)

    assert [(r.id, r.outcome) for r in runs] == [(job, Outcome.COMPLETED)]
    assert sql_conn.execute("SELECT job_id FROM public.sent").fetchall() == [(job,)]


def test_drain_reports_a_lease_lost_while_the_handler_ran(
    sql_conn: psycopg.Connection[Any],
) -> None:
    job = leasectl.enqueue(sql_conn, queue=Q, payload={}).id

    def cancelled_meanwhile(ctx: JobContext) -> None:
        # An operator takes the job away while it runs: the completion is refused (fenced).
        sql_conn.execute(
            "UPDATE leasectl.jobs SET lease_owner = 'someone else' WHERE id = %s", (job,)
        )

    runs = drain(sql_conn, Q, cancelled_meanwhile)

    assert [(r.id, r.outcome) for r in runs] == [(job, Outcome.LOST)]
    assert statuses(sql_conn)[job] == ("Processing", 1)  # not written by the drain


def test_an_async_handler_past_the_timeout_is_handed_back(
    sql_conn: psycopg.Connection[Any],
) -> None:
    job = leasectl.enqueue(sql_conn, queue=Q, payload={}).id

    async def hang(ctx: AsyncJobContext) -> None:
        await asyncio.Event().wait()

    with pytest.raises(DrainTimeout, match=r"still ran 0\.3s after") as caught:
        drain(sql_conn, Q, hang, timeout=timedelta(milliseconds=300))

    assert [(r.id, r.outcome) for r in caught.value.runs] == [(job, Outcome.RELEASED)]
    assert statuses(sql_conn)[job] == ("Pending", 1)  # released: due again, the attempt kept


def test_ctrl_c_in_a_handler_stops_the_drain_and_hands_the_job_back(
    sql_conn: psycopg.Connection[Any],
) -> None:
    job = leasectl.enqueue(sql_conn, queue=Q, payload={}).id
    after = leasectl.enqueue(sql_conn, queue=Q, payload={}).id

    def interrupted(ctx: JobContext) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        drain(sql_conn, Q, interrupted)
    assert statuses(sql_conn)[job] == ("Pending", 1)  # released, as `leasectl worker` does
    assert statuses(sql_conn)[after] == ("Pending", 0)  # the next one was not claimed


def test_drain_refuses_a_connection_inside_a_transaction(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        leasectl.enqueue(conn, queue=Q, payload={})  # (not committed)
        with pytest.raises(UsageError, match="inside a transaction: commit it first"):
            drain(conn, Q, welcome)


def test_drain_on_a_schema_not_made_says_so(db_dsn: str) -> None:
    async def never(ctx: AsyncJobContext) -> None:
        raise AssertionError("not called")

    with pytest.raises(LeasectlError, match="nowhere"):
        drain(db_dsn, Q, never, schema="nowhere")


def test_drain_takes_a_dsn(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    job = leasectl.enqueue(sql_conn, queue=Q, payload={"to": "ada"}).id
    assert drain(db_dsn, Q, welcome).outcomes() == {job: Outcome.COMPLETED}


def test_assertions_see_the_tests_own_transaction(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        leasectl.enqueue(conn, queue=Q, payload={"to": "ada", "lang": "en"})
        found = assert_enqueued(conn, Q, payload_contains={"to": "ada"})
        assert [job.payload for job in found] == [{"to": "ada", "lang": "en"}]
        assert_enqueued(conn, Q, count=1)
        assert_not_enqueued(conn, Q, payload_contains={"to": "bob"})
        assert_not_enqueued(conn, "other")
        conn.rollback()
        assert_not_enqueued(conn, Q)


def test_assertion_failures_say_what_the_queue_holds(sql_conn: psycopg.Connection[Any]) -> None:
    a = leasectl.enqueue(sql_conn, queue=Q, payload={"to": "ada"}).id
    b = leasectl.enqueue(sql_conn, queue=Q, payload={"to": "bob"}).id

    with pytest.raises(AssertionError) as missing:
        assert_enqueued(sql_conn, Q, payload_contains={"to": "eve"})
    assert str(missing.value) == (
        'expected a job in queue \'emails\' whose payload contains {"to": "eve"}; found 0; '
        f'the queue holds:\n  job {a} Pending: {{"to": "ada"}}\n  job {b} Pending: {{"to": "bob"}}'
    )
    with pytest.raises(AssertionError, match="expected 3 jobs in queue 'emails'; found 2:"):
        assert_enqueued(sql_conn, Q, count=3)
    with pytest.raises(AssertionError) as present:
        assert_not_enqueued(sql_conn, Q, payload_contains={"to": "bob"})
    assert str(present.value) == (
        'expected no job in queue \'emails\' whose payload contains {"to": "bob"}; found:\n'
        f'  job {b} Pending: {{"to": "bob"}}'
    )
    with pytest.raises(AssertionError, match="found 0; the queue holds no job"):
        assert_enqueued(sql_conn, "empty", payload_contains={"to": "eve"})


def test_assertion_messages_keep_hostile_text_as_data(sql_conn: psycopg.Connection[Any]) -> None:
    for text in (name for name in NAMES if name.strip()):  # (a queue name is not blank)
        leasectl.enqueue(sql_conn, queue=text, payload={"to": text})
        with pytest.raises(AssertionError) as caught:
            assert_not_enqueued(sql_conn, text)
        message = str(caught.value)
        # No raw control, format or separator character (an escape sequence, a carriage
        # return, a bidi override) reaches the terminal; the printable part is there, literally.
        assert visible(message, multiline=True) == message, repr(message)
        assert literal_probe(text) in message, (text, message)


def test_fresh_schema_is_migrated_and_dropped(db_dsn: str) -> None:
    with fresh_schema(db_dsn) as made, psycopg.connect(db_dsn, autocommit=True) as conn:
        job = leasectl.enqueue(conn, queue=Q, payload={"to": "ada"}, schema=made.schema).id
        made.assert_enqueued(conn, Q, {"to": "ada"})
        assert made.drain(Q, welcome).outcomes() == {job: Outcome.COMPLETED}
        made.assert_not_enqueued(conn, "other")
    with psycopg.connect(db_dsn) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (made.schema,)
        ).fetchone()
    assert left == (0,)


# An inner pytest without the plugins it does not need (the console's snapshots load Textual).
LIGHT = ("-p", "no:cacheprovider", "-p", "no:textual-snapshot", "-p", "no:syrupy")

PLUGIN_TEST = """
import os

import psycopg

import leasectl
from leasectl.testing import Outcome


def handle(ctx):
    pass


def test_uses_the_fixture(leasectl_schema):
    assert os.environ["LEASECTL_SCHEMA"] == leasectl_schema.schema
    with psycopg.connect(leasectl_schema.dsn, autocommit=True) as conn:
        leasectl.enqueue(conn, queue="q", payload={"n": 1}, schema=leasectl_schema.schema)
        leasectl_schema.assert_enqueued(conn, "q", {"n": 1})
    runs = leasectl_schema.drain("q", handle)
    assert [r.outcome for r in runs] == [Outcome.COMPLETED]
    with open("schema.txt", "w") as f:
        f.write(leasectl_schema.schema)
"""


def test_the_plugins_fixture_in_a_project_of_its_own(
    pytester: pytest.Pytester, db_dsn: str
) -> None:
    """The plugin is loaded by its entry point (nothing names it here); the fixture's schema
    exists during the test and is gone after it."""
    pytester.makepyfile(test_app=PLUGIN_TEST)
    result = pytester.runpytest_subprocess("--leasectl-dsn", db_dsn, *LIGHT)
    result.assert_outcomes(passed=1)
    schema = (pytester.path / "schema.txt").read_text()
    with psycopg.connect(db_dsn) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    assert schema.startswith("leasectl_test_") and left == (0,)


@pytest.mark.full
def test_the_fixture_without_a_database_says_how_to_give_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEASECTL_TEST_DSN", raising=False)
    pytester.makepyfile(test_app="def test_x(leasectl_schema):\n    pass\n")
    result = pytester.runpytest_subprocess(*LIGHT)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*leasectl_schema needs a test database: --leasectl-dsn*"])


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = textwrap.dedent(
        """
        import sys
        import leasectl.testing.plugin
        heavy = [m for m in ("psycopg", "psycopg_pool", "leasectl.runtime", "leasectl.db",
                             "rich", "textual", "typer") if m in sys.modules]
        print(heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.full
def test_the_payment_examples_own_tests_pass_with_the_plugin(db_dsn: str) -> None:
    """examples/payments/tests use the fixture, ``drain`` and the assertions as an application
    would; run as their docstring says, against a fresh database."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "examples/payments/tests", "--leasectl-dsn", db_dsn,
         *LIGHT, "-p", "no:xdist", "-q"],
        cwd=root, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout, proc.stdout
