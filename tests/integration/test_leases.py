"""Lease semantics on a real PostgreSQL: claims, fencing, retries, the watcher, operator guards."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.models import JobStatus
from leasectl.core.pace import paced_wait
from leasectl.db import sql as queries
from leasectl.present.skips import skip_reason
from leasectl.runtime.watcher import WatcherConfig, run_pass
from tests.stores import Stores
from tests.util import wait_for_lock_wait, wait_until

TTL = timedelta(seconds=30)


def expire(conn: psycopg.Connection[Any], job_id: int) -> None:
    """Move a lease into the past: the test's way of advancing the database clock."""
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )


def attempts_of(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[int, str, str]]:
    rows = conn.execute(
        "SELECT attempt, lease_owner, outcome::text FROM leasectl.job_attempts "
        "WHERE job_id = %s ORDER BY attempt",
        (job_id,),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def test_claim_sets_lease_and_opens_attempt(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{"n": 1}], queue="q")
    [lease] = store.work.claim("q", "w1", TTL)
    assert lease.job_id == job_id and lease.attempt == 1 and lease.owner == "w1"
    assert lease.job.status == JobStatus.PROCESSING
    row = sql_conn.execute(
        "SELECT lease_until - now() > interval '29 seconds' FROM leasectl.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row == (True,)
    assert attempts_of(sql_conn, job_id) == [(1, "w1", "running")]
    assert store.work.claim("q", "w2", TTL) == []


def test_claim_respects_priority_run_at_and_delay(store: Stores) -> None:
    low = store.ops.enqueue([{}], queue="q", priority=5)
    high = store.ops.enqueue([{}], queue="q", priority=-1)
    store.ops.enqueue([{}], queue="q", priority=-5, delay=timedelta(hours=1))
    mid = store.ops.enqueue([{}, {}], queue="q", priority=0)
    store.ops.enqueue([{}], queue="other", priority=-9)
    leases = store.work.claim("q", "w", TTL, limit=10)
    assert [lease.job_id for lease in leases] == high + mid + low


def _race(
    store: Stores,
    i: int,
    job_id: int,
    barrier: threading.Barrier,
    results: dict[int, Any],
    errors: list[BaseException],
) -> None:
    try:
        barrier.wait()
        results[i] = store.work.claim_by_id(job_id, f"w{i}", TTL)
    except BaseException as exc:
        errors.append(exc)


def test_two_connections_race_to_claim_by_id_exactly_one_wins(db_dsn: str) -> None:
    stores = [Stores.connect(db_dsn, "leasectl") for _ in range(2)]
    try:
        ids = stores[0].ops.enqueue([{}] * 40, queue="q")
        for job_id in ids:
            barrier = threading.Barrier(2)
            results: dict[int, Any] = {}
            errors: list[BaseException] = []
            threads = [
                threading.Thread(
                    target=_race, args=(stores[i], i, job_id, barrier, results, errors)
                )
                for i in range(2)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            winners = [r for r in results.values() if r is not None]
            assert len(winners) == 1, results
            assert winners[0].attempt == 1
    finally:
        for s in stores:
            s.close()


def test_claim_by_id_loser_waiting_on_the_row_lock_gets_nothing(store: Stores, db_dsn: str) -> None:
    """The loser blocks on the winner's row lock, then re-checks the condition and gets no row."""
    [job_id] = store.ops.enqueue([{}], queue="q")
    claim_sql = queries.get("job_claim_by_id").render("leasectl")
    params = {"id": job_id, "owner": "winner", "ttl": TTL}
    result: list[Any] = []
    with psycopg.connect(db_dsn) as winner:
        with winner.transaction():
            assert winner.execute(claim_sql, params).fetchone() is not None
            loser = threading.Thread(
                target=lambda: result.append(store.work.claim_by_id(job_id, "loser", TTL))
            )
            loser.start()
            with psycopg.connect(db_dsn, autocommit=True) as probe:
                wait_for_lock_wait(probe, what="the loser to wait on the row lock")
        loser.join(10)
    assert result == [None]
    assert store.ops.get_job(job_id).lease_owner == "winner"


@pytest.mark.parametrize("generic_plans", [True, False], ids=["worker plans", "custom plans"])
def test_a_completion_waiting_on_a_heartbeat_is_accepted(
    db_dsn: str, sql_conn: psycopg.Connection[Any], generic_plans: bool
) -> None:
    """A worker's round trip completes leases that its own heartbeat renews at that moment: the
    completion waits for the heartbeat's row locks, re-checks each row as it is now (renewed,
    still this owner's at that attempt) and completes it, in the same statement that claims
    more. (A UNION ALL of the finished and the picked jobs once failed that re-check.)"""
    with Stores.connect(db_dsn, "leasectl", max_size=4, generic_plans=generic_plans) as store:
        store.ops.enqueue([{}] * 6, queue="q")
        held = store.work.claim("q", "w", TTL, 4)
        heartbeat_sql = queries.get("jobs_heartbeat").render("leasectl")
        result: list[Any] = []
        with psycopg.connect(db_dsn) as beat:
            with beat.transaction():  # the heartbeat WorkerStore.heartbeat sends, left uncommitted
                renew = {**store.work._fence(held), "ttl": TTL, "progress": None, "messages": None}
                assert len(beat.execute(heartbeat_sql, renew).fetchall()) == 4
                trip = threading.Thread(
                    target=lambda: result.append(
                        store.work.complete_and_claim(held, "q", "w", TTL, 2)
                    )
                )
                trip.start()
                wait_for_lock_wait(sql_conn, what="the round trip to wait on the heartbeat's locks")
            trip.join(10)
        [(claimed, refused)] = result
        assert refused == set()
        assert len(claimed) == 2
        for lease in held:
            assert store.ops.get_job(lease.job_id).status == JobStatus.COMPLETED
            assert attempts_of(sql_conn, lease.job_id) == [(1, "w", "completed")]
        for lease in claimed:
            assert attempts_of(sql_conn, lease.job_id) == [(1, "w", "running")]


def test_claim_by_id_takes_over_an_expired_lease_and_closes_the_old_attempt(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    assert store.work.claim_by_id(job_id, "old", TTL) is not None
    assert store.work.claim_by_id(job_id, "new", TTL) is None  # lease still valid
    expire(sql_conn, job_id)
    lease = store.work.claim_by_id(job_id, "new", TTL)
    assert lease is not None and lease.attempt == 2
    assert attempts_of(sql_conn, job_id) == [(1, "old", "expired"), (2, "new", "running")]


def _claim_until_empty(store: Stores, owner: str, out: list[tuple[int, int]]) -> None:
    while True:
        leases = store.work.claim("bulk", owner, timedelta(minutes=5), 5)
        if not leases:
            return
        accepted = store.work.complete(leases)
        out.extend((lease.job_id, lease.attempt) for lease in leases if lease.job_id in accepted)


@pytest.mark.slow
def test_threads_and_processes_drain_2000_jobs_each_claimed_exactly_once(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    with Stores.connect(db_dsn, "leasectl") as producer:
        ids = producer.ops.enqueue([{"n": i} for i in range(2000)], queue="bulk")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.claimer_proc", db_dsn, "bulk", f"proc{i}", "3"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    results: list[list[tuple[int, int]]] = [[] for _ in range(8)]
    with Stores.connect(db_dsn, "leasectl", max_size=8) as shared:
        threads = [
            threading.Thread(target=_claim_until_empty, args=(shared, f"thread{i}", results[i]))
            for i in range(8)
        ]
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        results.append([tuple(pair) for pair in json.loads(out)])  # type: ignore[misc]
    claimed = Counter(job_id for part in results for job_id, _ in part)
    assert sorted(claimed) == sorted(ids)
    assert max(claimed.values()) == 1
    assert sum(1 for part in results[8:] if part) >= 1, "the processes took part"
    row = sql_conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'Completed'), max(attempts), "
        "(SELECT count(*) FROM leasectl.job_attempts) FROM leasectl.jobs"
    ).fetchone()
    assert row == (2000, 1, 2000)


def test_heartbeat_extends_only_leases_still_held(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = store.ops.enqueue([{}, {}], queue="q")
    leases = store.work.claim("q", "w1", timedelta(seconds=5), 2)
    renewed = store.work.heartbeat(leases, timedelta(minutes=10))
    assert set(renewed) == {a, b}
    expire(sql_conn, b)
    thief = store.work.claim_by_id(b, "w2", TTL)
    assert thief is not None
    renewed = store.work.heartbeat(leases, timedelta(minutes=10))
    assert set(renewed) == {a}
    assert store.work.complete(leases) == {a}
    assert store.ops.get_job(b).lease_owner == "w2"
    assert store.ops.get_job(b).status == JobStatus.PROCESSING


def test_fail_retries_with_backoff_then_exhausts_into_failed(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q", max_attempts=2)
    [lease] = store.work.claim("q", "w", TTL)
    assert store.work.fail(lease, "first", retry_delay=timedelta(seconds=90)) == JobStatus.PENDING
    delay = sql_conn.execute(
        "SELECT extract(epoch FROM run_at - now()) FROM leasectl.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert delay is not None and 85 < float(delay[0]) <= 90
    assert store.work.claim("q", "w", TTL) == [], "not claimable before run_at"
    sql_conn.execute("UPDATE leasectl.jobs SET run_at = now() WHERE id = %s", (job_id,))
    [lease2] = store.work.claim("q", "w", TTL)
    assert lease2.attempt == 2
    assert store.work.fail(lease2, "second", retry_delay=timedelta(seconds=1)) == JobStatus.FAILED
    job = store.ops.get_job(job_id)
    assert job.status == JobStatus.FAILED and job.finished_at is not None
    assert job.last_error == "second"
    assert [a[2] for a in attempts_of(sql_conn, job_id)] == ["failed", "failed"]


def test_fail_without_retry_fails_at_once(store: Stores) -> None:
    store.ops.enqueue([{}], queue="q", max_attempts=5)
    [lease] = store.work.claim("q", "w", TTL)
    assert store.work.fail(lease, "bad", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED


def test_release_hands_back_without_new_attempt(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    [lease] = store.work.claim("q", "w", TTL)
    assert store.work.release([lease]) == {job_id}
    job = store.ops.get_job(job_id)
    assert job.status == JobStatus.PENDING and job.attempts == 1 and job.lease_until is None
    assert attempts_of(sql_conn, job_id) == [(1, "w", "released")]
    assert store.work.complete([lease]) == set(), "a released lease is gone"


def test_watcher_requeues_expired_and_writes_audit(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ids = store.ops.enqueue([{}] * 5, queue="q", max_attempts=3)
    leases = store.work.claim("q", "dead-worker", TTL, 5)
    for job_id in ids[:3]:
        expire(sql_conn, job_id)
    # ids[2] is on its last attempt: the watcher must fail it rather than requeue it.
    sql_conn.execute("UPDATE leasectl.jobs SET attempts = 3 WHERE id = %s", (ids[2],))
    sql_conn.execute("UPDATE leasectl.job_attempts SET attempt = 3 WHERE job_id = %s", (ids[2],))
    result = run_pass(store.ops, WatcherConfig(batch_size=2, actor="watcher@test"))
    assert (result.requeued, result.failed, result.batches) == (2, 1, 2)
    assert store.ops.get_job(ids[0]).status == JobStatus.PENDING
    assert store.ops.get_job(ids[2]).status == JobStatus.FAILED
    assert store.ops.get_job(ids[3]).status == JobStatus.PROCESSING
    events = sql_conn.execute(
        "SELECT job_id, actor, action, before->>'lease_owner' FROM leasectl.job_events ORDER BY id"
    ).fetchall()
    assert sorted(events) == sorted(
        [
            (ids[0], "watcher@test", "requeue", "dead-worker"),
            (ids[1], "watcher@test", "requeue", "dead-worker"),
            (ids[2], "watcher@test", "fail", "dead-worker"),
        ]
    )
    assert attempts_of(sql_conn, ids[0]) == [(1, "dead-worker", "expired")]
    assert store.work.complete(leases[:1]) == set(), "the dead worker's lease is fenced off"


def test_watcher_pass_lists_only_the_jobs_asked_for_and_counts_all(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ids = store.ops.enqueue([{}] * 5, queue="q")
    store.work.claim("q", "dead-worker", TTL, 5)
    for job_id in ids:
        expire(sql_conn, job_id)
    asked: list[bool] = []
    requeue = store.ops.requeue_expired

    def spy(**kwargs: Any) -> Any:
        asked.append(kwargs["detail"])
        return requeue(**kwargs)

    store.ops.requeue_expired = spy  # type: ignore[method-assign]
    result = run_pass(store.ops, WatcherConfig(batch_size=2), listed=3)
    # Batches return the jobs until three are listed, then only how many went where.
    assert asked == [True, True, False]
    assert (result.requeued, result.total, result.batches) == (5, 5, 3)
    assert len(result.jobs) == 3
    assert {(j.queue, j.lease_owner, j.status) for j in result.jobs} == {
        ("q", "dead-worker", JobStatus.PENDING)
    }
    counted = sql_conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'Pending'),"
        " (SELECT count(*) FROM leasectl.job_events WHERE action = 'requeue'),"
        " (SELECT count(*) FROM leasectl.job_attempts WHERE outcome = 'expired')"
        " FROM leasectl.jobs"
    ).fetchone()
    assert counted == (5, 5, 5), "every batch moves, audits and closes, listed or not"

    store.work.claim("q", "dead-again", TTL, 5)
    for job_id in ids:
        expire(sql_conn, job_id)
    asked.clear()
    result = run_pass(store.ops, WatcherConfig(batch_size=2), listed=0)
    assert asked == [False, False, False] and result.jobs == () and result.requeued == 5


def test_an_unlisted_batch_counts_the_jobs_by_their_new_status(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Without ``detail`` a batch returns a count per new status, not a row per job."""
    spent = store.ops.enqueue([{}] * 2, queue="q", max_attempts=1)
    retried = store.ops.enqueue([{}] * 3, queue="q")
    store.work.claim("q", "dead-worker", TTL, 5)
    for job_id in spent + retried:
        expire(sql_conn, job_id)
    batch = store.ops.requeue_expired(
        limit=10, queue=None, mark=False, actor="watcher@test", reason="r", detail=False
    )
    assert batch.counts == {JobStatus.FAILED: 2, JobStatus.PENDING: 3}
    assert (batch.total, batch.jobs) == (5, ())


def test_watcher_event_documents_hold_the_state_before_and_after(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    store.work.claim("q", "dead-worker", TTL)
    expire(sql_conn, job_id)
    was = sql_conn.execute(
        "SELECT to_jsonb(lease_until) #>> '{}', to_jsonb(heartbeat_at) #>> '{}' "
        "FROM leasectl.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert was is not None
    run_pass(store.ops, WatcherConfig(actor="watcher@test"))
    row = sql_conn.execute(
        "SELECT e.before, e.after, to_jsonb(j.run_at) #>> '{}' "
        "FROM leasectl.job_events AS e JOIN leasectl.jobs AS j ON j.id = e.job_id "
        "WHERE e.job_id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    before, after, run_at = row
    assert before == {
        "status": "Processing",
        "attempts": 1,
        "lease_owner": "dead-worker",
        "lease_until": was[0],
        "heartbeat_at": was[1],
    }
    assert after == {"status": "Pending", "attempts": 1, "lease_until": None, "run_at": run_at}


def expired_leases(store: Stores, conn: psycopg.Connection[Any], n: int) -> list[int]:
    """n jobs of queue q leased by w, their leases lapsed."""
    ids = store.ops.enqueue([{}] * n, queue="q")
    store.work.claim("q", "w", TTL, limit=n)
    for job_id in ids:
        expire(conn, job_id)
    return ids


def test_watcher_pace_waits_between_batches_in_proportion_to_each_batch(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    expired_leases(store, sql_conn, 5)
    calls: list[tuple[float, float]] = []
    requeue = store.ops.requeue_expired

    def timed(**kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return requeue(**kwargs)
        finally:
            calls.append((start, time.perf_counter()))

    store.ops.requeue_expired = timed  # type: ignore[method-assign]
    result = run_pass(store.ops, WatcherConfig(batch_size=2, pace=3.0))
    assert (result.requeued, result.batches) == (5, 3)
    for (start, end), (next_start, _) in itertools.pairwise(calls):
        assert next_start - end >= 3.0 * (end - start)


def test_a_stop_request_ends_a_paced_pass_during_its_wait(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    expired_leases(store, sql_conn, 3)
    requeue = store.ops.requeue_expired

    def slow(**kwargs: Any) -> Any:
        time.sleep(0.2)  # a slow batch: with pace 100 the pass would then wait 20 s
        return requeue(**kwargs)

    store.ops.requeue_expired = slow  # type: ignore[method-assign]
    stopping = threading.Event()
    results: list[Any] = []
    pass_thread = threading.Thread(
        target=lambda: results.append(
            run_pass(store.ops, WatcherConfig(batch_size=1, pace=100.0), stopping=stopping)
        )
    )
    pass_thread.start()
    wait_until(
        lambda: (
            sql_conn.execute(
                "SELECT count(*) FROM leasectl.jobs WHERE status = 'Pending'"
            ).fetchone()[0]
            == 1
        ),
        timeout=10,
    )
    stopping.set()
    pass_thread.join(timeout=10)
    assert not pass_thread.is_alive(), "the pace's wait ignored the stop request"
    assert results[0].requeued == 1 and results[0].batches == 1


class ScriptedClock:
    """A clock for run_pass whose batches take the scripted times (seconds), one per batch."""

    def __init__(self, batch_times: list[float]) -> None:
        self.batch_times = batch_times
        self.now = 0.0
        self.calls = 0

    def __call__(self) -> float:
        # run_pass reads the clock twice per batch: before and after the statement.
        if self.calls % 2:
            self.now += self.batch_times[self.calls // 2]
        self.calls += 1
        return self.now


class RecordedWaits(threading.Event):
    """A stop event that records the pace's waits instead of sleeping; with ``stop_at``, a stop
    request arrives during that wait (numbered from 1)."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.stop_at = stop_at

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        if len(self.waits) == self.stop_at:
            self.set()
        return self.is_set()


def processing(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM leasectl.jobs WHERE status = 'Processing'").fetchone()
    return int(row[0]) if row else -1


def test_the_default_pace_waits_only_after_batches_slower_than_the_fastest(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    expired_leases(store, sql_conn, 9)
    # Batches of 2: the second as fast as the first (no wait), the third three times as slow,
    # the fourth as fast again; the fifth (1 job, the last) ends the pass.
    clock = ScriptedClock([0.010, 0.010, 0.030, 0.010, 0.010])
    waits = RecordedWaits()
    result = run_pass(store.ops, WatcherConfig(batch_size=2), stopping=waits, clock=clock)
    assert (result.requeued, result.batches) == (9, 5)
    assert waits.waits == [pytest.approx(paced_wait(0.030, 2, 0.010 / 2))]
    assert waits.waits[0] > 0
    assert processing(sql_conn) == 0


@pytest.mark.parametrize(
    ("pace", "expected"),
    [(0.0, []), (1.0, [0.010, 0.050])],
    ids=["back-to-back", "one-to-one"],
)
def test_an_explicit_pace_overrides_the_default(
    store: Stores, sql_conn: psycopg.Connection[Any], pace: float, expected: list[float]
) -> None:
    expired_leases(store, sql_conn, 5)
    # The first batch would set the default's bar, the second wait after it; a fixed pace
    # waits its multiple of every batch but the last (--pace 0: no wait at all).
    clock = ScriptedClock([0.010, 0.050, 0.010])
    waits = RecordedWaits()
    config = WatcherConfig(batch_size=2, pace=pace)
    result = run_pass(store.ops, config, stopping=waits, clock=clock)
    assert (result.requeued, result.batches) == (5, 3)
    assert waits.waits == [pytest.approx(w) for w in expected]


def test_a_stop_request_during_the_default_paces_wait_ends_the_pass(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    expired_leases(store, sql_conn, 8)
    waits = RecordedWaits(stop_at=1)
    result = run_pass(
        store.ops,
        WatcherConfig(batch_size=2),
        stopping=waits,
        clock=ScriptedClock([0.010, 0.040, 0.010, 0.010]),
    )
    assert len(waits.waits) == 1 and waits.waits[0] > 0
    assert (result.requeued, result.batches) == (4, 2)
    assert processing(sql_conn) == 4, "the rest waits for the next pass"
    assert run_pass(store.ops, WatcherConfig(batch_size=2)).requeued == 4


def test_watcher_mark_mode_quarantines(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    store.work.claim("q", "w", TTL)
    expire(sql_conn, job_id)
    result = run_pass(store.ops, WatcherConfig(mode="mark"))
    assert result.marked_stuck == 1
    job = store.ops.get_job(job_id)
    assert job.status == JobStatus.STUCK and job.lease_until is not None


def test_watcher_dry_run_changes_nothing(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    store.work.claim("q", "w", TTL)
    expire(sql_conn, job_id)
    result = run_pass(store.ops, WatcherConfig(), dry_run=True)
    assert [j.id for j in result.jobs] == [job_id] and result.total == 0
    assert store.ops.get_job(job_id).status == JobStatus.PROCESSING


def test_watcher_pass_right_after_a_heartbeat_leaves_the_job(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    leases = store.work.claim("q", "w", TTL)
    expire(sql_conn, job_id)
    assert set(store.work.heartbeat(leases, timedelta(seconds=5))) == {job_id}
    result = run_pass(store.ops, WatcherConfig())
    assert result.total == 0
    job = store.ops.get_job(job_id)
    assert job.status == JobStatus.PROCESSING and job.attempts == 1


def test_watcher_does_not_touch_a_lease_renewed_while_it_waits(
    store: Stores, db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """A heartbeat in flight (row locked, not yet committed) when the watcher scans."""
    [job_id] = store.ops.enqueue([{}], queue="q")
    [lease] = store.work.claim("q", "w", TTL)
    expire(sql_conn, job_id)
    beat_sql = queries.get("jobs_heartbeat").render("leasectl")
    with psycopg.connect(db_dsn) as holder:
        with holder.transaction():
            renewed = holder.execute(
                beat_sql,
                {
                    "ids": [job_id],
                    "attempts": [1],
                    "owner": "w",
                    "ttl": TTL,
                    "progress": [0.5],  # (a heartbeat carrying progress: migration 21)
                    "messages": ["half"],
                },
            ).fetchall()
            assert len(renewed) == 1
            result = run_pass(store.ops, WatcherConfig())
            assert result.total == 0, "the locked row is skipped, not waited on and clobbered"
    assert run_pass(store.ops, WatcherConfig()).total == 0, "after the commit the lease is valid"
    assert store.work.complete([lease]) == {job_id}


def test_operator_requeue_of_a_job_completed_after_the_operator_looked_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    [lease] = store.work.claim("q", "w", TTL)
    expire(sql_conn, job_id)
    seen = store.ops.get_job(job_id).seen()  # the operator looks: expired lease
    assert store.work.complete([lease]) == {job_id}  # the worker finishes anyway
    result = store.ops.operator_requeue([seen], actor="operator:test", reason="stuck?")
    assert result.changed == ()
    assert [(s.id, skip_reason(s)) for s in result.skipped] == [
        (job_id, "moved since you looked: Processing -> Completed")
    ]
    assert store.ops.get_job(job_id).status == JobStatus.COMPLETED
    assert sql_conn.execute("SELECT count(*) FROM leasectl.job_events").fetchone() == (0,)


def test_operator_requeue_of_a_renewed_lease_is_skipped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    store.work.claim("q", "w1", TTL)
    expire(sql_conn, job_id)
    seen = store.ops.get_job(job_id).seen()
    assert store.work.claim_by_id(job_id, "w7", TTL) is not None
    result = store.ops.operator_requeue([seen], actor="operator:test", reason=None)
    assert result.changed == ()
    assert "w7" in skip_reason(result.skipped[0])


def test_operator_requeue_needs_force_for_a_live_lease(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    [lease] = store.work.claim("q", "w", TTL)
    seen = store.ops.seen_now([job_id])
    result = store.ops.operator_requeue(seen, actor="operator:test", reason="try")
    assert result.changed == () and "lease live" in skip_reason(result.skipped[0])
    forced = store.ops.operator_requeue(seen, actor="operator:test", reason="hung", force=True)
    assert forced.changed == (job_id,)
    assert attempts_of(sql_conn, job_id) == [(1, "w", "requeued")]
    event = sql_conn.execute(
        "SELECT actor, action, reason, before->>'status', after->>'status' "
        "FROM leasectl.job_events WHERE job_id = %s",
        (job_id,),
    ).fetchone()
    assert event == ("operator:test", "requeue_forced", "hung", "Processing", "Pending")
    assert store.work.complete([lease]) == set()


def test_operator_requeue_of_failed_job_grants_one_more_attempt(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q", max_attempts=1)
    [lease] = store.work.claim("q", "w", TTL)
    store.work.fail(lease, "x", retry_delay=timedelta(0))
    result = store.ops.operator_requeue(store.ops.seen_now([job_id]), actor="op", reason="fixed")
    assert result.changed == (job_id,)
    [again] = store.work.claim("q", "w", TTL)
    assert again.attempt == 2 and again.job.max_attempts == 2


def test_operator_mark_stuck_and_unknown_ids(store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue="q")
    result = store.ops.operator_mark_stuck(
        store.ops.seen_now([job_id, 424242]), actor="op", reason="poison"
    )
    assert result.changed == (job_id,)
    assert [(s.id, skip_reason(s)) for s in result.skipped] == [(424242, "no such job")]
    job = store.ops.get_job(job_id)
    assert job.status == JobStatus.STUCK and job.last_error == "poison"
    assert store.work.claim("q", "w", TTL) == []


def test_inspect_and_status(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    ids = store.ops.enqueue([{}] * 4, queue="q")
    store.work.worker_register(
        "w", hostname="h", pid=1, queues=["q"], lease_ttl=TTL, heartbeat_every=timedelta(seconds=10)
    )
    leases = store.work.claim("q", "w", TTL, 2)
    store.work.complete(leases[:1])
    expire(sql_conn, ids[1])
    report = store.ops.status()
    [q] = report.queues
    assert (q.pending, q.processing, q.expired, q.completed_recent) == (2, 1, 1, 1)
    [owner] = report.owners
    assert owner.owner == "w" and owner.held == 1 and owner.expired == 1
    detail = store.ops.inspect(ids[0])
    assert detail.job.status == JobStatus.COMPLETED
    assert [a.outcome for a in detail.attempts] == ["completed"]
