"""An action on every job a filter matches (`requeue --state failed ...`): its dry run (the count
and a sample, laid out as `list` lays out a page) and its outcome, in words and as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.actions import action_info
from leasectl.core.bulk import BulkPlan, BulkProgress, BulkResult
from leasectl.core.filters import JobFilter
from leasectl.present.history import JobListing, filter_text, listed_job_json
from leasectl.present.jsonout import jsonable
from leasectl.present.skips import skip_reason
from leasectl.present.text import lit, table

# The skipped jobs a human listing shows (--json lists every one).
LISTED_SKIPS = 20


def count_words(count: int, capped: bool) -> str:
    """An exact count, or a bounded one said as such."""
    return f"at least {count:,}" if capped else f"{count:,}"


def filter_line(flt: JobFilter) -> Text:
    text = Text("filter: ")
    text.append_text(filter_text(flt))
    if flt.since is not None or flt.until is not None:
        text.append(f" (times: {flt.time_column})", style="dim")
    return text


def plan_renderables(plan: BulkPlan) -> list[RenderableType]:
    verb = action_info(plan.action).past
    n = count_words(plan.count, plan.capped)
    parts: list[RenderableType] = [
        Text(f"dry run: {n} job(s) would be {verb}; nothing changed", style="bold"),
        filter_line(plan.filter),
    ]
    if plan.sample.jobs:
        shown = len(plan.sample.jobs)
        parts.append(Text(f"the first {shown} (newest first):", style="dim"))
        parts.append(JobListing(plan.sample))
    return parts


def plan_json(plan: BulkPlan) -> dict[str, Any]:
    return {
        "action": plan.action,
        "dry_run": True,
        "filter": dict(plan.filter.parts()),
        "matched": plan.count,
        "matched_capped": plan.capped,
        "sample": [listed_job_json(j) for j in plan.sample.jobs],
        "db_now": jsonable(plan.sample.db_now),
    }


def progress_text(action: str, p: BulkProgress) -> Text:
    verb = action_info(action).past
    return Text(
        f"batch {p.batches}: {p.matched:,} matched, {p.changed:,} {verb}, {p.skipped:,} skipped"
        + (f" (down to id {p.resume_after})" if p.resume_after is not None else "")
    )


def result_renderables(result: BulkResult, *, listed: int = LISTED_SKIPS) -> list[RenderableType]:
    verb = action_info(result.action).past
    parts: list[RenderableType] = [filter_line(result.filter)]
    style = "green" if result.complete and not result.skipped else "yellow"
    parts.append(
        Text(
            f"{result.matched:,} matched, {result.changed:,} {verb}, "
            f"{len(result.skipped):,} skipped, in {result.batches} batch(es), "
            f"{result.elapsed_s:.1f}s",
            style=style,
        )
    )
    if result.skipped:
        listing = table(f"skipped {len(result.skipped):,}")
        listing.add_column("id", justify="right")
        listing.add_column("reason", overflow="fold")
        for s in result.skipped[:listed]:
            listing.add_row(str(s.id), lit(skip_reason(s)))
        parts.append(listing)
        if len(result.skipped) > listed:
            more = len(result.skipped) - listed
            parts.append(Text(f"... and {more:,} more skipped; --json lists all", "dim"))
    if not result.complete:
        parts.append(Text(stopped_text(result), style="bold yellow"))
    return parts


def stopped_text(result: BulkResult) -> str:
    """What to do after a stop: the same command continues (the jobs done no longer match);
    ``--after`` continues exactly below the last id done."""
    where = (
        f"; or add --after {result.resume_after} to continue below the last id done"
        if result.resume_after is not None
        else ""
    )
    return (
        f"stopped after {result.batches} batch(es): every batch done is committed. Run the "
        f"same command again to continue{where}"
    )


def result_json(result: BulkResult) -> dict[str, Any]:
    return {
        "action": result.action,
        "dry_run": False,
        "filter": dict(result.filter.parts()),
        "reason": result.reason,
        "matched": result.matched,
        "changed": result.changed,
        "skipped": [{"id": s.id, "reason": skip_reason(s)} for s in result.skipped],
        "batches": result.batches,
        "complete": result.complete,
        "resume_after": result.resume_after,
        "elapsed_s": round(result.elapsed_s, 3),
        "batch_ms": batch_ms(result),
    }


def batch_ms(result: BulkResult) -> dict[str, float] | None:
    """The guarded batches' times (each one statement, plus the skip look-up when it skipped
    any): the median and the longest, in ms."""
    if not result.batch_seconds:
        return None
    ordered = sorted(result.batch_seconds)
    return {
        "p50": round(ordered[len(ordered) // 2] * 1000, 1),
        "max": round(ordered[-1] * 1000, 1),
    }
