"""One job in full: its fields, payload, attempts and audit events. `leasectl inspect` prints
these renderables; the console's detail screen shows the same ones in a scrolling widget."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from leasectl.core.config import format_duration
from leasectl.core.literal import shorten
from leasectl.core.models import Attempt, Event, Job, JobDetail, JobStatus
from leasectl.core.texts import PayloadText
from leasectl.present.jsonout import dumps, terminal_safe_json
from leasectl.present.styles import OUTCOME_STYLE, PAUSED_STYLE, status_text
from leasectl.present.text import lit, table
from leasectl.present.times import PAUSED_MARK, ago, clock, lease_left, timestamp

# `inspect` shows this much of a payload; --json prints all of it.
PAYLOAD_SHOWN = 4096


def detail_renderables(detail: JobDetail, *, cell_limit: int | None = None) -> list[RenderableType]:
    """``cell_limit`` cuts an attempt's error and an event's reason in their table cells (a
    screen that redraws them would fold 100,000 characters into thousands of lines); the job's
    last error is always shown whole."""
    return [
        fields_panel(detail),
        *cuts_note(detail),
        payload_panel(detail.job),
        attempts_table(detail.attempts, detail.db_now, cell_limit=cell_limit),
        *traceback_panel(detail),
        Text(),
        events_table(detail.events, cell_limit=cell_limit),
    ]


_FIELD_WORDS = {
    ("job", "lease_owner"): "lease owner",
    ("job", "last_error"): "last error",
    ("attempt", "lease_owner"): "owner of attempt {key}",
    ("attempt", "error"): "error of attempt {key}",
    ("event", "actor"): "actor of event {key}",
    ("event", "reason"): "reason of event {key}",
}


def cuts_note(detail: JobDetail) -> list[RenderableType]:
    """What a bounded read left out (texts cut, earlier attempts and events), with their sizes
    and the command that shows all of it; nothing when it left nothing out."""
    parts = [
        _FIELD_WORDS.get((c.record, c.column), c.column).format(key=c.key)
        + f" (first {c.shown_chars:,} characters of {c.full_bytes:,} bytes)"
        for c in detail.cuts
    ]
    for total, shown, what in (
        (detail.attempts_total, len(detail.attempts), "attempts"),
        (detail.events_total, len(detail.events), "events"),
    ):
        if total is not None and total > shown:
            parts.append(f"{total - shown:,} earlier {what} (the latest {shown:,} shown)")
    if not parts:
        return []
    note = "cut: " + "; ".join(parts)
    return [
        Text(f"{note}. All of it: leasectl inspect {detail.job.id} --full (or --json)", "yellow")
    ]


def traceback_panel(detail: JobDetail) -> list[RenderableType]:
    """The traceback of the last attempt that kept one, whole (the worker bounds it), literal
    but for its newlines and tabs; earlier ones are in ``inspect --json``."""
    kept = [a for a in detail.attempts if a.error_detail]
    if not kept:
        return []
    last = kept[-1]
    earlier = len(kept) - 1
    subtitle = None
    if earlier:
        whose = (
            "1 earlier attempt's traceback"
            if earlier == 1
            else (f"{earlier} earlier attempts' tracebacks")
        )
        subtitle = f"{whose}: leasectl inspect {detail.job.id} --json"
    return [
        Text(),
        Panel(
            lit(last.error_detail or "", multiline=True),
            title=f"traceback of attempt {last.attempt} ({last.outcome})",
            title_align="left",
            subtitle=subtitle,
            subtitle_align="left",
            box=box.ROUNDED,
        ),
    ]


def key_wait_text(holder: int | None) -> Text:
    """What a Waiting job waits for: its key's head, by id (none: the next promotion)."""
    if holder is None:
        return Text("  ⏳ key free: promoted at the next exit or watcher pass", style="yellow")
    return Text(f"  ⏳ key busy: job {holder} holds it", style="yellow")


def progress_text(fraction: float, message: str | None) -> Text:
    """A handler's reported progress: its percentage, then its message (untrusted: literal)."""
    text = Text(f"{fraction * 100:.0f}%")
    if message:
        text.append("  ")
        text.append_text(lit(message))
    return text


def fields_panel(detail: JobDetail) -> RenderableType:
    job, now = detail.job, detail.db_now
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")

    def add(name: str, value: str | Text) -> None:
        fields.add_row(name, value if isinstance(value, Text) else Text(value))

    add("status", status_text(job.status))
    queue = lit(job.queue)
    if (pause := detail.queue_paused) is not None:
        queue.append(f"  {PAUSED_MARK} paused since {timestamp(pause.paused_at)} by ", PAUSED_STYLE)
        queue.append_text(lit(pause.paused_by, PAUSED_STYLE))
        queue.append(": ", PAUSED_STYLE)
        queue.append_text(lit(pause.reason, PAUSED_STYLE))
    add("queue", queue)
    if detail.unique_key is not None:
        add("unique key", lit(detail.unique_key))
    if detail.concurrency_key is not None:
        key = lit(detail.concurrency_key)
        if job.status == JobStatus.WAITING:
            key.append_text(key_wait_text(detail.key_holder))
        add("concurrency key", key)
    add("priority", str(job.priority))
    add("attempts", f"{job.attempts}/{job.max_attempts}")
    if job.snoozes:
        add("snoozes", f"{job.snoozes}  (each put the job off without spending an attempt)")
    if job.timeout is not None:
        add("timeout", format_duration(job.timeout) + "  (per attempt)")
    if job.progress is not None:
        add("progress", progress_text(job.progress, job.progress_message))
    cut = {c.column for c in detail.cuts if c.record == "job"}
    owner = lit(job.lease_owner or "-")
    if "lease_owner" in cut:
        owner.append("…  (cut)", style="yellow")
    if job.lease_owner and job.status != JobStatus.PROCESSING:
        owner.append("  (last holder)", style="dim")
    add("lease owner", owner)
    if job.lease_until is not None:
        until = Text(timestamp(job.lease_until) + "  ")
        if job.status == JobStatus.PROCESSING:
            until.append_text(lease_left(now, job.lease_until))
        else:
            until.append(f"(lapsed {ago(now, job.lease_until)})", style="dim")
        add("lease until", until)
    else:
        add("lease until", "-")
    heartbeat = timestamp(job.heartbeat_at)
    if job.heartbeat_at is not None:
        heartbeat += f"  ({ago(now, job.heartbeat_at)})"
    add("heartbeat", heartbeat)
    run_at = timestamp(job.run_at)
    if job.status == JobStatus.PENDING:
        due = "due" if job.run_at <= now else "due " + ago(now, job.run_at)
        if detail.queue_paused is not None:
            due += ", but its queue is paused: no worker claims it until `leasectl resume`"
        run_at += f"  ({due})"
    add("run at", run_at)
    error = lit(job.last_error, "red", multiline=True) if job.last_error else Text("-")
    if "last_error" in cut:
        error.append("…  (cut)", style="yellow")
    add("last error", error)
    add("created", timestamp(job.created_at))
    add("updated", timestamp(job.updated_at))
    add("finished", timestamp(job.finished_at))
    return Panel(fields, title=f"job {job.id}", title_align="left", box=box.ROUNDED)


def payload_panel(job: Job) -> RenderableType:
    """The payload laid out as JSON; a long one cut short, with its size and how to get all."""
    payload = job.payload
    if isinstance(payload, PayloadText):
        body, title, subtitle = terminal_safe_json(payload.pretty()), "payload", None
        if payload.truncated:
            body += "\n…"
            title = f"payload: first {len(payload.text):,} of {payload.chars:,} characters"
            subtitle = f"all of it: leasectl inspect {job.id} --json"
    else:
        body, title, subtitle = dumps(payload), "payload", None
    return Panel(
        # String contents escaped before they are highlighted.
        Syntax(body, "json", word_wrap=True),
        title=title,
        title_align="left",
        subtitle=subtitle,
        subtitle_align="left",
        box=box.ROUNDED,
    )


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None else shorten(text, limit)


def attempts_table(
    attempts: Sequence[Attempt], db_now: datetime, *, cell_limit: int | None = None
) -> RenderableType:
    if not attempts:
        return Text("attempts: none (never leased)", style="dim")
    listing = table("attempts")
    listing.add_column("#", justify="right")
    listing.add_column("owner", overflow="fold", min_width=18)
    listing.add_column("started", no_wrap=True)
    listing.add_column("took", justify="right")
    listing.add_column("outcome")
    listing.add_column("error", overflow="fold")
    for a in attempts:
        end = a.ended_at if a.ended_at is not None else db_now
        took = format_duration(end - a.started_at)
        listing.add_row(
            str(a.attempt),
            lit(a.lease_owner),
            clock(a.started_at),
            took if a.ended_at is not None else f"{took}…",
            lit(a.outcome, OUTCOME_STYLE.get(a.outcome, "")),
            lit(_cut(a.error or "", cell_limit), "dim", multiline=True),
        )
    return listing


def event_actor(event: Event) -> str:
    """Who made an audited change: the name the client gave, and the database role that the
    database recorded (rows from before it did have none)."""
    if event.db_role is None:
        return event.actor
    return f"{event.actor} (role {event.db_role})"


def _doc_value(document: Any, key: str) -> str:
    """A value an event's before/after document holds; anyone with the table can write it."""
    value = document.get(key) if isinstance(document, dict) else None
    return "?" if value is None else str(value)


# Besides the status, an event's change names these when they changed.
CHANGED_TOO = ("attempts", "lease_owner")


def change_text(before: Any, after: Any) -> Text:
    """``Processing → Pending``, then a line per other field the change moved."""
    old, new = _doc_value(before, "status"), _doc_value(after, "status")
    arrow = " →\n" if len(f"{old}{new}") > 14 else " → "
    text = Text.assemble(lit(old), arrow, lit(new))
    if isinstance(before, dict) and isinstance(after, dict):
        for key in CHANGED_TOO:
            if key in after and before.get(key) != after[key]:
                text.append("\n")
                text.append_text(lit(f"{key} {_doc_value(before, key)} → {_doc_value(after, key)}"))
    return text


def events_table(events: Sequence[Event], *, cell_limit: int | None = None) -> RenderableType:
    if not events:
        return Text("events: none (no operator or watcher action)", style="dim")
    listing = table("events")
    listing.add_column("at", no_wrap=True)
    listing.add_column("actor", overflow="fold", min_width=16)
    listing.add_column("action")
    listing.add_column("change")
    listing.add_column("reason", overflow="fold")
    for e in events:
        listing.add_row(
            clock(e.at),
            lit(event_actor(e)),
            lit(e.action),
            change_text(e.before, e.after),
            lit(_cut(e.reason or "", cell_limit), multiline=True),
        )
    return listing
