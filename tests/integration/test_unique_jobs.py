"""Unique jobs: at most one live (Pending, Processing, Stuck) job per queue and unique key,
enforced by PostgreSQL (jobs_unique_key_idx, migration 12); a duplicate gets the live job's id.
Concurrent producers (threads in transactions, processes of the CLI) make exactly one job."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl.core.enqueue import Enqueued, NewJob
from tests.integration.test_cli import _env, assert_one_line_error, cli

LIVE = ("Pending", "Processing", "Stuck")
FINISHED = ("Completed", "Failed", "Cancelled")


def keyed(conn: psycopg.Connection[Any], key: str) -> list[tuple[int, str, str]]:
    return conn.execute(
        "SELECT id, queue, status::text FROM leasectl.jobs WHERE unique_key = %s ORDER BY id",
        (key,),
    ).fetchall()


def set_status(conn: psycopg.Connection[Any], job_id: int, status: str) -> None:
    # Arranged by hand: the columns each status requires (a Processing job holds a lease).
    conn.execute(
        "UPDATE leasectl.jobs SET status = %(s)s::text::leasectl.job_status, "
        "lease_owner = 'w', lease_until = now() + interval '1 hour', "
        "finished_at = CASE WHEN %(s)s IN ('Completed', 'Failed', 'Cancelled') THEN now() END "
        "WHERE id = %(id)s",
        {"s": status, "id": job_id},
    )


@pytest.mark.parametrize("status", LIVE)
def test_a_live_job_with_the_key_is_returned_as_the_duplicate(
    db_dsn: str, sql_conn: psycopg.Connection[Any], status: str
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        first = leasectl.enqueue(conn, queue="invoices", payload=1, unique_key="invoice-42")
        set_status(sql_conn, first.id, status)
        again = leasectl.enqueue(conn, queue="invoices", payload=2, unique_key="invoice-42")
        # The same key on another queue, and another key on this one, are other jobs.
        other_queue = leasectl.enqueue(conn, queue="refunds", payload=3, unique_key="invoice-42")
        other_key = leasectl.enqueue(conn, queue="invoices", payload=4, unique_key="invoice-43")
    assert first == Enqueued(first.id, False)
    assert again == Enqueued(first.id, True)
    assert not other_queue.duplicate and not other_key.duplicate
    assert len({first.id, other_queue.id, other_key.id}) == 3
    assert [r[:2] for r in keyed(sql_conn, "invoice-42")] == [
        (first.id, "invoices"),
        (other_queue.id, "refunds"),
    ]
    payload = sql_conn.execute("SELECT payload FROM leasectl.jobs WHERE id = %s", (first.id,))
    assert payload.fetchone() == (1,)  # the duplicate changed nothing


@pytest.mark.parametrize("status", FINISHED)
def test_a_finished_job_does_not_block_a_new_one_with_its_key(
    db_dsn: str, sql_conn: psycopg.Connection[Any], status: str
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        old = leasectl.enqueue(conn, queue="q", unique_key="k")
        set_status(sql_conn, old.id, status)
        new = leasectl.enqueue(conn, queue="q", unique_key="k")
        again = leasectl.enqueue(conn, queue="q", unique_key="k")
    assert not new.duplicate and new.id != old.id
    assert again == Enqueued(new.id, True)


def test_a_finished_job_with_the_key_is_never_the_duplicate(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """The live job is the one returned, even beside a finished job with a larger id (written
    here by hand: a finished one normally came first)."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        live = leasectl.enqueue(conn, queue="q", unique_key="k")
        sql_conn.execute(
            "INSERT INTO leasectl.jobs (queue, unique_key, status, finished_at) "
            "VALUES ('q', 'k', 'Completed', now())"
        )
        again = leasectl.enqueue(conn, queue="q", unique_key="k")
    assert again == Enqueued(live.id, True)


def test_enqueue_many_with_keys_repeated_in_the_batch_and_live_already(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(db_dsn) as conn:
        live = leasectl.enqueue(conn, queue="q", unique_key="live")
        conn.commit()
        done = leasectl.enqueue_many(
            conn,
            [
                NewJob(1, queue="q", unique_key="new"),
                NewJob(2, queue="q", unique_key="live"),
                NewJob(3, queue="q"),
                NewJob(4, queue="q", unique_key="new"),  # again in the batch: the first's job
                NewJob(5, queue="other", unique_key="new"),  # another queue: its own job
                NewJob(6, queue="q", unique_key="live"),
                NewJob(7, queue="q"),
            ],
        )
        conn.commit()
    new, other = done[0].id, done[4].id
    assert done == [
        Enqueued(new, False),
        Enqueued(live.id, True),
        Enqueued(done[2].id, False),
        Enqueued(new, True),
        Enqueued(other, False),
        Enqueued(live.id, True),
        Enqueued(done[6].id, False),
    ]
    payloads = dict(sql_conn.execute("SELECT id, payload FROM leasectl.jobs").fetchall())
    assert [payloads[d.id] for d in done if not d.duplicate] == [1, 3, 5, 7]
    assert len(payloads) == 5  # live, 1, 3, 5, 7


def test_an_uncommitted_job_with_the_key_is_waited_for(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """A producer whose key conflicts with a job another transaction inserted and has not
    committed waits for it: if it commits, its job is the duplicate (seen by a second statement:
    the first one's snapshot predates it); if it rolls back, the waiting producer inserts."""
    for outcome in ("commit", "rollback"):
        key = f"k-{outcome}"
        with psycopg.connect(db_dsn) as first, psycopg.connect(db_dsn) as second:
            theirs = leasectl.enqueue(first, queue="q", unique_key=key)
            pid = second.info.backend_pid
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(leasectl.enqueue, second, queue="q", unique_key=key)
                wait_for_lock(sql_conn, pid)
                first.commit() if outcome == "commit" else first.rollback()
                ours = waiting.result(timeout=30)
            second.commit()
        if outcome == "commit":
            assert ours == Enqueued(theirs.id, True)
        else:
            assert not ours.duplicate and ours.id != theirs.id
        assert [r[0] for r in keyed(sql_conn, key)] == [
            theirs.id if outcome == "commit" else ours.id
        ]


def wait_for_lock(conn: psycopg.Connection[Any], pid: int) -> None:
    """Until backend ``pid`` waits on a lock (the other transaction's uncommitted row)."""
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row and row[0] == "Lock":
            return
        time.sleep(0.01)  # polling a condition, with a deadline
    raise AssertionError(f"backend {pid} never waited on a lock")


def test_repeatable_read_gets_a_serialization_failure_to_retry(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """Under REPEATABLE READ the live job another transaction committed after this one's
    snapshot cannot be returned: PostgreSQL raises a serialization failure, and the caller
    retries its transaction, as with any conflict at that level."""
    with psycopg.connect(db_dsn) as first, psycopg.connect(db_dsn) as second:
        second.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        second.execute("SELECT 1")  # the snapshot is taken
        theirs = leasectl.enqueue(first, queue="q", unique_key="rr")
        pid = second.info.backend_pid
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(leasectl.enqueue, second, queue="q", unique_key="rr")
            wait_for_lock(sql_conn, pid)
            first.commit()
            with pytest.raises(psycopg.errors.SerializationFailure):
                waiting.result(timeout=30)
        second.rollback()
        # Retried, the transaction sees the live job.
        assert leasectl.enqueue(second, queue="q", unique_key="rr") == Enqueued(theirs.id, True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["autocommit", "transaction"])
def test_concurrent_producers_make_exactly_one_job(
    db_dsn: str, sql_conn: psycopg.Connection[Any], mode: str
) -> None:
    """Threads, each on its own connection, enqueue the same keys at once, round after round
    (in a transaction that also writes another row and commits, or in autocommit); each round
    makes one job per key, and every producer gets its id."""
    producers, rounds = 8, 25
    barrier = threading.Barrier(producers)
    conns = [psycopg.connect(db_dsn, autocommit=mode == "autocommit") for _ in range(producers)]
    sql_conn.execute("CREATE TABLE side (n int)")

    def produce(conn: psycopg.Connection[Any]) -> list[list[Enqueued]]:
        out = []
        for r in range(rounds):
            barrier.wait(timeout=60)
            jobs = [NewJob(r, queue="race", unique_key=f"{r}-{k}") for k in range(3)]
            if mode == "transaction":
                with conn.transaction():
                    conn.execute("INSERT INTO side VALUES (%s)", (r,))
                    out.append(leasectl.enqueue_many(conn, jobs))
            else:
                out.append(leasectl.enqueue_many(conn, jobs))
        return out

    try:
        with ThreadPoolExecutor(producers) as pool:
            results = list(pool.map(produce, conns))
    finally:
        for conn in conns:
            conn.close()
    for r in range(rounds):
        for k in range(3):
            got = [results[p][r][k] for p in range(producers)]
            ids = {g.id for g in got}
            assert len(ids) == 1, (r, k, got)
            assert sum(not g.duplicate for g in got) == 1, (r, k, got)
            assert [row[0] for row in keyed(sql_conn, f"{r}-{k}")] == list(ids)
    total = sql_conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone()
    assert total == (rounds * 3,)


@pytest.mark.slow
def test_concurrent_cli_processes_make_exactly_one_job(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    command = [sys.executable, "-m", "leasectl", "enqueue", "-q", "race", "--json"]
    procs = [
        subprocess.Popen(
            [*command, "--unique-key", "once", "--payload", str(n)],
            env=_env(db_dsn),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        docs.append(json.loads(out))
    ids = {d["ids"][0] for d in docs}
    assert len(ids) == 1
    assert sorted(d["duplicate"] for d in docs) == [False, True, True, True]
    assert [r[0] for r in keyed(sql_conn, "once")] == list(ids)


def test_cli_unique_key(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    first = cli("enqueue", "-q", "q", "--unique-key", "invoice-42", "--json", dsn=db_dsn)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["duplicate"] is False and doc["unique_key"] == "invoice-42"
    again = cli("enqueue", "-q", "q", "--unique-key", "invoice-42", "--json", dsn=db_dsn)
    assert json.loads(again.stdout) == {**doc, "duplicate": True}
    said = cli("enqueue", "-q", "q", "--unique-key", "invoice-42", dsn=db_dsn)
    assert said.returncode == 0
    assert (
        said.stdout.split()
        == (
            f"not enqueued: job {doc['ids'][0]} with unique key 'invoice-42' is already live on "
            "queue 'q'"
        ).split()
    )
    plain = json.loads(cli("enqueue", "-q", "q", "--json", dsn=db_dsn).stdout)
    assert plain["duplicate"] is False and plain["unique_key"] is None
    assert_one_line_error(
        cli("enqueue", "-q", "q", "--unique-key", "k", "--count", "2", dsn=db_dsn),
        2,
        "--unique-key names one job",
    )
    assert_one_line_error(
        cli("enqueue", "-q", "q", "--unique-key", "k" * 201, dsn=db_dsn),
        2,
        "unique_key has at most 200 characters",
    )
    assert [r[0] for r in keyed(sql_conn, "invoice-42")] == doc["ids"]


def test_requeue_of_a_finished_job_whose_key_is_live_again_is_refused_in_one_line(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """A Failed job's key may be live again on a newer job: requeueing the old one would make
    two live jobs with one key, which the index refuses. One line, nothing changed."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        old = leasectl.enqueue(conn, queue="q", unique_key="k")
        set_status(sql_conn, old.id, "Failed")
        new = leasectl.enqueue(conn, queue="q", unique_key="k")
    before = sql_conn.execute("SELECT id, status FROM leasectl.jobs ORDER BY id").fetchall()
    assert_one_line_error(
        cli("requeue", str(old.id), "--reason", "retry", dsn=db_dsn),
        1,
        "a live job already has the unique key of a job this would make live again",
        "(queue, unique_key)=(q, k)",
    )
    assert sql_conn.execute("SELECT id, status FROM leasectl.jobs ORDER BY id").fetchall() == before
    # Once the live one is finished, the old one may be requeued.
    set_status(sql_conn, new.id, "Completed")
    assert cli("requeue", str(old.id), dsn=db_dsn).returncode == 0
