"""The Failed panel and the find screen: their filter words, keyset paging, the detail screen,
hostile text (against real PostgreSQL), and a search that runs out of time or is cancelled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

import psycopg
import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Static

from leasectl.console import view
from leasectl.console.app import ConsoleApp
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.screens.find import FindScreen
from leasectl.console.source import DatabaseSource, StaticSource
from leasectl.console.widgets.tables import FailedTable, FindTable, PanelTable
from leasectl.core import filters
from leasectl.core.errors import UsageError
from leasectl.core.literal import visible
from leasectl.core.models import JobStatus
from tests.conftest import SCHEMA
from tests.console.sample import sample_detail, sample_found, sample_snapshot
from tests.console.test_hostile import (
    column_cells,
    head,
    screen_text,
    show_row,
    widget_text,
)
from tests.hostile import CORPUS, NAMES, UNBOUNDED
from tests.util import wait_for_lock_wait, wait_until_pilot

# -- the filter words ---------------------------------------------------------------------------


def test_find_words_are_list_options() -> None:
    """Each word is the `leasectl list` option of the same name, parsed by the same function."""
    flt = view.parse_find(
        'state:failed,stuck queue:payments error:"gateway  timeout" '
        'payload:{"invoice": 42, "tags": ["a b", "}"]} since:1h until:5m owner:w-1'
    )
    assert flt == filters.parse_filter(
        states=["failed,stuck"],
        queue="payments",
        error="gateway  timeout",
        payload='{"invoice": 42, "tags": ["a b", "}"]}',
        since="1h",
        until="5m",
        owner="w-1",
    )
    assert view.parse_find("state:failed state:Stuck").states == {
        JobStatus.FAILED,
        JobStatus.STUCK,
    }
    assert view.parse_find("   ") == filters.JobFilter()
    assert view.parse_find(r'error:"say \"hi\" \\ bye"').error == 'say "hi" \\ bye'
    # The words a filter is shown with parse back to the same filter.
    for text in ('error:"a b" queue:q state:failed since:2h', 'payload:{"k": [1, 2]}'):
        flt = view.parse_find(text)
        assert view.parse_find(view.find_text(flt)) == flt


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("payments", "'payments': use word:value"),
        ("colour:red", "unknown word 'colour'"),
        ("queue: payments", "queue: needs a value"),
        ("queue:a queue:b", "queue: given twice"),
        ('error:"open', "error: the quote is not closed"),
        ('payload:{"a": 1', "payload: the JSON is not closed"),
        ("state:done", "invalid --state 'done'"),
        ("since:soon", "invalid --since 'soon'"),
        ("payload:[1,", "payload: the JSON is not closed"),
        ("payload:{nope}", "--payload"),
        ("since:1h until:2h", "must be more recent than --since"),
        ("bad\x1b]0;PWNED\x07:x", "use word:value"),
    ],
)
def test_find_words_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises((view.FilterError, UsageError)) as err:
        view.parse_find(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


# -- driving the console ----------------------------------------------------------------------

Scenario = Callable[[ConsoleApp, Pilot[None]], Awaitable[None]]


def run_app(app: ConsoleApp, scenario: Scenario, size: tuple[int, int] = (160, 48)) -> None:
    async def run() -> None:
        async with app.run_test(size=size, notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.snapshot is not None, "the first refresh")
            await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")
            await scenario(app, pilot)
            screen_text(app, "the end")

    asyncio.run(run())


def static_app() -> ConsoleApp:
    source = StaticSource(sample_snapshot(), details={1042: sample_detail()}, found=sample_found())
    return ConsoleApp(source, clock=lambda: 1000.0)


def as_panel(table: FailedTable | FindTable) -> PanelTable[object]:
    return cast("PanelTable[object]", table)


def find_screen(app: ConsoleApp) -> FindScreen:
    screen = app.screen
    assert isinstance(screen, FindScreen), f"{screen!r} is not the find screen"
    return screen


async def search(app: ConsoleApp, pilot: Pilot[None], text: str) -> FindScreen:
    """Open the find screen (unless open), type ``text`` and wait for its answer."""
    if not isinstance(app.screen, FindScreen):
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "find")
    screen = find_screen(app)
    field = screen.query_one("#find-input", Input)
    field.focus()
    field.value = text
    before = screen.searches
    await pilot.press("enter")
    await wait_until_pilot(
        pilot, lambda: screen.searches > before and not screen.running, f"the search {text!r}"
    )
    return screen


def shown_ids(screen: FindScreen) -> list[int]:
    return [j.id for j in screen.query_one(FindTable).items]


async def page_to(pilot: Pilot[None], screen: FindScreen, key: str) -> None:
    before = screen.searches
    await pilot.press(key)
    await wait_until_pilot(
        pilot, lambda: screen.searches > before and not screen.running, f"page {key}"
    )


def test_find_pages_with_keyset_and_opens_the_detail() -> None:
    found = sample_found()
    failed = [j.id for j in found if j.status == JobStatus.FAILED]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await search(app, pilot, "")
        assert shown_ids(screen) == [j.id for j in found[:50]]
        # The filter box keeps the focus (typing refines it); tab to the results: n, p page.
        assert isinstance(app.focused, Input)
        await pilot.press("tab")
        assert isinstance(app.focused, FindTable)
        await page_to(pilot, screen, "n")
        assert shown_ids(screen) == [j.id for j in found[50:100]]
        await page_to(pilot, screen, "n")
        assert shown_ids(screen) == [j.id for j in found[100:]]
        assert screen.page is not None and screen.page.next_after is None
        await pilot.press("n")  # the last page: nothing to read
        await pilot.pause()
        assert shown_ids(screen) == [j.id for j in found[100:]]
        await page_to(pilot, screen, "p")
        assert shown_ids(screen) == [j.id for j in found[50:100]]
        assert "page 2: 50 jobs" in widget_text(screen.query_one("#find-status"), "status")
        await page_to(pilot, screen, "p")
        assert shown_ids(screen) == [j.id for j in found[:50]]
        # A new filter starts again from the first page.
        screen = await search(app, pilot, "state:failed")
        assert shown_ids(screen) == failed
        assert screen.afters == [None]
        # enter opens the highlighted job's detail; esc comes back to the same page.
        screen.query_one(FindTable).focus()
        await pilot.press("down", "enter")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, DetailScreen), "detail")
        detail = app.screen
        assert isinstance(detail, DetailScreen) and detail.job_id == failed[1]
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: app.screen is screen, "back to the results")
        assert shown_ids(screen) == failed
        # esc closes; the next f starts from the filter last typed.
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: not isinstance(app.screen, FindScreen), "closed")
        assert app.find_text == "state:failed"
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "again")
        assert find_screen(app).query_one("#find-input", Input).value == "state:failed"

    run_app(static_app(), scenario)


def test_a_bad_filter_is_one_line_in_the_dialog_and_reads_nothing() -> None:
    calls: list[object] = []

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        original = app.source.find

        def find(*args: Any) -> Any:
            calls.append(args)
            return original(*args)

        app.source.find = find  # type: ignore[method-assign,assignment]
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "find")
        screen = find_screen(app)
        field = screen.query_one("#find-input", Input)
        field.value = "state:failed since:soon\x1b[2J"
        await pilot.press("enter")
        error = screen.query_one("#find-error", Static)
        await wait_until_pilot(pilot, lambda: error.has_class("-shown"), "the error line")
        text = widget_text(error, "the error line")
        assert "invalid --since" in text and "\n" not in text.strip()
        assert calls == [] and isinstance(app.screen, FindScreen)

    run_app(static_app(), scenario)


def test_failed_panel_key_5_tab_and_enter() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("5")
        table = app.main.query_one("#failed", FailedTable)
        assert app.main.active == 4 and app.focused is table
        assert [j.id for j in table.items] == [1019, 1003, 996, 940]
        line = await show_row(pilot, as_panel(table), 0)
        assert "TimeoutError" in line and "card network timeout after 20s" in line
        assert "Traceback" not in line  # the first line only
        await pilot.press("tab")
        assert app.main.active == 0  # tab cycles through the five panels
        await pilot.press("shift+tab")
        assert app.main.active == 4
        await pilot.press("down", "enter")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, DetailScreen), "detail")
        assert isinstance(app.screen, DetailScreen) and app.screen.job_id == 1003

    run_app(static_app(), scenario)


def test_error_parts() -> None:
    assert view.error_parts("ValueError: bad\nTraceback") == ("ValueError", "bad")
    assert view.error_parts("a.b.C_d: x: y") == ("a.b.C_d", "x: y")
    assert view.error_parts("killed (exit 137)") == ("", "killed (exit 137)")
    assert view.error_parts("[red]X[/]: y") == ("", "[red]X[/]: y")
    assert view.error_parts(None) == ("", "")
    assert view.cut("abcdef", 4) == "abc…" and view.cut("abc", 4) == "abc"


# -- against PostgreSQL ---------------------------------------------------------------------------


def seed_failed(conn: psycopg.Connection) -> list[tuple[int, str, str]]:
    """A Failed job for each hostile name: its queue and owner, an error ``Name: TEXT``
    (hostile class and text), a payload holding both; (id, name, error)."""
    for statement in UNBOUNDED:
        conn.execute(statement)
    seeded = []
    for i, name in enumerate(NAMES):
        text = CORPUS[i]
        error = f"{name}: {text}" if i % 2 else text
        row = conn.execute(
            "INSERT INTO leasectl.jobs (queue, payload, status, attempts, lease_owner, "
            "last_error, finished_at) VALUES (%s, %s::jsonb, 'Failed', 3, %s, %s, "
            "now() - make_interval(secs => %s)) RETURNING id",
            (name, json.dumps({"text": text[:500], name: name}), name, error, i),
        ).fetchone()
        assert row is not None
        seeded.append((row[0], name, error))
    return seeded


def db_app(dsn: str, find_timeout: timedelta = filters.DEFAULT_TIMEOUT) -> ConsoleApp:
    source = DatabaseSource(dsn, SCHEMA, find_timeout=find_timeout)
    return ConsoleApp(source, refresh=timedelta(seconds=1))


def test_failed_panel_and_find_show_hostile_text_as_text(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_failed(sql_conn)
    by_id = {job_id: (name, error) for job_id, name, error in seeded}

    def check(line: str, table: FailedTable | FindTable, job_id: int, where: str) -> None:
        name, error = by_id[job_id]
        klass, first = view.error_parts(error)
        if isinstance(table, FailedTable):
            expected = {"queue": name, "error": first, "class": klass}
        else:
            expected = {"queue": name, "error": f"{klass}: {first}" if klass else first}
        for column, value in expected.items():
            if column not in table.shown_columns or not value:
                continue
            shown = head(visible(value), column_cells(as_panel(table), column))
            assert shown in line, f"{where} #{job_id} {column}: {shown!r} not in {line!r}"

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("5")
        table = app.main.query_one("#failed", FailedTable)
        await wait_until_pilot(pilot, lambda: len(table.items) == len(NAMES), "the Failed rows")
        assert [j.id for j in table.items] == [i for i, _, _ in seeded]  # newest first
        for row in range(len(table.items)):
            line = await show_row(pilot, as_panel(table), row)
            check(line, table, table.items[row].id, "Failed panel")
        screen_text(app, "the Failed panel")
        screen = await search(app, pilot, "state:failed")
        results = screen.query_one(FindTable)
        listed: list[int] = []
        while True:
            for row in range(len(results.items)):
                line = await show_row(pilot, as_panel(results), row)
                check(line, results, results.items[row].id, "find")
            listed += shown_ids(screen)
            screen_text(app, f"find page {len(screen.afters)}")
            if screen.page is None or screen.page.next_after is None:
                break
            await page_to(pilot, screen, "n")
        assert listed == sorted(by_id, reverse=True)  # newest first: ids descending
        # A hostile filter: shown literally in the status line, matched literally.
        screen = await search(app, pilot, f'queue:"{NAMES[3]}"')
        assert shown_ids(screen) == [seeded[3][0]]
        assert visible(NAMES[3])[:20] in screen_text(app, "a hostile queue filter")

    run_app(db_app(db_dsn), scenario, size=(200, 60))


def test_a_search_that_runs_out_of_time_says_narrow_it(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    """A search is bounded by the statement timeout (here the jobs table is locked, as a scan
    that took too long would be); it says to narrow the filter, and the console stays live.
    esc cancels a search that is still running: its answer is dropped."""
    seed_failed(sql_conn)
    locker = psycopg.connect(db_dsn, autocommit=True)
    watcher = psycopg.connect(db_dsn, autocommit=True)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "find")
        screen = find_screen(app)
        with locker.transaction():
            locker.execute("LOCK TABLE leasectl.jobs IN ACCESS EXCLUSIVE MODE")
            screen.query_one("#find-input", Input).value = "state:failed error:zzz"
            await pilot.press("enter")
            assert screen.running
            await asyncio.to_thread(wait_for_lock_wait, watcher, what="the search")
            # The UI answers while the search waits: a key types into the filter.
            field = screen.query_one("#find-input", Input)
            await pilot.press("x")
            await wait_until_pilot(pilot, lambda: field.value.endswith("x"), "a key")
            assert screen.running
            await pilot.press("backspace")
            error = screen.query_one("#find-error", Static)
            # (Shown, then laid out: until the next layout it has no size, and no lines.)
            await wait_until_pilot(
                pilot,
                lambda: error.has_class("-shown") and widget_text(error, "the timeout") != "",
                "the timeout",
            )
            text = widget_text(error, "the timeout")
            assert "the filter had to scan; narrow it (since:, queue:, state:)" in text
            assert not screen.running and shown_ids(screen) == []
            # Cancelled: the search still waits on the lock; esc drops its answer.
            await pilot.press("enter")
            await asyncio.to_thread(wait_for_lock_wait, watcher, what="the second search")
            assert screen.running
            await pilot.press("escape")
            assert not screen.running and isinstance(app.screen, FindScreen)
            cancelled = screen.searches
        # The lock is gone: the cancelled search's statement finishes (or times out); its
        # answer is not shown. A new search shows its own.
        screen = await search(app, pilot, "state:failed")
        assert screen.searches == cancelled + 1 and len(shown_ids(screen)) == len(NAMES)

    try:
        # (3 s: the UI's answers to two keys, on a loaded machine, come before the timeout.)
        run_app(db_app(db_dsn, find_timeout=timedelta(seconds=3)), scenario)
    finally:
        locker.close()
        watcher.close()
