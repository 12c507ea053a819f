"""The per-minute history (migration 20): its minutes, the pickup latency's histogram and the
percentiles read from it, and `stats --since`'s bounds.

PostgreSQL keeps, per queue and UTC minute, a histogram of pickup latency (an attempt's start
minus when its job became due) in fixed log-scale buckets; the percentiles are computed here, on
read, from the histogram summed over the minutes and queues asked for. Bucket 0 holds latencies
below 1 ms; bucket b (1..62) holds [2^((b-1)/2), 2^(b/2)) ms, a factor of sqrt 2 a bucket; bucket
63 everything from 2^31 ms on. A percentile is interpolated linearly within its bucket, so it is
off by less than the bucket's width (at most 41 %, about 19 % either side of its middle).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from leasectl.core.config import parse_duration
from leasectl.core.errors import UsageError

BUCKETS = 64
OPEN_BUCKET = BUCKETS - 1  # from 2^31 ms on: no upper bound
MINUTE = timedelta(minutes=1)

# The longest --since: a month of minutes (history is kept 7 days by default).
MAX_SINCE = timedelta(days=31)
DEFAULT_SINCE = timedelta(hours=1)
# How long history is kept by default (`watch` and `prune` delete older minutes).
DEFAULT_KEEP = timedelta(days=7)


def bucket_of(ms: float) -> int:
    """The bucket of a latency of ``ms`` milliseconds (the SQL's history_bucket)."""
    if not ms >= 1:  # below 1 ms, negative (a job claimed by id before it was due), or NaN
        return 0
    return min(OPEN_BUCKET, 1 + math.floor(2 * math.log(ms) / math.log(2)))


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The latencies (ms) of ``bucket``: [low, high); the open bucket's high is infinite."""
    if not 0 <= bucket < BUCKETS:
        raise ValueError(f"no bucket {bucket}")
    if bucket == 0:
        return 0.0, 1.0
    low = 2.0 ** ((bucket - 1) / 2)
    return low, math.inf if bucket == OPEN_BUCKET else 2.0 ** (bucket / 2)


def add(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Two histograms added bucket by bucket (either may be shorter)."""
    n = max(len(a), len(b))
    return tuple((a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n))


def percentile(histogram: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of the latencies a histogram counts, in ms, interpolated
    within its bucket; None when it counts none. In the open bucket: its lower bound."""
    if not 0 < q <= 1:
        raise ValueError(f"a quantile is in (0, 1], not {q}")
    total = sum(histogram)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for bucket, n in enumerate(histogram):
        if n <= 0:
            continue
        if seen + n >= rank:
            low, high = bucket_bounds(bucket)
            if math.isinf(high):
                return low
            return low + (high - low) * (rank - seen) / n
        seen += n
    return bucket_bounds(len(histogram) - 1)[0]  # (not reached: rank <= total)


def parse_since(text: str) -> timedelta:
    """`--since`: a duration back from now, a minute to a month."""
    since = parse_duration(text, what="--since")
    if since > MAX_SINCE:
        raise UsageError(f"invalid --since {text!r}: at most {MAX_SINCE.days}d")
    return since


@functools.lru_cache(maxsize=8192)
def minute_of(at: datetime) -> datetime:
    """The UTC minute ``at`` falls in (minutes of the history are UTC minutes). Cached: the
    Queues view keys every queue's hour of minutes by it, each refresh."""
    return at.astimezone(UTC).replace(second=0, microsecond=0)


@dataclass(frozen=True)
class MinuteStats:
    """One minute of a queue (or of every queue, summed)."""

    start: datetime
    enqueued: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    pickup: tuple[int, ...] = ()  # the latency histogram, by bucket
    # The due Pending jobs sampled that minute (None: no fold sampled it); capped: counted to
    # the cap, a lower bound; estimated: past the cap, the planner's estimate (migration 30).
    pending: int | None = None
    pending_capped: bool = False
    pending_estimated: bool = False

    @property
    def pickup_p50_ms(self) -> float | None:
        return percentile(self.pickup, 0.5)

    @property
    def pickup_p95_ms(self) -> float | None:
        return percentile(self.pickup, 0.95)


@dataclass(frozen=True)
class QueueStats:
    """`leasectl stats`: the minutes from ``since`` to ``until`` (the database clock), one
    ``MinuteStats`` each, the empty ones too; ``queue`` None: every queue summed."""

    queue: str | None
    since: datetime
    until: datetime
    minutes: tuple[MinuteStats, ...] = field(default_factory=tuple)


def fill(
    since: datetime, until: datetime, found: Iterable[MinuteStats], sampled: Iterable[datetime]
) -> tuple[MinuteStats, ...]:
    """Every minute from ``since``'s to ``until``'s, each the one found or an empty one; a
    minute whose backlog was sampled (``sampled``) but found no row had 0 pending."""
    by_start = {minute_of(m.start): m for m in found}
    were_sampled = {minute_of(s) for s in sampled}
    out = []
    at = minute_of(since)
    last = minute_of(until)
    while at <= last:
        minute = by_start.get(at) or MinuteStats(at)
        if minute.pending is None and at in were_sampled:
            minute = replace(minute, pending=0)
        out.append(minute)
        at += MINUTE
    return tuple(out)


@dataclass(frozen=True)
class PickupLatency:
    """A queue's pickup latency over the last minute or two (the exporter, `status`)."""

    queue: str
    started: int
    p50_ms: float | None
    p95_ms: float | None

    @classmethod
    def of(cls, queue: str, histogram: Sequence[int]) -> PickupLatency:
        return cls(queue, sum(histogram), percentile(histogram, 0.5), percentile(histogram, 0.95))
