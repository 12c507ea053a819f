"""Deterministic data for the Queues view and the queue screen (tests/console/sample.py's
clock): an incident in payments (its backlog past the count's cap and growing, failing for 12
minutes, an expired lease, a limit at its cap), emails paused an hour ago, webhooks draining,
reports steady, and a queue with a hostile name whose errors and events are hostile too."""

from __future__ import annotations

from datetime import timedelta

from leasectl.core.counts import BoundedCount
from leasectl.core.errorgroups import ErrorGroup, ErrorReport
from leasectl.core.limits import QueueLimit
from leasectl.core.models import PausedQueue
from leasectl.core.queues import QueueDetail, QueueRow, QueuesOverview, attention_order
from leasectl.core.stats import BUCKETS, MinuteStats, PickupLatency, QueueStats, bucket_of
from leasectl.core.timeline import Timeline, TimelineEntry
from tests.console.sample import NOW

HOSTILE = "[@click=app.quit]ops[/]\x1b]0;PWNED\x07\u202eevil"
WINDOW = timedelta(hours=1)
START = NOW.replace(second=0) - WINDOW


def pickup(ms: float, n: int) -> tuple[int, ...]:
    if not n:
        return ()
    histogram = [0] * BUCKETS
    histogram[bucket_of(ms)] = n
    return tuple(histogram)


def minutes(
    completed: list[int],
    *,
    failed: list[int] | None = None,
    enqueued: list[int] | None = None,
    backlog: list[tuple[int, bool]] | None = None,
    latency_ms: float = 400.0,
) -> tuple[MinuteStats, ...]:
    """61 minutes, oldest first; each list is of the last minutes (padded on the left)."""

    def pad(values: list[int] | None, default: int = 0) -> list[int]:
        values = values or []
        return [default] * (61 - len(values)) + values[-61:]

    done, fail, enq = pad(completed), pad(failed), pad(enqueued)
    samples: list[tuple[int, bool] | None] = [None] * 61
    for i, sample in enumerate(backlog or []):
        samples[61 - len(backlog or []) + i] = sample
    return tuple(
        MinuteStats(
            START + timedelta(minutes=i),
            enqueued=enq[i],
            started=done[i] + fail[i],
            completed=done[i],
            failed=fail[i],
            pickup=pickup(latency_ms * (1 + i / 30), done[i] + fail[i])
            if done[i] + fail[i]
            else (),
            pending=None if samples[i] is None else samples[i][0],  # type: ignore[index]
            pending_capped=bool(samples[i] and samples[i][1]),  # type: ignore[index]
        )
        for i in range(61)
    )


def limit(queue: str) -> QueueLimit:
    return QueueLimit(queue, 10, 20.0, 20, None, None, NOW - timedelta(hours=2), "ops:carol",
                      "PSP rate limit", 4812, 10, 20.0, 20.0, 0.4, 10, NOW)  # fmt: skip


def rows() -> tuple[QueueRow, ...]:
    ramp = [100 + 5 * i for i in range(48)]
    payments = QueueRow(
        queue="payments",
        pending=BoundedCount(6000, True, 2_000_000),
        oldest_due_age=2460.0,
        processing=10,
        expired=1,
        stuck=BoundedCount(3, False),
        paused=None,
        limit=limit("payments"),
        minutes=minutes(
            [*ramp, *[0] * 13],
            failed=[0] * 48 + [44, 58, 60, 59, 60, 60, 60, 59, 60, 60, 60, 60, 29],
            enqueued=[400] * 61,
            backlog=[(4200, False), (5100, False), (6000, True), (6000, True)],
            latency_ms=4000.0,
        ),
        pickup=PickupLatency("payments", 29, 9_000.0, 12_500.0),
    )
    emails = QueueRow(
        queue="emails",
        pending=BoundedCount(1204, False),
        oldest_due_age=722.0,
        processing=0,
        expired=0,
        stuck=BoundedCount(0, False),
        paused=PausedQueue("emails", NOW - timedelta(minutes=12), "ops:alice", "SMTP relay down"),
        limit=None,
        minutes=minutes(
            [30] * 49 + [0] * 12,
            enqueued=[100] * 61,
            backlog=[(900 + 30 * i, False) for i in range(11)],
        ),
        pickup=None,
    )
    webhooks = QueueRow(
        queue="webhooks",
        pending=BoundedCount(240, False),
        oldest_due_age=31.0,
        processing=24,
        expired=0,
        stuck=BoundedCount(0, False),
        paused=None,
        limit=None,
        minutes=minutes(
            [200 + (i % 7) * 10 for i in range(61)],
            enqueued=[150] * 61,
            backlog=[(800 - 56 * i, False) for i in range(11)],
        ),
        pickup=PickupLatency("webhooks", 410, 210.0, 850.0),
    )
    reports = QueueRow(
        queue="reports",
        pending=BoundedCount(3, False),
        oldest_due_age=None,
        processing=2,
        expired=0,
        stuck=BoundedCount(0, False),
        paused=None,
        limit=None,
        minutes=minutes(
            [20 + (i % 3) for i in range(61)], enqueued=[21] * 61, backlog=[(2, False)] * 11
        ),
        pickup=PickupLatency("reports", 42, 40.0, 120.0),
    )
    hostile = QueueRow(
        queue=HOSTILE,
        pending=BoundedCount(7, False),
        oldest_due_age=45.0,
        processing=1,
        expired=0,
        stuck=BoundedCount(0, False),
        paused=PausedQueue(HOSTILE, NOW - timedelta(minutes=3), HOSTILE, HOSTILE),
        limit=None,
        minutes=minutes([1, 0, 2, 1], failed=[0, 1, 0, 1], enqueued=[2, 2, 2, 2]),
        pickup=None,
    )
    return tuple(attention_order([payments, emails, webhooks, reports, hostile]))


def overview() -> QueuesOverview:
    return QueuesOverview(db_now=NOW, since=START, rows=rows())


def detail(row: QueueRow) -> QueueDetail:
    errors = ErrorReport(
        queue=row.queue,
        since=WINDOW,
        db_now=NOW,
        groups=(
            ErrorGroup("PSPError", 229, NOW - timedelta(minutes=12), NOW - timedelta(seconds=4),
                       (row.queue,), 90412),
            ErrorGroup("TimeoutError", 12, NOW - timedelta(minutes=40), NOW - timedelta(minutes=2),
                       (row.queue,), 90377),
            ErrorGroup(HOSTILE, 2, NOW - timedelta(minutes=5), NOW - timedelta(minutes=1),
                       (row.queue,), 90100),
        ),
        scanned=243,
        scan_cap=5000,
    )  # fmt: skip
    events = Timeline(
        since=WINDOW,
        actor=None,
        queue=row.queue,
        db_now=NOW,
        entries=(
            TimelineEntry(NOW - timedelta(minutes=3), "job", "watcher", None, "requeue-expired",
                          "lease expired", (row.queue,), 2, 90310, 90311),
            TimelineEntry(NOW - timedelta(minutes=9), "queue", "ops:carol", "ops", "limit",
                          "PSP asked us to slow down", (row.queue,), 0, None, None),
            TimelineEntry(NOW - timedelta(minutes=20), "queue", HOSTILE, None, "pause",
                          HOSTILE, (row.queue,), 0, None, None),
        ),
        scanned=42,
        complete=True,
        shown_all=True,
    )  # fmt: skip
    stats = QueueStats(queue=row.queue, since=NOW - WINDOW, until=NOW, minutes=row.minutes)
    return QueueDetail(row=row, stats=stats, errors=errors, events=events)


def details() -> dict[str, QueueDetail]:
    return {row.queue: detail(row) for row in rows()}
