"""Cancel (`c`) and delete (`D`) from the console, driven by Pilot against a real PostgreSQL:
each behind its own confirmation (delete's says it is permanent), guarded on what the operator
saw, from the panels, the detail screen and the find screen, and in sight at 80x24."""

from __future__ import annotations

import psycopg
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.confirm import ConfirmScreen
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.screens.find import FindScreen
from leasectl.console.view import Action
from leasectl.console.widgets.tables import FindTable
from leasectl.core.models import JobStatus
from leasectl.present.skips import skip_reason
from tests.console.test_console_db import confirm, drive, events, highlight, status
from tests.console.test_operator_view import in_sight
from tests.seed import TTL, seed_console
from tests.stores import Stores
from tests.util import wait_until_pilot


def exists(conn: psycopg.Connection, job_id: int) -> bool:
    row = conn.execute("SELECT 1 FROM leasectl.jobs WHERE id = %s", (job_id,)).fetchone()
    return row is not None


def test_cancel_a_pending_and_a_live_processing_job(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    pending, live = seeded.pending[0], seeded.live[0]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", pending)
        await confirm(app, pilot, "c", "duplicate batch")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == (pending,)
        app.last_result = None
        await highlight(app, pilot, "processing", live.job_id)
        await pilot.press("c")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "confirm")
        screen = app.screen
        assert isinstance(screen, ConfirmScreen) and screen.action is Action.CANCEL
        assert "revoked" in str(screen.query_one("#confirm-condition", Static).render())
        screen.query_one("#reason", Input).value = "customer asked"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == (live.job_id,)

    drive(db_dsn, scenario)
    assert status(sql_conn, pending) == status(sql_conn, live.job_id) == "Cancelled"
    assert [e[:2] for e in events(sql_conn, live.job_id)] == [("cancel", "customer asked")]
    assert store.work.heartbeat([live], TTL) == {}  # the holder's lease is revoked


def test_cancel_of_a_job_that_moved_after_the_operator_looked_is_skipped(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """The operator highlights a live lease and presses c; while the dialog is open its worker
    completes it. The cancel is skipped with the reason, never clobbering the result."""
    seeded = seed_console(store, sql_conn)
    lease = seeded.live[1]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "processing", lease.job_id)
        await pilot.press("c")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "confirm")
        assert store.work.complete([lease]) == {lease.job_id}
        app.screen.query_one("#reason", Input).value = "stop it"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == ()
        [skipped] = app.last_result.skipped
        assert "Processing -> Completed" in skip_reason(skipped)

    drive(db_dsn, scenario)
    assert status(sql_conn, lease.job_id) == "Completed"
    assert events(sql_conn, lease.job_id) == []


def test_delete_has_its_own_confirmation_that_says_it_is_permanent(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """`D` on a Stuck job: a dialog of its own (title, warning, button) that fits 80x24; the
    job goes, its events stay. `D` on a Pending job is skipped by the guard (and said so)."""
    seeded = seed_console(store, sql_conn)
    stuck, pending = seeded.stuck, seeded.pending[1]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "stuck", stuck)
        await pilot.press("D")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "confirm")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ConfirmScreen) and screen.action is Action.DELETE
        assert "permanently" in str(screen.query_one("#confirm-title", Static).render())
        assert "no undo" in str(screen.query_one("#confirm-warnings", Static).render())
        ok = screen.query_one("#confirm-ok", Button)
        assert str(ok.label) == "Delete 1" and ok.variant == "error"
        for widget in (screen.query_one("#reason"), *screen.query(Button)):
            assert in_sight(app, widget), widget
        screen.query_one("#reason", Input).value = "INC-12 cleanup"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == (stuck,)
        app.last_result = None
        await highlight(app, pilot, "pending", pending)
        await confirm(app, pilot, "D", "oops")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == ()
        assert "cannot be deleted" in skip_reason(app.last_result.skipped[0])

    drive(db_dsn, scenario, size=(80, 24))
    assert not exists(sql_conn, stuck) and exists(sql_conn, pending)
    assert [e[0] for e in events(sql_conn, stuck)][-1] == "delete"
    assert "mark_stuck" in [e[0] for e in events(sql_conn, stuck)]


def test_cancel_from_the_detail_and_delete_from_the_find_screen(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    job_id = seeded.pending[1]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", job_id)
        await pilot.press("enter")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, DetailScreen), "detail")
        detail = app.screen
        assert isinstance(detail, DetailScreen)
        await wait_until_pilot(pilot, lambda: detail.detail is not None, "the job loaded")
        await confirm(app, pilot, "c", "from the detail")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == (job_id,)
        app.last_result = None
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: len(app.screen_stack) == 1, "the main screen")
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: isinstance(app.screen, FindScreen), "find")
        app.screen.query_one("#find-input", Input).value = "state:cancelled"
        await pilot.press("enter")
        table = app.screen.query_one(FindTable)
        await wait_until_pilot(pilot, lambda: [j.id for j in table.items] == [job_id], "found")
        assert table.items[0].status == JobStatus.CANCELLED
        await pilot.press("tab")  # from the filter box to the results, whose letters act
        await confirm(app, pilot, "D", "found it")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None and app.last_result.changed == (job_id,)

    drive(db_dsn, scenario)
    assert not exists(sql_conn, job_id)
    assert [e[:2] for e in events(sql_conn, job_id)] == [
        ("cancel", "from the detail"),
        ("delete", "found it"),
    ]
