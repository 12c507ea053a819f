"""The console's one main screen: status, summary and the five panels."""

from __future__ import annotations

from typing import ClassVar, cast

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Vertical
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from leasectl.console import view
from leasectl.console.contracts import MainHost
from leasectl.console.view import Action
from leasectl.console.widgets import show_text
from leasectl.console.widgets.bars import PANEL_NAMES, StatusBar, Summary, banner_text, tabs_text
from leasectl.console.widgets.tables import (
    FailedTable,
    JobTable,
    OwnersTable,
    PanelTable,
    PendingTable,
    ProcessingTable,
    StuckTable,
)
from leasectl.core.actions import ACTIONS as OPERATOR_ACTIONS
from leasectl.core.actions import OperatorAction
from leasectl.core.counts import BoundedCount
from leasectl.core.models import ConsoleCounts, JobStatus, PanelJob, Snapshot
from leasectl.present.headline import headline
from leasectl.present.styles import LeaseState
from leasectl.present.text import count_text

ACTIONS = {"act", "requeue_expired", "toggle_pause", "limit"}
# The operator actions (core/actions.py) the footer names; the others' keys are in help.
IN_FOOTER = {OperatorAction.REQUEUE, OperatorAction.MARK_STUCK}
PANELS = ("pending", "processing", "stuck", "owners", "failed")


def _plus_expired(counts: ConsoleCounts) -> BoundedCount:
    """The Expired & Stuck panel's count: expired leases (exact) and Stuck jobs (bounded)."""
    stuck = counts.bounded("stuck")
    estimate = None if stuck.estimate is None else counts.expired + stuck.estimate
    return BoundedCount(counts.expired + stuck.value, stuck.capped, estimate)


def panel_counts(snap: Snapshot) -> list[tuple[BoundedCount, BoundedCount]]:
    """Each panel's (matching the filter, in all): what the filter matches (the panels list
    up to ``snap.limit`` of it) and what there is unfiltered. Pending and Stuck counts may be
    lower bounds (``capped``: counted up to a cap); the others are exact."""
    m, t = snap.matching, snap.totals
    owners_total = len(snap.all_owners) or len(snap.owners)
    owners = len(snap.owners)
    failed = len(snap.failed)
    return [
        (m.bounded("pending"), t.bounded("pending")),
        (BoundedCount(m.processing, False), BoundedCount(t.processing, False)),
        (_plus_expired(m), _plus_expired(t)),
        (BoundedCount(owners, False), BoundedCount(max(owners_total, owners), False)),
        # The Failed panel counts what it found among the last ``failed_scan`` finished jobs.
        (BoundedCount(failed, False), BoundedCount(failed, False)),
    ]


ACTION_KEYS = {
    **{a.key: a.verb.lower() for a in OPERATOR_ACTIONS.values()},
    "R": "requeue all expired",
    "P": "pause or resume",
    "L": "limit",
}


class MainScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter"),
        *(
            Binding(a.key, f"act('{a.name}')", a.verb, show=a.action in IN_FOOTER)
            for a in OPERATOR_ACTIONS.values()
        ),
        Binding("R", "requeue_expired", "Requeue expired"),
        Binding("P", "toggle_pause", "Pause/resume"),
        Binding("L", "limit", "Limit", show=False),
        Binding("S", "schedules", "Schedules", show=False),
        Binding("Q", "queues", "Queues", show=False),
        Binding("space", "toggle_select", "Select", show=False),
        Binding("escape", "clear", "Clear selection, else filter", show=False),
        Binding("ctrl+r", "refresh", "Refresh", show=False),
        Binding("tab", "next_panel", "Next panel", show=False, priority=True),
        Binding("shift+tab", "previous_panel", "Previous panel", show=False, priority=True),
        Binding("1", "panel(0)", "Pending", show=False),
        Binding("2", "panel(1)", "Processing", show=False),
        Binding("3", "panel(2)", "Stuck", show=False),
        Binding("4", "panel(3)", "Owners", show=False),
        Binding("5", "panel(4)", "Failed", show=False),
        Binding("f", "find", "Find"),
    ]

    def __init__(self, host: MainHost) -> None:
        super().__init__()
        self.host = host
        # Below 120 columns the panels no longer fit side by side: show one at a time.
        self.HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
        self.active = 1
        # Whether the operator chose the panel (1-5, tab): until then, and again under a new
        # filter, an empty panel gives the focus to the first one with jobs (see _settle).
        self.picked = False
        self._settled_for: view.ConsoleFilter | None = None
        self._focusing: Widget | None = None  # the table activate() last focused, until it is
        self._titles_shown: dict[int, tuple[str, str]] = {}

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Static(id="banner")
        yield Static(id="headline")
        yield Summary(id="summary")
        yield Static(id="tabs")
        with Container(id="panels"):
            yield from self._panel("pending", PendingTable(id="pending"))
            yield from self._panel("processing", ProcessingTable(id="processing"))
            yield from self._panel("stuck", StuckTable(id="stuck"))
            yield from self._panel("owners", OwnersTable(id="owners"))
            yield from self._panel("failed", FailedTable(id="failed"))
        # Compact (one space between keys, Textual's own style), the footer holds the keys an
        # operator acts with, find and help within 80 columns; q (quit, as everywhere), the
        # panel keys and the rest are in help (?) and the command palette.
        yield Footer(compact=True)

    @staticmethod
    def _panel(name: str, table: Widget) -> ComposeResult:
        with Vertical(id=f"{name}-panel", classes="panel"):
            yield table

    def on_mount(self) -> None:
        self.activate(self.active)
        self.refresh_view(full=True)
        self.host.start()

    def on_screen_resume(self) -> None:
        self.host.resume_polling()

    # -- panels -------------------------------------------------------------------------------

    @property
    def tables(self) -> list[PanelTable[object]]:
        return [cast("PanelTable[object]", self.query_one(f"#{n}", PanelTable)) for n in PANELS]

    def activate(self, index: int) -> None:
        self.active = index % len(PANELS)
        for i, panel in enumerate(self.query(".panel")):
            panel.set_class(i == self.active, "-active")
        self._focusing = self.tables[self.active]
        self._focusing.focus()
        self._show_tabs()

    def action_panel(self, index: int) -> None:
        self.picked = True
        self.activate(index)

    def action_next_panel(self) -> None:
        self.picked = True
        self.activate(self.active + 1)

    def action_previous_panel(self) -> None:
        self.picked = True
        self.activate(self.active - 1)

    def _settle(self, snap: Snapshot) -> None:
        """Keys act on the highlighted row: unless the operator chose a panel, an empty one
        hands the focus to the first panel with jobs (Pending, Processing, Stuck, Failed), so
        that a row is highlighted from start-up and after a filter."""
        if self._settled_for != self.host.filter:
            self._settled_for = self.host.filter
            self.picked = False
        if self.picked or self.tables[self.active].row_count:
            return
        rows = (snap.pending, snap.processing, snap.stuck, (), snap.failed)
        first = next((i for i, listed in enumerate(rows) if listed), None)
        if first is not None:
            self.activate(first)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if self._focusing is not None:
            # A focus asked for before the last activate() arrives late: it is not a choice.
            if event.widget is self._focusing:
                self._focusing = None
            return
        for i, table in enumerate(self.tables):
            if event.widget is table and i != self.active:
                self.active = i
                self.picked = True  # a click
                for j, panel in enumerate(self.query(".panel")):
                    panel.set_class(j == i, "-active")
                self._show_tabs()

    def _show_tabs(self) -> None:
        snap = self.host.snapshot
        totals: list[BoundedCount | None] = [None] * len(PANELS)
        if snap is not None:
            totals = [matching for matching, _ in panel_counts(snap)]
        width = self.size.width or None
        show_text(self.query_one("#tabs", Static), tabs_text(self.active, totals, width))

    # -- rendering ----------------------------------------------------------------------------

    def refresh_view(self, *, full: bool) -> None:
        """``full`` after a poll (rows replaced); otherwise a tick (clock-bound cells only)."""
        host = self.host
        status = host.status()
        self.query_one(StatusBar).show(status)
        banner = self.query_one("#banner", Static)
        text = banner_text(status)
        banner.set_class(text is not None, "-shown")
        show_text(banner, text or "")
        snap = host.snapshot
        now = host.db_now()
        worst = headline(snap, now) if now is not None else None  # (ticks too: ages move)
        line = self.query_one("#headline", Static)
        line.set_class(worst is not None, "-shown")
        show_text(line, worst.text if worst is not None else "")
        self.query_one(Summary).show(snap, now, host.filter)
        ctx = host.row_context()
        if snap is None or ctx is None:
            return
        tables = self.tables
        if full:
            tables[0].show(snap.pending, ctx)
            tables[1].show(snap.processing, ctx)
            tables[2].show(snap.stuck, ctx)
            tables[3].show(snap.owners, ctx)
            tables[4].show(snap.failed, ctx)
            self._titles()
            self._settle(snap)
            self._show_tabs()
        else:
            for table in tables:
                table.tick(ctx)

    def _titles(self) -> None:
        snap = self.host.snapshot
        if snap is None:
            return
        shown_rows = (
            len(snap.pending),
            len(snap.processing),
            len(snap.stuck),
            len(snap.owners),
            len(snap.failed),
        )
        orders = (
            "oldest first",
            "soonest expiry first",
            "longest lapsed first",
            None,
            f"newest first, among the last {count_text(snap.failed_scan)} finished",
        )
        for i, (panel, (matching, total), shown, order) in enumerate(
            zip(self.query(".panel"), panel_counts(snap), shown_rows, orders, strict=True)
        ):
            count = str(matching)  # "6,000+" when it is a lower bound
            if snap.filtered and i != 4:  # (Failed: only what the filter kept is read)
                count = f"{count} of {total}"
            if i == 2 and matching.value:  # two kinds of row: say how many of each
                m = snap.matching
                stuck = count_text(m.stuck, m.stuck_capped, m.stuck_estimated)
                count += f" ({count_text(m.expired)} expired + {stuck} Stuck)"
            title = f"{i + 1} {PANEL_NAMES[i]} · {count}"
            order = order or "expired leases first"
            if shown < matching.value or matching.capped:
                sub = f"showing {shown} of {matching}, {order}"
            else:
                sub = order if shown else "none"
            if self._titles_shown.get(i) != (title, sub):  # setting one always redraws
                panel.border_title = title
                panel.border_subtitle = sub
                self._titles_shown[i] = (title, sub)

    # -- selection and targets ---------------------------------------------------------------

    def _focused_job_table(self) -> JobTable | None:
        table = self.tables[self.active]
        return table if isinstance(table, JobTable) else None

    def action_toggle_select(self) -> None:
        table = self._focused_job_table()
        job = table.highlighted() if table is not None else None
        if table is None or job is None:
            self.notify("select jobs in the Pending, Processing or Stuck panel", timeout=3)
            return
        selected = self.host.selected
        if job.id in selected:
            selected.discard(job.id)
        else:
            selected.add(job.id)
        table.action_cursor_down()
        self.refresh_view(full=False)

    def action_clear(self) -> None:
        """`esc`: clear the selection; with none, clear the filter."""
        if self.host.selected:
            self.host.selected.clear()
            self.refresh_view(full=False)
        elif not self.host.filter.empty:
            self.host.apply_filter(view.ConsoleFilter())

    def targets(self) -> list[PanelJob]:
        """The selected jobs (as last polled), else the highlighted one."""
        snap = self.host.snapshot
        if snap is None:
            return []
        selected = self.host.selected
        if selected:
            found: dict[int, PanelJob] = {}
            for job in (*snap.stuck, *snap.processing, *snap.pending, *snap.failed):
                if job.id in selected and job.id not in found:
                    found[job.id] = job
            return sorted(found.values(), key=lambda j: j.id)
        table = self._focused_job_table()
        current = table.highlighted() if table is not None else None
        return [current] if current is not None else []

    def expired_targets(self) -> list[PanelJob]:
        """Every expired lease the console shows under the current filter, by the ticking clock."""
        snap = self.host.snapshot
        now = self.host.db_now()
        if snap is None or now is None:
            return []
        found: dict[int, PanelJob] = {}
        for job in (*snap.stuck, *snap.processing):
            if job.status != JobStatus.PROCESSING or job.id in found:
                continue
            if view.lease_state(job, now, snap.risk_window) is LeaseState.EXPIRED:
                found[job.id] = job
        return sorted(found.values(), key=lambda j: (j.lease_until or now, j.id))

    # -- actions ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ACTIONS and self.host.read_only is not None:
            return False  # hidden from the footer; a key press is refused in on_key
        return True

    def on_key(self, event: events.Key) -> None:
        if event.key in ACTION_KEYS and self.host.read_only is not None:
            event.stop()
            self.host.refuse(ACTION_KEYS[event.key])

    def action_act(self, name: str) -> None:
        """An operator action (core/actions.py) on the selected jobs, else the highlighted one."""
        self.host.request_action(Action(name), self.targets())

    def action_requeue_expired(self) -> None:
        self.host.request_action(Action.REQUEUE_EXPIRED, self.expired_targets())

    def action_toggle_pause(self) -> None:
        """Pause, or resume, the queue of the highlighted job; with none, the filter's queue."""
        table = self._focused_job_table()
        job = table.highlighted() if table is not None else None
        self.host.request_pause(job.queue if job is not None else self.host.filter.queue)

    def action_limit(self) -> None:
        """Set or lift the limits of the highlighted job's queue; with none, the filter's."""
        table = self._focused_job_table()
        job = table.highlighted() if table is not None else None
        self.host.request_limit(job.queue if job is not None else self.host.filter.queue)

    def action_schedules(self) -> None:
        self.host.open_schedules()

    def action_queues(self) -> None:
        self.host.open_queues()

    def action_filter(self) -> None:
        self.host.open_filter()

    def action_find(self) -> None:
        self.host.open_find()

    def action_refresh(self) -> None:
        self.host.poll_now()

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        table = event.data_table  # rows are keyed by position: the table's items say what is there
        if isinstance(table, OwnersTable):
            owner = table.item_at(event.cursor_row)
            if owner is not None:
                self.host.apply_filter(
                    view.ConsoleFilter(queue=self.host.filter.queue, owner=owner.owner)
                )
        elif isinstance(table, JobTable):
            job = table.item_at(event.cursor_row)
            if job is not None:
                self.host.open_detail(job.id)
