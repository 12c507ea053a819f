"""Pruning schedule_slots (migration 25) on a real PostgreSQL: a slot row goes only when it is
behind its schedule's next_slot AND older than the retention (each predicate its own test,
tests/mutation.py mutates them); a pruned slot is never enqueued again; `prune` and `watch`
run it in bounded batches."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.schedules import SlotPlan
from leasectl.runtime.schedules import prune_slots, schedule_pass
from leasectl.runtime.watcher import Watcher, WatcherConfig
from tests.integration.test_cli import cli
from tests.integration.test_schedules import add, due, jobs, set_next, slots, utc
from tests.stores import Stores
from tests.util import wait_until


def enqueue_minutes(store: Stores, sql_conn: Any, name: str, first: int, count: int) -> None:
    """Slots 12:first .. 12:(first+count-1) of 2026-01-01 enqueued (long before the retention:
    the tests' clock is the server's, past that day); next_slot moves to the minute after."""
    set_next(sql_conn, name, utc(2026, 1, 1, 12, first))
    plan = SlotPlan(
        tuple(utc(2026, 1, 1, 12, first + i) for i in range(count)),
        0,
        utc(2026, 1, 1, 12, first + count),
    )
    assert len(store.ops.enqueue_slots(due(store, name), plan)) == count


def test_old_slots_behind_next_slot_are_pruned_and_recent_ones_kept(
    store: Stores, sql_conn: Any
) -> None:
    """Retention: a slot behind the fence but younger than SLOTS_KEEP stays (its job can still
    be looked up by slot); the old ones go."""
    add(store)
    enqueue_minutes(store, sql_conn, "s", 0, 3)
    recent = sql_conn.execute("SELECT now() - interval '1 hour'").fetchone()[0]
    sql_conn.execute(
        "INSERT INTO leasectl.schedule_slots (schedule, slot) VALUES ('s', %s)", (recent,)
    )
    set_next(sql_conn, "s", recent + timedelta(minutes=1))
    assert prune_slots(store.ops) == 3
    assert slots(sql_conn) == [recent]


def test_a_slot_at_or_after_next_slot_is_kept_however_old(store: Stores, sql_conn: Any) -> None:
    """next_slot moved back by hand (a restored backup): the slots from it on are kept, since
    there the key on (schedule, slot) is the only guard left against enqueueing them again."""
    add(store)
    enqueue_minutes(store, sql_conn, "s", 0, 3)
    set_next(sql_conn, "s", utc(2026, 1, 1, 12, 1))
    assert prune_slots(store.ops) == 1
    assert slots(sql_conn) == [utc(2026, 1, 1, 12, 1), utc(2026, 1, 1, 12, 2)]
    # And the key still refuses them.
    plan = SlotPlan((utc(2026, 1, 1, 12, 1),), 0, utc(2026, 1, 1, 12, 3))
    assert store.ops.enqueue_slots(due(store), plan) == [] and jobs(sql_conn) == 3


def test_a_pruned_slot_is_never_enqueued_again(store: Stores, sql_conn: Any) -> None:
    """The fence: once its row is gone, a pass planned before the prune (a slow watcher) and a
    new pass over the same minutes enqueue nothing; only later slots get jobs."""
    add(store, catch_up="all", catch_up_limit=10)
    set_next(sql_conn, "s", utc(2026, 1, 1, 11, 58))
    stale = due(store)
    done = schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 30))
    assert done.enqueued == 3 and jobs(sql_conn) == 3
    assert prune_slots(store.ops) == 3 and slots(sql_conn) == []
    replay = SlotPlan(
        (utc(2026, 1, 1, 11, 58), utc(2026, 1, 1, 11, 59), utc(2026, 1, 1, 12, 0)),
        0,
        utc(2026, 1, 1, 12, 1),
    )
    assert store.ops.enqueue_slots(stale, replay) == []
    assert schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 40)).enqueued == 0
    assert jobs(sql_conn) == 3
    assert schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 1, 5)).enqueued == 1
    assert slots(sql_conn) == [utc(2026, 1, 1, 12, 1)] and jobs(sql_conn) == 4


def test_prune_goes_in_bounded_batches(store: Stores, sql_conn: Any) -> None:
    add(store)
    add(store, "t")
    enqueue_minutes(store, sql_conn, "s", 0, 4)
    enqueue_minutes(store, sql_conn, "t", 0, 3)
    assert prune_slots(store.ops, batch=2, max_batches=2) == 4
    # The oldest first, whatever the schedule.
    left = sql_conn.execute(
        "SELECT schedule, slot FROM leasectl.schedule_slots ORDER BY slot, schedule"
    ).fetchall()
    assert left == [("s", utc(2026, 1, 1, 12, 2)), ("t", utc(2026, 1, 1, 12, 2)),
                    ("s", utc(2026, 1, 1, 12, 3))]  # fmt: skip
    assert prune_slots(store.ops, batch=2) == 3 and slots(sql_conn, "s") == []


def test_a_locked_slot_row_is_skipped_not_waited_for(store: Stores, db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as sql_conn:
        add(store)
        enqueue_minutes(store, sql_conn, "s", 0, 2)
    with psycopg.connect(db_dsn) as holder:
        holder.execute(
            "SELECT 1 FROM leasectl.schedule_slots WHERE slot = %s FOR UPDATE",
            (utc(2026, 1, 1, 12, 0),),
        )
        assert prune_slots(store.ops) == 1
        holder.rollback()
    assert prune_slots(store.ops) == 1


@pytest.mark.parametrize("keep", [timedelta(hours=23), timedelta(0)])
def test_the_database_refuses_less_than_a_day_of_slots(
    store: Stores, sql_conn: Any, keep: timedelta
) -> None:
    add(store)
    enqueue_minutes(store, sql_conn, "s", 0, 1)
    with pytest.raises(Exception, match="at least a day"):
        store.ops.prune_schedule_slots(keep, 10)
    assert len(slots(sql_conn)) == 1


def test_leasectl_prune_prunes_the_slots(db_dsn: str, store: Stores, sql_conn: Any) -> None:
    add(store)
    enqueue_minutes(store, sql_conn, "s", 0, 2)
    dry = cli("prune", "--older-than", "30d", "--dry-run", "--json", dsn=db_dsn)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["schedule_slots"] == 0 and len(slots(sql_conn)) == 2
    proc = cli("prune", "--older-than", "30d", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schedule_slots"] == 2 and slots(sql_conn) == []
    add(store, "t")
    enqueue_minutes(store, sql_conn, "t", 0, 1)
    text = cli("prune", "--older-than", "30d", dsn=db_dsn)
    assert text.returncode == 0, text.stderr
    assert "deleted 1 schedule slot row(s) older than 7d" in text.stdout, text.stdout


def test_the_watcher_prunes_the_slots(store: Stores, sql_conn: Any) -> None:
    add(store)
    enqueue_minutes(store, sql_conn, "s", 0, 3)
    set_next(sql_conn, "s", utc(2099, 1, 1))  # not due: the watcher enqueues nothing meanwhile
    watcher = Watcher(store.ops, WatcherConfig(interval=timedelta(milliseconds=50)))
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: slots(sql_conn) == [], what="old slots pruned by the watcher")
    finally:
        watcher.stop()
        thread.join(10)
    assert jobs(sql_conn) == 3


def test_schedule_put_refuses_a_first_slot_that_would_move_the_fence_back(
    store: Stores, sql_conn: Any
) -> None:
    """A hand-written call (the CLI computes the first slot after now) with a first slot days
    old would put next_slot behind slots already pruned: refused, nothing changed."""
    add(store)
    enqueue_minutes(store, sql_conn, "s", 0, 3)
    assert prune_slots(store.ops) == 3
    call = (
        "SELECT * FROM leasectl.schedule_put('s', '*/2 * * * *', 'UTC', 'q', 'null', 0, 3, "
        "'all', 10, %s, true, 'owner', 'by hand')"
    )
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="first slot"):
        sql_conn.execute(call, (utc(2026, 1, 1, 12, 0),))
    [s] = store.ops.schedules()
    assert (s.cron, s.next_slot) == ("* * * * *", utc(2026, 1, 1, 12, 3))
    # A first slot after now (what the CLI sends) is taken.
    later = sql_conn.execute("SELECT now() + interval '2 minutes'").fetchone()[0]
    sql_conn.execute(call, (later,))
    [s] = store.ops.schedules()
    assert (s.cron, s.next_slot) == ("*/2 * * * *", later)
