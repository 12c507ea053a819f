"""`Q`: the Queues view and its queue screens (screens/queues.py), read over the poll's
connection (the main screen's poll pauses while they are in front). ``ConsoleApp`` has this
method (a base of it, over the Schedules view's)."""

from __future__ import annotations

from leasectl.console.scheduling import ScheduleView
from leasectl.console.screens.queues import QueueCalls, QueuesScreen


class QueueViews(ScheduleView):
    def open_queues(self) -> None:
        calls = QueueCalls(
            overview=self.source.queues,
            queue=self.source.queue,
            every=self.schedule.interval,
        )
        self.push_screen(QueuesScreen(calls))
