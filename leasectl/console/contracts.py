"""What the screens need from the app that shows them, as a Protocol the screens own.

The app imports the screens; a screen never imports the app (not even for a type), so that the
two do not form a cycle. ``ConsoleApp`` satisfies ``MainHost``, and mypy checks it where the app
hands itself to ``MainScreen``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from leasectl.console.view import Action, ConsoleFilter
from leasectl.console.widgets.bars import Status
from leasectl.console.widgets.tables import RowContext
from leasectl.core.models import PanelJob, Snapshot


class MainHost(Protocol):
    """The state the main screen shows and the requests it makes: polling, filtering, the
    selection, the detail screen and the guarded actions."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def filter(self) -> ConsoleFilter: ...

    @property
    def selected(self) -> set[int]:
        """The selected job ids; the screen toggles and clears them in place."""
        ...

    @property
    def read_only(self) -> str | None:
        """Why the console may not act, or None when it may."""
        ...

    def start(self) -> None:
        """The main screen is mounted: begin polling."""

    def resume_polling(self) -> None: ...

    def status(self) -> Status: ...

    def db_now(self) -> datetime | None: ...

    def row_context(self) -> RowContext | None: ...

    def poll_now(self) -> None: ...

    def open_detail(self, job_id: int) -> None: ...

    def open_filter(self) -> None: ...

    def open_find(self) -> None: ...

    def open_schedules(self) -> None: ...

    def open_queues(self) -> None: ...

    def apply_filter(self, flt: ConsoleFilter) -> None: ...

    def refuse(self, what: str) -> None: ...

    def request_action(self, action: Action, jobs: list[PanelJob]) -> None: ...

    def request_pause(self, queue: str | None) -> None:
        """Confirm, then pause (or resume, if paused) ``queue``; None: no job highlighted."""

    def request_limit(self, queue: str | None) -> None:
        """Set or lift ``queue``'s limits through a dialog; None: no job highlighted."""
