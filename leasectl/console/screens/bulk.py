"""The confirmation of an action on every job the find screen's filter matches: the count (exact,
"at least N" when counting stopped at its cap, or "not known" when it ran out of time), the
filter, the first jobs, how it runs, and a reason."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label, Static

from leasectl.console import view
from leasectl.console.screens.dialog import ReasonDialog, settings_fields
from leasectl.console.widgets import LiteralInput
from leasectl.core.actions import action_info
from leasectl.core.bulk import DEFAULT_BATCH, BulkPlan
from leasectl.core.filters import JobFilter
from leasectl.present.text import lit

LISTED = 5


def count_phrase(plan: BulkPlan | None) -> str:
    if plan is None:
        return "all matching jobs (count not known)"
    noun = "job" if plan.count == 1 and not plan.capped else "jobs"
    return f"{'at least ' if plan.capped else ''}{plan.count:,} {noun}"


class BulkConfirmScreen(ReasonDialog):
    """Dismisses with the reason typed, or None when cancelled."""

    def __init__(
        self, action: str, flt: JobFilter, plan: BulkPlan | None, count_error: str | None
    ) -> None:
        super().__init__()
        self.action = action
        self.filter = flt
        self.plan = plan
        self.count_error = count_error
        self.takes_settings = action_info(action).settings

    @property
    def title_text(self) -> str:
        return f"{action_info(self.action).verb} {count_phrase(self.plan)} matching the filter?"

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="-settings" if self.takes_settings else ""):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            with VerticalScroll(id="confirm-body"):
                yield Static(self._filter_text(), id="bulk-filter")
                yield Static(self._count_text(), id="bulk-count")
                yield Static(self._how(), id="confirm-condition")
            yield Label("Reason (recorded in job_events with your name and the filter):")
            yield LiteralInput(placeholder="e.g. payments gateway back, INC-1234", id="reason")
            if self.takes_settings:
                yield from settings_fields()
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                yield self.hint()
                yield Button(
                    f"{action_info(self.action).verb} all", variant="warning", id="confirm-ok"
                )
                # "Back", not "Cancel": beside "Cancel all" it would read as the action.
                yield Button("Back" if self.action == "cancel" else "Cancel", id="confirm-cancel")

    def _filter_text(self) -> Text:
        text = Text("Filter: ", style="bold")
        text.append_text(lit(view.cut(view.find_text(self.filter), 300)))
        if self.plan is not None and self.plan.filter.states != self.filter.states:
            states = ",".join(s.value for s in sorted(self.plan.filter.states))
            text.append(f"\n{self.action} applies to state:{states} only", "dim")
        return text

    def _count_text(self) -> Text:
        text = Text()
        if self.plan is None:
            text.append("Count not known: ", style="bold yellow")
            text.append_text(lit(self.count_error or "counting did not finish", "yellow"))
            return text
        if self.plan.capped:
            text.append(
                f"At least {self.plan.count:,}: counting stopped there (a count of all would "
                "scan too long).\n",
                style="yellow",
            )
        for job in self.plan.sample.jobs[:LISTED]:
            text.append(f"#{job.id}", style="bold")
            text.append_text(lit(f"  {view.cut(job.queue, 30)}  {job.status}"))
            text.append(f"  attempt {job.attempts}/{job.max_attempts}\n", style="dim")
        if self.plan.count > LISTED:
            more = self.plan.count - LISTED
            text.append(f"… and {'at least ' if self.plan.capped else ''}{more:,} more", "dim")
        text.rstrip()
        return text

    def _how(self) -> Text:
        text = Text()
        text.append(f"In batches of {DEFAULT_BATCH}, newest first: ", style="bold")
        text.append(
            "each job guarded on the state just read and audited. Jobs that moved are skipped "
            "and reported, never forced. esc stops after the batch in flight; the batches "
            "done stay done."
        )
        return text
