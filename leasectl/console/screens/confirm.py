"""The confirmation of a guarded action (how many jobs, the exact condition, and a reason), and
of a queue's pause or resume."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Label, Static

from leasectl.console import view
from leasectl.console.screens.dialog import ReasonDialog, settings_fields
from leasectl.console.view import Action, Verdict
from leasectl.console.widgets import LiteralInput
from leasectl.core.config import format_duration
from leasectl.core.models import JobStatus, OwnerHealth, PanelJob, PausedQueue
from leasectl.present.styles import PAUSED_STYLE
from leasectl.present.text import lit
from leasectl.present.times import countdown

LISTED = 6


class ConfirmScreen(ReasonDialog):
    """Dismisses with the reason typed, or None when cancelled."""

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
        self.takes_settings = action.info.settings

    @property
    def title_text(self) -> str:
        n = len(self.jobs)
        noun = "job" if n == 1 else "jobs"
        if self.action is Action.REQUEUE_EXPIRED:
            return f"Requeue all {n} expired {noun} in the current filter?"
        if self.action is Action.DELETE:
            return f"Delete {n} {noun} permanently?"
        return f"{self.action.verb} {n} {noun}?"

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="-settings" if self.takes_settings else ""):
            yield Static(Text(self.title_text, style="bold"), id="confirm-title")
            # The long part scrolls; the reason and the buttons stay in sight at any size.
            with VerticalScroll(id="confirm-body"):
                warnings = self._warnings()
                # A delete's warning (no undo) comes first, in sight at 80x24 too.
                first = self.action is Action.DELETE
                if warnings is not None and first:
                    yield Static(warnings, id="confirm-warnings")
                yield Static(self._jobs_text(), id="confirm-jobs")
                yield Static(self._condition(), id="confirm-condition")
                if warnings is not None and not first:
                    yield Static(warnings, id="confirm-warnings")
            yield Label("Reason (recorded in job_events with your name):")
            yield LiteralInput(placeholder="e.g. worker w-7 OOM-killed, INC-1234", id="reason")
            if self.takes_settings:
                yield from settings_fields()
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                yield self.hint()
                label = f"{self.action.verb} {len(self.jobs)}"
                if self.action is Action.DELETE:
                    yield Button(label, variant="error", id="confirm-ok")
                else:
                    yield Button(label, variant="warning", id="confirm-ok")
                # ("Cancel" beside "Cancel 1" would be a guess: this one only closes the dialog.)
                yield Button(
                    "Back" if self.action is Action.CANCEL else "Cancel", id="confirm-cancel"
                )

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
        if self.action is Action.DELETE:
            lines.append("permanent: no undo; the jobs and their attempts are gone for good")
        if self.action in (Action.REQUEUE, Action.REQUEUE_EXPIRED):
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


class QueueConfirmScreen(ReasonDialog):
    """The confirmation of a pause (a reason required, as `leasectl pause` requires one) or a
    resume (a reason optional) of one queue. Dismisses with the reason typed ("" for a resume
    without one), or None when cancelled. ``pause``: the queue's pause as last polled (None:
    not paused, so this confirms a pause)."""

    def __init__(self, queue: str, pause: PausedQueue | None, now: datetime) -> None:
        super().__init__()
        self.queue = queue
        self.pause = pause
        self.now = now
        self.reason_required = pause is None  # a resume's reason is optional

    @property
    def resuming(self) -> bool:
        return self.pause is not None

    def compose(self) -> ComposeResult:
        verb = "Resume" if self.resuming else "Pause"
        with Vertical(id="confirm-dialog"):
            title = Text(f"{verb} queue ", style="bold")
            title.append_text(lit(view.cut(self.queue, 60), PAUSED_STYLE))
            title.append("?")
            yield Static(title, id="confirm-title")
            with VerticalScroll(id="confirm-body"):
                yield Static(self._body(), id="confirm-condition")
            needed = "optional" if self.resuming else "required"
            yield Label(f"Reason ({needed}; recorded in queue_events with your name):")
            yield LiteralInput(
                placeholder="e.g. card processor back, INC-1234"
                if self.resuming
                else "e.g. card processor down, INC-1234",
                id="reason",
            )
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                yield self.hint()
                yield Button(verb, variant="warning", id="confirm-ok")
                yield Button("Cancel", id="confirm-cancel")

    def _body(self) -> Text:
        text = Text()
        if self.pause is None:
            text.append("No worker claims a job of this queue until it is resumed (")
            text.append("P", style="bold")
            text.append(" again, or `leasectl resume`). ")
            text.append("Jobs in flight finish; enqueue goes on.", style="dim")
            return text
        ago = max(self.now - self.pause.paused_at, timedelta(0))
        since = format_duration(timedelta(seconds=int(ago.total_seconds())))
        text.append(f"Paused {since} ago by ")
        text.append_text(lit(view.cut(self.pause.paused_by, 60)))
        text.append(': "')
        text.append_text(lit(view.cut(self.pause.reason, 200), "italic"))
        text.append('".\n')
        text.append("Its workers are told at once and claim its jobs again.", style="dim")
        return text
