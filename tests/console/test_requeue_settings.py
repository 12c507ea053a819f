"""The requeue confirmations' two optional fields (a new priority, N more attempts): what is
typed there reaches the guarded action, a bad value is said in the dialog and nothing runs,
Enter in a field never confirms, and the other actions' dialogs have no such fields."""

from __future__ import annotations

from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.bulk import BulkConfirmScreen
from leasectl.console.screens.confirm import ConfirmScreen
from leasectl.console.screens.dialog import ENTER_HINT
from leasectl.console.source import StaticSource
from leasectl.console.view import Action
from leasectl.core.actions import NO_SETTINGS, JobSettings
from tests.console.sample import sample_found, sample_snapshot
from tests.console.test_operator_view import fixed, in_sight, run_fixed
from tests.console.test_typing import open_bulk
from tests.util import wait_until_pilot


async def requeue_dialog(app: ConsoleApp, pilot: Pilot[None]) -> ConfirmScreen:
    assert app.snapshot is not None
    app.request_action(Action.REQUEUE, [app.snapshot.pending[0]])
    await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "confirm")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ConfirmScreen)
    return screen


def error_line(screen: ConfirmScreen | BulkConfirmScreen) -> str:
    return str(screen.query_one("#confirm-error", Static).render())


def source_of(app: ConsoleApp) -> StaticSource:
    assert isinstance(app.source, StaticSource)
    return app.source


def test_the_fields_reach_the_requeue_and_enter_in_them_never_confirms() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await requeue_dialog(app, pilot)
        await pilot.press(*"INC-42")
        await pilot.press("tab")  # from the reason to the priority
        assert screen.focused is screen.query_one("#priority", Input)
        await pilot.press(*"-10", "enter")
        await pilot.press("tab")
        assert screen.focused is screen.query_one("#attempts", Input)
        await pilot.press(*"3", "enter")
        await pilot.pause()
        assert app.screen is screen and source_of(app).calls == []  # Enter confirmed nothing
        assert ENTER_HINT in error_line(screen)
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action")
        source = source_of(app)
        assert [c[0] for c in source.calls] == ["requeue"] and source.calls[0][2] == "INC-42"
        assert source.settings == [JobSettings(priority=-10, attempts=3)]

    run_fixed(fixed(), (160, 48), scenario)


def test_empty_fields_requeue_with_no_settings() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        await requeue_dialog(app, pilot)
        await pilot.press(*"INC-42", "ctrl+y")
        await wait_until_pilot(pilot, lambda: app.last_result is not None, "the action")
        assert source_of(app).settings == [NO_SETTINGS]

    run_fixed(fixed(), (160, 48), scenario)


def test_a_bad_value_is_said_in_the_dialog_and_nothing_runs() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await requeue_dialog(app, pilot)
        await pilot.press(*"INC-42")
        for field, value, said in (
            ("#priority", "high", "Priority: an integer"),
            ("#priority", "99999999999", "Priority: an integer"),
            ("#attempts", "0", "Attempts: an integer from 1 to 1,000"),
            ("#attempts", "1001", "Attempts: an integer from 1 to 1,000"),
        ):
            for name in ("#priority", "#attempts"):
                screen.query_one(name, Input).value = ""
            screen.query_one(field, Input).value = value
            await pilot.press("ctrl+y")
            await pilot.pause()
            assert app.screen is screen, value
            assert said in error_line(screen), (value, error_line(screen))
        assert source_of(app).calls == [] and source_of(app).settings == []

    run_fixed(fixed(), (160, 48), scenario)


def test_the_fields_and_the_buttons_are_in_sight_at_80x24() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await requeue_dialog(app, pilot)
        for widget in (
            screen.query_one("#reason"),
            screen.query_one("#priority"),
            screen.query_one("#attempts"),
            *screen.query(Button),
        ):
            assert in_sight(app, widget), widget

    run_fixed(fixed(), (80, 24), scenario)


def test_only_requeue_dialogs_have_the_fields() -> None:
    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        assert app.snapshot is not None
        for action in (Action.MARK_STUCK, Action.CANCEL):
            app.request_action(action, [app.snapshot.pending[0]])
            await wait_until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "dialog")
            await pilot.pause()
            assert not app.screen.query("#priority") and not app.screen.query("#attempts")
            await pilot.press("escape")
            await wait_until_pilot(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "back")

    run_fixed(fixed(), (160, 48), scenario)


def test_the_find_screens_requeue_of_all_matching_takes_the_fields() -> None:
    source = StaticSource(sample_snapshot(), found=sample_found())
    app = ConsoleApp(source, clock=lambda: 1000.0)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        screen = await open_bulk(pilot)
        assert isinstance(screen, BulkConfirmScreen)
        await pilot.pause()
        await pilot.press(*"INC-7")
        screen.query_one("#priority", Input).value = "-5"
        screen.query_one("#attempts", Input).value = "2"
        await pilot.press("ctrl+y")
        await wait_until_pilot(pilot, lambda: bool(source.settings), "the run")
        assert source.settings == [JobSettings(priority=-5, attempts=2)]

    run_fixed(app, (160, 48), scenario)
