"""The console's Schedules view (`S`): its rows (expression, time zone, next and last slot, the
last job's outcome, late or paused, hostile names literal), run now and pause/resume through a
confirmation with a reason (typing in the box never acts), read-only refused; SVG snapshots at
80x24 and 160x48; and one test on a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.schedules import ScheduleConfirmScreen, SchedulesScreen
from leasectl.console.source import StaticSource
from tests.console.sample import NOW, sample_snapshot
from tests.console.test_screens import SnapCompare, settle
from tests.unit.schedule_rows import stored
from tests.util import wait_until_pilot

HOSTILE = "rep[bold]orts[/]\x1b]0;PWNED\x07"


def rows() -> tuple[Any, ...]:
    return (
        stored("nightly-report", "30 2 * * *", "reports", timezone="Europe/Berlin",
               next_slot=NOW + timedelta(hours=9), last_enqueued_at=NOW - timedelta(hours=15),
               last_job_id=1042, last_status="Completed", db_now=NOW),
        stored("heartbeat", "0 * * * *", "ops", next_slot=NOW - timedelta(minutes=12),
               last_enqueued_at=NOW - timedelta(minutes=72), last_job_id=977,
               last_status="Failed", db_now=NOW),
        stored(HOSTILE, "*/5 * * * *", HOSTILE, next_slot=NOW + timedelta(minutes=3),
               paused_at=NOW - timedelta(days=1), paused_by="operator:alice",
               paused_reason="quarter close", db_now=NOW),
    )  # fmt: skip


def schedules_app(*, read_only: bool = False) -> tuple[ConsoleApp, StaticSource]:
    source = StaticSource(sample_snapshot(), schedule_rows=rows())
    return ConsoleApp(source, read_only=read_only, clock=lambda: 1000.0), source


def run(app: ConsoleApp, scenario: Callable[[ConsoleApp, Pilot[None]], Any]) -> None:
    async def go() -> None:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await scenario(app, pilot)

    asyncio.run(go())


async def open_view(app: ConsoleApp, pilot: Pilot[None]) -> SchedulesScreen:
    await pilot.press("S")
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, SchedulesScreen), "the view")
    screen = app.screen
    assert isinstance(screen, SchedulesScreen)
    await wait_until_pilot(pilot, lambda: len(screen.schedules) == 3, "its rows")
    return screen


def cells(screen: SchedulesScreen) -> list[list[str]]:
    table = screen.query_one("#schedules-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_s_shows_each_schedule_late_paused_and_its_last_outcome() -> None:
    app, _ = schedules_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        shown = cells(screen)
        assert shown[0] == ["nightly-report", "ok", "in 9h00m", "15h00m ago", "#1042 Completed",
                            "30 2 * * *", "Europe/Berlin", "reports"]  # fmt: skip
        assert shown[1][:5] == ["heartbeat", "late 12m00s", "12m00s ago", "1h12m ago",
                                "#977 Failed"]  # fmt: skip
        assert shown[2][1:3] == ["paused", "-"]
        # Hostile text as literal characters, its escapes visible, nothing interpreted.
        assert shown[2][0] == "rep[bold]orts[/]\\x1b]0;PWNED\\x07"
        assert shown[2][7] == "rep[bold]orts[/]\\x1b]0;PWNED\\x07"
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: app.screen is app.main, "back on the main screen")

    run(app, scenario)


def test_run_now_and_pause_are_confirmed_with_a_reason_and_typing_never_acts() -> None:
    app, source = schedules_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        await pilot.press("r")  # run the first (nightly-report) now
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ScheduleConfirmScreen), "ok?")
        # Typed into the reason box: "p", "r" and Enter are text there, never actions.
        await pilot.press("p", "r", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ScheduleConfirmScreen) and source.calls == []
        assert app.screen.query_one("#reason", Input).value == "pr"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: source.calls != [], "the call")
        assert source.calls == [("schedule-run", (), "pr")]
        await wait_until_pilot(pilot, lambda: app.screen is screen, "back on the view")
        await wait_until_pilot(pilot, lambda: not screen.acting, "the result")
        await pilot.press("down", "p")  # pause heartbeat: a reason is required
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ScheduleConfirmScreen), "ok?")
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert isinstance(app.screen, ScheduleConfirmScreen) and len(source.calls) == 1
        await pilot.press("escape")  # cancelled: nothing sent
        await wait_until_pilot(pilot, lambda: app.screen is screen, "back on the view")
        assert len(source.calls) == 1
        await pilot.press("p")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ScheduleConfirmScreen), "ok?")
        await pilot.press(*"maintenance", "ctrl+y")
        await wait_until_pilot(pilot, lambda: len(source.calls) == 2, "the pause")
        assert source.calls[-1] == ("schedule-pause", (), "maintenance")

    run(app, scenario)


def test_a_read_only_console_refuses_schedule_actions() -> None:
    app, source = schedules_app(read_only=True)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        await pilot.press("r", "p")
        await pilot.pause()
        assert app.screen is screen and source.calls == []

    run(app, scenario)


def test_the_open_view_reads_again_every_refresh_interval() -> None:
    """A schedule that falls late (or is removed) while the view is open shows without ctrl+r."""
    source = StaticSource(sample_snapshot(), schedule_rows=rows())
    app = ConsoleApp(source, refresh=timedelta(milliseconds=100), clock=lambda: 1000.0)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        assert screen.calls.every == 0.1
        status = screen.query_one("#schedules-status", Static)
        assert str(status.render()) == "3 schedules · 1 late · 1 paused"
        first = rows()
        source.schedule_rows = (
            first[0],
            replace(first[0], name="hourly", next_slot=NOW - timedelta(minutes=30)),
        )
        await wait_until_pilot(
            pilot, lambda: [s.name for s in screen.schedules] == ["nightly-report", "hourly"],
            "the next read",
        )  # fmt: skip
        assert [row[:2] for row in cells(screen)] == [["nightly-report", "ok"],
                                                      ["hourly", "late 30m00s"]]  # fmt: skip
        assert str(status.render()) == "2 schedules · 1 late · 0 paused"
        reads = screen.reads
        await wait_until_pilot(pilot, lambda: screen.reads >= reads + 2, "two more reads")

    run(app, scenario)


def _shown(app: ConsoleApp) -> bool:
    return isinstance(app.screen, SchedulesScreen) and len(app.screen.schedules) == 3


def test_schedules_view_at_160x48(snap_compare: SnapCompare) -> None:
    app, _ = schedules_app()
    assert snap_compare(app, terminal_size=(160, 48), run_before=settle(["S"], _shown))


def test_schedules_view_at_80x24(snap_compare: SnapCompare) -> None:
    app, _ = schedules_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle(["S"], _shown))


@pytest.mark.full
def test_the_view_reads_runs_and_pauses_on_postgresql(db_dsn: str) -> None:
    from leasectl.console.source import DatabaseSource
    from leasectl.core.schedules import ScheduleSpec
    from tests.stores import Stores

    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.put_schedule(ScheduleSpec("s", "@daily", "q"), actor="t", reason=None)
    source = DatabaseSource(db_dsn, "leasectl")
    try:
        [s] = source.schedules()
        assert s.name == "s" and s.last_job_id is None
        assert source.run_schedule("s", "") is not None
        assert source.pause_schedule("s", "maint") is True
        assert source.pause_schedule("s", "again") is False
        assert source.resume_schedule("s", "") is True
        assert source.run_schedule("gone", "") is None
        [s] = source.schedules()
        assert s.last_status == "Pending" and not s.paused
    finally:
        source.close()
