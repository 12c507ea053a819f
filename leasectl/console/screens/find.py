"""`f`: find jobs as `leasectl list` finds them, with the same filter (core/filters) and the
same read (History.list_jobs, under the same statement timeout), a page at a time.

The search runs in a worker thread and reports with a message; the screen never waits on the
database. `esc` while a search runs cancels it (its answer, when it comes, is dropped; the
statement timeout ends the statement), else closes the screen.

`R` / `S` act on every job the filter of the results shown matches (requeue, mark stuck): a
worker thread counts them (bounded: ``BULK_COUNT_CAP``, the statement timeout), a confirmation
shows the count and the filter and asks a reason, and another worker runs the action in
batches (``runtime.bulk``), reporting progress; `esc` stops it after the batch in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import ClassVar, Protocol

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from leasectl.console import view
from leasectl.console.messages import (
    BulkCounted,
    BulkFailed,
    BulkFinished,
    BulkProgressed,
    FindFailed,
    FindLoaded,
)
from leasectl.console.screens.bulk import BulkConfirmScreen
from leasectl.console.widgets import LiteralInput
from leasectl.console.widgets.tables import FindTable, RowContext
from leasectl.core.actions import ACTIONS, NO_SETTINGS, JobSettings, OperatorAction, action_info
from leasectl.core.bulk import BulkPlan, BulkProgress, BulkResult
from leasectl.core.errors import LeasectlError, QueryTimeout
from leasectl.core.filters import JobFilter, JobPage
from leasectl.core.literal import visible
from leasectl.core.models import PanelJob
from leasectl.present.skips import skip_reason
from leasectl.present.text import count_text, lit

PAGE = 50
# The confirmation's count stops here ("at least N"): a count of millions scans too long.
BULK_COUNT_CAP = 100_000

# The keys the results keep (as BINDINGS, which the footer shows); any other printable key
# there goes to the filter box.
RESULT_KEYS = {
    **{a.key: f"act('{a.name}')" for a in ACTIONS.values()},
    **{a.bulk_key: f"bulk('{a.name}')" for a in ACTIONS.values() if a.bulk_key is not None},
    "P": "pause",
    "L": "limit",
    "n": "next_page",
    "p": "previous_page",
}

Search = Callable[[JobFilter, int | None, int], JobPage]


class BulkSource(Protocol):
    """What "act on all matching" needs of the console's source."""

    def bulk_plan(self, action: str, flt: JobFilter, cap: int) -> BulkPlan: ...

    def bulk_run(
        self,
        action: str,
        flt: JobFilter,
        reason: str,
        stop: threading.Event,
        progress: Callable[[BulkProgress], None],
        settings: JobSettings = NO_SETTINGS,
    ) -> BulkResult: ...


def timeout_text() -> str:
    return "no answer in time: the filter had to scan; narrow it (since:, queue:, state:)"


class FindScreen(Screen[str]):
    """Dismisses with the filter text last typed (the next `f` starts from it)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # The footer (compact) fits 80 columns: n and p are said on the page's own line, "all"
        # is every job the filter matches, and r, s, P, D are in help.
        Binding("escape", "back", "Back"),
        Binding("slash", "edit", "Filter"),
        Binding("f", "edit", "Filter", show=False),
        Binding("tab", "results", "Results"),
        # In the filter box the arrows move the results' cursor: the box keeps the focus.
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("pagedown", "cursor(10)", "Page down", show=False),
        Binding("pageup", "cursor(-10)", "Page up", show=False),
        Binding("n", "next_page", "Next page", show=False),
        Binding("p", "previous_page", "Previous page", show=False),
        # Each operator action's keys (core/actions.py); the footer shows cancel's of them.
        *(
            Binding(a.key, f"act('{a.name}')", a.verb, show=a.action is OperatorAction.CANCEL)
            for a in ACTIONS.values()
        ),
        Binding("P", "pause", "Pause/resume", show=False),
        Binding("L", "limit", "Limit", show=False),
        # The verb's last word ("Stuck all", not "Mark stuck all"): the footer fits 80 columns.
        *(
            Binding(a.bulk_key, f"bulk('{a.name}')", f"{a.verb.split()[-1].title()} all")
            for a in ACTIONS.values()
            if a.bulk_key is not None
        ),
    ]

    def __init__(
        self,
        search: Search,
        open_detail: Callable[[int], None],
        text: str = "",
        page: int = PAGE,
        act: Callable[[view.Action, list[PanelJob]], None] | None = None,
        *,
        bulk: BulkSource | None = None,
        read_only: Callable[[], str | None] = lambda: None,
        pause: Callable[[str | None], None] | None = None,
        limit: Callable[[str | None], None] | None = None,
    ) -> None:
        """``act`` confirms and runs a guarded action on a found job as its page shows it;
        ``pause`` confirms and pauses (or resumes) a queue; ``limit`` sets or lifts its limits."""
        super().__init__()
        self.pause = pause
        self.set_limits = limit
        self.search = search
        self.bulk = bulk
        self.read_only = read_only
        # The action on all matching that runs (its name), and how to stop it.
        self.bulk_running: str | None = None
        self.bulk_counting = False
        self.bulk_stop = threading.Event()
        self.bulk_result: BulkResult | None = None
        self.open_detail = open_detail
        self.act = act
        self.text = text
        self.limit = page
        self.filter: JobFilter | None = None
        # The keyset pages visited: the ``after`` of each, the first page's None.
        self.afters: list[int | None] = [None]
        self.page: JobPage | None = None
        self.searches = 0  # the number of the latest search; an answer to another is stale
        # Whether keys type into the filter box (else they are the results' keys): kept here,
        # not read off the focus, which moves only after the keys already sent.
        self.in_box = True
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
        yield Static("", id="find-bulk")
        yield FindTable(id="find-results")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#find-input", Input).focus()

    def on_unmount(self) -> None:
        self.bulk_stop.set()  # the console quits: a run stops after the batch in flight

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
        # The focus stays in the filter box: what is typed next refines the filter (a person
        # types on at once); tab (or a click) moves to the results, whose letters act.

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
        if page.jobs:
            more.append("↑↓ move · tab to act" if self.in_box else "enter detail · esc back")
        if page.next_after is not None:
            more.append("n next page")
        if n > 1:
            more.append("p back")
        text.append("   " + " · ".join(more), style="dim")
        text.append("   filter: ", style="dim")
        text.append_text(lit(view.find_text(page.filter) or "all jobs", "dim"))
        return text

    # -- keys -------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if (
            action in ("next_page", "previous_page", "act", "bulk", "pause", "limit")
            and self.in_box
        ):
            return False  # the keys type into the filter
        if action in ("cursor", "results") and not self.in_box:
            return False  # the results have their own arrows; tab goes back to the filter
        return True

    def _typing(self, in_box: bool) -> None:
        if in_box != self.in_box:
            self.in_box = in_box
            self.refresh_bindings()
            if self.page is not None and not (self.running or self.bulk_counting):
                self._status(self._page_text(self.page))  # its key hints follow the focus

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self._typing(isinstance(event.widget, Input))

    async def on_key(self, event: events.Key) -> None:
        """Printable keys type into the filter box. Here come those the box did not take: on
        the results, their own keys act (here, in the order typed: a binding would be looked up
        only after later keys of a burst had moved the focus); any other goes back to the box,
        typed there; and keys on their way to the results when the focus moved are typed."""
        if not event.is_printable or not event.character:
            return
        action = None if self.in_box else RESULT_KEYS.get(event.key)
        if event.key == "question_mark" and not self.in_box:
            return  # help, as everywhere
        event.stop()
        if action is not None:
            await self.run_action(action)
            return
        typed = self.in_box or event.key not in ("f", "slash")  # f and / only lead back
        box = self.query_one("#find-input", Input)
        box.focus()
        self._typing(True)
        if typed:
            box.cursor_position = len(box.value)
            box.insert_text_at_cursor(event.character)

    def action_results(self) -> None:
        self._typing(False)
        self.query_one(FindTable).focus()

    def action_cursor(self, rows: int) -> None:
        table = self.query_one(FindTable)
        if table.row_count:
            table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + rows)))

    def action_act(self, name: str) -> None:
        """Act on the highlighted job as this page shows it (guarded on that state: a job that
        moved since the page was read is skipped). Search again to see the change."""
        job = self.query_one(FindTable).highlighted()
        action = view.Action(name)
        if job is None:
            self.notify(f"Nothing to {action.verb.lower()}: no job found here; search first.")
        elif self.act is not None:
            self.act(action, [view.as_panel_job(job)])

    def _queue(self) -> str | None:
        """The filter's queue when it names one, else the highlighted job's."""
        job = self.query_one(FindTable).highlighted()
        queue = self.filter.queue if self.filter is not None else None
        return queue or (job.queue if job is not None else None)

    def action_pause(self) -> None:
        """Pause (or resume) the filter's queue when it names one, else the highlighted
        job's."""
        queue = self._queue()
        if queue is None:
            self.notify("Nothing to pause: give queue: in the filter, or find a job of it.")
        elif self.pause is not None:
            self.pause(queue)

    def action_limit(self) -> None:
        """Set or lift the limits of the filter's queue when it names one, else the highlighted
        job's."""
        queue = self._queue()
        if queue is None:
            self.notify("Nothing to limit: give queue: in the filter, or find a job of it.")
        elif self.set_limits is not None:
            self.set_limits(queue)

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
        if self.bulk_running is not None:
            if not self.bulk_stop.is_set():
                self.bulk_stop.set()
                self._bulk_line(Text(" stopping after the batch in flight…", style="yellow"))
            return
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

    # -- act on all matching ----------------------------------------------------------------

    def action_bulk(self, action: str) -> None:
        verb = action_info(action).past
        refused = self.read_only()
        if self.bulk is None or refused is not None:
            self.notify(f"Refused: the console is read-only ({refused}).", severity="warning")
            return
        if self.bulk_running is not None or self.bulk_counting:
            self.notify("An action on all matching runs already: esc stops it.")
            return
        if self.filter is None:
            self._show_error("search first: the jobs the results' filter matches are the ones")
            return
        if not self.filter.parts():
            self._show_error(
                f"give a filter first: all matching never means every job (not {verb})"
            )
            return
        self.bulk_counting = True
        self._show_error(None)
        self._status(Text(f"counting the jobs to be {verb}…", style="dim"))
        self._count(action, self.filter)

    @work(thread=True, exclusive=True, exit_on_error=False, group="bulk-count")
    def _count(self, action: str, flt: JobFilter) -> None:
        assert self.bulk is not None
        try:
            plan = self.bulk.bulk_plan(action, flt, BULK_COUNT_CAP)
        except QueryTimeout:
            self.post_message(BulkCounted(action, flt, None, timeout_text()))
        except LeasectlError as exc:
            self.post_message(BulkFailed(action, str(exc)))
        except Exception as exc:
            self.post_message(BulkFailed(action, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(BulkCounted(action, flt, plan))

    def on_bulk_counted(self, message: BulkCounted) -> None:
        self.bulk_counting = False
        if message.plan is not None and message.plan.count == 0:
            verb = action_info(message.action).past
            self._status(Text(f"no job matching the filter can be {verb}", style="yellow"))
            return
        self._status(self._page_text(self.page) if self.page is not None else Text(""))

        screen = BulkConfirmScreen(message.action, message.filter, message.plan, message.error)

        def confirmed(reason: str | None) -> None:
            if reason is not None:
                self._start_bulk(message.action, message.filter, reason, screen.settings)

        self.app.push_screen(screen, callback=confirmed)

    def _start_bulk(self, action: str, flt: JobFilter, reason: str, settings: JobSettings) -> None:
        self.bulk_running = action
        self.bulk_stop = threading.Event()
        self._bulk_line(Text(f" {action_info(action).past}: starting… (esc stops)", style="dim"))
        self._run_bulk(action, flt, reason, self.bulk_stop, settings)

    @work(thread=True, exclusive=True, exit_on_error=False, group="bulk")
    def _run_bulk(
        self, action: str, flt: JobFilter, reason: str, stop: threading.Event, settings: JobSettings
    ) -> None:
        assert self.bulk is not None

        def progress(p: BulkProgress) -> None:
            self.post_message(BulkProgressed(action, p))

        try:
            result = self.bulk.bulk_run(action, flt, reason, stop, progress, settings)
        except LeasectlError as exc:
            self.post_message(BulkFailed(action, str(exc)))
        except Exception as exc:
            self.post_message(BulkFailed(action, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(BulkFinished(result))

    def on_bulk_progressed(self, message: BulkProgressed) -> None:
        if self.bulk_running is None:
            return
        p = message.progress
        text = Text(
            f" {action_info(message.action).past} {p.changed:,}, skipped {p.skipped:,} of "
            f"{p.matched:,} read, batch {p.batches}"
        )
        text.append(
            "   stopping after this batch…" if self.bulk_stop.is_set() else "   esc stops",
            style="yellow" if self.bulk_stop.is_set() else "dim",
        )
        self._bulk_line(text)

    def on_bulk_finished(self, message: BulkFinished) -> None:
        self.bulk_running = None
        self.bulk_result = result = message.result
        verb = action_info(result.action).past
        line = (
            f"{verb} {result.changed:,}, skipped {len(result.skipped):,} of "
            f"{result.matched:,} matching"
        )
        if not result.complete:
            line += "; stopped (the batches done stay done; the rest still match)"
        text = Text(
            " " + line, style="green" if result.complete and not result.skipped else "yellow"
        )
        if result.skipped:
            first = result.skipped[0]
            text.append(f"   #{first.id}: ", style="dim")
            text.append_text(lit(view.cut(skip_reason(first), 80), "dim"))
        self._bulk_line(text)
        self.notify(line, severity="information" if result.complete else "warning")
        if self.filter is not None:
            self._start(self.filter, [None])  # the page as it is now

    def on_bulk_failed(self, message: BulkFailed) -> None:
        self.bulk_counting = False
        self.bulk_running = None
        self._show_error(message.error)
        self._status(self._page_text(self.page) if self.page is not None else Text(""))

    # -- lines ------------------------------------------------------------------------------

    def _show_error(self, error: str | None) -> None:
        widget = self.query_one("#find-error", Static)
        widget.set_class(error is not None, "-shown")
        # One line: a database error may hold newlines (escaped, as every untrusted text).
        line = lit(visible(error), "red", no_wrap=True, overflow="ellipsis") if error else ""
        widget.update(line)

    def _bulk_line(self, text: Text) -> None:
        widget = self.query_one("#find-bulk", Static)
        widget.add_class("-shown")
        widget.update(text)

    def _status(self, text: Text) -> None:
        self.query_one("#find-status", Static).update(text)
