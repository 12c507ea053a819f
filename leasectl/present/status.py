"""`leasectl status`: the queues' counts and the lease owners, on the database clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.checks import Measure, Violation
from leasectl.core.config import format_duration
from leasectl.core.limits import QueueLimit, holding_back
from leasectl.core.literal import echo
from leasectl.core.models import (
    JobStatus,
    OwnerHealth,
    PausedQueue,
    QueueCounts,
    StatusReport,
)
from leasectl.core.readlag import countdowns_stale
from leasectl.core.schedules import LATE_AFTER
from leasectl.core.statuses import ESTIMATED, info
from leasectl.core.statuses import finished_estimate as estimate_of
from leasectl.present.styles import (
    EXPIRED_STYLE,
    FRESHNESS_STYLE,
    LIMITED_STYLE,
    PAUSED_STYLE,
    STATUS_STYLE,
)
from leasectl.present.text import count_text, lit, num, table
from leasectl.present.times import (
    ago,
    expiry,
    lease_intervals,
    oldest_due,
    read_lag_text,
    short_window,
    timestamp,
)


def totals(report: StatusReport) -> QueueCounts:
    qs = report.queues
    return QueueCounts(
        queue="total",
        pending=sum(q.pending for q in qs),
        due=sum(q.due for q in qs),
        processing=sum(q.processing for q in qs),
        expired=sum(q.expired for q in qs),
        stuck=sum(q.stuck for q in qs),
        waiting=sum(q.waiting for q in qs),
        completed_recent=sum(q.completed_recent for q in qs),
        failed_recent=sum(q.failed_recent for q in qs),
        cancelled_recent=sum(q.cancelled_recent for q in qs),
        oldest_due_at=report.oldest_due_at,
        # A sum with one lower bound in it is a lower bound.
        pending_capped=any(q.pending_capped for q in qs),
        due_capped=any(q.due_capped for q in qs),
        stuck_capped=any(q.stuck_capped for q in qs),
        waiting_capped=any(q.waiting_capped for q in qs),
        # A sum with one estimate in it is an estimate.
        pending_estimated=any(q.pending_estimated for q in qs),
        due_estimated=any(q.due_estimated for q in qs),
        stuck_estimated=any(q.stuck_estimated for q in qs),
        waiting_estimated=any(q.waiting_estimated for q in qs),
    )


def finished_estimate(report: StatusReport) -> dict[str, int | None]:
    """All-time totals of the estimated statuses (core/statuses.py) from planner statistics,
    never below what finished in the report's recent window (its queues' exact counts), by
    lower-case status; None for each while the table has none."""
    total = totals(report)
    recent = {
        s: getattr(total, field) for s in ESTIMATED if (field := info(s).recent_field) is not None
    }
    estimated = estimate_of(report.finished_estimate, recent)
    return {s.value.lower(): None if estimated is None else estimated[s] for s in ESTIMATED}


def status_renderables(report: StatusReport) -> list[RenderableType]:
    now = report.db_now
    window = short_window(report.recent_window)
    queues = table(f"queues at {timestamp(now)} (database clock)")
    queues.add_column("queue", overflow="fold", min_width=8)
    keyed = any(q.waiting for q in report.queues)
    for header in ("pending", "due", "oldest due", "proc.", "expired", "stuck"):
        queues.add_column(header, justify="right", min_width=min(len(header), 7))
    if keyed:  # jobs behind their concurrency key's head (only when some are)
        queues.add_column("waiting", justify="right", min_width=7)
    queues.add_column(f"done {window}", justify="right", min_width=4)
    queues.add_column(f"failed {window}", justify="right", min_width=6)

    def row(q: QueueCounts, *, style: str = "") -> None:
        waiting = (
            [num(q.waiting, capped=q.waiting_capped, estimated=q.waiting_estimated)]
            if keyed
            else []
        )
        queues.add_row(
            lit(q.queue, style),
            num(q.pending, capped=q.pending_capped, estimated=q.pending_estimated),
            num(q.due, capped=q.due_capped, estimated=q.due_estimated),
            Text(oldest_due(now, q.oldest_due_at)),
            num(q.processing),
            num(q.expired, alert=EXPIRED_STYLE),
            num(
                q.stuck,
                alert=STATUS_STYLE[JobStatus.STUCK],
                capped=q.stuck_capped,
                estimated=q.stuck_estimated,
            ),
            *waiting,
            num(q.completed_recent),
            num(q.failed_recent, alert=STATUS_STYLE[JobStatus.FAILED]),
            style=style,
        )

    for q in report.queues:
        row(q)
    if len(report.queues) > 1:
        queues.add_section()
        row(totals(report), style="bold")

    est = finished_estimate(report)
    if any(n is None for n in est.values()):
        estimate = Text(f"≈ all-time {'/'.join(est)}: unknown (no planner statistics yet)")
    else:
        estimate = Text(
            "≈ all-time " + " / ".join(f"{s} {n:,}" for s, n in est.items()) + " (planner estimate)"
        )
    estimate.stylize("dim")
    parts: list[RenderableType] = [
        queues
        if report.queues
        else Text(f"no live jobs, and none finished in the last {window}", style="dim"),
    ]
    lag = read_lag_text(report.read_lag, stale=countdowns_stale(report.read_lag, report.owners))
    if lag is not None:
        # Read from a hot standby: the clock above is its replay time while it is behind.
        parts.append(Text.assemble("read from a standby: ", lag))
    # Cancelled by operators: a line of its own (a column more does not fit 80 columns).
    cancelled = [q for q in report.queues if q.cancelled_recent]
    if cancelled:
        line = Text(f"cancelled by operators in the last {window}: ")
        for i, q in enumerate(cancelled):
            line.append(", " if i else "")
            line.append_text(lit(q.queue))
            line.append(f" {q.cancelled_recent:,}")
        parts.append(line)
    parts += [estimate]
    capped = [
        q.bounded(name) for q in report.queues for name in ("pending", "due", "stuck", "waiting")
    ]
    if any(c.estimated for c in capped):
        parts.append(
            Text(
                "≈N: past the exact count's cap, the planner's estimate (within about 25% while "
                "the table's statistics are fresh), so that status stays fast on a backlog",
                style="dim",
            )
        )
    if any(c.capped and not c.estimated for c in capped):
        parts.append(
            Text(
                "N+: at least N, counted up to a cap so that status stays fast on a backlog",
                style="dim",
            )
        )
    if report.truncated:
        parts.append(
            Text(
                "more queues and priorities of Pending jobs than status reads: "
                "not every queue is listed; pass --queue",
                style=EXPIRED_STYLE,
            )
        )
    parts.append(Text())
    if report.paused:
        parts.append(paused_table(report.paused[:PAUSED_SHOWN], now))
        if (more := max(report.paused_total, len(report.paused)) - PAUSED_SHOWN) > 0:
            parts.append(Text(f"…and {more:,} more paused queues (all: status --json)", "dim"))
        parts.append(Text())
    if report.limits:
        parts.append(limits_use_table(report.limits[:LIMITS_SHOWN]))
        if (more := max(report.limits_total, len(report.limits)) - LIMITS_SHOWN) > 0:
            parts.append(Text(f"…and {more:,} more limited queues (all: leasectl limits)", "dim"))
        parts.append(Text())
    parts.append(owners_table(report.owners, now))
    if report.expired or report.stuck:
        parts.append(Text())
        parts.append(
            Text(
                f"attention: {report.expired} expired lease(s), "
                f"{count_text(report.stuck, report.stuck_capped, report.stuck_estimated)} "
                "Stuck job(s); "
                "see `leasectl requeue-stuck --dry-run`",
                style=EXPIRED_STYLE,
            )
        )
    return parts


def owners_table(owners: Sequence[OwnerHealth], db_now: datetime) -> RenderableType:
    if not owners:
        return Text("lease owners: none, and no worker seen in the last hour", style="dim")
    listing = table("lease owners")
    listing.add_column("owner", overflow="fold", min_width=18)
    listing.add_column("fresh", min_width=5)
    listing.add_column("held", justify="right", min_width=4)
    listing.add_column("exp.", justify="right", min_width=4)
    listing.add_column("last beat", justify="right")
    listing.add_column("next expiry", justify="right")
    listing.add_column("hb/ttl", justify="right")
    for o in owners:
        listing.add_row(
            lit(o.owner),
            Text(o.freshness.value, style=FRESHNESS_STYLE.get(o.freshness, "")),
            num(o.held),
            num(o.expired, alert=EXPIRED_STYLE),
            Text(ago(db_now, o.last_sign_of_life)),
            expiry(db_now, o.next_expiry_at) if o.held else Text("-", style="dim"),
            Text(lease_intervals(o.heartbeat_every, o.lease_ttl)),
        )
    return listing


# The paused queues status shows (--json lists up to db/operations.py's PAUSED_READ).
PAUSED_SHOWN = 20


def paused_table(paused: Sequence[PausedQueue], db_now: datetime) -> RenderableType:
    """The paused queues: no worker claims their jobs until `leasectl resume`."""
    listing = table("paused queues (no claims until `leasectl resume`)")
    listing.add_column("queue", overflow="fold", min_width=8)
    listing.add_column("since", no_wrap=True)
    listing.add_column("for", justify="right", no_wrap=True)
    listing.add_column("by", overflow="fold")
    listing.add_column("reason", overflow="fold", ratio=1)
    for p in paused:
        listing.add_row(
            lit(p.queue, PAUSED_STYLE),
            Text(timestamp(p.paused_at)),
            Text(format_duration(max(db_now - p.paused_at, timedelta(0)))),
            lit(p.paused_by),
            lit(p.reason),
        )
    return listing


# The limited queues status shows (--json lists up to db/operations.py's LIMITS_READ).
LIMITS_SHOWN = 20


def limit_rate(per_second: float) -> str:
    """A rate in force, short: ``20/s``, ``12.6/s`` (ramping), ``1,500/s``; per minute below one
    a second (``30/m``)."""
    if per_second >= 100:
        return f"{per_second:,.0f}/s"
    if per_second >= 1:
        return f"{per_second:.3g}/s"
    return f"{per_second * 60:.3g}/m"


def limit_brief(limit: QueueLimit) -> Text:
    """A limited queue's limits in force and their use, on one line (the queue not named):
    ``10/10 running · 20/s (burst 40) · ramp 60%``; what holds its due jobs back now in
    LIMITED_STYLE (the cap reached, the bucket empty)."""
    text = Text()
    held = holding_back(limit)
    if limit.cap_now is not None:
        style = LIMITED_STYLE if limit.at_cap else ""
        text.append(f"{limit.live:,}/{limit.cap_now:,} running", style)
    if limit.rate_now is not None:
        if text:
            text.append(" · ", "dim")
        style = LIMITED_STYLE if held is not None and not limit.at_cap else ""
        text.append(limit_rate(limit.rate_now), style)
        if limit.burst_now is not None:
            text.append(f" (burst {limit.burst_now:.0f})", "dim")
    progress = limit.ramp_progress
    if limit.ramping and progress is not None:
        text.append(f" · ramp {min(progress, 0.99):.0%}", "cyan")
    return text


def limits_use_table(limits: Sequence[QueueLimit]) -> RenderableType:
    """The limited queues: their limits in force now, their use, and the claims cut short."""
    listing = table("limited queues (`leasectl limits`: who set them and why)")
    listing.add_column("queue", overflow="fold", min_width=8)
    listing.add_column("in force now", overflow="fold", ratio=1)
    listing.add_column("reached", no_wrap=True)  # (what holds due jobs back, if any wait)
    listing.add_column("throttled", justify="right", no_wrap=True)
    for limit in limits:
        held = holding_back(limit)
        listing.add_row(
            lit(limit.queue, "bold"),
            limit_brief(limit),
            Text(f"⏳ {held}", LIMITED_STYLE) if held else Text("-", "dim"),
            num(limit.throttled),
        )
    return listing


def pause_renderables(
    pause: PausedQueue, *, changed: bool = True, resumed: bool = False
) -> list[RenderableType]:
    """The result of `pause` (the new pause, or the one that stands) or of `resume` (the
    pause it ended): what happened, then the pause's time and actor, then its reason."""
    head = Text()
    if resumed:
        head.append("resumed queue ")
        head.append_text(lit(pause.queue, "bold"))
        head.append(": workers claim its jobs again")
    elif changed:
        head.append("paused queue ")
        head.append_text(lit(pause.queue, PAUSED_STYLE))
        head.append(": workers claim none of its jobs until `leasectl resume`")
    else:
        head.append("queue ")
        head.append_text(lit(pause.queue, PAUSED_STYLE))
        head.append(" was already paused")
    since = Text("  paused since " if resumed else "  since ", style="dim")
    since.append(timestamp(pause.paused_at))
    since.append(" by ")
    since.append_text(lit(pause.paused_by))
    reason = Text("  reason: ", style="dim")
    reason.append_text(lit(pause.reason))
    return [head, since, reason]


def violation_line(v: Violation) -> str:
    """One line of ``status --check``'s stderr for one queue past one threshold."""
    if v.measure is Measure.LATE_SCHEDULES:
        assert isinstance(v.value, int)
        return (
            f"check failed: {count_text(v.value, v.capped)} late schedule(s) (next slot over "
            f"{format_duration(LATE_AFTER)} overdue), more than --max-late-schedules {v.limit:,}"
        )
    where = f"check failed: queue {echo(v.queue or '')}: "
    if v.measure is Measure.OLDEST_DUE:
        return (
            f"{where}the oldest due job has waited {format_duration(v.value)}, "
            f"longer than --max-oldest-due {format_duration(v.limit)}"
        )
    what = "expired lease(s)" if v.measure is Measure.EXPIRED else "Stuck job(s)"
    option = "--max-expired" if v.measure is Measure.EXPIRED else "--max-stuck"
    assert isinstance(v.value, int)
    shown = count_text(v.value, v.capped, v.estimated)
    return f"{where}{shown} {what}, more than {option} {v.limit:,}"
