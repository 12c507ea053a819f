"""The audit timeline of `leasectl events`: job and queue events merged, newest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leasectl.core.timeline import TimelineEntry, merge

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def entry(second: int, kind: str = "job", first: int | None = 1) -> TimelineEntry:
    return TimelineEntry(
        at=T0 + timedelta(seconds=second),
        kind=kind,  # type: ignore[arg-type]
        actor="alice",
        db_role=None,
        action="pause" if kind == "queue" else "requeue",
        reason=None,
        queues=("q",),
        jobs=0 if kind == "queue" else 1,
        first_job=None if kind == "queue" else first,
        last_job=None if kind == "queue" else first,
    )


def test_both_kinds_are_merged_newest_first() -> None:
    jobs = [entry(1), entry(5)]
    queues = [entry(3, "queue"), entry(7, "queue")]
    merged, whole = merge(jobs, queues)
    assert [e.at.second for e in merged] == [7, 5, 3, 1]
    assert whole


def test_at_one_instant_the_queues_event_comes_first() -> None:
    merged, _ = merge([entry(2, first=10), entry(2, first=20)], [entry(2, "queue")])
    assert [(e.kind, e.first_job) for e in merged] == [("queue", None), ("job", 20), ("job", 10)]


def test_at_most_the_limit_is_kept_and_it_says_so() -> None:
    merged, whole = merge([entry(i) for i in range(5)], [], limit=3)
    assert [e.at.second for e in merged] == [4, 3, 2]
    assert not whole
    assert merge([entry(i) for i in range(3)], [], limit=3)[1]
