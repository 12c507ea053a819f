"""Bounded counts: how many rows of a live state, counted up to a cap and no further.

An exact count of two million Pending rows walks two million index entries on every call; a
scheduled read (a metrics scrape, a console refresh) counts at most ``cap + 1`` rows per queue
and says "more than cap" beyond that. The cap shares a budget of index entries among the queues
counted (``cap_for``), so that a scrape costs about the same with 3 queues or 300. The SQL side
is ``LIMIT cap + 1`` in a subquery (``db/sql/metrics.sql``, which computes ``cap_for`` over the
queues it found, in the same statement); ``BoundedCount.read`` reads its result.

Past the cap a count is estimated: the rows the planner expects the bounded count's predicate
to match without its LIMIT (migration 22's ``estimate_jobs``, over statistics on the pair
(queue, status)), never less than ``cap + 1``. It costs a plan, not a scan, and is shown as an
estimate everywhere (``≈2.0M``; ``"pending_estimated": true`` in JSON). Accuracy at 2M Pending
beside 10M finished: BENCHMARKS.md ("estimated counts").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Index entries a state's counts may walk per read, shared by its queues; but every queue is
# counted up to COUNT_FLOOR at least. 6,000 unvacuumed entries: about 5 ms (BENCHMARKS.md,
# "metrics"); the cost is linear in the budget.
COUNT_BUDGET = 6_000
COUNT_FLOOR = 100
# Past its cap a queue's count is estimated from statistics on (queue, status), an ANALYZE
# sample of 300,000 rows (migration 22). A queue with few rows in that sample is estimated
# poorly (3,000 of 12M rows: ~75 sampled, off by a quarter now and then), so one whose
# estimate is at most RECOUNT_CAP is counted again, exactly, up to RECOUNT_CAP; the smallest
# first, RECOUNT_BUDGET index entries in all per read. The queues past that are estimated.
RECOUNT_CAP = 20_000
RECOUNT_BUDGET = 40_000


def cap_for(queues: int, budget: int = COUNT_BUDGET, floor: int = COUNT_FLOOR) -> int:
    """Each queue's cap when ``queues`` queues share ``budget`` (the SQL computes the same)."""
    return max(floor, budget // max(1, queues))


@dataclass(frozen=True)
class BoundedCount:
    """A count read with ``LIMIT cap + 1``: exact up to ``cap``, else a lower bound."""

    value: int  # the exact count, or ``cap`` when there are more
    capped: bool  # True: there are more than ``value`` rows
    # Capped: the planner's estimate of them all (at least value + 1); None: not estimated.
    estimate: int | None = None

    @classmethod
    def read(cls, counted: int, cap: int, estimate: int | None = None) -> BoundedCount:
        """The count of a ``LIMIT cap + 1`` subquery: more than ``cap`` means "at least cap",
        with ``estimate`` (raised to ``cap + 1``: there are that many at least) when given."""
        if cap < 0:
            raise ValueError("cap must be >= 0")
        if counted > cap:
            return cls(cap, True, None if estimate is None else max(estimate, cap + 1))
        return cls(counted, False)

    @property
    def estimated(self) -> bool:
        return self.capped and self.estimate is not None

    @property
    def shown(self) -> int:
        """The number to show: the exact count, else the estimate, else the lower bound."""
        return self.estimate if self.capped and self.estimate is not None else self.value

    def __str__(self) -> str:
        if self.estimated:
            return approx(self.shown)
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


def recounted(
    count: BoundedCount, recount: int | None, recount_cap: int = RECOUNT_CAP
) -> BoundedCount:
    """``count`` after the recount of a thinly sampled estimate (``pending_recount``, migration
    29; ``status`` the same inline): exact when the recount found at most ``recount_cap``;
    past it, still the estimate, now known to be above ``recount_cap``. ``recount`` None: not
    recounted (not estimated, above ``recount_cap``, or past the budget)."""
    if recount is None or not count.capped:
        return count
    if recount <= recount_cap:
        return BoundedCount(recount, False)
    estimate = None if count.estimate is None else max(count.estimate, recount_cap + 1)
    return BoundedCount(count.value, True, estimate)


def count_fields(name: str, count: BoundedCount) -> dict[str, Any]:
    """A ``QueueCounts``'s fields for the count ``name``: its number to show and its flags."""
    return {
        name: count.shown,
        f"{name}_capped": count.capped,
        f"{name}_estimated": count.estimated,
    }


def approx(n: int) -> str:
    """An estimate, rounded as one: ``≈2.0M``, ``≈41.2k``, ``≈7,512`` (exact digits below 10k
    would claim a precision it does not have beyond its first two)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size * (10 if unit == "k" else 0.9995):
            value = n / size
            return f"≈{value:.1f}{unit}" if value < 99.95 else f"≈{value:.0f}{unit}"
    return f"≈{n:,}"
