"""`leasectl errors` and `leasectl events` on a real PostgreSQL: the incident's failures grouped
by kind, and the timeline of who did what, each bounded and saying so."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg

from leasectl.core.models import JobStatus
from leasectl.db.incident import Incident
from tests.integration.test_cli import cli
from tests.stores import Stores

TTL = timedelta(seconds=30)


def fail_jobs(store: Stores, queue: str, errors: list[str], *, traced: bool = True) -> list[int]:
    """One job of ``queue`` per error, each failed once with it (for good: no retry)."""
    ids = store.ops.enqueue([{}] * len(errors), queue=queue)
    leases = store.work.claim(queue, "w-1", TTL, limit=len(errors))
    assert sorted(lease.job_id for lease in leases) == sorted(ids)
    for lease, error in zip(sorted(leases, key=lambda x: x.job_id), errors, strict=True):
        detail = f"Traceback (most recent call last):\n  ...\n{error}" if traced else None
        status = store.work.fail(lease, error, retry_delay=timedelta(0), retry=False, detail=detail)
        assert status is JobStatus.FAILED
    return sorted(ids)


def test_the_incidents_failures_are_two_groups(db_dsn: str, store: Stores) -> None:
    psp = fail_jobs(store, "payments", [f"PSPError: 503 for invoice {i}" for i in range(12)])
    declined = fail_jobs(store, "payments", [f"CardDeclined: card {i}" for i in range(30)])
    refunds = fail_jobs(store, "refunds", ["CardDeclined: card 99"])

    proc = cli("errors", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) == {"queue", "since", "groups"} and doc["queue"] is None
    groups = {g["error"]: g for g in doc["groups"]}
    assert [g["error"] for g in doc["groups"]] == ["CardDeclined", "PSPError"]
    assert set(groups["CardDeclined"]) == {
        "error",
        "count",
        "first_at",
        "last_at",
        "queues",
        "example_job",
    }
    assert groups["CardDeclined"]["count"] == 31
    assert groups["CardDeclined"]["queues"] == ["payments", "refunds"]
    assert groups["CardDeclined"]["example_job"] in declined + refunds
    assert groups["PSPError"]["count"] == 12 and groups["PSPError"]["queues"] == ["payments"]
    assert groups["PSPError"]["example_job"] in psp
    assert groups["PSPError"]["first_at"] <= groups["PSPError"]["last_at"]
    assert proc.stderr == ""

    only = json.loads(cli("errors", "--queue", "refunds", "--json", dsn=db_dsn).stdout)
    assert only["queue"] == "refunds"
    assert [(g["error"], g["count"]) for g in only["groups"]] == [("CardDeclined", 1)]

    text = cli("errors", dsn=db_dsn)
    assert text.returncode == 0, text.stderr
    lines = " ".join(text.stdout.split())
    assert "31 CardDeclined" in lines and "12 PSPError" in lines


def test_errors_without_a_traceback_group_by_their_normalised_line(store: Stores) -> None:
    fail_jobs(store, "q", ["503 for invoice 1", "503 for invoice 2"], traced=False)
    report = Incident(store.db).errors(since=timedelta(hours=1))
    assert [(g.error, g.count) for g in report.groups] == [("<n> for invoice <n>", 2)]


def test_errors_outside_the_window_are_not_counted(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    old = fail_jobs(store, "q", ["OldError: x"])
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET ended_at = now() - interval '2 hours' WHERE job_id = %s",
        [old[0]],
    )
    fail_jobs(store, "q", ["NewError: y"])
    assert [g.error for g in Incident(store.db).errors(since=timedelta(hours=1)).groups] == [
        "NewError"
    ]
    assert {g.error for g in Incident(store.db).errors(since=timedelta(hours=3)).groups} == {
        "OldError",
        "NewError",
    }


def test_a_capped_read_counts_the_newest_and_says_so(db_dsn: str, store: Stores) -> None:
    fail_jobs(store, "q", [f"E{i}: x" for i in range(5)])
    report = Incident(store.db).errors(since=timedelta(hours=1), scan=3)
    assert report.truncated and report.scanned == 3
    assert sum(g.count for g in report.groups) == 3
    whole = Incident(store.db).errors(since=timedelta(hours=1), scan=5)
    assert not Incident(store.db).errors(since=timedelta(hours=1), scan=6).truncated
    assert whole.truncated  # exactly at the cap: there may be more


def test_one_queues_errors_are_read_however_many_another_queue_has(
    db_dsn: str, store: Stores
) -> None:
    """A queue's failures are read from its own index (migration 30): another queue failing
    faster, past the read's cap, hides none of them."""
    fail_jobs(store, "refunds", ["CardDeclined: card 1", "CardDeclined: card 2"])
    fail_jobs(store, "payments", [f"PSPError: 503 for invoice {i}" for i in range(6)])
    report = Incident(store.db).errors(since=timedelta(hours=1), queue="refunds", scan=3)
    assert [(g.error, g.count, g.queues) for g in report.groups] == [
        ("CardDeclined", 2, ("refunds",))
    ]
    assert not report.truncated and report.scanned == 2
    everyone = Incident(store.db).errors(since=timedelta(hours=1), scan=3)
    assert everyone.truncated and {q for g in everyone.groups for q in g.queues} == {"payments"}


def test_no_failures_is_an_empty_list(db_dsn: str) -> None:
    proc = cli("errors", "--json", "--queue", "nothing", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["groups"] == []
    assert "none" in cli("errors", dsn=db_dsn).stdout


def test_events_merge_job_and_queue_actions_newest_first(db_dsn: str, store: Stores) -> None:
    ids = fail_jobs(store, "payments", ["E: x"] * 50)
    store.ops.pause("payments", actor="alice", reason="PSP down")
    result = store.ops.operator_requeue(store.ops.seen_now(ids), actor="bob", reason="PSP back")
    assert len(result.changed) == 50
    store.ops.resume("payments", actor="alice")

    proc = cli("events", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    seen = [(e["kind"], e["actor"], e["action"], e["jobs"]) for e in doc["events"]]
    # One line for the requeue of 50 jobs, between the pause and the resume.
    assert seen == [
        ("queue", "alice", "resume", 0),
        ("job", "bob", "requeue", 50),
        ("queue", "alice", "pause", 0),
    ]
    requeue = doc["events"][1]
    assert (requeue["first_job"], requeue["last_job"]) == (min(ids), max(ids))
    assert requeue["queues"] == ["payments"] and requeue["reason"] == "PSP back"
    assert doc["complete"] is True

    by_bob = json.loads(cli("events", "--actor", "bob", "--json", dsn=db_dsn).stdout)
    assert [e["action"] for e in by_bob["events"]] == ["requeue"]
    other = json.loads(cli("events", "--queue", "other", "--json", dsn=db_dsn).stdout)
    assert other["events"] == []

    text = cli("events", dsn=db_dsn)
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert "50 jobs" in flat and "PSP back" in flat and "PSP down" in flat


def test_events_say_when_the_window_held_more_than_was_read(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    ids = store.ops.enqueue([{}] * 4, queue="q")
    for job in ids:  # four statements: four entries
        store.ops.operator_cancel(store.ops.seen_now([job]), actor="op", reason=None)
    incident = Incident(store.db)
    assert len(incident.events(since=timedelta(hours=1)).entries) == 4
    capped = incident.events(since=timedelta(hours=1), scan=2)
    assert len(capped.entries) == 2 and not capped.complete
    limited = incident.events(since=timedelta(hours=1), limit=3)
    assert len(limited.entries) == 3 and not limited.shown_all and limited.complete
    sql_conn.execute("UPDATE leasectl.job_events SET at = now() - interval '1 day'")
    old = incident.events(since=timedelta(hours=1), scan=2)
    assert old.entries == () and old.complete  # the rows read go back past the window


def test_bad_values_are_one_line_and_exit_2(db_dsn: str) -> None:
    for args, said in (
        (["errors", "--since", "soon"], "--since"),
        (["events", "--since", "-1h"], "--since"),
        # (An empty actor matched nothing and said "actions ... by , newest first: none".)
        (["events", "--actor", ""], "--actor must not be empty"),
        (["events", "--actor", "  "], "--actor must not be empty"),
    ):
        proc = cli(*args, dsn=db_dsn)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        assert said in proc.stderr, proc.stderr
