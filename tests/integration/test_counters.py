"""The exporter's counters (migration 11): kept by the database's triggers on every path that
ends an attempt or writes an audit row, read by any number of exporters alike, never lowered by
prune or delete, and exact under concurrent completions."""

from __future__ import annotations

import re
import threading
import uuid
from datetime import timedelta

import psycopg
import pytest

from bench.plans import explain_nested
from leasectl.core.errors import PermissionDenied
from leasectl.db import counters as counter_folds
from leasectl.db import grants
from leasectl.db.metrics import MetricsReads
from leasectl.runtime.exporter import LeasectlCollector
from leasectl.runtime.watcher import Watcher, WatcherConfig
from tests.exporter import Scrape, exporter, scrape
from tests.integration.test_privileges import login_roles
from tests.stores import Stores
from tests.util import wait_until

TTL = timedelta(seconds=30)
NOW = timedelta(0)
COUNTERS = (
    "leasectl_jobs_completed_total",
    "leasectl_attempts_failed_total",
    "leasectl_job_retries_total",
    "leasectl_watcher_actions_total",
    "leasectl_operator_actions_total",
)


def _expire(conn: psycopg.Connection, ids: list[int]) -> None:
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = ANY(%s)",
        (ids,),
    )


def _counters(s: Scrape) -> dict[str, int]:
    """Every counter sample as 'name{queue,action}' -> value."""
    out = {}
    for name in COUNTERS:
        for labels, value in s.series(name).items():
            key = ",".join(v for _, v in sorted(labels, key=lambda kv: kv[0] != "queue"))
            out[f"{name}{{{key}}}"] = int(value)
    return out


def _collect(reads: MetricsReads) -> dict[str, int]:
    """One in-process scrape of a collector over ``reads``, as _counters gives it."""
    collector = LeasectlCollector(reads, timedelta(seconds=10), lambda: reads)
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    families: dict[str, str] = {}
    for family in collector.collect():
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    assert samples[("leasectl_up", frozenset())] == 1
    return _counters(Scrape(families, samples))


def act_on_everything(store: Stores, conn: psycopg.Connection) -> dict[str, int]:
    """Complete, fail (retried and final), watcher requeue/fail/mark, every operator action
    and a pause, through the data layer as the commands do; returns the expected counters."""
    ops, work = store.ops, store.work
    pay = ops.enqueue([{"n": i} for i in range(8)], queue="pay", max_attempts=2)
    ops.enqueue([{}], queue="mail")
    leases = work.claim("pay", "w1", TTL, limit=8)
    assert [le.job_id for le in leases] == pay
    # Two completions in one statement; one of mail's.
    assert work.complete(leases[:2]) == set(pay[:2])
    assert work.complete(work.claim("mail", "w1", TTL)) != set()
    # A failure retried (back to Pending), one final (PermanentError's path: retry=False).
    assert work.fail(leases[2], "boom", retry_delay=timedelta(hours=1)) == "Pending"
    assert work.fail(leases[3], "fatal", retry_delay=NOW, retry=False) == "Failed"
    # The watcher: one expired lease back to Pending, one with its budget spent to Failed.
    conn.execute("UPDATE leasectl.jobs SET max_attempts = 1 WHERE id = %s", (pay[5],))
    _expire(conn, pay[4:6])
    moved = ops.requeue_expired(limit=10, queue=None, mark=False, actor="watcher@h:1", reason="x")
    assert {str(k): v for k, v in moved.counts.items()} == {"Pending": 1, "Failed": 1}
    # ... and one marked Stuck (mark mode).
    _expire(conn, pay[6:7])
    moved = ops.requeue_expired(limit=10, queue=None, mark=True, actor="watcher@h:1", reason="x")
    assert {str(k): v for k, v in moved.counts.items()} == {"Stuck": 1}
    # The operator: requeue the Stuck job, force-requeue a live lease, mark a Pending job stuck
    # and force-mark the other live lease, cancel the retried one, delete a Completed one.
    op = {"actor": "operator:t@h", "reason": "test"}
    assert ops.operator_requeue(ops.seen_now([pay[6]]), **op).changed == (pay[6],)
    assert ops.operator_requeue(ops.seen_now([pay[7]]), force=True, **op).changed == (pay[7],)
    assert ops.operator_mark_stuck(ops.seen_now([pay[4]]), **op).changed == (pay[4],)
    assert ops.operator_cancel(ops.seen_now([pay[2]]), **op).changed == (pay[2],)
    assert ops.operator_delete(ops.seen_now([pay[0], pay[4]]), **op).changed == (pay[0], pay[4])
    ops.pause("pay", actor="operator:t@h", reason="maintenance")
    ops.resume("pay", actor="operator:t@h")
    ops.pause("mail", actor="operator:t@h", reason="maintenance")
    return {
        "leasectl_jobs_completed_total{pay}": 2,
        "leasectl_jobs_completed_total{mail}": 1,
        "leasectl_attempts_failed_total{pay}": 2,
        "leasectl_job_retries_total{pay}": 1,
        "leasectl_watcher_actions_total{pay,requeue}": 1,
        "leasectl_watcher_actions_total{pay,fail}": 1,
        "leasectl_watcher_actions_total{pay,mark_stuck}": 1,
        "leasectl_operator_actions_total{pay,requeue}": 1,
        "leasectl_operator_actions_total{pay,requeue_forced}": 1,
        "leasectl_operator_actions_total{pay,mark_stuck}": 1,
        "leasectl_operator_actions_total{pay,cancel}": 1,
        "leasectl_operator_actions_total{pay,delete}": 2,
        "leasectl_operator_actions_total{pay,pause}": 1,
        "leasectl_operator_actions_total{pay,resume}": 1,
        "leasectl_operator_actions_total{mail,pause}": 1,
    }


def test_a_scrape_counts_every_path_exactly(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    expected = act_on_everything(store, sql_conn)
    with exporter(db_dsn) as (_, url):
        s = scrape(url)
        assert s.value("leasectl_up") == 1
        assert {n: s.families[n.removesuffix("_total")] for n in COUNTERS} == dict.fromkeys(
            COUNTERS, "counter"
        )
        assert _counters(s) == expected
        # The exporter folds the deltas between scrapes; a scrape then reads the same.
        wait_until(
            lambda: (
                sql_conn.execute("SELECT count(*) FROM leasectl.counter_deltas").fetchone() == (0,)
            ),
            what="the exporter folds the counters",
        )
        assert _counters(scrape(url)) == expected


def test_two_collectors_agree_and_folding_changes_no_value(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    expected = act_on_everything(store, sql_conn)
    # Before any fold: every value is in the deltas.
    assert sql_conn.execute("SELECT count(*) FROM leasectl.counter_totals").fetchone() == (0,)
    deltas = sql_conn.execute("SELECT count(*) FROM leasectl.counter_deltas").fetchone()
    assert deltas is not None and deltas[0] > 1
    one = MetricsReads(store.db)
    with Stores.connect(db_dsn, "leasectl") as other:
        two = MetricsReads(other.db, fold_limit=1)  # folds one delta at a time
        assert _collect(two) == _collect(one) == expected
        assert two.fold() == 1
        left = sql_conn.execute("SELECT count(*) FROM leasectl.counter_deltas").fetchone()
        assert left == (deltas[0] - 1,)
        assert _collect(two) == _collect(one) == expected
        assert one.fold() == deltas[0] - 1  # the rest
        assert sql_conn.execute("SELECT count(*) FROM leasectl.counter_deltas").fetchone() == (0,)
        assert _collect(two) == _collect(one) == expected


def test_counters_never_decrease_when_history_goes(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    expected = act_on_everything(store, sql_conn)
    reads = MetricsReads(store.db)
    assert _collect(reads) == expected
    reads.fold()
    # Everything finished is pruned, with its events; the Stuck and Failed jobs deleted.
    while store.ops.prune_batch(NOW, 1000, None, keep_events=False) != (0, 0):
        pass
    sql_conn.execute("DELETE FROM leasectl.job_events")
    left = sql_conn.execute("SELECT count(*) FROM leasectl.job_attempts").fetchone()
    assert left is not None
    assert _collect(reads) == expected


def test_an_attempt_updated_after_it_ended_and_other_audit_rows_count_nothing(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    (job,) = store.ops.enqueue([{}], queue="q")
    lease = store.work.claim("q", "w1", TTL)
    assert store.work.complete(lease) == {job}
    (failing,) = store.ops.enqueue([{}], queue="q")
    (lease2,) = store.work.claim("q", "w1", TTL)
    store.work.fail(lease2, "boom", retry_delay=NOW, retry=False)
    sql_conn.execute("UPDATE leasectl.job_attempts SET error = 'edited by hand'")
    assert failing
    # An audit row that is no watcher's nor operator's action (init's clamping) counts nothing.
    sql_conn.execute(
        "INSERT INTO leasectl.job_events (job_id, actor, action) "
        "VALUES (%s, 'leasectl init', 'bounded')",
        (job,),
    )
    assert _collect(MetricsReads(store.db)) == {
        "leasectl_jobs_completed_total{q}": 1,
        "leasectl_attempts_failed_total{q}": 1,
    }


def test_a_takeover_and_a_release_count_as_neither_completion_nor_failure(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    ids = store.ops.enqueue([{}, {}], queue="q")
    leases = store.work.claim("q", "w1", TTL, limit=2)
    _expire(sql_conn, ids[:1])
    assert [le.job_id for le in store.work.claim("q", "w2", TTL)] == ids[:1]
    assert store.work.release(leases[1:]) == {ids[1]}
    assert _collect(MetricsReads(store.db)) == {}


def test_concurrent_completions_and_failures_add_up_exactly(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    threads, per_thread = 6, 60
    store.ops.enqueue([{}] * (threads * per_thread), queue="c", max_attempts=1000)
    done = {"completed": 0, "failed": 0, "retried": 0}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        mine = {"completed": 0, "failed": 0, "retried": 0}
        with Stores.connect(db_dsn, "leasectl") as own:
            start.wait()
            while True:
                leases = own.work.claim("c", f"w{n}", TTL, limit=3)
                if not leases:
                    break
                # Every third lease fails and comes back at once; the rest complete.
                for i, lease in enumerate(leases):
                    if (lease.job_id + i) % 3 == 0 and lease.attempt < 3:
                        if own.work.fail(lease, "x", retry_delay=NOW) is not None:
                            mine["failed"] += 1
                            mine["retried"] += 1
                    else:
                        mine["completed"] += len(own.work.complete([lease]))
        with lock:
            for k, v in mine.items():
                done[k] += v

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in pool)
    assert done["completed"] == threads * per_thread and done["failed"] > 0
    assert _collect(MetricsReads(store.db)) == {
        "leasectl_jobs_completed_total{c}": done["completed"],
        "leasectl_attempts_failed_total{c}": done["failed"],
        "leasectl_job_retries_total{c}": done["retried"],
    }


def _race(db_dsn: str, call: str, threads: int = 4, calls: int = 20) -> None:
    """``threads`` connections each running ``call`` ``calls`` times at once."""
    errors: list[BaseException] = []

    def fold() -> None:
        try:
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                for _ in range(calls):
                    conn.execute(call)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=fold) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in pool)


def test_concurrent_folds_count_each_delta_once(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    # The operator's actions: one key's 200 deltas (a statement each) in counter_deltas.
    for _ in range(100):
        store.ops.pause("f", actor="operator:t@h", reason="x")
        store.ops.resume("f", actor="operator:t@h")
    # A fold moves at most its limit of them.
    assert sql_conn.execute("SELECT leasectl.counters_fold(7)").fetchone() == (7,)
    _race(db_dsn, "SELECT leasectl.counters_fold(7)")
    assert _collect(MetricsReads(store.db)) == {
        "leasectl_operator_actions_total{f,pause}": 100,
        "leasectl_operator_actions_total{f,resume}": 100,
    }


def test_concurrent_history_folds_count_each_outcome_once(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The attempts' outcomes have one delta each, in the history's deltas (migration 27):
    history_fold moves it into both queue_history and counter_totals, once, however many folds
    race, and a scrape between folds reads the same totals."""
    ids = store.ops.enqueue([{}] * 200, queue="f", max_attempts=2)
    for n, job in enumerate(ids):  # 200 statements: 200 outcome deltas (and 40 retries)
        (lease,) = store.work.claim("f", "w", TTL)
        if n % 5 == 0:
            assert store.work.fail(lease, "x", retry_delay=timedelta(hours=1)) == "Pending"
        else:
            assert store.work.complete([lease]) == {job}
    expected = {
        "leasectl_jobs_completed_total{f}": 160,
        "leasectl_attempts_failed_total{f}": 40,
        "leasectl_job_retries_total{f}": 40,
    }
    outcomes = "SELECT count(*) FROM leasectl.counter_deltas"
    assert sql_conn.execute(outcomes).fetchone() == (0,)
    assert _collect(MetricsReads(store.db)) == expected
    fold = "SELECT leasectl.history_fold(7, 10, 100, 10)"
    assert sql_conn.execute(fold).fetchone() == (7,)
    assert _collect(MetricsReads(store.db)) == expected
    # History folds racing each other and the whole fold (counters' then history's).
    errors: list[BaseException] = []

    def whole() -> None:
        try:
            for _ in range(10):
                counter_folds.fold(store.db, limit=7)
        except BaseException as exc:
            errors.append(exc)

    other = threading.Thread(target=whole)
    other.start()
    _race(db_dsn, fold, threads=3, calls=40)
    other.join(timeout=60)
    assert not errors
    sql_conn.execute("SELECT leasectl.history_fold(100000, 10, 100, 10)")  # what is left
    left = "SELECT count(*) FROM leasectl.queue_history_deltas"
    assert sql_conn.execute(left).fetchone() == (0,)
    assert _collect(MetricsReads(store.db)) == expected
    totals = sql_conn.execute(
        "SELECT counter, value FROM leasectl.counter_totals WHERE queue = 'f' ORDER BY counter"
    ).fetchall()
    assert totals == [("completed", 160), ("failed", 40), ("retried", 40)]
    history = sql_conn.execute(
        "SELECT sum(completed), sum(failed), sum(retried), sum(started) "
        "FROM leasectl.queue_history WHERE queue = 'f'"
    ).fetchone()
    assert history == (160, 40, 40, 200)


def test_every_role_that_acts_counts_an_operator_folds_and_a_viewer_only_reads(
    server_dsn: str, db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = {kind: f"lc_counters_{kind}_{tag}" for kind in ("viewer", "operator", "worker")}
    with login_roles(server_dsn, db_dsn, names) as roles:
        grants.apply(store.db, [grants.Grant(grants.Kind(k), n) for k, n in names.items()])
        with (
            Stores.connect(roles.dsn("worker"), "leasectl") as worker,
            Stores.connect(roles.dsn("operator"), "leasectl") as operator,
            Stores.connect(roles.dsn("viewer"), "leasectl") as viewer,
        ):
            a, b = store.ops.enqueue([{}, {}], queue="r")
            la, _ = worker.work.claim("r", "w", TTL, limit=2)
            assert worker.work.complete([la]) == {a}
            _expire(sql_conn, [b])
            operator.ops.requeue_expired(limit=5, queue=None, mark=False, actor="w@h:1", reason="x")
            (lb,) = worker.work.claim("r", "w", TTL)
            assert worker.work.fail(lb, "boom", retry_delay=timedelta(hours=1)) == "Pending"
            seen = operator.ops.seen_now([b])
            assert operator.ops.operator_cancel(seen, actor="o", reason="r").changed == (b,)
            operator.ops.pause("r", actor="o", reason="r")
            # Migration 16: a viewer may not fold (it would hold the folds' locks); it reads.
            assert not MetricsReads(viewer.db).may_fold
            with pytest.raises(PermissionDenied):
                MetricsReads(viewer.db).fold()
            assert MetricsReads(operator.db).may_fold
            # The watcher's requeue, the cancel and the pause (the outcomes: history_fold's).
            assert MetricsReads(operator.db).fold() == 3
            assert _collect(MetricsReads(viewer.db)) == {
                "leasectl_jobs_completed_total{r}": 1,
                "leasectl_attempts_failed_total{r}": 1,
                "leasectl_job_retries_total{r}": 1,
                "leasectl_watcher_actions_total{r,requeue}": 1,
                "leasectl_operator_actions_total{r,cancel}": 1,
                "leasectl_operator_actions_total{r,pause}": 1,
            }
            assert viewer.db.rows("metrics_counters", {"counter_limit": 10}) != []


def test_the_watcher_folds_the_counters_after_each_pass(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A database whose exporter does not run keeps a pass's worth of deltas, not all of them."""
    expected = act_on_everything(store, sql_conn)
    watcher = Watcher(store.ops, WatcherConfig(interval=timedelta(seconds=0.1), actor="w@t"))
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: (
                sql_conn.execute("SELECT count(*) FROM leasectl.counter_deltas").fetchone() == (0,)
            ),
            what="the watcher folds the counters",
        )
    finally:
        watcher.stop()
        thread.join(30)
    assert _collect(MetricsReads(store.db)) == expected


def test_counters_past_their_limit_say_they_are_truncated(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The limit is per counter: a counter of many series is cut, and says so, but never
    pushes another counter out of the scrape (every counter keeps its first series)."""
    act_on_everything(store, sql_conn)
    whole = MetricsReads(store.db).read(timedelta(seconds=10))
    per_counter: dict[str, list[tuple[str, str]]] = {}
    for c in whole.counters:
        per_counter.setdefault(c.counter, []).append((c.action, c.queue))
    assert set(per_counter) == {"completed", "failed", "retried", "watcher", "operator"}
    assert max(len(v) for v in per_counter.values()) > 1
    rows = MetricsReads(store.db, counter_limit=1).read(timedelta(seconds=10))
    assert "counters" in rows.truncated
    assert {c.counter: [(c.action, c.queue)] for c in rows.counters} == {
        counter: keys[:1] for counter, keys in per_counter.items()
    }
    most = max(len(v) for v in per_counter.values())
    rows = MetricsReads(store.db, counter_limit=most).read(timedelta(seconds=10))
    assert rows.counters == whole.counters and "counters" not in rows.truncated


def test_many_series_of_one_counter_leave_the_others_in_the_scrape(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The read stopped at 20,000 rows across counters, so 20,000 pause/resume
    series made the watcher's counter vanish from /metrics."""
    act_on_everything(store, sql_conn)
    sql_conn.execute(
        "INSERT INTO leasectl.counter_totals (counter, action, queue, value) "
        "SELECT 'operator', a, 'q' || i, 1 FROM generate_series(1, 60) AS i, "
        "unnest(ARRAY['pause', 'resume']) AS a"
    )
    rows = MetricsReads(store.db, counter_limit=50).read(timedelta(seconds=10))
    assert {c.counter for c in rows.counters} == {
        "completed", "failed", "retried", "watcher", "operator",
    }  # fmt: skip
    assert sum(c.counter == "operator" for c in rows.counters) == 50
    assert "counters" in rows.truncated


def test_the_attempts_trigger_reads_each_job_by_its_key_on_a_large_history(
    sql_conn: psycopg.Connection,
) -> None:
    """A batch of completions counted on a table whose history outweighs the batch: one
    primary key probe per attempt, never a scan of jobs, whatever the statistics."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at) "
        "SELECT 'q', 'Completed', 1, 'old', now() FROM generate_series(1, 30000)"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'q', 'Processing', 1, 'w', now() FROM generate_series(1, 300)"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at) "
        "SELECT id, 1, 'w', now() FROM leasectl.jobs WHERE status = 'Processing'"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")
    sql_conn.commit()
    plans = explain_nested(
        sql_conn,
        "UPDATE leasectl.job_attempts SET outcome = 'completed', ended_at = now() "
        "WHERE outcome = 'running'",
        counters=True,
    )
    [(_, plan)] = [(t, p) for t, p in plans if "INTO queue_history_deltas" in t]
    assert "Index Scan using jobs_pkey on jobs" in plan, plan
    assert "Seq Scan" not in plan and "Hash Join" not in plan and "Merge Join" not in plan, plan
    # (PostgreSQL 18 prints actual rows with two decimals: rows=300.00.)
    assert re.search(r"rows=300(\.0+)? loops=1", plan.split("Index Scan using jobs_pkey")[0]), plan


def test_completions_of_attempts_that_know_their_queue_read_no_job(
    sql_conn: psycopg.Connection,
) -> None:
    """Migration 31: an attempt opened by today's claims carries its queue and due time, so its
    completion is counted, with its pickup, without reading its job; a failure still reads it
    (was the job put back to Pending: a retry?)."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'q', 'Processing', 1, 'w', now() FROM generate_series(1, 300)"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, queue, "
        "due_at) SELECT id, 1, 'w', now(), queue, created_at FROM leasectl.jobs"
    )
    sql_conn.execute("ANALYZE leasectl.jobs")
    sql_conn.commit()
    statement = (
        "UPDATE leasectl.job_attempts SET outcome = '{}', ended_at = now() "
        "WHERE outcome = 'running' AND job_id % 2 = {}"
    )
    plans = explain_nested(sql_conn, statement.format("completed", 0), counters=True)
    [(_, plan)] = [(t, p) for t, p in plans if "INTO queue_history_deltas" in t]
    assert "Seq Scan on jobs" not in plan, plan
    probes = plan.split("Index Scan using jobs_pkey on jobs")
    assert len(probes) == 2 and "(never executed)" in probes[1].splitlines()[0], plan
    plans = explain_nested(sql_conn, statement.format("failed", 1), counters=True)
    [(_, plan)] = [(t, p) for t, p in plans if "INTO queue_history_deltas" in t]
    probed = plan.split("Index Scan using jobs_pkey")[1]
    assert re.search(r"rows=1(\.0+)? loops=150\b", probed), plan
    # (EXPLAIN's statements rolled back.) As they count: each outcome and every pickup once.
    sql_conn.execute(statement.format("completed", 0))
    sql_conn.execute(statement.format("failed", 1))
    counted = sql_conn.execute(
        "SELECT counter, sum(delta)::integer FROM leasectl.queue_history_deltas "
        "WHERE queue = 'q' AND counter <> 'enqueued' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert counted == [("completed", 150), ("failed", 150), ("pickup", 300)], counted
