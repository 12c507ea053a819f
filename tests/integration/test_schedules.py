"""Schedules on a real PostgreSQL: the commands (results, JSON, audit rows, bad input refused
in one line, exit 2, nothing changed), the watcher's step against fixed clocks (catch-up
policies), each predicate of schedule_enqueue's once-per-slot guard, and sync."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl.core.schedules import ScheduleSpec, SlotPlan
from leasectl.runtime.schedules import schedule_pass
from tests.inproc import run_in_process
from tests.integration.test_cli import _env, assert_one_line_error, snapshot
from tests.stores import Stores

ACTOR = "operator:test"


def run(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_in_process(list(args), _env(dsn))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def add(store: Stores, name: str = "s", cron: str = "* * * * *", **kw: Any) -> None:
    spec = ScheduleSpec(name, cron, kw.pop("queue", "q"), **kw)
    store.ops.put_schedule(spec, actor=ACTOR, reason="test")


def set_next(conn: psycopg.Connection[Any], name: str, moment: datetime) -> None:
    """As a watcher down since ``moment`` left it (the owner's hand: no role may)."""
    conn.execute("UPDATE leasectl.schedules SET next_slot = %s WHERE name = %s", (moment, name))


def slots(conn: psycopg.Connection[Any], name: str = "s") -> list[datetime]:
    rows = conn.execute(
        "SELECT slot FROM leasectl.schedule_slots WHERE schedule = %s ORDER BY slot", (name,)
    ).fetchall()
    return [r[0] for r in rows]


def jobs(conn: psycopg.Connection[Any], queue: str = "q") -> int:
    row = conn.execute("SELECT count(*) FROM leasectl.jobs WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def due(store: Stores, name: str = "s") -> Any:
    [found] = [d for d in store.ops.due_schedules(100) if d.name == name]
    return found


# -- the commands ---------------------------------------------------------------------------


def test_add_list_pause_resume_run_remove_are_audited(db_dsn: str, sql_conn: Any) -> None:
    proc = run(db_dsn, "schedule", "add", "nightly", "--cron", "30 2 * * *", "--timezone",
               "Europe/Berlin", "--queue", "reports", "--payload", '{"kind": "nightly"}',
               "--catch-up", "all", "--catch-up-limit", "3", "--reason", "reports",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["action"] == "add" and shown["changed"] is True
    s = shown["schedule"]
    assert (s["cron"], s["timezone"], s["queue"], s["payload"]) == (
        "30 2 * * *", "Europe/Berlin", "reports", {"kind": "nightly"})  # fmt: skip
    assert (s["catch_up"], s["catch_up_limit"], s["paused"], s["late"]) == ("all", 3, False, False)
    next_slot = datetime.fromisoformat(s["next_slot"])
    assert next_slot.astimezone(UTC).minute == 30 and next_slot > datetime.now(UTC)
    # The same settings again: nothing changes; other settings: refused, exit 1.
    same = run(db_dsn, "schedule", "add", "nightly", "--cron", "30 2 * * *", "--timezone",
               "Europe/Berlin", "--queue", "reports", "--payload", '{"kind": "nightly"}',
               "--catch-up", "all", "--catch-up-limit", "3")  # fmt: skip
    assert same.returncode == 0 and "unchanged" in same.stdout, same.stderr
    other = run(db_dsn, "schedule", "add", "nightly", "--cron", "@daily", "--queue", "reports")
    assert other.returncode == 1 and "exists with other settings" in other.stderr
    assert run(db_dsn, "schedule", "pause", "nightly", "--reason", "quarter close").returncode == 0
    again = run(db_dsn, "schedule", "pause", "nightly", "--reason", "again")
    assert again.returncode == 1 and "already paused" in again.stderr
    listed = json.loads(run(db_dsn, "schedule", "list", "--json").stdout)["schedules"]
    assert [(x["name"], x["paused"], x["paused_reason"]) for x in listed] == [
        ("nightly", True, "quarter close")]  # fmt: skip
    assert run(db_dsn, "schedule", "resume", "nightly").returncode == 0
    ran = run(db_dsn, "schedule", "run", "nightly", "--reason", "rerun")
    assert ran.returncode == 0 and "enqueued job" in ran.stdout, ran.stderr
    job = sql_conn.execute("SELECT queue, payload FROM leasectl.jobs").fetchall()
    assert job == [("reports", {"kind": "nightly"})]
    text = run(db_dsn, "schedule", "list")
    assert "nightly" in text.stdout and "Pending" in text.stdout and "30 2 * * *" in text.stdout
    assert run(db_dsn, "schedule", "remove", "nightly", "--reason", "gone").returncode == 0
    gone = run(db_dsn, "schedule", "remove", "nightly")
    assert gone.returncode == 1 and "no schedule" in gone.stderr
    events = sql_conn.execute(
        "SELECT schedule, action, reason, db_role, actor LIKE 'operator:%' "
        "FROM leasectl.schedule_events ORDER BY id"
    ).fetchall()
    assert [e[:3] for e in events] == [
        ("nightly", "add", "reports"), ("nightly", "pause", "quarter close"),
        ("nightly", "resume", None), ("nightly", "run", "rerun"), ("nightly", "remove", "gone"),
    ]  # fmt: skip
    assert all(e[3] == "postgres" or e[3] for e in events) and all(e[4] for e in events)
    assert sql_conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone() == (1,)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--cron", "61 * * * *"), "invalid cron expression"),
        (("--cron", "* * *"), "5 fields"),
        (("--cron", "@reboot"), "unknown alias"),
        (("--cron", "@daily", "--timezone", "Mars/Base"), "unknown time zone"),
        (("--cron", "@daily", "--payload", "{"), "invalid JSON payload"),
        (("--cron", "@daily", "--catch-up", "some"), "--catch-up"),
        (("--cron", "@daily", "--catch-up-limit", "0"), "--catch-up-limit"),
        (("--cron", "@daily", "--max-attempts", "0"), "--max-attempts"),
    ],
)
def test_bad_values_are_one_line_exit_2_and_change_nothing(
    db_dsn: str, args: tuple[str, ...], fragment: str
) -> None:
    before = snapshot(db_dsn)
    proc = run(db_dsn, "schedule", "add", "x", "--queue", "q", *args)
    assert_one_line_error(proc, 2, fragment, prefix="leasectl: ")
    assert snapshot(db_dsn) == before


def test_hostile_names_and_payloads_are_shown_literally(db_dsn: str) -> None:
    """Every short string of the hostile corpus as a schedule's name, queue, payload and
    reason: `schedule list` shows each as literal text (no escape, control or bidi character
    reaches the terminal) and its JSON gives each back exactly."""
    from tests.hostile import NAMES

    added = {}
    for i, text in enumerate(NAMES):
        name = f"{i:02d}{text}"[:200]
        proc = run(db_dsn, "schedule", "add", name, "--cron", "@daily",
                   "--queue", f"q{text}"[:200], "--payload", json.dumps({"v": text}),
                   "--reason", text[:1000] or "r")  # fmt: skip
        assert proc.returncode == 0, (text, proc.stderr)
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
        added[name] = text
    shown = run(db_dsn, "schedule", "list")
    assert shown.returncode == 0, shown.stderr
    for bad in ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\r", "\x08"):
        assert bad not in shown.stdout, bad
    listed = json.loads(run(db_dsn, "schedule", "list", "--json").stdout)["schedules"]
    assert {s["name"]: s["payload"]["v"] for s in listed} == added


def test_status_lists_late_schedules(db_dsn: str, store: Stores, sql_conn: Any) -> None:
    add(store, "late")
    add(store, "paused")
    add(store, "fine", cron="@daily")
    store.ops.pause_schedule("paused", actor=ACTOR, reason="r")
    sql_conn.execute(
        "UPDATE leasectl.schedules SET next_slot = now() - interval '10 minutes' "
        "WHERE name IN ('late', 'paused')"
    )
    shown = json.loads(run(db_dsn, "status", "--json").stdout)
    assert [s["name"] for s in shown["late_schedules"]] == ["late"]
    assert shown["late_schedules"][0]["lateness_seconds"] >= 600
    text = run(db_dsn, "status").stdout
    assert "late schedules" in text and "10m" in text
    listed = json.loads(run(db_dsn, "schedule", "list", "--json").stdout)["schedules"]
    assert {s["name"]: s["late"] for s in listed} == {"late": True, "paused": False, "fine": False}


@pytest.mark.full
def test_the_exporter_exports_last_enqueue_and_lateness(
    db_dsn: str, store: Stores, sql_conn: Any
) -> None:
    from tests.exporter import exporter, scrape

    add(store, "late")
    add(store, "new", cron="@daily")
    job = store.ops.run_schedule("late", actor=ACTOR, reason=None)
    sql_conn.execute("UPDATE leasectl.schedules SET next_slot = now() - interval '10 minutes' "
                     "WHERE name = 'late'")  # fmt: skip
    ran = sql_conn.execute("SELECT created_at FROM leasectl.jobs WHERE id = %s", (job,)).fetchone()
    with exporter(db_dsn) as (_, url):
        s = scrape(url)
    last = s.series("leasectl_schedule_last_enqueue_timestamp_seconds")
    assert set(last) == {frozenset({("schedule", "late")})}  # no series before the first
    assert abs(next(iter(last.values())) - ran[0].timestamp()) < 1
    late = {
        dict(k)["schedule"]: v for k, v in s.series("leasectl_schedule_lateness_seconds").items()
    }
    assert late["new"] == 0 and 600 <= late["late"] < 3600


# -- the watcher's step ---------------------------------------------------------------------


def test_a_down_watcher_catches_up_the_last_slot_by_default(store: Stores, sql_conn: Any) -> None:
    add(store)
    set_next(sql_conn, "s", utc(2026, 1, 1, 11, 0))
    done = schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 30))
    assert (done.schedules, done.enqueued, done.passed_over) == (1, 1, 60)
    assert slots(sql_conn) == [utc(2026, 1, 1, 12, 0)]
    [s] = store.ops.schedules()
    assert s.last_slot == utc(2026, 1, 1, 12, 0) and s.last_status == "Pending"
    assert s.next_slot == utc(2026, 1, 1, 12, 1) and s.skipped == 60


def test_catch_up_all_enqueues_at_most_its_limit(store: Stores, sql_conn: Any) -> None:
    add(store, catch_up="all", catch_up_limit=5)
    set_next(sql_conn, "s", utc(2026, 1, 1, 11, 0))
    done = schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 30))
    assert done.enqueued == 5 and jobs(sql_conn) == 5
    assert slots(sql_conn) == [utc(2026, 1, 1, 11, 56 + i) for i in range(4)] + [
        utc(2026, 1, 1, 12, 0)]  # fmt: skip
    assert schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 40)).enqueued == 0


def test_catch_up_none_skips_missed_slots(store: Stores, sql_conn: Any) -> None:
    add(store, cron="0 * * * *", catch_up="none")
    set_next(sql_conn, "s", utc(2026, 1, 1, 10, 0))
    assert schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 5)).enqueued == 0
    assert jobs(sql_conn) == 0 and store.ops.schedules()[0].next_slot == utc(2026, 1, 1, 13)


def test_a_paused_schedule_is_not_due_and_resumes_from_now(store: Stores, sql_conn: Any) -> None:
    add(store)
    store.ops.pause_schedule("s", actor=ACTOR, reason="r")
    set_next(sql_conn, "s", utc(2026, 1, 1, 11, 0))
    assert schedule_pass(store.ops).schedules == 0 and jobs(sql_conn) == 0
    resumed = store.ops.resume_schedule("s", actor=ACTOR, reason=None)
    assert resumed is not None and resumed[1]
    assert resumed[0].next_slot > resumed[0].db_now  # the pause's slots are skipped


def test_a_schedule_not_yet_due_is_not_read(store: Stores, sql_conn: Any) -> None:
    add(store, cron="@daily")  # its next slot: the next midnight (UTC), after now
    assert store.ops.due_schedules(100) == []
    assert schedule_pass(store.ops).schedules == 0 and jobs(sql_conn) == 0


def test_a_schedule_written_wrong_by_hand_does_not_stop_the_others(
    store: Stores, sql_conn: Any
) -> None:
    """A row no command would write (an owner's SQL: a bad expression, an unknown zone) fails
    its own step, logged; the due schedules after it are still enqueued."""
    add(store, "good")
    for name, cron, tz in (("bad-cron", "61 * * * *", "UTC"), ("bad-tz", "* * * * *", "Mars/X")):
        sql_conn.execute(
            "INSERT INTO leasectl.schedules (name, cron, timezone, queue, next_slot, created_by, "
            "updated_by) VALUES (%s, %s, %s, 'q', now() - interval '1 hour', 'x', 'x')",
            (name, cron, tz),
        )
    set_next(sql_conn, "good", utc(2026, 1, 1, 12, 0))
    for name in ("bad-cron", "bad-tz"):  # read first: the earliest next slots
        set_next(sql_conn, name, utc(2025, 6, 1))
    done = schedule_pass(store.ops)
    assert (done.schedules, done.failed, done.enqueued) == (3, 2, 1)
    assert slots(sql_conn, "good") != [] and slots(sql_conn, "bad-cron") == []


# -- schedule_enqueue's guard, one predicate each (tests/mutation.py mutates them) ----------


def test_a_slot_with_a_row_is_never_enqueued_again(store: Stores, sql_conn: Any) -> None:
    """schedule_slots' key: with next_slot moved back (a restored backup, a hand edit), the
    slot enqueued already is not enqueued again."""
    add(store)
    set_next(sql_conn, "s", utc(2026, 1, 1, 12, 0))
    plan = SlotPlan((utc(2026, 1, 1, 12, 0),), 0, utc(2026, 1, 1, 12, 1))
    assert len(store.ops.enqueue_slots(due(store), plan)) == 1
    set_next(sql_conn, "s", utc(2026, 1, 1, 12, 0))
    assert store.ops.enqueue_slots(due(store), plan) == []
    assert jobs(sql_conn) == 1 and slots(sql_conn) == [utc(2026, 1, 1, 12, 0)]


def test_a_slot_before_the_next_slot_is_not_enqueued(store: Stores, sql_conn: Any) -> None:
    """A slow pass that planned a slot the catch-up policy of a faster one passed over."""
    add(store)
    set_next(sql_conn, "s", utc(2026, 1, 1, 11, 0))
    stale = due(store)
    schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 30))  # enqueues 12:00, passes over 11:xx
    late = SlotPlan((utc(2026, 1, 1, 11, 30),), 0, utc(2026, 1, 1, 11, 31))
    assert store.ops.enqueue_slots(stale, late) == []
    assert slots(sql_conn) == [utc(2026, 1, 1, 12, 0)] and jobs(sql_conn) == 1
    assert store.ops.schedules()[0].next_slot == utc(2026, 1, 1, 12, 1)  # never moved back


def test_a_schedule_changed_since_its_pass_read_it_enqueues_nothing(
    store: Stores, sql_conn: Any
) -> None:
    """A pass planned from the old expression: neither its slots nor its next slot (a daily
    expression's, far ahead) apply to the new one, which would skip the new slots till then."""
    add(store, cron="0 0 * * *")
    set_next(sql_conn, "s", utc(2026, 1, 1, 0, 0))
    stale = due(store)
    add(store, cron="0 * * * *")  # changed: a new version, its next slot the next hour
    [changed] = store.ops.schedules()
    far = changed.db_now + timedelta(days=30)
    plan = SlotPlan((utc(2026, 1, 1, 0, 0),), 0, far)
    assert store.ops.enqueue_slots(stale, plan) == [] and jobs(sql_conn) == 0
    assert store.ops.schedules()[0].next_slot == changed.next_slot


def test_a_schedule_paused_since_its_pass_read_it_enqueues_nothing(
    store: Stores, sql_conn: Any
) -> None:
    add(store)
    set_next(sql_conn, "s", utc(2026, 1, 1, 12, 0))
    stale = due(store)
    store.ops.pause_schedule("s", actor=ACTOR, reason="r")
    plan = SlotPlan((utc(2026, 1, 1, 12, 0),), 0, utc(2026, 1, 1, 12, 1))
    assert store.ops.enqueue_slots(stale, plan) == [] and jobs(sql_conn) == 0


def test_enqueue_moves_next_slot_on_and_records_the_last_job(store: Stores, sql_conn: Any) -> None:
    add(store)
    set_next(sql_conn, "s", utc(2026, 1, 1, 12, 0))
    plan = SlotPlan((utc(2026, 1, 1, 12, 0), utc(2026, 1, 1, 12, 1)), 3, utc(2026, 1, 1, 12, 2))
    done = store.ops.enqueue_slots(due(store), plan)
    [s] = store.ops.schedules()
    assert [slot for slot, _ in done] == list(plan.enqueue)
    assert (s.next_slot, s.last_slot, s.last_job_id, s.skipped) == (
        utc(2026, 1, 1, 12, 2), utc(2026, 1, 1, 12, 1), done[-1][1], 3)  # fmt: skip
    rows = sql_conn.execute("SELECT job_id FROM leasectl.schedule_slots ORDER BY slot").fetchall()
    assert [r[0] for r in rows] == [job for _, job in done]


# -- sync -------------------------------------------------------------------------------------


def test_sync_dry_run_changes_nothing_and_sync_is_idempotent(
    db_dsn: str, sql_conn: Any, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(
        '[schedules.a]\ncron = "@hourly"\nqueue = "q"\n'
        '[schedules.b]\ncron = "30 2 * * *"\ntimezone = "Europe/Berlin"\nqueue = "r"\n'
        'payload = { kind = "b" }\n'
    )
    assert run(db_dsn, "schedule", "add", "old", "--cron", "@daily", "--queue", "q").returncode == 0
    before = snapshot(db_dsn)
    dry = run(db_dsn, "schedule", "sync", str(path), "--dry-run", "--prune", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["changes"] == [
        {"name": "a", "change": "add"}, {"name": "b", "change": "add"},
        {"name": "old", "change": "remove"}]  # fmt: skip
    assert snapshot(db_dsn) == before
    done = run(db_dsn, "schedule", "sync", str(path), "--prune")
    assert done.returncode == 0 and "2 add, 1 remove" in done.stdout, done.stderr
    events = sql_conn.execute("SELECT count(*) FROM leasectl.schedule_events").fetchone()
    again = run(db_dsn, "schedule", "sync", str(path), "--prune", "--json")
    assert [c["change"] for c in json.loads(again.stdout)["changes"]] == ["same", "same"]
    assert sql_conn.execute("SELECT count(*) FROM leasectl.schedule_events").fetchone() == events
    path.write_text('[schedules.a]\ncron = "@daily"\nqueue = "q"\n')
    changed = json.loads(run(db_dsn, "schedule", "sync", str(path), "--json").stdout)
    assert changed["changes"] == [{"name": "a", "change": "update"}]
    bad = tmp_path / "bad.toml"
    bad.write_text('[schedules.x]\ncron = "@daily"\nqueue = "q"\ntimezone = "Nowhere/Land"\n')
    before = snapshot(db_dsn)
    assert_one_line_error(run(db_dsn, "schedule", "sync", str(bad)), 2, "unknown time zone",
                          prefix="leasectl: ")  # fmt: skip
    assert snapshot(db_dsn) == before


def test_a_step_that_fails_is_deferred_to_the_next_pass_not_lost(
    store: Stores, db_dsn: str
) -> None:
    """A step that cannot have its schedule's row (held past schedule_enqueue's lock_timeout, as
    a loaded server can make a step fail) counts as failed, changes nothing, and the next pass
    enqueues every slot the policy keeps: 100 schedules x 10 catch-up slots give 1,000 jobs."""
    for i in range(100):
        add(store, f"s{i:03}", catch_up="all", catch_up_limit=10)
    with psycopg.connect(db_dsn, autocommit=True) as sql_conn:
        sql_conn.execute("UPDATE leasectl.schedules SET next_slot = %s", (utc(2026, 1, 1, 11, 51),))
        with psycopg.connect(db_dsn) as holder:
            holder.execute("SELECT 1 FROM leasectl.schedules WHERE name = 's042' FOR UPDATE")
            first = schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 30))
            holder.rollback()
        assert (first.schedules, first.failed, first.enqueued) == (100, 1, 990)
        assert slots(sql_conn, "s042") == []
        second = schedule_pass(store.ops, now=utc(2026, 1, 1, 12, 0, 40))
        # (All 100 still due on the server's clock, later than these fixed ones: the 98 done
        # enqueue nothing more, their slots being before next_slot.)
        assert (second.failed, second.enqueued) == (0, 10)
        assert jobs(sql_conn) == 1000
        expected = [utc(2026, 1, 1, 11, 51 + i) for i in range(9)] + [utc(2026, 1, 1, 12, 0)]
        for name in ("s000", "s041", "s042"):
            assert slots(sql_conn, name) == expected
