"""The schedules' step of `leasectl watch`: enqueue the due slots of each due schedule, once.

Every watcher runs it; none leads. A pass reads at most SCHEDULES_PER_PASS due schedules, plans
each one's slots by its catch-up policy (``core/schedules.py``, against the database's clock)
and hands them to ``schedule_enqueue``, which enqueues each slot at most once whatever the
other watchers do (migration 19).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasectl.core.errors import ConnectionFailed, LeasectlError
from leasectl.core.literal import echo
from leasectl.core.schedules import SLOTS_KEEP, SLOTS_PRUNE_BATCH, plan_slots
from leasectl.db.operations import Operations

log = logging.getLogger("leasectl.watcher")

# Due schedules one pass reads (one index scan of schedules_due_idx) and enqueues (one short
# transaction each); those left over are the next pass's, earliest first.
SCHEDULES_PER_PASS = 100


@dataclass(frozen=True)
class SchedulePass:
    schedules: int = 0  # due schedules looked at
    enqueued: int = 0  # jobs this pass enqueued
    passed_over: int = 0  # slots the catch-up policies skipped
    failed: int = 0  # schedules whose step failed (logged; tried again the next pass)


def schedule_pass(
    ops: Operations,
    *,
    limit: int = SCHEDULES_PER_PASS,
    now: datetime | None = None,
    stopping: threading.Event | None = None,
) -> SchedulePass:
    """One pass over the due schedules. ``now``: the clock the slots are planned against (the
    database's, read with the due schedules, unless a test gives one)."""
    due = ops.due_schedules(limit)
    enqueued = passed_over = failed = 0
    for schedule in due:
        if stopping is not None and stopping.is_set():
            break
        try:
            plan = plan_slots(
                schedule.cron,
                schedule.timezone,
                schedule.next_slot,
                now or schedule.db_now,
                schedule.catch_up,
                schedule.catch_up_limit,
            )
            done = ops.enqueue_slots(schedule, plan)
        except ConnectionFailed:
            raise
        except LeasectlError as exc:
            failed += 1
            log.warning("watcher: schedule %s: %s", echo(schedule.name), exc)
            continue
        enqueued += len(done)
        passed_over += plan.passed_over
    return SchedulePass(len(due), enqueued, passed_over, failed)


def prune_slots(
    ops: Operations,
    *,
    keep: timedelta = SLOTS_KEEP,
    batch: int = SLOTS_PRUNE_BATCH,
    max_batches: int | None = None,
    stopping: threading.Event | None = None,
) -> int:
    """Delete the schedule_slots rows behind their schedule's next slot and older than ``keep``,
    ``batch`` a statement, until fewer than ``batch`` go (or ``max_batches`` ran, or
    ``stopping`` is set); how many. A deleted slot is never enqueued again: it is before its
    schedule's next_slot, which schedule_enqueue refuses (migration 25)."""
    total = batches = 0
    while max_batches is None or batches < max_batches:
        deleted = ops.prune_schedule_slots(keep, batch)
        total += deleted
        batches += 1
        if deleted < batch or (stopping is not None and stopping.is_set()):
            break
    return total
