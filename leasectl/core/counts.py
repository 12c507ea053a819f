"""Bounded counts: how many rows of a live state, counted up to a cap and no further.

An exact count of two million Pending rows walks two million index entries on every call; a
scheduled read (a metrics scrape, a console refresh) counts at most ``cap + 1`` rows per queue
and says "more than cap" beyond that. The cap shares a budget of index entries among the queues
counted (``cap_for``), so that a scrape costs about the same with 3 queues or 300. The SQL side
is ``LIMIT cap + 1`` in a subquery (``db/sql/metrics.sql``, which computes ``cap_for`` over the
queues it found, in the same statement); ``BoundedCount.read`` reads its result.
"""

from __future__ import annotations

from dataclasses import dataclass

# Index entries a state's counts may walk per read, shared by its queues; but every queue is
# counted up to COUNT_FLOOR at least. 6,000 unvacuumed entries: about 5 ms (BENCHMARKS.md,
# "metrics"); the cost is linear in the budget.
COUNT_BUDGET = 6_000
COUNT_FLOOR = 100


def cap_for(queues: int, budget: int = COUNT_BUDGET, floor: int = COUNT_FLOOR) -> int:
    """Each queue's cap when ``queues`` queues share ``budget`` (the SQL computes the same)."""
    return max(floor, budget // max(1, queues))


@dataclass(frozen=True)
class BoundedCount:
    """A count read with ``LIMIT cap + 1``: exact up to ``cap``, else a lower bound."""

    value: int  # the exact count, or ``cap`` when there are more
    capped: bool  # True: there are more than ``value`` rows

    @classmethod
    def read(cls, counted: int, cap: int) -> BoundedCount:
        """The count of a ``LIMIT cap + 1`` subquery: more than ``cap`` means "at least cap"."""
        if cap < 0:
            raise ValueError("cap must be >= 0")
        if counted > cap:
            return cls(cap, True)
        return cls(counted, False)

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"
