"""`enter`: one job as `leasectl inspect` shows it: fields, payload, attempts, audit events."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rich.console import Group, RenderableType
from rich.highlighter import JSONHighlighter
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from leasectl.config import format_duration
from leasectl.console import view
from leasectl.console.messages import DetailFailed, DetailLoaded
from leasectl.console.widgets import literal
from leasectl.errors import LeasectlError
from leasectl.literal import shorten
from leasectl.models import JobDetail, JobStatus, PayloadText, infinity_label
from leasectl.output import event_actor

if TYPE_CHECKING:
    from leasectl.console.app import ConsoleApp


# An error or a reason in a table cell is cut here: the column is narrow, and 100,000 characters
# folded into it would be thousands of lines. (The job's last error is shown whole.)
CELL_LIMIT = 2000


class DetailScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("ctrl+r", "reload", "Reload"),
    ]

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.detail: JobDetail | None = None

    @property
    def console(self) -> ConsoleApp:
        return cast("ConsoleApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static(Text(f" Job #{self.job_id}", style="bold"), id="detail-title")
        with VerticalScroll(id="detail-body"):
            yield Static(Text(f"loading job #{self.job_id}…", style="dim"), id="detail-content")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_reload(self) -> None:
        self._load(self.job_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail")
    def _load(self, job_id: int) -> None:
        try:
            detail = self.console.source.inspect(job_id)
        except LeasectlError as exc:
            self.post_message(DetailFailed(job_id, str(exc)))
        except Exception as exc:
            self.post_message(DetailFailed(job_id, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(DetailLoaded(detail))

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        self.detail = message.detail
        self.query_one("#detail-title", Static).update(title(message.detail))
        self.query_one("#detail-content", Static).update(render_detail(message.detail))

    def on_detail_failed(self, message: DetailFailed) -> None:
        self.query_one("#detail-content", Static).update(
            literal(f"cannot load job #{message.job_id}: {message.error}", "red")
        )


def title(d: JobDetail) -> Text:
    job = d.job
    text = Text()
    text.append(f" Job #{job.id} ", style="bold reverse")
    text.append_text(literal(f"  {job.queue}  ", "bold"))
    style = {
        JobStatus.PROCESSING: "bold blue",
        JobStatus.COMPLETED: "bold green",
        JobStatus.FAILED: "bold red",
        JobStatus.STUCK: "bold magenta",
    }.get(job.status, "bold")
    text.append(str(job.status), style=style)
    text.append(f"   as of {view.stamp_text(d.db_now)} (database clock)", style="dim")
    return text


def _when(now: datetime, moment: datetime | None) -> Text:
    if moment is None:
        return Text("-", style="dim")
    if infinity_label(moment) is not None:
        return Text(view.stamp_text(moment))
    delta = moment - now
    rel = (
        f"in {format_duration(delta)}"
        if delta.total_seconds() > 0
        else f"{format_duration(-delta)} ago"
    )
    return Text.assemble(view.stamp_text(moment), (f"  ({rel})", "dim"))


def render_detail(d: JobDetail) -> RenderableType:
    job, now = d.job, d.db_now
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="dim", no_wrap=True)
    fields.add_column(overflow="fold")  # a long queue or owner id is read whole, not cut
    fields.add_column(style="dim", no_wrap=True)
    fields.add_column(overflow="fold")
    lease = Text("-", style="dim")
    if job.lease_until is not None:
        lease = _when(now, job.lease_until)
        if job.status == JobStatus.PROCESSING and job.lease_until < now:
            lease.append("  ✖ expired", style="bold red")
    pairs: list[tuple[str, RenderableType]] = [
        ("status", Text(str(job.status), style="bold")),
        ("queue", literal(job.queue)),
        ("attempts", Text(f"{job.attempts} of {job.max_attempts}")),
        ("priority", Text(str(job.priority))),
        ("lease owner", literal(job.lease_owner or "-")),
        ("lease until", lease),
        ("heartbeat", _when(now, job.heartbeat_at)),
        ("run at", _when(now, job.run_at)),
        ("created", _when(now, job.created_at)),
        ("updated", _when(now, job.updated_at)),
        ("finished", _when(now, job.finished_at)),
        ("", Text("")),
    ]
    for i in range(0, len(pairs), 2):
        (k1, v1), (k2, v2) = pairs[i], pairs[i + 1]
        fields.add_row(k1, v1, k2, v2)
    parts: list[RenderableType] = [_heading("Job"), fields]
    if job.last_error:
        parts += [_heading("Last error"), literal(job.last_error, "red", multiline=True)]
    parts += [_heading("Payload"), _payload(job.payload)]
    parts += [_heading(f"Attempts ({len(d.attempts)})"), _attempts(d)]
    parts += [_heading(f"Audit events ({len(d.events)})"), _events(d)]
    return Group(*parts)


def _heading(text: str) -> Text:
    return Text(f"\n{text}", style="bold underline")


def _payload(payload: Any) -> RenderableType:
    """Indented, highlighted JSON, as Rich's ``JSON`` shows it; but that one writes DEL, C1 and
    bidi characters inside strings as they are (``ensure_ascii=False``): escape them."""
    if isinstance(payload, PayloadText):  # exact text, never decoded (store.inspect)
        shown = literal(payload.pretty(), multiline=True, no_wrap=True)
        JSONHighlighter().highlight(shown)
        if payload.truncated:
            shown.append(
                f"\n… first {len(payload.text):,} of {payload.chars:,} characters", style="dim"
            )
        return shown
    try:
        dumped = json.dumps(payload, sort_keys=True, default=str, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return literal(repr(payload))
    text = literal(dumped, multiline=True, no_wrap=True)
    JSONHighlighter().highlight(text)
    return text


def _attempts(d: JobDetail) -> RenderableType:
    if not d.attempts:
        return Text("never leased", style="dim")
    table = Table(box=None, padding=(0, 1), header_style="bold dim", expand=False)
    for name in ("#", "OWNER", "STARTED", "LAST HEARTBEAT", "ENDED", "OUTCOME", "ERROR"):
        wraps = name == "ERROR"
        table.add_column(name, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for a in d.attempts:
        outcome_style = {
            "completed": "green",
            "failed": "red",
            "expired": "bold red",
            "running": "blue",
            "marked_stuck": "magenta",
        }.get(a.outcome, "")
        table.add_row(
            str(a.attempt),
            literal(a.lease_owner),
            view.stamp_text(a.started_at),
            view.ago(d.db_now, a.heartbeat_at) + " ago" if a.heartbeat_at else "-",
            view.stamp_text(a.ended_at) if a.ended_at else "-",
            Text(a.outcome, style=outcome_style),
            literal(shorten(a.error or "", CELL_LIMIT), "dim", multiline=True),
        )
    return table


def _change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    before, after = before or {}, after or {}
    keys = [k for k in ("status", "attempts", "lease_owner") if k in before or k in after]
    parts = []
    for k in keys:
        b, a = before.get(k), after.get(k)
        if k in after and b != a:
            parts.append(f"{k} {b} → {a}")
        elif k == "status":
            parts.append(f"{k} {b}")
    return ", ".join(parts)


def _events(d: JobDetail) -> RenderableType:
    if not d.events:
        return Text("no watcher or operator action on this job", style="dim")
    table = Table(box=None, padding=(0, 1), header_style="bold dim", expand=False)
    for name in ("AT", "ACTOR", "ACTION", "CHANGE", "REASON"):
        wraps = name in ("REASON", "CHANGE")
        table.add_column(name, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for e in d.events:
        table.add_row(
            view.stamp_text(e.at),
            literal(event_actor(e)),
            literal(e.action, "bold"),
            literal(_change(e.before, e.after)),
            literal(shorten(e.reason or "", CELL_LIMIT), multiline=True),
        )
    return table
