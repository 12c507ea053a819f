"""A failed attempt carries its kind and its job's queue (migration 29), and `errors` groups the
attempts stored with them exactly as the ones stored without them (failed before the
migration, or under an older worker), and as ``group_failures`` groups the raw rows: the
database only counts equal kinds and first lines together, Python's normalisation stays the one
definition of a kind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasectl.core import errorgroups
from leasectl.core.errorgroups import FailedAttempt
from leasectl.core.models import JobStatus
from leasectl.db.incident import Incident
from tests.hostile import NAMES as HOSTILE
from tests.stores import Stores

TTL = timedelta(seconds=30)


def fail(store: Stores, queue: str, error: str, *, traced: bool) -> int:
    (job_id,) = store.ops.enqueue([{}], queue=queue)
    (lease,) = store.work.claim(queue, "w-1", TTL, limit=1)
    detail = f"Traceback (most recent call last):\n{error}" if traced else None
    status = store.work.fail(lease, error, retry_delay=timedelta(0), retry=False, detail=detail)
    assert status is JobStatus.FAILED
    return job_id


def as_before(sql_conn: psycopg.Connection[Any], job_ids: list[int]) -> None:
    """The attempts of ``job_ids`` as an attempt that failed before migration 29 is stored."""
    sql_conn.execute(
        "UPDATE leasectl.job_attempts SET error_kind = NULL, queue = NULL WHERE job_id = ANY(%s)",
        [job_ids],
    )


def raw_groups(sql_conn: psycopg.Connection[Any]) -> tuple[errorgroups.ErrorGroup, ...]:
    """The groups of every failed attempt, from its whole row and its job, in Python alone."""
    rows = sql_conn.execute(
        "SELECT a.job_id, j.queue, a.ended_at, a.error, a.error_detail IS NOT NULL "
        "FROM leasectl.job_attempts AS a JOIN leasectl.jobs AS j ON j.id = a.job_id "
        "WHERE a.outcome = 'failed'"
    ).fetchall()
    return errorgroups.group_failures(
        FailedAttempt(job_id, queue, ended_at, errorgroups.head(error), traced)
        for job_id, queue, ended_at, error, traced in rows
    )


def test_a_failure_stores_its_kind_and_its_jobs_queue(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    traced = fail(store, "payments", "PSPError: 503 for invoice 7\nmore", traced=True)
    plain = fail(store, "mail", "  503 for invoice 0x1f2e3d4c5b\n", traced=False)
    rows = dict(
        sql_conn.execute(
            "SELECT job_id, (queue, error_kind) FROM leasectl.job_attempts ORDER BY job_id"
        ).fetchall()
    )
    assert rows[traced] == ("payments", "PSPError")
    assert rows[plain] == ("mail", "<n> for invoice <hex>")


def test_a_completion_stores_no_kind(store: Stores, sql_conn: psycopg.Connection[Any]) -> None:
    """A completed attempt has no error kind; its queue is the claim's (migration 31)."""
    store.ops.enqueue([{}], queue="q")
    (lease,) = store.work.claim("q", "w-1", TTL, limit=1)
    assert store.work.complete([lease]) == {lease.job_id}
    assert sql_conn.execute("SELECT queue, error_kind FROM leasectl.job_attempts").fetchall() == [
        ("q", None)
    ]


def test_attempts_stored_before_and_after_group_together(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    before = [fail(store, "payments", f"PSPError: 503 for {i}", traced=True) for i in range(3)]
    after = [fail(store, "refunds", f"PSPError: timeout {i}", traced=True) for i in range(2)]
    plain = [fail(store, "payments", f"503 for invoice {i}", traced=False) for i in range(4)]
    as_before(sql_conn, before + plain[:2])
    report = Incident(store.db).errors(since=timedelta(hours=1))
    assert [(g.error, g.count, g.queues) for g in report.groups] == [
        ("PSPError", 5, ("payments", "refunds")),
        ("<n> for invoice <n>", 4, ("payments",)),
    ]
    assert report.groups == raw_groups(sql_conn)
    psp = next(g for g in report.groups if g.error == "PSPError")
    assert psp.example_job == after[-1]
    assert report.scanned == 9 and not report.truncated
    only = Incident(store.db).errors(since=timedelta(hours=1), queue="refunds")
    assert [(g.error, g.count) for g in only.groups] == [("PSPError", 2)]


_errors = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.sampled_from("ab0x9F-: \n\t.\u0663\u00e9_"), max_size=60),
    st.builds(
        lambda cls, n, tail: f"{cls}: {n} failed{tail}",
        st.sampled_from(["PSPError", "a.b.C", "9bad", ""]),
        st.integers(min_value=0, max_value=10**12),
        st.sampled_from(["", "\nTraceback", " " * 300]),
    ),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    failures=st.lists(
        st.tuples(_errors, st.booleans(), st.booleans(), st.sampled_from(["q1", "q2"])),
        min_size=1,
        max_size=12,
    )
)
def test_sql_and_python_group_identically(
    store: Stores, sql_conn: psycopg.Connection[Any], failures: list[tuple[str, bool, bool, str]]
) -> None:
    """Any errors, traced or not, stored with a kind or without one: `errors`' groups are the
    ones ``group_failures`` makes of the whole rows."""
    sql_conn.execute("DELETE FROM leasectl.jobs")
    old = [
        fail(store, queue, error, traced=traced)
        for error, traced, stored_before, queue in failures
        if stored_before
    ]
    for error, traced, stored_before, queue in failures:
        if not stored_before:
            fail(store, queue, error, traced=traced)
    as_before(sql_conn, old)
    report = Incident(store.db).errors(since=timedelta(hours=1))
    assert report.groups == raw_groups(sql_conn)
    assert sum(g.count for g in report.groups) == len(failures)
    for queue in ("q1", "q2"):
        only = Incident(store.db).errors(since=timedelta(hours=1), queue=queue)
        assert sum(g.count for g in only.groups) == sum(f[3] == queue for f in failures)
