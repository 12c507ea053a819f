"""Bounded counts: how many rows of a live state, counted up to a cap and no further.

An exact count of two million Pending rows walks two million index entries on every call; a
scheduled read (a metrics scrape, a console refresh) counts at most ``COUNT_CAP + 1`` rows per
queue and says "at least COUNT_CAP" beyond that. The SQL side is ``LIMIT cap + 1`` in a
subquery (``db/sql/metrics.sql``); this is the rule that reads its result.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per queue and state. 10,000 index entries cost about a millisecond (BENCHMARKS.md, metrics).
COUNT_CAP = 10_000


@dataclass(frozen=True)
class BoundedCount:
    """A count read with ``LIMIT cap + 1``: exact up to ``cap``, else a lower bound."""

    value: int  # the exact count, or ``cap`` when there are more
    capped: bool  # True: there are more than ``value`` rows

    @classmethod
    def read(cls, counted: int, cap: int = COUNT_CAP) -> BoundedCount:
        """The count of a ``LIMIT cap + 1`` subquery: more than ``cap`` means "at least cap"."""
        if cap < 0:
            raise ValueError("cap must be >= 0")
        if counted > cap:
            return cls(cap, True)
        return cls(counted, False)

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"
