"""The worker's hot statements go through libpq directly (leasectl/db/hot.py): their parameters
are encoded by hand, they are prepared once per connection, and they must behave like any
other statement for everything around them (errors, lost statements, other threads)."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import conninfo
from psycopg.adapt import Transformer

from leasectl.core.errors import SchemaMissing
from leasectl.core.models import Lease
from leasectl.db.hot import BINARY, ENCODERS
from tests.stores import Stores
from tests.util import wait_for_lock_wait

TTL = timedelta(seconds=30)
INTERVAL = 1186
TIMESTAMPTZ = 1184
INT8_ARRAY = 1016


def sent(conn: psycopg.Connection[Any], oid: int, value: object) -> Any:
    """``value`` as the hot path sends a parameter of type ``oid``, read back by the server."""
    encoded = ENCODERS[oid]("utf-8")(value)
    binary = 1 if oid in BINARY else 0
    result = conn.pgconn.exec_params(b"SELECT $1", [encoded], [oid], [binary])
    assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
    tx = Transformer(conn)
    tx.set_pgresult(result)
    return tx.load_rows(0, 1, tuple)[0][0]


@settings(max_examples=200, deadline=None)
@given(st.timedeltas(min_value=-timedelta(days=10_000), max_value=timedelta(days=10_000)))
def test_an_interval_is_sent_exactly(server_dsn: str, value: timedelta) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert sent(conn, INTERVAL, value) == value


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5, minutes=-30))]),
    )
)
def test_a_timestamp_is_sent_exactly(server_dsn: str, value: datetime) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert sent(conn, TIMESTAMPTZ, value) == value


def test_minus_infinity_is_sent_as_such(server_dsn: str) -> None:
    """The claim key of the queue's head (work.CLAIM_FROM_HEAD) starts at -infinity."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        encoded = ENCODERS[TIMESTAMPTZ]("utf-8")("-infinity")
        result = conn.pgconn.exec_params(
            b"SELECT $1 = '-infinity'::timestamptz", [encoded], [TIMESTAMPTZ], [1]
        )
        assert result.get_value(0, 0) == b"t"


def test_an_integer_array_is_sent_as_a_list_or_a_literal(server_dsn: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        cases: list[tuple[Any, list[int]]] = [
            ([], []),
            ([1, -2, 2**62], [1, -2, 2**62]),
            ("{3,4}", [3, 4]),  # the store passes its arrays as ready-made literals
        ]
        for value, expected in cases:
            text = ENCODERS[INT8_ARRAY]("utf-8")(value).decode()
            assert conn.execute("SELECT %s::text::bigint[]", (text,)).fetchone() == (expected,)


def test_text_is_sent_in_the_connection_encoding(server_dsn: str) -> None:
    """A database in LATIN1: a queue named with a non-ASCII letter is claimed from all the same."""
    name = "leasectl_hot_latin1"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(
            f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    dsn = conninfo.make_conninfo(server_dsn, dbname=name)
    try:
        with Stores.connect(dsn, "leasectl", check_schema=False) as setup:
            setup.db.migrate()
            [job_id] = setup.ops.enqueue([{"city": "Zürich"}], queue="café")
        with Stores.connect(dsn, "leasectl", generic_plans=True) as worker_store:
            leases, _ = worker_store.work.complete_and_claim([], "café", "wörker", TTL, 1)
        assert [(lease.job_id, lease.job.queue, lease.owner) for lease in leases] == [
            (job_id, "café", "wörker")
        ]
        assert leases[0].job.payload == {"city": "Zürich"}
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def claim_one(store: Stores, done: list[Lease]) -> list[Lease]:
    leases, refused = store.work.complete_and_claim(done, "q", "w-1", TTL, 1, take_expired=False)
    assert refused == set()
    return leases


def test_a_statement_the_server_lost_is_prepared_again(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    store.ops.enqueue([{"n": n} for n in range(3)], queue="q")
    with Stores.connect(db_dsn, "leasectl", generic_plans=True) as worker_store:
        [first] = claim_one(worker_store, [])
        pids = [kept.conn.info.backend_pid for kept in worker_store.work._kept.values()]
        # Another session cannot drop our statements; our own connection can: as DISCARD ALL
        # from a pooler in front of the server would.
        [kept] = worker_store.work._kept.values()
        kept.conn.execute("DEALLOCATE ALL")
        [second] = claim_one(worker_store, [first])
        assert [k.conn.info.backend_pid for k in worker_store.work._kept.values()] == pids
        assert second.job.payload == {"n": 1}
        claim_one(worker_store, [second])
    rows = sql_conn.execute("SELECT status::text FROM leasectl.jobs ORDER BY id").fetchall()
    assert rows == [("Completed",), ("Completed",), ("Processing",)]


def test_a_server_error_is_the_same_error_as_through_a_cursor(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    store.ops.enqueue([{}], queue="q")
    with Stores.connect(db_dsn, "leasectl", generic_plans=True) as worker_store:
        claim_one(worker_store, [])
        sql_conn.execute("ALTER TABLE leasectl.job_attempts RENAME TO job_attempts_gone")
        with pytest.raises(SchemaMissing):  # from UndefinedTable, as for any other statement
            claim_one(worker_store, [])


def test_a_hot_statement_waiting_for_the_server_leaves_the_other_threads_running(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The call waits without the GIL: a worker's heartbeats and deadlines go on meanwhile.

    Another process locks the jobs table until this thread lets it go; the claims (the first
    one, which prepares the statement, and a later one) wait for it. This thread must see each
    of them waiting on the lock while it waits, and only then lets the lock go: if the call held
    the GIL, this thread could not look at all while the lock was held (the holder gives up
    after a minute, so such a failure ends as a timeout, not a hang)."""
    store.ops.enqueue([{}, {}], queue="q")
    holder = (
        "import select, sys, psycopg\n"
        "with psycopg.connect(sys.argv[1]) as conn:\n"
        "    conn.execute('LOCK TABLE leasectl.jobs IN ACCESS EXCLUSIVE MODE')\n"
        "    print('locked', flush=True)\n"
        "    select.select([sys.stdin], [], [], float(sys.argv[2]))\n"
    )
    with Stores.connect(db_dsn, "leasectl", generic_plans=True) as worker_store:
        done: list[Lease] = []
        for _ in range(2):  # the first call prepares, the second only executes
            locker = subprocess.Popen(
                [sys.executable, "-c", holder, db_dsn, "60"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
                result: list[list[Lease]] = []
                call = threading.Thread(
                    target=lambda out=result, held=done: out.append(claim_one(worker_store, held))
                )
                call.start()
                wait_for_lock_wait(sql_conn, what="the claim to wait for the lock")
                assert call.is_alive()  # seen waiting while it waits
                assert locker.poll() is None, "the lock was let go before the claim was seen"
                assert locker.stdin is not None
                locker.stdin.close()  # let the lock go
                call.join(30)
                assert not call.is_alive()
                done = result[0]
            finally:
                if locker.stdin is not None and not locker.stdin.closed:
                    locker.stdin.close()
                locker.wait(90)
                if locker.stdout is not None:
                    locker.stdout.close()
        assert len(done) == 1
