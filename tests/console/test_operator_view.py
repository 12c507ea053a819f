"""What an operator new to the console needs to read it right during an incident: counts that
match the filter and `leasectl status`, the filter always in sight, dialogs that fit 80x24,
quarantined jobs that say who quarantined them and why, columns chosen for narrow terminals.

Each test drives the console with Pilot: against a real PostgreSQL where the numbers come from
the database, from fixed data (tests/console/sample.py) where only the picture matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

import psycopg
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Button, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.confirm import ConfirmScreen
from leasectl.console.screens.filter import FilterScreen
from leasectl.console.screens.help import HelpScreen
from leasectl.console.source import StaticSource
from leasectl.console.view import ConsoleFilter
from leasectl.console.widgets.tables import OwnersTable, PanelTable, StuckTable
from leasectl.core.models import ConsoleCounts, Freshness, Snapshot
from tests.console.sample import OWNERS, W3, owner, sample_snapshot
from tests.console.test_console_db import drive
from tests.seed import SILENT, TTL, seed_console
from tests.stores import Stores
from tests.util import wait_until_pilot

OTHER = "other-host:300:cccccc"
Scenario = Callable[[ConsoleApp, Pilot[None]], Awaitable[None]]


def seed_with_other_owner(store: Stores, sql_conn: psycopg.Connection) -> list[int]:
    """seed_console, and 3 more expired leases in the same queue held by another (silent)
    owner: what an owner filter on SILENT must leave out."""
    seed_console(store, sql_conn)
    leases = store.work.claim("payments", OTHER, TTL, limit=3)
    assert len(leases) == 3
    ids = [le.job_id for le in leases]
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = ANY(%s)",
        (ids,),
    )
    return ids


async def filter_to(app: ConsoleApp, pilot: Pilot[None], flt: ConsoleFilter) -> None:
    app.apply_filter(flt)
    await wait_until_pilot(
        pilot,
        lambda: app.snapshot is not None and app.snapshot.owner == flt.owner
        and app.snapshot.queue == flt.queue and app.filter == flt,
        f"a refresh under {flt}",
    )  # fmt: skip
    await pilot.pause()


def titles(app: ConsoleApp) -> list[str]:
    return [str(panel.border_title) for panel in app.main.query(".panel")]


def summary(app: ConsoleApp) -> str:
    return str(app.main.query_one("#counts", Static).render())


# -- requeue all expired under an owner filter ---------------------------------------------------


def test_requeue_all_expired_counts_what_the_owner_filter_matches(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The note about expired leases beyond the rows loaded compares the filter's own count
    with the rows: the other owner's 3 expired leases in the queue are not "3 more"."""
    seed_with_other_owner(store, sql_conn)
    notes: dict[int, str | None] = {}

    def scenario_for(limit: int) -> Scenario:
        async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
            await filter_to(app, pilot, ConsoleFilter(owner="silent-host"))
            await pilot.press("R")
            await wait_until_pilot(
                pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation"
            )
            screen = app.screen
            assert isinstance(screen, ConfirmScreen)
            assert {j.lease_owner for j in screen.jobs} == {SILENT}
            notes[limit] = screen.note
            await pilot.press("escape")

        return scenario

    drive(db_dsn, scenario_for(100))
    assert notes[100] is None  # both of SILENT's expired leases are listed: nothing more
    drive(db_dsn, scenario_for(1), limit=1)
    note = notes[1]
    assert note is not None and note.startswith("1 more expired leases in the filter"), note


# -- the filter in sight, esc, N of M ----------------------------------------------------------


def test_the_filter_stays_in_sight_titles_say_n_of_m_and_esc_clears_it(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_with_other_owner(store, sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        assert "all queues" in summary(app)
        assert titles(app)[1] == "2 Processing · 8"
        await filter_to(app, pilot, ConsoleFilter(owner="silent-host"))
        # Long after the toast: the summary says what is shown, and how to go back.
        assert "filter  owner:silent-host (counts: all queues)  esc clears" in summary(app)
        assert titles(app) == [
            "1 Pending · 0 of 2",
            "2 Processing · 2 of 8",
            "3 Expired & Stuck · 3 of 6 (2 expired + 1 Stuck)",
            "4 Owners · 1 of 3",
            "5 Failed · 0",
        ]
        await pilot.press("escape")
        await wait_until_pilot(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.owner is None,
            "a refresh without the filter",
        )
        await pilot.pause()
        assert app.filter.empty
        assert "all queues" in summary(app) and "filter" not in summary(app)
        assert titles(app)[1:3] == [
            "2 Processing · 8",
            "3 Expired & Stuck · 6 (5 expired + 1 Stuck)",
        ]

    drive(db_dsn, scenario)


def test_esc_clears_the_selection_before_the_filter(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_console(store, sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await filter_to(app, pilot, ConsoleFilter(queue="payments"))
        await pilot.press("2", "space")
        assert app.selected
        await pilot.press("escape")
        assert not app.selected and app.filter == ConsoleFilter(queue="payments")
        await pilot.press("escape")
        assert app.filter.empty

    drive(db_dsn, scenario)


# -- one vocabulary with `leasectl status` --------------------------------------------------------


def test_summary_counts_match_leasectl_status(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Processing counts the expired leases among the held ones, Stuck only the Stuck jobs, as
    `leasectl status` does; the expired leases are not counted twice."""
    seed_with_other_owner(store, sql_conn)
    report = store.ops.status()
    processing = sum(q.processing for q in report.queues)
    assert (processing, report.expired, report.stuck) == (8, 5, 1)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        text = summary(app)
        assert f"Processing {processing} (⚠ 1 at risk, ✖ {report.expired} expired)" in text
        assert f"Stuck {report.stuck}" in text and "Stuck 6" not in text

    drive(db_dsn, scenario)


# -- the filter dialog lists every queue --------------------------------------------------------


def test_the_filter_dialog_lists_every_queue_whatever_the_filter_shows(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_console(store, sql_conn)
    store.ops.enqueue([{}], queue="reports")  # a queue no worker declares and no panel shows

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await filter_to(app, pilot, ConsoleFilter(queue="emails"))
        await pilot.press("slash")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FilterScreen), "the dialog")
        screen = app.screen
        assert isinstance(screen, FilterScreen)
        assert screen.queues == ["emails", "payments", "reports"]
        shown = str(screen.query_one("#filter-queues Static", Static).render())
        assert "emails, payments, reports" in shown
        # A bare word is known as a queue, though the filter hides it.
        screen.query_one("#filter-input", Input).value = "reports"
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: app.filter.queue == "reports", "the new filter")

    drive(db_dsn, scenario)


# -- fixed data: the dialogs, the summary, the columns -------------------------------------------


def fixed(snapshot: Snapshot | None = None) -> ConsoleApp:
    source = StaticSource(snapshot or sample_snapshot())
    return ConsoleApp(source, clock=lambda: 1000.0)


def run_fixed(app: ConsoleApp, size: tuple[int, int], scenario: Scenario) -> None:
    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(run())


def in_sight(app: ConsoleApp, widget: Widget) -> bool:
    """Whether the whole widget is drawn on the screen (not scrolled or cut off)."""
    screen = Region(0, 0, *app.size)
    return widget.region.area > 0 and screen.contains_region(widget.region)


def test_every_dialog_fits_80x24_with_its_input_and_buttons_in_sight() -> None:
    many = replace(sample_snapshot(), queues=tuple(f"queue-{i:03}" for i in range(150)))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("R")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "confirm")
        await pilot.pause()
        screen = app.screen
        for widget in (screen.query_one("#reason"), *screen.query(Button)):
            assert in_sight(app, widget), widget
        await pilot.press("ctrl+y")  # no reason: the error line appears, the buttons stay
        await pilot.pause()
        assert "reason is required" in str(screen.query_one("#confirm-error", Static).render())
        for widget in (screen.query_one("#reason"), *screen.query(Button)):
            assert in_sight(app, widget), widget
        await pilot.press(*"INC-9")
        await pilot.click("#confirm-ok")
        await wait_until_pilot(pilot, lambda: not app.acting and app.last_result is not None, "act")
        source = app.source
        assert isinstance(source, StaticSource) and source.calls[-1][2] == "INC-9"

        await pilot.press("slash")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FilterScreen), "filter")
        await pilot.pause()
        screen = app.screen
        assert in_sight(app, screen.query_one("#filter-input"))
        assert in_sight(app, screen.query_one("#filter-dialog"))
        await pilot.press("escape")

        await pilot.press("question_mark")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        await pilot.pause()
        assert in_sight(app, app.screen.query_one("#help-dialog"))

    run_fixed(fixed(many), (80, 24), scenario)


def test_history_says_it_is_an_estimate_and_never_less_than_recent_exact_counts() -> None:
    snap = sample_snapshot()
    behind = replace(
        snap,
        counts=replace(snap.counts, completed_estimate=50_000, failed_estimate=3),
        failed_recent=4,
    )
    none = replace(snap, counts=replace(snap.counts, completed_estimate=None, failed_estimate=None))

    async def estimates_behind(app: ConsoleApp, pilot: Pilot[None]) -> None:
        text = summary(app)
        assert "All-time Completed ≈50.0k  Failed ≈4 (≈ planner statistics, all queues)" in text

    async def no_statistics(app: ConsoleApp, pilot: Pilot[None]) -> None:
        text = summary(app)
        assert "All-time Completed/Failed: no statistics yet" in text and "≈?" not in text

    run_fixed(fixed(behind), (140, 40), estimates_behind)
    run_fixed(fixed(none), (140, 40), no_statistics)


LONG = "a-very-long-hostname.eu-west-1.compute.internal:31337:feedface"


def test_narrow_panels_keep_the_diagnosis_and_the_owner_and_mark_every_cut() -> None:
    snap = sample_snapshot()
    long_owner = owner(LONG, Freshness.SILENT, seen_ago=70, held=0)
    data = replace(snap, owners=(*OWNERS, long_owner))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("3")
        await pilot.pause()
        stuck = app.main.query_one("#stuck", StuckTable)
        assert stuck.shown_columns == ("id", "state", "diagnosis", "owner")
        lines = [str(stuck.render_line(y).text) for y in range(1, 1 + len(stuck.items))]
        assert all("quarantined by" in line or "owner" in line for line in lines), lines
        assert sum(W3 in line for line in lines) == 3, lines  # an owner id whole
        await pilot.press("4")
        await pilot.pause()
        owners = app.main.query_one("#owners", OwnersTable)
        text = [str(owners.render_line(y).text) for y in range(1, 1 + len(owners.items))]
        assert any(W3 in line for line in text)
        [cut] = [line for line in text if line.strip().startswith("a-very-long")]
        assert "…" in cut, cut  # cut, and shown to be
        for panel in app.main.query(PanelTable):
            if not panel.size.width:
                continue  # narrow: the panels not shown have no size
            total = sum(c.get_render_width(panel) for c in panel.ordered_columns)
            assert total <= panel.size.width, (panel.id, total, panel.size.width)

    run_fixed(fixed(data), (80, 24), scenario)


def test_matched_counts_default_to_the_counts() -> None:
    snap = sample_snapshot()
    assert snap.matching is snap.counts and snap.totals is snap.counts
    matched = ConsoleCounts(expired=1)
    assert replace(snap, matched=matched).matching is matched
