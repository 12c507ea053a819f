"""``status --check``'s thresholds: which queue passes which limit, as facts (the words are the
presentation's, ``present/status.py``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from leasectl.core.models import StatusReport

# The most late schedules `status --max-late-schedules` may allow (it reads one more).
MAX_LATE_CHECKED = 1000


class Measure(enum.StrEnum):
    EXPIRED = "expired"  # expired leases
    STUCK = "stuck"  # Stuck jobs
    OLDEST_DUE = "oldest_due"  # how long the oldest due Pending job has waited
    LATE_SCHEDULES = "late_schedules"  # schedules whose next slot is overdue (not a queue's)


@dataclass(frozen=True)
class Thresholds:
    """What a queue may have before ``status --check`` fails. Without options the check allows
    no expired lease and no Stuck job, and does not look at the oldest due job nor at late
    schedules."""

    max_expired: int = 0
    max_stuck: int = 0
    max_oldest_due: timedelta | None = None
    # Late schedules (core/schedules.py LATE_AFTER: not paused, next slot overdue) allowed.
    max_late_schedules: int | None = None


@dataclass(frozen=True)
class Violation:
    queue: str | None  # None: a measure of no queue (the late schedules)
    measure: Measure
    value: int | timedelta
    limit: int | timedelta
    capped: bool = False  # ``value`` is a lower bound (a count stopped at its cap)
    estimated: bool = False  # capped, and ``value`` the planner's estimate (at least the cap + 1)


def violations(
    report: StatusReport,
    limits: Thresholds,
    late_schedules: int | None = None,
    late_capped: bool = False,
) -> list[Violation]:
    """Every (queue, measure) past its limit, by queue then measure; ages on the database clock.
    Then the late schedules (``late_schedules``: how many were read, None: not read;
    ``late_capped``: the read stopped at its limit, there may be more), when limited."""
    found = []
    for q in report.queues:
        if q.expired > limits.max_expired:
            found.append(Violation(q.queue, Measure.EXPIRED, q.expired, limits.max_expired))
        # A capped count is a lower bound: there are more than ``q.stuck``, so at least as
        # many as the limit is already past it (status counts Stuck up to the limit + 1).
        if q.stuck > limits.max_stuck or (q.stuck_capped and q.stuck >= limits.max_stuck):
            found.append(
                Violation(
                    q.queue,
                    Measure.STUCK,
                    q.stuck,
                    limits.max_stuck,
                    q.stuck_capped,
                    q.stuck_estimated,
                )
            )
        if limits.max_oldest_due is not None and q.oldest_due_at is not None:
            waited = report.db_now - q.oldest_due_at
            if waited > limits.max_oldest_due:
                found.append(Violation(q.queue, Measure.OLDEST_DUE, waited, limits.max_oldest_due))
    if (
        limits.max_late_schedules is not None
        and late_schedules is not None
        and late_schedules > limits.max_late_schedules
    ):
        found.append(
            Violation(
                None,
                Measure.LATE_SCHEDULES,
                late_schedules,
                limits.max_late_schedules,
                late_capped,
            )
        )
    return found
