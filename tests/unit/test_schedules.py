"""Schedules' pure rules (core/schedules.py, core/schedule_file.py): cron expressions and
aliases, time zones, the slots of a fixed clock (DST included) and the catch-up policies, and
the sync file. No database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from leasectl.core.errors import UsageError
from leasectl.core.schedule_file import parse_file, plan_sync
from leasectl.core.schedules import (
    ON_TIME,
    ScheduleSpec,
    check_spec,
    next_slot_after,
    normalise_cron,
    plan_slots,
    slots_after,
    zone,
)

BERLIN = "Europe/Berlin"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def walk(cron: str, tz: str, after: datetime, n: int) -> list[datetime]:
    it = slots_after(cron, tz, after)
    return [next(it).astimezone(UTC) for _ in range(n)]


@pytest.mark.parametrize(
    ("alias", "fields"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
    ],
)
def test_aliases_are_their_five_fields(alias: str, fields: str) -> None:
    assert normalise_cron(alias) == fields


@pytest.mark.parametrize(
    "expr",
    ["", "* * * *", "* * * * * *", "61 * * * *", "* 24 * * *", "* * 32 * *", "@reboot",
     "0 0 30 2 *", "a b c d e", "*/0 * * * *"],
)  # fmt: skip
def test_bad_expressions_are_one_usage_error(expr: str) -> None:
    with pytest.raises(UsageError) as caught:
        normalise_cron(expr)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("tz", ["Mars/Base", "", " UTC", "../../etc/passwd", "Europe/"])
def test_unknown_time_zones_are_refused(tz: str) -> None:
    with pytest.raises(UsageError, match="unknown time zone"):
        zone(tz)


def test_spring_forward_a_slot_in_the_gap_runs_at_the_first_minute_after_it() -> None:
    """Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that
    day. cronsim (as Debian cron) runs it at 03:00 CEST, once; the days around run at 02:30."""
    got = walk("30 2 * * *", BERLIN, utc(2026, 3, 27, 12), 3)
    assert got == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]
    local = [g.astimezone(zone(BERLIN)).strftime("%d %H:%M %Z") for g in got]
    assert local == ["28 02:30 CET", "29 03:00 CEST", "30 02:30 CEST"]


def test_fall_back_a_slot_in_the_repeated_hour_runs_once_at_its_first_occurrence() -> None:
    """Europe/Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice. It runs
    once, at 02:30 CEST (00:30 UTC), not again at 02:30 CET (01:30 UTC)."""
    got = walk("30 2 * * *", BERLIN, utc(2026, 10, 23, 12), 3)
    assert got == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_an_interval_expression_counts_real_time_across_the_fall_back() -> None:
    """``*/30 * * * *`` runs every 30 minutes of real time: both 02:30s of the fall-back day."""
    got = walk("*/30 * * * *", BERLIN, utc(2026, 10, 24, 23, 59), 5)
    assert got == [utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 0),
                   utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2, 0)]  # fmt: skip


def test_the_next_slot_from_inside_the_repeated_hour_is_never_behind_now() -> None:
    """At 02:40 CET of the fall-back day (01:40 UTC), 02:30 CEST is already past: the next slot
    is the next day's, not 00:30 UTC again (a new or resumed schedule's first slot)."""
    now = utc(2026, 10, 25, 1, 10)  # 02:10 CET, the second 02:10 of the day
    assert next_slot_after("30 2 * * *", BERLIN, now) == utc(2026, 10, 26, 1, 30)


def test_a_pass_on_the_fall_back_day_plans_the_slot_once() -> None:
    """A watcher passing every minute through the fall-back night enqueues 02:30 once."""
    next_slot = next_slot_after("30 2 * * *", BERLIN, utc(2026, 10, 24, 22, 0))
    enqueued = []
    now = utc(2026, 10, 24, 22, 0)
    while now < utc(2026, 10, 25, 4, 0):
        now += timedelta(minutes=1)
        if next_slot <= now:
            plan = plan_slots("30 2 * * *", BERLIN, next_slot, now, "all", 10)
            enqueued += plan.enqueue
            next_slot = plan.next_slot
    assert enqueued == [utc(2026, 10, 25, 0, 30)]
    assert next_slot == utc(2026, 10, 26, 1, 30)


def test_a_pass_on_the_spring_forward_day_plans_the_slot_once_at_three() -> None:
    next_slot = next_slot_after("30 2 * * *", BERLIN, utc(2026, 3, 28, 22, 0))
    enqueued = []
    now = utc(2026, 3, 28, 22, 0)
    while now < utc(2026, 3, 29, 4, 0):
        now += timedelta(minutes=1)
        if next_slot <= now:
            plan = plan_slots("30 2 * * *", BERLIN, next_slot, now, "all", 10)
            enqueued += plan.enqueue
            next_slot = plan.next_slot
    assert enqueued == [utc(2026, 3, 29, 1, 0)]


NOW = utc(2026, 1, 1, 12, 0, 30)
DOWN_SINCE = utc(2026, 1, 1, 11, 0)  # a watcher down for an hour: 61 slots of every minute


def test_catch_up_last_enqueues_only_the_last_missed_slot() -> None:
    plan = plan_slots("* * * * *", "UTC", DOWN_SINCE, NOW, "last", 10)
    assert plan.enqueue == (utc(2026, 1, 1, 12, 0),)
    assert (plan.passed_over, plan.next_slot) == (60, utc(2026, 1, 1, 12, 1))


def test_catch_up_all_enqueues_the_latest_slots_up_to_its_limit() -> None:
    plan = plan_slots("* * * * *", "UTC", DOWN_SINCE, NOW, "all", 3)
    assert plan.enqueue == (utc(2026, 1, 1, 11, 58), utc(2026, 1, 1, 11, 59), utc(2026, 1, 1, 12))
    assert plan.passed_over == 58
    assert plan_slots("* * * * *", "UTC", DOWN_SINCE, NOW, "all", 1000).enqueue[0] == DOWN_SINCE


def test_catch_up_none_enqueues_an_on_time_slot_and_no_missed_one() -> None:
    on_time = plan_slots("* * * * *", "UTC", DOWN_SINCE, NOW, "none", 10)
    assert on_time.enqueue == (utc(2026, 1, 1, 12, 0),)  # 30 s old: on time
    later = utc(2026, 1, 1, 12, 5)
    late = plan_slots("0 * * * *", "UTC", utc(2026, 1, 1, 11), later, "none", 10)
    assert late.enqueue == () and late.passed_over == 2  # 11:00 and 12:00, older than ON_TIME
    assert later - utc(2026, 1, 1, 12) > ON_TIME


def test_a_schedule_not_due_plans_nothing() -> None:
    plan = plan_slots("0 * * * *", "UTC", utc(2026, 1, 1, 13), NOW, "all", 10)
    assert plan.enqueue == () and plan.passed_over == 0 and plan.next_slot == utc(2026, 1, 1, 13)


def test_a_long_outage_is_planned_in_bounded_work() -> None:
    """A year of every minute (525,600 slots) behind: the walk stops at MAX_SCAN and the slots
    kept are found walking back from now."""
    plan = plan_slots("* * * * *", "UTC", utc(2025, 1, 1), NOW, "all", 2)
    assert plan.enqueue == (utc(2026, 1, 1, 11, 59), utc(2026, 1, 1, 12, 0))
    assert plan.next_slot == utc(2026, 1, 1, 12, 1) and plan.passed_over > 0


def test_check_spec_refuses_bad_values_in_one_line() -> None:
    good = ScheduleSpec("n", "@daily", "q")
    assert check_spec(good).cron == "0 0 * * *"
    for bad in (
        ScheduleSpec("", "@daily", "q"),
        ScheduleSpec("x" * 201, "@daily", "q"),
        ScheduleSpec("n", "@daily", ""),
        ScheduleSpec("n", "@daily", "q", payload="{"),
        ScheduleSpec("n", "@daily", "q", max_attempts=0),
        ScheduleSpec("n", "@daily", "q", catch_up="some"),
        ScheduleSpec("n", "@daily", "q", catch_up_limit=0),
        ScheduleSpec("n", "@daily", "q", priority=2**31),
    ):
        with pytest.raises(UsageError):
            check_spec(bad)


def test_sync_file_parses_tables_and_refuses_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[schedules.nightly]\ncron = "30 2 * * *"\ntimezone = "Europe/Berlin"\n'
        'queue = "reports"\npayload = { kind = "nightly", n = 1 }\ncatch_up = "all"\n'
        '[schedules."h\\u001b[31m"]\ncron = "@hourly"\nqueue = "q"\n'
    )
    specs = parse_file(path)
    assert [s.name for s in specs] == ["nightly", "h\x1b[31m"]
    assert specs[0].payload == '{"kind": "nightly", "n": 1}' and specs[0].catch_up == "all"
    assert specs[1].cron == "0 * * * *"
    for text, fragment in (
        ('[schedules.a]\ncron = "@daily"\nqueue = "q"\nfoo = 1\n', "unknown key"),
        ('[schedules.a]\nqueue = "q"\n', "cron is required"),
        ('[schedules.a]\ncron = "bad"\nqueue = "q"\n', "invalid cron"),
        ('[schedules.a]\ncron = "@daily"\nqueue = "q"\npriority = "1"\n', "priority"),
        ("[other]\n", "unknown table"),
        ("[schedules.a\n", "invalid TOML"),
    ):
        path.write_text(text)
        with pytest.raises(UsageError, match=fragment):
            parse_file(path)


def test_plan_sync_says_add_update_same_and_remove_with_prune() -> None:
    from tests.unit.schedule_rows import stored

    specs = [ScheduleSpec("a", "0 * * * *", "q"), ScheduleSpec("b", "0 * * * *", "q2")]
    existing = [stored("a", "0 * * * *", "q"), stored("b", "0 * * * *", "q"),
                stored("c", "0 * * * *", "q")]  # fmt: skip
    steps = [(s.name, s.change) for s in plan_sync(specs, existing, prune=False)]
    assert steps == [("a", "same"), ("b", "update")]
    steps = [(s.name, s.change) for s in plan_sync(specs, existing, prune=True)]
    assert steps == [("a", "same"), ("b", "update"), ("c", "remove")]
    assert [s.change for s in plan_sync(specs, [], prune=True)] == ["add", "add"]
