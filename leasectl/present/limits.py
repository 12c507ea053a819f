"""Flow control as the CLI shows it: `limit`'s result, `limits`' listing, `resume --ramp`'s
result, and their JSON documents."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.limits import QueueLimit, Ramped, rate_text
from leasectl.present.jsonout import limit_json as limit_json  # (with status --json's)
from leasectl.present.text import lit, table
from leasectl.present.times import ago, countdown, timestamp

THROTTLED_STYLE = "bold yellow"  # a queue at its cap or out of tokens


def limit_terms(limit: QueueLimit) -> str:
    """The configured limits in the words `limit` takes: ``at most 10 at once, 20/s (burst 20)``."""
    parts = []
    if limit.concurrency is not None:
        parts.append(f"at most {limit.concurrency:,} at once")
    if limit.rate is not None:
        burst = limit.effective_burst
        shown = f"{burst:g}" + ("" if limit.burst is not None else " by default")
        parts.append(f"{rate_text(limit.rate)} (burst {shown})")
    return ", ".join(parts)


def use_text(limit: QueueLimit) -> Text:
    """Its use now: ``live 7/10``, ``tokens 3.2/20``, the ramp's progress."""
    text = Text()
    if limit.cap_now is not None:
        text.append(
            f"live {limit.live:,}/{limit.cap_now:,}", THROTTLED_STYLE if limit.at_cap else ""
        )
    if limit.rate_now is not None and limit.tokens is not None and limit.burst_now is not None:
        if text:
            text.append(", ")
        low = limit.tokens < 1
        text.append(
            f"tokens {limit.tokens:.1f}/{limit.burst_now:g}", THROTTLED_STYLE if low else ""
        )
        text.append(f" at {rate_text(limit.rate_now)}")
    progress = limit.ramp_progress
    if limit.ramping and progress is not None:
        text.append(f", ramp {progress:.0%} ({countdown(limit.db_now, limit.ramp_until)} left)")
    return text


def limit_renderables(
    limit: QueueLimit, *, cleared: bool = False, ramped: Ramped | None = None
) -> list[RenderableType]:
    """The result of `limit` (the limits now set), `limit --clear` (those it lifted) or
    `resume --ramp`: what happened, the limits and their use, who set them and why."""
    head = Text()
    if cleared:
        head.append("lifted the limits of queue ")
        head.append_text(lit(limit.queue, "bold"))
        head.append(f": were {limit_terms(limit)}")
    elif ramped is not None:
        head.append("resumed queue " if ramped.resumed else "ramping queue ")
        head.append_text(lit(limit.queue, "bold"))
        head.append(f": {limit_terms(limit)}, reached by {timestamp(limit.ramp_until)}")
    else:
        head.append("limited queue ")
        head.append_text(lit(limit.queue, "bold"))
        head.append(f": {limit_terms(limit)}")
    parts: list[RenderableType] = [head]
    if not cleared:
        now = Text("  now: ", style="dim")
        now.append_text(use_text(limit))
        parts.append(now)
    since = Text("  set ", style="dim")
    since.append(timestamp(limit.set_at))
    since.append(" by ")
    since.append_text(lit(limit.set_by))
    reason = Text("  reason: ", style="dim")
    reason.append_text(lit(limit.reason))
    return [*parts, since, reason]


def limit_lines(limit: QueueLimit) -> Text:
    """The configured limits, one to a line, shortly: ``10 at once`` / ``20/s`` / ``burst 40``."""
    lines = []
    if limit.concurrency is not None:
        lines.append(f"{limit.concurrency:,} at once")
    if limit.rate is not None:
        lines += [rate_text(limit.rate), f"burst {limit.effective_burst:g}"]
    return Text("\n".join(lines))


def use_lines(limit: QueueLimit) -> Text:
    """Their use now, one fact to a line (live leases, tokens, the rate in force, the ramp, the
    claims they cut short), so that a narrow column breaks between facts, not inside one."""
    lines: list[Text] = []
    if limit.cap_now is not None:
        style = THROTTLED_STYLE if limit.at_cap else ""
        lines.append(Text(f"live {limit.live:,}/{limit.cap_now:,}", style))
    if limit.rate_now is not None and limit.tokens is not None and limit.burst_now is not None:
        style = THROTTLED_STYLE if limit.tokens < 1 else ""
        lines.append(Text(f"tokens {limit.tokens:.1f}/{limit.burst_now:g}", style))
        lines.append(Text(f"at {rate_text(limit.rate_now)}"))
    progress = limit.ramp_progress
    if limit.ramping and progress is not None:
        lines.append(Text(f"ramp {progress:.0%}"))
        lines.append(Text(f"{countdown(limit.db_now, limit.ramp_until)} to go", "dim"))
    lines.append(Text(f"throttled {limit.throttled:,}", "dim" if not limit.throttled else ""))
    return Text("\n").join(lines)


def limits_table(limits: Sequence[QueueLimit]) -> RenderableType:
    """`leasectl limits`: each limited queue, its limits, their use, when and by whom they were
    set, and why. Short cells of one fact a line and the time as an age (`5m03s ago`), so that
    at 80 columns only the reason, last, wraps (JSON has the full timestamps)."""
    if not limits:
        return Text("no queue is limited", style="dim")
    grid = table("Limited queues")
    grid.add_column("queue", overflow="fold")
    grid.add_column("limits", no_wrap=True)
    grid.add_column("now", no_wrap=True)
    grid.add_column("set, by", overflow="fold")
    grid.add_column("reason", overflow="fold", ratio=1, min_width=16)
    for limit in limits:
        when = Text(ago(limit.db_now, limit.set_at) + "\n")
        when.append_text(lit(limit.set_by))
        grid.add_row(
            lit(limit.queue, "bold"), limit_lines(limit), use_lines(limit), when, lit(limit.reason)
        )
    return grid
