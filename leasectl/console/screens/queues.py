"""`Q`: the Queues view, every queue at once (how big, since when, getting better or worse),
the most urgent first; `enter` opens a queue's screen (the last hour in sparklines, its error
groups, its audit events), `esc` goes back. Read only: no key here acts on a job or a queue.

Each screen reads on a thread of its own (the source's poll connection: the main screen's poll
pauses while another screen is in front), when it opens, every refresh interval of the console
while it is the screen in front (a read still running is not doubled), when it comes back in
front and on ctrl+r; the screens never touch the database themselves. A read that fails keeps
the last rows in sight and says why under them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from leasectl.core.errors import LeasectlError
from leasectl.core.queues import QueueDetail, QueuesOverview
from leasectl.present.queues import Layout, layout, overview_summary, queue_cells, queue_renderables
from leasectl.present.text import lit


@dataclass
class QueuesRead(Message):
    view: QueuesOverview | None
    error: str | None = None


@dataclass
class QueueRead(Message):
    detail: QueueDetail | None
    error: str | None = None


@dataclass(frozen=True)
class QueueCalls:
    """What the screens read, each a blocking call run on a worker thread (console/source.py)."""

    overview: Callable[[], QueuesOverview]
    queue: Callable[[str], QueueDetail]
    every: float = 2.0  # seconds between two reads while a screen is in front


class _Polled(Screen[None]):
    """A screen that reads when it opens, every ``calls.every`` while in front, and on ctrl+r."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("ctrl+r", "refresh", "Refresh"),
    ]

    def __init__(self, calls: QueueCalls) -> None:
        super().__init__()
        self.calls = calls
        self.reading = False
        self.reads = 0  # reads finished (rows or an error)

    def on_mount(self) -> None:
        self.action_refresh()
        self.set_interval(self.calls.every, self._poll)

    def on_screen_resume(self) -> None:
        if self.reads:  # (the first read is on_mount's)
            self._poll()

    def _poll(self) -> None:
        if not self.reading and self.app.screen is self:
            self.action_refresh()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_refresh(self) -> None:
        self.reading = True
        self.start_read()

    def start_read(self) -> None:
        """Start the screen's read on a worker thread; its result comes as a message."""
        raise NotImplementedError

    def _status(self, text: Text) -> None:
        self.query_one(".queues-status", Static).update(text)


class QueuesScreen(_Polled):
    def __init__(self, calls: QueueCalls) -> None:
        super().__init__(calls)
        self.view: QueuesOverview | None = None
        self.columns_at: Layout | None = None

    def compose(self) -> ComposeResult:
        title = Text("Queues", style="bold")
        title.append(" · most urgent first · the last hour · enter: a queue's detail", "dim")
        yield Static(title, id="queues-title")
        table: DataTable[Text] = DataTable(id="queues-table", cursor_type="row")
        yield table
        yield Static("reading…", id="queues-status", classes="queues-status")
        yield Footer()

    def start_read(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="queues")
    def _read(self) -> None:
        try:
            view = self.calls.overview()
        except Exception as exc:
            self.post_message(QueuesRead(None, _said(exc)))
        else:
            self.post_message(QueuesRead(view))

    def on_queues_read(self, message: QueuesRead) -> None:
        self.reading = False
        self.reads += 1
        if message.view is None:
            self._status(lit(f"could not read the queues: {message.error}", "red"))
            return
        self.view = message.view
        table = self.query_one("#queues-table", DataTable)
        at = layout(self.app.size.width)
        if at != self.columns_at:
            table.clear(columns=True)
            for name in at.columns:
                table.add_column(name)
            self.columns_at = at
        # Rows move as their urgency does: the cursor stays on the queue it was on.
        highlighted = self.highlighted()
        table.clear()
        for row in self.view.rows:
            table.add_row(*queue_cells(row, at))
        names = [r.queue for r in self.view.rows]
        if names:
            table.move_cursor(row=names.index(highlighted) if highlighted in names else 0)
        self._status(overview_summary(self.view))

    def highlighted(self) -> str | None:
        """The queue under the cursor (as last shown)."""
        table = self.query_one("#queues-table", DataTable)
        rows = self.view.rows if self.view is not None else ()
        if not rows or not 0 <= table.cursor_row < len(rows) or not table.row_count:
            return None
        return rows[table.cursor_row].queue

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        queue = self.highlighted()
        if queue is not None:
            self.app.push_screen(QueueScreen(self.calls, queue))


class QueueScreen(_Polled):
    """One queue: its figures now, the last hour per minute, its error groups and events."""

    def __init__(self, calls: QueueCalls, queue: str) -> None:
        super().__init__(calls)
        self.queue = queue
        self.detail: QueueDetail | None = None

    def compose(self) -> ComposeResult:
        title = Text("Queue ", style="bold")
        title.append_text(lit(self.queue, "bold"))
        with VerticalScroll(id="queue-scroll"):
            yield Static(title, id="queue-body")
        yield Static("reading…", id="queue-status", classes="queues-status")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#queue-scroll", VerticalScroll).focus()  # ↑ ↓ pgup pgdn scroll

    def start_read(self) -> None:
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, group="queue")
    def _read(self) -> None:
        try:
            detail = self.calls.queue(self.queue)
        except Exception as exc:
            self.post_message(QueueRead(None, _said(exc)))
        else:
            self.post_message(QueueRead(detail))

    def on_queue_read(self, message: QueueRead) -> None:
        self.reading = False
        self.reads += 1
        if message.detail is None:
            self._status(lit(f"could not read the queue: {message.error}", "red"))
            return
        self.detail = message.detail
        width = max(40, self.app.size.width - 2)  # (the scrollbar's columns)
        body = self.query_one("#queue-body", Static)
        body.update(Group(*queue_renderables(self.detail, width)))
        self._status(Text("↑ ↓ scroll · ctrl+r refresh · esc back to the queues", style="dim"))


def _said(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, LeasectlError) else f"{type(exc).__name__}: {exc}"
