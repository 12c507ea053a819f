"""A watcher pass (`requeue-stuck`, `watch`) and the guarded operator actions, in words."""

from __future__ import annotations

from datetime import datetime

from rich.console import RenderableType
from rich.text import Text

from leasectl.core.actions import action_info
from leasectl.core.models import ActionResult, ExpiredJob, JobStatus, WatcherResult
from leasectl.present.skips import skip_reason
from leasectl.present.styles import status_text
from leasectl.present.text import format_ids, lit, table
from leasectl.present.times import ago, clock


def would_become(job: ExpiredJob, mode: str) -> JobStatus:
    """What a real pass would make of a job a dry run lists (mirrors jobs_requeue_expired)."""
    if mode == "mark":
        return JobStatus.STUCK
    return JobStatus.FAILED if job.attempts >= job.max_attempts else JobStatus.PENDING


# The human listing of a watcher pass stops here: a pass may move 100,000 jobs, which would
# take Rich minutes to print and nobody to read. --json lists every one.
LISTED_JOBS = 50


def watcher_renderables(
    result: WatcherResult,
    db_now: datetime,
    mode: str,
    *,
    listed: int = LISTED_JOBS,
    owner: str | None = None,
) -> list[RenderableType]:
    """A pass (or a dry run): the jobs it moved (or would move), then what went where. With an
    ``owner`` the pass took only that lease owner's expired leases: its header names the owner."""
    title = "expired leases (dry run: nothing changed)" if result.dry_run else "jobs moved"
    listing = table(title)
    listing.add_column("id", justify="right")
    listing.add_column("queue", overflow="fold")
    listing.add_column("last owner", overflow="fold")
    listing.add_column("lease lapsed")
    listing.add_column("att.", justify="right")
    listing.add_column("would be" if result.dry_run else "now")
    shown = result.jobs[:listed]
    for j in shown:
        status = would_become(j, mode) if result.dry_run else j.status
        lapsed = Text(clock(j.lease_until))
        if j.lease_until is not None:
            lapsed.append(f"\n{ago(db_now, j.lease_until)}", style="red")
        listing.add_row(
            str(j.id),
            lit(j.queue),
            lit(j.lease_owner or "-"),
            lapsed,
            f"{j.attempts}/{j.max_attempts}",
            status_text(status),
        )
    parts: list[RenderableType] = []
    if owner is not None:
        parts.append(
            Text.assemble(("only the expired leases of owner ", "bold"), lit(owner, "bold"))
        )
    if result.jobs:
        parts.append(listing)
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
    if result.promoted is not None:
        healed = "waiting job(s) of concurrency keys left without a head"
        parts.append(Text(f"promoted {result.promoted} {healed}"))
    return parts


def action_renderables(result: ActionResult) -> list[RenderableType]:
    verb = action_info(result.action).past
    parts: list[RenderableType] = []
    if result.changed:
        parts.append(
            Text(f"{verb} {len(result.changed)} job(s): {format_ids(result.changed)}", "green")
        )
    else:
        parts.append(Text(f"{verb} no jobs", style="yellow"))
    if result.skipped:
        listing = table(f"skipped {len(result.skipped)}")
        listing.add_column("id", justify="right")
        listing.add_column("reason", overflow="fold")
        for s in result.skipped:
            listing.add_row(str(s.id), lit(skip_reason(s)))
        parts.append(listing)
    return parts
