"""The audit timeline of `leasectl events`: operator and watcher actions from ``job_events`` and
``queue_events``, newest first, merged. Pure, no database.

One guarded statement writes one ``job_events`` row per job it changed, all with its
transaction's time: the database folds them into one entry (an action, by an actor, with a
reason, at one instant, on N jobs), so that a requeue of 10,000 jobs is one line of the
timeline, not 10,000.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

# Audit rows of each table one `events` reads at most, newest first (``Timeline.complete``).
SCAN_CAP = 20_000
# Entries shown at most.
ENTRY_LIMIT = 200

EventKind = Literal["job", "queue"]


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    kind: EventKind  # a job's event (job_events) or a queue's (queue_events)
    actor: str
    db_role: str | None
    action: str
    reason: str | None
    queues: tuple[str, ...]  # the jobs' queues (those not pruned since), or the queue's
    jobs: int  # jobs changed; 0 for a queue's event
    first_job: int | None
    last_job: int | None


@dataclass(frozen=True)
class Timeline:
    since: timedelta
    actor: str | None
    queue: str | None
    db_now: datetime
    entries: tuple[TimelineEntry, ...]
    scanned: int  # audit rows read (of both tables)
    complete: bool  # False: a table had more rows in the window than were read
    shown_all: bool  # False: more entries matched than ``ENTRY_LIMIT``

    @property
    def window_start(self) -> datetime:
        return self.db_now - self.since


def merge(
    job_entries: Iterable[TimelineEntry],
    queue_entries: Iterable[TimelineEntry],
    limit: int = ENTRY_LIMIT,
) -> tuple[tuple[TimelineEntry, ...], bool]:
    """Both kinds in one list, newest first (at one instant: a queue's event first, then the
    jobs' by their first id, newest first), at most ``limit``; and whether all were kept."""
    merged = sorted(
        [*job_entries, *queue_entries],
        key=lambda e: (e.at, e.kind == "queue", e.first_job or 0),
        reverse=True,
    )
    return tuple(merged[:limit]), len(merged) <= limit
