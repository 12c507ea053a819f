"""`leasectl errors` and `leasectl events`: the groups of failures and the audit timeline, as
tables or JSON documents. Every value from the database (errors, queues, actors, reasons) is a
literal cell (``lit``)."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.errorgroups import ErrorReport
from leasectl.core.literal import shorten
from leasectl.core.timeline import Timeline, TimelineEntry
from leasectl.present.jsonout import jsonable
from leasectl.present.text import lit, table
from leasectl.present.times import ago, clock, short_window

ERROR_CELL = 80
REASON_CELL = 60
QUEUES_SHOWN = 3


def _queues_text(queues: tuple[str, ...]) -> Text:
    text = Text()
    for i, queue in enumerate(queues[:QUEUES_SHOWN]):
        if i:
            text.append(", ")
        text.append_text(lit(shorten(queue, 40)))
    if len(queues) > QUEUES_SHOWN:
        text.append(f" (+{len(queues) - QUEUES_SHOWN})", style="dim")
    return text if queues else Text("-", style="dim")


def errors_scan_note(report: ErrorReport) -> str | None:
    """What the read left out, when it stopped at its cap (else None)."""
    if not report.truncated:
        return None
    return (
        f"scanned the last {report.scanned:,} failed attempts of every queue (the newest, back "
        f"to the oldest shown); older failures of the last {short_window(report.since)} "
        "are not counted"
    )


def errors_renderables(report: ErrorReport) -> list[RenderableType]:
    where = Text("failed attempts")
    if report.queue is not None:
        where.append(" of queue ")
        where.append_text(lit(report.queue, "bold"))
    where.append(f" in the last {short_window(report.since)}, by kind")
    parts: list[RenderableType] = [where]
    if not report.groups:
        parts.append(Text("none", style="dim"))
    else:
        t = table("")
        for name, kw in (
            ("count", {"justify": "right"}),
            ("error", {"overflow": "fold"}),
            ("first", {}),
            ("last", {}),
            ("queues", {}),
            ("example", {"justify": "right"}),
        ):
            t.add_column(name, **kw)  # type: ignore[arg-type]
        for g in report.groups:
            t.add_row(
                f"{g.count:,}",
                lit(shorten(g.error, ERROR_CELL), "red"),
                ago(report.db_now, g.first_at),
                ago(report.db_now, g.last_at),
                _queues_text(g.queues),
                str(g.example_job),
            )
        parts.append(t)
    note = errors_scan_note(report)
    if note:
        parts.append(Text(note, style="yellow"))
    return parts


def errors_json(report: ErrorReport) -> dict[str, Any]:
    """``{"queue", "since", "groups": [{"error", "count", "first_at", "last_at", "queues",
    "example_job"}]}``; ``since`` is the window's start (ISO 8601)."""
    return {
        "queue": report.queue,
        "since": jsonable(report.window_start),
        "groups": [
            {
                "error": g.error,
                "count": g.count,
                "first_at": jsonable(g.first_at),
                "last_at": jsonable(g.last_at),
                "queues": list(g.queues),
                "example_job": g.example_job,
            }
            for g in report.groups
        ],
    }


def _target(entry: TimelineEntry) -> Text:
    if entry.kind == "queue":
        text = Text("queue ")
        text.append_text(_queues_text(entry.queues))
        return text
    ids = (
        f"id {entry.first_job}"
        if entry.first_job == entry.last_job
        else f"ids {entry.first_job}..{entry.last_job}"
    )
    text = Text(f"{entry.jobs:,} job{'s' if entry.jobs != 1 else ''} ({ids}) ")
    text.append_text(_queues_text(entry.queues))
    return text


def events_note(result: Timeline) -> str | None:
    notes = []
    if not result.complete:
        notes.append(
            f"read the last {result.scanned:,} audit rows; older ones of the last "
            f"{short_window(result.since)} are not shown"
        )
    if not result.shown_all:
        notes.append(f"showing the newest {len(result.entries):,}")
    return "; ".join(notes) or None


def events_renderables(result: Timeline) -> list[RenderableType]:
    head = Text(f"operator and watcher actions in the last {short_window(result.since)}")
    if result.actor is not None:
        head.append(" by ")
        head.append_text(lit(shorten(result.actor, 80), "bold"))
    if result.queue is not None:
        head.append(" on queue ")
        head.append_text(lit(shorten(result.queue, 80), "bold"))
    head.append(", newest first")
    parts: list[RenderableType] = [head]
    if not result.entries:
        parts.append(Text("none", style="dim"))
    else:
        t = table("")
        t.add_column("at")
        t.add_column("actor")
        t.add_column("action")
        t.add_column("on")
        t.add_column("reason", overflow="fold")
        for e in result.entries:
            actor = lit(shorten(e.actor, 40))
            if e.db_role is not None and e.db_role != e.actor:
                actor.append(" (role ", style="dim")
                actor.append_text(lit(shorten(e.db_role, 40), "dim"))
                actor.append(")", style="dim")
            t.add_row(
                clock(e.at),
                actor,
                lit(e.action, "bold"),
                _target(e),
                lit(shorten(e.reason, REASON_CELL)) if e.reason else Text("-", style="dim"),
            )
        parts.append(t)
    note = events_note(result)
    if note:
        parts.append(Text(note, style="yellow"))
    return parts


def events_json(result: Timeline) -> dict[str, Any]:
    return {
        "since": jsonable(result.window_start),
        "actor": result.actor,
        "queue": result.queue,
        "complete": result.complete and result.shown_all,
        "events": [
            {
                "at": jsonable(e.at),
                "kind": e.kind,
                "actor": e.actor,
                "db_role": e.db_role,
                "action": e.action,
                "reason": e.reason,
                "queues": list(e.queues),
                "jobs": e.jobs,
                "first_job": e.first_job,
                "last_job": e.last_job,
            }
            for e in result.entries
        ],
    }
