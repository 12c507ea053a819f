"""The console's Queues view (one line per queue: how big, since when, getting better or worse)
and its queue screen (the last hour in sparklines, the error groups, the audit events), Rich
only. Queue names, pause reasons and errors are literal cells (``lit``).

The columns are laid out for the terminal's width (``layout``): below ``NARROW`` the queue name
is cut shorter, the trend is its arrow alone and the state a mark (⏸ paused, ⏳ limited, the
details on the queue's screen); the sparkline takes what the other columns leave."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.config import format_duration
from leasectl.core.counts import BoundedCount
from leasectl.core.literal import shorten
from leasectl.core.queues import OLD_DUE_S, QueueDetail, QueueRow, QueuesOverview, Trend
from leasectl.core.stats import MinuteStats
from leasectl.present.incident import errors_renderables, events_renderables
from leasectl.present.stats import groups, latency_text, sparkline, stats_renderables
from leasectl.present.status import limit_brief
from leasectl.present.styles import EXPIRED_STYLE, LIMITED_STYLE, PAUSED_STYLE
from leasectl.present.text import count_text, lit, num
from leasectl.present.times import clock

NARROW = 120  # columns: below, the narrow layout
MAX_SPARK = 60  # a character a minute at most
MIN_SPARK = 8
REASON_CHARS = 80

TREND_MARK = {
    Trend.GROWING: ("↑", "growing", "bold red"),
    Trend.SHRINKING: ("↓", "shrinking", "green"),
    Trend.STEADY: ("→", "steady", "dim"),
    Trend.UNKNOWN: ("?", "no data", "dim"),
}


@dataclass(frozen=True)
class Layout:
    """The Queues view's columns at one width."""

    narrow: bool
    name_chars: int  # a queue name is cut to this many characters (with …)
    spark_chars: int  # the sparkline's characters at most (minutes grouped to fit)

    @property
    def columns(self) -> tuple[str, ...]:
        return (
            "queue",
            "pending",
            "oldest",
            "trend" if not self.narrow else "±",
            "fail/h",
            "proc",
            "p95",
            "state" if not self.narrow else "",
            "done/min, last hour" if not self.narrow else "done/min",
        )


def layout(width: int) -> Layout:
    """The columns at ``width``: the fixed ones take about 65 columns narrow (a name of 16),
    130 wide (a name of 40, a limit's brief); the sparkline the rest, 8 to 60 characters."""
    if width < NARROW:
        return Layout(True, 16, max(MIN_SPARK, min(MAX_SPARK, width - 67)))
    return Layout(False, 40, max(MIN_SPARK, min(MAX_SPARK, width - 132)))


def trend_text(trend: Trend, *, narrow: bool = False) -> Text:
    mark, word, style = TREND_MARK[trend]
    return Text(mark if narrow else f"{mark} {word}", style=style)


def pending_text(count: BoundedCount) -> Text:
    """Pending as the main screen says it: exact, ``6,000+`` (a lower bound) or ``≈2.0M``."""
    return Text(str(count), style="dim" if count.value == 0 else "")


def oldest_text(age_s: float | None) -> Text:
    """How long the oldest due job has waited (bold yellow past ``OLD_DUE_S``); ``-``: none due."""
    if age_s is None:
        return Text("-", style="dim")
    return Text(format_duration(age_s), style="bold yellow" if age_s >= OLD_DUE_S else "")


def state_text(row: QueueRow, *, narrow: bool = False) -> Text:
    """Paused (``⏸ paused``) and its limits in force (``10/10 running · 20/s``); narrow, a mark
    each: ``⏸``, ``⏳``; ``-`` for neither."""
    text = Text()
    if row.paused is not None:
        text.append("⏸" if narrow else "⏸ paused", PAUSED_STYLE)
    if row.limit is not None:
        if text:
            text.append(" ")
        text.append_text(Text("⏳", LIMITED_STYLE) if narrow else limit_brief(row.limit))
    return text if text else Text("-", style="dim")


def done_spark(minutes: Sequence[MinuteStats], chars: int) -> Text:
    """Completions per minute over the window, oldest to newest, ``chars`` characters at most
    (a few minutes a character when narrow); a failure-only stretch shows as blank."""
    return sparkline([float(sum(m.completed for m in g)) for g in groups(minutes, chars)])


def queue_cells(row: QueueRow, at: Layout) -> list[Text]:
    """One queue's line, in ``Layout.columns``' order."""
    name = lit(row.queue, "bold")  # (its escapes shown, then cut to fit: "…" says so)
    name.truncate(at.name_chars, overflow="ellipsis")
    processing = num(row.processing)
    if row.expired:
        processing = Text(f"{row.processing:,}", style="")
        processing.append("✖", EXPIRED_STYLE)
    failed = row.failed
    return [
        name,
        pending_text(row.pending),
        oldest_text(row.oldest_due_age),
        trend_text(row.trend, narrow=at.narrow),
        Text(f"{failed:,}", style=("bold red" if row.failing else "red") if failed else "dim"),
        processing,
        Text(latency_text(row.pickup.p95_ms if row.pickup else None)),
        state_text(row, narrow=at.narrow),
        done_spark(row.minutes, at.spark_chars),
    ]


def overview_summary(view: QueuesOverview) -> Text:
    """Under the table: how many queues, how many need attention and how, as of when."""
    rows = view.rows
    growing = sum(1 for r in rows if r.trend is Trend.GROWING)
    failing = sum(1 for r in rows if r.failing)
    paused = sum(1 for r in rows if r.paused is not None)
    text = Text(f"{len(rows):,} queue{'s' if len(rows) != 1 else ''}")
    for n, what, style in (
        (growing, "growing", "bold red"),
        (failing, "failing", "bold red"),
        (paused, "paused", PAUSED_STYLE),
    ):
        text.append(" · ", "dim")
        text.append(f"{n} {what}", style if n else "dim")
    text.append(f" · as of {clock(view.db_now)}", "dim")
    if view.truncated:
        left = ", ".join(sorted(view.truncated))
        text.append(f" · some reads stopped at their limit ({left}): not every queue", "yellow")
    return text


def _row_facts(row: QueueRow) -> list[Text]:
    """The queue's figures now, in two lines: what it holds, then how it fares (each short
    enough for 80 columns, so that no figure is wrapped away from its label)."""
    text = Text("Pending ", style="bold")
    text.append_text(pending_text(row.pending))
    if row.oldest_due_age is not None:
        text.append(" (oldest due ", "dim")
        text.append_text(oldest_text(row.oldest_due_age))
        text.append(")", "dim")
    text.append(" · Processing ", style="bold")
    text.append(f"{row.processing:,}")
    if row.expired:
        text.append(f" ({row.expired:,} expired)", EXPIRED_STYLE)
    if row.stuck.value:
        text.append(" · Stuck ", style="bold")
        text.append(str(row.stuck))
    fares = Text("failed in the last hour ", style="bold")
    fares.append(count_text(row.failed), "bold red" if row.failing else "")
    fares.append(" · backlog ", style="bold")
    fares.append_text(trend_text(row.trend))
    fares.append(" · pickup p95 ", style="bold")
    fares.append(latency_text(row.pickup.p95_ms if row.pickup else None))
    return [text, fares]


def queue_head(detail: QueueDetail) -> list[RenderableType]:
    """The queue screen's first lines: its name, its figures now, its pause and its limits."""
    row = detail.row
    title = Text("Queue ", style="bold")
    title.append_text(lit(row.queue, "bold"))
    title.append(f"  as of {clock(detail.db_now)}", "dim")
    parts: list[RenderableType] = [title, *_row_facts(row)]
    if row.paused is not None:
        p = row.paused
        line = Text("⏸ paused", PAUSED_STYLE)
        line.append(f" {format_duration(detail.db_now - p.paused_at)} ago by ", "dim")
        line.append_text(lit(shorten(p.paused_by, 60)))
        line.append(": ", "dim")
        line.append_text(lit(shorten(p.reason, REASON_CHARS)))
        parts.append(line)
    if row.limit is not None:
        line = Text("⏳ limits ", LIMITED_STYLE)
        line.append_text(limit_brief(row.limit))
        parts.append(line)
    return parts


def queue_renderables(detail: QueueDetail, width: int) -> list[RenderableType]:
    """The queue screen: its head, the last hour's minutes in sparklines (enqueued, started,
    completed, failed, retried, pickup p50/p95, due backlog: `leasectl stats`' table), its error
    groups and its audit events (`leasectl errors` and `leasectl events` of the queue)."""
    charts = stats_renderables(detail.stats, width)[:2]  # (not its table of the last minutes)
    gap = Text("")
    return [
        *queue_head(detail),
        gap,
        *charts,
        gap,
        *errors_renderables(detail.errors),
        gap,
        *events_renderables(detail.events),
    ]
