"""Judging a lease owner's freshness: pure logic, unit-tested without a database."""

from __future__ import annotations

from datetime import datetime, timedelta

from leasectl.core.models import Freshness

# A worker is "fresh" while it has missed no more than half a heartbeat beyond its interval.
FRESH_FACTOR = 1.5
CLOCK_SLACK = timedelta(seconds=1)


def classify(
    db_now: datetime,
    last_sign_of_life: datetime | None,
    heartbeat_every: timedelta | None,
    lease_ttl: timedelta | None,
    stopped_at: datetime | None = None,
    next_expiry_at: datetime | None = None,
) -> Freshness:
    """fresh / late / silent, judged against the owner's own declared intervals.

    Without declared intervals (a lease owner that never registered as a worker) we can
    only say it is silent once one of its leases has lapsed.
    """
    if stopped_at is not None:
        return Freshness.STOPPED
    if last_sign_of_life is None:
        return Freshness.UNKNOWN
    age = db_now - last_sign_of_life
    if heartbeat_every is None or lease_ttl is None:
        if next_expiry_at is not None and next_expiry_at < db_now:
            return Freshness.SILENT
        return Freshness.UNKNOWN
    if age <= heartbeat_every * FRESH_FACTOR + CLOCK_SLACK:
        return Freshness.FRESH
    if age < lease_ttl:
        return Freshness.LATE
    return Freshness.SILENT
