"""One console refresh made into a Snapshot: the panels from the rows the data layer read
(the Stuck panel, the owners a filter keeps) and the throughput counted across refreshes."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from leasectl.core.counts import BoundedCount, count_fields, recounted
from leasectl.core.models import (
    ConsoleCounts,
    JobStatus,
    OwnerHealth,
    PanelJob,
    Snapshot,
)
from leasectl.core.statuses import finished_estimate
from leasectl.core.throughput import ThroughputCounts
from leasectl.db.console import ConsoleReads


class Panels:
    """Snapshots read through ``reads``; each refresh counts only the minutes that settled
    since the last one (the settled ones are kept here, per queue filter)."""

    def __init__(self, reads: ConsoleReads) -> None:
        self.reads = reads
        self._throughput = ThroughputCounts()

    def snapshot(
        self,
        queue: str | None,
        limit: int,
        *,
        owner: str | None = None,
        job_id: int | None = None,
        risk_window: timedelta = timedelta(seconds=10),
        minutes: int = 30,
        timeout: timedelta = timedelta(seconds=5),
        owner_window: timedelta = timedelta(hours=1),
        owner_limit: int = 200,
        failed_scan: int = 5000,
    ) -> Snapshot:
        """What the console shows, every part of it read at the same instant (one
        transaction); panels hold at most ``limit`` rows each."""
        limit = max(1, limit)
        since = self._throughput.since(queue)
        rows = self.reads.read(
            queue,
            limit,
            owner=owner,
            job_id=job_id,
            risk_window=risk_window,
            minutes=minutes,
            since=since,
            timeout=timeout,
            owner_window=owner_window,
            owner_limit=owner_limit,
            failed_scan=failed_scan,
        )
        counts_row = rows.counts
        db_now = rows.db_now
        processing = rows.processing
        # The Stuck panel: Stuck jobs and expired leases, longest lapsed first. The Processing
        # rows, soonest expiry first, begin with every expired lease (or the first ``limit``),
        # so the expired leases need no second pass over the Processing set: they are the same
        # rows (an expired lease's risk window no longer matters).
        expired = [j for j in processing if j.lease_until is not None and j.lease_until < db_now]
        stuck = tuple(sorted((*expired, *rows.stuck), key=_lapsed_order)[:limit])
        throughput = self._throughput.merge(queue, since, rows.per_minute, db_now, minutes)
        # (The console's bars show Completed and Failed; status and the metrics every estimate.)
        estimated = finished_estimate(rows.finished_estimate)
        completed_estimate, failed_estimate = (
            (None, None)
            if estimated is None
            else (estimated[JobStatus.COMPLETED], estimated[JobStatus.FAILED])
        )
        holds = {j.lease_owner for j in (*processing, *stuck)}
        owners = [o for o in rows.owners if _owner_matches(o, queue, owner, job_id, holds)]
        if job_id is not None:  # at most one row in all: the panels are what it matches
            matched: ConsoleCounts | None = ConsoleCounts(
                pending=len(rows.pending),
                processing=len(processing),
                expired=len(expired),
                stuck=len(rows.stuck),
            )
        elif rows.matched is not None:
            cap = int(rows.matched["cap"])
            pending_count = BoundedCount.read(int(rows.matched["pending"]), cap)
            stuck_count = BoundedCount.read(int(rows.matched["stuck"]), cap)
            matched = ConsoleCounts(
                pending=pending_count.value,
                pending_capped=pending_count.capped,
                processing=rows.matched["processing"],
                expired=rows.matched["expired"],
                stuck=stuck_count.value,
                stuck_capped=stuck_count.capped,
            )
        else:
            matched = None
        estimates = (completed_estimate, failed_estimate)
        return Snapshot(
            db_now=db_now,
            server_version=str(counts_row["server_version"]),
            database=str(counts_row["database"]),
            counts=_counts(counts_row, estimates),
            all_counts=_counts(rows.all_counts, estimates) if rows.all_counts else None,
            matched=matched,
            all_owners=tuple(o.owner for o in rows.owners),
            queues=rows.queues,
            throughput=throughput.completed,
            failed_recent=throughput.failed,
            pending=rows.pending,
            processing=processing,
            stuck=stuck,
            owners=tuple(owners),
            queue=queue,
            owner=owner or None,
            job_id=job_id,
            limit=limit,
            risk_window=risk_window,
            failed=rows.failed,
            failed_scan=failed_scan,
            paused=rows.paused,
            paused_total=rows.paused_total,
            limits=rows.limits,
            limits_total=rows.limits_total,
            read_lag=rows.read_lag,
        )


def _counts(row: dict[str, Any], estimates: tuple[int | None, int | None]) -> ConsoleCounts:
    """console_counts' row as counts (Pending, due, Stuck and Waiting bounded by the row's cap);
    finished history only as the planner's estimates."""
    cap = int(row["cap"])
    pending, due, stuck, waiting = (
        BoundedCount.read(int(row[key]), cap, row.get(f"{key}_estimate"))
        for key in ("pending", "due", "stuck", "waiting")
    )
    # A thin estimate recounted (core/counts.py, as `status` and the metrics scrape do).
    pending = recounted(pending, row.get("pending_recounted"))
    if not pending.capped and row.get("due_recounted") is not None:
        due = BoundedCount(int(row["due_recounted"]), False)
    if pending.estimated and due.estimated:  # (the due ones are Pending too)
        due = BoundedCount(due.value, True, min(due.shown, pending.shown))
    return ConsoleCounts(
        **count_fields("pending", pending),
        **count_fields("due", due),
        oldest_due_at=row["oldest_due_at"],
        processing=row["processing"],
        at_risk=row["at_risk"],
        expired=row["expired"],
        **count_fields("stuck", stuck),
        **count_fields("waiting", waiting),
        completed_estimate=estimates[0],
        failed_estimate=estimates[1],
    )


def _lapsed_order(job: PanelJob) -> tuple[datetime, int]:
    """The Stuck panel's order, longest lapsed first (each of its rows has a lapse time)."""
    assert job.lapsed_at is not None
    return (job.lapsed_at, job.id)


def _owner_matches(
    o: OwnerHealth,
    queue: str | None,
    owner: str | None,
    job_id: int | None,
    holds: set[str | None],
) -> bool:
    """Whether an owner belongs in the console's Owners panel under the current filter;
    ``holds``: the owners of the jobs the panels list."""
    if owner and not o.owner.startswith(owner):
        return False
    if job_id is not None:
        return o.owner in holds
    return queue is None or queue in o.queues or o.owner in holds
