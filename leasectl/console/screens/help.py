"""`?`: the keys, and what the markers and diagnoses mean."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from leasectl.core.models import JobStatus
from leasectl.present.styles import EXPIRED_STYLE, LIMITED_STYLE, RISK_STYLE, STATUS_STYLE

KEYS = (
    ("enter", "job detail: fields, payload, attempts, audit events (on an owner: filter by it)"),
    ("esc", "back / close; on the main screen: clear the selection, else the filter"),
    ("space", "select or unselect the highlighted job (actions apply to the selection)"),
    ("r", "requeue the selected jobs, else the highlighted one; also in detail, find"),
    ("s", "mark stuck the selected jobs, else the highlighted one; also in detail, find"),
    ("R", "requeue every expired lease in the current filter"),
    (
        "c",
        "cancel the selected or highlighted jobs (a held lease is revoked); also in detail, find",
    ),
    ("D", "delete the selected or highlighted finished or Stuck jobs, for good (own confirmation)"),
    (
        "P",
        "pause the highlighted job's queue (no worker claims its jobs; a reason is required), "
        "or resume it if it is paused (shown under the counts: ⏸ paused); in find: the "
        "filter's queue when it names one",
    ),
    (
        "L",
        "limit the highlighted job's queue: at most N leased at once (concurrency), R starts a "
        "second or minute (rate, 20/s, 300/m) and its burst, a reason required; empty the "
        "concurrency and the rate to lift the limits (shown under the counts: ⏳ limits); "
        "in find: the filter's queue when it names one",
    ),
    (
        "S",
        "schedules: expression, time zone, next and last slot, last job's outcome, late or "
        "paused; r runs the highlighted one now, p pauses or resumes it (confirmed, a reason)",
    ),
    (
        "Q",
        "queues: every queue's Pending, oldest due, backlog trend, failures in the last hour, "
        "Processing, pickup p95, paused or limited, completions a minute; most urgent first; "
        "enter: the queue's last hour per minute, its error groups and audit events",
    ),
    ("ctrl+y", "confirm an action's dialog (its reason box has the focus; Enter does not confirm)"),
    ("/", "filter: queue:NAME, owner:PREFIX, id:N (shown above the panels until cleared)"),
    ("1 2 3 4 5, tab", "Pending, Processing, Expired & Stuck, Owners, Failed panel"),
    (
        "f",
        "find jobs with leasectl list's filter (state: queue: owner: error: payload: since: "
        "until:), newest first; typing stays in the filter box (↑ ↓ move through the results); "
        "tab to the results: n / p pages, enter detail, r s c D P L act; any other key types "
        "into the filter again; esc cancel / back",
    ),
    (
        "R S C (in find)",
        "requeue / mark stuck / cancel every job the find filter matches: the count and the filter "
        "confirmed with a reason, then in batches (esc stops after the batch in flight)",
    ),
    ("ctrl+r", "refresh now"),
    (": or ctrl+p", "command palette"),
    ("?", "this help"),
    ("ctrl+c", "quit, from anywhere"),
    ("q", "quit; on another screen, or right after typing, it asks first (q again quits)"),
)

LEGEND = (
    ("⚠ at risk", RISK_STYLE, "the lease ends within the owner's heartbeat interval"),
    (
        "✖ expired",
        EXPIRED_STYLE,
        "lease_until has passed on the database clock: still Processing (counted there), "
        "listed with the Stuck jobs",
    ),
    (
        "⚠ owner alive, lease expired",
        RISK_STYLE,
        "the worker is up but not renewing this job: look before you requeue (it may run twice)",
    ),
    ("○ owner silent", "cyan", "the worker is gone: requeueing the expired lease is safe"),
    (
        "⊘ quarantined by …",
        STATUS_STYLE[JobStatus.STUCK],
        "a Stuck job: marked stuck on purpose by that actor (an operator, or the watcher), "
        "with the reason given; nothing runs it. Requeue it once the cause is fixed",
    ),
    ("● fresh ◐ late ○ silent", "green", "owner freshness, against its own heartbeat and TTL"),
    (
        "≈",
        "",
        "an all-time estimate from planner statistics (finished history is never counted; "
        "never shown below what finished recently); none before the first ANALYZE",
    ),
    (
        "⏳ at cap / rate-limited",
        LIMITED_STYLE,
        "a due Pending job its queue's limit holds back: the queue's live leases fill its cap, "
        "or its rate has no token left (L, `leasectl limits`)",
    ),
    ("N of M", "", "under a filter: what it matches, of all there is"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close", show=False),
        Binding("q", "close", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, what in KEYS:
            keys.add_row(key, what)
        legend = Table.grid(padding=(0, 2))
        legend.add_column(no_wrap=True)
        legend.add_column()
        for mark, style, what in LEGEND:
            legend.add_row(Text(mark, style=style), what)
        with VerticalScroll(id="help-dialog"):
            yield Static(Text("Keys", style="bold underline"))
            yield Static(keys)
            yield Static(Text("\nMarkers", style="bold underline"))
            yield Static(legend)
            yield Static(
                Text(
                    "\nActions are the core's guarded operator actions: each job changes only if "
                    "it is still as you saw it, and the result lists what was skipped and why. "
                    "Countdowns tick from the database clock of the last refresh plus local "
                    "monotonic time, never the local wall clock.",
                    style="dim",
                )
            )

    def action_close(self) -> None:
        self.dismiss(None)
