"""Flow control's values and rules: a queue's limits (a concurrency cap, a rate with its burst,
a ramp), as configured and as in force now, and the checks every value passes before any SQL.

PostgreSQL enforces the limits in the claim statements (migrations 17, 24, design.md "Flow
control"); here are only the values, their bounds (the table's CHECK constraints) and parsing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasectl.core.errors import UsageError
from leasectl.core.literal import echo

# queue_limits' CHECK bounds (migration 17).
MAX_CONCURRENCY = 100_000
MIN_RATE = 0.001  # starts per second: one in about 17 minutes
MAX_RATE = 1_000_000.0
MAX_BURST = 1_000_000
MAX_RAMP = timedelta(days=1)
# A throttled worker's wait when only the cap cut its claim short (a slot frees when a lease
# ends, at no time the database knows): it claims the queue again after this, or at once when
# one of its own handlers finishes.
CAP_RECHECK_S = 0.25
# An announcement on a throttled queue (a limit changed, a job enqueued) shortens its wait to at
# most this: a new limit takes effect within it, and an enqueue storm makes no busy loop.
ANNOUNCED_RECHECK_S = 0.25

_RATE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*/\s*(s|sec|m|min)\s*", re.IGNORECASE)
_PER = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0}


@dataclass(frozen=True)
class LimitSpec:
    """What `leasectl limit` sets: each value None when not limited (at least one is set)."""

    concurrency: int | None = None
    rate: float | None = None  # starts per second
    burst: int | None = None  # the bucket's size; None: max(1, rate), one second's worth


@dataclass(frozen=True)
class QueueLimit:
    """A limited queue: its limits as configured, in force now (the ramp applied) and their
    current use, read at ``db_now`` (the database clock)."""

    queue: str
    concurrency: int | None
    rate: float | None
    burst: int | None
    ramp_from: datetime | None
    ramp_until: datetime | None
    set_at: datetime
    set_by: str
    reason: str
    throttled: int  # claims a limit cut short, since the limit was first set
    cap_now: int | None  # the cap in force now (ramped)
    rate_now: float | None  # starts per second in force now (ramped)
    burst_now: float | None  # the bucket's size now (ramped)
    tokens: float | None  # in the bucket now (refilled to db_now)
    live: int  # live leases (Processing, lease not lapsed)
    db_now: datetime

    @property
    def ramp_progress(self) -> float | None:
        """0.0 to 1.0 while a ramp is set (1.0 once it is done); None without one."""
        if self.ramp_from is None or self.ramp_until is None:
            return None
        span = (self.ramp_until - self.ramp_from).total_seconds()
        done = (self.db_now - self.ramp_from).total_seconds()
        return 1.0 if span <= 0 else min(1.0, max(0.0, done / span))

    @property
    def ramping(self) -> bool:
        return self.ramp_until is not None and self.db_now < self.ramp_until

    @property
    def effective_burst(self) -> float | None:
        """The configured bucket size (its default: one second's worth)."""
        if self.rate is None:
            return None
        return float(self.burst) if self.burst is not None else max(1.0, self.rate)

    @property
    def at_cap(self) -> bool:
        return self.cap_now is not None and self.live >= self.cap_now


@dataclass(frozen=True)
class Ramped:
    """`resume --ramp`'s result: the limits with their ramp, and whether a pause ended."""

    limit: QueueLimit
    resumed: bool


def check_concurrency(value: int) -> int:
    if not 1 <= value <= MAX_CONCURRENCY:
        raise UsageError(
            f"invalid --concurrency {value}: from 1 to {MAX_CONCURRENCY:,} live leases"
        )
    return value


def check_burst(value: int) -> int:
    if not 1 <= value <= MAX_BURST:
        raise UsageError(f"invalid --burst {value}: from 1 to {MAX_BURST:,} starts")
    return value


def parse_rate(text: str) -> float:
    """``20/s``, ``300/m`` (also ``/sec``, ``/min``) -> starts per second, within the bounds."""
    m = _RATE.fullmatch(text)
    if not m:
        raise UsageError(
            f"invalid --rate {echo(text)}: use starts per second or per minute (20/s, 300/m)"
        )
    per_second = float(m.group(1)) / _PER[m.group(2).lower()]
    if not MIN_RATE <= per_second <= MAX_RATE:
        raise UsageError(
            f"invalid --rate {echo(text)}: from {MIN_RATE:g}/s (0.06/m) to {MAX_RATE:,.0f}/s"
        )
    return per_second


def check_spec(spec: LimitSpec) -> LimitSpec:
    """A complete limit: at least a cap or a rate, a burst only with a rate, each in bounds."""
    if spec.concurrency is None and spec.rate is None:
        raise UsageError("give --concurrency N and/or --rate R/s (or --clear to lift the limits)")
    if spec.burst is not None and spec.rate is None:
        raise UsageError("--burst needs --rate: it is the rate's bucket size")
    if spec.concurrency is not None:
        check_concurrency(spec.concurrency)
    if spec.rate is not None and not MIN_RATE <= spec.rate <= MAX_RATE:
        raise UsageError(f"invalid rate {spec.rate!r}/s: from {MIN_RATE:g} to {MAX_RATE:,.0f}")
    if spec.burst is not None:
        check_burst(spec.burst)
    return spec


def check_ramp(value: timedelta) -> timedelta:
    if value > MAX_RAMP:
        raise UsageError("invalid --ramp: at most a day (24h)")
    return value


def rate_text(per_second: float) -> str:
    """A rate as `limit` takes it: ``20/s``, or per minute below one a second (``30/m``)."""
    if per_second >= 1:
        return f"{per_second:g}/s"
    return f"{per_second * 60:.4g}/m"


AT_CAP = "at cap"
RATE_LIMITED = "rate-limited"


def holding_back(limit: QueueLimit) -> str | None:
    """Why the queue's due jobs wait at the time it was read: ``at cap`` (its live leases fill
    the cap in force), ``rate-limited`` (less than a token in its bucket), else None."""
    if limit.at_cap:
        return AT_CAP
    if limit.rate_now is not None and limit.tokens is not None and limit.tokens < 1:
        return RATE_LIMITED
    return None
