"""Concurrency keys (migration 18): at most one job per queue and key in the head states
(Pending, Processing, Stuck), guaranteed by jobs_key_head_idx; the key's other jobs are
Waiting, promoted one at a time in queue order (priority, run_at, id) as each head leaves."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import leasectl
from leasectl.console.widgets.tables import key_cell
from leasectl.core.counts import BoundedCount
from leasectl.core.enqueue import NewJob
from leasectl.core.literal import visible
from leasectl.core.models import JobStatus
from leasectl.db.metrics import MetricsReads
from leasectl.runtime.exporter import families
from leasectl.runtime.watcher import Watcher, WatcherConfig
from tests.hostile import NAMES, literal_probe
from tests.inproc import run_in_process
from tests.integration.test_cli import _env, assert_one_line_error
from tests.integration.test_hostile_cli import inert
from tests.stores import Stores
from tests.util import wait_until

TTL = timedelta(seconds=30)


def states(conn: psycopg.Connection[Any], key: str, queue: str = "pay") -> list[tuple[int, str]]:
    return conn.execute(
        "SELECT id, status::text FROM leasectl.jobs WHERE queue = %s AND concurrency_key = %s "
        "ORDER BY id",
        (queue, key),
    ).fetchall()


def test_a_keys_first_job_is_pending_and_the_others_wait(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        a = leasectl.enqueue(conn, queue="pay", payload=1, concurrency_key="card-1")
        b = leasectl.enqueue(conn, queue="pay", payload=2, concurrency_key="card-1")
        many = leasectl.enqueue_many(
            conn, [NewJob(i, queue="pay", concurrency_key="card-1") for i in range(3)]
        )
        other = leasectl.enqueue(conn, queue="pay", payload=3, concurrency_key="card-2")
        other_queue = leasectl.enqueue(conn, queue="refund", payload=4, concurrency_key="card-1")
        plain = leasectl.enqueue(conn, queue="pay", payload=5)
    assert states(sql_conn, "card-1") == [(a.id, "Pending"), (b.id, "Waiting")] + [
        (e.id, "Waiting") for e in many
    ]
    assert states(sql_conn, "card-2") == [(other.id, "Pending")]
    assert states(sql_conn, "card-1", "refund") == [(other_queue.id, "Pending")]
    status = sql_conn.execute("SELECT status::text FROM leasectl.jobs WHERE id = %s", (plain.id,))
    assert status.fetchone() == ("Pending",)


def test_a_batch_of_one_key_keeps_its_order(db_dsn: str, sql_conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        jobs = leasectl.enqueue_many(
            conn, [NewJob(i, queue="pay", concurrency_key="k") for i in range(5)]
        )
    assert [s for _, s in states(sql_conn, "k")] == ["Pending"] + ["Waiting"] * 4
    assert [i for i, _ in states(sql_conn, "k")] == [e.id for e in jobs]


def test_the_head_leaving_promotes_the_next_in_queue_order(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ops, work = store.ops, store.work
    first = ops.enqueue_jobs([NewJob("a", queue="pay", concurrency_key="k")])[0]
    # Waiting jobs in another order than their ids: priority first, then run_at, then id.
    late = ops.enqueue_jobs([NewJob("late", queue="pay", concurrency_key="k", priority=5)])[0]
    urgent = ops.enqueue_jobs([NewJob("urgent", queue="pay", concurrency_key="k", priority=-1)])[0]
    normal = ops.enqueue_jobs([NewJob("normal", queue="pay", concurrency_key="k")])[0]
    order = []
    for _ in range(4):
        leases = work.claim("pay", "w1", TTL, limit=10)
        assert len(leases) == 1  # never two of one key
        order.append(leases[0].job_id)
        assert work.complete(leases) == {leases[0].job_id}
    assert order == [first.id, urgent.id, normal.id, late.id]
    assert work.claim("pay", "w1", TTL, limit=10) == []
    assert {s for _, s in states(sql_conn, "k")} == {"Completed"}


def test_other_keys_are_not_held_up(store: Stores) -> None:
    ops, work = store.ops, store.work
    # A busy key with many jobs enqueued first, then one job each of other keys.
    ops.enqueue_jobs([NewJob(i, queue="pay", concurrency_key="busy") for i in range(200)])
    others = ops.enqueue_jobs(
        [NewJob(i, queue="pay", concurrency_key=f"other-{i}") for i in range(5)]
    )
    leases = work.claim("pay", "w1", TTL, limit=100)
    claimed = {lease.job_id for lease in leases}
    assert len(leases) == 6  # the busy key's head and every other key's job
    assert {e.id for e in others} <= claimed


def test_a_retried_failure_keeps_its_key_and_runs_before_the_later_jobs(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    ops, work = store.ops, store.work
    first, second = ops.enqueue_jobs(
        [
            NewJob("a", queue="pay", concurrency_key="k"),
            NewJob("b", queue="pay", concurrency_key="k"),
        ]
    )
    (lease,) = work.claim("pay", "w1", TTL, limit=10)
    assert lease.job_id == first.id
    assert work.fail(lease, "boom", retry_delay=timedelta(0)) == JobStatus.PENDING
    # Still the head: the later job waits, the retry is claimed next.
    assert states(sql_conn, "k") == [(first.id, "Pending"), (second.id, "Waiting")]
    (again,) = work.claim("pay", "w1", TTL, limit=10)
    assert again.job_id == first.id
    assert work.fail(again, "final", retry_delay=timedelta(0), retry=False) == JobStatus.FAILED
    assert states(sql_conn, "k") == [(first.id, "Failed"), (second.id, "Pending")]


def test_a_key_is_per_queue(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    """The same key in two queues is two keys: a head leaving one promotes nothing in the other."""
    jobs = store.ops.enqueue_jobs(
        [NewJob(i, queue=q, concurrency_key="k") for q in ("pay", "refund") for i in range(2)]
    )
    (lease,) = store.work.claim("refund", "w1", TTL, limit=10)
    store.work.complete([lease])
    assert states(sql_conn, "k", "pay") == [(jobs[0].id, "Pending"), (jobs[1].id, "Waiting")]
    assert states(sql_conn, "k", "refund") == [(jobs[2].id, "Completed"), (jobs[3].id, "Pending")]


def test_a_key_promotes_only_its_own_jobs(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    # Another key's Waiting job comes first in queue order (priority): it is not this key's.
    a, b = two_of_one_key(store)
    store.ops.enqueue_jobs(
        [NewJob(i, queue="pay", concurrency_key="z", priority=-5) for i in range(2)]
    )
    (lease,) = [x for x in store.work.claim("pay", "w1", TTL, limit=10) if x.job_id == a]
    store.work.complete([lease])
    assert states(sql_conn, "k") == [(a, "Completed"), (b, "Pending")]
    assert [s for _, s in states(sql_conn, "z")] == ["Processing", "Waiting"]


def test_the_database_refuses_a_second_head(
    sql_conn: psycopg.Connection[Any], store: Stores
) -> None:
    _, b = store.ops.enqueue_jobs(
        [
            NewJob("a", queue="pay", concurrency_key="k"),
            NewJob("b", queue="pay", concurrency_key="k"),
        ]
    )
    with pytest.raises(psycopg.errors.UniqueViolation):
        sql_conn.execute("UPDATE leasectl.jobs SET status = 'Pending' WHERE id = %s", (b.id,))


def two_of_one_key(store: Stores) -> tuple[int, int]:
    a, b = store.ops.enqueue_jobs(
        [
            NewJob("a", queue="pay", concurrency_key="k"),
            NewJob("b", queue="pay", concurrency_key="k"),
        ]
    )
    return a.id, b.id


def seen(store: Stores, job_id: int) -> Any:
    return store.ops.get_jobs([job_id])[job_id].seen()


def test_cancelling_a_waiting_job_keeps_the_rest_in_line_and_cancelling_the_head_promotes(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    (c,) = store.ops.enqueue_jobs([NewJob("c", queue="pay", concurrency_key="k")])
    done = store.ops.operator_cancel([seen(store, b)], actor="op", reason="dup")
    assert done.changed == (b,) or list(done.changed) == [b]
    assert states(sql_conn, "k") == [(a, "Pending"), (b, "Cancelled"), (c.id, "Waiting")]
    store.ops.operator_cancel([seen(store, a)], actor="op", reason="bad")
    assert states(sql_conn, "k") == [(a, "Cancelled"), (b, "Cancelled"), (c.id, "Pending")]


def test_a_stuck_head_keeps_its_key_until_an_operator_acts(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    lease = store.work.claim_by_id(a, "w1", TTL)
    assert lease is not None
    marked = store.ops.operator_mark_stuck([seen(store, a)], actor="op", reason="?", force=True)
    assert list(marked.changed) == [a]
    assert states(sql_conn, "k") == [(a, "Stuck"), (b, "Waiting")]
    assert store.work.claim("pay", "w1", TTL, limit=10) == []
    # Deleting the quarantined head (a DELETE, not an UPDATE) frees the key.
    store.ops.operator_delete([seen(store, a)], actor="op", reason="gone")
    assert states(sql_conn, "k") == [(b, "Pending")]


def test_a_lapsed_lease_requeued_by_the_watcher_keeps_the_key_and_runs_first(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    assert store.work.claim_by_id(a, "w1", timedelta(milliseconds=100)) is not None
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1s' WHERE id = %s", (a,)
    )
    moved = store.ops.requeue_expired(
        limit=10, queue=None, mark=False, actor="watcher", reason="lease expired"
    )
    assert moved.counts == {JobStatus.PENDING: 1}
    assert states(sql_conn, "k") == [(a, "Pending"), (b, "Waiting")]
    (again,) = store.work.claim("pay", "w2", TTL, limit=10)
    assert again.job_id == a


def test_requeueing_a_failed_keyed_job_while_its_key_is_busy_makes_it_wait(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    lease = store.work.claim_by_id(a, "w1", TTL)
    assert lease is not None
    store.work.fail(lease, "no", retry_delay=timedelta(0), retry=False)
    assert states(sql_conn, "k") == [(a, "Failed"), (b, "Pending")]
    store.ops.operator_requeue([seen(store, a)], actor="op", reason="again")
    # b holds the key: a waits behind it instead of making a second head.
    assert states(sql_conn, "k") == [(a, "Waiting"), (b, "Pending")]
    (lb,) = store.work.claim("pay", "w1", TTL, limit=10)
    assert lb.job_id == b
    store.work.complete([lb])
    assert states(sql_conn, "k") == [(a, "Pending"), (b, "Completed")]


def orphan(sql_conn: psycopg.Connection[Any], head: int) -> None:
    """A key's head finished with the triggers off: its Waiting job is left without a head, as
    a producer's commit that no head's exit could see would leave it."""
    with sql_conn.transaction():
        sql_conn.execute("SET LOCAL session_replication_role = replica")
        sql_conn.execute(
            "UPDATE leasectl.jobs SET status = 'Completed', finished_at = now() WHERE id = %s",
            (head,),
        )


def test_the_healing_pass_promotes_a_waiting_job_left_without_a_head(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    c, d = (
        e.id
        for e in store.ops.enqueue_jobs(
            [
                NewJob(1, queue="pay", concurrency_key="busy"),
                NewJob(2, queue="pay", concurrency_key="busy"),
            ]
        )
    )
    orphan(sql_conn, a)
    assert states(sql_conn, "k") == [(a, "Completed"), (b, "Waiting")]
    promoted, after = store.ops.heal_keys(max_keys=100, after=None)
    assert promoted == [b] and after is None
    # A key with a head is left alone.
    assert states(sql_conn, "busy") == [(c, "Pending"), (d, "Waiting")]
    assert store.ops.heal_keys(max_keys=100, after=None) == ([], None)


def test_the_healing_pass_goes_on_from_where_it_stopped(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    heads = []
    for key in ("k1", "k2", "k3"):
        first, _ = store.ops.enqueue_jobs(
            [
                NewJob(1, queue="pay", concurrency_key=key),
                NewJob(2, queue="pay", concurrency_key=key),
            ]
        )
        heads.append(first.id)
    for head in heads:
        orphan(sql_conn, head)
    promoted, after = store.ops.heal_keys(max_keys=2, after=None)
    assert len(promoted) == 2 and after == ("pay", "k2")
    promoted, after = store.ops.heal_keys(max_keys=2, after=after)
    assert len(promoted) == 1 and after is None
    assert sql_conn.execute(
        "SELECT count(*) FROM leasectl.jobs WHERE status = 'Waiting'"
    ).fetchone() == (0,)


def test_a_key_whose_lock_another_session_holds_is_left_for_the_next_pass(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Any role can take an advisory lock: holding a key's lock delays its healing, no more."""
    a, b = two_of_one_key(store)
    orphan(sql_conn, a)
    with psycopg.connect(db_dsn) as hostile:
        hostile.execute("SELECT leasectl.jobs_key_lock('pay', 'k')")
        assert store.ops.heal_keys(max_keys=10, after=None) == ([], None)
    assert store.ops.heal_keys(max_keys=10, after=None) == ([b], None)


def test_a_session_holding_a_keys_lock_delays_its_heads_exit_briefly_and_no_more(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    (lease,) = store.work.claim("pay", "w1", TTL, limit=10)
    with psycopg.connect(db_dsn) as hostile:
        hostile.execute("SELECT leasectl.jobs_key_lock('pay', 'k')")
        # The completion is not held by the lock (at most 100 ms of waiting per transaction);
        # the job it can see is promoted all the same.
        assert store.work.complete([lease]) == {a}
        assert states(sql_conn, "k") == [(a, "Completed"), (b, "Pending")]


def cli(*args: str, dsn: str, env: dict[str, str] | None = None) -> Any:
    return run_in_process(args, {**_env(dsn), **(env or {})})


def test_status_list_and_inspect_show_the_key_and_who_holds_it(db_dsn: str, store: Stores) -> None:
    a, b = two_of_one_key(store)
    status = json.loads(cli("status", "--json", dsn=db_dsn).stdout)
    [pay] = [q for q in status["queues"] if q["queue"] == "pay"]
    assert (pay["pending"], pay["waiting"], pay["waiting_capped"]) == (1, 1, False)
    assert status["totals"]["waiting"] == 1
    listed = json.loads(cli("list", "--state", "waiting", "--json", dsn=db_dsn).stdout)
    assert [(j["id"], j["concurrency_key"], j["key_holder"]) for j in listed["jobs"]] == [
        (b, "k", a)
    ]
    shown = json.loads(cli("inspect", str(b), "--json", dsn=db_dsn).stdout)["job"]
    assert (shown["status"], shown["concurrency_key"], shown["key_holder"]) == ("Waiting", "k", a)
    text = cli("inspect", str(b), dsn=db_dsn, env={"COLUMNS": "160"}).stdout
    assert f"⏳ key busy: job {a} holds it" in text
    table = cli("list", "--queue", "pay", dsn=db_dsn, env={"COLUMNS": "200"}).stdout
    assert f"⏳ key busy (job {a})" in table and "Waiting" in table


def test_enqueue_takes_a_concurrency_key_and_refuses_a_bad_one(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    ok = cli(
        "enqueue", "-q", "pay", "--concurrency-key", "acct-7", "--count", "3", "--json", dsn=db_dsn
    )
    assert ok.returncode == 0, ok.stderr
    ids = json.loads(ok.stdout)["ids"]
    assert states(sql_conn, "acct-7") == [
        (ids[0], "Pending"),
        (ids[1], "Waiting"),
        (ids[2], "Waiting"),
    ]
    for bad, says in (("", "must not be empty"), ("x" * 201, "at most 200 characters")):
        proc = cli("enqueue", "-q", "pay", "--concurrency-key", bad, dsn=db_dsn)
        assert_one_line_error(proc, 2, says, prefix="leasectl: ")
    assert len(states(sql_conn, "acct-7")) == 3


def test_a_new_job_of_a_key_left_without_a_head_queues_behind_the_key_s_waiting_jobs(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    orphan(sql_conn, a)
    (c,) = store.ops.enqueue_jobs([NewJob("c", queue="pay", concurrency_key="k")])
    assert states(sql_conn, "k") == [(a, "Completed"), (b, "Pending"), (c.id, "Waiting")]


def test_a_job_cancelled_while_its_promotion_waits_for_it_stays_cancelled_and_the_next_goes(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The promotion picks the first Waiting job, then waits for an operator's cancel of it that
    is not committed yet; once it is, the promotion finds it no longer Waiting and takes the
    next (a job already cancelled is never run)."""
    a, b = two_of_one_key(store)
    (c,) = store.ops.enqueue_jobs([NewJob("c", queue="pay", concurrency_key="k")])
    (lease,) = store.work.claim("pay", "w1", TTL, limit=10)
    done: list[set[int]] = []
    with psycopg.connect(db_dsn) as operator:
        operator.execute(
            "SELECT * FROM leasectl.jobs_operator_cancel(%s, %s, %s, %s, false, 'op', 'dup')",
            ([b], ["Waiting"], [0], [None]),
        )  # (in its transaction, not committed)
        worker = threading.Thread(target=lambda: done.append(store.work.complete([lease])))
        worker.start()

        def promotion_waits() -> bool:
            row = sql_conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
            return bool(row and row[0])

        wait_until(promotion_waits, timeout=10)
        operator.commit()
    worker.join(10)
    assert done == [{a}]
    assert states(sql_conn, "k") == [(a, "Completed"), (b, "Cancelled"), (c.id, "Pending")]


def test_a_head_leaving_while_a_producer_holds_the_key_waits_for_its_commit_and_promotes(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The race of a producer's uncommitted Waiting job and its key's head leaving: the exit
    waits (briefly) for the producer's lock, sees the job once it is committed, promotes it."""
    (head,) = store.ops.enqueue_jobs([NewJob("a", queue="pay", concurrency_key="k")])
    (lease,) = store.work.claim("pay", "w1", TTL, limit=10)
    done: list[set[int]] = []
    with psycopg.connect(db_dsn) as producer:
        late = leasectl.enqueue(producer, queue="pay", payload="b", concurrency_key="k")
        worker = threading.Thread(target=lambda: done.append(store.work.complete([lease])))
        worker.start()

        def exit_waits() -> bool:
            row = sql_conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                "AND datname = current_database()"
            ).fetchone()
            return bool(row and row[0])

        wait_until(exit_waits, timeout=10)
        producer.commit()
    worker.join(10)
    assert done == [{head.id}]
    assert states(sql_conn, "k") == [(head.id, "Completed"), (late.id, "Pending")]


def test_a_head_that_left_without_seeing_a_producers_job_is_settled_at_the_producers_commit(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The exit gave up waiting for a producer in a long transaction (100 ms at most) and could
    not see its job; the producer's commit sees the head gone and promotes the job itself."""
    (head,) = store.ops.enqueue_jobs([NewJob("a", queue="pay", concurrency_key="k")])
    (lease,) = store.work.claim("pay", "w1", TTL, limit=10)
    with psycopg.connect(db_dsn) as producer:
        late = leasectl.enqueue(producer, queue="pay", payload="b", concurrency_key="k")
        assert store.work.complete([lease]) == {head.id}  # not held by the open transaction
        assert states(sql_conn, "k") == [(head.id, "Completed")]
        producer.commit()
    assert states(sql_conn, "k") == [(head.id, "Completed"), (late.id, "Pending")]


def test_the_consoles_pending_panel_lists_waiting_jobs_below_with_their_keys_holder(
    store: Stores,
) -> None:
    a, b = two_of_one_key(store)
    (plain,) = store.ops.enqueue_jobs([NewJob("p", queue="pay")])
    rows = store.panels.snapshot(None, 10).pending
    assert [(j.id, j.status) for j in rows] == [
        (a, JobStatus.PENDING),
        (plain.id, JobStatus.PENDING),
        (b, JobStatus.WAITING),
    ]
    assert [key_cell(j).plain for j in rows] == ["k", "", f"⏳ key busy {a} k"]
    # Bounded: the panel holds at most its limit, the Pending jobs first.
    assert [j.id for j in store.panels.snapshot(None, 2).pending] == [a, plain.id]


def test_in_its_transaction_a_job_whose_key_is_free_is_pending_at_once(
    db_dsn: str, store: Stores
) -> None:
    """Another queue's head with the same key, or another key's head, does not make a job wait
    (not even until its commit)."""
    store.ops.enqueue_jobs([NewJob("a", queue="pay", concurrency_key="card-1")])
    with psycopg.connect(db_dsn) as conn:
        jobs = leasectl.enqueue_many(
            conn,
            [
                NewJob("b", queue="refund", concurrency_key="card-1"),
                NewJob("c", queue="pay", concurrency_key="card-2"),
            ],
        )
        seen = conn.execute(
            "SELECT status::text FROM leasectl.jobs WHERE id = ANY(%s) ORDER BY id",
            ([e.id for e in jobs],),
        ).fetchall()
        assert seen == [("Pending",), ("Pending",)]


def test_the_healing_pass_walks_past_keys_that_have_a_head(store: Stores) -> None:
    for key in ("k1", "k2", "k3"):
        store.ops.enqueue_jobs([NewJob(i, queue="pay", concurrency_key=key) for i in range(2)])
    assert store.ops.heal_keys(max_keys=2, after=None) == ([], ("pay", "k2"))
    assert store.ops.heal_keys(max_keys=2, after=("pay", "k2")) == ([], None)


@pytest.mark.parametrize("key", [k for k in NAMES if k.strip()][:12])
def test_a_hostile_key_is_shown_as_text(db_dsn: str, store: Stores, key: str) -> None:
    """A concurrency key is the producer's text: list, inspect and the console's key cell show
    it literally, never acting on it."""
    a, b = (
        e.id
        for e in store.ops.enqueue_jobs(
            [NewJob(i, queue="pay", concurrency_key=key) for i in range(2)]
        )
    )
    wide = {"COLUMNS": "240"}
    for args in (["inspect", str(b)], ["list", "--queue", "pay"]):
        out = cli(*args, dsn=db_dsn, env=wide).stdout
        inert(out, " ".join(args))
        if probe := literal_probe(key):
            assert probe in out, args
    (row,) = [j for j in store.panels.snapshot(None, 10).pending if j.id == b]
    cell = key_cell(row).plain
    assert cell.startswith(f"⏳ key busy {a} ") and visible(key) in cell


def test_the_watchers_pass_heals_a_key_left_without_a_head(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    a, b = two_of_one_key(store)
    orphan(sql_conn, a)
    watcher = Watcher(store.ops, WatcherConfig(interval=timedelta(seconds=60)))
    watcher._heal_keys()
    assert watcher.promoted == 1
    assert states(sql_conn, "k") == [(a, "Completed"), (b, "Pending")]


def test_requeue_stuck_heals_a_key_left_without_a_head_and_says_so(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """A deployment that runs requeue-stuck from cron instead of watch heals its keys too."""
    a, b = two_of_one_key(store)
    orphan(sql_conn, a)
    dry = json.loads(cli("requeue-stuck", "--dry-run", "--json", dsn=db_dsn).stdout)
    assert dry["promoted"] is None and states(sql_conn, "k") == [(a, "Completed"), (b, "Waiting")]
    doc = json.loads(cli("requeue-stuck", "--json", dsn=db_dsn).stdout)
    assert (doc["requeued"], doc["promoted"]) == (0, 1)
    assert states(sql_conn, "k") == [(a, "Completed"), (b, "Pending")]
    # Whatever its --queue: the healing pass covers every queue.
    c, d = two_of_one_key(store)
    orphan(sql_conn, b)
    out = cli("requeue-stuck", "--queue", "other", dsn=db_dsn).stdout
    assert "promoted 1 waiting job(s) of concurrency keys left without a head" in out
    assert states(sql_conn, "k")[-2:] == [(c, "Pending"), (d, "Waiting")]
    assert "promoted 0 waiting job(s)" in cli("requeue-stuck", dsn=db_dsn).stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_requeue_stuck_says_what_it_moved_before_a_healing_pass_that_failed(
    db_dsn: str,
    store: Stores,
    sql_conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    as_json: bool,
) -> None:
    """A role without EXECUTE on jobs_keys_heal (granted by hand) still sees its pass's moves,
    then the healing pass's error: one line, its exit code."""
    from leasectl.core.errors import PermissionDenied
    from leasectl.db.keys import KeyOperations

    (job,) = store.ops.enqueue([{}], queue="pay")
    (lease,) = store.work.claim("pay", "w-gone", TTL)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = %s", (job,)
    )

    def refused(self: KeyOperations, **_: Any) -> Any:
        raise PermissionDenied("permission denied for function jobs_keys_heal")

    monkeypatch.setattr(KeyOperations, "heal_keys", refused)
    proc = cli("requeue-stuck", *(["--json"] if as_json else []), dsn=db_dsn)
    assert_one_line_error(proc, PermissionDenied("").exit_code, "jobs_keys_heal")
    if as_json:
        doc = json.loads(proc.stdout)
        assert (doc["requeued"], doc["promoted"]) == (1, None)
    else:
        assert "requeued 1" in proc.stdout and "promoted" not in proc.stdout
    assert seen(store, lease.job_id).status == JobStatus.PENDING


def test_requeue_stuck_s_healing_pass_walks_every_key_in_steps(
    store: Stores, sql_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from leasectl.runtime import watcher

    for key in ("k1", "k2", "k3"):
        first, _ = store.ops.enqueue_jobs(
            [NewJob(n, queue="pay", concurrency_key=key) for n in (1, 2)]
        )
        orphan(sql_conn, first.id)
    monkeypatch.setattr(watcher, "HEAL_KEYS", 2)
    assert watcher.heal_pass(store.ops, max_steps=1) == 2
    assert watcher.heal_pass(store.ops) == 1
    assert sql_conn.execute(
        "SELECT count(*) FROM leasectl.jobs WHERE status = 'Waiting'"
    ).fetchone() == (0,)


def waiting_series(rows: Any) -> dict[tuple[str, str], float]:
    """The exporter's leasectl_jobs and leasectl_jobs_capped samples of status Waiting."""
    return {
        (s.name, s.labels["queue"]): s.value
        for family in families(rows)
        for s in family.samples
        if s.labels.get("status") == "Waiting"
    }


def test_the_exporter_counts_waiting_jobs_per_queue_bounded_like_stuck(store: Stores) -> None:
    store.ops.enqueue_jobs([NewJob(n, queue="pay", concurrency_key="k") for n in range(4)])
    store.ops.enqueue_jobs([NewJob(n, queue="mail", concurrency_key="m") for n in range(2)])
    store.ops.enqueue([{}] * 3, queue="free")  # Pending only: no Waiting series
    rows = MetricsReads(store.db).read(timedelta(seconds=5))
    assert waiting_series(rows) == {
        ("leasectl_jobs", "mail"): 1,
        ("leasectl_jobs", "pay"): 3,
        ("leasectl_jobs_capped", "mail"): 0,
        ("leasectl_jobs_capped", "pay"): 0,
    }
    assert "waiting" not in rows.truncated
    # Bounded as Stuck is: the queues share the budget (at least the floor each), and the read
    # stops at queue_limit queues and says so.
    capped = MetricsReads(store.db, budget=4, floor=2).read(timedelta(seconds=5))
    assert capped.waiting == {"mail": BoundedCount(1, False), "pay": BoundedCount(2, True)}
    assert waiting_series(capped)[("leasectl_jobs_capped", "pay")] == 1
    cut = MetricsReads(store.db, queue_limit=1).read(timedelta(seconds=5))
    assert list(cut.waiting) == ["mail"] and "waiting" in cut.truncated
    truncated = {s.labels["part"]: s.value for s in next(iter(families(cut))).samples}
    assert truncated["waiting"] == 1
