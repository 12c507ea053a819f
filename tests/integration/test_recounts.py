"""A Pending count past its cap is the planner's estimate, but one estimated at RECOUNT_CAP or
fewer (a thin sample) is counted again, exactly: by `status`, the console's refresh and the
metrics scrape alike (migration 29's pending_recount; core/counts.py), so that they agree for
small queues. Bounded: at most RECOUNT_CAP entries a queue, RECOUNT_BUDGET in all."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg

from leasectl.core.counts import COUNT_BUDGET, RECOUNT_CAP, BoundedCount, recounted
from leasectl.db.metrics import MetricsReads
from tests.stores import Stores
from tests.util import vacuum_until_all_visible

SMALL = COUNT_BUDGET + 1_000  # past every cap, far below RECOUNT_CAP


def seed(sql_conn: psycopg.Connection[Any], queue: str, n: int, *, due: int) -> None:
    """``n`` Pending jobs of ``queue``, ``due`` of them due now, the rest in an hour."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, run_at) "
        "SELECT %s, now() + CASE WHEN i <= %s THEN - interval '1 minute' "
        "ELSE interval '1 hour' END FROM generate_series(1, %s) AS i",
        [queue, due, n],
    )


def test_the_console_the_exporter_and_status_count_a_small_queue_exactly(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    seed(sql_conn, "small", SMALL, due=SMALL - 500)
    seed(sql_conn, "tiny", 10, due=10)
    sql_conn.execute("ANALYZE leasectl.jobs")

    counts = store.panels.snapshot(None, 10).counts
    assert (counts.pending, counts.pending_capped, counts.pending_estimated) == (
        SMALL + 10,
        False,
        False,
    )
    assert (counts.due, counts.due_capped, counts.due_estimated) == (SMALL - 490, False, False)

    filtered = store.panels.snapshot("small", 10).counts
    assert (filtered.pending, filtered.pending_estimated, filtered.due) == (
        SMALL,
        False,
        SMALL - 500,
    )

    scraped = {p.queue: p.jobs for p in MetricsReads(store.db).read(timedelta(seconds=30)).pending}
    assert scraped == {"small": BoundedCount(SMALL, False), "tiny": BoundedCount(10, False)}

    status = {q.queue: q for q in store.ops.status().queues}
    assert (status["small"].pending, status["small"].pending_estimated) == (SMALL, False)


def test_without_statistics_a_capped_count_stays_a_lower_bound(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """No estimate (never analyzed): nothing to judge thin, so no recount either."""
    seed(sql_conn, "small", SMALL, due=SMALL)
    counts = store.panels.snapshot(None, 10).counts
    assert (counts.pending, counts.pending_capped, counts.pending_estimated) == (
        COUNT_BUDGET,
        True,
        False,
    )


def recount(
    conn: psycopg.Connection[Any], queues: list[str | None], estimates: list[int], budget: int
) -> dict[str | None, tuple[int, int | None]]:
    rows = conn.execute(
        "SELECT recount_queue, recounted, recounted_due FROM leasectl.pending_recount("
        "%s, %s, now(), %s, %s)",
        [queues, estimates, RECOUNT_CAP, budget],
    ).fetchall()
    return {q: (n, due) for q, n, due in rows}


def test_the_recount_takes_the_smallest_estimates_first_within_its_budget(
    sql_conn: psycopg.Connection[Any],
) -> None:
    seed(sql_conn, "a", 300, due=100)
    seed(sql_conn, "b", 200, due=200)
    seed(sql_conn, "c", 100, due=0)
    queues: list[str | None] = ["a", "b", "c", "big"]
    estimates = [310, 190, 120, RECOUNT_CAP + 1]
    # c (120) and b (190) fit in 400; a (310) would take it past; big is above RECOUNT_CAP.
    assert recount(sql_conn, queues, estimates, 400) == {"c": (100, 0), "b": (200, 200)}
    assert recount(sql_conn, queues, estimates, 10**9) == {
        "c": (100, 0),
        "b": (200, 200),
        "a": (300, 100),
    }
    assert recount(sql_conn, queues, estimates, 0) == {}
    # Every queue together (the console without a filter).
    assert recount(sql_conn, [None], [600], 10**9) == {None: (600, 300)}


def test_a_recount_past_its_cap_stops_there_and_keeps_the_estimate(
    sql_conn: psycopg.Connection[Any],
) -> None:
    seed(sql_conn, "a", 8, due=8)
    rows = sql_conn.execute(
        "SELECT recount_queue, recounted, recounted_due "
        "FROM leasectl.pending_recount(ARRAY['a'], ARRAY[5], now(), 5, 100)"
    ).fetchall()
    assert rows == [("a", 6, None)]  # (cap + 1: more than the cap; no due count walked)
    estimated = BoundedCount.read(4, 3, 5)  # 3 counted, more; estimated at 5
    assert recounted(estimated, 6, recount_cap=5) == BoundedCount(3, True, 6)
    assert recounted(estimated, 4, recount_cap=5) == BoundedCount(4, False)
    assert recounted(estimated, None, recount_cap=5) is estimated
    assert recounted(BoundedCount(2, False), 9) == BoundedCount(2, False)


BUFFERS = re.compile(r"Buffers: shared hit=(\d+)(?: read=(\d+))?")


def test_a_recount_walks_its_queue_not_the_table(sql_conn: psycopg.Connection[Any]) -> None:
    """Its statements read the claim index's range of the queue: the buffers a recount of
    3,000 jobs touches do not grow with 200,000 Pending jobs of another queue and 200,000
    finished ones."""
    seed(sql_conn, "small", 3_000, due=3_000)
    seed(sql_conn, "big", 200_000, due=200_000)
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, finished_at) "
        "SELECT 'small', 'Completed', now() FROM generate_series(1, 200000)"
    )
    vacuum_until_all_visible(sql_conn, "leasectl.jobs")
    pages = sql_conn.execute(
        "SELECT relpages FROM pg_class WHERE oid = 'leasectl.jobs'::regclass"
    ).fetchone()
    assert pages is not None and pages[0] > 2_000
    plan = "\n".join(
        line
        for (line,) in sql_conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM leasectl.pending_recount("
            "ARRAY['small'], ARRAY[3000::bigint], now(), 20000, 40000)"
        ).fetchall()
    )
    found = BUFFERS.search(plan)
    assert found, plan
    touched = int(found.group(1)) + int(found.group(2) or 0)
    # Two walks of ~3,000 index entries (a few dozen pages each) and the catalog's pages its
    # first call plans with: a tenth of the table's pages at most.
    assert touched * 10 < pages[0], (pages[0], plan)
