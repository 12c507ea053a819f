"""Concurrency keys under real concurrency: racing claimers (threads, each on its own pool)
and producers over many keys, with a ledger proving that no two jobs of one key ever ran at
once and that each key's jobs ran in queue order, retries included; producers racing the
heads' exits leave no Waiting job behind without the watcher's healing pass."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl.core.enqueue import NewJob
from leasectl.core.models import JobStatus
from tests.stores import Stores
from tests.util import wait_until

SCHEMA = "leasectl"
TTL = timedelta(minutes=5)


class Ledger:
    """What the claimers did: per key, the job ids in the order their leases were taken, and
    every time two leases of one key were held at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.runs: dict[str, list[int]] = defaultdict(list)
        self.overlaps: list[tuple[str, int, int]] = []
        self.finished = 0

    def start(self, key: str, job_id: int) -> None:
        with self.lock:
            if key in self.active:
                self.overlaps.append((key, self.active[key], job_id))
            self.active[key] = job_id
            self.runs[key].append(job_id)

    def end(self, key: str, job_id: int, finished: bool) -> None:
        # Before the job's write is sent: the key is still held in the database until it
        # commits, so no other claimer can start the key's next job before this.
        with self.lock:
            if self.active.get(key) == job_id:
                del self.active[key]
            self.finished += finished


def claimer(
    dsn: str,
    queue: str,
    owner: str,
    ledger: Ledger,
    total: int,
    fail_rate: float,
    deadline: float,
    seed: int,
) -> None:
    rng = random.Random(seed)
    with Stores.connect(dsn, SCHEMA, max_size=2) as store:
        while ledger.finished < total and time.monotonic() < deadline:
            leases = store.work.claim(queue, owner, TTL, rng.randint(1, 8))
            if not leases:
                threading.Event().wait(0.002)  # a poll's back-off, not a synchronisation
                continue
            for lease in leases:
                key = lease.job.payload["key"]
                ledger.start(key, lease.job_id)
            for lease in leases:
                key = lease.job.payload["key"]
                if rng.random() < fail_rate:
                    ledger.end(key, lease.job_id, finished=False)
                    status = store.work.fail(lease, "flaky", retry_delay=timedelta(0))
                    assert status == JobStatus.PENDING, status
                else:
                    ledger.end(key, lease.job_id, finished=True)
                    assert store.work.complete([lease]) == {lease.job_id}


def producer(
    dsn: str, queue: str, keys: list[str], per_key: int, ids: dict[str, list[int]]
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for seq in range(per_key):
            for key in keys:
                job = leasectl.enqueue(
                    conn,
                    queue=queue,
                    payload={"key": key, "seq": seq},
                    concurrency_key=key,
                    max_attempts=1000,
                )
                ids[key].append(job.id)


def collapse(runs: list[int]) -> list[int]:
    """Consecutive leases of one job (its retries) as one entry."""
    return [j for i, j in enumerate(runs) if i == 0 or runs[i - 1] != j]


def test_racing_claimers_and_producers_never_overlap_a_key_and_keep_its_order(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    keys = [f"acct-{i}" for i in range(24)]
    per_key, total = 12, 24 * 12
    ledger = Ledger()
    ids: dict[str, list[int]] = defaultdict(list)
    deadline = time.monotonic() + 60
    threads = [
        threading.Thread(target=producer, args=(db_dsn, "pay", keys[i::4], per_key, ids))
        for i in range(4)
    ] + [
        threading.Thread(
            target=claimer,
            args=(db_dsn, "pay", f"w{i}", ledger, total, 0.2, deadline, i),
        )
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive()
    assert ledger.overlaps == []
    assert ledger.finished == total
    for key in keys:
        runs = ledger.runs[key]
        # Each job's attempts are one contiguous run (a retry stays ahead of the key's later
        # jobs), and the jobs ran in the order their producer enqueued them.
        assert collapse(runs) == ids[key], key
        assert len(set(runs)) == per_key
    left = sql_conn.execute(
        "SELECT count(*) FROM leasectl.jobs WHERE status <> 'Completed'"
    ).fetchone()
    assert left == (0,)


def racing_producer(
    dsn: str, queue: str, keys: list[str], rounds: int, seed: int, made: list[int]
) -> None:
    """Enqueues jobs of two random keys in one statement, in a transaction, as an application
    would (in a random order: the statement takes the keys' locks in one order whatever the
    jobs' order, so producers never deadlock)."""
    rng = random.Random(seed)
    with psycopg.connect(dsn) as conn:
        for _ in range(rounds):
            with conn.transaction():
                jobs = [
                    NewJob({"key": key}, queue=queue, concurrency_key=key)
                    for key in rng.sample(keys, 2)
                ]
                made.extend(e.id for e in leasectl.enqueue_many(conn, jobs))
                # The application's own work after the enqueue, in the same transaction: the
                # key's head may finish meanwhile, before this transaction's jobs are visible.
                conn.execute("SELECT pg_sleep(%s)", (rng.choice((0, 0.002, 0.02, 0.2)),))


@pytest.mark.full
def test_producers_racing_the_heads_exits_leave_no_job_waiting_without_the_watcher(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """Few keys, many producers and claimers: enqueues land while their key's head finishes.
    Every job must run with no healing pass (the watcher is not running): an orphaned Waiting
    job would never be promoted and the claimers would time out."""
    keys = [f"k{i}" for i in range(4)]
    made: list[int] = []
    ledger = Ledger()
    rounds, producers = 60, 4
    total = rounds * producers * 2
    deadline = time.monotonic() + 60
    threads = [
        threading.Thread(target=racing_producer, args=(db_dsn, "pay", keys, rounds, i, made))
        for i in range(producers)
    ] + [
        threading.Thread(
            target=claimer,
            args=(db_dsn, "pay", f"w{i}", ledger, total, 0.0, deadline, 100 + i),
        )
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive()
    assert ledger.overlaps == []
    assert len(made) == total
    stuck = sql_conn.execute(
        "SELECT id, status::text FROM leasectl.jobs WHERE status <> 'Completed' ORDER BY id"
    ).fetchall()
    assert stuck == []
    assert ledger.finished == total


@pytest.mark.full
def test_a_sigkilled_holder_keeps_its_key_until_its_job_is_taken_over_and_finished(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """A worker SIGKILLed while it holds a key's head: its lapsed lease still holds the key
    (the key's next job stays Waiting, no other worker runs it); the takeover runs the same
    job again, and its completion promotes the next."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        first, second = leasectl.enqueue_many(
            conn, [NewJob({"n": i}, queue="pay", concurrency_key="acct") for i in range(2)]
        )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.key_holder_proc", db_dsn, "pay", "doomed"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert int(proc.stdout.readline()) == first.id
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()

    def lapsed() -> bool:
        row = sql_conn.execute(
            "SELECT lease_until < now() FROM leasectl.jobs WHERE id = %s", (first.id,)
        ).fetchone()
        return bool(row and row[0])

    with Stores.connect(db_dsn, SCHEMA, max_size=2) as store:
        assert store.work.claim("pay", "w2", TTL, 10) == []  # the key is held, lease live
        wait_until(lapsed, timeout=10)
        (taken,) = store.work.claim("pay", "w2", TTL, 10)
        assert (taken.job_id, taken.attempt) == (first.id, 2)
        assert store.work.complete([taken]) == {first.id}
        (nxt,) = store.work.claim("pay", "w2", TTL, 10)
        assert nxt.job_id == second.id
