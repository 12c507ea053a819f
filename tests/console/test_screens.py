"""SVG snapshots of the console from fixed data: no database, a frozen clock, fixed sizes.

Regenerate with ``--snapshot-update`` and look at the SVGs in __snapshots__/ before committing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.confirm import ConfirmScreen
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.screens.find import FindScreen
from leasectl.console.source import StaticSource
from tests.console.sample import sample_detail, sample_found, sample_snapshot
from tests.util import wait_until_pilot

SnapCompare = Callable[..., bool]


def fixed_app(*, read_only: bool = False) -> ConsoleApp:
    source = StaticSource(sample_snapshot(), details={1042: sample_detail()}, found=sample_found())
    # The monotonic clock never moves: countdowns and ages stay where the snapshot put them.
    return ConsoleApp(source, read_only=read_only, clock=lambda: 1000.0)


def settle(keys: Sequence[str] = (), until: Callable[[ConsoleApp], object] | None = None) -> Any:
    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
        await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.05)
        if until is not None:
            await wait_until_pilot(pilot, lambda: until(app), "the screen under test")
        for field in app.screen.query(Input):
            field.cursor_blink = False  # a blinking cursor would make the picture flaky

    run: Callable[[Pilot[None]], Awaitable[None]] = run_before
    return run


def test_main_screen_wide(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), terminal_size=(160, 48), run_before=settle())


def test_main_screen_narrow(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), terminal_size=(80, 24), run_before=settle(["3"]))


def test_main_screen_read_only(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(read_only=True), terminal_size=(120, 30), run_before=settle())


def test_main_screen_reading_a_lagging_standby(snap_compare: SnapCompare) -> None:
    """--read-dsn: the panels come from a standby 45 s behind its primary, more than the
    owners' 30 s lease TTL; the header names both servers and says the countdowns are stale
    (the clock is the standby's replay time, frozen between refreshes)."""
    source = StaticSource(
        replace(sample_snapshot(), read_lag=timedelta(seconds=45)),
        read_where="standby.example:5432/payments",
    )
    app = ConsoleApp(source, clock=lambda: 1000.0)
    assert snap_compare(app, terminal_size=(160, 48), run_before=settle())


def test_detail_screen(snap_compare: SnapCompare) -> None:
    def loaded(app: ConsoleApp) -> bool:
        return isinstance(app.screen, DetailScreen) and app.screen.detail is not None

    keys = ["3", "down", "down", "down", "down", "enter"]
    assert snap_compare(fixed_app(), terminal_size=(160, 48), run_before=settle(keys, loaded))


def test_confirmation(snap_compare: SnapCompare) -> None:
    def confirming(app: ConsoleApp) -> bool:
        return isinstance(app.screen, ConfirmScreen)

    assert snap_compare(fixed_app(), terminal_size=(160, 48), run_before=settle(["R"], confirming))


def test_confirmation_at_80x24(snap_compare: SnapCompare) -> None:
    """The smallest supported terminal: the list and the condition scroll, the reason field and
    the buttons stay in sight."""

    def confirming(app: ConsoleApp) -> bool:
        return isinstance(app.screen, ConfirmScreen)

    assert snap_compare(fixed_app(), terminal_size=(80, 24), run_before=settle(["R"], confirming))


def test_failed_panel_at_80x24(snap_compare: SnapCompare) -> None:
    """Narrow, the Failed panel is one more single panel: key 5."""
    assert snap_compare(fixed_app(), terminal_size=(80, 24), run_before=settle(["5"]))


def test_find_screen(snap_compare: SnapCompare) -> None:
    def found(app: ConsoleApp) -> bool:
        screen = app.screen
        return isinstance(screen, FindScreen) and screen.page is not None and not screen.running

    keys = ["f", *"state:failed,completed since:2h", "enter"]
    assert snap_compare(fixed_app(), terminal_size=(140, 40), run_before=settle(keys, found))
