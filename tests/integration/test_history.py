"""The per-minute history (migration 20): kept by the database's triggers on the paths real
workers take, folded with the counters without changing a value, read with the unfolded deltas,
sampled for the backlog once a minute, pruned past its keep, and read by `stats` and `status`."""

from __future__ import annotations

import json
import math
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl import PermanentError
from leasectl.core.models import JobStatus
from leasectl.core.stats import bucket_bounds, bucket_of
from leasectl.db import counters
from leasectl.db import stats as history
from leasectl.runtime.watcher import Watcher, WatcherConfig
from tests.integration.test_cli import assert_one_line_error, cli
from tests.stores import Stores
from tests.util import wait_until

TTL = timedelta(seconds=30)
HOUR = timedelta(hours=1)
COUNTS = ("enqueued", "started", "completed", "failed", "retried")


def sums(store: Stores, queue: str | None) -> dict[str, int]:
    """Every count of the last hour summed over its minutes (stats' read)."""
    report = history.read_stats(store.db, queue, HOUR)
    return {name: sum(getattr(m, name) for m in report.minutes) for name in COUNTS}


def truth(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    """What the attempts table says happened to the queue's jobs."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM leasectl.jobs WHERE queue = %(q)s), count(*), "
        "count(*) FILTER (WHERE a.outcome = 'completed'), "
        "count(*) FILTER (WHERE a.outcome = 'failed'), "
        "count(*) FILTER (WHERE a.outcome = 'failed' AND EXISTS ("
        "    SELECT FROM leasectl.job_attempts AS b "
        "    WHERE b.job_id = a.job_id AND b.attempt = a.attempt + 1)) "
        "FROM leasectl.job_attempts AS a JOIN leasectl.jobs AS j ON j.id = a.job_id "
        "WHERE j.queue = %(q)s",
        {"q": queue},
    ).fetchone()
    assert row is not None
    return dict(zip(COUNTS, (int(v) for v in row), strict=True))


def flaky(ctx: Any) -> None:
    """Fails the first ``fail`` attempts of a job (PermanentError for ``fatal``)."""
    if ctx.payload.get("fatal"):
        raise PermanentError("fatal")
    if ctx.job.attempts <= ctx.payload.get("fail", 0):
        raise RuntimeError("flaky")


def test_buckets_add_up_to_what_a_real_worker_did(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection, run_worker: Any
) -> None:
    payloads: list[dict[str, Any]] = (
        [{}] * 30
        + [{"fail": 1}] * 8  # retried once, then completed
        + [{"fail": 9}] * 4  # fails both of its attempts: one retry, one final failure
        + [{"fatal": True}] * 3  # fails once, not retried
    )
    ids = store.ops.enqueue(payloads, queue="h", max_attempts=2)
    store.ops.enqueue([{}] * 5, queue="other-queue")  # another queue, never run
    run_worker(flaky, queues=("h",), concurrency=4, retry_base=timedelta(milliseconds=10),
               retry_cap=timedelta(milliseconds=20))  # fmt: skip
    finished = {JobStatus.COMPLETED, JobStatus.FAILED}
    wait_until(
        lambda: all(store.ops.get_job(i).status in finished for i in ids),
        timeout=60,
        what="every job finished",
    )
    expected = {"enqueued": 45, "started": 57, "completed": 38, "failed": 19, "retried": 12}
    assert truth(sql_conn, "h") == expected
    # Unfolded (no exporter, no watcher ran): the read adds the deltas.
    assert sums(store, "h") == expected
    counters.fold(store.db)
    left = sql_conn.execute("SELECT count(*) FROM leasectl.queue_history_deltas").fetchone()
    assert left == (0,)
    assert sums(store, "h") == expected
    assert sums(store, None) == {**expected, "enqueued": 50}
    assert sums(store, "other-queue") == dict.fromkeys(COUNTS, 0) | {"enqueued": 5}
    # The pickup histogram counts every start; the counters agree with the history.
    report = history.read_stats(store.db, "h", HOUR)
    assert sum(sum(m.pickup) for m in report.minutes) == expected["started"]
    totals: dict[str, int] = dict(
        sql_conn.execute(
            "SELECT counter, value FROM leasectl.counter_totals WHERE queue = 'h'"
        ).fetchall()
    )
    assert {k: totals[k] for k in ("completed", "failed", "retried")} == {
        k: expected[k] for k in ("completed", "failed", "retried")
    }
    # The CLI reads the same, as one JSON document.
    proc = cli("stats", "--queue", "h", "--since", "30m", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["queue"] == "h" and len(doc["buckets"]) == 31
    assert {k: sum(b[k] for b in doc["buckets"]) for k in COUNTS} == expected


def test_pickup_latency_is_the_start_minus_when_the_job_became_due(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    # Created 40 s ago and due 20 s ago (run_at wins); created 30 s ago, due at once (created_at
    # wins: a run_at before it counts from the creation).
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, created_at, run_at) VALUES "
        "('p', now() - interval '40 s', now() - interval '20 s'), "
        "('p', now() - interval '30 s', now() - interval '1 hour')"
    )
    leases = store.work.claim("p", "w1", TTL, limit=2)
    assert len(leases) == 2
    pickups = (
        "SELECT bucket, delta FROM leasectl.queue_history_deltas WHERE counter = 'pickup' "
        "ORDER BY bucket"
    )
    # Counted when the attempt ends (migration 31): none while both run.
    assert sql_conn.execute(pickups).fetchall() == []
    # One completed, one failed: each counted once, from when its job became due to its start.
    store.work.complete([leases[0]])
    store.work.fail(leases[1], "boom", retry_delay=timedelta(seconds=1))
    rows = sql_conn.execute(pickups).fetchall()
    assert sorted(rows) == sorted([(bucket_of(20_000), 1), (bucket_of(30_000), 1)])
    [latency] = history.pickup_recent(store.db)
    assert (latency.queue, latency.started) == ("p", 2)
    assert latency.p50_ms is not None and latency.p95_ms is not None
    assert (
        bucket_bounds(bucket_of(20_000))[0] <= latency.p50_ms <= bucket_bounds(bucket_of(20_000))[1]
    )
    assert (
        bucket_bounds(bucket_of(30_000))[0] <= latency.p95_ms <= bucket_bounds(bucket_of(30_000))[1]
    )


def test_a_job_claimed_by_id_before_it_is_due_counts_in_the_first_bucket(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    [job] = store.ops.enqueue([{}], queue="early", delay=HOUR)
    lease = store.work.claim_by_id(job, "w1", TTL)
    assert lease is not None
    store.work.complete([lease])
    rows = sql_conn.execute(
        "SELECT counter, bucket, delta FROM leasectl.queue_history_deltas "
        "WHERE queue = 'early' ORDER BY counter"
    ).fetchall()
    assert rows == [("completed", 0, 1), ("enqueued", 0, 1), ("pickup", 0, 1)]


def test_a_takeover_counts_its_pickup_from_when_the_job_first_became_due(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A lapsed lease taken over (jobs_claim_expired) is a pickup like any claim, its latency
    from when the job became due (run_at, later than its creation), not from its last lease."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, created_at, run_at, lease_owner, lease_until,"
        " heartbeat_at, attempts) VALUES ('t', 'Processing', now() - interval '40 s', "
        "now() - interval '20 s', 'gone', now() - interval '1 s', now() - interval '10 s', 1)"
    )
    [lease] = store.work.claim("t", "w1", TTL)
    assert lease.attempt == 2
    store.work.complete([lease])
    rows = sql_conn.execute(
        "SELECT counter, bucket, delta FROM leasectl.queue_history_deltas "
        "WHERE queue = 't' AND counter = 'pickup'"
    ).fetchall()
    assert rows == [("pickup", bucket_of(20_000), 1)]


def test_a_wait_has_the_bucket_of_its_milliseconds_at_every_bound(
    sql_conn: psycopg.Connection,
) -> None:
    """history_wait_bucket (migration 31: the pickups' bucket from an interval, by a search of
    its bounds) agrees with history_bucket and Python's bucket_of one microsecond either side
    of every bound, below zero and past the last."""
    bounds = [0] + [math.ceil(bucket_bounds(b)[0] * 1000) for b in range(1, 64)]
    waits = sorted({max(-5_000_000, us + d) for us in bounds for d in (-1, 0, 1)} | {10**15})
    got = sql_conn.execute(
        "SELECT array_agg(leasectl.history_wait_bucket(timestamptz '2026-01-01' + "
        "make_interval(secs => us / 1e6), timestamptz '2026-01-01') "
        "ORDER BY n), array_agg(leasectl.history_bucket(us / 1e3) ORDER BY n) "
        "FROM unnest(%s::bigint[]) WITH ORDINALITY AS x(us, n)",
        (waits,),
    ).fetchone()
    expected = [bucket_of(us / 1000) for us in waits]
    assert got == (expected, expected)


def test_the_sql_buckets_are_the_ones_python_reads(sql_conn: psycopg.Connection) -> None:
    values = [0.5, 1.2, 3.7, 99.0, 1234.5, 86_400_000.0, 1e13]
    got = sql_conn.execute(
        "SELECT array_agg(leasectl.history_bucket(v) ORDER BY n) "
        "FROM unnest(%s::float8[]) WITH ORDINALITY AS x(v, n)",
        (values,),
    ).fetchone()
    assert got == ([bucket_of(v) for v in values],)


def test_the_backlog_is_sampled_once_a_minute_capped_by_its_budget(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    store.ops.enqueue([{}] * 5, queue="b")
    store.ops.enqueue([{}] * 3, queue="b", delay=HOUR)  # not due: not backlog
    counters.fold(store.db)
    [minute] = (
        sql_conn.execute("SELECT minute FROM leasectl.queue_backlog_minutes").fetchone() or ()
    )
    assert sql_conn.execute(
        "SELECT queue, pending, capped FROM leasectl.queue_backlog"
    ).fetchall() == [("b", 5, False)]
    # A second fold in the same minute samples nothing (unless the minute just turned).
    store.ops.enqueue([{}] * 2, queue="b")
    counters.fold(store.db)
    rows = sql_conn.execute(
        "SELECT pending FROM leasectl.queue_backlog WHERE minute = %s", (minute,)
    ).fetchall()
    assert rows == [(5,)]
    # Counted to the cap (a budget of 2 entries): a lower bound, and said so.
    sql_conn.execute("DELETE FROM leasectl.queue_backlog_minutes")
    sql_conn.execute("DELETE FROM leasectl.queue_backlog")
    sql_conn.execute("SELECT leasectl.history_fold(100, 10, 2, 2)")
    assert sql_conn.execute("SELECT pending, capped FROM leasectl.queue_backlog").fetchall() == [
        (3, True)
    ]
    # stats reads the sample; a sampled minute without a queue's row is 0 for that queue.
    report = history.read_stats(store.db, "b", timedelta(minutes=5))
    assert 3 in [m.pending for m in report.minutes]
    quiet = history.read_stats(store.db, "never-used", timedelta(minutes=5))
    assert 0 in [m.pending for m in quiet.minutes]
    # With statistics, a capped sample is raised to the planner's estimate of the due jobs
    # (migration 30), as `status` and the console estimate them, and says so.
    sql_conn.execute("ANALYZE leasectl.jobs")
    [(estimate,)] = sql_conn.execute(
        "SELECT leasectl.estimate_jobs('Pending', 'b', now())"
    ).fetchall()
    assert estimate > 3
    sql_conn.execute("DELETE FROM leasectl.queue_backlog_minutes")
    sql_conn.execute("DELETE FROM leasectl.queue_backlog")
    sql_conn.execute("SELECT leasectl.history_fold(100, 10, 2, 2)")
    assert sql_conn.execute(
        "SELECT pending, capped, estimated FROM leasectl.queue_backlog"
    ).fetchall() == [(estimate, True, True)]
    [last] = [m for m in history.read_stats(store.db, "b", timedelta(minutes=5)).minutes
              if m.pending is not None][-1:]  # fmt: skip
    assert (last.pending, last.pending_capped, last.pending_estimated) == (estimate, True, True)
    # Within the cap, the count is exact and no estimate replaces it.
    sql_conn.execute("DELETE FROM leasectl.queue_backlog_minutes")
    sql_conn.execute("DELETE FROM leasectl.queue_backlog")
    sql_conn.execute("SELECT leasectl.history_fold(100, 10, 100, 100)")
    assert sql_conn.execute(
        "SELECT pending, capped, estimated FROM leasectl.queue_backlog"
    ).fetchall() == [(7, False, False)]


def test_a_fold_left_open_holds_up_no_other_fold_and_changes_no_value(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    def step(jobs: int) -> None:
        """Enqueue ``jobs`` jobs, claim and complete them (enqueued, started, a pickup bucket,
        completed)."""
        store.ops.enqueue([{}] * jobs, queue="f")
        leases = store.work.claim("f", "w1", TTL, limit=jobs)
        assert len(leases) == jobs
        store.work.complete(leases)

    def read() -> tuple[dict[str, int], int]:
        minutes = history.read_stats(store.db, "f", HOUR).minutes
        return sums(store, "f"), sum(sum(m.pickup) for m in minutes)

    step(3)
    counters.fold(store.db)  # the minute's row, committed
    step(2)
    held = psycopg.connect(db_dsn)
    try:
        # A fold left open: it holds the minute's row (and the deltas it took).
        held.execute("SELECT leasectl.history_fold(1000, 10, 100, 10)")
        step(2)
        done = threading.Event()

        def other() -> None:
            counters.fold(store.db)
            done.set()

        threading.Thread(target=other, daemon=True).start()
        wait_until(done.is_set, timeout=10, what="a fold beside one left open")
        counts, started = read()
        assert counts["enqueued"] == counts["started"] == started == 7
    finally:
        held.rollback()
        held.close()
    step(1)
    for _ in range(2):
        counters.fold(store.db)
        counts, started = read()
        assert counts["enqueued"] == counts["started"] == started == 8


def _old_history(conn: psycopg.Connection, days: int, queues: int) -> None:
    conn.execute(
        "INSERT INTO leasectl.queue_history (queue, minute, enqueued) "
        "SELECT 'old' || q, date_trunc('minute', now()) - make_interval(days => %s), 1 "
        "FROM generate_series(1, %s) AS q",
        (days, queues),
    )
    conn.execute(
        "INSERT INTO leasectl.queue_backlog (queue, minute, pending, capped) "
        "SELECT 'old' || q, date_trunc('minute', now()) - make_interval(days => %s), 1, false "
        "FROM generate_series(1, %s) AS q",
        (days, queues),
    )


def _history_rows(conn: psycopg.Connection) -> tuple[int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM leasectl.queue_history), "
        "(SELECT count(*) FROM leasectl.queue_backlog)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_prune_deletes_minutes_past_the_keep_in_batches(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    _old_history(sql_conn, 8, 7)
    _old_history(sql_conn, 6, 2)
    assert history.prune(store.db, timedelta(days=7), batch=3) == 14
    assert _history_rows(sql_conn) == (2, 2)
    # `prune` does it too, with its own keep; a dry run deletes none.
    dry = cli("prune", "--older-than", "1d", "--history-keep", "5d", "--dry-run", dsn=db_dsn)
    assert dry.returncode == 0 and _history_rows(sql_conn) == (2, 2)
    proc = cli("prune", "--older-than", "1d", "--history-keep", "5d", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["history_rows"] == 4
    assert _history_rows(sql_conn) == (0, 0)
    bad = cli("prune", "--older-than", "1d", "--history-keep", "10s", dsn=db_dsn)
    assert_one_line_error(bad, 2, "--history-keep")


def test_the_watcher_folds_and_prunes_the_history(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    _old_history(sql_conn, 3, 4)
    store.ops.enqueue([{}] * 2, queue="w")
    watcher = Watcher(
        store.ops,
        WatcherConfig(interval=timedelta(milliseconds=50), history_keep=timedelta(days=2)),
    )
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: _history_rows(sql_conn)[0] == 1, what="old minutes pruned, new folded")
        wait_until(
            lambda: (
                sql_conn.execute("SELECT count(*) FROM leasectl.queue_history_deltas").fetchone()
                == (0,)
            ),
            what="deltas folded",
        )
    finally:
        watcher.stop()
        thread.join(10)
    assert sums(store, "w")["enqueued"] == 2


@pytest.mark.parametrize("since", ["nonsense", "0", "-5m", "32d"])
def test_a_bad_since_is_one_line_and_exit_2(db_dsn: str, since: str) -> None:
    assert_one_line_error(cli("stats", "--since", since, dsn=db_dsn), 2, "--since")


def test_stats_and_status_show_the_history_at_80_columns(db_dsn: str, store: Stores) -> None:
    store.ops.enqueue([{}] * 3, queue="s")
    store.work.complete(store.work.claim("s", "w1", TTL, limit=3))
    proc = cli("stats", "--since", "2h", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Stats: every queue, ") and "(121 minutes" in lines[0]
    assert max(len(line) for line in lines) <= 80
    completed = next(line for line in lines if line.startswith("completed"))
    assert completed.split()[1] == "3"
    status = cli("status", "--json", dsn=db_dsn)
    assert status.returncode == 0, status.stderr
    [pickup] = json.loads(status.stdout)["pickup"]
    assert (pickup["queue"], pickup["started"]) == ("s", 3)
    assert pickup["p50_ms"] is not None and pickup["p95_ms"] >= pickup["p50_ms"]
    human = cli("status", dsn=db_dsn)
    assert "Pickup latency" in human.stdout


def test_the_exporter_reports_each_queues_pickup_latency(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    from leasectl.db.metrics import MetricsReads
    from leasectl.runtime.exporter import LeasectlCollector

    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, created_at, run_at) "
        "SELECT 'x', now() - interval '2.5 s', now() - interval '2.5 s' FROM generate_series(1, 4)"
    )
    leases = store.work.claim("x", "w1", TTL, limit=4)
    assert len(leases) == 4
    store.work.complete(leases)
    reads = MetricsReads(store.db)
    collector = LeasectlCollector(reads, timedelta(seconds=10), lambda: reads)
    got = {
        tuple(sorted(s.labels.items())): s.value
        for family in collector.collect()
        if family.name == "leasectl_pickup_latency_seconds"
        for s in family.samples
    }
    low, high = (b / 1000 for b in bucket_bounds(bucket_of(2500)))
    assert set(got) == {(("quantile", q), ("queue", "x")) for q in ("0.5", "0.95")}
    assert all(low <= v <= high for v in got.values()), got


def test_every_way_an_attempt_ends_counts_its_pickup_once(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Migration 31: a pickup is counted when its attempt ends, however it ends (completed,
    failed, snoozed, released, or lapsed and taken over), once, in the minute it started; an
    attempt still running is not counted yet."""
    store.ops.enqueue([{}] * 6, queue="e")
    leases = store.work.claim("e", "w1", TTL, limit=6)
    assert len(leases) == 6
    store.work.complete([leases[0]])
    store.work.fail(leases[1], "boom", retry_delay=HOUR)
    assert store.work.snooze(leases[2], HOUR) is not None
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 s' WHERE id = %s",
        (leases[4].job_id,),
    )
    [taken] = store.work.claim("e", "w2", TTL)
    assert (taken.job_id, taken.attempt) == (leases[4].job_id, 2)
    assert store.work.release([leases[3]]) == {leases[3].job_id}
    store.work.heartbeat([leases[5]], TTL)  # still running: not counted
    pickups = (
        "SELECT coalesce(sum(delta), 0)::integer FROM leasectl.queue_history_deltas "
        "WHERE queue = 'e' AND counter = 'pickup'"
    )
    assert sql_conn.execute(pickups).fetchone() == (5,)
    # Updating an ended attempt again, or a running one, counts nothing more; the last two
    # count when they end.
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET heartbeat_at = now() WHERE job_id = ANY(%s)",
        ([leases[0].job_id, leases[5].job_id],),
    )
    assert sql_conn.execute(pickups).fetchone() == (5,)

    def read() -> tuple[int, int, int]:
        """started and pickups of `stats`, started of `status`' recent latency."""
        minutes = history.read_stats(store.db, "e", HOUR).minutes
        [recent] = [p for p in history.pickup_recent(store.db) if p.queue == "e"]
        return sum(m.started for m in minutes), sum(sum(m.pickup) for m in minutes), recent.started

    # The readers count the two running attempts as they run, and once they end, the same.
    assert read() == (7, 7, 7)
    store.work.complete([taken])
    store.work.complete([leases[5]])
    assert sql_conn.execute(pickups).fetchone() == (7,)
    assert read() == (7, 7, 7)
    counters.fold(store.db)
    assert read() == (7, 7, 7)


def test_a_pickup_counts_in_the_minute_its_attempt_started_and_reads_as_it_runs(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Migration 31: a pickup counted at its attempt's end goes to the minute the attempt
    started (a start after the ending statement's, as only a forged row has, to that
    statement's minute); while it runs, the readers count it in that minute, for its own queue
    only, and not before the window."""
    store.ops.enqueue([{}], queue="other")
    assert len(store.work.claim("other", "w9", TTL)) == 1  # another queue's, running
    # Due 10 minutes ago: a pickup's minute is its start's, not its job's creation's.
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, created_at, run_at) SELECT 'm', now() - "
        "interval '10 minutes', now() - interval '10 minutes' FROM generate_series(1, 3)"
    )
    early, now, forged = store.work.claim("m", "w1", TTL, limit=3)
    # early: as if claimed 3 minutes ago (its job and its attempt), migration 31 an hour ago.
    sql_conn.execute(
        "UPDATE leasectl.schema_migrations SET applied_at = now() - interval '1 hour' "
        "WHERE version = 31"
    )
    sql_conn.execute(
        "UPDATE leasectl.jobs SET updated_at = updated_at - interval '3 minutes', "
        "created_at = created_at - interval '3 minutes', run_at = run_at - interval '3 minutes' "
        "WHERE id = %s",
        (early.job_id,),
    )
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET started_at = started_at - interval '3 minutes', "
        "due_at = due_at - interval '3 minutes' WHERE job_id = %s",
        (early.job_id,),
    )

    def started(since: timedelta) -> int:
        return sum(m.started for m in history.read_stats(store.db, "m", since).minutes)

    assert (started(timedelta(minutes=1)), started(timedelta(minutes=10))) == (2, 3)
    [recent] = [p for p in history.pickup_recent(store.db) if p.queue == "m"]
    assert recent.started == 2  # the current and the previous minute's: not early's
    store.work.complete([early, now])
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET started_at = now() + interval '1 hour' WHERE job_id = %s",
        (forged.job_id,),
    )
    store.work.complete([forged])
    counted = sql_conn.execute(
        "SELECT minute, bucket, sum(delta)::integer FROM leasectl.queue_history_deltas "
        "WHERE counter = 'pickup' AND queue = 'm' GROUP BY 1, 2"
    ).fetchall()
    # early: its start's minute, 3 minutes back; now: its start's; forged: its end's.
    expected = sql_conn.execute(
        "SELECT date_trunc('minute', CASE WHEN job_id = %s THEN ended_at ELSE started_at END, "
        "'UTC'), leasectl.history_wait_bucket(started_at, due_at), count(*)::integer "
        "FROM leasectl.job_attempts WHERE job_id = ANY(%s) GROUP BY 1, 2",
        (forged.job_id, [early.job_id, now.job_id, forged.job_id]),
    ).fetchall()
    assert sorted(counted) == sorted(expected) and len(expected) == 3, (counted, expected)
    assert (started(timedelta(minutes=1)), started(timedelta(minutes=10))) == (2, 3)


def test_infinite_times_count_in_a_bucket_and_fail_no_reader_nor_completion(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Times a worker may write (a Processing job's updated_at, its attempts' started_at and
    due_at) or the owner by hand, infinite: the readers answer, the completion completes, and
    each pickup lands in the first or the open bucket of a minute no later than now."""
    store.ops.enqueue([{}] * 3, queue="inf")
    a, b, c = store.work.claim("inf", "w1", TTL, limit=3)
    sql_conn.execute("UPDATE leasectl.jobs SET updated_at = 'infinity' WHERE id = %s", (a.job_id,))
    sql_conn.execute("UPDATE leasectl.jobs SET created_at = 'infinity' WHERE id = %s", (b.job_id,))
    assert sums(store, "inf")["started"] == 3
    for args in (("stats", "--queue", "inf", "--json"), ("status", "--json")):
        proc = cli(*args, dsn=db_dsn)
        assert proc.returncode == 0, proc.stderr
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET started_at = 'infinity' WHERE job_id = %s", (a.job_id,)
    )
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET due_at = 'infinity' WHERE job_id = %s", (b.job_id,)
    )
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET due_at = '-infinity' WHERE job_id = %s", (c.job_id,)
    )
    assert store.work.complete([a, b, c]) == {a.job_id, b.job_id, c.job_id}
    rows = sql_conn.execute(
        "SELECT bucket, sum(delta)::integer, bool_and(minute <= now()) "
        "FROM leasectl.queue_history_deltas WHERE queue = 'inf' AND counter = 'pickup' "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert rows == [(0, 1, True), (63, 2, True)], rows


def test_one_statement_ending_attempts_of_several_minutes_and_waits_counts_each_once(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """One completion of attempts that started in two minutes after waits of many buckets (the
    trigger sums a statement's attempts by queue, start minute and bucket, then writes each
    group's counts): each completion once, in the statement's minute, and each pickup once, in
    its start's minute and its wait's bucket."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, created_at, run_at) "
        "SELECT 'g', now() - i * interval '7 seconds', now() - i * interval '7 seconds' "
        "FROM generate_series(1, 12) AS i"
    )
    leases = store.work.claim("g", "w1", TTL, limit=12)
    assert len(leases) == 12
    # Half of them as if claimed two minutes earlier, after the same waits.
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET started_at = started_at - interval '2 minutes', "
        "due_at = due_at - interval '2 minutes' WHERE job_id = ANY(%s)",
        ([lease.job_id for lease in leases[:6]],),
    )
    assert store.work.complete(leases) == {lease.job_id for lease in leases}
    counted = sql_conn.execute(
        "SELECT counter, minute, bucket, sum(delta)::integer FROM leasectl.queue_history_deltas "
        "WHERE queue = 'g' AND counter IN ('completed', 'pickup') GROUP BY 1, 2, 3"
    ).fetchall()
    expected = sql_conn.execute(
        "SELECT 'pickup', date_trunc('minute', started_at, 'UTC'), "
        "leasectl.history_wait_bucket(started_at, due_at), count(*)::integer "
        "FROM leasectl.job_attempts WHERE queue = 'g' GROUP BY 2, 3 "
        "UNION ALL SELECT 'completed', date_trunc('minute', max(ended_at), 'UTC'), 0, "
        "count(*)::integer FROM leasectl.job_attempts WHERE queue = 'g'"
    ).fetchall()
    assert sorted(counted) == sorted(expected), (counted, expected)
    assert len({(minute, bucket) for _, minute, bucket, _ in expected}) >= 4, expected
    summed = sums(store, "g")
    assert (summed["started"], summed["completed"]) == (12, 12)
