"""The history's pure parts (core/stats.py, present/stats.py): buckets, percentiles read from a
histogram, the minutes of a window, --since, and the JSON document's exact shape."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest
from rich.console import Console

from leasectl.core.errors import UsageError
from leasectl.core.stats import (
    BUCKETS,
    OPEN_BUCKET,
    MinuteStats,
    PickupLatency,
    QueueStats,
    add,
    bucket_bounds,
    bucket_of,
    fill,
    parse_since,
    percentile,
)
from leasectl.present.stats import (
    groups,
    latency_text,
    pickup_json,
    sparkline,
    stats_json,
    stats_renderables,
)

T0 = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)


def hist(**counts: int) -> tuple[int, ...]:
    """A histogram from {"b<bucket>": n}."""
    out = [0] * BUCKETS
    for key, n in counts.items():
        out[int(key[1:])] = n
    return tuple(out)


@pytest.mark.parametrize(
    ("ms", "bucket"),
    [(-5, 0), (0, 0), (0.99, 0), (1, 1), (1.41, 1), (1.42, 2), (2.5, 3), (3, 4), (1000, 20),
     (10_000, 27), (2.0**31 + 1, OPEN_BUCKET), (1e15, OPEN_BUCKET), (math.nan, 0)],
)  # fmt: skip
def test_a_latency_falls_in_the_bucket_whose_bounds_hold_it(ms: float, bucket: int) -> None:
    assert bucket_of(ms) == bucket
    low, high = bucket_bounds(bucket)
    if not math.isnan(ms) and ms >= 0:
        assert low <= ms < high


def test_buckets_tile_the_line_a_factor_of_root_two_each() -> None:
    assert bucket_bounds(0) == (0.0, 1.0)
    for b in range(1, OPEN_BUCKET):
        low, high = bucket_bounds(b)
        assert high == pytest.approx(low * math.sqrt(2))
        assert bucket_bounds(b + 1)[0] == high
    assert bucket_bounds(OPEN_BUCKET)[1] == math.inf
    with pytest.raises(ValueError):
        bucket_bounds(BUCKETS)


def test_percentiles_interpolate_within_their_bucket() -> None:
    # 100 latencies in bucket 21 ([1024, 1448) ms): the median halfway, p95 near the top.
    h = hist(b21=100)
    low, high = bucket_bounds(21)
    assert percentile(h, 0.5) == pytest.approx(low + (high - low) * 0.5)
    assert percentile(h, 0.95) == pytest.approx(low + (high - low) * 0.95)
    assert percentile(h, 1.0) == pytest.approx(high)


def test_percentiles_pick_the_bucket_their_rank_falls_in() -> None:
    # 90 fast ones (bucket 1), 10 slow ones (bucket 40): p50 fast, p95 slow.
    h = hist(b1=90, b40=10)
    p50, p95 = percentile(h, 0.5), percentile(h, 0.95)
    assert p50 is not None and bucket_bounds(1)[0] <= p50 < bucket_bounds(1)[1]
    assert p95 is not None and bucket_bounds(40)[0] <= p95 <= bucket_bounds(40)[1]
    # Exactly at a bucket's last rank: still that bucket (90 of 100 is p90).
    assert percentile(h, 0.9) == pytest.approx(bucket_bounds(1)[1])


def test_a_percentile_of_nothing_is_none_and_of_the_open_bucket_its_floor() -> None:
    assert percentile((), 0.5) is None
    assert percentile(hist(), 0.95) is None
    assert percentile(hist(b63=3), 0.5) == 2.0**31
    with pytest.raises(ValueError):
        percentile(hist(b1=1), 0)


def test_histograms_add_bucket_by_bucket_whatever_their_lengths() -> None:
    assert add((1, 2), (3, 4, 5)) == (4, 6, 5)
    assert add((), (7,)) == (7,)
    assert percentile(add(hist(b3=1), hist(b3=1)), 0.5) == percentile(hist(b3=2), 0.5)


def test_every_minute_of_the_window_is_there_the_empty_ones_as_zeros() -> None:
    busy = MinuteStats(T0 + timedelta(minutes=2), enqueued=5, pending=7)
    quiet_sampled = T0 + timedelta(minutes=1)
    minutes = fill(T0 + timedelta(seconds=30), T0 + timedelta(minutes=3, seconds=5), [busy],
                   [quiet_sampled])  # fmt: skip
    assert [m.start for m in minutes] == [T0 + timedelta(minutes=i) for i in range(4)]
    assert minutes[2] == busy
    # A minute sampled without a row of the queue had none due; one never sampled: unknown.
    assert [m.pending for m in minutes] == [None, 0, 7, None]
    assert all(m.enqueued == 0 for m in minutes if m is not busy)


def test_minutes_are_utc_minutes_whatever_the_offset_they_were_read_with() -> None:
    odd = timezone(timedelta(hours=5, minutes=45))
    found = MinuteStats(T0.astimezone(odd), completed=1)
    minutes = fill(T0.astimezone(odd), T0.astimezone(odd), [found], [])
    assert [(m.start, m.completed) for m in minutes] == [(T0, 1)]


@pytest.mark.parametrize("text", ["1h", "30m", "90s", "31d"])
def test_since_takes_a_duration_up_to_a_month(text: str) -> None:
    assert timedelta(0) < parse_since(text) <= timedelta(days=31)


@pytest.mark.parametrize("text", ["", "0", "-1h", "32d", "yesterday", "1y"])
def test_a_bad_since_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--since"):
        parse_since(text)


def test_the_json_document_has_exactly_its_keys() -> None:
    m = MinuteStats(T0, 1, 2, 3, 4, 5, hist(b21=4), pending=6)
    doc = stats_json(QueueStats("q", T0 - timedelta(hours=1), T0, (m, MinuteStats(T0))))
    assert list(doc) == ["queue", "since", "until", "buckets"]
    assert doc["since"] == "2026-01-02T02:04:00+00:00"
    first, empty = doc["buckets"]
    assert list(first) == ["start", "enqueued", "started", "completed", "failed", "retried",
                           "pickup_p50_ms", "pickup_p95_ms", "pending", "pending_capped",
                           "pending_estimated"]  # fmt: skip
    assert first["start"] == "2026-01-02T03:04:00+00:00"
    assert (first["enqueued"], first["started"], first["completed"]) == (1, 2, 3)
    assert (first["failed"], first["retried"], first["pending"]) == (4, 5, 6)
    low, high = bucket_bounds(21)
    assert low <= first["pickup_p50_ms"] < first["pickup_p95_ms"] < high
    assert empty["pickup_p50_ms"] is None and empty["pending"] is None
    assert pickup_json([PickupLatency.of("q", hist(b1=2))]) == [
        {"queue": "q", "started": 2, "p50_ms": 1.207, "p95_ms": 1.394}
    ]


@pytest.mark.parametrize(
    ("ms", "text"),
    [(None, "-"), (0.4, "0ms"), (850, "850ms"), (12_500, "12.5s"), (185_000, "3m05s"),
     (7_800_000, "2h10m")],
)  # fmt: skip
def test_latencies_read_in_their_unit(ms: float | None, text: str) -> None:
    assert latency_text(ms) == text


def test_a_sparkline_is_one_character_a_value_blank_for_none() -> None:
    assert sparkline([0, None, 1, 8]).plain == "  ▂█"
    assert sparkline([]).plain == ""
    assert [len(g) for g in groups([MinuteStats(T0)] * 61, 40)] == [2] * 30 + [1]


@pytest.mark.parametrize("width", [80, 160])
def test_the_table_fits_the_terminal(width: int) -> None:
    minutes = tuple(
        MinuteStats(T0 + timedelta(minutes=i), enqueued=i, completed=i, pickup=hist(b20=i))
        for i in range(61)
    )
    report = QueueStats(None, T0, T0 + timedelta(hours=1), minutes)
    console = Console(width=width, record=True, color_system=None)
    for part in stats_renderables(report, width):
        console.print(part)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "every queue" in text and "pickup p95" in text and "█" in text
