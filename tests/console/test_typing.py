"""The console under a person's hands. Typing never acts (a search keeps the filter
box's focus; Enter in a text box never confirms an action), keys act where they are pressed,
a `q` typed among other keys only asks, and no key sequence ends in a traceback."""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from textual import events
from textual.keys import _character_to_key
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Button, Input

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.bulk import BulkConfirmScreen
from leasectl.console.screens.confirm import ConfirmScreen, QueueConfirmScreen
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.screens.dialog import ReasonDialog
from leasectl.console.screens.filter import FilterScreen
from leasectl.console.screens.find import FindScreen
from leasectl.console.screens.help import HelpScreen
from leasectl.console.screens.limit import LimitScreen
from leasectl.console.screens.queues import QueueScreen, QueuesScreen
from leasectl.console.source import StaticSource
from leasectl.console.view import Action
from leasectl.console.widgets.tables import FindTable
from tests.console import queues_sample
from tests.console.sample import sample_detail, sample_found, sample_snapshot
from tests.console.test_console_db import drive
from tests.seed import seed_console
from tests.stores import Stores
from tests.util import wait_until_pilot

# Between two keys of a person typing. Not a wait for a condition: the pace is the point (a
# burst of keys and a person's typing reach the console differently).
HUMAN_GAP_S = 0.08
PRINTABLE = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"]


async def tap(pilot: Pilot[None], key: str) -> None:
    """``pilot.press`` without its waits for the process to look idle (wall clock against CPU
    time: on a loaded machine each key took 80 ms): the key is sent as the driver sends it,
    then every message queued on the app and its screen is handled, twice (a key may push a
    screen, whose own messages follow)."""
    app = pilot.app
    name = _character_to_key(key) if len(key) == 1 and not key.isalnum() else key
    event = events.Key(name, key if len(key) == 1 else None)
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)
    for _ in range(2):
        await pilot._wait_for_screen()


async def type_slowly(pilot: Pilot[None], text: str) -> None:
    for ch in text:
        await pilot.press(ch)
        await pilot.pause(HUMAN_GAP_S)


def jobs_as_they_are(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT id, status::text, attempts, lease_owner, lease_until FROM leasectl.jobs ORDER BY id"
    ).fetchall()
    events = conn.execute("SELECT count(*) FROM leasectl.job_events").fetchone()
    pauses = conn.execute("SELECT count(*) FROM leasectl.queue_events").fetchone()
    return [*rows, ("events", events), ("pauses", pauses)]


async def searched(pilot: Pilot[None], screen: FindScreen, before: int) -> None:
    await wait_until_pilot(
        pilot, lambda: screen.searches > before and not screen.running, "the search's answer"
    )


def test_typing_the_incidents_filters_on_the_results_changes_no_job(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """At 80x24: `f`, `state:pending queue:payments⏎`, then `since:1h⏎` typed at human speed.
    It cancelled job #20 (the `c` of `since` opened the dialog, `e:1h` became the reason, Enter
    confirmed it), and `queue:` typed on the results quit the console."""
    seed_console(store, sql_conn)
    before = jobs_as_they_are(sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "find")
        screen = app.screen
        assert isinstance(screen, FindScreen)
        box = screen.query_one("#find-input", Input)
        n = screen.searches
        await type_slowly(pilot, "state:pending queue:payments")
        await pilot.press("enter")
        await searched(pilot, screen, n)
        assert screen.query_one(FindTable).items, "the search found the pending jobs"
        n = screen.searches
        await type_slowly(pilot, " since:1h")
        await pilot.press("enter")
        await searched(pilot, screen, n)
        # A second queue: is refused in the filter's error line; nothing else happens.
        await type_slowly(pilot, " queue:payments")
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen and app.is_running and not screen.running
        assert box.value == "state:pending queue:payments since:1h queue:payments"
        # Having left the box on purpose (tab), the results' letters act, but only behind a
        # confirmation that Enter does not give: `s` of `since` asks, the rest is a reason.
        await pilot.press("tab")
        await type_slowly(pilot, "since:1h")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReasonDialog), app.screen
        assert "Enter does not confirm" in str(app.screen.query_one("#confirm-error").render())
        await pilot.press("escape")
        # `queue:` on the results: the `q` goes back to the box, typed; nothing quits.
        await wait_until_pilot(pilot, lambda: app.screen is screen, "back on the results")
        box.value = ""
        await pilot.press("tab")
        await type_slowly(pilot, "queue:payments")
        assert app.is_running and app.screen is screen
        assert box.value == "ueue:payments" or box.value == "queue:payments", box.value
        assert box.has_focus

    drive(db_dsn, scenario, size=(80, 24))
    assert jobs_as_they_are(sql_conn) == before


# -- every printable key on every screen ---------------------------------------------------------


def static_app() -> tuple[ConsoleApp, StaticSource]:
    source = StaticSource(
        sample_snapshot(),
        details={1042: sample_detail()},
        found=sample_found(),
        queue_view=queues_sample.overview(),
        queue_details=queues_sample.details(),
    )
    return ConsoleApp(source, clock=lambda: 1000.0), source


async def top(pilot: Pilot[None], kind: type[Screen[Any]]) -> Screen[Any]:
    app = pilot.app
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, kind), kind.__name__)
    return app.screen


async def open_main(pilot: Pilot[None]) -> Screen[Any]:
    return pilot.app.screen


async def open_detail(pilot: Pilot[None]) -> Screen[Any]:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    app.open_detail(1042)
    screen = await top(pilot, DetailScreen)
    assert isinstance(screen, DetailScreen)
    await wait_until_pilot(pilot, lambda: screen.detail is not None, "the job")
    return screen


async def open_find(pilot: Pilot[None]) -> Screen[Any]:
    await pilot.press("f")
    return await top(pilot, FindScreen)


async def open_results(pilot: Pilot[None]) -> Screen[Any]:
    screen = await open_find(pilot)
    assert isinstance(screen, FindScreen)
    n = screen.searches
    screen.query_one("#find-input", Input).value = "state:failed"
    await pilot.press("enter")
    await searched(pilot, screen, n)
    await pilot.press("tab")
    return screen


async def open_filter(pilot: Pilot[None]) -> Screen[Any]:
    await pilot.press("slash")
    return await top(pilot, FilterScreen)


async def open_help(pilot: Pilot[None]) -> Screen[Any]:
    await pilot.press("question_mark")
    return await top(pilot, HelpScreen)


async def open_confirm(pilot: Pilot[None]) -> Screen[Any]:
    app = pilot.app
    assert isinstance(app, ConsoleApp) and app.snapshot is not None
    app.request_action(Action.CANCEL, [app.snapshot.pending[0]])
    return await top(pilot, ConfirmScreen)


async def open_requeue(pilot: Pilot[None]) -> Screen[Any]:
    """The requeue's confirmation, typed into its priority box (what is typed into its reason
    box is the "confirm" opener's case)."""
    app = pilot.app
    assert isinstance(app, ConsoleApp) and app.snapshot is not None
    app.request_action(Action.REQUEUE, [app.snapshot.pending[0]])
    screen = await top(pilot, ConfirmScreen)
    await pilot.pause()
    screen.query_one("#priority", Input).focus()
    return screen


async def open_pause(pilot: Pilot[None]) -> Screen[Any]:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    app.request_pause("payments")
    return await top(pilot, QueueConfirmScreen)


async def open_limit(pilot: Pilot[None]) -> Screen[Any]:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    app.request_limit("payments")
    return await top(pilot, LimitScreen)


async def open_queues(pilot: Pilot[None]) -> Screen[Any]:
    await pilot.press("Q")
    screen = await top(pilot, QueuesScreen)
    await wait_until_pilot(pilot, lambda: screen.reads >= 1, "its rows")  # type: ignore[attr-defined]
    return screen


async def open_queue(pilot: Pilot[None]) -> Screen[Any]:
    await open_queues(pilot)
    await pilot.press("enter")
    return await top(pilot, QueueScreen)


async def open_bulk(pilot: Pilot[None]) -> Screen[Any]:
    await open_results(pilot)
    await pilot.press("R")
    return await top(pilot, BulkConfirmScreen)


OPENERS: dict[str, Callable[[Pilot[None]], Awaitable[Screen[Any]]]] = {
    "main": open_main,
    "detail": open_detail,
    "find": open_find,
    "find results": open_results,
    "filter": open_filter,
    "help": open_help,
    "confirm": open_confirm,
    "requeue": open_requeue,
    "pause": open_pause,
    "limit": open_limit,
    "bulk": open_bulk,
    "queues": open_queues,
    "queue": open_queue,
}


async def back_to_main(pilot: Pilot[None]) -> None:
    app = pilot.app
    while len(app.screen_stack) > 1:
        app.pop_screen()
        await pilot.pause()


@pytest.mark.full  # every key on every screen: the longest console test (a sweep)
def test_every_printable_key_on_every_screen_runs_no_action_without_its_confirmation() -> None:
    """Each screen, every printable character typed on it: none changes a job or a queue (the
    source records every action), none quits; a key that opens a dialog opens a confirmation
    (or help, find, the filter, the palette), never an action."""
    app, source = static_app()

    async def run() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            if hasattr(app, "quit_guard"):  # q always asks (a slow moment is not a pause in
                app.quit_guard.typing_gap = 3600.0  # typing), and never answers another's
                app.quit_guard.ask_window = 0.0
            for name, opener in OPENERS.items():
                screen = await opener(pilot)
                for ch in PRINTABLE:
                    if app.screen is not screen:
                        await back_to_main(pilot)
                        screen = await opener(pilot)
                    await tap(pilot, ch)
                    assert source.calls == [], (name, ch, source.calls)
                    assert app.is_running and app.return_code is None, (name, ch)

                await back_to_main(pilot)

    asyncio.run(run())


@pytest.mark.full  # a random second net behind the fixed tests above
def test_random_keys_end_in_no_traceback() -> None:
    """Fixed-seed random keys (printable, navigation, confirm, quit), 400 in all: each console
    is alive at the end or has quit cleanly (then the next one takes the rest of the keys),
    never with an exception."""
    keys = [
        *PRINTABLE,
        *["enter", "escape", "tab", "shift+tab", "up", "down", "space", "backspace"] * 4,
        *["ctrl+y", "ctrl+r", "pagedown", "colon", "q"],
    ]
    rng = random.Random(37)
    left = 400

    async def run(app: ConsoleApp) -> None:
        nonlocal left
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            while left and app.is_running and app.return_code is None:
                left -= 1
                await tap(pilot, rng.choice(keys))

    apps = 0
    while left:
        app, _ = static_app()
        asyncio.run(run(app))
        apps += 1
        assert app._exception is None, app._exception  # (Textual keeps what ended the app)
        assert app.return_code in (None, 0)
    assert apps < 40  # most keys reached a running console


# -- quitting ------------------------------------------------------------------------------------


def test_q_quits_the_main_screen_but_asks_when_typed_or_elsewhere() -> None:
    app, _ = static_app()

    async def run() -> None:
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await open_detail(pilot)
            await pilot.press("q")  # not the main screen: asks
            assert app.is_running and isinstance(app.screen, DetailScreen)
            assert any("Press q again" in n.message for n in app._notifications)
            await pilot.press("q")  # again, soon: quits
            await wait_until_pilot(pilot, lambda: app.return_code is not None, "the quit")

    asyncio.run(run())
    assert app.return_code == 0


def test_ctrl_c_quits_from_a_text_box() -> None:
    """Textual's ctrl+c only said how to quit, in a pop-up showing its markup as text."""
    app, _ = static_app()

    async def run() -> None:
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await open_find(pilot)
            await pilot.press(*"queue:x", "ctrl+c")
            await wait_until_pilot(pilot, lambda: app.return_code is not None, "the quit")
            assert not any("[b]" in n.message for n in app._notifications)

    asyncio.run(run())
    assert app.return_code == 0


# -- keys act where they are pressed -------------------------------------------------------------


def test_a_row_is_highlighted_from_start_up_and_p_acts_from_every_screen() -> None:
    """At 160x48 the console started on an empty Processing panel: nothing was highlighted and
    `P` said to highlight a job though Pending listed them; on the find screen `P` did nothing."""
    from dataclasses import replace

    snap = replace(sample_snapshot(), processing=())
    source = StaticSource(snap, details={1042: sample_detail()}, found=sample_found())
    app = ConsoleApp(source, clock=lambda: 1000.0)

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await pilot.pause()
            assert app.main.active == 0  # Pending, the first panel with jobs
            await pilot.press("P")
            pause = await top(pilot, QueueConfirmScreen)
            assert isinstance(pause, QueueConfirmScreen)
            assert pause.queue == snap.pending[0].queue
            await pilot.press("escape")
            await open_detail(pilot)
            await pilot.press("P")
            pause = await top(pilot, QueueConfirmScreen)
            assert isinstance(pause, QueueConfirmScreen)
            assert pause.queue == sample_detail().job.queue
            await back_to_main(pilot)
            find = await open_find(pilot)
            assert isinstance(find, FindScreen)
            n = find.searches
            find.query_one("#find-input", Input).value = "queue:emails"
            await pilot.press("enter")
            await searched(pilot, find, n)
            await pilot.press("tab", "P")  # the filter's queue
            pause = await top(pilot, QueueConfirmScreen)
            assert isinstance(pause, QueueConfirmScreen) and pause.queue == "emails"
            await pilot.press("escape")
            await top(pilot, FindScreen)
            await pilot.press("r")  # requeue the highlighted found job, confirmed first
            confirm = await top(pilot, ConfirmScreen)
            assert isinstance(confirm, ConfirmScreen) and confirm.action is Action.REQUEUE

    asyncio.run(run())


# -- 80x24 ---------------------------------------------------------------------------------------


def test_a_notification_never_covers_a_dialogs_buttons_at_80x24() -> None:
    app, _ = static_app()

    async def run() -> None:
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            app.notify("a long notification " * 12, timeout=30)
            for opener in (open_confirm, open_pause, open_limit, open_bulk):
                screen = await opener(pilot)
                await pilot.pause()
                for button in screen.query(Button):
                    x, y = (int(c) for c in button.region.center)
                    widget, _ = app.screen.get_widget_at(x, y)
                    assert widget is button, (type(screen).__name__, button, widget)
                await back_to_main(pilot)

    asyncio.run(run())
