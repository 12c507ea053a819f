"""Retention: delete finished history in small batches so the table stays small."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from leasectl.core.errors import UsageError
from leasectl.db import stats as history
from leasectl.db.operations import Operations
from leasectl.runtime.schedules import prune_slots


@dataclass(frozen=True)
class PruneResult:
    jobs: int
    events: int
    batches: int
    dry_run: bool = False
    history: int = 0  # rows of the per-minute history deleted (migration 20)
    slots: int = 0  # schedule_slots rows deleted (migration 25)


def prune(
    ops: Operations,
    *,
    older_than: timedelta,
    batch: int = 5000,
    queue: str | None = None,
    keep_events: bool = True,
    dry_run: bool = False,
    history_keep: timedelta | None = None,
    slots: bool = False,
) -> PruneResult:
    """Delete Completed/Failed/Cancelled jobs finished before ``older_than`` ago, one batch per
    statement.

    Each batch is its own short transaction, so row locks and WAL bursts stay small and
    workers keep running meanwhile. Audit events are kept unless ``keep_events`` is false.
    ``history_keep``: also delete the per-minute history older than that (not in a dry run).
    ``slots``: also delete the schedules' slot rows behind their next slot and older than
    SLOTS_KEEP (not in a dry run; a deleted slot is never enqueued again, migration 25).
    """
    if not 1 <= batch <= 100_000:
        raise UsageError("--batch must be between 1 and 100000")
    if dry_run:
        return PruneResult(ops.prune_count(older_than, queue), 0, 0, dry_run=True)
    jobs = events = batches = 0
    while True:
        deleted, deleted_events = ops.prune_batch(older_than, batch, queue, keep_events)
        batches += 1
        jobs += deleted
        events += deleted_events
        if deleted < batch:
            break
    pruned = history.prune(ops.db, history_keep) if history_keep is not None else 0
    slot_rows = prune_slots(ops) if slots else 0
    return PruneResult(jobs, events, batches, history=pruned, slots=slot_rows)
