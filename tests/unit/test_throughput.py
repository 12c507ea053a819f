"""ThroughputCounts: folding incremental per-minute counts into the console's window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from leasectl.core.throughput import GRACE, KEPT_FILTERS, ThroughputCounts, minute_of

T0 = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
MIN = timedelta(minutes=1)


def row(minute: datetime, completed: int, settled: int, failed: int = 0) -> dict[str, Any]:
    return {
        "minute": minute_of(minute),
        "completed": completed,
        "failed": failed,
        "settled_completed": settled,
        "settled_failed": failed,
    }


def test_settled_counts_are_kept_and_the_unsettled_tail_is_not() -> None:
    counts = ThroughputCounts()
    assert counts.since(None) is None
    first = counts.merge(None, None, [row(T0 - MIN, 5, 5), row(T0, 3, 1)], T0, 3)
    assert first.completed == (0, 5, 3)
    assert counts.since(None) == T0 - GRACE
    # The next count covers only what finished since then: 2 of the 3 recounted (unsettled
    # before, settled now) plus 4 new, 1 of them still unsettled.
    later = T0 + timedelta(seconds=10)
    second = counts.merge(None, T0 - GRACE, [row(T0, 6, 5)], later, 3)
    assert second.completed == (0, 5, 1 + 6)
    assert counts.since(None) == later - GRACE


def test_the_window_moves_with_the_clock_and_old_minutes_are_dropped() -> None:
    counts = ThroughputCounts()
    counts.merge(None, None, [row(T0 - 2 * MIN, 7, 7), row(T0, 1, 1)], T0, 3)
    moved = counts.merge(None, T0 - GRACE, [], T0 + 2 * MIN, 3)
    assert moved.completed == (1, 0, 0)  # T0's minute is now the oldest; T0 - 2 min is gone


def test_failed_jobs_are_summed_over_the_window() -> None:
    counts = ThroughputCounts()
    snap = counts.merge(None, None, [row(T0 - MIN, 2, 2, failed=1), row(T0, 0, 0, failed=2)], T0, 5)
    assert snap.failed == 3


def test_a_count_from_a_stale_starting_point_is_not_kept() -> None:
    """Two refreshes raced: the second one's count started where the first one did, so adding
    it would count the same jobs twice. It is shown once and the next refresh starts over."""
    counts = ThroughputCounts()
    counts.merge(None, None, [row(T0, 4, 4)], T0, 3)
    stale = T0 - timedelta(seconds=30)
    shown = counts.merge(None, stale, [row(T0, 4, 4)], T0 + timedelta(seconds=1), 3)
    assert shown.completed == (0, 0, 4)
    assert counts.since(None) is None


def test_each_queue_filter_has_its_own_count_and_only_a_few_are_kept() -> None:
    counts = ThroughputCounts()
    counts.merge("a", None, [row(T0, 1, 1)], T0, 3)
    counts.merge("b", None, [row(T0, 2, 2)], T0, 3)
    assert counts.since("a") == counts.since("b") == T0 - GRACE
    assert counts.since(None) is None
    for i in range(KEPT_FILTERS):
        counts.merge(f"q{i}", None, [], T0, 3)
    assert counts.since("a") is None  # the least recently used filters were let go
