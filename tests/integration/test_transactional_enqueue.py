"""Enqueue inside the application's transaction (leasectl.enqueue and friends): the job and the
workers' wake-up exist only if that transaction commits; a bad value raises before any SQL and
leaves the transaction usable; the caller's transaction state and autocommit are left alone.
The README's three recipes (plain psycopg, SQLAlchemy, Django) run here as written there."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql

import leasectl
from leasectl.core.errors import UsageError
from leasectl.db.connection import channel_for

SCHEMA = "leasectl"
CHANNEL = channel_for(SCHEMA)
MARK = "test-marker"


def jobs(conn: psycopg.Connection[Any], queue: str | None = None) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, queue, payload, priority, max_attempts, unique_key, run_at > now() "
        "FROM leasectl.jobs WHERE %(q)s::text IS NULL OR queue = %(q)s ORDER BY id",
        {"q": queue},
    ).fetchall()


@pytest.fixture
def listener(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        yield conn


def heard_until_marker(
    listener: psycopg.Connection[Any], sql_conn: psycopg.Connection[Any]
) -> list[str]:
    """The notifications on the enqueue channel before a marker sent now, from another
    connection, in autocommit: PostgreSQL delivers notifications in commit order, so whatever
    was sent (committed) before the marker arrives before it."""
    sql_conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, MARK))
    heard: list[str] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for note in listener.notifies(timeout=1.0, stop_after=1):
            if note.payload == MARK:
                return heard
            heard.append(note.payload)
    raise AssertionError(f"the marker never arrived; heard {heard}")


def test_a_job_exists_only_if_the_transaction_commits(
    db_dsn: str, sql_conn: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(db_dsn) as conn:
        conn.execute("CREATE TABLE payments (id int)")
        conn.commit()
        # Rolled back: neither the payment nor its job; no wake-up either.
        conn.execute("INSERT INTO payments VALUES (1)")
        rolled = leasectl.enqueue(conn, queue="payments", payload={"payment": 1})
        assert not rolled.duplicate
        assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        assert jobs(sql_conn) == []  # not visible to others before the commit
        assert heard_until_marker(listener, sql_conn) == []  # not sent before the commit
        conn.rollback()
        assert jobs(sql_conn) == []
        assert heard_until_marker(listener, sql_conn) == []
        # Committed: both, and the wake-up names the queue.
        conn.execute("INSERT INTO payments VALUES (2)")
        kept = leasectl.enqueue(
            conn, queue="payments", payload={"payment": 2}, priority=-3, max_attempts=7
        )
        assert heard_until_marker(listener, sql_conn) == []
        conn.commit()
        assert heard_until_marker(listener, sql_conn) == ["payments"]
    assert kept.id != rolled.id
    assert jobs(sql_conn) == [(kept.id, "payments", {"payment": 2}, -3, 7, None, False)]


def test_the_callers_transaction_and_autocommit_are_left_alone(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(db_dsn) as conn:
        # Idle, not in autocommit: the enqueue opens the transaction, as any statement does,
        # and leaves it open.
        leasectl.enqueue(conn, queue="q", payload=1)
        assert conn.autocommit is False
        assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        assert jobs(sql_conn) == []
        conn.rollback()
        # Inside conn.transaction(): a savepoint or not, the block decides.
        with conn.transaction():
            with conn.transaction():
                leasectl.enqueue(conn, queue="q", payload=2)
            assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
            assert jobs(sql_conn) == []
        assert [r[2] for r in jobs(sql_conn)] == [2]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # In autocommit, the statement is its own transaction.
        leasectl.enqueue(conn, queue="q", payload=3)
        assert conn.autocommit is True
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
        assert [r[2] for r in jobs(sql_conn)] == [2, 3]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"queue": ""}, "queue must not be empty"),
    ({"queue": "x" * 201}, "queue has at most 200 characters"),
    ({"queue": "a\x00b"}, "NUL"),
    ({"queue": 7}, "queue must be a string"),
    ({"payload": {1, 2}}, "not JSON-serialisable"),
    ({"payload": object()}, "not JSON-serialisable"),
    ({"payload": float("nan")}, "not JSON-serialisable"),
    ({"payload": {"a": "b\x00"}}, "NUL"),
    ({"payload": "\ud800"}, "surrogate"),
    ({"delay": timedelta(seconds=-1)}, "delay must be between 0"),
    ({"delay": 5}, "delay must be a datetime.timedelta"),
    ({"priority": 2**31}, "priority must be between"),
    ({"priority": True}, "priority must be an integer"),
    ({"max_attempts": 0}, "max_attempts must be between 1"),
    ({"max_attempts": 1001}, "max_attempts must be between 1"),
    ({"unique_key": ""}, "unique_key must not be empty"),
    ({"unique_key": "k" * 201}, "unique_key has at most 200 characters"),
    ({"schema": ""}, "invalid schema name"),
]


@pytest.mark.parametrize(("bad", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_value_raises_before_any_sql_and_the_transaction_goes_on(
    db_dsn: str, sql_conn: psycopg.Connection[Any], bad: dict[str, Any], message: str
) -> None:
    with psycopg.connect(db_dsn) as conn:
        conn.execute("CREATE TEMP TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
        args: dict[str, Any] = {"queue": "q", "payload": {"ok": True}, **bad}
        with pytest.raises(UsageError, match=message):
            leasectl.enqueue(conn, **args)
        # The transaction is usable: neither aborted nor ended.
        assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
        # In a batch, one bad job stops all of them before any SQL.
        schema = args.pop("schema", SCHEMA)
        with pytest.raises(UsageError, match=message):
            leasectl.enqueue_many(
                conn, [leasectl.NewJob(payload=1), leasectl.NewJob(**args)], schema=schema
            )
        assert conn.info.transaction_status == pq.TransactionStatus.INTRANS
        leasectl.enqueue(conn, queue="q", payload="fine")
        conn.commit()
    assert [r[2] for r in jobs(sql_conn)] == ["fine"]


def test_the_wrong_kind_of_connection_is_a_type_error(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn, pytest.raises(TypeError, match="AsyncConnection"):
        asyncio.run(leasectl.enqueue_async(conn, queue="q"))  # type: ignore[arg-type]

    async def sync_call_on_async() -> None:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            with pytest.raises(TypeError, match="_async form"):
                leasectl.enqueue(aconn, queue="q")  # type: ignore[arg-type]

    asyncio.run(sync_call_on_async())


def test_enqueue_many_takes_each_jobs_own_values_and_wakes_each_queue(
    db_dsn: str, sql_conn: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    given = [
        leasectl.NewJob({"n": 1}, queue="a"),
        leasectl.NewJob({"n": 2}, queue="b", priority=5, max_attempts=2),
        leasectl.NewJob({"n": 3}, queue="a", delay=timedelta(hours=1), unique_key="k3"),
        leasectl.NewJob([1.5, "x"], queue="b"),
    ]
    with psycopg.connect(db_dsn) as conn:
        done = leasectl.enqueue_many(conn, given)
        conn.commit()
    assert [d.duplicate for d in done] == [False] * 4
    rows = {r[0]: r[1:] for r in jobs(sql_conn)}
    assert [rows[d.id] for d in done] == [
        ("a", {"n": 1}, 0, 5, None, False),
        ("b", {"n": 2}, 5, 2, None, False),
        ("a", {"n": 3}, 0, 5, "k3", True),
        ("b", [1.5, "x"], 0, 5, None, False),
    ]
    assert sorted(heard_until_marker(listener, sql_conn)) == ["a", "b"]
    with psycopg.connect(db_dsn) as conn:
        assert leasectl.enqueue_many(conn, []) == []


def test_copies_of_one_job_keep_their_order(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        done = leasectl.enqueue_many(conn, [leasectl.NewJob(i, queue="q") for i in range(50)])
    rows = {r[0]: r[2] for r in jobs(sql_conn)}
    assert [rows[d.id] for d in done] == list(range(50))


def test_the_async_forms_join_the_async_transaction(
    db_dsn: str, sql_conn: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    async def scenario() -> tuple[leasectl.Enqueued, list[leasectl.Enqueued]]:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            await leasectl.enqueue_async(aconn, queue="async", payload="gone")
            await aconn.rollback()
            async with aconn.transaction():
                one = await leasectl.enqueue_async(aconn, queue="async", payload="one")
                many = await leasectl.enqueue_many_async(
                    aconn,
                    [leasectl.NewJob("two", queue="async"), leasectl.NewJob("three", "async")],
                )
                assert jobs(sql_conn) == []
                assert heard_until_marker(listener, sql_conn) == []
            return one, many

    one, many = asyncio.run(scenario())
    assert [r[2] for r in jobs(sql_conn)] == ["one", "two", "three"]
    assert [one.id, *(m.id for m in many)] == [r[0] for r in jobs(sql_conn)]
    # PostgreSQL folds a transaction's identical notifications into one.
    assert heard_until_marker(listener, sql_conn) == ["async"]


def test_a_database_error_is_psycopgs_own(db_dsn: str, empty_db_dsn: str) -> None:
    """No schema there: the caller sees the error of the statement that failed, as for its own."""
    with psycopg.connect(empty_db_dsn) as conn, pytest.raises(psycopg.errors.UndefinedTable):
        leasectl.enqueue(conn, queue="q")


# -- the README's recipes ----------------------------------------------------------------------


def test_recipe_psycopg(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    sql_conn.execute("CREATE TABLE payments (id int, amount int)")
    dsn = db_dsn
    # As in the README:
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("INSERT INTO payments (id, amount) VALUES (%s, %s)", (42, 1999))
        leasectl.enqueue(conn, queue="receipts", payload={"payment": 42})
    assert [r[1:3] for r in jobs(sql_conn)] == [("receipts", {"payment": 42})]


def _sqlalchemy_url(dsn: str) -> Any:
    from sqlalchemy.engine import URL

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return URL.create(
        "postgresql+psycopg",
        username=str(info.get("user") or ""),
        password=str(info["password"]) if info.get("password") else None,
        host=str(info.get("host") or ""),
        port=int(info["port"]) if info.get("port") else None,
        database=str(info["dbname"]),
        query={"passfile": str(info["passfile"])} if info.get("passfile") else {},
    )


def test_recipe_sqlalchemy(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    sql_conn.execute("CREATE TABLE payments (id int, amount int)")
    engine = create_engine(_sqlalchemy_url(db_dsn))
    try:
        # As in the README: the Session's connection, its psycopg connection underneath.
        with Session(engine) as session, session.begin():
            session.execute(text("INSERT INTO payments VALUES (42, 1999)"))
            conn = session.connection().connection.driver_connection
            leasectl.enqueue(conn, queue="receipts", payload={"payment": 42})
        # Rolled back with the session's transaction.
        with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
            session.execute(text("INSERT INTO payments VALUES (43, 5)"))
            conn = session.connection().connection.driver_connection
            leasectl.enqueue(conn, queue="receipts", payload={"payment": 43})
            raise RuntimeError("the payment failed")
        # A Core Connection the same way.
        with engine.begin() as connection:
            leasectl.enqueue(
                connection.connection.driver_connection, queue="receipts", payload={"payment": 44}
            )
    finally:
        engine.dispose()
    assert [r[2] for r in jobs(sql_conn)] == [{"payment": 42}, {"payment": 44}]
    assert sql_conn.execute("SELECT id FROM payments").fetchall() == [(42,)]


def test_recipe_django(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    import django
    from django.conf import settings

    sql_conn.execute("CREATE TABLE payments (id int, amount int)")
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": info["dbname"],
        "USER": info.get("user") or "",
        "PASSWORD": info.get("password") or "",
        "HOST": info.get("host") or "",
        "PORT": info.get("port") or "",
        "OPTIONS": {"passfile": info["passfile"]} if info.get("passfile") else {},
    }
    if not settings.configured:
        settings.configure(DATABASES={"default": database}, USE_TZ=True)
        django.setup()
    from django.db import connection, connections, transaction

    try:
        # As in the README: the psycopg connection under Django's, inside atomic().
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO payments VALUES (42, 1999)")
            leasectl.enqueue(connection.connection, queue="receipts", payload={"payment": 42})
        with pytest.raises(RuntimeError), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO payments VALUES (43, 5)")
            leasectl.enqueue(connection.connection, queue="receipts", payload={"payment": 43})
            raise RuntimeError("the payment failed")
    finally:
        connections.close_all()
    assert [r[2] for r in jobs(sql_conn)] == [{"payment": 42}]
    assert sql_conn.execute("SELECT id FROM payments").fetchall() == [(42,)]


# -- autocommit ----------------------------------------------------------------------------------


def test_autocommit_each_call_is_committed_at_once(
    db_dsn: str, sql_conn: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    """On a connection in autocommit, enqueue and enqueue_many are their own transaction: the
    jobs are visible from another connection, and the workers' wake-up sent, when the call
    returns; the connection is left in autocommit, with no transaction open."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        one = leasectl.enqueue(conn, queue="auto", payload="one")
        assert [r[0] for r in jobs(sql_conn, "auto")] == [one.id]
        assert heard_until_marker(listener, sql_conn) == ["auto"]
        many = leasectl.enqueue_many(
            conn,
            [
                leasectl.NewJob("two", queue="auto"),
                leasectl.NewJob("three", queue="auto2", unique_key="k"),
            ],
        )
        assert conn.autocommit is True
        assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert [r[2] for r in jobs(sql_conn)] == ["one", "two", "three"]
    assert [one.id, *(m.id for m in many)] == [r[0] for r in jobs(sql_conn)]
    assert sorted(heard_until_marker(listener, sql_conn)) == ["auto", "auto2"]


def test_autocommit_async_forms_are_committed_at_once(
    db_dsn: str, sql_conn: psycopg.Connection[Any], listener: psycopg.Connection[Any]
) -> None:
    async def scenario() -> None:
        aconn = await psycopg.AsyncConnection.connect(db_dsn, autocommit=True)
        async with aconn:
            one = await leasectl.enqueue_async(aconn, queue="aauto", payload="one")
            assert [r[0] for r in jobs(sql_conn, "aauto")] == [one.id]
            assert heard_until_marker(listener, sql_conn) == ["aauto"]
            many = await leasectl.enqueue_many_async(
                aconn,
                [
                    leasectl.NewJob("two", queue="aauto"),
                    leasectl.NewJob("three", queue="aauto", unique_key="k"),
                ],
            )
            assert [r[0] for r in jobs(sql_conn, "aauto")] == [one.id, *(m.id for m in many)]
            assert heard_until_marker(listener, sql_conn) == ["aauto"]
            assert aconn.autocommit is True
            assert aconn.info.transaction_status == pq.TransactionStatus.IDLE

    asyncio.run(scenario())


class _FailsAfterTheFirstStatement(Exception):
    pass


@pytest.mark.parametrize("form", ["sync", "async"])
def test_autocommit_enqueue_many_with_keys_is_all_or_nothing(
    db_dsn: str, sql_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """Unique keys may take a second statement (a key another transaction committed while the
    first waited on it); in autocommit the two run in one transaction, so a failure after the
    first (here: injected between them) leaves none of the jobs, and the connection usable."""
    from leasectl.db import producer

    real_take = producer.Enqueue.take

    def take_then_fail(plan: producer.Enqueue, rows: Any) -> None:
        real_take(plan, rows)
        raise _FailsAfterTheFirstStatement

    batch = [leasectl.NewJob("plain", queue="kq"), leasectl.NewJob("keyed", "kq", unique_key="k")]
    monkeypatch.setattr(producer.Enqueue, "take", take_then_fail)
    if form == "sync":
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            with pytest.raises(_FailsAfterTheFirstStatement):
                leasectl.enqueue_many(conn, batch)
            assert conn.info.transaction_status == pq.TransactionStatus.IDLE
            assert jobs(sql_conn) == []
            monkeypatch.setattr(producer.Enqueue, "take", real_take)
            assert len(leasectl.enqueue_many(conn, batch)) == 2
    else:

        async def scenario() -> None:
            aconn = await psycopg.AsyncConnection.connect(db_dsn, autocommit=True)
            async with aconn:
                with pytest.raises(_FailsAfterTheFirstStatement):
                    await leasectl.enqueue_many_async(aconn, batch)
                assert aconn.info.transaction_status == pq.TransactionStatus.IDLE
                assert jobs(sql_conn) == []
                monkeypatch.setattr(producer.Enqueue, "take", real_take)
                assert len(await leasectl.enqueue_many_async(aconn, batch)) == 2

        asyncio.run(scenario())
    assert [r[2] for r in jobs(sql_conn)] == ["plain", "keyed"]
