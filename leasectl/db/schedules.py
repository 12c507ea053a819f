"""Schedules' operations (migration 19): add or change, remove, pause, resume and run one
(audited functions), read them, and the watcher's step that enqueues a due schedule's slots.

``Operations`` has these methods (``ScheduleOperations`` is one of its bases). The slots are
computed by the core (cronsim, ``core/schedules.py``) against the database's clock; which of
them become jobs, once each, PostgreSQL decides (``schedule_enqueue``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from leasectl.core.errors import PermissionDenied
from leasectl.core.schedules import (
    LATE_AFTER,
    Schedule,
    ScheduleSpec,
    SlotPlan,
    check_name,
    check_spec,
    next_slot_after,
)
from leasectl.db.connection import Database

_FIELDS = tuple(f.name for f in fields(Schedule))
# The most schedules `schedule list` and the console read at once.
MAX_LISTED = 10_000
# The late schedules `status` reads (the earliest first).
LATE_READ = 100


def schedule_from_row(row: dict[str, Any]) -> Schedule:
    return Schedule(**{name: row[name] for name in _FIELDS})


@dataclass(frozen=True)
class DueSchedule:
    """A schedule whose next slot has come, as the watcher's pass reads it."""

    name: str
    cron: str
    timezone: str
    catch_up: str
    catch_up_limit: int
    next_slot: datetime
    updated_at: datetime  # its version: schedule_enqueue refuses slots of an older one
    db_now: datetime


class ScheduleOperations:
    db: Database

    def db_now(self) -> datetime:
        row = self.db.one("schedule_clock")
        assert row is not None
        now: datetime = row["db_now"]
        return now

    def put_schedule(
        self,
        spec: ScheduleSpec,
        *,
        actor: str,
        reason: str | None,
        replace: bool = True,
        now: datetime | None = None,
    ) -> tuple[Schedule, str]:
        """Add ``spec``'s schedule, or change the one of its name to it (audited): the schedule
        and 'add', 'update' or 'same' (nothing changed); with ``replace`` false, 'exists' for a
        schedule of that name with other settings (nothing changed). ``now``: the clock its
        first slot is computed after (the database's, unless a test gives one)."""
        spec = check_spec(spec)
        first = next_slot_after(spec.cron, spec.timezone, now or self.db_now())
        params = {
            "name": spec.name,
            "cron": spec.cron,
            "timezone": spec.timezone,
            "queue": spec.queue,
            "payload": spec.payload,
            "priority": spec.priority,
            "max_attempts": spec.max_attempts,
            "catch_up": spec.catch_up,
            "catch_up_limit": spec.catch_up_limit,
            "first_slot": first,
            "replace": replace,
            "actor": actor,
            "reason": reason,
        }
        row = self.db.rows_waiting_at_most("schedule_put", params)[0]
        return schedule_from_row(row), str(row["action"])

    def remove_schedule(self, name: str, *, actor: str, reason: str | None) -> Schedule | None:
        """Remove the schedule ``name`` (audited): it, or None when there is none."""
        check_name(name)
        params = {"name": name, "actor": actor, "reason": reason}
        rows = self.db.rows_waiting_at_most("schedule_remove", params)
        return schedule_from_row(rows[0]) if rows else None

    def pause_schedule(self, name: str, *, actor: str, reason: str) -> tuple[Schedule, bool] | None:
        """Pause ``name`` (audited): it and whether this call paused it; None: no such schedule."""
        check_name(name)
        params = {"name": name, "actor": actor, "reason": reason}
        rows = self.db.rows_waiting_at_most("schedule_pause", params)
        return (schedule_from_row(rows[0]), bool(rows[0]["changed"])) if rows else None

    def resume_schedule(
        self, name: str, *, actor: str, reason: str | None, now: datetime | None = None
    ) -> tuple[Schedule, bool] | None:
        """Resume ``name`` from its first slot after now (the slots of the pause are skipped;
        audited): it and whether this call resumed it; None: no such schedule."""
        check_name(name)
        found = self.schedule(name)
        if found is None:
            return None
        first = next_slot_after(found.cron, found.timezone, now or found.db_now)
        params = {"name": name, "first_slot": first, "actor": actor, "reason": reason}
        rows = self.db.rows_waiting_at_most("schedule_resume", params)
        return (schedule_from_row(rows[0]), bool(rows[0]["changed"])) if rows else None

    def run_schedule(self, name: str, *, actor: str, reason: str | None) -> int | None:
        """Enqueue ``name``'s job now, outside its slots (audited): its id; None: no schedule."""
        check_name(name)
        params = {"name": name, "actor": actor, "reason": reason, "channel": self.db.channel}
        rows = self.db.rows_waiting_at_most("schedule_run", params)
        job_id = rows[0]["job_id"] if rows else None
        return int(job_id) if job_id is not None else None

    def schedules(self) -> list[Schedule]:
        """The schedules (at most MAX_LISTED), by name, with their last job's status."""
        rows = self.db.rows("schedules_list", {"limit": MAX_LISTED})
        return [schedule_from_row(r) for r in rows]

    def schedule(self, name: str) -> Schedule | None:
        """The schedule ``name``, or None."""
        row = self.db.one("schedule_get", {"name": check_name(name)})
        return schedule_from_row(row) if row is not None else None

    def late_schedules(self, grace: timedelta, limit: int = 100) -> list[Schedule]:
        """The schedules not paused whose next slot is more than ``grace`` behind now."""
        params = {"grace": grace, "limit": limit}
        return [schedule_from_row(r) for r in self.db.rows("schedules_late", params)]

    def late_schedules_if_readable(self, limit: int = LATE_READ) -> list[Schedule] | None:
        """The late schedules (LATE_AFTER) for `status`; None when this role may not read the
        schedules (a worker's: `status` is its too, and tells it nothing of them)."""
        try:
            return self.late_schedules(LATE_AFTER, limit)
        except PermissionDenied:
            return None

    def due_schedules(self, limit: int) -> list[DueSchedule]:
        """At most ``limit`` schedules whose next slot has come (the watcher's pass)."""
        rows = self.db.rows("schedules_due", {"limit": limit})
        return [DueSchedule(**{k: r[k] for k in DueSchedule.__dataclass_fields__}) for r in rows]

    def prune_schedule_slots(self, keep: timedelta, batch: int) -> int:
        """Delete up to ``batch`` slot rows behind their schedule's next slot and older than
        ``keep`` (one short statement; rows another session locks are skipped); how many."""
        row = self.db.one("schedule_slots_prune", {"keep": keep, "batch": batch})
        return int(row["deleted"]) if row else 0

    def enqueue_slots(self, due: DueSchedule, plan: SlotPlan) -> list[tuple[datetime, int]]:
        """Enqueue ``plan``'s slots of ``due`` once each and move its next slot on (one
        transaction): the slots this call enqueued and their jobs (none when another watcher
        did, or the schedule changed since it was read)."""
        params = {
            "name": due.name,
            "version": due.updated_at,
            "slots": list(plan.enqueue),
            "new_next": plan.next_slot,
            "passed_over": plan.passed_over,
            "channel": self.db.channel,
        }
        rows = self.db.rows_waiting_at_most("schedule_enqueue", params)
        return [(r["slot"], int(r["job_id"])) for r in rows]
