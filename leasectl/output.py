"""Formatting for the command line: models to JSON documents and to Rich renderables.

Every relative time ("expired 42s ago") is computed against a database timestamp handed in by
the caller, never against this machine's clock.

Everything that comes from the database or the command line is data: it reaches a cell only
through ``lit`` (a Rich ``Text``, which parses no markup, of ``literal.visible``, which escapes
what a terminal would act on). JSON keeps every value exact, but writes the characters that a
terminal acts on or that reorder text as ``\\u`` escapes, so that a JSON document is safe to
``cat`` too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from rich import box
from rich.console import RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from leasectl.config import format_duration
from leasectl.literal import visible
from leasectl.models import (
    ActionResult,
    Attempt,
    Event,
    ExpiredJob,
    Freshness,
    Job,
    JobDetail,
    JobStatus,
    OwnerHealth,
    PayloadText,
    QueueCounts,
    StatusReport,
    WatcherResult,
    finished_estimates,
    infinity_label,
)
from leasectl.present.skips import skip_reason

STATUS_STYLE = {
    JobStatus.PENDING: "yellow",
    JobStatus.PROCESSING: "cyan",
    JobStatus.COMPLETED: "green",
    JobStatus.FAILED: "red",
    JobStatus.STUCK: "bold magenta",
}
FRESHNESS_STYLE = {
    Freshness.FRESH: "green",
    Freshness.LATE: "yellow",
    Freshness.SILENT: "bold red",
    Freshness.STOPPED: "dim",
    Freshness.UNKNOWN: "dim",
}
OUTCOME_STYLE = {
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "expired": "bold red",
    "released": "yellow",
    "marked_stuck": "magenta",
    "requeued": "yellow",
}

# -- JSON -------------------------------------------------------------------------------------


class RawJson(str):
    """JSON text that ``dumps`` puts into its document as it is (a payload: never decoded, so
    its numbers keep their digits and any depth is fine)."""


@dataclasses.dataclass
class _Splices:
    """The RawJson texts of one ``dumps`` call, each behind a placeholder no other string of
    the document can equal (NUL, which no jsonb or text value holds, and a random tag)."""

    tag: str = dataclasses.field(default_factory=lambda: f"\x00raw-{secrets.token_hex(8)}-")
    texts: list[str] = dataclasses.field(default_factory=list)

    def add(self, text: str) -> str:
        self.texts.append(text)
        return f"{self.tag}{len(self.texts) - 1}"

    def apply(self, encoded: str) -> str:
        for i, text in enumerate(self.texts):
            encoded = encoded.replace(json.dumps(f"{self.tag}{i}"), text, 1)
        return encoded


def jsonable(value: Any, splices: _Splices | None = None) -> Any:
    """Datetimes as ISO 8601 with offset ('infinity', '-infinity' for the sentinels), intervals
    as seconds, enums as their value, a payload's text as RawJson."""
    if isinstance(value, datetime):
        return infinity_label(value) or value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PayloadText):
        return jsonable(RawJson(value.text), splices)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), splices) for f in dataclasses.fields(value)
        }
    if isinstance(value, dict):
        return {str(k): jsonable(v, splices) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, splices) for v in value]
    if splices is not None and type(value) is RawJson:
        return splices.add(value)
    return value


# json.dumps escapes C0 controls in strings; DEL, C1 controls, bidi and other format
# characters it leaves raw. Outside strings a JSON document is ASCII, so every match is in one.
_BEYOND_ASCII = re.compile(r"[^\x00-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if visible(char) == char:
        return char  # text: accents, CJK, emoji stay readable
    code = ord(char)
    if code > 0xFFFF:  # JSON spells these as a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def dumps(document: Any, *, indent: int | None = 2) -> str:
    """JSON that parses back to the exact values and carries no byte a terminal acts on (a
    payload's text is spliced in as PostgreSQL wrote it, then escaped the same way)."""
    splices = _Splices()
    encoded = json.dumps(jsonable(document, splices), indent=indent, ensure_ascii=False)
    return terminal_safe_json(splices.apply(encoded) if splices.texts else encoded)


def terminal_safe_json(text: str) -> str:
    """JSON text with every character a terminal acts on written as a JSON escape (the same
    value once parsed; only strings hold such characters)."""
    return _BEYOND_ASCII.sub(_json_escape, text)


def lit(value: str, style: str = "", *, multiline: bool = False) -> Text:
    """A value from the database or the command line as a cell: literal text, never markup,
    with controls, escapes and bidi characters shown as visible escapes. ``multiline`` keeps
    newlines and tabs (a traceback, a reason); otherwise the value stays on one line."""
    return Text(visible(value, multiline=multiline), style=style)


def _age_s(db_now: datetime, then: datetime | None) -> float | None:
    return None if then is None else (db_now - then).total_seconds()


def job_json(job: Job) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(job)
    return result


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(attempt)
    return result


def event_json(event: Event) -> dict[str, Any]:
    result: dict[str, Any] = jsonable(event)
    return result


def detail_json(detail: JobDetail) -> dict[str, Any]:
    return {
        "job": job_json(detail.job),
        "attempts": [attempt_json(a) for a in detail.attempts],
        "events": [event_json(e) for e in detail.events],
        "db_now": jsonable(detail.db_now),
    }


def _counts_json(q: QueueCounts, db_now: datetime) -> dict[str, Any]:
    return {
        "pending": q.pending,
        "due": q.due,
        "oldest_due_at": jsonable(q.oldest_due_at),
        "oldest_due_age_s": _age_s(db_now, q.oldest_due_at),
        "processing": q.processing,
        "expired": q.expired,
        "stuck": q.stuck,
        "completed_recent": q.completed_recent,
        "failed_recent": q.failed_recent,
    }


def totals(report: StatusReport) -> QueueCounts:
    qs = report.queues
    return QueueCounts(
        queue="total",
        pending=sum(q.pending for q in qs),
        due=sum(q.due for q in qs),
        processing=sum(q.processing for q in qs),
        expired=sum(q.expired for q in qs),
        stuck=sum(q.stuck for q in qs),
        completed_recent=sum(q.completed_recent for q in qs),
        failed_recent=sum(q.failed_recent for q in qs),
        oldest_due_at=report.oldest_due_at,
    )


def finished_estimate(report: StatusReport) -> dict[str, int | None]:
    """All-time totals from planner statistics; None for both while the table has none."""
    completed, failed = finished_estimates(report.finished_estimate)
    return {"completed": completed, "failed": failed}


def check_json(report: StatusReport) -> dict[str, Any]:
    return {
        "expired": report.expired,
        "stuck": report.stuck,
        "ok": report.expired == 0 and report.stuck == 0,
    }


def owner_json(owner: OwnerHealth) -> dict[str, Any]:
    return {
        "owner": owner.owner,
        "freshness": owner.freshness.value,
        "held": owner.held,
        "expired": owner.expired,
        "last_seen_at": jsonable(owner.last_seen_at),
        "last_job_heartbeat_at": jsonable(owner.last_job_heartbeat_at),
        "next_expiry_at": jsonable(owner.next_expiry_at),
        "heartbeat_every_s": jsonable(owner.heartbeat_every),
        "lease_ttl_s": jsonable(owner.lease_ttl),
        "hostname": owner.hostname,
        "pid": owner.pid,
        "queues": list(owner.queues),
        "started_at": jsonable(owner.started_at),
        "stopped_at": jsonable(owner.stopped_at),
    }


def status_json(report: StatusReport) -> dict[str, Any]:
    return {
        "db_now": jsonable(report.db_now),
        "recent_window_s": report.recent_window.total_seconds(),
        "queues": [{"queue": q.queue, **_counts_json(q, report.db_now)} for q in report.queues],
        "totals": _counts_json(totals(report), report.db_now),
        "finished_estimate": finished_estimate(report),
        "owners": [owner_json(o) for o in report.owners],
        "check": check_json(report),
    }


def expired_job_json(job: ExpiredJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "status": job.status.value,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "lease_owner": job.lease_owner,
        "lease_until": jsonable(job.lease_until),
        "heartbeat_at": jsonable(job.heartbeat_at),
    }


def watcher_json(result: WatcherResult) -> dict[str, Any]:
    return {
        "dry_run": result.dry_run,
        "requeued": result.requeued,
        "failed": result.failed,
        "marked_stuck": result.marked_stuck,
        "jobs": [expired_job_json(j) for j in result.jobs],
    }


# -- small human formats -------------------------------------------------------------------


def format_ids(ids: Sequence[int], *, max_ranges: int = 8) -> str:
    """Compact ranges: ``1-100`` or ``3, 5-9, 12``; long lists end with ``(+N more)``."""
    ranges: list[tuple[int, int]] = []
    for i in sorted(set(ids)):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], i)
        else:
            ranges.append((i, i))
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:max_ranges]]
    if len(ranges) > max_ranges:
        rest = sum(b - a + 1 for a, b in ranges[max_ranges:])
        parts.append(f"(+{rest} more)")
    return ", ".join(parts) if parts else "-"


def short_window(value: timedelta) -> str:
    """``1h``, ``30m``, ``90s``: the round form of a configured window."""
    seconds = value.total_seconds()
    if seconds != int(seconds) or seconds == 0:
        return format_duration(value)
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def timestamp(value: datetime | None) -> str:
    if value is None:
        return "-"
    return infinity_label(value) or value.isoformat(sep=" ", timespec="seconds")


def clock(value: datetime | None) -> str:
    """Compact form for table cells; panels and JSON carry the full timestamp with offset."""
    if value is None:
        return "-"
    return infinity_label(value) or value.strftime("%m-%d %H:%M:%S")


def ago(db_now: datetime, then: datetime | None) -> str:
    """``42s ago``, or ``in 12s`` for a time still ahead (both measured on the database clock)."""
    if then is None:
        return "-"
    if (label := infinity_label(then)) is not None:
        return f"at {label}"
    delta = db_now - then
    if delta < timedelta(0):
        return f"in {format_duration(-delta)}"
    return f"{format_duration(delta)} ago"


def lease_state(db_now: datetime, until: datetime | None) -> Text:
    """``12s left`` while valid, ``expired 42s ago`` once lapsed."""
    if until is None:
        return Text("-")
    left = until - db_now
    if left >= timedelta(0):
        return Text(f"{format_duration(left)} left", style="green")
    return Text(f"expired {format_duration(-left)} ago", style="bold red")


def _expiry(db_now: datetime, until: datetime | None) -> Text:
    text = ago(db_now, until)
    return Text(text, style="bold red" if until is not None and until < db_now else "")


def _table(title: str) -> Table:
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )


def _status(status: JobStatus) -> Text:
    return Text(status.value, style=STATUS_STYLE.get(status, ""))


def _num(n: int, *, alert: str | None = None) -> Text:
    return Text(str(n), style=alert if alert and n else ("dim" if n == 0 else ""))


def _interval(value: timedelta | None) -> str:
    return short_window(value) if value is not None else "?"


# -- status ---------------------------------------------------------------------------------


def status_renderables(report: StatusReport) -> list[RenderableType]:
    now = report.db_now
    window = short_window(report.recent_window)
    queues = _table(f"queues at {timestamp(now)} (database clock)")
    queues.add_column("queue", overflow="fold", min_width=8)
    for header in ("pending", "due", "oldest due", "proc.", "expired", "stuck"):
        queues.add_column(header, justify="right", min_width=min(len(header), 7))
    queues.add_column(f"done {window}", justify="right", min_width=4)
    queues.add_column(f"failed {window}", justify="right", min_width=6)

    def row(q: QueueCounts, *, style: str = "") -> None:
        queues.add_row(
            lit(q.queue, style),
            _num(q.pending),
            _num(q.due),
            Text(format_duration(now - q.oldest_due_at) if q.oldest_due_at else "-"),
            _num(q.processing),
            _num(q.expired, alert="bold red"),
            _num(q.stuck, alert="bold magenta"),
            _num(q.completed_recent),
            _num(q.failed_recent, alert="red"),
            style=style,
        )

    for q in report.queues:
        row(q)
    if len(report.queues) > 1:
        queues.add_section()
        row(totals(report), style="bold")

    est = finished_estimate(report)
    if est["completed"] is None:
        estimate = Text("≈ all-time completed/failed: unknown (no planner statistics yet)")
    else:
        estimate = Text(
            f"≈ all-time completed {est['completed']:,} / failed {est['failed']:,} "
            "(planner estimate)"
        )
    estimate.stylize("dim")
    parts: list[RenderableType] = [
        queues
        if report.queues
        else Text(f"no live jobs, and none finished in the last {window}", style="dim"),
        estimate,
        Text(),
    ]
    parts.append(owners_table(report.owners, now))
    check = check_json(report)
    if not check["ok"]:
        parts.append(Text())
        parts.append(
            Text(
                f"attention: {check['expired']} expired lease(s), {check['stuck']} Stuck job(s); "
                "see `leasectl requeue-stuck --dry-run`",
                style="bold red",
            )
        )
    return parts


def owners_table(owners: Sequence[OwnerHealth], db_now: datetime) -> RenderableType:
    if not owners:
        return Text("lease owners: none, and no worker seen in the last hour", style="dim")
    table = _table("lease owners")
    table.add_column("owner", overflow="fold", min_width=18)
    table.add_column("fresh", min_width=5)
    table.add_column("held", justify="right", min_width=4)
    table.add_column("exp.", justify="right", min_width=4)
    table.add_column("last beat", justify="right")
    table.add_column("next expiry", justify="right")
    table.add_column("hb/ttl", justify="right")
    for o in owners:
        table.add_row(
            lit(o.owner),
            Text(o.freshness.value, style=FRESHNESS_STYLE.get(o.freshness, "")),
            _num(o.held),
            _num(o.expired, alert="bold red"),
            Text(ago(db_now, o.last_sign_of_life)),
            _expiry(db_now, o.next_expiry_at) if o.held else Text("-", style="dim"),
            Text(f"{_interval(o.heartbeat_every)}/{_interval(o.lease_ttl)}"),
        )
    return table


# -- inspect --------------------------------------------------------------------------------


def detail_renderables(detail: JobDetail) -> list[RenderableType]:
    job, now = detail.job, detail.db_now
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")

    def add(name: str, value: str | Text) -> None:
        fields.add_row(name, value if isinstance(value, Text) else Text(value))

    add("status", _status(job.status))
    add("queue", lit(job.queue))
    add("priority", str(job.priority))
    add("attempts", f"{job.attempts}/{job.max_attempts}")
    owner = lit(job.lease_owner or "-")
    if job.lease_owner and job.status != JobStatus.PROCESSING:
        owner.append("  (last holder)", style="dim")
    add("lease owner", owner)
    if job.lease_until is not None:
        until = Text(timestamp(job.lease_until) + "  ")
        if job.status == JobStatus.PROCESSING:
            until.append_text(lease_state(now, job.lease_until))
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
        run_at += f"  ({'due' if job.run_at <= now else 'due ' + ago(now, job.run_at)})"
    add("run at", run_at)
    add("last error", lit(job.last_error, "red", multiline=True) if job.last_error else "-")
    add("created", timestamp(job.created_at))
    add("updated", timestamp(job.updated_at))
    add("finished", timestamp(job.finished_at))

    parts: list[RenderableType] = [
        Panel(fields, title=f"job {job.id}", title_align="left", box=box.ROUNDED),
        payload_panel(job),
        attempts_table(detail.attempts, now),
        Text(),
        events_table(detail.events),
    ]
    return parts


# `inspect` shows this much of a payload; --json prints all of it.
PAYLOAD_SHOWN = 4096


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


def attempts_table(attempts: Sequence[Attempt], db_now: datetime) -> RenderableType:
    if not attempts:
        return Text("attempts: none (never leased)", style="dim")
    table = _table("attempts")
    table.add_column("#", justify="right")
    table.add_column("owner", overflow="fold", min_width=18)
    table.add_column("started", no_wrap=True)
    table.add_column("took", justify="right")
    table.add_column("outcome")
    table.add_column("error", overflow="fold")
    for a in attempts:
        end = a.ended_at if a.ended_at is not None else db_now
        took = format_duration(end - a.started_at)
        table.add_row(
            str(a.attempt),
            lit(a.lease_owner),
            clock(a.started_at),
            took if a.ended_at is not None else f"{took}…",
            lit(a.outcome, OUTCOME_STYLE.get(a.outcome, "")),
            lit(a.error or "", "dim", multiline=True),
        )
    return table


def _doc_status(document: Any) -> str:
    """The status an event's before/after document names; anyone with the table can write it."""
    value = document.get("status") if isinstance(document, dict) else None
    return "?" if value is None else str(value)


def event_actor(event: Event) -> str:
    """Who made an audited change: the name the client gave, and the database role that the
    database recorded (rows from before it did have none)."""
    if event.db_role is None:
        return event.actor
    return f"{event.actor} (role {event.db_role})"


def events_table(events: Sequence[Event]) -> RenderableType:
    if not events:
        return Text("events: none (no operator or watcher action)", style="dim")
    table = _table("events")
    table.add_column("at", no_wrap=True)
    table.add_column("actor", overflow="fold", min_width=16)
    table.add_column("action")
    table.add_column("change")
    table.add_column("reason", overflow="fold")
    for e in events:
        before, after = _doc_status(e.before), _doc_status(e.after)
        arrow = " →\n" if len(f"{before}{after}") > 14 else " → "
        table.add_row(
            clock(e.at),
            lit(event_actor(e)),
            lit(e.action),
            Text.assemble(lit(before), arrow, lit(after)),
            lit(e.reason or "", multiline=True),
        )
    return table


# -- watcher pass and operator actions ------------------------------------------------------


def would_become(job: ExpiredJob, mode: str) -> JobStatus:
    """What a real pass would make of a job a dry run lists (mirrors jobs_requeue_expired)."""
    if mode == "mark":
        return JobStatus.STUCK
    return JobStatus.FAILED if job.attempts >= job.max_attempts else JobStatus.PENDING


# The human listing of a watcher pass stops here: a pass may move 100,000 jobs, which would
# take Rich minutes to print and nobody to read. --json lists every one.
LISTED_JOBS = 50


def watcher_renderables(
    result: WatcherResult, db_now: datetime, mode: str, *, listed: int = LISTED_JOBS
) -> list[RenderableType]:
    title = "expired leases (dry run: nothing changed)" if result.dry_run else "jobs moved"
    table = _table(title)
    table.add_column("id", justify="right")
    table.add_column("queue", overflow="fold")
    table.add_column("last owner", overflow="fold")
    table.add_column("lease lapsed")
    table.add_column("att.", justify="right")
    table.add_column("would be" if result.dry_run else "now")
    shown = result.jobs[:listed]
    for j in shown:
        status = would_become(j, mode) if result.dry_run else j.status
        lapsed = Text(clock(j.lease_until))
        if j.lease_until is not None:
            lapsed.append(f"\n{ago(db_now, j.lease_until)}", style="red")
        table.add_row(
            str(j.id),
            lit(j.queue),
            lit(j.lease_owner or "-"),
            lapsed,
            f"{j.attempts}/{j.max_attempts}",
            _status(status),
        )
    parts: list[RenderableType] = []
    if result.jobs:
        parts.append(table)
        # (A pass lists only the jobs shown here; a dry run lists all it would move.)
        more = (len(result.jobs) if result.dry_run else result.total) - len(shown)
        if more > 0:
            parts.append(Text(f"... and {more} more job(s), not listed; --json lists all", "dim"))
        parts.append(Text())
    if result.dry_run:
        counts: dict[JobStatus, int] = {}
        for j in result.jobs:
            counts[would_become(j, mode)] = counts.get(would_become(j, mode), 0) + 1
        summary = (
            f"dry run: {len(result.jobs)} expired lease(s) would be moved"
            + (
                " (" + ", ".join(f"{n} -> {s.value}" for s, n in sorted(counts.items())) + ")"
                if counts
                else ""
            )
            + "; nothing changed"
        )
    else:
        summary = (
            f"requeued {result.requeued}, failed {result.failed} (attempts spent), "
            f"marked stuck {result.marked_stuck}"
        )
    parts.append(Text(summary, style="bold"))
    return parts


ACTION_PAST = {"requeue": "requeued", "mark-stuck": "marked stuck"}


def action_renderables(result: ActionResult) -> list[RenderableType]:
    verb = ACTION_PAST.get(result.action, result.action)
    parts: list[RenderableType] = []
    if result.changed:
        parts.append(
            Text(f"{verb} {len(result.changed)} job(s): {format_ids(result.changed)}", "green")
        )
    else:
        parts.append(Text(f"{verb} no jobs", style="yellow"))
    if result.skipped:
        table = _table(f"skipped {len(result.skipped)}")
        table.add_column("id", justify="right")
        table.add_column("reason", overflow="fold")
        for s in result.skipped:
            table.add_row(str(s.id), lit(skip_reason(s)))
        parts.append(table)
    return parts
