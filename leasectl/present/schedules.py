"""Schedules as the CLI shows them: `schedule list`'s table, a change's one-line result, a
sync's plan, and the cells the console's Schedules view shares."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.schedules import Schedule
from leasectl.present.text import lit, table
from leasectl.present.times import ago, countdown

LATE_STYLE = "bold red"
PAUSED_STYLE = "yellow"
OUTCOME_STYLES = {
    "Completed": "green",
    "Failed": "red",
    "Stuck": "bold red",
    "Processing": "cyan",
    "Pending": "",
    "Waiting": "",
    "Cancelled": "dim",
}


def slot_text(now: datetime, slot: datetime | None) -> str:
    """A slot as a time ahead or behind: ``in 42s``, ``3m05s ago``, ``-``."""
    return ago(now, slot)


def state_text(s: Schedule) -> Text:
    """``paused`` (by whom is in the JSON), ``late 5m03s``, or ``ok``."""
    if s.paused:
        return Text("paused", PAUSED_STYLE)
    if s.late:
        return Text(f"late {countdown(s.next_slot, s.db_now)}", LATE_STYLE)
    return Text("ok", "dim")


def outcome_text(s: Schedule) -> Text:
    """The last job's id and status: ``#42 Completed``; ``-`` before the first; ``#42 pruned``."""
    if s.last_job_id is None:
        return Text("-", "dim")
    status = s.last_status or "pruned"
    text = Text(f"#{s.last_job_id} ")
    text.append(status, OUTCOME_STYLES.get(status, "dim"))
    return text


def schedules_table(schedules: Sequence[Schedule]) -> RenderableType:
    """`leasectl schedule list`: each schedule, its expression and time zone, its queue, its
    next and last slot, its last job's outcome, and whether it is late or paused."""
    if not schedules:
        return Text("no schedule", style="dim")
    grid = table("Schedules")
    grid.add_column("name", overflow="fold")
    grid.add_column("cron, tz", overflow="fold")
    grid.add_column("queue", overflow="fold")
    grid.add_column("next", no_wrap=True)
    grid.add_column("last", no_wrap=True)
    grid.add_column("outcome", no_wrap=True)
    grid.add_column("state", no_wrap=True)
    for s in schedules:
        expr = lit(s.cron)
        expr.append("\n")
        expr.append_text(lit(s.timezone, "dim"))
        grid.add_row(
            lit(s.name, "bold"),
            expr,
            lit(s.queue),
            Text("-" if s.paused else slot_text(s.db_now, s.next_slot)),
            Text(slot_text(s.db_now, s.last_enqueued_at)),
            outcome_text(s),
            state_text(s),
        )
    return grid


def change_line(verb: str, s: Schedule) -> Text:
    """One line for a change: ``added schedule nightly (30 2 * * * Europe/Berlin → reports),
    next in 3h02m``."""
    text = Text(f"{verb} schedule ")
    text.append_text(lit(s.name, "bold"))
    text.append(" (")
    text.append_text(lit(f"{s.cron} {s.timezone}"))
    text.append(" → ")
    text.append_text(lit(s.queue))
    text.append(")")
    if s.paused:
        text.append(", paused")
    else:
        text.append(f", next {slot_text(s.db_now, s.next_slot)}")
    return text


def late_table(schedules: Sequence[Schedule]) -> RenderableType:
    """`status`: the schedules whose next slot is overdue (no `leasectl watch` enqueues them)."""
    grid = table("late schedules (is `leasectl watch` running?)")
    grid.add_column("schedule", overflow="fold")
    grid.add_column("cron, tz", overflow="fold")
    grid.add_column("due since", no_wrap=True)
    grid.add_column("last job", no_wrap=True)
    for s in schedules:
        expr = lit(s.cron)
        expr.append(" ")
        expr.append_text(lit(s.timezone, "dim"))
        grid.add_row(
            lit(s.name, "bold"),
            expr,
            Text(slot_text(s.db_now, s.next_slot), LATE_STYLE),
            outcome_text(s),
        )
    return grid
