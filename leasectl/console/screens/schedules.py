"""`S`: the Schedules view. Each schedule's expression, time zone, queue, next slot, last slot
and its job's outcome, late or paused; `r` runs one now, `p` pauses or resumes it, each after a
confirmation with a reason (dialog.py's rules: Enter never confirms, ctrl+y does, keys typed
land in the reason box). Its rows are read on a thread of their own (the actions' connection),
when it opens, every refresh interval of the console while it is open (a read still running is
not doubled), on ctrl+r and after an action; the screen never touches the database itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Label, Static

from leasectl.console import view
from leasectl.console.screens.dialog import ReasonDialog
from leasectl.console.widgets import LiteralInput
from leasectl.core.errors import LeasectlError
from leasectl.core.literal import visible
from leasectl.core.schedules import Schedule
from leasectl.present.schedules import outcome_text, slot_text, state_text
from leasectl.present.text import lit

# What the on-call looks for first (late? paused? did the last one work?) leftmost: at 80 columns
# the expression, its zone and queue are the ones past the edge (the table scrolls).
COLUMNS = ("name", "state", "next", "last", "outcome", "cron", "tz", "queue")
NARROW = 120  # columns: below, names and queues are cut shorter


@dataclass
class SchedulesRead(Message):
    schedules: list[Schedule] | None
    error: str | None = None


@dataclass
class ScheduleDone(Message):
    text: str
    error: bool = False


@dataclass(frozen=True)
class ScheduleCalls:
    """What the view may do, each a blocking call run on a worker thread (console/source.py)."""

    read: Callable[[], list[Schedule]]
    run: Callable[[str, str], int | None]
    pause: Callable[[str, str], bool | None]
    resume: Callable[[str, str], bool | None]
    read_only: Callable[[], str | None]
    every: float = 2.0  # seconds between two reads while the view is open (the console's refresh)


class ScheduleConfirmScreen(ReasonDialog):
    """Run now, pause or resume one schedule: dismisses with the reason typed ("" when optional
    and none), or None when cancelled."""

    def __init__(self, verb: str, schedule: Schedule) -> None:
        super().__init__()
        self.verb = verb
        self.schedule = schedule
        self.reason_required = verb == "Pause"

    def compose(self) -> ComposeResult:
        s = self.schedule
        with Vertical(id="confirm-dialog"):
            title = Text(f"{self.verb} schedule ", style="bold")
            title.append_text(lit(view.cut(s.name, 60), "bold"))
            title.append("?")
            yield Static(title, id="confirm-title")
            body = Text()
            body.append_text(lit(view.cut(f"{s.cron}  {s.timezone}  → {s.queue}", 200)))
            body.append("\n")
            if self.verb == "Run now":
                body.append("One job is enqueued now, outside its slots; its next slot stays.")
            elif self.verb == "Pause":
                body.append("No slot of it is enqueued until it is resumed.")
            else:
                body.append(
                    "It resumes from its next slot after now: the paused slots are skipped."
                )
            with VerticalScroll(id="confirm-body"):
                yield Static(body, id="confirm-condition")
            needed = "required" if self.reason_required else "optional"
            yield Label(f"Reason ({needed}; recorded in schedule_events with your name):")
            yield LiteralInput(placeholder="e.g. quarter close, INC-1234", id="reason")
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                yield self.hint()
                yield Button(self.verb, variant="warning", id="confirm-ok")
                yield Button("Cancel", id="confirm-cancel")


class SchedulesScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("r", "run_now", "Run now"),
        Binding("p", "toggle_pause", "Pause/resume"),
        Binding("ctrl+r", "refresh", "Refresh"),
    ]

    def __init__(self, calls: ScheduleCalls) -> None:
        super().__init__()
        self.calls = calls
        self.schedules: list[Schedule] = []
        self.acting = False
        self.reading = False
        self.reads = 0  # reads finished (rows or an error)

    def compose(self) -> ComposeResult:
        yield Static(Text("Schedules", style="bold"), id="schedules-title")
        table: DataTable[Text] = DataTable(id="schedules-table", cursor_type="row")
        yield table
        yield Static("reading…", id="schedules-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#schedules-table", DataTable)
        for column in COLUMNS:
            table.add_column(column, key=column)
        self.action_refresh()
        self.set_interval(self.calls.every, self._poll)

    def _poll(self) -> None:
        if not self.reading:
            self.action_refresh()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_refresh(self) -> None:
        self.reading = True
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="schedules")
    def _read(self) -> None:
        try:
            found = self.calls.read()
        except Exception as exc:
            self.post_message(SchedulesRead(None, _said(exc)))
        else:
            self.post_message(SchedulesRead(found))

    def on_schedules_read(self, message: SchedulesRead) -> None:
        self.reading = False
        self.reads += 1
        status = self.query_one("#schedules-status", Static)
        if message.schedules is None:
            status.update(lit(f"could not read the schedules: {message.error}", "red"))
            return
        self.schedules = message.schedules
        table = self.query_one("#schedules-table", DataTable)
        row = table.cursor_row
        table.clear()
        narrow = self.app.size.width < NARROW
        for s in self.schedules:
            table.add_row(
                lit(view.cut(s.name, 22 if narrow else 60), "bold"),
                state_text(s),
                Text("-" if s.paused else slot_text(s.db_now, s.next_slot)),
                Text(slot_text(s.db_now, s.last_enqueued_at)),
                outcome_text(s),
                lit(s.cron),
                lit(view.cut(s.timezone, 40), "dim"),
                lit(view.cut(s.queue, 16 if narrow else 60)),
            )
        if self.schedules:
            table.move_cursor(row=min(row, len(self.schedules) - 1))
        late = sum(1 for s in self.schedules if s.late)
        paused = sum(1 for s in self.schedules if s.paused)
        summary = f"{len(self.schedules):,} schedules · {late} late · {paused} paused"
        status.update(Text(summary, style="red" if late else "dim"))

    def _highlighted(self) -> Schedule | None:
        table = self.query_one("#schedules-table", DataTable)
        if not self.schedules or table.cursor_row < 0:
            return None
        return self.schedules[min(table.cursor_row, len(self.schedules) - 1)]

    def _may_act(self, what: str) -> Schedule | None:
        refused = self.calls.read_only()
        if refused is not None:
            self.notify(f"Read-only: cannot {what} ({refused}).", severity="warning")
            return None
        if self.acting:
            self.notify("An action is still running; wait for its result.", severity="warning")
            return None
        s = self._highlighted()
        if s is None:
            self.notify("No schedule to act on.", timeout=4)
        return s

    def action_run_now(self) -> None:
        s = self._may_act("run a schedule")
        if s is not None:
            self.app.push_screen(
                ScheduleConfirmScreen("Run now", s),
                callback=lambda reason: self._confirmed("run", s.name, reason),
            )

    def action_toggle_pause(self) -> None:
        s = self._may_act("pause or resume a schedule")
        if s is not None:
            verb = "Resume" if s.paused else "Pause"
            self.app.push_screen(
                ScheduleConfirmScreen(verb, s),
                callback=lambda reason: self._confirmed(verb.lower(), s.name, reason),
            )

    def _confirmed(self, what: str, name: str, reason: str | None) -> None:
        if reason is None:
            return
        self.acting = True
        self._act(what, name, reason)

    @work(thread=True, exclusive=True, exit_on_error=False, group="schedule-action")
    def _act(self, what: str, name: str, reason: str) -> None:
        shown = visible(view.cut(name, 80))
        try:
            if what == "run":
                job = self.calls.run(name, reason)
                done = f"Enqueued job {job} of schedule {shown}." if job else None
            elif what == "pause":
                changed = self.calls.pause(name, reason)
                done = (
                    None
                    if changed is None
                    else (
                        f"Paused schedule {shown}." if changed else f"{shown} was paused already."
                    )
                )
            else:
                changed = self.calls.resume(name, reason)
                done = (
                    None
                    if changed is None
                    else (f"Resumed schedule {shown}." if changed else f"{shown} was not paused.")
                )
        except Exception as exc:
            self.post_message(ScheduleDone(f"{what} failed: {_said(exc)}", error=True))
            return
        self.post_message(ScheduleDone(done or f"Schedule {shown} is gone.", error=done is None))

    def on_schedule_done(self, message: ScheduleDone) -> None:
        self.acting = False
        self.notify(
            message.text,
            title="Schedule",
            severity="error" if message.error else "information",
            timeout=8,
        )
        self.action_refresh()

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()  # enter does nothing here: an action needs its key and its confirmation


def _said(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, LeasectlError) else f"{type(exc).__name__}: {exc}"
