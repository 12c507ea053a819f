"""The console's Queues view (`Q`) and queue screen (`enter`): rows in attention order with their
figures, hostile names and errors literal, `enter` and `esc`, reads again while open (and only
while in front), a failed read keeps the rows; typing `Q` into a text box opens nothing; SVG
snapshots at 80x24 and 160x48; and the real thing on PostgreSQL."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
from rich.console import Console
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.filter import FilterScreen
from leasectl.console.screens.find import FindScreen
from leasectl.console.screens.queues import QueueScreen, QueuesScreen
from leasectl.console.source import StaticSource
from leasectl.core.errors import ConnectionFailed
from leasectl.core.literal import visible
from tests.console.queues_sample import HOSTILE, details, overview
from tests.console.sample import sample_snapshot
from tests.console.test_hostile import (
    assert_shown,
    drive,
    screen_text,
    seed_hostile,
    widget_text,
)
from tests.console.test_screens import SnapCompare, settle
from tests.util import wait_until_pilot


class FlakySource(StaticSource):
    """A StaticSource whose Queues reads fail while ``failing`` is set."""

    failing: bool = False

    def queues(self) -> Any:
        if self.failing:
            raise ConnectionFailed("server closed the connection unexpectedly")
        return super().queues()


def queues_app(*, refresh: float = 2.0) -> tuple[ConsoleApp, FlakySource]:
    source = FlakySource(sample_snapshot(), queue_view=overview(), queue_details=details())
    app = ConsoleApp(source, refresh=timedelta(seconds=refresh), clock=lambda: 1000.0)
    return app, source


def run(
    app: ConsoleApp, scenario: Callable[[ConsoleApp, Pilot[None]], Any], size: tuple[int, int]
) -> None:
    async def go() -> None:
        async with app.run_test(size=size, notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await scenario(app, pilot)

    asyncio.run(go())


async def open_view(app: ConsoleApp, pilot: Pilot[None]) -> QueuesScreen:
    await pilot.press("Q")
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, QueuesScreen), "the view")
    screen = app.screen
    assert isinstance(screen, QueuesScreen)
    await wait_until_pilot(pilot, lambda: screen.reads >= 1, "its rows")
    return screen


def cells(screen: QueuesScreen) -> list[list[str]]:
    table = screen.query_one("#queues-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def text_of(widget: Static) -> str:
    """What a Static shows, as plain text (its Rich renderables printed 200 columns wide)."""
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def status(screen: QueuesScreen | QueueScreen) -> str:
    return str(screen.query_one(".queues-status", Static).render())


def test_q_lists_every_queue_most_urgent_first_with_its_figures() -> None:
    app, _ = queues_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        shown = cells(screen)
        assert [row[0] for row in shown[:2]] == ["payments", "emails"]
        assert shown[0][1:8] == ["≈2.0M", "41m00s", "↑ growing", "729", "10✖", "12.5s",
                                 "10/10 running · 20/s (burst 20)"]  # fmt: skip
        assert shown[1][7] == "⏸ paused"
        webhooks = next(row for row in shown if row[0] == "webhooks")
        assert webhooks[3] == "↓ shrinking" and webhooks[6] == "850ms"
        # The hostile name as literal characters, its escapes visible, nothing interpreted.
        hostile = next(row for row in shown if row[0].startswith("[@click"))
        assert hostile[0] == visible(HOSTILE)[:39] + "…"
        assert app.is_running
        assert status(screen).startswith("5 queues · 3 growing · 1 failing · 2 paused")
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: app.screen is app.main, "back on the main screen")

    run(app, scenario, (160, 48))


def test_enter_opens_the_highlighted_queue_and_esc_comes_back() -> None:
    app, _ = queues_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        await pilot.press("down", "enter")  # emails
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, QueueScreen), "its screen")
        queue = app.screen
        assert isinstance(queue, QueueScreen) and queue.queue == "emails"
        await wait_until_pilot(pilot, lambda: queue.detail is not None, "its figures")
        body = text_of(queue.query_one("#queue-body", Static))
        assert "⏸ paused 12m00s ago by ops:alice: SMTP relay down" in body
        assert "PSPError" in body and "requeue-expired" in body
        # The hostile error and actor as literal text (markup shown, escapes visible).
        assert "[@click=app.quit]ops[/]\\x1b]0;PWNED\\x07" in body
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: app.screen is screen, "back on the view")
        assert screen.highlighted() == "emails"
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: app.screen is app.main, "back on the main screen")

    run(app, scenario, (160, 48))


def test_the_open_screens_read_again_and_a_failed_read_keeps_the_rows() -> None:
    app, source = queues_app(refresh=0.1)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        assert screen.calls.every == 0.1
        view = overview()
        source.queue_view = replace(view, rows=view.rows[2:])
        await wait_until_pilot(
            pilot, lambda: screen.view is not None and len(screen.view.rows) == 3, "the next read"
        )
        assert len(cells(screen)) == 3
        source.failing = True
        reads = screen.reads
        await wait_until_pilot(pilot, lambda: screen.reads > reads, "a failed read")
        assert "could not read the queues: server closed the connection" in status(screen)
        assert len(cells(screen)) == 3  # the last rows stay
        source.failing = False
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, QueueScreen), "its screen")
        queue = app.screen
        assert isinstance(queue, QueueScreen)
        await wait_until_pilot(pilot, lambda: queue.reads >= 3, "its reads while open")
        # The view behind it does not read meanwhile.
        behind = screen.reads
        await wait_until_pilot(pilot, lambda: queue.reads >= 6, "three more")
        assert screen.reads == behind
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: screen.reads > behind, "a read when back in front")

    run(app, scenario, (160, 48))


def test_a_queue_with_no_figures_says_so() -> None:
    app, source = queues_app()
    source.queue_details = {}

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await open_view(app, pilot)
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, QueueScreen), "its screen")
        queue = app.screen
        assert isinstance(queue, QueueScreen)
        await wait_until_pilot(pilot, lambda: queue.reads >= 1, "its read")
        assert status(queue) == "could not read the queue: no figures for queue payments"

    run(app, scenario, (80, 24))


def test_q_typed_into_a_text_box_is_text() -> None:
    app, _ = queues_app()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        for key, kind, box in (("f", FindScreen, "#find-input"), ("slash", FilterScreen, None)):
            await pilot.press(key)
            await wait_until_pilot(pilot, lambda k=kind: isinstance(app.screen, k), kind.__name__)
            await pilot.press("Q", "Q")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, kind), screen
            field = screen.query_one(box, Input) if box else screen.query_one(Input)
            assert field.value.endswith("QQ")
            await pilot.press("escape")
            await wait_until_pilot(pilot, lambda: app.screen is app.main, "the main screen")

    run(app, scenario, (80, 24))


def _listed(app: ConsoleApp) -> bool:
    return isinstance(app.screen, QueuesScreen) and app.screen.reads >= 1


def _opened(app: ConsoleApp) -> bool:
    return isinstance(app.screen, QueueScreen) and app.screen.detail is not None


def test_queues_view_at_160x48(snap_compare: SnapCompare) -> None:
    app, _ = queues_app()
    assert snap_compare(app, terminal_size=(160, 48), run_before=settle(["Q"], _listed))


def test_queues_view_at_80x24(snap_compare: SnapCompare) -> None:
    app, _ = queues_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle(["Q"], _listed))


async def open_queue(pilot: Pilot[None]) -> None:
    """The view, its rows, then `enter` on the first (payments)."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    await settle(["Q"], _listed)(pilot)
    await pilot.press("enter")
    await wait_until_pilot(pilot, lambda: _opened(app), "the queue screen")


def test_queue_screen_at_160x48(snap_compare: SnapCompare) -> None:
    app, _ = queues_app()
    assert snap_compare(app, terminal_size=(160, 48), run_before=open_queue)


def test_queue_screen_at_80x24(snap_compare: SnapCompare) -> None:
    app, _ = queues_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=open_queue)


def test_hostile_queues_errors_and_events_from_postgresql_are_text(
    db_dsn: str, sql_conn: psycopg.Connection[Any]
) -> None:
    """The hostile corpus (tests/hostile.py) as queue names, failed attempts' errors, audit
    actors and reasons, read by the real console: every segment of both screens is text (no
    action, no link, no raw control), and each name is there, escaped, cut to its column."""
    seeded = seed_hostile(sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_view(app, pilot)
        await wait_until_pilot(
            pilot, lambda: screen.view is not None and len(screen.view.rows) >= len(seeded), "all"
        )
        screen_text(app, "the Queues view")
        table = screen.query_one("#queues-table", DataTable)
        assert screen.view is not None
        shown = {row.queue: table.get_row_at(i)[0] for i, row in enumerate(screen.view.rows)}
        for h in seeded:
            cell = shown[h.name]
            expected = Text(visible(h.name))
            expected.truncate(40, overflow="ellipsis")
            assert cell.plain == expected.plain, (h.name, cell.plain)
        # The queue of the most hostile text: its screen's every line is text too.
        target = next(h for h in seeded if "[@click" in h.name)
        table.move_cursor(row=[r.queue for r in screen.view.rows].index(target.name))
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: _opened(app), "its screen")
        queue = app.screen
        assert isinstance(queue, QueueScreen) and queue.detail is not None
        assert queue.detail.errors.groups and queue.detail.events.entries
        body = widget_text(queue.query_one("#queue-body", Static), "the queue screen")
        assert_shown(body, target.name, "the queue screen")
        screen_text(app, "the queue screen")

    drive(db_dsn, scenario)
