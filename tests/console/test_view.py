"""Pure console logic: clock, lease states, diagnosis, filter, results, poll schedule."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from rich.console import Console

from leasectl.console import view
from leasectl.console.poller import PollSchedule
from leasectl.console.screens.detail import render_detail
from leasectl.console.view import (
    Action,
    ConsoleFilter,
    DbClock,
    FilterError,
    Verdict,
    parse_filter,
)
from leasectl.core.models import ActionResult, Freshness, JobStatus, PanelJob, SkipCode, Skipped
from leasectl.core.timestamps import TIMESTAMP_MAX, TIMESTAMP_MIN
from leasectl.present import times
from leasectl.present.styles import LeaseState
from leasectl.present.text import estimate_text
from tests.console.sample import (
    NOW,
    OWNERS,
    PENDING,
    PROCESSING,
    R1,
    STUCK,
    W1,
    W3,
    job,
    s,
    sample_detail,
)


def test_db_clock_moves_with_monotonic_time_only() -> None:
    clock = DbClock(NOW, mono=100.0)
    assert clock.at(100.0) == NOW
    assert clock.at(103.5) == NOW + s(3.5)
    assert clock.at(99.0) == NOW  # a monotonic clock never goes back; be safe anyway


def test_lease_countdown_crosses_into_at_risk_then_expired() -> None:
    j = job(1, JobStatus.PROCESSING, owner=W1, lease_in=25)
    clock = DbClock(NOW, 0.0)
    states = [view.lease_state(j, clock.at(t), timedelta(seconds=10)) for t in (0, 16, 26)]
    assert states == [LeaseState.OK, LeaseState.AT_RISK, LeaseState.EXPIRED]
    assert times.countdown(clock.at(0), j.lease_until) == "25s"
    assert times.countdown(clock.at(90), j.lease_until) == "-1m05s"


def test_at_risk_uses_the_owners_interval_else_the_fixed_window() -> None:
    j = job(1, JobStatus.PROCESSING, owner=W1, lease_in=20)
    assert view.lease_state(j, NOW, timedelta(seconds=5)) is LeaseState.OK  # owner's 10 s
    unknown = replace(j, risk_window=None)
    assert view.lease_state(unknown, NOW, timedelta(seconds=30)) is LeaseState.AT_RISK


def expired_lease_of(owner: str) -> PanelJob:
    return next(j for j in STUCK if j.lease_owner == owner and j.status == JobStatus.PROCESSING)


def test_diagnosis_alive_versus_silent() -> None:
    owners = {o.owner: o for o in OWNERS}
    alive = expired_lease_of(W1)
    silent = expired_lease_of(W3)
    assert view.diagnose(alive, owners).text == "owner alive, lease expired"
    assert view.diagnose(alive, owners).verdict is Verdict.ALIVE
    assert view.diagnose(silent, owners).text == "owner silent"
    gone = replace(silent, lease_owner="vanished:1:abc")
    assert view.diagnose(gone, owners).verdict is Verdict.SILENT
    assert view.diagnose(replace(silent, lease_owner=None), owners).text == "never leased"
    stopped = replace(silent, lease_owner=R1)
    assert view.diagnose(stopped, owners).text == "owner silent (stopped)"


@pytest.mark.parametrize("lease_until", [None, NOW - timedelta(minutes=20)])
def test_a_quarantined_job_says_by_whom_and_why_whatever_its_last_owner_does(
    lease_until: datetime | None,
) -> None:
    """A Stuck job was marked stuck on purpose (its attempt closed): neither "owner silent"
    (which says a requeue is safe) nor "owner alive, lease expired", whether it was quarantined
    from Pending (no lease) or from an expired lease (lease_until kept)."""
    owners = {o.owner: o for o in OWNERS}
    for owner in (W1, W3):  # alive, silent
        quarantined = replace(
            expired_lease_of(owner),
            status=JobStatus.STUCK,
            lease_until=lease_until,
            quarantined_by="operator:alice",
            quarantine_reason="poison payload, INC-7",
        )
        diagnosis = view.diagnose(quarantined, owners)
        assert diagnosis.verdict is Verdict.QUARANTINED
        assert diagnosis.text == "quarantined by operator:alice: poison payload, INC-7"
    unaudited = replace(expired_lease_of(W3), status=JobStatus.STUCK)
    assert view.diagnose(unaudited, owners).text == "quarantined (no audit event left)"


def test_late_owner_counts_as_alive() -> None:
    late = replace(OWNERS[0], freshness=Freshness.LATE)
    j = expired_lease_of(W3)
    assert view.diagnose(j, {W3: late}).verdict is Verdict.ALIVE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ConsoleFilter()),
        ("queue:payments", ConsoleFilter(queue="payments")),
        ("q:emails owner:pay-worker-1", ConsoleFilter(queue="emails", owner="pay-worker-1")),
        ("#1042", ConsoleFilter(job_id=1042)),
        ("1042", ConsoleFilter(job_id=1042)),
        ("id:7", ConsoleFilter(job_id=7)),
        ("payments", ConsoleFilter(queue="payments")),
        ("pay-worker-3", ConsoleFilter(owner="pay-worker-3")),
        ("owner:host:12:ab", ConsoleFilter(owner="host:12:ab")),
        ("newqueue", ConsoleFilter(queue="newqueue")),
    ],
)
def test_parse_filter(text: str, expected: ConsoleFilter) -> None:
    owners = [o.owner for o in OWNERS]
    assert parse_filter(text, {"payments", "emails"}, owners) == expected


@pytest.mark.parametrize("text", ["id:0", "id:x", "queue:", "owner:"])
def test_parse_filter_rejects(text: str) -> None:
    with pytest.raises(FilterError):
        parse_filter(text)


def test_filter_round_trips_through_its_text() -> None:
    flt = ConsoleFilter(queue="payments", owner="w-7", job_id=3)
    assert parse_filter(str(flt)) == flt


def test_eligibility_as_seen_now() -> None:
    live = PROCESSING[-1]
    expired = PROCESSING[0]
    assert view.eligible(Action.REQUEUE, live, NOW) == "lease still live"
    assert view.eligible(Action.REQUEUE, expired, NOW) is None
    assert view.eligible(Action.REQUEUE, PENDING[0], NOW) == "Pending cannot be requeued"
    assert view.eligible(Action.MARK_STUCK, PENDING[0], NOW) is None
    assert view.eligible(Action.MARK_STUCK, STUCK[0], NOW) == "Stuck cannot be marked stuck"


def test_result_text_lists_skipped_with_reasons() -> None:
    result = ActionResult(
        "requeue",
        changed=(1, 2),
        skipped=(
            Skipped(
                3,
                SkipCode.MOVED,
                "requeue",
                seen_status=JobStatus.PROCESSING,
                status=JobStatus.COMPLETED,
            ),
        ),
    )
    text = view.result_text(Action.REQUEUE, result)
    assert text.title == "Requeue: 2 of 3 requeued"
    assert "changed: #1, #2" in text.body
    assert "#3: moved since you looked: Processing -> Completed" in text.body
    assert text.severity == "warning"
    none = view.result_text(Action.MARK_STUCK, ActionResult("mark-stuck", (), result.skipped))
    assert none.severity == "error"
    assert none.title == "Mark stuck: 0 of 1 marked stuck"


def test_result_text_escapes_the_owner_a_skip_reason_names() -> None:
    """One line per skipped job, whatever the owner id it quotes holds."""
    live = Skipped(3, SkipCode.LEASE_LIVE, "requeue", owner="w\n\x1b[2J#9: fake")
    result = ActionResult("requeue", changed=(), skipped=(live,))
    body = view.result_text(Action.REQUEUE, result).body
    assert body.splitlines() == [
        "skipped 1:",
        "  #3: lease live: held by w\\n\\x1b[2J#9: fake until ?; use --force to override",
    ]


def test_short_owner_escapes_before_it_cuts() -> None:
    assert view.short_owner("\x1b]0;PWNED\x07", 22) == "\\x1b]0;PWNED\\x07"
    assert view.short_owner("\u202e" * 30, 10) == "\\u202e\\u2…"


def test_condition_text_names_the_guard() -> None:
    text = view.condition_text(Action.REQUEUE)
    assert "lease_until < now()" in text and "what you saw" in text
    assert "Pending" in view.condition_text(Action.MARK_STUCK)


def test_estimates_are_marked() -> None:
    assert estimate_text(None) == "≈?"
    assert estimate_text(950) == "≈950"
    assert estimate_text(1_043_000) == "≈1.0M"
    assert estimate_text(5_210) == "≈5.2k"


def test_poll_schedule_backs_off_and_resets() -> None:
    schedule = PollSchedule(interval=2.0, backoff_cap=10.0)
    assert [schedule.failed() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert schedule.succeeded() == 2.0
    assert schedule.failed() == 1.0
    for _ in range(5000):
        schedule.failed()
    assert schedule.failed() == 10.0


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The viewer east of UTC, where datetime.max.astimezone() overflows."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_infinite_timestamps_are_shown_in_any_time_zone(tokyo: None) -> None:
    assert times.local_stamp(TIMESTAMP_MAX) == "infinity"
    assert times.local_stamp(TIMESTAMP_MIN) == "-infinity"
    assert times.local_clock(TIMESTAMP_MAX) == "infinity"
    assert times.age(NOW, TIMESTAMP_MIN) == "-infinity"
    assert times.local_stamp(NOW).endswith("JST")
    detail = sample_detail()
    job = replace(detail.job, run_at=TIMESTAMP_MAX, created_at=TIMESTAMP_MIN)
    text = Console(width=120, file=io.StringIO(), record=True)
    text.print(render_detail(replace(detail, job=job)))
    rendered = text.export_text()
    assert "-infinity" in rendered and "run at       infinity" in rendered
