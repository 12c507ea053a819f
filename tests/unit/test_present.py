"""The presentation (leasectl/present): JSON documents with stable keys, and Rich output that
fits 80 columns."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console, RenderableType

from leasectl.cli import stderr
from leasectl.core.literal import visible
from leasectl.core.models import (
    ActionResult,
    Attempt,
    Event,
    ExpiredJob,
    Freshness,
    Job,
    JobDetail,
    JobStatus,
    OwnerHealth,
    QueueCounts,
    SkipCode,
    Skipped,
    StatusReport,
    WatcherResult,
)
from leasectl.core.texts import PayloadText
from leasectl.core.timestamps import TIMESTAMP_MAX, TIMESTAMP_MIN
from leasectl.present.actions import (
    LISTED_JOBS,
    action_renderables,
    watcher_renderables,
    would_become,
)
from leasectl.present.detail import detail_renderables, events_table, traceback_panel
from leasectl.present.jsonout import detail_json, dumps, jsonable, status_json, watcher_json
from leasectl.present.status import status_renderables
from leasectl.present.text import format_ids, lit
from leasectl.present.times import ago, clock, lease_left, short_window
from tests.hostile import CORPUS, ESC, NAMES

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
OWNER = "worker-host-17.example:48213:a1b2c3"


def render(parts: list[RenderableType], width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None, file=open_null())
    for part in parts:
        console.print(part)
    return console.export_text()


def open_null() -> object:
    import io

    return io.StringIO()


def fits(text: str, width: int = 80) -> bool:
    return all(len(line.rstrip()) <= width for line in text.splitlines())


def make_job(**changes: object) -> Job:
    base: dict[str, object] = {
        "id": 42,
        "queue": "emails",
        "payload": {"to": "[red]someone", "n": 1},
        "status": JobStatus.PROCESSING,
        "priority": 0,
        "run_at": NOW - timedelta(minutes=5),
        "attempts": 2,
        "max_attempts": 5,
        "lease_owner": OWNER,
        "lease_until": NOW - timedelta(seconds=42),
        "heartbeat_at": NOW - timedelta(seconds=72),
        "last_error": None,
        "created_at": NOW - timedelta(minutes=10),
        "updated_at": NOW - timedelta(seconds=72),
        "finished_at": None,
    }
    base.update(changes)
    return Job(**base)  # type: ignore[arg-type]


def make_detail(job: Job | None = None) -> JobDetail:
    job = job or make_job()
    attempts = (
        Attempt(
            42,
            1,
            OWNER,
            NOW - timedelta(minutes=4),
            None,
            NOW - timedelta(minutes=3),
            "expired",
            "lease expired; watcher@ops-1:311 moved the job to Pending",
        ),
        Attempt(
            42,
            2,
            OWNER,
            NOW - timedelta(minutes=2),
            NOW - timedelta(seconds=72),
            None,
            "running",
            None,
        ),
    )
    events = (
        Event(
            7,
            42,
            NOW - timedelta(minutes=3),
            "watcher@ops-1:311",
            "requeue",
            "lease expired",
            {"status": "Processing"},
            {"status": "Pending"},
        ),
    )
    return JobDetail(job, attempts, events, NOW)


def make_report() -> StatusReport:
    return StatusReport(
        db_now=NOW,
        queues=(
            QueueCounts(
                "emails",
                pending=120,
                due=100,
                processing=8,
                expired=1,
                stuck=2,
                completed_recent=5000,
                failed_recent=3,
                oldest_due_at=NOW - timedelta(seconds=95),
            ),
            QueueCounts("reports", pending=1, due=0, processing=0),
        ),
        owners=(
            OwnerHealth(
                owner=OWNER,
                hostname="worker-host-17.example",
                pid=48213,
                queues=("emails",),
                lease_ttl=timedelta(seconds=30),
                heartbeat_every=timedelta(seconds=10),
                started_at=NOW - timedelta(hours=1),
                last_seen_at=NOW - timedelta(seconds=3),
                stopped_at=None,
                held=8,
                expired=1,
                last_job_heartbeat_at=NOW - timedelta(seconds=4),
                next_expiry_at=NOW - timedelta(seconds=42),
                freshness=Freshness.FRESH,
            ),
            OwnerHealth(
                owner="legacy",
                hostname=None,
                pid=None,
                queues=(),
                lease_ttl=None,
                heartbeat_every=None,
                started_at=None,
                last_seen_at=None,
                stopped_at=None,
                held=0,
                expired=0,
                last_job_heartbeat_at=None,
                next_expiry_at=None,
                freshness=Freshness.UNKNOWN,
            ),
        ),
        finished_estimate={"Completed": 1_000_000},
    )


# -- small formats ----------------------------------------------------------------------------


def test_format_ids_compacts_ranges() -> None:
    assert format_ids([3, 1, 2, 7, 9, 10]) == "1-3, 7, 9-10"
    assert format_ids(list(range(1, 1001))) == "1-1000"
    assert format_ids([]) == "-"
    many = list(range(1, 40, 2))
    assert format_ids(many, max_ranges=3) == "1, 3, 5, (+17 more)"


def test_relative_times_use_the_given_clock() -> None:
    assert ago(NOW, NOW - timedelta(seconds=42)) == "42s ago"
    assert ago(NOW, NOW + timedelta(seconds=12)) == "in 12s"
    assert ago(NOW, None) == "-"
    assert lease_left(NOW, NOW - timedelta(seconds=42)).plain == "expired 42s ago"
    assert lease_left(NOW, NOW + timedelta(minutes=2)).plain == "2m00s left"


def test_short_window() -> None:
    assert short_window(timedelta(hours=1)) == "1h"
    assert short_window(timedelta(minutes=30)) == "30m"
    assert short_window(timedelta(seconds=90)) == "90s"
    assert short_window(timedelta(milliseconds=250)) == "250ms"


def test_would_become_mirrors_the_watcher() -> None:
    job = ExpiredJob(1, "q", JobStatus.PROCESSING, 2, 5, OWNER, NOW, NOW)
    spent = ExpiredJob(2, "q", JobStatus.PROCESSING, 5, 5, OWNER, NOW, NOW)
    assert would_become(job, "requeue") == JobStatus.PENDING
    assert would_become(spent, "requeue") == JobStatus.FAILED
    assert would_become(job, "mark") == JobStatus.STUCK


# -- JSON -------------------------------------------------------------------------------------


def test_jsonable_types() -> None:
    doc = jsonable({"t": NOW, "d": timedelta(milliseconds=1500), "s": JobStatus.STUCK, "l": (1, 2)})
    assert doc == {"t": "2025-03-01T12:00:00+00:00", "d": 1.5, "s": "Stuck", "l": [1, 2]}


def test_detail_json_has_all_columns() -> None:
    doc = json.loads(dumps(detail_json(make_detail())))
    assert set(doc) == {"job", "attempts", "events", "db_now", "queue_paused"}
    assert set(doc["job"]) == {
        "concurrency_key",
        "key_holder",
        "id",
        "queue",
        "payload",
        "status",
        "priority",
        "run_at",
        "attempts",
        "max_attempts",
        "lease_owner",
        "lease_until",
        "heartbeat_at",
        "last_error",
        "created_at",
        "updated_at",
        "finished_at",
        "unique_key",
        "snoozes",
        "timeout",
        "progress",
        "progress_message",
    }
    assert doc["job"]["lease_until"] == "2025-03-01T11:59:18+00:00"
    assert doc["job"]["status"] == "Processing"
    assert [a["outcome"] for a in doc["attempts"]] == ["expired", "running"]
    assert [a["error_detail"] for a in doc["attempts"]] == [None, None]
    assert doc["events"][0]["before"] == {"status": "Processing"}


def test_status_json_keys_and_check() -> None:
    doc = json.loads(dumps(status_json(make_report())))
    assert set(doc) >= {"db_now", "queues", "totals", "finished_estimate", "owners", "check"}
    queue_keys = {
        "queue",
        "pending",
        "due",
        "oldest_due_at",
        "oldest_due_age_s",
        "processing",
        "expired",
        "stuck",
        "waiting",
        "completed_recent",
        "failed_recent",
        "cancelled_recent",
        # Added with bounded counts: whether the count of that key is a lower bound.
        "pending_capped",
        "due_capped",
        "stuck_capped",
        "waiting_capped",
        # Added with estimates: past the cap, that key is the planner's estimate.
        "pending_estimated",
        "due_estimated",
        "stuck_estimated",
        "waiting_estimated",
    }
    assert all(set(q) == queue_keys for q in doc["queues"])
    assert not any(q["pending_capped"] or q["stuck_capped"] for q in doc["queues"])
    assert doc["queues"][0]["oldest_due_age_s"] == 95.0
    assert doc["totals"]["pending"] == 121
    assert set(doc["totals"]) == queue_keys - {"queue"}
    # (Failed: none in the statistics, 3 in the last hour: at least those.)
    assert doc["finished_estimate"] == {"completed": 1_000_000, "failed": 3, "cancelled": 0}
    owner = doc["owners"][0]
    assert set(owner) >= {
        "owner",
        "freshness",
        "held",
        "expired",
        "last_seen_at",
        "last_job_heartbeat_at",
        "next_expiry_at",
        "heartbeat_every_s",
        "lease_ttl_s",
        "hostname",
        "pid",
        "queues",
    }
    assert owner["heartbeat_every_s"] == 10.0 and owner["freshness"] == "fresh"
    assert doc["check"] == {"expired": 1, "stuck": 2, "ok": False}
    assert doc["truncated"] is False


def test_status_json_without_statistics() -> None:
    report = StatusReport(db_now=NOW, queues=(), owners=())
    doc = status_json(report)
    assert doc["finished_estimate"] == {"completed": None, "failed": None, "cancelled": None}
    assert doc["check"] == {"expired": 0, "stuck": 0, "ok": True}
    assert doc["totals"]["oldest_due_at"] is None


def test_watcher_json() -> None:
    job = ExpiredJob(1, "q", JobStatus.PENDING, 2, 5, OWNER, NOW, NOW - timedelta(seconds=5))
    doc = watcher_json(WatcherResult(requeued=1, batches=1, jobs=(job,)))
    assert doc == {
        "dry_run": False,
        "owner": None,
        "requeued": 1,
        "failed": 0,
        "marked_stuck": 0,
        "promoted": None,
        "jobs": [
            {
                "id": 1,
                "queue": "q",
                "status": "Pending",
                "attempts": 2,
                "max_attempts": 5,
                "lease_owner": OWNER,
                "lease_until": "2025-03-01T12:00:00+00:00",
                "heartbeat_at": "2025-03-01T11:59:55+00:00",
            }
        ],
    }
    # null: the keys' healing pass did not run (a dry run) or failed.
    assert watcher_json(WatcherResult(promoted=2))["promoted"] == 2


# -- human output -----------------------------------------------------------------------------


def test_inspect_output_fits_and_uses_db_clock() -> None:
    text = render(detail_renderables(make_detail()))
    assert fits(text)
    assert "expired 42s ago" in text
    assert "(1m12s ago)" in text  # heartbeat age against db_now, not the local clock
    assert OWNER in text
    assert "[red]someone" in text  # data is never read as markup
    assert "2/5" in text


def test_inspect_output_of_finished_job() -> None:
    job = make_job(
        status=JobStatus.COMPLETED, lease_until=None, finished_at=NOW, last_error="boom [x]"
    )
    text = render(detail_renderables(make_detail(job)))
    assert fits(text)
    assert "Completed" in text and "last holder" in text and "boom [x]" in text


def test_inspect_output_of_fresh_job() -> None:
    job = make_job(
        status=JobStatus.PENDING,
        attempts=0,
        lease_owner=None,
        lease_until=None,
        heartbeat_at=None,
        run_at=NOW + timedelta(minutes=5),
    )
    text = render(detail_renderables(JobDetail(job, (), (), NOW)))
    assert "never leased" in text and "events: none" in text and "due in 5m00s" in text


def test_status_output_fits() -> None:
    text = render(status_renderables(make_report()))
    assert fits(text)
    assert "expired" in text and "pending" in text  # headers are not truncated
    assert OWNER in render(status_renderables(make_report()), width=120)
    assert "total" in text
    assert "1,000,000" in text
    assert "1 expired lease(s), 2 Stuck job(s)" in text


def test_status_output_without_owners() -> None:
    text = render(status_renderables(StatusReport(db_now=NOW, queues=(), owners=())))
    assert "no live jobs" in text and "lease owners: none" in text
    assert "unknown (no planner statistics yet)" in text


def test_watcher_output() -> None:
    job = ExpiredJob(
        9, "emails", JobStatus.PROCESSING, 5, 5, OWNER, NOW - timedelta(minutes=2), None
    )
    dry = render(watcher_renderables(WatcherResult(dry_run=True, jobs=(job,)), NOW, "requeue"))
    assert fits(dry)
    assert "dry run" in dry and "Failed" in dry and "2m00s ago" in dry and "48213" in dry
    moved = render(watcher_renderables(WatcherResult(), NOW, "requeue"))
    assert "requeued 0, failed 0" in moved


def test_a_large_pass_lists_only_its_first_jobs_and_says_how_many_more() -> None:
    jobs = tuple(
        ExpiredJob(i, "q", JobStatus.PENDING, 1, 5, OWNER, NOW - timedelta(minutes=1), None)
        for i in range(100_001, 100_001 + LISTED_JOBS + 7)
    )
    text = render(watcher_renderables(WatcherResult(requeued=len(jobs), jobs=jobs), NOW, "x"))
    listed = [j.id for j in jobs if str(j.id) in text]
    assert listed == [j.id for j in jobs[:LISTED_JOBS]]
    assert "and 7 more job(s), not listed; --json lists all" in text
    assert f"requeued {len(jobs)}" in text
    short = render(watcher_renderables(WatcherResult(jobs=jobs[:3]), NOW, "requeue"))
    assert "more job(s)" not in short
    # What `requeue-stuck` gets from run_pass(listed=LISTED_JOBS): the counts of all it moved,
    # the jobs of only the first batches.
    pass_of_1000 = WatcherResult(requeued=990, failed=10, jobs=jobs[:LISTED_JOBS])
    text = render(watcher_renderables(pass_of_1000, NOW, "requeue"))
    assert f"and {1000 - LISTED_JOBS} more job(s), not listed" in text
    assert "requeued 990, failed 10" in text


def test_action_output() -> None:
    completed = Skipped(9, SkipCode.NOT_ELIGIBLE, "requeue", status=JobStatus.COMPLETED)
    result = ActionResult("requeue", (1, 2, 3), (completed,))
    text = render(action_renderables(result))
    assert fits(text)
    assert "requeued 3 job(s): 1-3" in text
    assert "a Completed job cannot be requeued" in text


# -- untrusted text ---------------------------------------------------------------------------


def acting(text: str) -> set[str]:
    """The characters of ``text`` a terminal would act on, or that reorder or hide text."""
    return {c for c in text if c != "\n" and visible(c) != c}


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_lit_is_the_literal_text_with_controls_visible(text: str) -> None:
    cell = lit(text, "red")
    assert cell.plain == visible(text) and ESC not in cell.plain
    assert cell.style == "red" and cell.spans == []  # no markup read from the value
    several = lit(text, multiline=True)
    assert several.plain == visible(text, multiline=True) and ESC not in several.plain


def test_json_gives_back_exact_values_and_carries_nothing_a_terminal_acts_on() -> None:
    values = [*CORPUS, "\U000e0001tag", "\udc80lone", "\x85next line"]
    document = {"values": values, **{v: v for v in values}}
    for indent in (2, None):
        text = dumps(document, indent=indent)
        assert json.loads(text) == document
        assert not acting(text), acting(text)
    # Readable text stays readable; what acts on a terminal is a JSON escape.
    assert dumps("日本語🙂 e\u0301") == '"日本語🙂 e\u0301"'
    assert dumps("\x9b\u202e\x7f\U000e0001") == '"\\u009b\\u202e\\u007f\\udb40\\udc01"'


def hostile_detail(value: str) -> JobDetail:
    job = make_job(
        queue=value,
        payload={value: [value], "v": value},
        lease_owner=value,
        last_error=value,
    )
    attempt = Attempt(
        42, 1, value, NOW - timedelta(minutes=1), None, NOW, "failed", value, error_detail=value
    )
    events = (
        Event(7, 42, NOW, value, value, value, {"status": value}, {"status": value}),
        Event(8, 42, NOW, "operator:x", "requeue", None, value, [value]),  # type: ignore[arg-type]
    )
    return JobDetail(job, (attempt,), events, NOW)


def hostile_report(value: str) -> StatusReport:
    report = make_report()
    owner = dataclasses.replace(report.owners[0], owner=value, hostname=value, queues=(value,))
    queue = dataclasses.replace(report.queues[0], queue=value)
    return dataclasses.replace(report, queues=(queue,), owners=(owner,))


@pytest.mark.parametrize("value", NAMES, ids=range(len(NAMES)))
def test_every_cell_shows_hostile_text_as_text(value: str) -> None:
    expired = ExpiredJob(9, value, JobStatus.PROCESSING, 1, 5, value, NOW, None)
    live = Skipped(9, SkipCode.LEASE_LIVE, "requeue", status=JobStatus.PROCESSING, owner=value)
    action = ActionResult("requeue", (), (live,))
    for what, parts in (
        ("status", status_renderables(hostile_report(value))),
        ("inspect", detail_renderables(hostile_detail(value))),
        ("dry run", watcher_renderables(WatcherResult(True, jobs=(expired,)), NOW, "x")),
        ("pass", watcher_renderables(WatcherResult(requeued=1, jobs=(expired,)), NOW, "x")),
        ("action", action_renderables(action)),
    ):
        text = render(parts, width=400)
        assert not acting(text), (what, acting(text))
        assert visible(value).strip() in text, what
    # The payload is its JSON text, escaped as --json escapes it.
    assert dumps(value) in render(detail_renderables(hostile_detail(value)), 400)


@pytest.mark.parametrize("value", CORPUS, ids=range(len(CORPUS)))
def test_the_traceback_of_the_last_failed_attempt_is_shown_as_text(value: str) -> None:
    """Alone in its panel, so that what is asserted is the traceback's own rendering: every
    line kept (newlines and tabs), everything else as visible escapes, nothing a terminal
    acts on; the 100,000-character value too (the worker bounds what it writes, the table
    holds what anyone who can write it wrote)."""
    detail = hostile_detail(value)
    older = dataclasses.replace(detail.attempts[0], error_detail="an earlier traceback")
    newer = dataclasses.replace(detail.attempts[0], attempt=2)
    parts = traceback_panel(dataclasses.replace(detail, attempts=(older, newer)))
    text = render(parts, width=400)
    assert not acting(text), acting(text)
    assert "traceback of attempt 2 (failed)" in text
    assert "1 earlier attempt's traceback: leasectl inspect 42 --json" in text
    assert "an earlier traceback" not in text
    for piece in re.split(r"[\n\t]", visible(value, multiline=True)):
        assert piece.strip()[:100] in text
    no_detail = dataclasses.replace(newer, error_detail=None)
    assert traceback_panel(dataclasses.replace(detail, attempts=(no_detail,))) == []


@pytest.mark.parametrize("value", NAMES, ids=range(len(NAMES)))
def test_a_unique_key_is_shown_as_text(value: str) -> None:
    detail = dataclasses.replace(make_detail(), unique_key=value)
    text = render(detail_renderables(detail), width=400)
    assert not acting(text), acting(text)
    [line] = [line for line in text.splitlines() if "unique key" in line]
    assert visible(value).strip() in line
    assert detail_json(detail)["job"]["unique_key"] == value
    # A job without a key has no such line.
    assert "unique key" not in render(detail_renderables(make_detail()), width=400)


def test_events_whose_documents_are_not_objects_still_render() -> None:
    text = render([events_table(hostile_detail("x").events[1:])])
    assert "? → ?" in text


def test_error_and_warning_lines_are_one_visible_bounded_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stderr._error("server said: \x1b]0;PWNED\x07\n\u202eevil " + "x" * 5000, [])
    stderr._warn("skipped: held by \x9b31m\r" + "y" * 5000)
    err = capsys.readouterr().err
    error, warning = err.splitlines()
    assert error.startswith("leasectl: error: server said: \\x1b]0;PWNED\\x07 \\u202eevil x")
    assert warning.startswith("leasectl: skipped: held by \\x9b31m\\ry")
    assert not acting(err)
    for line in (error, warning):
        assert len(line) <= len("leasectl: error: ") + stderr.MESSAGE_LIMIT
        assert line.endswith("chars)")


def test_inspect_shows_the_database_role_beside_the_actor() -> None:
    """The role comes from the database (job_events.db_role); the actor is only the name the
    client gave. Events from before the role was recorded show the actor alone."""
    recorded, older = (
        Event(
            n,
            42,
            NOW - timedelta(minutes=1),
            "operator:ceo@ops-1",
            "requeue",
            None,
            {"status": "Stuck"},
            {"status": "Pending"},
            role,
        )
        for n, role in ((8, "lc_ops"), (9, None))
    )
    text = render(detail_renderables(JobDetail(make_job(), (), (recorded, older), NOW)), width=140)
    assert "operator:ceo@ops-1 (role lc_ops)" in text
    assert text.count("(role ") == 1
    doc = detail_json(JobDetail(make_job(), (), (recorded, older), NOW))
    assert [e["db_role"] for e in doc["events"]] == ["lc_ops", None]
    assert [e["actor"] for e in doc["events"]] == ["operator:ceo@ops-1"] * 2


# -- values Python cannot hold, payloads as exact text -------------------------------------------


def test_infinite_timestamps_are_shown_as_such_never_fatal() -> None:
    job = make_job(
        status=JobStatus.PENDING,
        run_at=TIMESTAMP_MIN,
        lease_until=TIMESTAMP_MAX,
        heartbeat_at=TIMESTAMP_MAX,
        created_at=TIMESTAMP_MIN,
        finished_at=TIMESTAMP_MAX,
    )
    detail = make_detail(job)
    text = render(detail_renderables(detail))
    assert "run at       -infinity" in text and "lease until  infinity" in text
    assert "(lapsed at infinity)" in text and "heartbeat    infinity  (at infinity)" in text
    doc = json.loads(dumps(detail_json(detail)))
    assert (doc["job"]["run_at"], doc["job"]["lease_until"]) == ("-infinity", "infinity")
    assert clock(TIMESTAMP_MIN) == "-infinity"
    assert ago(NOW, TIMESTAMP_MAX) == "at infinity"


def test_a_payload_text_is_spliced_into_json_exactly() -> None:
    exact = '{"amount": 12345678901234567.89, "rate": 0.10000000000000000001, "big": 1e400}'
    deep = "[" * 5000 + "]" * 5000
    for text in (exact, deep):
        job = make_job(payload=PayloadText(text, len(text)))
        encoded = dumps(detail_json(make_detail(job)))
        assert f'"payload": {text},' in encoded
    doc = json.loads(dumps({"job": make_job(payload=PayloadText(exact, len(exact)))}))
    assert str(doc["job"]["payload"]["amount"]) != "12345678901234567.89"  # (floats: why raw)
    # A string that only looks like the placeholder stays a string.
    fake = make_job(queue="\x00raw-0000000000000000-0", payload=PayloadText("[1]", 3))
    assert json.loads(dumps(fake))["queue"] == "\x00raw-0000000000000000-0"


def test_a_long_payload_is_shown_cut_with_its_size_and_how_to_get_all_of_it() -> None:
    head = '{"items": [' + ", ".join(f'{{"n": {i}}}' for i in range(400))
    job = make_job(payload=PayloadText(head[:200], 50_000_000))
    text = render(detail_renderables(make_detail(job)))
    assert fits(text)
    assert "payload: first 200 of 50,000,000 characters" in text
    assert "all of it: leasectl inspect 42 --json" in text
    assert '"n": 3' in text and "…" in text


def test_pretty_lays_out_json_text_without_decoding_it() -> None:
    text = '{"a": [1, 2.50, {"b": "x,y:[\\"{"}], "c": {}, "d": [ ]}'
    assert PayloadText(text, len(text)).pretty() == (
        '{\n  "a": [\n    1,\n    2.50,\n    {\n      "b": "x,y:[\\"{"\n    }\n  ],\n'
        '  "c": {},\n  "d": []\n}'
    )
    deep = PayloadText("[" * 5000 + "]" * 5000, 10_000).pretty(max_indent=8)
    assert max(len(line) for line in deep.splitlines()) == len(" " * 8 + "[]")
