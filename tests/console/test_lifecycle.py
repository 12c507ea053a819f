"""The console after it closed: results from its threads and timers arrive late and are dropped.

A poll, a privilege check or an action runs in a thread, and the tick runs on a timer; each can
finish while the app shuts down and removes its screens. Pilot's own shutdown runs alongside the
app's message loop, which is how the first of these was found (a poll's result drawn onto a
status bar whose children were already gone).
"""

from __future__ import annotations

import asyncio

from leasectl.console.app import ConsoleApp
from leasectl.console.messages import PollFailed, PrivilegeChecked, SnapshotLoaded
from leasectl.console.source import StaticSource
from leasectl.console.view import ConsoleFilter
from tests.console.sample import sample_snapshot
from tests.util import wait_until_pilot


def closed_app() -> ConsoleApp:
    app = ConsoleApp(StaticSource(sample_snapshot()), clock=lambda: 1000.0)

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")

    asyncio.run(run())
    assert not app.is_running and not app.screen_stack
    return app


def test_results_that_arrive_after_the_console_closed_are_dropped() -> None:
    app = closed_app()
    polls, timer = app.polls, app._timer
    app.on_snapshot_loaded(SnapshotLoaded(sample_snapshot(), ConsoleFilter(), 1000.0, 0.01))
    app.on_poll_failed(PollFailed("server closed the connection", True, 0.01))
    app.on_privilege_checked(PrivilegeChecked(can_update=False))
    app._tick()
    app.poll_now()
    # Nothing was counted, drawn or scheduled, and no poll started on the closed app.
    assert app.polls == polls
    assert not app.polling
    assert app.connected is True and app.error is None
    assert app._timer is timer
