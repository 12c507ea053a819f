"""`leasectl cancel` and `leasectl delete` (migration 10) through the command line and the
data layer: what each changes, what it skips and says, the audit trail a deleted job leaves,
and Cancelled in the listing, status and prune."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg

from leasectl.core.models import JobStatus
from leasectl.runtime import retention
from tests.integration.test_cli import assert_one_line_error, cli
from tests.stores import Stores

TTL = timedelta(minutes=5)
Q = "q"


def events(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT action, actor, reason, db_role IS NOT NULL FROM leasectl.job_events "
        "WHERE job_id = %s ORDER BY id",
        (job_id,),
    ).fetchall()


def test_cancel_moves_pending_stuck_and_processing_jobs_and_skips_finished_ones(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    held, pending, done = store.ops.enqueue([{}, {}, {}], queue=Q)
    store.work.claim_by_id(held, "w1", TTL)
    store.work.complete([store.work.claim_by_id(done, "w1", TTL)])  # type: ignore[list-item]
    proc = cli("cancel", str(held), str(pending), "--reason", "bad deploy", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "action": "cancel",
        "changed": [held, pending],
        "skipped": [],
    }
    for job_id in (held, pending):
        job = store.ops.inspect(job_id)
        assert job.job.status == JobStatus.CANCELLED and job.job.finished_at is not None
        assert job.job.lease_until is None
        assert [(e.action, e.reason) for e in job.events] == [("cancel", "bad deploy")]
    assert [a.outcome for a in store.ops.inspect(held).attempts] == ["cancelled"]
    skipped = cli("cancel", str(done), str(held), "--reason", "again", dsn=db_dsn)
    line = assert_one_line_error(skipped, 1, "2 of 2 job(s) not cancelled", prefix="leasectl: ")
    assert "a Completed job cannot be cancelled" in line and "already finished" in line
    assert "cancelled no jobs" in skipped.stdout


def test_cancel_needs_a_reason(db_dsn: str, store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    for args in ([], ["--reason", " "]):
        proc = cli("cancel", str(job_id), *args, dsn=db_dsn)
        assert proc.returncode == 2, proc.stderr
    assert store.ops.get_job(job_id).status == JobStatus.PENDING


def test_delete_refuses_live_work_keeps_the_events_and_writes_its_own(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """Pending and Processing (live or lapsed) are refused; a Failed job goes with its
    attempts, its earlier events stay, and a `delete` event says who, why and what it was."""
    failed, pending, live, lapsed = store.ops.enqueue([{}, {}, {}, {}], queue=Q, max_attempts=1)
    lease = store.work.claim_by_id(failed, "w1", TTL)
    assert lease is not None
    store.work.fail(lease, "boom", retry_delay=timedelta(0))
    assert store.ops.operator_requeue(store.ops.seen_now([failed]), actor="op", reason="retry")
    lease = store.work.claim_by_id(failed, "w1", TTL)
    assert lease is not None
    store.work.fail(lease, "boom again", retry_delay=timedelta(0))
    store.work.claim_by_id(live, "w1", TTL)
    store.work.claim_by_id(lapsed, "w1", TTL)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 s' WHERE id = %s", (lapsed,)
    )
    proc = cli("delete", str(pending), str(live), str(lapsed), "--json", dsn=db_dsn)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["changed"] == [] and [s["id"] for s in doc["skipped"]] == [pending, live, lapsed]
    assert "a Pending job cannot be deleted" in doc["skipped"][0]["reason"]
    assert "a Processing job cannot be deleted" in doc["skipped"][1]["reason"]
    left = sql_conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone()
    assert left == (4,)

    proc = cli("delete", str(failed), "--reason", "GDPR request 7", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] == [failed]
    gone = sql_conn.execute(
        "SELECT (SELECT count(*) FROM leasectl.jobs WHERE id = %(id)s), "
        "(SELECT count(*) FROM leasectl.job_attempts WHERE job_id = %(id)s)",
        {"id": failed},
    ).fetchone()
    assert gone == (0, 0)
    trail = events(sql_conn, failed)
    assert [e[0] for e in trail] == ["requeue", "delete"]
    assert trail[-1][2] == "GDPR request 7" and all(e[3] for e in trail)
    [before] = sql_conn.execute(
        "SELECT before FROM leasectl.job_events WHERE job_id = %s AND action = 'delete'",
        (failed,),
    ).fetchone()
    assert (before["status"], before["attempts"], before["last_error"]) == (
        "Failed",
        2,
        "boom again",
    )
    assert "payload" not in before

    # inspect says the job was deleted, by whom and when; a job that never was, says so.
    proc = cli("inspect", str(failed), dsn=db_dsn)
    line = assert_one_line_error(proc, 1, f"job {failed} was deleted by", prefix="leasectl: ")
    assert "'GDPR request 7'" in line and "2 audit event(s) remain" in line
    assert "not found" in cli("inspect", "999999", dsn=db_dsn).stderr


def test_a_deleted_job_cannot_be_deleted_twice(db_dsn: str, store: Stores) -> None:
    [job_id] = store.ops.enqueue([{}], queue=Q)
    seen = store.ops.seen_now([job_id])
    assert store.ops.operator_cancel(seen, actor="op", reason="x").changed == (job_id,)
    seen = store.ops.seen_now([job_id])
    assert store.ops.operator_delete(seen, actor="op", reason=None).changed == (job_id,)
    again = store.ops.operator_delete(seen, actor="op", reason=None)
    assert again.changed == () and again.skipped[0].code == "not-found"


def test_cancelled_jobs_are_listed_counted_and_pruned(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    old, recent, pending = store.ops.enqueue([{}, {}, {}], queue=Q)
    seen = store.ops.seen_now([old, recent])
    assert store.ops.operator_cancel(seen, actor="op", reason="x").changed == (old, recent)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET finished_at = now() - interval '30 days' WHERE id = %s", (old,)
    )
    listed = cli("list", "--state", "cancelled", "--json", dsn=db_dsn)
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == [recent, old]
    assert [j["status"] for j in json.loads(listed.stdout)["jobs"]] == ["Cancelled"] * 2
    status = cli("status", "--json", dsn=db_dsn)
    [queue] = json.loads(status.stdout)["queues"]
    assert (queue["pending"], queue["cancelled_recent"]) == (1, 1)
    text = cli("status", dsn=db_dsn)
    assert "cancelled by operators in the last 1h: q 1" in text.stdout
    assert retention.prune(store.ops, older_than=timedelta(days=7), queue=None).jobs == 1
    left = sql_conn.execute("SELECT id FROM leasectl.jobs ORDER BY id").fetchall()
    assert left == [(recent,), (pending,)]
