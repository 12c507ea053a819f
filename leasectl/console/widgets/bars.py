"""The lines around the panels: status bar, connection banner, summary counts and panel tabs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from leasectl.console.view import ConsoleFilter, cut, held_back
from leasectl.console.widgets import show_text
from leasectl.core.config import format_duration
from leasectl.core.counts import BoundedCount
from leasectl.core.models import JobStatus, Snapshot
from leasectl.present.status import limit_brief
from leasectl.present.styles import (
    EXPIRED_STYLE,
    LIMITED_STYLE,
    PAUSED_STYLE,
    RISK_STYLE,
    STATUS_STYLE,
)
from leasectl.present.text import count_text, estimate_text, lit
from leasectl.present.times import age, local_clock, oldest_due, read_lag_text, seconds_age

STUCK_STYLE = STATUS_STYLE[JobStatus.STUCK]
WAITING_STYLE = STATUS_STYLE[JobStatus.WAITING]
# The summary's paused line: at most this many queues named, each name and reason cut.
PAUSED_LISTED = 3
PAUSED_QUEUE_CHARS = 40
PAUSED_BY_CHARS = 30
PAUSED_REASON_CHARS = 80
# The summary's limits line: at most this many limited queues named.
LIMITS_LISTED = 3


@dataclass(frozen=True)
class Status:
    """Everything the status bar and the banner say, computed by the app each second."""

    where: str
    server_version: str | None
    db_now: datetime | None
    since_refresh: float | None
    took: float | None
    connected: bool | None  # None: not yet known
    error: str | None
    retry_in: float | None
    attempt: int
    read_only: str | None  # why, or None when writable
    filter: ConsoleFilter
    polling: bool
    # The reads' server when not ``where`` (a hot standby), its lag behind the primary at the
    # last refresh, and whether that makes the countdowns stale (core/readlag.py).
    read_where: str | None = None
    read_lag: timedelta | None = None
    lag_stale: bool = False


class StatusBar(Horizontal):
    _last: Status | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="status-left")
        yield Static(id="status-right")

    def on_resize(self) -> None:
        """What the left half leaves out depends on the width: lay it out again at the new one."""
        self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self._last is not None:
            self.show(self._last)

    def show(self, s: Status) -> None:
        self._last = s
        left = Text()
        if s.connected is None:
            left.append(" ◌ connecting ", style="bold black on yellow")
        elif s.connected:
            left.append(" ● connected ", style="bold black on green")
        else:
            left.append(" ✖ disconnected ", style="bold white on red")
        left.append("  ")
        left.append_text(lit(s.where, "bold"))  # DSN parts: untrusted
        # When the bar is too narrow for both halves, the left half gives up, in turn, the
        # server's version, the standby's database name when it is the primary's, and the right
        # half its "db clock" label, so that both servers' addresses stay in sight; past that
        # the left half is cut with "…".
        right = self._right(s, compact=False)
        width = self.size.width

        def room(r: Text) -> int:
            return width - r.cell_len - 2 if width > 0 else 1 << 30  # (the right's padding)

        version = Text()
        if s.server_version:
            number = s.server_version.split()[0]  # "15.20 (Debian 15.20-0+deb12u1)"
            version = lit(f"  PostgreSQL {number}", "dim")
        if s.read_where is not None:
            reads = lit(s.read_where, "bold")
            _, _, database = s.where.rpartition("/")
            if left.cell_len + 8 + reads.cell_len > room(right):
                if "/" in s.where and s.read_where.endswith("/" + database):
                    reads = lit(s.read_where[: -len(database) - 1], "bold")
                if left.cell_len + 8 + reads.cell_len > room(right):
                    right = self._right(s, compact=True)
            left.append("  reads ", style="dim")
            left.append_text(reads)
        if left.cell_len + version.cell_len <= room(right):
            left.append_text(version)
        show_text(self.query_one("#status-left", Static), left)
        show_text(self.query_one("#status-right", Static), right)

    @staticmethod
    def _right(s: Status, *, compact: bool) -> Text:
        right = Text()
        if s.read_only:
            right.append(" READ-ONLY ", style="bold white on dark_red")
            right.append("  ")
        lag = read_lag_text(s.read_lag, stale=s.lag_stale) if s.connected else None
        if lag is not None:
            right.append_text(lag)
            right.append("  ")
        if s.db_now is not None:
            if not compact:
                right.append("db clock ", style="dim")
            right.append(local_clock(s.db_now), style="bold")
            right.append("  ")
        if s.since_refresh is None:
            right.append("no data yet", style="yellow")
        else:
            stale = not s.connected or s.since_refresh > 30
            right.append("refreshed ", style="dim")
            right.append(seconds_age(s.since_refresh) + " ago", style="bold red" if stale else "")
        return right


def banner_text(s: Status) -> Text | None:
    """The red line shown while polls fail; None while all is well."""
    if s.error is None:
        return None
    text = Text()
    if s.connected is False and s.read_where is not None:
        text.append("✖ READ SERVER UNREACHABLE (actions still go to the primary) ", style="bold")
    elif s.connected is False:
        text.append("✖ DATABASE UNREACHABLE ", style="bold")
    else:
        text.append("✖ REFRESH FAILED ", style="bold")
    text.append_text(lit(s.error))  # the server's message may quote stored values
    if s.polling:
        text.append(f" · retrying now (attempt {s.attempt + 1})", style="bold")
    elif s.retry_in is not None:
        text.append(
            f" · next retry in {format_duration(max(0.0, s.retry_in))} (attempt {s.attempt + 1})",
            style="bold",
        )
    if s.since_refresh is not None:
        text.append(f" · showing data from {seconds_age(s.since_refresh)} ago", style="bold")
    else:
        text.append(" · no data yet")
    return text


class Summary(Horizontal):
    """Counts for the selected queue (or all) and the throughput sparkline."""

    def compose(self) -> ComposeResult:
        yield Static(id="counts")
        with Vertical(id="throughput"):
            yield Static(id="throughput-label")
            yield Sparkline([], id="sparkline")

    _last: tuple[Snapshot | None, datetime | None, ConsoleFilter] | None = None

    def on_resize(self) -> None:
        self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        """The counts are packed for the width: lay them out again at the new one."""
        if self._last is not None:
            self.show(*self._last)

    def show(self, snap: Snapshot | None, now: datetime | None, flt: ConsoleFilter) -> None:
        self._last = (snap, now, flt)
        counts = self.query_one("#counts", Static)
        label = self.query_one("#throughput-label", Static)
        spark = self.query_one("#sparkline", Sparkline)
        if snap is None or now is None:
            show_text(counts, Text("waiting for the first refresh…", style="dim"))
            show_text(label, "")
            spark.data = []
            return
        width = counts.size.width or self.size.width or 80
        text = pack(counts_groups(snap, now, flt), width)
        paused = paused_text(snap, now, width)
        if paused is not None:
            text.append("\n")
            text.append_text(paused)
        limited = limits_text(snap, flt, width)
        if limited is not None:
            text.append("\n")
            text.append_text(limited)
        show_text(counts, text)
        show_text(label, throughput_text(snap))
        spark.data = [float(v) for v in snap.throughput]


def counts_groups(snap: Snapshot, now: datetime, flt: ConsoleFilter) -> list[Text]:
    """The summary in groups that are never split across lines, in `leasectl status`'s words:
    Processing counts every held lease, the expired ones among them; Stuck counts the jobs in
    status Stuck (quarantined), not the expired leases again."""
    c = snap.counts
    pending = Text.assemble(
        ("Pending ", "dim"),
        (count_text(c.pending, c.pending_capped, c.pending_estimated), "bold"),
        (f" ({count_text(c.due, c.due_capped, c.due_estimated)} due", "dim"),
        (", oldest ", "dim"),
        (oldest_due(now, c.oldest_due_at), "bold"),
        (")", "dim"),
    )
    processing = Text.assemble(("Processing ", "dim"), (count_text(c.processing), "bold"))
    notes: list[Text] = []
    if c.at_risk:
        notes.append(Text(f"⚠ {count_text(c.at_risk)} at risk", style=RISK_STYLE))
    if c.expired:
        notes.append(Text(f"✖ {count_text(c.expired)} expired", style=EXPIRED_STYLE))
    if notes:
        processing.append(" (", style="dim")
        processing.append_text(Text(", ", style="dim").join(notes))
        processing.append(")", style="dim")
    stuck = Text.assemble(
        ("Stuck ", "dim"),
        (
            count_text(c.stuck, c.stuck_capped, c.stuck_estimated),
            STUCK_STYLE if c.stuck else "bold",
        ),
    )
    groups = [scope_text(flt), pending, processing, stuck]
    if c.waiting:
        # Behind their concurrency key: shown only when there are any (most queues have no keys).
        groups.append(
            Text.assemble(
                ("Waiting ", "dim"),
                (count_text(c.waiting, c.waiting_capped, c.waiting_estimated), WAITING_STYLE),
            )
        )
    return [*groups, history_text(snap)]


def paused_text(snap: Snapshot, now: datetime, width: int) -> Text | None:
    """The paused queues, whatever the filter, on one line of at most ``width`` cells (cut with
    "…"): no worker claims their jobs until they are resumed. None when no queue is paused.
    Queue names, actors and reasons are shown literally, each cut to a bounded length; the
    reasons are cut shorter (to nothing) before a queue named would be cut off the line."""
    if not snap.paused_total:
        return None
    text = Text()
    for reason_chars in PAUSED_REASON_CUTS:
        text = _paused_line(snap, now, reason_chars)
        if text.cell_len <= width:
            return text
    text.truncate(max(1, width), overflow="ellipsis")
    return text


# The summary's paused line tries these cuts of each reason, longest first (0: no reason).
PAUSED_REASON_CUTS = (PAUSED_REASON_CHARS, 40, 20, 0)


def _paused_line(snap: Snapshot, now: datetime, reason_chars: int) -> Text:
    text = Text("⏸ paused: ", style=PAUSED_STYLE)
    for i, p in enumerate(snap.paused[:PAUSED_LISTED]):
        if i:
            text.append(", ", style="dim")
        text.append_text(lit(cut(p.queue, PAUSED_QUEUE_CHARS), PAUSED_STYLE))
        text.append(f" (since {age(now, p.paused_at)}, by ")
        text.append_text(lit(cut(p.paused_by, PAUSED_BY_CHARS)))
        if reason_chars:
            text.append(': "')
            text.append_text(lit(cut(p.reason, reason_chars), "italic"))
            text.append('"')
        text.append(")")
    more = snap.paused_total - min(len(snap.paused), PAUSED_LISTED)
    if more > 0:
        text.append(f", and {count_text(more)} more", style="dim")
    return text


def limits_text(snap: Snapshot, flt: ConsoleFilter, width: int) -> Text | None:
    """The limited queues, whatever the filter, on one line of at most ``width`` cells (cut
    with "…"): each one's limits in force and their use (``payments 10/10 running · 20/s
    (burst 40)``), the filter's queue first, then those whose due jobs wait (at their cap, out
    of tokens), then by name; at most LIMITS_LISTED named. None when no queue is limited."""
    if not snap.limits_total:
        return None
    held = held_back(snap)
    ordered = sorted(
        snap.limits, key=lambda lim: (lim.queue != flt.queue, lim.queue not in held, lim.queue)
    )
    text = Text("⏳ limits: ", style=LIMITED_STYLE if held else "bold")
    for i, lim in enumerate(ordered[:LIMITS_LISTED]):
        if i:
            text.append(", ", style="dim")
        text.append_text(lit(cut(lim.queue, PAUSED_QUEUE_CHARS), "bold"))
        text.append(" ")
        text.append_text(limit_brief(lim))
    more = snap.limits_total - min(len(snap.limits), LIMITS_LISTED)
    if more > 0:
        text.append(f", and {count_text(more)} more", style="dim")
    if text.cell_len > width:
        text.truncate(max(1, width), overflow="ellipsis")
    return text


def scope_text(flt: ConsoleFilter) -> Text:
    """What the console shows, for as long as it shows it: all queues, or the filter (the
    counts follow its queue; an owner or a job id narrows the panels only)."""
    if flt.empty:
        return Text("all queues", style="bold underline")
    text = Text("filter ", style="bold reverse")
    text.append(" ")
    text.append_text(lit(str(flt), "bold"))  # the operator's own text: shown literally
    if flt.owner is not None or flt.job_id is not None:
        counts = f"queue {flt.queue}" if flt.queue is not None else "all queues"
        text.append_text(lit(f" (counts: {counts})", "dim"))
    text.append("  esc clears", style="dim")
    return text


def history_text(snap: Snapshot) -> Text:
    """Finished history, all time: only the planner's estimate (exact would scan it), said to
    be one. An estimate is never shown below what finished recently, counted exactly: statistics
    gathered before a burst are behind it."""
    c = snap.counts
    if c.completed_estimate is None or c.failed_estimate is None:
        return Text.assemble(
            ("All-time Completed/Failed: ", "dim"),
            ("no statistics yet", "italic"),
            (" (≈ planner estimate, after ANALYZE)", "dim"),
        )
    completed = max(c.completed_estimate, sum(snap.throughput))
    failed = max(c.failed_estimate, snap.failed_recent)
    return Text.assemble(
        ("All-time ", "dim"),
        ("Completed ", "dim"),
        (estimate_text(completed), ""),
        ("  Failed ", "dim"),
        (estimate_text(failed), ""),
        (" (≈ planner statistics, all queues)", "dim"),
    )


def pack(groups: Sequence[Text], width: int, gap: int = 3) -> Text:
    """Lay groups out greedily in lines of at most ``width`` cells."""
    lines: list[Text] = []
    line = Text()
    for group in groups:
        if line.cell_len and line.cell_len + gap + group.cell_len > width:
            lines.append(line)
            line = Text()
        if line.cell_len:
            line.append(" " * gap)
        line.append_text(group)
    lines.append(line)
    return Text("\n").join(lines)


def throughput_text(snap: Snapshot) -> Text:
    minutes = len(snap.throughput)
    # Per clock minute; the last one is the current minute so far: "last" is the one before.
    last = snap.throughput[-2] if len(snap.throughput) > 1 else sum(snap.throughput)
    peak = max(snap.throughput, default=0)
    text = Text.assemble(
        (f"completed/min, {minutes}m: ", "dim"),
        (str(last), "bold"),
        (" last, ", "dim"),
        (str(peak), "bold"),
        (" peak", "dim"),
    )
    if snap.failed_recent:
        text.append(f", {snap.failed_recent} failed", style="red")
    return text


PANEL_NAMES = ("Pending", "Processing", "Expired & Stuck", "Owners", "Failed")


SHORT_NAMES = ("Pend", "Proc", "Exp+Stuck", "Own", "Fail")


def tabs_text(active: int, totals: Sequence[BoundedCount | None], width: int | None = None) -> Text:
    """The narrow layout shows one panel at a time; this line says which and what is behind
    (a count that is a lower bound as ``6,000+``). Within ``width``, every count stays: the
    names of the other panels shorten first, then the active one's."""
    tries = (
        PANEL_NAMES,
        tuple(n if i == active else SHORT_NAMES[i] for i, n in enumerate(PANEL_NAMES)),
        SHORT_NAMES,
    )
    text = Text()
    for names in tries:
        text = _tabs(active, totals, names)
        if width is None or text.cell_len <= width:
            break
    return text


def _tabs(active: int, totals: Sequence[BoundedCount | None], names: Sequence[str]) -> Text:
    text = Text()
    for i, (name, total) in enumerate(zip(names, totals, strict=True)):
        label = f" {i + 1} {name}" + (f" {total}" if total is not None else "")
        style = "bold reverse" if i == active else ""
        if i == 2 and total is not None and total.value:
            style += " red"
        text.append(label + " ", style=style.strip())
        if i < len(names) - 1:
            text.append(" ")
    return text
