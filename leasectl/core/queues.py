"""The console's Queues view as facts: every queue at once (how big, since when, getting better or
worse) and one queue in detail. Pure, no database: ``db/queues_view.py`` reads them, in one
transaction each, and ``present/queues.py`` shows them.

The trend is the backlog's: its due Pending jobs as the history's fold sampled them each minute
(``queue_backlog``, migration 20), the last sample against the first of the last
``TREND_MINUTES``. A sample past its cap is the planner's estimate (migration 30), compared as a
count; one the estimate did not raise is a lower bound: with one at each end nothing compares, so
then (and before any fold sampled the queue) the trend is the flow over the same minutes,
enqueued against finished.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasectl.core.counts import BoundedCount
from leasectl.core.errorgroups import ErrorReport
from leasectl.core.limits import QueueLimit
from leasectl.core.models import PausedQueue
from leasectl.core.stats import MinuteStats, PickupLatency, QueueStats
from leasectl.core.timeline import Timeline

# The window every view of a queue covers, and the minutes its trend compares.
WINDOW = timedelta(hours=1)
TREND_MINUTES = 10
# A change smaller than this share of the backlog (or of the flow) is "steady".
TREND_SHARE = 0.1
# Due work this old, a failure rate this high (of what finished in the last FAILING_MINUTES):
# the queue needs attention.
OLD_DUE_S = 300.0
FAILING_SHARE = 0.5
FAILING_MINUTES = 15


class Trend(enum.Enum):
    GROWING = "growing"
    SHRINKING = "shrinking"
    STEADY = "steady"
    UNKNOWN = "unknown"  # no sample and no flow in the trend's minutes


@dataclass(frozen=True)
class QueueRow:
    """One queue of the Queues view, as read at ``db_now``."""

    queue: str
    pending: BoundedCount  # every Pending job (due or not), bounded as the scrape counts them
    oldest_due_age: float | None  # seconds; None: nothing is due
    processing: int
    expired: int  # leases past lease_until, among ``processing``
    stuck: BoundedCount
    paused: PausedQueue | None
    limit: QueueLimit | None
    # The window's minutes, oldest first, every one (empty ones as zeros); ``pending`` is the
    # due backlog the fold sampled that minute (None: not sampled; the Queues view reads the
    # samples of the trend's minutes only, the queue screen the window's).
    minutes: tuple[MinuteStats, ...]
    pickup: PickupLatency | None  # over the current and the previous minute; None: none started

    @property
    def failed(self) -> int:
        """Jobs that failed for good in the window."""
        return sum(m.failed for m in self.minutes)

    @property
    def completed(self) -> int:
        return sum(m.completed for m in self.minutes)

    @property
    def trend(self) -> Trend:
        return trend(self.minutes)

    @property
    def failing(self) -> bool:
        """Half or more of what finished in the last ``FAILING_MINUTES`` failed."""
        recent = self.minutes[-FAILING_MINUTES:]
        failed = sum(m.failed for m in recent)
        finished = failed + sum(m.completed for m in recent)
        return failed > 0 and failed >= FAILING_SHARE * finished

    @property
    def attention(self) -> int:
        """How much this queue needs the on-call's eyes: the higher, the sooner it is listed."""
        points = 0
        if self.trend is Trend.GROWING:
            points += 2
        if self.failing:
            points += 2
        elif self.failed:
            points += 1
        if self.oldest_due_age is not None and self.oldest_due_age >= OLD_DUE_S:
            points += 2
        if self.expired or self.stuck.value:
            points += 1
        if self.paused is not None and self.oldest_due_age is not None:
            points += 1
        return points


def attention_order(rows: list[QueueRow]) -> list[QueueRow]:
    """What needs attention first (growing backlogs, failures, old due work, expired leases and
    Stuck jobs, a paused queue with due work), then the largest backlog, then by name."""
    return sorted(rows, key=lambda r: (-r.attention, -r.pending.shown, -r.failed, r.queue))


def trend(minutes: tuple[MinuteStats, ...], span: int = TREND_MINUTES) -> Trend:
    """The backlog's direction over the last ``span`` minutes (see the module's docstring)."""
    recent = minutes[-span:]
    samples = [m for m in recent if m.pending is not None]
    if len(samples) >= 2:
        first, last = samples[0], samples[-1]
        assert first.pending is not None and last.pending is not None
        # (An estimate past the cap compares as a count; a lower bound does not.)
        bound_first = first.pending_capped and not first.pending_estimated
        bound_last = last.pending_capped and not last.pending_estimated
        if not (first.pending_capped and last.pending_capped) or not (bound_first or bound_last):
            if bound_last:
                return Trend.GROWING  # it went past the cap
            if bound_first:
                return Trend.SHRINKING
            return _direction(last.pending - first.pending, max(first.pending, last.pending))
    enqueued = sum(m.enqueued for m in recent)
    finished = sum(m.completed + m.failed for m in recent)
    if not enqueued and not finished:
        return Trend.UNKNOWN if not samples else Trend.STEADY
    return _direction(enqueued - finished, max(enqueued, finished))


def _direction(change: int, scale: int) -> Trend:
    if abs(change) <= max(1.0, TREND_SHARE * scale):
        return Trend.STEADY
    return Trend.GROWING if change > 0 else Trend.SHRINKING


@dataclass(frozen=True)
class QueuesOverview:
    """The Queues view: every queue that has live jobs, a limit, a pause or history in the
    window, in attention order; read in one transaction at ``db_now``."""

    db_now: datetime
    since: datetime  # the window's first minute
    rows: tuple[QueueRow, ...]
    # Which reads stopped at their limit of queues or rows (some queues, or some of their
    # figures, are missing).
    truncated: frozenset[str] = frozenset()


@dataclass(frozen=True)
class QueueDetail:
    """One queue's screen: its row (counts now), the window's minutes with their pickup
    histograms, its error groups and its audit events; read in one transaction."""

    row: QueueRow
    stats: QueueStats
    errors: ErrorReport
    events: Timeline
    # Which reads of the live counts stopped at their limit (its counts may miss some).
    truncated: frozenset[str] = frozenset()

    @property
    def db_now(self) -> datetime:
        return self.stats.until
