"""Why a guarded operator action left a job alone: a skip's reason code and the facts behind
it, from the state the operator saw and the job as it is now (``present/skips.py`` words it)."""

from __future__ import annotations

from typing import Any

from leasectl.core.actions import action_info
from leasectl.core.models import Job, JobStatus, SeenState, SkipCode, Skipped


def held_skip(action: str, seen: SeenState, now: Job | None) -> Skipped:
    """A job left alone because another session held it past the lock timeout."""
    if now is None:
        return Skipped(seen.id, SkipCode.HELD, action)
    return Skipped(
        seen.id,
        SkipCode.HELD,
        action,
        seen_status=seen.status,
        status=now.status,
        owner=now.lease_owner,
        seen_attempts=seen.attempts,
        attempts=now.attempts,
    )


def skip_of(action: str, seen: SeenState, now: Job | None, force: bool, db_now: Any) -> Skipped:
    """Why a guarded action left a job alone, from the state the operator saw and the job as
    it is now (None: no such job); ``db_now``: the database time it was read at."""
    if now is None:
        return Skipped(seen.id, SkipCode.NOT_FOUND, action)
    facts: dict[str, Any] = {
        "seen_status": seen.status,
        "status": now.status,
        "owner": now.lease_owner,
        "seen_attempts": seen.attempts,
        "attempts": now.attempts,
    }
    if now.status != seen.status:
        return Skipped(seen.id, SkipCode.MOVED, action, **facts)
    if now.attempts != seen.attempts or now.lease_owner != seen.lease_owner:
        return Skipped(seen.id, SkipCode.RENEWED, action, **facts)
    entry = action_info(action)  # (an unknown action: a ValueError, never another's rules)
    if now.status not in entry.eligible:
        return Skipped(seen.id, SkipCode.NOT_ELIGIBLE, action, **facts)
    if now.status == JobStatus.PROCESSING and not force and entry.forceable:
        age = (
            db_now - now.heartbeat_at
            if db_now is not None and now.heartbeat_at is not None
            else None
        )
        return Skipped(
            seen.id,
            SkipCode.LEASE_LIVE,
            action,
            **facts,
            lease_until=now.lease_until,
            heartbeat_age=age,
        )
    return Skipped(seen.id, SkipCode.RACED, action, **facts)
