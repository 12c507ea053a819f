"""The find screen's "act on all matching" (`R` requeue, `S` mark stuck): the count and the
filter in a confirmation that fits 80x24, a reason, batches in a worker with progress, `esc`
stopping between batches, the refusals (read-only, no filter, no search yet), a real run
against PostgreSQL with its audit rows, a capped count said as "at least", and hostile filter
values shown literally."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens import find
from leasectl.console.screens.bulk import BulkConfirmScreen
from leasectl.console.source import StaticSource
from leasectl.core.models import JobStatus, SkipCode, Skipped
from tests.console.sample import sample_detail, sample_found, sample_snapshot
from tests.console.test_failed_find import db_app, find_screen, run_app, search
from tests.console.test_hostile import assert_shown, screen_text, widget_text
from tests.hostile import NAMES
from tests.util import wait_until_pilot


def static_source(**kwargs: object) -> StaticSource:
    return StaticSource(
        sample_snapshot(),
        details={1042: sample_detail()},
        found=sample_found(),
        bulk_batch=5,
        **kwargs,  # type: ignore[arg-type]
    )


def failed_ids() -> list[int]:
    return [j.id for j in sample_found() if j.status == JobStatus.FAILED]


async def confirm_open(app: ConsoleApp, pilot: Pilot[None], key: str) -> BulkConfirmScreen:
    find_screen(app).query_one("#find-results").focus()
    await pilot.press(key)
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, BulkConfirmScreen), "confirm")
    screen = app.screen
    assert isinstance(screen, BulkConfirmScreen)
    return screen


def assert_fits(app: ConsoleApp, screen: BulkConfirmScreen) -> None:
    """The reason field and the buttons are on the screen (not scrolled or cut off)."""
    width, height = app.size
    for widget in (screen.query_one("#reason", Input), screen.query_one("#confirm-ok", Button)):
        region = widget.region
        assert region.height > 0 and region.bottom <= height and region.right <= width, region


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_requeue_all_matching_confirms_the_count_and_runs_in_batches(
    size: tuple[int, int],
) -> None:
    source = static_source()
    ids = failed_ids()

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await search(app, pilot, "state:failed queue:payments")
        payments = [j.id for j in sample_found() if j.id in ids and j.queue == "payments"]
        confirm = await confirm_open(app, pilot, "R")
        assert confirm.title_text == f"Requeue {len(payments)} jobs matching the filter?"
        assert_fits(app, confirm)
        shown = screen_text(app, "the confirmation")
        assert "state:Failed queue:payments" in shown.replace("\n", " ")
        # No reason: refused, the dialog stays.
        await pilot.press("ctrl+y")
        error = confirm.query_one("#confirm-error", Static)
        assert "A reason is required" in widget_text(error, "error")
        await pilot.press(*"INC-9", "ctrl+y")
        await wait_until_pilot(pilot, lambda: screen.bulk_result is not None, "the run")
        assert screen.bulk_running is None
        done = [s.id for call in source.calls for s in call[1]]
        assert done == payments  # newest first, each once, in batches of 5
        assert {c[0] for c in source.calls} == {"requeue"}
        assert len(source.calls) == -(-len(payments) // 5)
        assert {c[2] for c in source.calls} == {"INC-9"}
        status = widget_text(screen.query_one("#find-bulk"), "status")
        assert f"requeued {len(payments)}, skipped 0 of {len(payments)} matching" in status

    run_app(ConsoleApp(source, clock=lambda: 1000.0), scenario, size=size)


def test_esc_stops_a_run_after_the_batch_in_flight_and_skips_are_reported() -> None:
    ids = failed_ids()
    skip = {ids[0]: Skipped(ids[0], SkipCode.MOVED, "mark-stuck", JobStatus.FAILED)}
    source = static_source(hold_batch=2, skip=skip)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await search(app, pilot, "state:failed")
        confirm = await confirm_open(app, pilot, "R")
        assert confirm.title_text.startswith(f"Requeue {len(ids)} jobs")
        await pilot.press(*"why", "ctrl+y")
        await asyncio.to_thread(source.holding.wait, 10)
        status = screen.query_one("#find-bulk")
        await wait_until_pilot(
            pilot,
            lambda: "requeued 9, skipped 1 of 10 read" in widget_text(status, "s"),
            "progress",
        )
        assert not isinstance(app.focused, Input)
        await pilot.press("escape")  # stops; does not close the screen
        assert screen.bulk_stop.is_set() and app.screen is screen
        source.release.set()
        await wait_until_pilot(pilot, lambda: screen.bulk_result is not None, "the stop")
        result = screen.bulk_result
        assert result is not None and not result.complete and result.batches == 2
        text = widget_text(status, "status")
        assert "requeued 9, skipped 1 of 10 matching; stopped" in text
        assert f"#{ids[0]}: moved since you looked" in text
        assert len(source.calls) == 2

    run_app(ConsoleApp(source, clock=lambda: 1000.0), scenario)


def test_refusals_read_only_no_search_and_no_filter() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("f")
        await wait_until_pilot(pilot, lambda: find_screen(app) is not None, "find")
        screen = find_screen(app)
        screen.query_one("#find-results").focus()
        await pilot.press("S")
        error = screen.query_one("#find-error", Static)
        assert "search first" in widget_text(error, "error")
        await search(app, pilot, "")
        screen.query_one("#find-results").focus()
        await pilot.press("S")
        assert "give a filter first" in widget_text(error, "error")
        # Typed into the filter, R and S are letters.
        field = screen.query_one("#find-input", Input)
        field.focus()
        field.value = "state:pending"
        await pilot.press("S")
        assert field.value.endswith("S") and not isinstance(app.screen, BulkConfirmScreen)
        app.read_only = "started with --read-only"
        await search(app, pilot, "state:failed")
        screen.query_one("#find-results").focus()
        await pilot.press("R")
        await wait_until_pilot(pilot, lambda: "Refused" in screen_text(app, "toast"), "refused")
        assert not isinstance(app.screen, BulkConfirmScreen) and source.calls == []

    source = static_source()
    run_app(ConsoleApp(source, clock=lambda: 1000.0), scenario)


def test_against_postgresql_audited_with_the_filter_and_a_capped_count(
    db_dsn: str, sql_conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, last_error, finished_at) "
        "SELECT q, 'Failed', 1, 'timeout', now() FROM unnest(ARRAY['payments', 'payments', "
        "'payments', 'payments', 'emails']) AS q"
    )
    monkeypatch.setattr(find, "BULK_COUNT_CAP", 3)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await search(app, pilot, "state:failed queue:payments")
        confirm = await confirm_open(app, pilot, "R")
        assert confirm.title_text == "Requeue at least 3 jobs matching the filter?"
        assert "counting stopped there" in screen_text(app, "the confirmation")
        await pilot.press(*"gateway back", "ctrl+y")
        await wait_until_pilot(pilot, lambda: screen.bulk_result is not None, "the run", 30)
        result = screen.bulk_result
        assert result is not None and (result.matched, result.changed) == (4, 4)

    run_app(db_app(db_dsn), scenario, size=(120, 40))
    rows = sql_conn.execute(
        "SELECT j.queue, j.status::text, e.reason FROM leasectl.jobs j "
        "LEFT JOIN leasectl.job_events e ON e.job_id = j.id ORDER BY j.id"
    ).fetchall()
    reason = "gateway back (by filter: --state Failed --queue payments)"
    assert rows == [("payments", "Pending", reason)] * 4 + [("emails", "Failed", None)]


@pytest.mark.full  # the hostile corpus in every filter: a sweep
def test_hostile_filter_values_are_shown_literally_in_the_confirmation() -> None:
    hostile = [n for n in NAMES if n.strip()][:12]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        for name in hostile:
            screen = await search(app, pilot, f"state:failed error:{json.dumps(name)}")
            assert screen.filter is not None and screen.filter.error is not None
            value = screen.filter.error
            screen.query_one("#find-results").focus()
            await pilot.press("R")
            await wait_until_pilot(
                pilot, lambda: isinstance(app.screen, BulkConfirmScreen), "confirm"
            )
            text = screen_text(app, f"confirmation of {name!r}")  # no live markup or escapes
            assert "Filter: state:Failed error:" in text
            assert_shown(text.replace("\n", ""), value, f"the filter {name!r}")
            await pilot.press("escape")
            await wait_until_pilot(
                pilot, lambda: not isinstance(app.screen, BulkConfirmScreen), "back"
            )

    run_app(ConsoleApp(static_source(), clock=lambda: 1000.0), scenario)
