"""The confirmation of a guarded action: how many jobs, the exact condition, and a reason."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from leasectl.console import view
from leasectl.console.view import Action, Verdict
from leasectl.console.widgets import LiteralInput
from leasectl.core.models import JobStatus, OwnerHealth, PanelJob
from leasectl.present.text import lit
from leasectl.present.times import countdown

LISTED = 6


class ConfirmScreen(ModalScreen[str | None]):
    """Dismisses with the reason typed, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        action: Action,
        jobs: Sequence[PanelJob],
        now: datetime,
        owners: dict[str, OwnerHealth],
        *,
        note: str | None = None,
    ) -> None:
        super().__init__()
        self.action = action
        self.jobs = list(jobs)
        self.now = now
        self.owners = owners
        self.note = note

    @property
    def title_text(self) -> str:
        n = len(self.jobs)
        noun = "job" if n == 1 else "jobs"
        if self.action is Action.REQUEUE_EXPIRED:
            return f"Requeue all {n} expired {noun} in the current filter?"
        return f"{self.action.verb} {n} {noun}?"

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            # The long part scrolls; the reason and the buttons stay in sight at any size.
            with VerticalScroll(id="confirm-body"):
                yield Static(self._jobs_text(), id="confirm-jobs")
                yield Static(self._condition(), id="confirm-condition")
                warnings = self._warnings()
                if warnings is not None:
                    yield Static(warnings, id="confirm-warnings")
            yield Label("Reason (recorded in job_events with your name):")
            yield LiteralInput(placeholder="e.g. worker w-7 OOM-killed, INC-1234", id="reason")
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                verb = "Mark stuck" if self.action is Action.MARK_STUCK else "Requeue"
                yield Button(f"{verb} {len(self.jobs)}", variant="warning", id="confirm-ok")
                yield Button("Cancel", id="confirm-cancel")

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    def _jobs_text(self) -> Text:
        text = Text()
        for job in self.jobs[:LISTED]:
            text.append(f"#{job.id}", style="bold")
            text.append_text(lit(f"  {job.queue}  {job.status}"))
            if job.status == JobStatus.PROCESSING:
                text.append(f"  lease {countdown(self.now, job.lease_until)}")
            text.append(f"  attempt {job.attempts}/{job.max_attempts}", style="dim")
            if job.lease_owner:
                text.append(f"  owner {view.short_owner(job.lease_owner, 28)}", style="dim")
            text.append("\n")
        if len(self.jobs) > LISTED:
            text.append(f"… and {len(self.jobs) - LISTED} more\n", style="dim")
        if self.note:
            text.append(self.note + "\n", style="italic")
        text.rstrip()
        return text

    def _condition(self) -> Text:
        text = Text()
        text.append("Checked at execution, per job, in one guarded statement: ", style="bold")
        text.append(f"the job {view.condition_text(self.action)} ")
        text.append(
            "Jobs that moved since you looked are skipped and reported, never forced.",
            style="dim",
        )
        return text

    def _warnings(self) -> Text | None:
        lines: list[str] = []
        blocked: dict[str, int] = {}
        for job in self.jobs:
            reason = view.eligible(self.action, job, self.now)
            if reason is not None:
                blocked[reason] = blocked.get(reason, 0) + 1
        for reason, n in blocked.items():
            lines.append(f"{n} will be skipped as seen now: {reason}")
        if self.action is not Action.MARK_STUCK:
            alive = [
                j
                for j in self.jobs
                if j.status == JobStatus.PROCESSING
                and view.diagnose(j, self.owners).verdict is Verdict.ALIVE
            ]
            if alive:
                if len(self.jobs) == 1:
                    which = "it belongs"
                elif len(alive) == 1:
                    which = "1 of them belongs"
                else:
                    which = f"{len(alive)} of them belong"
                lines.append(
                    f"{which} to an owner that is alive (lease expired but worker up): it may "
                    "still be running; a requeue can run it twice"
                )
        if not lines:
            return None
        return Text("\n".join("⚠ " + line for line in lines), style="yellow")

    @on(Input.Submitted, "#reason")
    @on(Button.Pressed, "#confirm-ok")
    def _submit(self) -> None:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            error = self.query_one("#confirm-error", Static)
            error.update(Text("A reason is required: it goes to the audit log.", style="red"))
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(reason)

    @on(Button.Pressed, "#confirm-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
