"""`leasectl stats`: the per-minute history as JSON, and as a compact table of sparklines (one
line per measure, the window's minutes left to right) with the last minutes in figures below.
Readable at 80 columns: the sparklines take what the terminal leaves them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from leasectl.core.stats import MinuteStats, PickupLatency, QueueStats, add, percentile
from leasectl.present.jsonout import jsonable
from leasectl.present.text import count_text, lit, table

SPARKS = "▁▂▃▄▅▆▇█"
LAST_MINUTES = 5  # the minutes shown in figures under the sparklines
_FIXED = 32  # the columns of the sparkline table besides its sparkline (measure, total, last)
MIN_SPARK = 10
MAX_SPARK = 120


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def stats_json(report: QueueStats) -> dict[str, Any]:
    """The document of `stats --json`; a minute no fold sampled has ``pending`` null; past its
    cap, ``pending`` is a lower bound (``pending_capped``) or an estimate
    (``pending_estimated``)."""
    return {
        "queue": report.queue,
        "since": jsonable(report.since),
        "until": jsonable(report.until),
        "buckets": [
            {
                "start": jsonable(m.start),
                "enqueued": m.enqueued,
                "started": m.started,
                "completed": m.completed,
                "failed": m.failed,
                "retried": m.retried,
                "pickup_p50_ms": _ms(m.pickup_p50_ms),
                "pickup_p95_ms": _ms(m.pickup_p95_ms),
                "pending": m.pending,
                "pending_capped": m.pending_capped,
                "pending_estimated": m.pending_estimated,
            }
            for m in report.minutes
        ],
    }


def latency_text(ms: float | None) -> str:
    """A latency in its unit: ``-`` (none started), ``850ms``, ``12.5s``, ``3m05s``, ``2h10m``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def sparkline(values: Sequence[float | None]) -> Text:
    """One character per value, its height by the largest; blank: none (or zero)."""
    top = max((v for v in values if v is not None), default=0.0)
    out = []
    for v in values:
        if v is None or v <= 0 or top <= 0:
            out.append(" ")
        else:
            out.append(SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))])
    return Text("".join(out), style="cyan", no_wrap=True, overflow="crop")


def groups(minutes: Sequence[MinuteStats], width: int) -> list[Sequence[MinuteStats]]:
    """The minutes in at most ``width`` consecutive groups of equal length (the last shorter)."""
    size = max(1, math.ceil(len(minutes) / max(1, width)))
    return [minutes[i : i + size] for i in range(0, len(minutes), size)]


def _pending(group: Sequence[MinuteStats]) -> int | None:
    samples = [m.pending for m in group if m.pending is not None]
    return samples[-1] if samples else None


def _hist(group: Sequence[MinuteStats]) -> tuple[int, ...]:
    total: tuple[int, ...] = ()
    for m in group:
        total = add(total, m.pickup)
    return total


_COUNTS = ("enqueued", "started", "completed", "failed", "retried")


def _pending_cell(m: MinuteStats) -> str:
    if m.pending is None:
        return "-"
    return count_text(m.pending, m.pending_capped, m.pending_estimated)


def stats_renderables(report: QueueStats, width: int = 80) -> list[RenderableType]:
    """The window as sparklines (each character one minute, or a few at a narrow width) and
    its last minutes in figures."""
    minutes = report.minutes
    spark_width = max(MIN_SPARK, min(MAX_SPARK, width - _FIXED))
    parts = groups(minutes, spark_width)
    per = len(parts[0]) if parts else 1
    whole = _hist(minutes)
    title = Text("Stats: ", style="bold")
    who = lit(report.queue, "bold") if report.queue is not None else Text("every queue")
    title.append_text(who)
    title.append(
        f", {report.since:%Y-%m-%d %H:%M} to {report.until:%H:%M} UTC"
        f" ({len(minutes)} minutes{'' if per == 1 else f', {per} a character'})"
    )
    spark = table("")
    spark.title = None
    spark.add_column("measure", no_wrap=True)
    spark.add_column("window", justify="right", no_wrap=True)
    spark.add_column("oldest → newest", no_wrap=True, max_width=spark_width)
    spark.add_column("last", justify="right", no_wrap=True)
    last = minutes[-1] if minutes else None
    for name in _COUNTS:
        values = [float(sum(getattr(m, name) for m in g)) for g in parts]
        spark.add_row(
            name,
            count_text(sum(getattr(m, name) for m in minutes)),
            sparkline(values),
            count_text(getattr(last, name)) if last else "-",
        )
    for label, q in (("pickup p50", 0.5), ("pickup p95", 0.95)):
        spark.add_row(
            label,
            latency_text(percentile(whole, q)) if sum(whole) else "-",
            sparkline([percentile(_hist(g), q) for g in parts]),
            latency_text(percentile(last.pickup, q)) if last else "-",
        )
    pending = [_pending(g) for g in parts]
    spark.add_row(
        "pending (due)",
        "",
        sparkline([float(p) if p is not None else None for p in pending]),
        _pending_cell(last) if last else "-",
    )
    return [title, spark, _last_table(minutes[-LAST_MINUTES:])]


def _last_table(minutes: Sequence[MinuteStats]) -> Table:
    t = table("Last minutes")
    for name, justify in (
        ("minute", "left"),
        ("enq", "right"),
        ("start", "right"),
        ("done", "right"),
        ("fail", "right"),
        ("retry", "right"),
        ("p50", "right"),
        ("p95", "right"),
        ("pending", "right"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for m in minutes:
        t.add_row(
            f"{m.start:%H:%M}",
            count_text(m.enqueued),
            count_text(m.started),
            count_text(m.completed),
            count_text(m.failed),
            count_text(m.retried),
            latency_text(m.pickup_p50_ms),
            latency_text(m.pickup_p95_ms),
            _pending_cell(m),
        )
    return t


def pickup_json(latencies: Sequence[PickupLatency]) -> list[dict[str, Any]]:
    """`status --json`'s ``pickup``: each queue that started attempts in the current or the
    previous minute, its pickup latency's p50 and p95 (ms) and how many it started."""
    return [
        {
            "queue": p.queue,
            "started": p.started,
            "p50_ms": _ms(p.p50_ms),
            "p95_ms": _ms(p.p95_ms),
        }
        for p in latencies
    ]


def pickup_renderables(latencies: Sequence[PickupLatency]) -> list[RenderableType]:
    """`status`'s pickup latency table (nothing when no queue started an attempt lately)."""
    if not latencies:
        return []
    t = table("Pickup latency, last 1-2 min")
    t.add_column("queue", overflow="fold")
    t.add_column("started", justify="right", no_wrap=True)
    t.add_column("p50", justify="right", no_wrap=True)
    t.add_column("p95", justify="right", no_wrap=True)
    for p in latencies:
        t.add_row(
            lit(p.queue), count_text(p.started), latency_text(p.p50_ms), latency_text(p.p95_ms)
        )
    return [t]
