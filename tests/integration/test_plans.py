"""The worker's statements are planned once per connection (queries.WORKER_SETTINGS): the
plan made without the parameter values, and possibly while the tables were still empty, must
be the index plan, whatever the tables hold later.

A cached plan with a sequential or bitmap scan of ``jobs`` or ``job_attempts`` would make
every claim cost in proportion to the table (a drain that started on freshly analyzed empty
tables ran at half speed that way); these tests look at the plan PostgreSQL really uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from bench.plans import explain_nested, generic_plan
from leasectl.core.models import ClaimKey
from leasectl.db import sql as queries
from leasectl.db.work import claim_from
from tests.conftest import SCHEMA

pytestmark = pytest.mark.full

TTL = timedelta(seconds=30)
Params = Callable[[psycopg.Connection[Any]], dict[str, Any]]


def seed(conn: psycopg.Connection[Any]) -> None:
    """Finished history much larger than the live set, as in production; Pending work."""
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, finished_at) "
        "SELECT 'q', 'Completed', 1, 'old', now() FROM generate_series(1, 40000)"
    )
    conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, outcome) "
        "SELECT id, 1, 'old', 'completed' FROM leasectl.jobs"
    )
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, priority, run_at) "
        "SELECT (ARRAY['q', 'other'])[1 + i % 2], i % 3, now() - interval '1 ms' * i "
        "FROM generate_series(1, 60000) AS i"
    )


def seed_leases(conn: psycopg.Connection[Any]) -> None:
    """600 held leases of 20 owners, 50 of them lapsed, each with its open attempt."""
    conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'q', 'Processing', 1, 'w-' || (i % 20), "
        "now() + CASE WHEN i <= 50 THEN interval '-1 minute' ELSE interval '1 minute' END "
        "FROM generate_series(1, 600) AS i"
    )
    conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner) "
        "SELECT id, 1, lease_owner FROM leasectl.jobs WHERE status = 'Processing'"
    )


def analyze(conn: psycopg.Connection[Any]) -> None:
    conn.execute("VACUUM ANALYZE leasectl.jobs")
    conn.execute("VACUUM ANALYZE leasectl.job_attempts")


@pytest.fixture(params=["planned with history", "planned on empty tables", "planned idle"])
def plan_of(
    request: pytest.FixtureRequest, sql_conn: psycopg.Connection[Any]
) -> Callable[[str, Params], str]:
    """query name, parameters -> the plan a worker's session uses for it on a table with
    history, Pending work and held leases. The session made that plan (and keeps it) at one of
    three moments: with all of that there and analyzed; on the empty tables of a new install
    (just analyzed), before any row arrived; or while no lease was held yet (analyzed)."""
    mode = request.param

    def plan(name: str, params: Params) -> str:
        query = queries.get(name).render(SCHEMA)
        with generic_plan(sql_conn, query) as explain:
            if mode == "planned on empty tables":
                analyze(sql_conn)
                explain(params(sql_conn))  # the plan is made here and kept
                seed(sql_conn)
                seed_leases(sql_conn)
            elif mode == "planned idle":
                seed(sql_conn)
                analyze(sql_conn)
                explain(params(sql_conn))
                seed_leases(sql_conn)
            else:
                seed(sql_conn)
                seed_leases(sql_conn)
                analyze(sql_conn)
            return explain(params(sql_conn))

    return plan


def beat(conn: psycopg.Connection[Any], owner: str) -> dict[str, Any]:
    """jobs_heartbeat's parameters for ``owner``'s leases, each carrying its handler's progress
    (the larger statement: with none, the arrays are NULL)."""
    leases = held(conn, owner)
    n = len(leases["ids"])
    return {**leases, "owner": owner, "ttl": TTL, "progress": [0.5] * n, "messages": ["x"] * n}


def held(conn: psycopg.Connection[Any], owner: str) -> dict[str, list[int]]:
    rows = conn.execute(
        "SELECT id, attempts FROM leasectl.jobs WHERE status = 'Processing' AND lease_owner = %s",
        (owner,),
    ).fetchall()
    return {"ids": [r[0] for r in rows], "attempts": [r[1] for r in rows]}


def claim_params(
    conn: psycopg.Connection[Any], limit: int, *, key: ClaimKey | None = None, complete: bool = True
) -> dict[str, Any]:
    """jobs_complete_and_claim's parameters for worker w-1 on queue q: its held leases completed
    (or none), then up to ``limit`` jobs claimed from ``key`` (None: the queue's head)."""
    done = held(conn, "w-1") if complete else {"ids": [], "attempts": []}
    return {
        "done_ids": done["ids"],
        "done_attempts": done["attempts"],
        "owner": "w-1",
        "queue": "q",
        "ttl": TTL,
        "limit": limit,
        **claim_from(key),
    }


def has_rows(n: int, plan: str) -> bool:
    """An executed node of ``plan`` returned ``n`` rows (PostgreSQL 18 prints "rows=30.00")."""
    return re.search(rf"actual [^)]*rows={n}(\.0+)? ", plan) is not None


def scans_of_big_tables(plan: str) -> list[str]:
    """Scans whose cost grows with the table: sequential scans, bitmap scans of any index but
    the one of Processing rows (bounded by the fleet's concurrency), and index scans that read
    a whole index (no index condition: a plan that meant the table to be empty)."""
    lines = plan.splitlines()
    found = []
    for i, line in enumerate(lines):
        if "never executed" in line:
            continue
        if "Seq Scan on jobs" in line or "Seq Scan on job_attempts" in line:
            found.append(line.strip())
        elif "Bitmap Index Scan" in line and "jobs_processing_idx" not in line:
            found.append(line.strip())
        elif re.search(r"Index (Only )?Scan using \w+ on (jobs|job_attempts)\b", line) and (
            "jobs_processing_idx" not in line and "Index Cond:" not in node_details(lines, i)
        ):
            found.append(line.strip())
    return found


def node_details(lines: list[str], at: int) -> str:
    """The detail lines (Index Cond, Filter, ...) of the plan node on line ``at``."""
    details = []
    for line in lines[at + 1 :]:
        if "->" in line or not line.startswith(" "):
            break
        details.append(line.strip())
    return "\n".join(details)


@pytest.mark.parametrize("limit", [1, 25, 500])
def test_complete_and_claim_walks_the_claim_index(
    plan_of: Callable[[str, Params], str], limit: int
) -> None:
    plan = plan_of("jobs_complete_and_claim", lambda conn: claim_params(conn, limit))
    assert scans_of_big_tables(plan) == [], plan
    assert "Index Scan using jobs_claimable_idx on jobs" in plan, plan
    assert "Index Scan using jobs_pkey on jobs j " in plan, plan  # the completions, by id
    assert "Index Scan using job_attempts_pkey on job_attempts" in plan, plan
    assert has_rows(limit, plan.split("CTE picked")[1].split("CTE changed")[0]), plan
    # One update of jobs: the 30 completions and the claims.
    assert has_rows(30 + limit, plan.split("CTE changed")[1].split("CTE closed")[0]), plan
    assert has_rows(30, plan.split("CTE closed")[1].split("CTE opened")[0]), plan


def test_a_resumed_claim_starts_its_walk_of_the_claim_index_at_its_key(
    plan_of: Callable[[str, Params], str],
) -> None:
    """A draining worker's claim starts at a claim key (Worker._dispatch_loop): the key is the
    index scan's start (an index condition), not a filter over the entries before it."""

    def params(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        row = conn.execute(
            "SELECT priority, run_at, id FROM leasectl.jobs WHERE status = 'Pending' "
            "AND queue = 'q' ORDER BY priority, run_at, id OFFSET 20000 LIMIT 1"
        ).fetchone()
        # (No Pending job yet for the plan made on empty tables: from the head.)
        key = (row[0], row[1], row[2]) if row is not None else None
        return claim_params(conn, 5, key=key, complete=False)

    plan = plan_of("jobs_complete_and_claim", params)
    assert scans_of_big_tables(plan) == [], plan
    lines = plan.splitlines()
    [at] = [i for i, line in enumerate(lines) if "Index Scan using jobs_claimable_idx" in line]
    condition = next(x for x in node_details(lines, at).splitlines() if "Index Cond:" in x)
    assert "ROW(priority, run_at, id) >= ROW(" in condition, plan
    assert has_rows(5, plan.split("CTE picked")[1].split("CTE changed")[0]), plan


def test_takeover_of_lapsed_leases_closes_attempts_by_primary_key(
    plan_of: Callable[[str, Params], str],
) -> None:
    plan = plan_of(
        "jobs_claim_expired",
        lambda conn: {"owner": "w-x", "queue": "q", "ttl": TTL, "limit": 10},
    )
    assert scans_of_big_tables(plan) == [], plan
    assert "jobs_processing_idx" in plan, plan
    assert "Index Scan using job_attempts_pkey on job_attempts" in plan, plan
    assert has_rows(10, plan.split("CTE claimed")[1].split("CTE closed")[0]), plan


def test_heartbeat_finds_leases_by_primary_key(plan_of: Callable[[str, Params], str]) -> None:
    plan = plan_of("jobs_heartbeat", lambda conn: beat(conn, "w-2"))
    assert scans_of_big_tables(plan) == [], plan
    assert "Index Scan using jobs_pkey on jobs" in plan, plan
    assert has_rows(30, plan), plan


@pytest.mark.parametrize(
    "name", ["jobs_complete_and_claim", "jobs_claim_expired", "jobs_heartbeat", "jobs_release"]
)
def test_key_lookups_are_estimated_at_one_row_each(
    sql_conn: psycopg.Connection[Any], name: str
) -> None:
    """The planner's estimate of each primary key probe is one row, whatever the table's size.
    (Written as a range, `id BETWEEN f.id AND f.id`, a probe was estimated at 0.5% of the
    table: a plan that costs in proportion to the table, and JIT compilation on every call
    once that crossed jit_above_cost, at about a million rows.)"""
    seed(sql_conn)
    seed_leases(sql_conn)
    analyze(sql_conn)
    params: dict[str, dict[str, Any]] = {
        "jobs_complete_and_claim": claim_params(sql_conn, 25),
        "jobs_claim_expired": {"owner": "w-x", "queue": "q", "ttl": TTL, "limit": 10},
        "jobs_heartbeat": beat(sql_conn, "w-2"),
        "jobs_release": {**held(sql_conn, "w-3"), "owner": "w-3"},
    }
    with generic_plan(sql_conn, queries.get(name).render(SCHEMA)) as explain:
        plan = explain(params[name], analyze=False)
    probes = [line for line in plan.splitlines() if re.search(r"Index Scan using \w+_pkey", line)]
    assert probes, plan
    for line in probes:
        assert re.search(r" rows=1 ", line), plan


def test_release_closes_attempts_by_primary_key(plan_of: Callable[[str, Params], str]) -> None:
    plan = plan_of("jobs_release", lambda conn: {**held(conn, "w-3"), "owner": "w-3"})
    assert scans_of_big_tables(plan) == [], plan
    assert has_rows(30, plan.split("CTE closed")[1]), plan


def one_lease(conn: psycopg.Connection[Any], *, lapsed: bool) -> int:
    """A held lease's job id (lapsed or live); 0 before any was seeded."""
    row = conn.execute(
        "SELECT id FROM leasectl.jobs WHERE status = 'Processing' AND (lease_until < now()) = %s "
        "ORDER BY id LIMIT 1",
        (lapsed,),
    ).fetchone()
    return int(row[0]) if row else 0


def test_failure_closes_its_attempt_by_primary_key(plan_of: Callable[[str, Params], str]) -> None:
    def params(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        job_id = one_lease(conn, lapsed=False)
        owner = conn.execute("SELECT lease_owner FROM leasectl.jobs WHERE id = %s", (job_id,))
        row = owner.fetchone()
        return {
            "id": job_id,
            "attempt": 1,
            "owner": row[0] if row else "nobody",
            "error": "boom",
            "detail": "Traceback (most recent call last):\n  ...\nRuntimeError: boom",
            "kind": "RuntimeError",
            "retry": True,
            "delay": timedelta(seconds=1),
        }

    plan = plan_of("job_fail", params)
    assert scans_of_big_tables(plan) == [], plan
    assert has_rows(1, plan.split("CTE closed")[1]), plan


def test_snooze_closes_its_attempt_by_primary_key(plan_of: Callable[[str, Params], str]) -> None:
    def params(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        job_id = one_lease(conn, lapsed=False)
        owner = conn.execute("SELECT lease_owner FROM leasectl.jobs WHERE id = %s", (job_id,))
        row = owner.fetchone()
        return {
            "id": job_id,
            "attempt": 1,
            "owner": row[0] if row else "nobody",
            "delay": timedelta(seconds=30),
            "max_snoozes": 100,
        }

    plan = plan_of("job_snooze", params)
    assert scans_of_big_tables(plan) == [], plan
    assert "Index Scan using jobs_pkey on jobs" in plan, plan
    assert has_rows(1, plan.split("CTE closed")[1]), plan


def test_claim_by_id_closes_the_lapsed_attempt_by_primary_key(
    plan_of: Callable[[str, Params], str],
) -> None:
    plan = plan_of(
        "job_claim_by_id",
        lambda conn: {"id": one_lease(conn, lapsed=True), "owner": "w-x", "ttl": TTL},
    )
    assert scans_of_big_tables(plan) == [], plan
    assert has_rows(1, plan.split("CTE closed")[1].split("CTE opened")[0]), plan


@pytest.mark.parametrize("owner", [None, "dead-3"], ids=["every-owner", "one-owner"])
@pytest.mark.parametrize("expired", [50, 5000])
def test_watcher_batch_finds_leases_by_the_processing_index_and_updates_by_key(
    sql_conn: psycopg.Connection[Any], expired: int, owner: str | None
) -> None:
    """A watcher batch as the store runs it: the plan of the statement inside the function of
    migration 9 (6's, with an owner), under the function's planner settings, as it ran
    (auto_explain). Left to the planner, a small table with a backlog of expired leases got a
    sequential scan (the pass's last batch then read the whole table) or a join that read every
    expired lease for each batch of 500. With an owner (`requeue-stuck --owner`) the batch walks
    the same index, the Processing set, and filters on the owner."""
    sql_conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, lease_until) "
        "SELECT 'stuck', 'Processing', 1, 'dead-' || (i %% 20), now() - interval '1 minute' "
        "FROM generate_series(1, %s) AS i",
        (expired,),
    )
    sql_conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner) "
        "SELECT id, 1, lease_owner FROM leasectl.jobs"
    )
    sql_conn.execute("INSERT INTO leasectl.jobs (queue) SELECT 'q' FROM generate_series(1, 20000)")
    analyze(sql_conn)
    query = queries.get("jobs_requeue_expired").render(SCHEMA)
    params = {
        "queue": None,
        "limit": 500,
        "mark": False,
        "actor": "test",
        "reason": "plan",
        "detail": False,
        "owner": owner,
    }
    (text, plan), (_, outer) = explain_nested(sql_conn, query, params)
    assert "Function Scan on jobs_requeue_expired" in outer, outer
    assert text.startswith("WITH expired AS ("), text
    assert scans_of_big_tables(plan) == [], plan
    assert "Bitmap" not in plan and "Hash Join" not in plan, plan
    assert "Index Scan using jobs_processing_idx on jobs " in plan, plan
    assert "Index Scan using jobs_pkey on jobs j " in plan, plan  # the update, by key
    of_owner = expired if owner is None else sum(1 for i in range(1, expired + 1) if i % 20 == 3)
    assert has_rows(min(of_owner, 500), plan.split("CTE moved")[1].split("CTE closed")[0]), plan


@pytest.mark.parametrize("name", ["jobs_complete_and_claim", "jobs_claim_expired"])
def test_the_pause_check_is_one_probe_per_claim_not_one_per_row(
    plan_of: Callable[[str, Params], str], name: str
) -> None:
    """Whether the queue is paused is looked up once per statement (a one-time filter over the
    walk, from queue_state's primary key), so the claim's walk is the one it was without it."""

    def params(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        if name == "jobs_complete_and_claim":
            return claim_params(conn, 25)
        return {"owner": "w-x", "queue": "q", "ttl": TTL, "limit": 10}

    plan = plan_of(name, params)
    picked = plan.split("CTE picked")[1].split("CTE c")[0]
    assert "One-Time Filter: (NOT " in picked, plan
    [probe] = [line for line in picked.splitlines() if " on queue_state s " in line]
    assert "loops=1)" in probe and "Seq Scan" not in probe, plan
    assert scans_of_big_tables(plan) == [], plan
    walk = "jobs_claimable_idx" if name == "jobs_complete_and_claim" else "jobs_processing_idx"
    assert walk in picked, plan


def limit_q(conn: psycopg.Connection[Any], cap: int = 100_000) -> None:
    """Queue q limited (migrations 17, 24: its 8 shards) by a cap and a rate that do not bind."""
    if conn.execute("SELECT FROM leasectl.queue_limits WHERE queue = 'q'").fetchone() is None:
        conn.execute(
            "SELECT leasectl.queue_limit_set('q', %s, 1000000, 1000000, 'test', 'plan', "
            "'leasectl_test')",
            (cap,),
        )


@pytest.mark.parametrize("name", ["jobs_complete_and_claim", "jobs_claim_expired"])
def test_a_limited_queues_claim_asks_its_budget_once_and_walks_its_index(
    plan_of: Callable[[str, Params], str], name: str
) -> None:
    """The budget is the walk's LIMIT: claim_budget runs once per statement (an InitPlan, before
    the walk), claim_settle once after it, and the walk is the one it was without limits."""

    def params(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        limit_q(conn)
        if name == "jobs_complete_and_claim":
            return claim_params(conn, 25)
        return {"owner": "w-x", "queue": "q", "ttl": TTL, "limit": 10}

    plan = plan_of(name, params)
    assert scans_of_big_tables(plan) == [], plan
    [budget] = [line for line in plan.splitlines() if "Function Scan on claim_budget" in line]
    assert re.search(r"rows=1(\.0+)? loops=1\)", budget), plan
    # (claim_settle is settled's target: called once per row of budget it keeps, at most one;
    # none here: the claim took all it asked for, its tokens spent by claim_budget.)
    settled = plan.split("CTE settled")[1].split("\n  ->")[0].split("\n  InitPlan")[0]
    [scan] = [line for line in settled.splitlines() if "CTE Scan on budget" in line]
    assert re.search(r"rows=1(\.0+)? loops=1\)", scan), plan
    nested = settled.splitlines()[1]
    assert re.search(r"^\s*->  Nested Loop .*rows=0(\.0+)? loops=1\)", nested), plan
    picked = plan.split("CTE picked")[1].split("CTE c")[0]
    walk = "jobs_claimable_idx" if name == "jobs_complete_and_claim" else "jobs_processing_idx"
    assert walk in picked, plan
    assert has_rows(25 if name == "jobs_complete_and_claim" else 10, picked), plan


def test_a_claim_with_room_decides_from_one_shard_row_found_by_its_keys(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """Migration 33, as it ran: a limit far from binding (cap 100,000, 8 shards), the shard's
    hint unknown. The first UPDATE walks the primary key from the owner's shard (no sort) and
    finds its version by ctid, and declines (no hint); the SELECT locks that shard by primary
    key; the count finds it by primary key and reads the Processing index only; the first
    UPDATE then takes the budget. The counted path (migration 24's five statements) never
    runs."""
    seed(sql_conn)
    seed_leases(sql_conn)
    analyze(sql_conn)
    limit_q(sql_conn)
    query = queries.get("jobs_complete_and_claim").render(SCHEMA)
    plans = explain_nested(sql_conn, query, claim_params(sql_conn, 1, complete=False))
    updates = [p for t, p in plans if t.lstrip().startswith("UPDATE queue_limit_shards")]
    assert len(updates) == 3, plans  # the hint, the count, the hint again
    for plan in updates:
        assert "queue_limit_shards_pkey" in plan, plan
        assert scans_of_big_tables(plan) == [], plan
    for hint in (updates[0], updates[2]):
        assert "Tid Scan on queue_limit_shards s" in hint, hint
        assert "Sort" not in hint, hint
    assert "jobs_processing_idx" in updates[1], updates[1]
    [lock] = [p for t, p in plans if t.lstrip().startswith("SELECT q.shard")]
    assert "queue_limit_shards_pkey" in lock, lock
    # Once a claim has counted the shard (committed), the next one's budget is one statement.
    sql_conn.execute(query, claim_params(sql_conn, 1, complete=False))
    plans = explain_nested(sql_conn, query, claim_params(sql_conn, 1, complete=False))
    [(text, hint), _] = plans
    assert text.lstrip().startswith("UPDATE queue_limit_shards"), plans
    assert "Tid Scan on queue_limit_shards s" in hint, hint
    assert has_rows(1, hint), hint
    assert not any(t.lstrip().startswith("SELECT count(*)") for t, _ in plans), plans
    *_, (_, outer) = plans
    assert has_rows(1, outer.split("CTE picked")[1].split("CTE changed")[0]), outer


def test_claim_budget_counts_live_leases_through_the_processing_index(
    sql_conn: psycopg.Connection[Any],
) -> None:
    """Inside claim_budget, as it ran: each shard of the queue's limit locked by primary key and
    its live leases counted from the Processing index (bounded by the fleet), never from
    history; the walk took only the budget the cap left (cap 560 in 8 shards of 70: 550 live
    leases, 27 of them w-1's, which this statement completes: 37 free in all)."""
    seed(sql_conn)
    seed_leases(sql_conn)
    analyze(sql_conn)
    limit_q(sql_conn, cap=560)
    query = queries.get("jobs_complete_and_claim").render(SCHEMA)
    plans = explain_nested(sql_conn, query, claim_params(sql_conn, 100))
    counts = [p for t, p in plans if t.lstrip().startswith("SELECT count(*)")]
    assert counts, plans
    for count in counts:  # (one per shard the claim took slots from)
        assert "jobs_processing_idx" in count, count
        assert scans_of_big_tables(count) == [], count
    [lock, *_] = [p for t, p in plans if "FOR UPDATE SKIP LOCKED" in t]
    assert "queue_limit_shards_pkey" in lock, lock
    *_, (_, outer) = plans
    assert has_rows(37, outer.split("CTE picked")[1].split("CTE changed")[0]), outer
