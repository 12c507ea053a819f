"""A stored schedule for pure tests (plan_sync, the presentation), as the database returns it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from leasectl.core.schedules import Schedule

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def stored(name: str, cron: str, queue: str, **fields: Any) -> Schedule:
    values: dict[str, Any] = dict(
        name=name, cron=cron, timezone="UTC", queue=queue, payload={}, priority=0,
        max_attempts=5, catch_up="last", catch_up_limit=10, next_slot=T0, last_slot=None,
        last_job_id=None, last_enqueued_at=None, skipped=0, paused_at=None, paused_by=None,
        paused_reason=None, created_at=T0, created_by="op", updated_at=T0, updated_by="op",
        reason=None, last_status=None, db_now=T0,
    )  # fmt: skip
    values.update(fields)
    return Schedule(**values)
