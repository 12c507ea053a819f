"""Paused queues in the console, against a real PostgreSQL: the summary says which queues are
paused (literally), and P pauses or resumes the highlighted job's queue through the audited
functions, with a confirmation that fits the smallest terminal."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import timedelta

import psycopg
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.confirm import QueueConfirmScreen
from leasectl.console.source import StaticSource
from leasectl.console.widgets.bars import paused_text
from leasectl.console.widgets.tables import PendingTable
from leasectl.core.literal import visible
from leasectl.core.models import PausedQueue
from tests.console.sample import sample_snapshot
from tests.console.test_console_db import drive, highlight, no_confirmation_after
from tests.seed import seed_console
from tests.stores import Stores
from tests.util import wait_until_pilot

HOSTILE_QUEUE = "pay[bold]ments[/]\x1b]0;PWNED\x07"
HOSTILE_REASON = "card [@click=app.quit]processor[/] down\nINC-9 \x1b[2J"


def summary(app: ConsoleApp) -> str:
    return str(app.main.query_one("#counts", Static).render())


def queue_events(conn: psycopg.Connection, queue: str) -> list[tuple[str, str | None, str]]:
    rows = conn.execute(
        "SELECT action, reason, actor FROM leasectl.queue_events WHERE queue = %s ORDER BY id",
        (queue,),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def paused_queues(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT queue FROM leasectl.queue_state ORDER BY queue")]


async def press_p(app: ConsoleApp, pilot: Pilot[None]) -> QueueConfirmScreen:
    await pilot.press("P")
    await wait_until_pilot(
        pilot, lambda: isinstance(app.screen, QueueConfirmScreen), "the confirmation"
    )
    assert isinstance(app.screen, QueueConfirmScreen)
    return app.screen


def test_summary_shows_the_paused_queues_literally(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_console(store, sql_conn)
    store.ops.pause(HOSTILE_QUEUE, actor="alice [red]", reason=HOSTILE_REASON)
    store.ops.pause("emails", actor="bob", reason="mail relay down")
    store.ops.pause("zeta", actor="carol", reason="x" * 1000)
    store.ops.pause("zz-four", actor="dan", reason="the fourth")

    def paused_line(app: ConsoleApp) -> str:
        [line] = [line for line in summary(app).splitlines() if line.startswith("⏸ paused: ")]
        assert "\x1b" not in summary(app)
        return line

    async def narrow(app: ConsoleApp, pilot: Pilot[None]) -> None:
        snap = app.snapshot
        assert snap is not None and snap.paused_total == 4
        assert [p.queue for p in snap.paused] == ["emails", HOSTILE_QUEUE, "zeta", "zz-four"]
        line = paused_line(app)
        # Reasons dropped before a queue is cut off; then cut with "…" to the summary's width.
        assert re.search(r"^⏸ paused: emails \(since \d+s, by bob\), ", line)
        assert visible(HOSTILE_QUEUE) in line
        assert line.endswith("…") and len(line) <= app.main.query_one("#counts").size.width

    async def wide(app: ConsoleApp, pilot: Pilot[None]) -> None:
        line = paused_line(app)
        assert visible(HOSTILE_QUEUE) in line and "by alice [red]: " in line
        assert ': "' + visible(HOSTILE_REASON) + '")' in line
        # Three queues named, each reason cut, then how many more.
        assert 'by carol: "' + "x" * 79 + '…")' in line and "zz-four" not in line
        assert line.endswith(", and 1 more")

    drive(db_dsn, narrow, size=(160, 48))
    drive(db_dsn, wide, size=(400, 48))


def test_paused_line_cuts_reasons_before_queues() -> None:
    data = sample_snapshot()
    paused = (
        PausedQueue("emails", data.db_now - timedelta(minutes=4), "alice", "relay down " * 10),
        PausedQueue("payments", data.db_now, "bob", "card processor down"),
    )
    snap = replace(data, paused=paused, paused_total=2)
    wide = paused_text(snap, data.db_now, 400)
    assert wide is not None
    assert wide.plain == (
        '⏸ paused: emails (since 4m00s, by alice: "' + ("relay down " * 10)[:79] + '…"), '
        'payments (since 0s, by bob: "card processor down")'
    )
    narrow = paused_text(snap, data.db_now, 120)
    assert narrow is not None and narrow.plain == (
        '⏸ paused: emails (since 4m00s, by alice: "relay down relay do…"), '
        'payments (since 0s, by bob: "card processor down")'
    )
    narrower = paused_text(snap, data.db_now, 90)
    assert narrower is not None
    assert narrower.plain == "⏸ paused: emails (since 4m00s, by alice), payments (since 0s, by bob)"
    tiny = paused_text(snap, data.db_now, 50)
    assert tiny is not None and tiny.cell_len <= 50
    assert tiny.plain == "⏸ paused: emails (since 4m00s, by alice), payment…"
    assert paused_text(replace(data, paused=(), paused_total=0), data.db_now, 80) is None


def test_no_paused_line_when_nothing_is_paused(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_console(store, sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        assert app.snapshot is not None and app.snapshot.paused_total == 0
        assert "paused" not in summary(app)

    drive(db_dsn, scenario)


def test_p_pauses_the_highlighted_jobs_queue_with_a_reason(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", seeded.pending[0])
        screen = await press_p(app, pilot)
        assert not screen.resuming
        await pilot.press("ctrl+y")  # no reason: refused, the dialog stays
        await pilot.pause()
        assert app.screen is screen
        assert "reason is required" in str(screen.query_one("#confirm-error", Static).render())
        screen.query_one("#reason", Input).value = "card processor down"
        await pilot.press("ctrl+y")
        await wait_until_pilot(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.paused_total == 1,
            "the pause in the summary",
        )
        assert any("Paused queue payments" in n.message for n in app._notifications)
        await wait_until_pilot(pilot, lambda: "⏸ paused: payments" in summary(app), "the line")

    drive(db_dsn, scenario)
    assert paused_queues(sql_conn) == ["payments"]
    [(action, reason, actor)] = queue_events(sql_conn, "payments")
    assert (action, reason) == ("pause", "card processor down")
    assert actor.startswith("operator:")


def test_p_on_a_paused_queues_row_resumes_it(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    store.ops.pause("payments", actor="alice", reason="card processor down")

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", seeded.pending[0])
        screen = await press_p(app, pilot)
        assert screen.resuming
        body = str(screen.query_one("#confirm-condition", Static).render())
        assert 'by alice: "card processor down"' in body
        await pilot.press("ctrl+y")  # a resume needs no reason
        await wait_until_pilot(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.paused_total == 0,
            "the resume",
        )
        assert any("Resumed queue payments" in n.message for n in app._notifications)
        assert "paused" not in summary(app)

    drive(db_dsn, scenario)
    assert paused_queues(sql_conn) == []
    events = queue_events(sql_conn, "payments")
    assert [(a, r) for a, r, _ in events] == [("pause", "card processor down"), ("resume", None)]
    assert events[1][2].startswith("operator:")


def test_p_is_refused_read_only(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_console(store, sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", seeded.pending[0])
        await no_confirmation_after(pilot, "P")
        assert not any(isinstance(s, QueueConfirmScreen) for s in app.screen_stack)
        # Even a request that gets past the key is refused.
        app.clear_notifications()  # (the keys' own refusals: not the request's)
        app.request_pause("payments")
        await pilot.pause()  # (a notification is a message: shown once processed)
        assert not isinstance(app.screen, QueueConfirmScreen)
        assert any("Refused: pause or resume" in n.message for n in app._notifications)

    drive(db_dsn, scenario, read_only=True)
    assert paused_queues(sql_conn) == [] and queue_events(sql_conn, "payments") == []


def test_queue_confirmation_fits_80x24() -> None:
    """The smallest supported terminal: the reason field and the buttons in sight, for a pause
    and for a resume of a queue paused with a long hostile reason."""
    data = sample_snapshot()
    for paused in ((), (PausedQueue("payments", data.db_now, "alice", HOSTILE_REASON * 20),)):
        source = StaticSource(replace(data, paused=paused, paused_total=len(paused)))
        app = ConsoleApp(source, clock=lambda: 1000.0)

        async def run(app: ConsoleApp = app) -> None:
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
                await wait_until_pilot(pilot, lambda: app.privileges_checked, "the check")
                app.request_pause("payments")
                await wait_until_pilot(
                    pilot, lambda: isinstance(app.screen, QueueConfirmScreen), "the dialog"
                )
                await pilot.pause()
                screen = app.screen
                whole = screen.region
                for widget in (
                    screen.query_one("#reason", Input),
                    screen.query_one("#confirm-ok", Button),
                    screen.query_one("#confirm-cancel", Button),
                ):
                    assert widget.region.height > 0 and whole.contains_region(widget.region)

        asyncio.run(run())


def run_at_cells(app: ConsoleApp) -> dict[str, list[str]]:
    """The Pending panel's RUN AT cells, by queue."""
    table = app.main.query_one("#pending", PendingTable)
    column = table.shown_columns.index("run_at")
    cells: dict[str, list[str]] = {}
    for row, job in enumerate(table.items):
        cells.setdefault(job.queue, []).append(table.cells_at(row)[column].plain)
    return cells


def test_pending_rows_of_a_paused_queue_say_paused_not_ready(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A paused queue's due jobs said "ready" (no worker would claim them); its
    delayed retry keeps its countdown, marked paused; another queue's jobs stay ready."""
    seed_console(store, sql_conn)
    store.ops.pause("payments", actor="alice", reason="card processor down")

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await wait_until_pilot(pilot, lambda: "payments" in run_at_cells(app), "the rows")
        cells = run_at_cells(app)
        assert cells["emails"] == ["ready"]
        due = [c for c in cells["payments"] if "in " not in c]
        delayed = [c for c in cells["payments"] if "in " in c]
        assert due and set(due) == {"⏸ paused"}
        assert len(delayed) == 1 and re.fullmatch(r"⏸ in [45]m\d\ds", delayed[0])

    drive(db_dsn, scenario)
