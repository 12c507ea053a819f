"""The console driven by Pilot against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import conninfo, sql
from textual.pilot import Pilot
from textual.widgets import Input

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.confirm import ConfirmScreen
from leasectl.console.screens.help import HelpScreen
from leasectl.console.source import DatabaseSource
from leasectl.console.view import Action
from leasectl.console.widgets.tables import (
    OwnersTable,
    PanelTable,
    PendingTable,
    ProcessingTable,
    StuckTable,
)
from leasectl.core.errors import ConnectionFailed, SchemaMissing
from leasectl.present.skips import skip_reason
from tests.conftest import SCHEMA
from tests.seed import ALIVE, SILENT, seed_console
from tests.stores import Stores
from tests.util import wait_until_pilot

Scenario = Callable[[ConsoleApp, Pilot[None]], Awaitable[None]]


class FakeClock:
    """The console's local monotonic clock, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drive(
    dsn: str,
    scenario: Scenario,
    *,
    read_only: bool = False,
    clock: Callable[[], float] = time.monotonic,
    limit: int = 100,
    size: tuple[int, int] = (160, 48),
) -> ConsoleApp:
    """Run the real console (database source), by default at 160x48, through a scenario."""
    source = DatabaseSource.connect(dsn, SCHEMA)
    app = ConsoleApp(
        source, refresh=timedelta(milliseconds=300), read_only=read_only, clock=clock, limit=limit
    )

    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_until_pilot(pilot, lambda: app.snapshot is not None, "the first refresh")
            await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")
            await scenario(app, pilot)

    try:
        asyncio.run(run())
    finally:
        source.close()
    return app


async def highlight(app: ConsoleApp, pilot: Pilot[None], panel: str, job_id: int) -> None:
    key = {"pending": "1", "processing": "2", "stuck": "3"}[panel]
    await pilot.press(key)
    table = app.main.query_one(f"#{panel}", PanelTable)
    await wait_until_pilot(pilot, lambda: str(job_id) in map(table.key_of, table.items), "the row")
    table.move_cursor(row=[table.key_of(item) for item in table.items].index(str(job_id)))
    await pilot.pause()


async def no_confirmation_after(pilot: Pilot[None], *keys: str) -> None:
    """Press ``keys``, then `?`: keys are handled in order, so once the help screen is up every
    one of them has been handled, and none of them may have asked for a confirmation."""
    app = pilot.app
    await pilot.press(*keys, "question_mark")
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
    assert not any(isinstance(screen, ConfirmScreen) for screen in app.screen_stack)
    await pilot.press("escape")
    await wait_until_pilot(pilot, lambda: len(app.screen_stack) == 1, "the main screen")


async def confirm(app: ConsoleApp, pilot: Pilot[None], key: str, reason: str) -> None:
    await pilot.press(key)
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
    app.screen.query_one("#reason", Input).value = reason
    await pilot.press("ctrl+y")


def events(conn: psycopg.Connection, job_id: int) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT action, reason, actor FROM leasectl.job_events WHERE job_id = %s ORDER BY id",
        (job_id,),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def status(conn: psycopg.Connection, job_id: int) -> str:
    row = conn.execute("SELECT status::text FROM leasectl.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_bad_dsn_and_missing_schema_fail_before_the_app(empty_db_dsn: str) -> None:
    with pytest.raises(SchemaMissing, match="leasectl init"):
        DatabaseSource.connect(empty_db_dsn, SCHEMA)
    bad = conninfo.make_conninfo(empty_db_dsn, port="1", connect_timeout="2")
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        DatabaseSource.connect(bad, SCHEMA)


def test_panels_fill_from_seeded_jobs(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    clock = FakeClock()  # no poll falls due unless the test moves it

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        main = app.main
        pending = main.query_one("#pending", PendingTable)
        processing = main.query_one("#processing", ProcessingTable)
        stuck = main.query_one("#stuck", StuckTable)
        owners = main.query_one("#owners", OwnersTable)
        assert {j.id for j in pending.items} >= set(seeded.pending) | {seeded.delayed}
        assert processing.row_count == 5
        # Expired first, each marked by text as well as colour; then the one at risk.
        first = [str(processing.cells_at(i)[0]) for i in range(3)]
        assert first == ["✖ expired", "✖ expired", "⚠ at risk"]
        assert {j.id for j in processing.items[:2]} == {le.job_id for le in seeded.expired}
        assert {j.id for j in stuck.items} == {seeded.stuck, *(le.job_id for le in seeded.expired)}
        rows = {job.id: i for i, job in enumerate(stuck.items)}
        diagnoses = {str(stuck.cells_at(rows[le.job_id])[5]) for le in seeded.expired}
        assert diagnoses == {"○ owner silent"}
        # The Stuck job was marked stuck (by "test", reason "seed") from an expired lease of a
        # silent owner: it says so, not "owner silent" (which would call a requeue safe).
        assert str(stuck.cells_at(rows[seeded.stuck])[5]) == "⊘ quarantined by test: seed"
        assert {o.owner for o in owners.items} == {ALIVE, SILENT}
        counts = str(main.query_one("#counts").render())
        assert "Pending 5" in counts and "✖ 2 expired" in counts and "⚠ 1 at risk" in counts
        # One vocabulary with `leasectl status`: the expired leases are Processing, Stuck is
        # the quarantined job alone (not 1 + 2 expired).
        assert "Processing 5 (⚠ 1 at risk, ✖ 2 expired)" in counts and "Stuck 1" in counts
        # History is only ever an estimate, and the console says why it has none yet.
        assert "All-time Completed/Failed: no statistics yet" in counts
        header = str(main.query_one("#status-left").render())
        assert "connected" in header and "password" not in header
        # Countdowns tick between polls from the database clock (the last poll's now()) moved
        # by local monotonic time, not from the wall clock: the local clock alone moves 90 s.
        assert app.snapshot is not None
        assert app.db_now() == app.snapshot.db_now
        clock.now += 90
        assert app.db_now() == app.snapshot.db_now + timedelta(seconds=90)

    drive(db_dsn, scenario, clock=clock)


def test_requeue_from_the_console_changes_the_row_and_writes_the_event(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    target = seeded.expired[0].job_id

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "stuck", target)
        await confirm(app, pilot, "r", "INC-7 silent worker")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None
        assert app.last_result.changed == (target,) and app.last_result.skipped == ()
        pending = app.main.query_one("#pending", PendingTable)
        await wait_until_pilot(
            pilot, lambda: target in {j.id for j in pending.items}, "the job back in Pending"
        )
        stuck = app.main.query_one("#stuck", StuckTable)
        assert target not in {j.id for j in stuck.items}

    drive(db_dsn, scenario)
    assert status(sql_conn, target) == "Pending"
    [(action, reason, actor)] = events(sql_conn, target)
    assert (action, reason) == ("requeue", "INC-7 silent worker")
    assert actor.startswith("operator:")


def test_requeue_of_a_job_that_completed_after_the_snapshot_is_skipped(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    lease = seeded.expired[1]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "processing", lease.job_id)
        await pilot.press("r")
        await wait_until_pilot(
            pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation"
        )
        # While the operator types, the worker finishes the job after all.
        assert store.work.complete([lease]) == {lease.job_id}
        app.screen.query_one("#reason", Input).value = "looks stuck"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None
        assert app.last_result.changed == ()
        [skipped] = app.last_result.skipped
        assert skipped.id == lease.job_id
        assert "Completed" in skip_reason(skipped)

    drive(db_dsn, scenario)
    assert status(sql_conn, lease.job_id) == "Completed"
    assert events(sql_conn, lease.job_id) == []


def test_mark_stuck_selected_jobs(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    seeded = seed_console(store, sql_conn)
    a, b = seeded.pending[:2]

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await highlight(app, pilot, "pending", a)
        await pilot.press("space")
        await highlight(app, pilot, "pending", b)
        await pilot.press("space")
        assert app.selected == {a, b}
        await confirm(app, pilot, "s", "poison messages")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None
        assert sorted(app.last_result.changed) == sorted([a, b])
        assert app.selected == set()

    drive(db_dsn, scenario)
    assert status(sql_conn, a) == status(sql_conn, b) == "Stuck"


def test_requeue_all_expired_in_the_filter(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    expired = sorted(le.job_id for le in seeded.expired)
    # The seed's at-risk lease ends 4 s after seeding; on a slow machine it lapsed before the
    # console had loaded, and "all expired" had three jobs. This test needs only the two.
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() + interval '1 hour' WHERE id = %s",
        (seeded.at_risk.job_id,),
    )

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("R")
        await wait_until_pilot(
            pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation"
        )
        screen = app.screen
        assert isinstance(screen, ConfirmScreen)
        assert sorted(j.id for j in screen.jobs) == expired
        assert "Requeue all 2 expired jobs" in screen.title_text
        screen.query_one("#reason", Input).value = "bulk"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action result")
        assert app.last_result is not None
        assert sorted(app.last_result.changed) == expired

    drive(db_dsn, scenario)
    assert [status(sql_conn, i) for i in expired] == ["Pending", "Pending"]


def test_read_only_flag_hides_and_refuses(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    target = seeded.expired[0].job_id

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        footer = {b.binding.key for b in app.main.active_bindings.values() if b.enabled}
        assert not {"r", "s", "R"} & footer
        await highlight(app, pilot, "stuck", target)
        await no_confirmation_after(pilot, "r", "s", "R")
        # Even a request that gets past the keys is refused.
        app.clear_notifications()  # (the keys' own refusals: not the request's)
        app.request_action(Action.REQUEUE, app.main.targets())
        await pilot.pause()  # (a notification is a message: shown once processed)
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("Refused" in n.message for n in app._notifications)

    app = drive(db_dsn, scenario, read_only=True)
    assert app.read_only == "started with --read-only"
    assert status(sql_conn, target) == "Processing"
    assert events(sql_conn, target) == []


@pytest.fixture
def reader_dsn(db_dsn: str, sql_conn: psycopg.Connection) -> Iterator[str]:
    """A role that may read the leasectl tables but not update jobs."""
    role = f"leasectl_reader_{uuid.uuid4().hex[:8]}"
    ident = sql.Identifier(role)
    sql_conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(ident, sql.Literal(role)))
    sql_conn.execute(sql.SQL("GRANT USAGE ON SCHEMA leasectl TO {}").format(ident))
    sql_conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA leasectl TO {}").format(ident))
    try:
        yield conninfo.make_conninfo(db_dsn, user=role, password=role)
    finally:
        sql_conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        sql_conn.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_read_only_by_itself_without_update_privilege(
    reader_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seeded = seed_console(store, sql_conn)
    target = seeded.expired[0].job_id

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        assert app.read_only is not None and "EXECUTE" in app.read_only
        assert any("Read-only" in n.message for n in app._notifications)
        status_bar = str(app.main.query_one("#status-right").render())
        assert "READ-ONLY" in status_bar
        await highlight(app, pilot, "stuck", target)
        await no_confirmation_after(pilot, "r")

    drive(reader_dsn, scenario)
    assert status(sql_conn, target) == "Processing"


def test_polling_pauses_while_a_modal_is_open(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    seed_console(store, sql_conn)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        await wait_until_pilot(pilot, lambda: app.paused, "the help screen")
        # The poll already running when it opened may finish; then its next one falls due
        # (the refresh timer fires) and must wait instead of running.
        await wait_until_pilot(pilot, lambda: not app.polling, "the running poll to finish")
        polls = app.polls
        await wait_until_pilot(pilot, lambda: app.poll_pending, "a poll to fall due meanwhile")
        assert (app.polls, app.polling) == (polls, False)
        await pilot.press("escape")
        await wait_until_pilot(pilot, lambda: app.polls >= polls + 2, "polling to resume")

    drive(db_dsn, scenario)
