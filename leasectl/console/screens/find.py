"""`f`: find jobs as `leasectl list` finds them, with the same filter (core/filters) and the
same read (History.list_jobs, under the same statement timeout), a page at a time.

The search runs in a worker thread and reports with a message; the screen never waits on the
database. `esc` while a search runs cancels it (its answer, when it comes, is dropped; the
statement timeout ends the statement), else closes the screen.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from leasectl.console import view
from leasectl.console.messages import FindFailed, FindLoaded
from leasectl.console.widgets import LiteralInput
from leasectl.console.widgets.tables import FindTable, RowContext
from leasectl.core.errors import LeasectlError, QueryTimeout
from leasectl.core.filters import JobFilter, JobPage
from leasectl.core.literal import visible
from leasectl.core.models import PanelJob
from leasectl.present.text import count_text, lit

PAGE = 50

Search = Callable[[JobFilter, int | None, int], JobPage]


def timeout_text() -> str:
    return "no answer in time: the filter had to scan; narrow it (since:, queue:, state:)"


class FindScreen(Screen[str]):
    """Dismisses with the filter text last typed (the next `f` starts from it)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Cancel / back"),
        Binding("n", "next_page", "Next page"),
        Binding("p", "previous_page", "Previous page"),
        Binding("slash", "edit", "Edit filter"),
        Binding("c", "act('cancel')", "Cancel job"),
        Binding("D", "act('delete')", "Delete job"),
    ]

    def __init__(
        self,
        search: Search,
        open_detail: Callable[[int], None],
        text: str = "",
        page: int = PAGE,
        act: Callable[[view.Action, list[PanelJob]], None] | None = None,
    ) -> None:
        """``act`` confirms and runs a guarded action on a found job as its page shows it."""
        super().__init__()
        self.search = search
        self.open_detail = open_detail
        self.act = act
        self.text = text
        self.limit = page
        self.filter: JobFilter | None = None
        # The keyset pages visited: the ``after`` of each, the first page's None.
        self.afters: list[int | None] = [None]
        self.page: JobPage | None = None
        self.searches = 0  # the number of the latest search; an answer to another is stale
        self.running = False
        self._asked: tuple[JobFilter, list[int | None]] = (JobFilter(), [None])

    def compose(self) -> ComposeResult:
        yield Static(Text(" Find jobs", style="bold"), id="find-title")
        with Vertical(id="find-dialog"):
            yield LiteralInput(
                value=self.text, placeholder="state:failed queue:payments since:1h", id="find-input"
            )
            yield Static("", id="find-error")
            yield Static(Text(view.FIND_HINT, style="dim"), id="find-hint")
        yield Static("", id="find-status")
        yield FindTable(id="find-results")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#find-input", Input).focus()

    # -- searching --------------------------------------------------------------------------

    @on(Input.Submitted, "#find-input")
    def _submit(self, event: Input.Submitted) -> None:
        self.text = event.value
        try:
            flt = view.parse_find(event.value)
        except (view.FilterError, LeasectlError) as exc:
            self._show_error(str(exc))
            return
        self._start(flt, [None])

    def _start(self, flt: JobFilter, afters: list[int | None]) -> None:
        """Search for the page after ``afters[-1]``; once it is read, ``afters`` are the
        pages visited (a search that fails or is cancelled leaves the page shown as it is)."""
        self.searches += 1
        self.running = True
        self._asked = (flt, afters)
        self._show_error(None)
        self._status(Text("searching… (esc cancels)", style="dim"))
        self._run(flt, afters[-1], self.searches)

    @work(thread=True, exclusive=True, exit_on_error=False, group="find")
    def _run(self, flt: JobFilter, after: int | None, search: int) -> None:
        try:
            page = self.search(flt, after, self.limit)
        except QueryTimeout:
            self.post_message(FindFailed(timeout_text(), search))
        except LeasectlError as exc:
            self.post_message(FindFailed(str(exc), search))
        except Exception as exc:
            self.post_message(FindFailed(f"{type(exc).__name__}: {exc}", search))
        else:
            self.post_message(FindLoaded(page, search))

    def on_find_loaded(self, message: FindLoaded) -> None:
        if message.search != self.searches or not self.running:
            return  # cancelled, or a newer search is running
        self.running = False
        self.filter, self.afters = self._asked
        self.page = page = message.page
        table = self.query_one(FindTable)
        ctx = RowContext(now=page.db_now, selected=frozenset(), owners={}, risk_window=timedelta(0))
        table.show(page.jobs, ctx)
        table.move_cursor(row=0, animate=False)
        self._status(self._page_text(page))
        if page.jobs:
            table.focus()

    def on_find_failed(self, message: FindFailed) -> None:
        if message.search != self.searches or not self.running:
            return
        self.running = False
        self._show_error(message.error)
        self._status(self._page_text(self.page) if self.page is not None else Text(""))

    def _page_text(self, page: JobPage) -> Text:
        n = len(self.afters)
        text = Text(f" page {n}: ")
        if not page.jobs:
            text.append("no job matches" if n == 1 else "no more jobs", style="bold")
        else:
            text.append(f"{count_text(len(page.jobs))} jobs, ids {page.jobs[0].id} to ")
            text.append(f"{page.jobs[-1].id}, newest first")
        more = []
        if page.next_after is not None:
            more.append("n next page")
        if n > 1:
            more.append("p back")
        more.append("enter detail")
        text.append("   " + " · ".join(more), style="dim")
        text.append("   filter: ", style="dim")
        text.append_text(lit(view.find_text(page.filter) or "all jobs", "dim"))
        return text

    # -- keys -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next_page", "previous_page", "act") and isinstance(self.focused, Input):
            return False  # the keys type into the filter
        return True

    def action_act(self, name: str) -> None:
        """Cancel or delete the highlighted job as this page shows it (guarded on that state:
        a job that moved since the page was read is skipped). Search again to see the change."""
        job = self.query_one(FindTable).highlighted()
        if self.act is not None and job is not None:
            self.act(view.Action(name), [view.as_panel_job(job)])

    def action_next_page(self) -> None:
        if self.running or self.page is None or self.page.next_after is None:
            return
        assert self.filter is not None
        self._start(self.filter, [*self.afters, self.page.next_after])

    def action_previous_page(self) -> None:
        if self.running or len(self.afters) < 2 or self.filter is None:
            return
        self._start(self.filter, self.afters[:-1])

    def action_edit(self) -> None:
        self.query_one("#find-input", Input).focus()

    def action_back(self) -> None:
        if self.running:
            self.running = False  # its answer, when it comes, is dropped
            self._status(Text("search cancelled", style="yellow"))
            return
        self.dismiss(self.text)

    @on(DataTable.RowSelected, "#find-results")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        job = self.query_one(FindTable).item_at(event.cursor_row)
        if job is not None:
            self.open_detail(job.id)

    # -- lines ------------------------------------------------------------------------------

    def _show_error(self, error: str | None) -> None:
        widget = self.query_one("#find-error", Static)
        widget.set_class(error is not None, "-shown")
        # One line: a database error may hold newlines (escaped, as every untrusted text).
        line = lit(visible(error), "red", no_wrap=True, overflow="ellipsis") if error else ""
        widget.update(line)

    def _status(self, text: Text) -> None:
        self.query_one("#find-status", Static).update(text)
