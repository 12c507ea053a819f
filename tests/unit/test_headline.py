"""The console's headline: the worst condition of a refresh in words, one test per condition."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from leasectl.core.literal import shorten, visible
from leasectl.core.models import ConsoleCounts, Freshness, JobStatus, PausedQueue, Snapshot
from leasectl.present.headline import Severity, headline, rough
from tests.console.sample import NOW, job, owner, sample_snapshot
from tests.hostile import NAMES

P, F, R = JobStatus.PENDING, JobStatus.FAILED, JobStatus.PROCESSING
PAY = "pay-worker-1:4242:aa"


def calm(**changes: object) -> Snapshot:
    """One queue, served, nothing due for long, nothing failing, expired or Stuck."""
    base = replace(
        sample_snapshot(),
        counts=ConsoleCounts(pending=3, due=1, oldest_due_at=NOW - timedelta(seconds=5)),
        pending=(job(1, P, run_in=-5), job(2, P, run_in=30)),
        processing=(),
        stuck=(),
        owners=(owner(PAY, Freshness.FRESH, seen_ago=1, held=0),),
        failed=(),
        failed_recent=0,
        throughput=(100,) * 30,
        queues=("payments",),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def plain(snap: Snapshot) -> str | None:
    line = headline(snap, NOW)
    return None if line is None else line.text.plain


def test_nothing_wrong_is_no_line() -> None:
    assert headline(calm(), NOW) is None
    assert headline(None, NOW) is None


def test_due_work_no_worker_serves_is_the_worst() -> None:
    """The incident: 2M due behind a queue whose workers are gone."""
    snap = calm(
        counts=ConsoleCounts(
            pending=2_000_000,
            due=2_000_000,
            pending_capped=True,
            due_capped=True,
            pending_estimated=True,
            due_estimated=True,
            expired=3,
        ),
        pending=(job(1, P, run_in=-41 * 60),),
        owners=(owner(PAY, Freshness.SILENT, seen_ago=600, held=0),),
    )
    line = headline(snap, NOW)
    assert line is not None and line.severity is Severity.BAD
    assert line.text.plain == "⚑ payments: ≈2.0M due, oldest 41m, no worker serving it"


def test_a_live_lease_of_the_queue_counts_as_serving_it() -> None:
    snap = calm(
        owners=(),
        pending=(job(1, P, run_in=-41 * 60),),
        processing=(job(5, R, owner=PAY, lease_in=20),),
    )
    assert plain(snap) == "⚑ payments: 1 due, oldest 41m, workers behind"


def test_with_other_queues_the_due_count_is_said_to_be_of_all() -> None:
    snap = calm(
        pending=(job(1, P, run_in=-600, queue="mail"), job(2, P, run_in=-5)),
        queues=("mail", "payments"),
    )
    assert plain(snap) == "⚑ mail: oldest due 10m, no worker serving it (1 due, all queues)"


def test_a_paused_queue_holding_due_work_says_who_paused_it() -> None:
    snap = calm(
        owners=(),
        pending=(job(1, P, run_in=-600),),
        paused=(PausedQueue("payments", NOW - timedelta(minutes=12), "alice", "PSP down"),),
    )
    line = headline(snap, NOW)
    assert line is not None and line.severity is Severity.WARN
    assert line.text.plain == "⚑ payments: 1 due, oldest 10m, paused 12m ago"


def failures(n: int, *, error: str = "PSPError: 503 for invoice {i}", span: int = 12) -> tuple:
    return tuple(
        replace(
            job(100 + i, F, error=error.format(i=i)),
            finished_at=NOW - timedelta(minutes=span) * (i / max(1, n - 1)),
        )
        for i in range(n)
    )


def test_failing_everything_names_the_share_the_time_and_the_kind() -> None:
    snap = calm(failed=failures(12), failed_recent=12, throughput=(0,) * 30, counts=ConsoleCounts())
    line = headline(snap, NOW)
    assert line is not None and line.severity is Severity.BAD
    assert line.text.plain == "⚑ payments: failing 100% for 12m, PSPError"


def test_expired_leases_come_before_stuck_jobs() -> None:
    snap = calm(counts=ConsoleCounts(expired=2, stuck=4))
    assert plain(snap) == "⚑ 2 leases expired: their workers stopped renewing"
    snap = calm(counts=ConsoleCounts(stuck=4))
    assert plain(snap) == "⚑ 4 Stuck (quarantined) jobs wait for an operator"


def test_a_partial_failure_rate_is_a_warning_after_the_live_problems() -> None:
    snap = calm(
        failed=failures(3, error="CardDeclined: card {i}"),
        failed_recent=30,
        throughput=(5,) * 30,  # 150 completed: 30 of 180 failed
        counts=ConsoleCounts(stuck=1),
    )
    assert plain(snap) == "⚑ 1 Stuck (quarantined) job waits for an operator"
    line = headline(replace(snap, counts=ConsoleCounts()), NOW)
    assert line is not None and line.severity is Severity.WARN
    assert line.text.plain == "⚑ payments: failing 17% for 12m, CardDeclined"
    # Below FAILING_SHARE of what finished: calm.
    assert plain(calm(failed=failures(1), failed_recent=1)) is None
    # Failures older than the window: calm.
    old = tuple(replace(j, finished_at=NOW - timedelta(hours=1)) for j in failures(3))
    assert plain(calm(failed=old, failed_recent=30, throughput=(0,) * 30)) is None


def test_a_served_backlog_waiting_long_is_a_warning() -> None:
    snap = calm(pending=(job(1, P, run_in=-6 * 60),))
    assert plain(snap) == "⚑ payments: 1 due, oldest 6m, workers behind"


def test_a_hostile_queue_name_or_error_is_shown_literally() -> None:
    for name in NAMES:
        snap = calm(pending=(job(1, P, run_in=-600, queue=name),), queues=(name,), owners=())
        line = headline(snap, NOW)
        assert line is not None
        assert shorten(visible(name), 60) in line.text.plain or visible(shorten(name, 60)) in (
            line.text.plain
        ), name
        assert all(visible(c) == c for c in line.text.plain), name
        snap = calm(failed=failures(3, error=name.replace("{", "{{").replace("}", "}}")))
        line = headline(replace(snap, failed_recent=3, throughput=(0,) * 30), NOW)
        assert line is not None and all(visible(c) == c for c in line.text.plain), name


def test_rough_durations() -> None:
    assert [rough(timedelta(seconds=n)) for n in (0, 45, 61, 3600 * 3 + 5, 86400 * 2)] == [
        "0s",
        "45s",
        "1m",
        "3h",
        "2d",
    ]
