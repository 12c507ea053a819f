"""`S`: the Schedules view (screens/schedules.py) over the actions' connection.
``ConsoleApp`` has this method (a base of it)."""

from __future__ import annotations

from leasectl.console.keys import KeyedApp
from leasectl.console.poller import PollSchedule
from leasectl.console.screens.schedules import ScheduleCalls, SchedulesScreen
from leasectl.console.source import ConsoleSource


class ScheduleView(KeyedApp):
    source: ConsoleSource
    read_only: str | None
    schedule: PollSchedule

    def open_schedules(self) -> None:
        source = self.source
        calls = ScheduleCalls(
            read=source.schedules,
            run=source.run_schedule,
            pause=source.pause_schedule,
            resume=source.resume_schedule,
            read_only=lambda: self.read_only,
            every=self.schedule.interval,
        )
        self.push_screen(SchedulesScreen(calls))
