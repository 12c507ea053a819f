"""`requeue`/`mark-stuck` on a filter: exactly the jobs that match, in batches, each guarded and
audited with the filter in its reason; the dry run; skips; a run stopped by SIGINT after a
committed batch, continued by the same command and by `--after`; the id windows the pages are
read in; the count and its cap."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from leasectl.core.actions import NO_SETTINGS, JobSettings
from leasectl.core.bulk import audit_reason
from leasectl.core.filters import JobFilter, parse_filter
from leasectl.core.models import ActionResult, SeenState
from leasectl.db.history import History
from leasectl.db.operations import Operations
from leasectl.runtime import bulk
from tests.integration.test_cli import _env, cli, snapshot
from tests.stores import Stores
from tests.util import wait_until


def _insert(
    conn: psycopg.Connection[Any],
    n: int,
    *,
    queue: str = "payments",
    status: str = "Failed",
    error: str | None = "timeout after 30s",
    payload: Any = None,
    owner: str | None = None,
    lease: str = "NULL",
) -> list[int]:
    finished = "now()" if status in ("Failed", "Completed") else "NULL"
    rows = conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, max_attempts, last_error, payload, "
        f"lease_owner, lease_until, finished_at) SELECT %s, %s, 1, 1, %s, %s, %s, {lease}, "
        f"{finished} FROM generate_series(1, %s) RETURNING id",
        [queue, status, error, Jsonb(payload or {}), owner, n],
    ).fetchall()
    return [r[0] for r in rows]


def _statuses(conn: psycopg.Connection[Any], ids: Sequence[int]) -> set[str]:
    rows = conn.execute("SELECT DISTINCT status::text FROM leasectl.jobs WHERE id = ANY(%s)", [ids])
    return {r[0] for r in rows}


def _events(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute("SELECT job_id, action, reason FROM leasectl.job_events ORDER BY id")
    ]


def test_requeue_by_filter_moves_exactly_the_matching_jobs_in_batches_audited(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    target = _insert(sql_conn, 7)
    other_error = _insert(sql_conn, 2, error="disk full")
    other_queue = _insert(sql_conn, 2, queue="emails")
    completed = _insert(sql_conn, 2, status="Completed")
    pending = _insert(sql_conn, 2, status="Pending", error="timeout again")
    proc = cli(
        "requeue", "--queue", "payments", "--error", "TIMEOUT", "--batch-size", "2",
        "--reason", "INC-7", "--json", dsn=db_dsn,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["matched"], doc["changed"], doc["skipped"], doc["batches"]) == (7, 7, [], 4)
    assert doc["complete"] is True
    assert doc["filter"]["--queue"] == "payments"
    assert _statuses(sql_conn, target) == {"Pending"}
    assert _statuses(sql_conn, other_error + other_queue) == {"Failed"}
    assert _statuses(sql_conn, completed) == {"Completed"}
    assert _statuses(sql_conn, pending) == {"Pending"}
    reason = "INC-7 (by filter: --queue payments --error TIMEOUT)"
    assert sorted(_events(sql_conn)) == [(i, "requeue", reason) for i in target]
    # Run again: the moved jobs no longer match (requeue takes only what it can requeue).
    again = cli("requeue", "--queue", "payments", "--error", "timeout", dsn=db_dsn)
    assert again.returncode == 0, again.stderr
    assert "0 matched, 0 requeued, 0 skipped" in again.stdout


def test_mark_stuck_by_filter_and_all(db_dsn: str, sql_conn: psycopg.Connection) -> None:
    pending = _insert(sql_conn, 3, status="Pending", payload={"tenant": 7})
    others = _insert(sql_conn, 2, status="Pending", payload={"tenant": 8})
    failed = _insert(sql_conn, 1)
    proc = cli("mark-stuck", "--payload", '{"tenant": 7}', dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert "3 matched, 3 marked stuck, 0 skipped" in proc.stdout
    assert _statuses(sql_conn, pending) == {"Stuck"}
    assert _statuses(sql_conn, others) == {"Pending"}
    reasons = {r for _, _, r in _events(sql_conn)}
    assert reasons == {'by filter: --payload {"tenant": 7}'}
    everything = cli("mark-stuck", "--all", "--json", dsn=db_dsn)
    assert everything.returncode == 0, everything.stderr
    assert json.loads(everything.stdout)["changed"] == 2
    assert _statuses(sql_conn, others) == {"Stuck"}
    assert _statuses(sql_conn, failed) == {"Failed"}  # never eligible: not even read
    assert {r for _, _, r in _events(sql_conn)} == {reasons.pop(), "by filter: --all"}


def test_dry_run_counts_and_samples_and_changes_nothing(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    target = _insert(sql_conn, 12)
    _insert(sql_conn, 3, queue="emails")
    before = snapshot(db_dsn)
    proc = cli("requeue", "-s", "failed", "-q", "payments", "--dry-run", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert "dry run: 12 job(s) would be requeued; nothing changed" in proc.stdout
    assert "filter: --state Failed --queue payments" in proc.stdout
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.split()[:1] != []]
    assert [str(i) for i in sorted(target, reverse=True)[:10]] == [x for x in listed if x.isdigit()]
    doc = json.loads(cli("requeue", "-s", "failed", "--dry-run", "--json", dsn=db_dsn).stdout)
    assert (doc["dry_run"], doc["matched"], doc["matched_capped"]) == (True, 15, False)
    assert len(doc["sample"]) == 10 and doc["sample"][0]["id"] == max(target) + 3
    assert snapshot(db_dsn) == before


def test_cancel_dry_run_needs_no_reason_as_requeue_dry_run_does_not(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    """`cancel --dry-run` demanded --reason; a dry run changes nothing."""
    _insert(sql_conn, 2, status="Pending", error=None)
    before = snapshot(db_dsn)
    for action in ("cancel", "requeue"):
        proc = cli(action, "-q", "payments", "--dry-run", dsn=db_dsn)
        assert proc.returncode == 0, proc.stderr
        assert "nothing changed" in proc.stdout
    assert snapshot(db_dsn) == before
    # Without --dry-run the reason is still required, before anything is read.
    proc = cli("cancel", "-q", "payments", dsn=db_dsn)
    assert proc.returncode == 2 and "--reason must not be empty" in proc.stderr
    assert snapshot(db_dsn) == before


def test_skips_are_reported_with_reasons_and_exit_1(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    live = _insert(
        sql_conn, 2, status="Processing", owner="w-1", lease="now() + interval '1 minute'"
    )
    expired = _insert(
        sql_conn, 1, status="Processing", owner="w-1", lease="now() - interval '1 minute'"
    )
    proc = cli("requeue", "--owner", "w-1", "--json", dsn=db_dsn)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["matched"], doc["changed"]) == (3, 1)
    assert sorted(s["id"] for s in doc["skipped"]) == live
    assert all("lease live: held by w-1" in s["reason"] for s in doc["skipped"])
    assert "2 of 3 matching job(s) not requeued" in proc.stderr
    assert _statuses(sql_conn, expired) == {"Pending"}
    assert _statuses(sql_conn, live) == {"Processing"}
    forced = cli("requeue", "--owner", "w-1", "--force", dsn=db_dsn)
    assert forced.returncode == 0, forced.stderr
    assert _statuses(sql_conn, live) == {"Pending"}


def test_a_job_that_moved_after_the_read_is_skipped_not_forced(store: Stores) -> None:
    """The batch is guarded on the state its page read: a job taken between the read and the
    batch is skipped as moved (here: requeued by someone else meanwhile)."""
    with psycopg.connect(store.db.dsn, autocommit=True) as conn:
        ids = _insert(conn, 4)
    racer = ids[0]

    def meddling(
        ops: Operations, seen: Sequence[SeenState], /, *, actor: str, reason: str | None,
        force: bool = False, settings: JobSettings = NO_SETTINGS,
    ) -> ActionResult:  # fmt: skip
        if any(s.id == racer for s in seen):
            ops.operator_requeue(ops.seen_now([racer]), actor="someone", reason="first")
        return ops.operator_requeue(seen, actor=actor, reason=reason, force=force,
                                    settings=settings)  # fmt: skip

    act = bulk.BulkAction("requeue", meddling)
    result = bulk.run(
        store.ops, act, parse_filter(states=["failed"]), actor="t", reason=None, batch_size=10
    )
    assert (result.matched, result.changed) == (4, 3)
    assert [(s.id, s.code.value) for s in result.skipped] == [(racer, "moved")]


def test_pages_are_read_in_windows_of_ids_and_after_bounds_the_run(store: Stores) -> None:
    """Jobs spread over a wide id range with long gaps: every matching one is read once (the
    windows widen across the gaps); ``after`` leaves the ids from it up alone."""
    with psycopg.connect(store.db.dsn, autocommit=True) as conn:
        groups = []
        for _ in range(4):
            groups.append(_insert(conn, 3))
            _insert(conn, 150, status="Completed")  # a gap of ids that never match
    flat = sorted(i for g in groups for i in g)
    history = History(store.db)
    page = history.list_jobs(
        JobFilter(), limit=1000, after=flat[5], floor=flat[2], timeout=timedelta(seconds=5)
    )
    assert [j.id for j in page.jobs] == list(range(flat[5] - 1, flat[2] - 1, -1))
    seen_batches: list[int] = []
    result = bulk.run(
        store.ops,
        bulk.action("requeue"),
        parse_filter(states=["failed"]),
        actor="t",
        reason=None,
        batch_size=2,
        after=groups[3][0],  # the last group stays
        progress=lambda p: seen_batches.append(p.matched),
    )
    assert result.complete and result.changed == 9 and result.matched == 9
    assert seen_batches == sorted(set(seen_batches))  # progress after each batch, growing
    with psycopg.connect(store.db.dsn) as conn:
        assert _statuses(conn, [i for g in groups[:3] for i in g]) == {"Pending"}
        assert _statuses(conn, groups[3]) == {"Failed"}
    assert result.resume_after is not None and result.resume_after <= min(flat)


def test_count_is_exact_or_says_it_was_capped(store: Stores) -> None:
    with psycopg.connect(store.db.dsn, autocommit=True) as conn:
        _insert(conn, 30)
    history = History(store.db)
    flt = parse_filter(states=["failed"])
    wait = timedelta(seconds=5)
    assert history.count_jobs(flt, timeout=wait) == (30, False)
    assert history.count_jobs(flt, timeout=wait, cap=31) == (30, False)
    assert history.count_jobs(flt, timeout=wait, cap=10) == (10, True)
    assert history.count_jobs(parse_filter(queue="emails"), timeout=wait) == (0, False)


def test_a_run_stopped_by_sigint_after_a_committed_batch_continues(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    """SIGINT once the first batch is committed (polled in the database): the batch in flight
    commits, the command stops with exit 130 and says where; the same command then moves the
    rest, `--after` continues below the last id done; every job has exactly one event."""
    ids = _insert(sql_conn, 3000)
    args = ["requeue", "-s", "failed", "--batch-size", "1", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasectl", *args],
        env=_env(db_dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: sql_conn.execute("SELECT count(*) FROM leasectl.job_events").fetchone()[0] > 0,
            what="the first batch committed",
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["complete"] is False and 0 < doc["changed"] < len(ids)
    assert "Run the same command again to continue" in err
    assert f"--after {doc['resume_after']}" in err
    done = sql_conn.execute(
        "SELECT count(*) FROM leasectl.jobs WHERE status = 'Pending'"
    ).fetchone()[0]
    assert done == doc["changed"]  # every batch reported is committed, and no other
    assert (
        min(r[0] for r in sql_conn.execute("SELECT id FROM leasectl.jobs WHERE status = 'Pending'"))
        == doc["resume_after"]
    )
    # --after continues exactly below the last id done: take a few, with a small window.
    below = cli(
        "requeue", "-s", "failed", "--after", str(doc["resume_after"]), "--json", dsn=db_dsn
    )
    assert below.returncode == 0, below.stderr
    assert json.loads(below.stdout)["changed"] == len(ids) - doc["changed"]
    rest = cli("requeue", "-s", "failed", "--json", dsn=db_dsn)
    assert json.loads(rest.stdout)["matched"] == 0
    assert _statuses(sql_conn, ids) == {"Pending"}
    per_job = sql_conn.execute(
        "SELECT count(*), count(DISTINCT job_id) FROM leasectl.job_events"
    ).fetchone()
    assert per_job == (len(ids), len(ids))


def test_audit_reason_names_the_filter_literally() -> None:
    flt = parse_filter(states=["failed"], queue="pay\nments", error="[red]x")
    assert audit_reason(flt, None) == "by filter: --state Failed --queue pay\nments --error [red]x"
    assert audit_reason(JobFilter(), "why") == "why (by filter: --all)"


def test_a_stop_event_set_from_another_thread_ends_the_run_between_batches(
    store: Stores,
) -> None:
    with psycopg.connect(store.db.dsn, autocommit=True) as conn:
        _insert(conn, 20)
    stop = threading.Event()
    result = bulk.run(
        store.ops,
        bulk.action("requeue"),
        parse_filter(states=["failed"]),
        actor="t",
        reason=None,
        batch_size=3,
        stop=stop,
        progress=lambda p: stop.set() if p.batches == 2 else None,
    )
    assert (result.complete, result.batches, result.changed) == (False, 2, 6)
    assert result.resume_after is not None
    with psycopg.connect(store.db.dsn) as conn:
        left = conn.execute("SELECT count(*) FROM leasectl.jobs WHERE status = 'Failed'")
        assert left.fetchone() == (14,)


def test_cancel_and_delete_by_filter_act_on_exactly_their_states_audited(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    pending = _insert(sql_conn, 5, status="Pending", error=None)
    stuck = _insert(sql_conn, 2, status="Stuck")
    other_queue = _insert(sql_conn, 3, queue="emails", status="Pending", error=None)
    failed = _insert(sql_conn, 4)
    proc = cli(
        "cancel", "--queue", "payments", "--batch-size", "2", "--reason", "INC-9", "--json",
        dsn=db_dsn,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # Failed jobs are finished: the filter is narrowed to what cancel applies to.
    assert (doc["matched"], doc["changed"], doc["skipped"]) == (7, 7, [])
    assert _statuses(sql_conn, pending + stuck) == {"Cancelled"}
    assert _statuses(sql_conn, other_queue) == {"Pending"}
    assert _statuses(sql_conn, failed) == {"Failed"}
    cancels = [e for e in _events(sql_conn) if e[1] == "cancel"]
    assert sorted(e[0] for e in cancels) == sorted(pending + stuck)
    assert all(e[2].startswith("INC-9") and "by filter: --queue payments" in e[2] for e in cancels)

    proc = cli("delete", "--state", "cancelled,failed", "-q", "payments", "--json", dsn=db_dsn)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] == 11
    left = {r[0] for r in sql_conn.execute("SELECT id FROM leasectl.jobs")}
    assert left == set(other_queue)
    deletes = {e[0] for e in _events(sql_conn) if e[1] == "delete"}
    assert deletes == set(pending + stuck + failed)
    # The cancel events outlive the jobs they name.
    assert {e[0] for e in _events(sql_conn) if e[1] == "cancel"} == set(pending + stuck)
