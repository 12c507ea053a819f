"""Schedules: a cron expression in a time zone, its slots, and which of them a pass enqueues.

The slots are computed here, by cronsim (PostgreSQL has no cron); which of them become jobs,
once each, PostgreSQL decides (migration 19: schedule_enqueue and schedule_slots' key).

Time zones and DST follow cronsim, which follows Debian cron's documented behaviour: an
expression with a fixed minute and hour (``30 2 * * *``) whose time does not exist on a
spring-forward day runs at the first minute after the gap (03:00 in Europe/Berlin), and one whose
time exists twice on a fall-back day runs once, at the first (the summer-time) occurrence.
An expression whose minute or hour field starts with ``*`` (``*/15 * * * *``) counts real time:
it runs in both occurrences of a repeated hour and not in a skipped one.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from leasectl.core.config import (
    MAX_ATTEMPTS,
    MAX_QUEUE_CHARS,
    check_queue,
    parse_payload,
)
from leasectl.core.errors import UsageError
from leasectl.core.literal import echo

CatchUp = Literal["none", "last", "all"]
CATCH_UPS: tuple[CatchUp, ...] = ("none", "last", "all")
DEFAULT_CATCH_UP: CatchUp = "last"
DEFAULT_CATCH_UP_LIMIT = 10
MAX_CATCH_UP_LIMIT = 1000
MAX_NAME_CHARS = MAX_QUEUE_CHARS
MAX_CRON_CHARS = 200
MAX_TIMEZONE_CHARS = 100
# Catch-up `none`: a slot at most this old when the pass sees it is on time (enqueued); an older
# one was missed (skipped). Longer than the watcher's default interval (30 s).
ON_TIME = timedelta(seconds=60)
# A schedule is late when its next slot is this far behind the database's clock: the watcher
# has not enqueued it (no `watch` running, or one failing). `status` lists it; the exporter
# exports its lateness either way.
LATE_AFTER = timedelta(minutes=2)
# A schedule_slots row (the slot's job id) is kept this long, and then deleted by `watch` and
# `prune` once its slot is behind the schedule's next_slot: schedule_enqueue refuses any slot
# before next_slot, so a deleted slot cannot be enqueued again (docs/design.md, migration 25).
# The database refuses less than a day.
SLOTS_KEEP = timedelta(days=7)
# Slot rows one prune statement deletes at most.
SLOTS_PRUNE_BATCH = 1000
# Slots a pass walks forward from a schedule's next slot; past it (a frequent schedule whose
# watcher was down for days) the slots it keeps are found walking back from now.
MAX_SCAN = 10_000

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as declared (`schedule add`, a sync file's table), checked by check_spec."""

    name: str
    cron: str
    queue: str
    timezone: str = "UTC"
    payload: str = "{}"  # JSON text, as given
    priority: int = 0
    max_attempts: int = 5
    catch_up: CatchUp = DEFAULT_CATCH_UP
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT


@dataclass(frozen=True)
class Schedule:
    """A schedule as stored, with its bookkeeping (database clock) and its last job's status."""

    name: str
    cron: str
    timezone: str
    queue: str
    payload: Any
    priority: int
    max_attempts: int
    catch_up: str
    catch_up_limit: int
    next_slot: datetime
    last_slot: datetime | None
    last_job_id: int | None
    last_enqueued_at: datetime | None
    skipped: int
    paused_at: datetime | None
    paused_by: str | None
    paused_reason: str | None
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str
    reason: str | None
    last_status: str | None  # None: no job yet, or its job was pruned
    db_now: datetime

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def lateness(self) -> timedelta:
        """How far its next slot is behind the database's clock (zero when it is not due)."""
        if self.paused:
            return timedelta(0)
        return max(self.db_now - self.next_slot, timedelta(0))

    @property
    def late(self) -> bool:
        return self.lateness > LATE_AFTER

    @property
    def payload_text(self) -> str:
        return json.dumps(self.payload, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class SlotPlan:
    """What a pass does with a due schedule: the slots to enqueue, how many it passes over
    (the catch-up policy's), and the next slot after now."""

    enqueue: tuple[datetime, ...]
    passed_over: int
    next_slot: datetime


def check_name(name: str) -> str:
    if not name.strip():
        raise UsageError("a schedule name must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise UsageError(
            f"a schedule name has at most {MAX_NAME_CHARS} characters, "
            f"got {len(name):,}: {echo(name)}"
        )
    return name


def normalise_cron(expr: str) -> str:
    """A cron expression of 5 fields, or an alias (``@hourly``) as its 5 fields; refused (one
    line) when cronsim cannot read it."""
    text = " ".join(expr.split())
    if len(text) > MAX_CRON_CHARS:
        raise UsageError(f"--cron: at most {MAX_CRON_CHARS} characters: {echo(expr)}")
    if text.startswith("@"):
        fields = ALIASES.get(text.lower())
        if fields is None:
            known = ", ".join(sorted(ALIASES))
            raise UsageError(f"invalid cron expression {echo(expr)}: unknown alias (use {known})")
        return fields
    if len(text.split(" ")) != 5:
        raise UsageError(
            f"invalid cron expression {echo(expr)}: 5 fields (minute hour day month weekday)"
        )
    try:
        next(CronSim(text, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise UsageError(f"invalid cron expression {echo(expr)}: {exc}") from None
    return text


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (zoneinfo), refused in one line when unknown."""
    if not name or len(name) > MAX_TIMEZONE_CHARS or name != name.strip():
        raise UsageError(f"unknown time zone {echo(name)}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UsageError(f"unknown time zone {echo(name)} (an IANA name: Europe/Berlin)") from None


def check_catch_up(policy: str, limit: int) -> tuple[CatchUp, int]:
    if policy not in CATCH_UPS:
        raise UsageError(f"--catch-up: none, last or all, not {echo(policy)}")
    if not 1 <= limit <= MAX_CATCH_UP_LIMIT:
        raise UsageError(f"--catch-up-limit: between 1 and {MAX_CATCH_UP_LIMIT}, not {limit}")
    return policy, limit


def check_spec(spec: ScheduleSpec) -> ScheduleSpec:
    """The spec with its expression normalised, once every value is one leasectl can store."""
    check_name(spec.name)
    cron = normalise_cron(spec.cron)
    zone(spec.timezone)
    check_queue(spec.queue)
    parse_payload(spec.payload)
    if not -(2**31) <= spec.priority < 2**31:
        raise UsageError(f"--priority: a 32-bit integer, not {spec.priority}")
    if not 1 <= spec.max_attempts <= MAX_ATTEMPTS:
        raise UsageError(f"--max-attempts: between 1 and {MAX_ATTEMPTS}, not {spec.max_attempts}")
    check_catch_up(spec.catch_up, spec.catch_up_limit)
    return ScheduleSpec(
        spec.name,
        cron,
        spec.queue,
        spec.timezone,
        spec.payload,
        spec.priority,
        spec.max_attempts,
        spec.catch_up,
        spec.catch_up_limit,
    )


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def slots_after(cron: str, timezone: str, after: datetime) -> CronSim:
    """The slots of ``cron`` in ``timezone`` strictly after ``after`` (an aware datetime), as
    aware datetimes of that zone (cronsim's iterator). An expression or a zone leasectl would
    not have stored (a row written by hand) is a UsageError, as on the command line."""
    return CronSim(normalise_cron(cron), after.astimezone(zone(timezone)))


def next_slot_after(cron: str, timezone: str, after: datetime) -> datetime:
    """The first slot strictly after ``after``, in UTC. (Walking on past any slot at or before
    it: from inside a repeated hour, cronsim's wall-clock walk of a fixed-time expression names
    the hour's first occurrence, which is before ``after``.)"""
    try:
        for moment in slots_after(cron, timezone, after):
            if _utc(moment) > after:
                return _utc(moment)
    except StopIteration:
        pass
    raise UsageError(f"the cron expression {echo(cron)} names no time in the next 50 years")


def _last_slots(
    cron: str, timezone: str, start: datetime, now: datetime, keep: int
) -> list[datetime]:
    """The last ``keep`` slots in [start, now], walking back from now (a long outage)."""
    back = CronSim(cron, (now + timedelta(seconds=1)).astimezone(zone(timezone)), reverse=True)
    found: list[datetime] = []
    for moment in back:
        slot = _utc(moment)
        if slot < start or len(found) == keep:
            break
        if slot <= now:
            found.append(slot)
    return sorted(found)


def plan_slots(
    cron: str,
    timezone: str,
    next_slot: datetime,
    now: datetime,
    catch_up: str,
    catch_up_limit: int,
) -> SlotPlan:
    """The slots of a schedule due at ``now`` (from ``next_slot``, included, to ``now``) that a
    pass enqueues by its catch-up policy: ``last`` the latest only, ``all`` the latest
    ``catch_up_limit``, ``none`` the latest only when it is on time (ON_TIME); the others are
    passed over. ``now`` is the database's clock."""
    start = _utc(next_slot)
    keep = catch_up_limit if catch_up == "all" else 1
    walk = slots_after(cron, timezone, start - timedelta(seconds=1))
    due: list[datetime] = []
    count = 0
    new_next: datetime | None = None
    for moment in itertools.islice(walk, MAX_SCAN):
        slot = _utc(moment)
        if slot > now:
            new_next = slot
            break
        count += 1
        due.append(slot)
        if len(due) > keep:
            due.pop(0)
    if new_next is None:  # more than MAX_SCAN slots due
        due = _last_slots(cron, timezone, start, now, keep)
        new_next = next_slot_after(cron, timezone, now)
        count = max(count, len(due))
    if catch_up == "none" and due and now - due[-1] > ON_TIME:
        due = []
    elif catch_up == "none":
        due = due[-1:]
    return SlotPlan(tuple(due), count - len(due), new_next)


def schedule_json(s: Schedule) -> dict[str, Any]:
    """A schedule as `schedule list --json` shows it (times in ISO 8601, UTC)."""

    def iso(value: datetime | None) -> str | None:
        return value.astimezone(UTC).isoformat() if value is not None else None

    return {
        "name": s.name,
        "cron": s.cron,
        "timezone": s.timezone,
        "queue": s.queue,
        "payload": s.payload,
        "priority": s.priority,
        "max_attempts": s.max_attempts,
        "catch_up": s.catch_up,
        "catch_up_limit": s.catch_up_limit,
        "next_slot": iso(s.next_slot),
        "last_slot": iso(s.last_slot),
        "last_job_id": s.last_job_id,
        "last_status": s.last_status,
        "last_enqueued_at": iso(s.last_enqueued_at),
        "skipped": s.skipped,
        "paused": s.paused,
        "paused_at": iso(s.paused_at),
        "paused_by": s.paused_by,
        "paused_reason": s.paused_reason,
        "late": s.late,
        "lateness_seconds": round(s.lateness.total_seconds(), 3),
        "updated_at": iso(s.updated_at),
        "updated_by": s.updated_by,
    }
