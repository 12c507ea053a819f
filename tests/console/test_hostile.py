"""Hostile text in every field the console shows, against a real PostgreSQL: the console shows it
as text. Markup never becomes an action, a link or a crash, escape sequences never reach the
terminal, and the text itself is there to read (escaped with ``literal.visible``).

The corpus (tests/hostile.py) is written with plain SQL, as a producer, a worker or an operator
could write it: queue names, payloads, errors, lease owners, worker ids, hostnames, worker
queues, audit actors, reasons and before/after values. Then the console is driven through every
panel, the job detail, filters typed and chosen, and guarded actions with hostile reasons, and
each time the rendered screen is walked segment by segment.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import cast

import psycopg
import pytest
from psycopg import conninfo, sql
from rich.cells import cell_len
from rich.segment import Segment
from textual import events
from textual.geometry import Region
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static
from textual.widgets._toast import Toast

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.confirm import ConfirmScreen
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.screens.filter import FilterScreen
from leasectl.console.source import DatabaseSource
from leasectl.console.widgets.tables import PanelTable
from leasectl.core.literal import visible
from leasectl.core.models import JobStatus, OwnerHealth, PanelJob
from leasectl.present.jsonout import terminal_safe_json
from tests.conftest import SCHEMA
from tests.hostile import CORPUS, NAMES, UNBOUNDED
from tests.util import wait_until_pilot

SIZE = (200, 60)
OSC = "\x1b]0;PWNED\x07"  # sets the terminal's title

# What must never reach the terminal: C0 controls (a tab is expanded to spaces before output),
# ESC, DEL, C1 controls (0x9b is a one-byte CSI), bidi overrides and isolates.
RAW = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200b-\u200f\u2028\u2029\ufeff]")

# Action meta that Textual's own widgets put on segments: the scrollbars'.
TEXTUAL = {("@mouse.down", action) for action in ("grab", "scroll_up", "scroll_down")}


@dataclass(frozen=True)
class Hostile:
    """The jobs seeded for one hostile name (their queue and lease owner, a worker's id,
    hostname and queue); ``text`` is their free text (payload, errors, reasons)."""

    name: str
    text: str
    pending: int
    live: int
    expired: int
    stuck: int


def seed_hostile(conn: psycopg.Connection) -> list[Hostile]:
    for statement in UNBOUNDED:
        conn.execute(statement)
    seeded = []
    for i, name in enumerate(NAMES):
        text = CORPUS[i]  # the corpus, the 100,000-character text included; NAMES is shorter
        payload = json.dumps({"text": text, name: [name, {"nested": text[:300]}]})
        conn.execute(
            "INSERT INTO leasectl.workers (worker_id, hostname, pid, queues, lease_ttl, "
            "heartbeat_every) VALUES (%s, %s, %s, %s, interval '1 hour', interval '10 minutes')",
            (name, name, 1000 + i, [name, text[:100]]),
        )
        ids = {}
        for kind, status, lease in (
            ("pending", "Pending", None),
            ("live", "Processing", "1 hour"),
            ("expired", "Processing", "-1 minute"),
            ("stuck", "Stuck", "-2 minutes"),
        ):
            row = conn.execute(
                "INSERT INTO leasectl.jobs (queue, payload, status, attempts, lease_owner, "
                "lease_until, heartbeat_at, last_error) VALUES (%s, %s::jsonb, %s, %s, %s, "
                "now() + %s::interval, now() - interval '5 seconds', %s) RETURNING id",
                (
                    name,
                    payload,
                    status,
                    0 if lease is None else 2,
                    None if lease is None else name,
                    lease,
                    None if kind == "live" else text,
                ),
            ).fetchone()
            assert row is not None
            ids[kind] = row[0]
            if lease is None:
                continue
            conn.execute(
                "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, "
                "heartbeat_at, ended_at, outcome, error, error_detail) VALUES "
                "(%(id)s, 1, %(name)s, now() - interval '1 hour', now() - interval '50 minutes', "
                " now() - interval '40 minutes', 'failed', %(text)s, left(%(text)s, 16384)), "
                "(%(id)s, 2, %(name)s, now() - interval '30 minutes', now(), NULL, 'running', "
                " NULL, NULL)",
                {"id": ids[kind], "name": name, "text": text},
            )
            conn.execute(
                "INSERT INTO leasectl.job_events (job_id, actor, action, reason, before, after) "
                "VALUES (%s, %s, 'mark_stuck', %s, %s::jsonb, %s::jsonb)",
                (
                    ids[kind],
                    name,
                    text,
                    json.dumps({"status": "Processing", "attempts": 1, "lease_owner": name}),
                    json.dumps({"status": "Stuck", "attempts": 2, "lease_owner": name + "'"}),
                ),
            )
        # What the expired lease's handler last reported (ctx.progress, migration 21).
        conn.execute(
            "UPDATE leasectl.jobs SET progress = 0.42, progress_message = %s, "
            "progress_attempt = attempts WHERE id = %s",
            (name, ids["expired"]),
        )
        seeded.append(Hostile(name, text, **ids))
    return seeded


# -- what the screen shows ------------------------------------------------------------------------


def check_segments(strips: Iterable[Strip | list[Segment]], where: str) -> str:
    """Assert that no segment acts (``@click`` and other action meta, links) or carries raw
    controls; return the plain text, one line per strip."""
    lines = []
    for strip in strips:
        line = []
        for segment in strip:
            text, style = segment.text, segment.style
            assert not RAW.search(text), f"{where}: raw control in {text!r}"
            if style is not None:
                assert not style.link, f"{where}: a link to {style.link!r} in {text!r}"
                meta = style.meta
                actions = [k for k in meta if k.startswith("@") and (k, meta[k]) not in TEXTUAL]
                assert not actions, f"{where}: {actions} {style.meta} on {text!r}"
            line.append(text)
        lines.append("".join(line))
    return "\n".join(lines)


def screen_text(app: ConsoleApp, where: str) -> str:
    """The whole screen as the terminal would get it (toasts and modal dialogs included)."""
    assert app.is_running, f"{where}: the console is no longer running"
    assert app._exception is None, f"{where}: {app._exception!r}"
    return check_segments(app.screen._compositor.render_strips(), where)


def widget_text(widget: Widget, where: str) -> str:
    """Every line of a widget, also those scrolled out of sight."""
    width, height = widget.outer_size  # with the border and padding
    return check_segments(widget.render_lines(Region(0, 0, width, height)), where)


def head(text: str, cells: int) -> str:
    """The start of ``text`` that fits in ``cells`` terminal cells."""
    out = ""
    for char in text:
        if cell_len(out + char) > cells:
            break
        out += char
    return out


def probe(text: str, limit: int = 12) -> str:
    """A verbatim piece of escaped text: its longest run of printable ASCII, cut to ``limit``.
    (Escapes are printable ASCII, so every visible() text has one.)"""
    runs = re.findall(r"[\x20-\x7e]+", text.split("\n")[0])
    longest = max(runs, key=len, default="").strip()
    return longest[:limit]


def word(text: str) -> str:
    """The first word of escaped text, cut to 10 characters: a table folds a cell's text into
    lines, but never within the first 10 characters of a word (its columns are wider)."""
    words = visible(text).split()
    return words[0][:10] if words else ""


def assert_shown(text: str, value: str, where: str, *, multiline: bool = False) -> None:
    piece = probe(visible(value, multiline=multiline))
    assert piece in text, f"{where}: {piece!r} (from {value[:80]!r}) not shown"


# -- driving the console ---------------------------------------------------------------------------

Scenario = Callable[[ConsoleApp, Pilot[None]], Awaitable[None]]


def drive(dsn: str, scenario: Scenario) -> None:
    source = DatabaseSource.connect(dsn, SCHEMA)
    app = ConsoleApp(source, refresh=timedelta(seconds=1))

    async def run() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.snapshot is not None, "the first refresh")
            await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")
            await scenario(app, pilot)
            screen_text(app, "the end")

    try:
        asyncio.run(run())  # an exception inside the app fails here too
    finally:
        source.close()


def table_of(app: ConsoleApp, panel: str) -> PanelTable[object]:
    return app.main.query_one(f"#{panel}", PanelTable)


async def show_row(pilot: Pilot[None], table: PanelTable[object], row: int) -> str:
    """Scroll ``row`` into sight and return its rendered line's text, walked."""
    table.move_cursor(row=row, animate=False)
    await pilot.pause()
    y = row - table.scroll_offset.y + 1  # below the header
    assert 1 <= y < table.size.height, f"row {row} is not in sight"
    return check_segments([table.render_line(y)], f"{table.id} row {row}")


def column_cells(table: PanelTable[object], key: str) -> int:
    """How many cells of a column's text are sure to be shown (one left for a cut mark)."""
    column = table.ordered_columns[table.get_column_index(key)]
    return column.get_render_width(table) - 2 * table.cell_padding - 1


def job_values(job: PanelJob, panel: str) -> dict[str, str]:
    values = {"queue": job.queue}
    if panel != "pending":
        values["owner"] = visible(job.lease_owner or "-")[:23]
    if panel == "stuck" and job.last_error:
        values["error"] = (job.last_error or "")[:200].replace("\n", " ")
    if panel == "stuck" and job.status == JobStatus.STUCK:
        # The quarantine's actor and reason (the audit event's), in the diagnosis.
        assert job.quarantined_by is not None and job.quarantine_reason is not None
        values["diagnosis"] = f"⊘ quarantined by {job.quarantined_by}: {job.quarantine_reason}"
    return values


def owner_values(owner: OwnerHealth) -> dict[str, str]:
    return {"owner": owner.owner, "queues": ", ".join(owner.queues)}


async def walk_panels(app: ConsoleApp, pilot: Pilot[None]) -> None:
    """Every row of every panel scrolled into sight: each shows its hostile values escaped."""
    for key, panel in (("1", "pending"), ("2", "processing"), ("3", "stuck"), ("4", "owners")):
        await pilot.press(key)
        table = table_of(app, panel)
        assert len(table.items) >= len(NAMES), panel
        for row in range(len(table.items)):
            line = await show_row(pilot, table, row)
            item = table.items[row]
            values = (
                owner_values(item)
                if isinstance(item, OwnerHealth)
                else job_values(cast(PanelJob, item), panel)
            )
            for column, value in values.items():
                shown = head(visible(value), column_cells(table, column))
                assert shown in line, f"{panel} row {row} {column}: {shown!r} not in {line!r}"
            if row % 10 == 0:
                screen_text(app, f"{panel} at row {row}")


# -- the tests -----------------------------------------------------------------------------------


def test_every_panel_shows_hostile_text_as_text(db_dsn: str, sql_conn: psycopg.Connection) -> None:
    seed_hostile(sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await walk_panels(app, pilot)

    drive(db_dsn, scenario)


async def open_detail(app: ConsoleApp, pilot: Pilot[None], job_id: int) -> DetailScreen:
    app.open_detail(job_id)

    def loaded() -> bool:
        screen = app.screen
        return isinstance(screen, DetailScreen) and screen.job_id == job_id and bool(screen.detail)

    await wait_until_pilot(pilot, loaded, f"the detail of job #{job_id}")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, DetailScreen)
    return screen


async def click_every(app: ConsoleApp, pilot: Pilot[None], text: str) -> None:
    """Click ``text`` wherever the screen shows it: nothing happens (it would quit the console,
    or write a screenshot, were it markup)."""
    screen = app.screen
    lines = screen_text(app, "before the clicks").split("\n")
    spots = [
        (cell_len(line[: line.index(text)]), y) for y, line in enumerate(lines) if text in line
    ]
    assert spots, f"{text!r} is not on the screen"
    for x, y in spots:
        assert await pilot.click(offset=(x + 1, y))
        await pilot.pause()
        assert app.is_running and app.screen is screen, f"a click at {x + 1},{y} acted"


@pytest.mark.full  # the fast tier keeps the panels' test
def test_job_detail_shows_hostile_text_as_text(
    db_dsn: str, sql_conn: psycopg.Connection, tmp_path: Path
) -> None:
    seeded = seed_hostile(sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        for h in seeded:  # the expired lease: every field, an attempt and an audit event
            where = f"detail of #{h.expired} ({h.name[:40]!r})"
            screen = await open_detail(app, pilot, h.expired)
            screen_text(app, where)
            title = widget_text(screen.query_one("#detail-title", Static), where)
            assert head(visible(h.name), 20) in title, where
            body = widget_text(screen.query_one("#detail-content", Static), where)
            # The queue, the lease owner, the attempts' owners, the event's actor and the
            # owners before and after in its change.
            assert body.count(word(h.name)) >= 7, f"{where}: {word(h.name)!r}"
            assert_shown(body, h.text, f"{where}: last error", multiline=True)
            # The payload as `inspect` shows it: its JSON text, escaped as --json escapes it.
            payload = terminal_safe_json(json.dumps(h.text, ensure_ascii=False))
            assert_shown(body, payload, f"{where}: payload")
            # The attempt's error, its traceback and the event's reason, besides the last error.
            assert body.count(word(h.text)) >= 4, f"{where}: {word(h.text)!r}"
            assert "traceback of attempt 1 (failed)" in body, where
            # The handler's progress message, as text, after its percentage.
            progress = body.split("progress", 1)[1]
            assert progress.lstrip().startswith("42%"), where
            assert word(h.name) in progress.split("\n", 1)[0] or not word(h.name), where
            if h.name == "[@click=app.quit]CLICK[/]":
                app.save_screenshot(path=str(tmp_path), filename="hostile-detail.svg")
                await click_every(app, pilot, "CLICK")
            # The next one opens over this one: going back to the main screen each time would
            # redraw its panels and poll, for nothing this test looks at.
        svg = (tmp_path / "hostile-detail.svg").read_text()
        assert "\x1b" not in svg and "CLICK" in svg

    drive(db_dsn, scenario)


def owners_row(table: PanelTable[object], owner: str) -> int:
    keys = [table.key_of(item) for item in table.items]
    assert owner in keys, f"no row of {owner!r} in the Owners panel: {keys}"
    return keys.index(owner)


async def filter_by_typing(app: ConsoleApp, pilot: Pilot[None], text: str) -> None:
    await pilot.press("slash")
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, FilterScreen), "the filter dialog")
    screen_text(app, "the filter dialog")
    app.screen.query_one("#filter-input", Input).value = text
    await pilot.press("enter")
    await wait_until_pilot(pilot, lambda: not app.paused, "the main screen")


def toasts(app: ConsoleApp) -> str:
    """The notifications in sight, walked, each one's lines joined again."""
    shown = []
    for toast in app.screen.query(Toast):
        text = widget_text(toast, "a notification")
        lines = [line.strip("▌ ") for line in text.split("\n")]  # its border and padding
        shown += [" ".join(lines), "".join(lines)]  # wrapped at a space, or folded
    return "\n".join(shown)


async def toast_shown(app: ConsoleApp, pilot: Pilot[None], text: str) -> None:
    try:
        await wait_until_pilot(
            pilot, lambda: text in toasts(app), f"a notification saying {text!r}"
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; shown: {toasts(app)!r}") from None
    screen_text(app, f"notification {text!r}")


async def refreshed(app: ConsoleApp, pilot: Pilot[None]) -> None:
    polls = app.polls
    await wait_until_pilot(pilot, lambda: app.polls >= polls + 2, "a refresh with the filter")
    await pilot.pause()


@pytest.mark.full  # the fast tier keeps the panels' test
def test_hostile_filters_typed_and_chosen(db_dsn: str, sql_conn: psycopg.Connection) -> None:
    seeded = seed_hostile(sql_conn)
    by_name = {h.name: h for h in seeded}
    osc = OSC

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        # Typed: the queue named `[/]`. The notification, the summary and the panel show it.
        await filter_by_typing(app, pilot, "queue:[/]")
        assert app.filter.queue == "[/]"
        await toast_shown(app, pilot, "filter: queue:[/]")
        await refreshed(app, pilot)
        assert "filter  queue:[/]" in screen_text(app, "filter queue:[/]")
        pending = table_of(app, "pending")
        assert list(map(pending.key_of, pending.items)) == [str(by_name["[/]"].pending)]
        # Typed: an owner prefix that is markup.
        await filter_by_typing(app, pilot, "owner:[@click=app.quit]CLICK[/]")
        assert app.filter.owner == "[@click=app.quit]CLICK[/]"
        await toast_shown(app, pilot, "filter: owner:[@click=app.quit]CLICK[/]")
        await refreshed(app, pilot)
        await filter_by_typing(app, pilot, "")
        assert app.filter.empty
        await refreshed(app, pilot)
        # Chosen: enter on Owners rows, one markup, one an escape sequence.
        for name in ("[/]", osc):
            if not app.filter.empty:
                await filter_by_typing(app, pilot, "")
                await refreshed(app, pilot)
            await pilot.press("4")
            owners = table_of(app, "owners")
            row = owners_row(owners, name)
            await show_row(pilot, owners, row)
            await pilot.press("enter")
            assert app.filter.owner == name
            await toast_shown(app, pilot, f"filter: owner:{visible(name)}")
            await refreshed(app, pilot)
            processing = table_of(app, "processing")
            assert str(by_name[name].live) in map(processing.key_of, processing.items)
        # The filter dialog shows the escaped filter; submitted as it is, it keeps the filter.
        await pilot.press("slash")
        await wait_until_pilot(
            pilot, lambda: isinstance(app.screen, FilterScreen), "the filter dialog"
        )
        field = app.screen.query_one("#filter-input", Input)
        assert field.value == f"owner:{visible(osc)}"
        screen_text(app, "the filter dialog with an escaped owner")
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: not app.paused, "the main screen")
        assert app.filter.owner == osc
        # A paste (from a log, a web page) is escaped too.
        await pilot.press("slash")
        await wait_until_pilot(
            pilot, lambda: isinstance(app.screen, FilterScreen), "the filter dialog"
        )
        field = app.screen.query_one("#filter-input", Input)
        field.value = ""
        field.post_message(events.Paste(f"{osc}pasted\nsecond line"))
        await wait_until_pilot(pilot, lambda: field.value, "the paste")
        assert field.value == visible(f"{osc}pasted")
        assert field.cursor_position == len(field.value)  # after the paste, as shown
        screen_text(app, "the filter dialog with a paste")
        await pilot.press("escape")

    drive(db_dsn, scenario)


async def act(
    app: ConsoleApp, pilot: Pilot[None], key: str, job: Hostile, reason: str, result: str
) -> None:
    """Press an action key on the highlighted job of ``job``, give a reason, and see the
    result's notification say ``result``."""
    await pilot.press(key)
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
    await pilot.pause()
    listed = widget_text(app.screen.query_one("#confirm-jobs", Static), "the confirmation")
    assert head(visible(job.name), 20) in listed
    app.screen.query_one("#reason", Input).value = reason
    await pilot.pause()
    assert reason in screen_text(app, "the reason typed")
    await pilot.press("ctrl+y")
    await toast_shown(app, pilot, result)


async def highlight(app: ConsoleApp, pilot: Pilot[None], panel: str, job_id: int) -> None:
    await pilot.press({"pending": "1", "processing": "2", "stuck": "3"}[panel])
    table = table_of(app, panel)
    await wait_until_pilot(pilot, lambda: str(job_id) in map(table.key_of, table.items), "the row")
    await show_row(pilot, table, [table.key_of(i) for i in table.items].index(str(job_id)))
    screen_text(app, f"#{job_id} highlighted")


def reasons(conn: psycopg.Connection, job_id: int) -> list[str]:
    rows = conn.execute(
        "SELECT reason FROM leasectl.job_events WHERE job_id = %s AND actor LIKE 'operator:%%' "
        "ORDER BY id",
        (job_id,),
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.full  # the fast tier keeps the panels' test
def test_actions_with_hostile_reasons_and_owners(db_dsn: str, sql_conn: psycopg.Connection) -> None:
    seeded = seed_hostile(sql_conn)
    by_name = {h.name: h for h in seeded}
    clicker = "[@click=app.quit]CLICK[/]"
    osc = OSC

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        # Requeue a Stuck job with the reason `[/]`; the audit event then shows it.
        oom = by_name["OOM [prod]"]
        stuck = oom.stuck
        await highlight(app, pilot, "stuck", stuck)
        await act(app, pilot, "r", oom, "[/]", "Requeue: 1 of 1 requeued")
        screen = await open_detail(app, pilot, stuck)
        body = widget_text(screen.query_one("#detail-content", Static), "requeued detail")
        assert "[/]" in body.rsplit("\nevents", 1)[1]  # below the events table's title
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: not app.paused, "the main screen")
        # Mark a Pending job stuck with a reason that is a click action.
        unclosed = by_name["[b]unclosed"]
        await highlight(app, pilot, "pending", unclosed.pending)
        await act(app, pilot, "s", unclosed, f"{clicker}X[/]", "Mark stuck: 1 of 1 marked stuck")
        # Requeue live leases: skipped, and the reason names the owner, shown as text.
        for name in (clicker, osc):
            await highlight(app, pilot, "processing", by_name[name].live)
            await act(app, pilot, "r", by_name[name], clicker, f"held by {visible(name)} until")

    drive(db_dsn, scenario)
    assert reasons(sql_conn, by_name["OOM [prod]"].stuck) == ["[/]"]
    assert reasons(sql_conn, by_name["[b]unclosed"].pending) == [f"{clicker}X[/]"]
    assert reasons(sql_conn, by_name[clicker].live) == []


@pytest.fixture
def hostile_db_dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    """A fresh leasectl database whose name is markup and an escape sequence."""
    name = f"[/]{OSC}{uuid.uuid4().hex[:8]}"
    admin = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(admin.format(sql.Identifier(name), sql.Identifier(template_db)))
    try:
        yield conninfo.make_conninfo(server_dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def test_hostile_database_name_and_queue_option(hostile_db_dsn: str) -> None:
    """The status bar names the database; `tui --queue` shows the queue in the summary."""
    queue = "\x1b[2J\x1b[H[/]"
    with psycopg.connect(hostile_db_dsn, autocommit=True) as conn:
        seed_hostile(conn)
    source = DatabaseSource.connect(hostile_db_dsn, SCHEMA)
    app = ConsoleApp(source, refresh=timedelta(seconds=1), queue=queue)

    async def run() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_until_pilot(pilot, lambda: app.snapshot is not None, "the first refresh")
            await pilot.pause()
            text = screen_text(app, "the main screen")
            assert f"/[/]{visible(OSC)}" in text, "the database name"
            assert f"queue:{visible(queue)}" in text, "the queue filter"
            assert RAW.search(app.sub_title) is None

    try:
        asyncio.run(run())
    finally:
        source.close()
