"""Flow control in the console: the limited queues under the counts (limits in force, use),
the Pending jobs a limit holds back (⏳ at cap, ⏳ rate-limited), and `L`, which sets or lifts
the highlighted job's queue's limits through a dialog (a reason required, bad values said
there and nothing sent), from the main screen and the find screen; read-only consoles refuse.

Pilot tests over fixed data (StaticSource records every call), SVG snapshots, and one test on a
real PostgreSQL: the refresh reads the limits and `L` sets and lifts them, audited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.find import FindScreen
from leasectl.console.screens.limit import LimitScreen, parse_fields
from leasectl.console.source import StaticSource
from leasectl.console.view import ConsoleFilter
from leasectl.console.widgets.bars import limits_text
from leasectl.console.widgets.tables import PendingTable
from leasectl.core.errors import UsageError
from leasectl.core.limits import LimitSpec, QueueLimit
from leasectl.core.literal import visible
from leasectl.core.models import Snapshot
from tests.console.sample import NOW, sample_detail, sample_found, sample_snapshot
from tests.console.test_console_db import drive, highlight
from tests.console.test_screens import SnapCompare, settle
from tests.seed import seed_console
from tests.stores import Stores
from tests.util import wait_until_pilot

HOSTILE = "pay[bold]ments[/]\x1b]0;PWNED\x07"


def limit(queue: str, **values: Any) -> QueueLimit:
    base: dict[str, Any] = {
        "concurrency": None,
        "rate": None,
        "burst": None,
        "ramp_from": None,
        "ramp_until": None,
        "set_at": NOW - timedelta(minutes=5),
        "set_by": "operator:alice",
        "reason": "partner API",
        "throttled": 0,
        "cap_now": None,
        "rate_now": None,
        "burst_now": None,
        "tokens": None,
        "live": 0,
        "db_now": NOW,
    }
    return QueueLimit(queue=queue, **{**base, **values})


# payments: at its cap (10/10), 20/s burst 40, ramping (60%); emails: out of tokens.
PAYMENTS = limit(
    "payments",
    concurrency=10,
    rate=20.0,
    burst=40,
    ramp_from=NOW - timedelta(minutes=3),
    ramp_until=NOW + timedelta(minutes=2),
    throttled=1234,
    cap_now=10,
    rate_now=12.4,
    burst_now=24.0,
    tokens=5.0,
    live=10,
)
EMAILS = limit("emails", rate=0.5, rate_now=0.5, burst_now=1.0, tokens=0.2, throttled=8)


def limited_snapshot(*limits: QueueLimit) -> Snapshot:
    chosen = limits or (EMAILS, PAYMENTS)
    return replace(sample_snapshot(), limits=chosen, limits_total=len(chosen))


def limited_app(
    snap: Snapshot | None = None, *, read_only: bool = False
) -> tuple[ConsoleApp, StaticSource]:
    source = StaticSource(
        snap or limited_snapshot(), details={1042: sample_detail()}, found=sample_found()
    )
    return ConsoleApp(source, read_only=read_only, clock=lambda: 1000.0), source


def run(
    app: ConsoleApp,
    scenario: Callable[[ConsoleApp, Pilot[None]], Any],
    size: tuple[int, int] = (160, 48),
) -> None:
    async def go() -> None:
        async with app.run_test(size=size, notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await scenario(app, pilot)

    asyncio.run(go())


def summary(app: ConsoleApp) -> str:
    return str(app.main.query_one("#counts", Static).render())


async def dialog(app: ConsoleApp, pilot: Pilot[None]) -> LimitScreen:
    """The dialog, once on top and composed."""

    def shown() -> bool:
        return isinstance(app.screen, LimitScreen) and bool(app.screen.query("#reason"))

    await wait_until_pilot(pilot, shown, "the dialog")
    assert isinstance(app.screen, LimitScreen)
    return app.screen


async def press_l(app: ConsoleApp, pilot: Pilot[None]) -> LimitScreen:
    await pilot.press("L")
    return await dialog(app, pilot)


def error_of(screen: LimitScreen) -> str:
    return str(screen.query_one("#confirm-error", Static).render())


def fill(screen: LimitScreen, **values: str) -> None:
    for name, value in values.items():
        screen.query_one(f"#{name}", Input).value = value


# -- what the console shows ----------------------------------------------------------------------


def test_the_limits_line_names_each_limited_queue_with_its_use() -> None:
    snap = limited_snapshot()
    line = limits_text(snap, ConsoleFilter(), 400)
    assert line is not None
    # Those holding jobs back first (both do here), by name; the ramp's progress.
    assert line.plain == (
        "⏳ limits: emails 30/m (burst 1), payments 10/10 running · 12.4/s (burst 24) · ramp 60%"
    )
    # The filter's queue first; a narrow summary cuts the line with "…".
    first = limits_text(snap, ConsoleFilter(queue="payments"), 400)
    assert first is not None and first.plain.startswith("⏳ limits: payments 10/10 running")
    cut = limits_text(snap, ConsoleFilter(), 40)
    assert cut is not None and cut.cell_len <= 40 and cut.plain.endswith("…")
    assert limits_text(replace(snap, limits=(), limits_total=0), ConsoleFilter(), 80) is None


def test_the_summary_shows_the_limits_and_the_pending_panel_what_they_hold_back() -> None:
    free = limit("reports", concurrency=5, cap_now=5, live=1)
    app, _ = limited_app(limited_snapshot(EMAILS, PAYMENTS, free))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        assert "⏳ limits: emails 30/m (burst 1), payments 10/10 running" in summary(app)
        table = app.main.query_one(PendingTable)
        run_at = [str(c.label) for c in table.columns.values()].index("RUN AT")
        due = {
            job.queue: str(table.get_row_at(i)[run_at])
            for i, job in enumerate(app.snapshot.pending if app.snapshot else ())
            if job.run_at <= NOW
        }
        assert due == {"payments": "⏳ at cap", "emails": "⏳ rate-limited", "reports": "ready"}
        # A job not yet due says when it is due, limit or not.
        delayed = [str(table.get_row_at(i)[run_at]) for i in (7, 8)]
        assert delayed == ["in 42s", "in 1m35s"]

    run(app, scenario)


def test_a_hostile_queue_name_is_shown_literally() -> None:
    app, _ = limited_app(limited_snapshot(limit(HOSTILE, concurrency=1, cap_now=1, live=1)))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        shown = summary(app)
        assert visible(HOSTILE) in shown and "\x1b" not in shown
        app.request_limit(HOSTILE)
        screen = await dialog(app, pilot)
        title = str(screen.query_one("#confirm-title", Static).render())
        assert visible(HOSTILE) in title and "\x1b" not in title

    run(app, scenario)


# -- L -------------------------------------------------------------------------------------------


def test_l_sets_the_highlighted_jobs_queue_limits_with_a_reason() -> None:
    app, source = limited_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("1")  # Pending: its first job is one of payments
        screen = await press_l(app, pilot)
        assert screen.queue == "payments"
        # The fields hold the limits as configured (not as ramped).
        values = [screen.query_one(f"#{n}", Input).value for n in ("concurrency", "rate", "burst")]
        assert values == ["10", "20/s", "40"]
        fill(screen, concurrency="25", rate="300/m", burst="")
        await pilot.press("ctrl+y")  # no reason: refused, nothing sent
        await pilot.pause()
        assert app.screen is screen and source.limit_calls == []
        assert "reason is required" in error_of(screen)
        fill(screen, reason="black friday")
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: source.limit_calls != [], "the call")
        assert source.limit_calls == [("payments", LimitSpec(25, 5.0, None))]
        assert source.calls[-1] == ("limit", (), "black friday")
        await wait_until_pilot(
            pilot,
            lambda: any(n.title == "Queue limited" for n in app._notifications),
            "the result",
        )

    run(app, scenario)


BAD_VALUES = [
    ({"concurrency": "0"}, "Invalid concurrency 0: from 1 to 100,000 live leases"),
    ({"concurrency": "ten"}, "Invalid concurrency 'ten': a whole number"),
    ({"concurrency": "-3"}, "Invalid concurrency '-3'"),
    ({"concurrency": "9" * 400}, "a whole number"),
    ({"rate": "fast"}, "Invalid rate 'fast': use starts per second or per minute"),
    ({"rate": "0/s"}, "Invalid rate '0/s': from 0.001/s"),
    ({"rate": "9999999/s"}, "Invalid rate"),
    ({"concurrency": "", "rate": "", "burst": "5"}, "A burst needs a rate"),
    ({"rate": "", "burst": "5"}, "Burst needs rate"),
    ({"burst": "0"}, "Invalid burst 0"),
    ({"reason": "x" * 5000}, "Reason: at most"),
]


def test_bad_values_are_said_in_the_dialog_and_change_nothing() -> None:
    app, source = limited_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await press_l(app, pilot)
        for values, said in BAD_VALUES:
            fill(screen, concurrency="10", rate="20/s", burst="40", reason="r")
            fill(screen, **values)
            await pilot.press("ctrl+y")
            await pilot.pause()
            assert app.screen is screen, ("the dialog stays", values)
            assert said in error_of(screen), (values, error_of(screen))
            assert source.limit_calls == [] and source.calls == [], values

    run(app, scenario)


def test_the_fields_parse_as_the_cli_does() -> None:
    assert parse_fields(" 10 ", "20/s", "40") == LimitSpec(10, 20.0, 40)
    assert parse_fields("", "300/m", "") == LimitSpec(None, 5.0, None)
    assert parse_fields("", "", "") is None  # lift the limits
    wide = "\uff11\uff10"  # fullwidth 10: digits, but not ASCII ones
    with pytest.raises(UsageError, match=f"^invalid concurrency '{wide}'"):
        parse_fields(wide, "", "")


def test_emptied_fields_lift_the_limits_and_an_unlimited_queue_has_none_to_lift() -> None:
    app, source = limited_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await press_l(app, pilot)
        assert "12.4/s" in str(screen.query_one("#confirm-condition", Static).render())
        fill(screen, concurrency="", rate="", burst="", reason="incident over")
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: source.limit_calls != [], "the call")
        assert source.limit_calls == [("payments", None)]
        await wait_until_pilot(
            pilot, lambda: any(n.title == "Limits lifted" for n in app._notifications), "result"
        )
        await wait_until_pilot(pilot, lambda: len(app.screen_stack) == 1, "the dialog gone")
        app.request_limit("reports")  # not limited: nothing to lift
        screen = await dialog(app, pilot)
        assert screen.limit is None
        fill(screen, reason="r")
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert "no limits to lift" in error_of(screen) and len(source.limit_calls) == 1

    run(app, scenario)


def test_a_read_only_console_refuses_l() -> None:
    app, source = limited_app(read_only=True)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("L")
        await pilot.pause()
        assert not isinstance(app.screen, LimitScreen)
        assert any("Refused: limit" in n.message for n in app._notifications)
        app.request_limit("payments")  # (the command palette's way, or find's)
        await pilot.pause()
        assert not isinstance(app.screen, LimitScreen) and source.calls == []

    run(app, scenario)


def test_l_in_find_limits_the_filters_queue_and_typing_there_does_not() -> None:
    app, source = limited_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "find")
        find = app.screen
        assert isinstance(find, FindScreen)
        await pilot.press(*"queue:emails L")  # typed into the filter box: no dialog
        await pilot.pause()
        assert isinstance(app.screen, FindScreen)
        assert find.query_one("#find-input", Input).value == "queue:emails L"
        find.query_one("#find-input", Input).value = "queue:emails"
        n = find.searches
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: find.searches > n and not find.running, "search")
        await pilot.press("tab", "L")
        screen = await dialog(app, pilot)
        assert screen.queue == "emails"
        # Keys typed in the dialog land in its fields; Enter does not confirm.
        await pilot.press(*"5", "enter", *"rcsDPL")
        await pilot.pause()
        assert app.screen is screen and source.calls == []
        assert screen.query_one("#concurrency", Input).value.startswith("5")

    run(app, scenario)


# -- pictures ------------------------------------------------------------------------------------


def test_main_screen_with_limits(snap_compare: SnapCompare) -> None:
    app, _ = limited_app()
    assert snap_compare(app, terminal_size=(160, 48), run_before=settle(["1"]))


def test_main_screen_with_limits_at_80x24(snap_compare: SnapCompare) -> None:
    app, _ = limited_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle(["1"]))


def test_limit_dialog_at_80x24(snap_compare: SnapCompare) -> None:
    app, _ = limited_app()

    def shown(app: ConsoleApp) -> bool:
        return isinstance(app.screen, LimitScreen)

    assert snap_compare(app, terminal_size=(80, 24), run_before=settle(["1", "L"], shown))


# -- on PostgreSQL -------------------------------------------------------------------------------


@pytest.mark.full  # the real console on PostgreSQL, through several refreshes
def test_the_refresh_reads_the_limits_and_l_sets_and_lifts_them(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    queue = store.ops.inspect(seeded.pending[0]).job.queue

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", seeded.pending[0])
        screen = await press_l(app, pilot)
        assert screen.limit is None
        fill(screen, concurrency="3", rate="120/m", reason="slow partner")
        await pilot.press("ctrl+y")
        await wait_until_pilot(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.limits_total == 1,
            "the limit, read by a refresh",
        )
        assert app.snapshot is not None
        (lim,) = app.snapshot.limits
        assert (lim.queue, lim.concurrency, lim.rate, lim.reason) == (queue, 3, 2.0, "slow partner")
        assert f"{queue} " in summary(app) and "2/s (burst 2)" in summary(app)
        await highlight(app, pilot, "pending", seeded.pending[0])
        screen = await press_l(app, pilot)
        assert screen.limit is not None
        fill(screen, concurrency="", rate="", reason="partner fixed")
        await pilot.press("ctrl+y")
        await wait_until_pilot(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.limits_total == 0,
            "the limits lifted",
        )

    drive(db_dsn, scenario)
    events = sql_conn.execute(
        "SELECT action, reason FROM leasectl.queue_events WHERE queue = %s ORDER BY id", (queue,)
    ).fetchall()
    assert events == [("limit", "slow partner"), ("unlimit", "partner fixed")]


def test_a_queue_past_the_limited_queues_read_may_still_be_lifted() -> None:
    """The refresh reads the first 100 limited queues: for another one the dialog does not say
    "not limited", and emptied fields lift whatever limits it has."""
    app, source = limited_app(replace(limited_snapshot(), limits_total=500))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        app.request_limit("reports")
        screen = await dialog(app, pilot)
        body = str(screen.query_one("#confirm-condition", Static).render())
        assert "were not read" in body and "Not limited" not in body
        fill(screen, reason="r")
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: source.limit_calls != [], "the call")
        assert source.limit_calls == [("reports", None)]

    run(app, scenario)
