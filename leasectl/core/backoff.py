"""Retry delays: exponential in the attempt number, capped, with jitter against thundering herds."""

from __future__ import annotations

import random
from datetime import timedelta

DEFAULT_BASE = timedelta(seconds=1)
DEFAULT_CAP = timedelta(hours=1)


def retry_delay(
    attempt: int,
    *,
    base: timedelta = DEFAULT_BASE,
    cap: timedelta = DEFAULT_CAP,
    rng: random.Random | None = None,
) -> timedelta:
    """Equal jitter: half of the capped exponential step is fixed, the other half random.

    Attempt 1 waits base/2..base, attempt 2 base..2*base, and so on up to cap/2..cap.
    """
    if attempt < 1:
        raise ValueError("attempt numbers start at 1")
    step = min(cap.total_seconds(), base.total_seconds() * 2.0 ** min(attempt - 1, 60))
    draw = (rng or random).random()
    return timedelta(seconds=step / 2 + draw * step / 2)


def reconnect_delay(failures: int, *, base: float, cap: float = 30.0) -> float:
    """Seconds to wait before reconnecting after ``failures`` failures in a row: exponential,
    capped, with jitter so that a fleet does not come back in lockstep after an outage."""
    return min(cap, base * 2.0 ** min(failures, 60)) * (0.5 + random.random() / 2)
