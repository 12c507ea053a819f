"""`leasectl list`: every filter alone and combined against a model of the rows, literal error
text, JSON containment, the time column, keyset paging (no row twice, none skipped, while jobs
are inserted), the timeout, and the command's text and JSON output."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import ClientCursor, sql
from psycopg.types.json import Jsonb

from leasectl.core.errors import QueryTimeout
from leasectl.core.filters import FINISHED, JobFilter, parse_filter
from leasectl.core.models import JobStatus
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.history import History, list_params
from tests.integration.test_cli import assert_one_line_error, cli
from tests.util import wait_until

SCHEMA = "leasectl"
LONG_AGO = timedelta(days=3)


@dataclass(frozen=True)
class Row:
    id: int
    queue: str
    status: JobStatus
    owner: str | None
    error: str | None
    payload: Any
    created_ago: timedelta
    finished_ago: timedelta | None


# (queue, status, owner, error, payload, created ago, finished ago)
SPECS: list[tuple[str, JobStatus, str | None, str | None, Any, timedelta, timedelta | None]] = []
for n in range(72):
    # The first 60 in the five older statuses; then 12 Cancelled, created and finished off the
    # windows' edges (2, 9, 16 ... minutes ago, finished a minute later).
    status = list(JobStatus)[n % 5] if n < 60 else JobStatus.CANCELLED
    finished = status in FINISHED
    created = timedelta(minutes=7 * n if n < 60 else 7 * (n - 60) + 2)
    SPECS.append(
        (
            ("payments", "emails", "100%_off")[n % 3],
            status,
            None if status is JobStatus.PENDING and n % 2 else f"host-{n % 4}:1:w",
            (
                None,
                "timeout after 30s",
                "HTTP 503: 100% of retries used",
                "disk_full on /var",
                "Disk Full",
                "a\\b",
            )[n % 6],
            {"tenant": n % 3, "tags": ["a", "b"][: n % 3], "nested": {"k": n % 2}},
            created,
            (None if not finished else created - timedelta(minutes=3 * (n % 2) if n < 60 else 1)),
        )
    )


def _seed(conn: psycopg.Connection[Any]) -> list[Row]:
    rows = []
    for queue, status, owner, error, payload, created, finished in SPECS:
        lease = "now() + interval '1 minute'" if status is JobStatus.PROCESSING else "NULL"
        row = conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, lease_owner, lease_until, last_error, "
            "payload, created_at, finished_at) "
            f"VALUES (%s, %s, %s, {lease}, %s, %s, now() - %s::interval, now() - %s::interval) "
            "RETURNING id",
            [queue, status.value, owner, error, Jsonb(payload), created, finished],
        ).fetchone()
        assert row is not None
        rows.append(Row(row[0], queue, status, owner, error, payload, created, finished))
    return rows


def _contains(doc: Any, part: Any) -> bool:
    """jsonb @> for the shapes used here: objects by key, arrays by element."""
    if isinstance(part, dict):
        return isinstance(doc, dict) and all(
            k in doc and _contains(doc[k], v) for k, v in part.items()
        )
    if isinstance(part, list):
        return isinstance(doc, list) and all(any(_contains(d, p) for d in doc) for p in part)
    return bool(doc == part)


def model(rows: list[Row], flt: JobFilter) -> list[int]:
    """The ids ``flt`` should list, newest first, by the rules the command documents."""
    out = []
    for r in rows:
        if flt.states and r.status not in flt.states:
            continue
        if flt.queue is not None and r.queue != flt.queue:
            continue
        if flt.owner is not None and r.owner != flt.owner:
            continue
        if flt.error is not None and (r.error is None or flt.error.lower() not in r.error.lower()):
            continue
        if flt.payload is not None and not _contains(r.payload, json.loads(flt.payload)):
            continue
        ago = r.finished_ago if flt.finished_only else r.created_ago
        if flt.since is not None and (ago is None or ago > flt.since):
            continue
        if flt.until is not None and (ago is None or ago <= flt.until):
            continue
        out.append(r.id)
    return sorted(out, reverse=True)


@pytest.fixture
def history(db_dsn: str) -> Iterator[tuple[History, list[Row], str]]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        rows = _seed(conn)
    with Database.connect(db_dsn, SCHEMA) as db:
        yield History(db), rows, db_dsn


def listed(history: History, flt: JobFilter, limit: int = 1000) -> list[int]:
    page = history.list_jobs(flt, limit=limit, after=None, timeout=timedelta(seconds=10))
    return [j.id for j in page.jobs]


# Each filter alone, with values that match some rows and not others (the time bounds fall
# between rows: created every 7 minutes, finished 0 or 3 minutes after).
PARTS: dict[str, list[dict[str, Any]]] = {
    "states": [
        {"states": ["pending"]},
        {"states": ["PROCESSING", "stuck"]},
        {"states": ["Completed"]},
        {"states": ["failed,completed"]},
        {"states": ["cancelled"]},
        {"states": ["failed", "Cancelled"]},
    ],
    "queue": [{"queue": "emails"}, {"queue": "100%_off"}, {"queue": "100%"}],
    "owner": [{"owner": "host-1:1:w"}, {"owner": "host-1"}],
    "error": [
        {"error": "disk full"},
        {"error": "DISK"},
        {"error": "100%"},
        {"error": "%"},
        {"error": "_"},
        {"error": "k_f"},
        {"error": "\\"},
        {"error": "a\\b"},
    ],
    "payload": [
        {"payload": '{"tenant": 1}'},
        {"payload": '{"tags": ["b"]}'},
        {"payload": '{"nested": {"k": 0}, "tenant": 2}'},
        {"payload": '{"tags": ["b", "a"]}'},
        {"payload": '{"tenant": "1"}'},
    ],
    "time": [
        {"since": "60m"},
        {"until": "200m"},
        {"since": "300m", "until": "100m"},
    ],
}


# Exact matches only: a queue or an owner is no pattern or prefix, "1" is not 1.
NEAR_MISSES = [{"queue": "100%"}, {"owner": "host-1"}, {"payload": '{"tenant": "1"}'}]


@pytest.mark.parametrize(
    "options", [o for group in PARTS.values() for o in group], ids=lambda o: repr(o)
)
def test_each_filter_alone_lists_what_the_model_says(
    history: tuple[History, list[Row], str], options: dict[str, Any]
) -> None:
    reads, rows, _ = history
    flt = parse_filter(**options)
    expected = model(rows, flt)
    if not expected:  # only values that look like others but are not equal
        assert options in NEAR_MISSES, f"{options} matches no row: the case proves nothing"
    assert len(expected) < len(rows), f"{options} matches every row: the case proves nothing"
    assert listed(reads, flt) == expected


def test_filters_combined_list_what_the_model_says(
    history: tuple[History, list[Row], str],
) -> None:
    reads, rows, _ = history
    groups = list(PARTS.values())
    nonempty = 0
    for a, b in itertools.combinations(range(len(groups)), 2):
        for left, right in itertools.product(groups[a], groups[b]):
            options = {**left, **right}
            flt = parse_filter(**options)
            expected = model(rows, flt)
            nonempty += bool(expected)
            assert listed(reads, flt) == expected, options
    finished = {"states": ["completed", "failed"], "since": "300m", "until": "30m"}
    flt = parse_filter(**finished, queue="payments", payload='{"nested": {"k": 1}}')
    assert listed(reads, flt) == model(rows, flt) != []
    assert nonempty > 100


def test_since_and_until_time_the_finish_of_finished_states_else_the_creation(
    db_dsn: str,
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        old_done = conn.execute(
            "INSERT INTO leasectl.jobs (status, created_at, finished_at) "
            "VALUES ('Completed', now() - interval '3 days', now() - interval '5 minutes') "
            "RETURNING id"
        ).fetchone()
        new_pending = conn.execute(
            "INSERT INTO leasectl.jobs (status) VALUES ('Pending') RETURNING id"
        ).fetchone()
        old_failed = conn.execute(  # finished before the hour: no --since 1h lists it
            "INSERT INTO leasectl.jobs (status, created_at, finished_at) "
            "VALUES ('Failed', now() - interval '3 hours', now() - interval '2 hours') "
            "RETURNING id"
        ).fetchone()
    assert old_done and new_pending and old_failed
    with Database.connect(db_dsn, SCHEMA) as db:
        reads = History(db)
        assert listed(reads, parse_filter(since="1h")) == [new_pending[0]]
        assert listed(reads, parse_filter(states=["completed"], since="1h")) == [old_done[0]]
        finished = ["completed", "failed"]
        assert listed(reads, parse_filter(states=finished, since="1h")) == [old_done[0]]
        assert listed(reads, parse_filter(states=finished, until="1h")) == [old_failed[0]]
        assert listed(reads, parse_filter(until="1h")) == [old_failed[0], old_done[0]]
        assert listed(reads, parse_filter(states=["completed", "pending"], since="1h")) == [
            new_pending[0]
        ]


def test_paging_lists_every_row_once_while_jobs_are_inserted(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status) SELECT 'q', "
            "(ARRAY['Pending','Completed','Failed'])[1 + i % 3]::leasectl.job_status "
            "FROM generate_series(1, 230) AS i"
        )
        before = [r[0] for r in conn.execute("SELECT id FROM leasectl.jobs ORDER BY id DESC")]
    stop = threading.Event()
    inserted: list[int] = []

    def insert() -> None:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            while not stop.is_set() and len(inserted) < 5000:
                row = conn.execute(
                    "INSERT INTO leasectl.jobs (queue) VALUES ('q') RETURNING id"
                ).fetchone()
                assert row is not None
                inserted.append(row[0])

    with Database.connect(db_dsn, SCHEMA) as db:
        reads = History(db)
        flt = parse_filter(queue="q")
        first = reads.list_jobs(flt, limit=50, after=None, timeout=timedelta(seconds=10))
        start = first.jobs[0].id
        seen = [j.id for j in first.jobs]
        pages = 1
        writer = threading.Thread(target=insert)
        writer.start()
        try:
            # Page on only once the writer inserts (its connection takes a moment): else the
            # four pages could all be read before its first row.
            wait_until(lambda: len(inserted) > 0, what="the writer's first insert")
            after = first.next_after
            while after is not None:
                page = reads.list_jobs(flt, limit=50, after=after, timeout=timedelta(seconds=10))
                assert len(page.jobs) <= 50
                seen += [j.id for j in page.jobs]
                pages += 1
                assert pages <= 5, "paging does not end"
                after = page.next_after
                if after is not None:
                    assert after == page.jobs[-1].id
        finally:
            stop.set()
            writer.join()
    assert inserted, "no job was inserted while paging"
    assert len(seen) == len(set(seen)), "a row was listed twice"
    assert seen == [i for i in before if i <= start], "a row was skipped or out of order"
    assert pages == 5  # 230 rows: 4 full pages and one of 30; the last says there is no more


def test_a_page_that_ends_exactly_at_the_last_row_says_there_is_no_more(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO leasectl.jobs (queue) SELECT 'q' FROM generate_series(1, 4)")
    with Database.connect(db_dsn, SCHEMA) as db:
        reads = History(db)
        page = reads.list_jobs(JobFilter(), limit=2, after=None, timeout=timedelta(seconds=5))
        assert page.next_after == page.jobs[-1].id
        last = reads.list_jobs(JobFilter(), limit=2, after=page.next_after, timeout=timedelta(5))
        assert len(last.jobs) == 2 and last.next_after is None
        empty = reads.list_jobs(JobFilter(), limit=2, after=last.jobs[-1].id, timeout=timedelta(5))
        assert empty.jobs == () and empty.next_after is None


@pytest.fixture
def locked_jobs(db_dsn: str) -> Iterator[None]:
    """The jobs table locked by another session: any read of it waits, so a timeout is sure."""
    with psycopg.connect(db_dsn) as conn:
        conn.execute("LOCK TABLE leasectl.jobs IN ACCESS EXCLUSIVE MODE")
        yield
        conn.rollback()


def test_a_listing_that_runs_out_of_time_says_so(db_dsn: str, locked_jobs: None) -> None:
    with Database.connect(db_dsn, SCHEMA, check_schema=False) as db:
        reads = History(db)
        started = datetime.now()
        with pytest.raises(QueryTimeout, match="the filter had to scan"):
            reads.list_jobs(JobFilter(), limit=5, after=None, timeout=timedelta(milliseconds=300))
        assert datetime.now() - started < timedelta(seconds=5)
    proc = cli("list", "--timeout", "300ms", "--owner", "w", dsn=db_dsn, timeout=60)
    assert_one_line_error(
        proc,
        1,
        "no answer within 0.3s: the filter had to scan; narrow it with "
        "--since/--queue/--state, or raise --timeout",
    )


def test_list_prints_a_page_and_how_to_get_the_next(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, status, last_error, lease_owner, finished_at) "
            "SELECT 'q', 'Failed', 'boom ' || i, 'w-' || i, now() FROM generate_series(1, 3) i"
        )
        ids = [r[0] for r in conn.execute("SELECT id FROM leasectl.jobs ORDER BY id DESC")]
    first = cli("list", "--limit", "2", "-s", "FAILED", "-q", "q", dsn=db_dsn)
    assert first.returncode == 0, first.stderr
    assert "--state Failed --queue q" in first.stdout
    assert f"next page: --after {ids[1]}" in first.stdout
    assert "boom 3" in first.stdout and "w-2" in first.stdout and "boom 1" not in first.stdout
    second = cli("list", "--limit", "2", "--after", str(ids[1]), "--json", dsn=db_dsn)
    assert second.returncode == 0, second.stderr
    document = json.loads(second.stdout)
    assert set(document) == {"jobs", "next_after", "db_now"}
    assert document["next_after"] is None
    [job] = document["jobs"]
    assert (job["id"], job["status"], job["last_error"], job["lease_owner"]) == (
        ids[2],
        "Failed",
        "boom 1",
        "w-1",
    )
    assert job["payload_text"] == "{}" and job["payload_chars"] == 2
    datetime.fromisoformat(job["finished_at"])  # ISO 8601 with offset
    assert datetime.fromisoformat(job["created_at"]).utcoffset() is not None
    none = cli("list", "-s", "stuck", dsn=db_dsn)
    assert none.returncode == 0 and "no jobs match" in none.stdout


def test_long_errors_and_payloads_are_cut_in_a_listing(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (last_error, payload) VALUES (%s, %s)",
            ["e" * 4000, Jsonb({"x": "p" * 5000})],  # (4000: migration 15's bound)
        )
    proc = cli("list", "--json", dsn=db_dsn)
    [job] = json.loads(proc.stdout)["jobs"]
    assert job["last_error"] == "e" * 1000 and job["last_error_chars"] == 4000
    assert len(job["payload_text"]) == 1000 and job["payload_chars"] == 5000 + len('{"x": ""}')


# -- plans: a filter an index serves reads that index, never the whole table --------------------


def _plan(conn: psycopg.Connection[Any], flt: JobFilter, after: int | None = None) -> str:
    """The plan of the listing with its values as literals: the custom plan the command gets
    (it never prepares the statement)."""
    query = sql.SQL("EXPLAIN (COSTS OFF) ") + queries.get("jobs_list").render(SCHEMA)
    rows = ClientCursor(conn).execute(query, list_params(flt, limit=50, after=after)).fetchall()
    return "\n".join(line for (line,) in rows)


def test_filters_an_index_serves_never_scan_the_history(sql_conn: psycopg.Connection[Any]) -> None:
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, lease_owner, last_error, created_at, "
        "finished_at) SELECT (ARRAY['a','b','c'])[1 + i % 3], "
        "(CASE WHEN i % 50 = 0 THEN 'Failed' ELSE 'Completed' END)::leasectl.job_status, "
        "'w-' || (i % 20), CASE WHEN i % 50 = 0 THEN 'boom' END, "
        "now() - interval '30 days' * (200000 - i) / 200000, "
        "now() - interval '30 days' * (200000 - i) / 200000 "
        "FROM generate_series(1, 200000) AS i"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, lease_owner, lease_until) "
        "SELECT 'a', s::leasectl.job_status, 'w-1', now() + interval '1 minute' "
        "FROM unnest(ARRAY['Pending','Processing','Stuck']) AS s, generate_series(1, 300)"
    )
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, lease_owner, finished_at) "
        "SELECT 'b', 'Cancelled', 'w-2', now() - interval '1 day' * i / 40 "
        "FROM generate_series(1, 40) AS i"
    )
    sql_conn.execute("VACUUM ANALYZE leasectl.jobs")
    served = {
        "Cancelled, newest first": (parse_filter(states=["cancelled"]), "jobs_cancelled_idx"),
        "Cancelled in a queue": (
            parse_filter(states=["cancelled"], queue="b"),
            "jobs_cancelled_idx",
        ),
        "Cancelled in the last hour": (
            parse_filter(states=["cancelled"], since="1h"),
            "jobs_",
        ),
        "finished in the last hour": (
            parse_filter(states=["failed"], queue="a", since="1h"),
            "jobs_finished_idx",
        ),
        "finished between two days and one ago, by owner": (
            parse_filter(states=["completed", "failed"], since="2d", until="1d", owner="w-3"),
            "jobs_finished_idx",
        ),
        "finished a month ago, in a window of a day": (
            parse_filter(states=["completed", "failed"], since="30d", until="29d"),
            "jobs_finished_idx",
        ),
        "Stuck in a queue": (parse_filter(states=["stuck"], queue="a"), "jobs_stuck_idx"),
        "Processing of an owner": (
            parse_filter(states=["processing"], owner="w-1"),
            "jobs_processing_idx",
        ),
        "Pending in a queue": (parse_filter(states=["pending"], queue="a"), "jobs_"),
        "a page": (JobFilter(), "jobs_pkey"),
    }
    for what, (flt, index) in served.items():
        plan = _plan(sql_conn, flt)
        assert "Seq Scan" not in plan, f"{what}:\n{plan}"
        assert f"using {index}" in plan or f"Index Scan on {index}" in plan, f"{what}:\n{plan}"
    plan = _plan(sql_conn, parse_filter(owner="w-3"), after=100_000)
    assert "Index Scan Backward using jobs_pkey" in plan and "Index Cond: (id < " in plan, plan
