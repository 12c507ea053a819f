"""The timestamps PostgreSQL holds and Python cannot, and how they are named when shown."""

from __future__ import annotations

from datetime import UTC, datetime

# What a timestamp Python cannot hold is loaded as (PostgreSQL's 'infinity' and '-infinity', and
# dates outside Python's years 1 to 9999): the latest and earliest aware datetimes. Displays show
# them as "infinity" and "-infinity" (``infinity_label``), never as a date. The schema refuses
# such values in jobs (migration 5); other tables, and rows written before, may still hold them.
TIMESTAMP_MAX = datetime.max.replace(tzinfo=UTC)
TIMESTAMP_MIN = datetime.min.replace(tzinfo=UTC)
# The earliest run_at the schema allows (migration 5): what it made of a '-infinity', and what a
# producer that means "as early as can be" writes now. A job due since then has waited forever:
# an age counted from it (~740,000 days) is no figure for a person or a program.
RUN_AT_FLOOR = datetime(1, 1, 2, tzinfo=UTC)


def since_forever(value: datetime) -> bool:
    """Whether a due time is '-infinity', or the floor that stands for it."""
    return value <= RUN_AT_FLOOR


def infinity_label(value: datetime) -> str | None:
    """``"infinity"`` or ``"-infinity"`` for the two sentinels, None for a real moment."""
    if value == TIMESTAMP_MAX:
        return "infinity"
    if value == TIMESTAMP_MIN:
        return "-infinity"
    return None
