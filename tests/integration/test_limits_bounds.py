"""The bounds of the limits' shard rows (migration 34): checked when a row is made, as migration
24's CHECK checked it, and read by no claim (a CHECK is read by every statement that writes a
row: about a fifth of claim_budget's time, at each claim of a limited queue)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.limits import LimitSpec
from tests.stores import Stores

Q = "sb"
TTL = timedelta(seconds=60)


def shard_rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT shard, tokens, live_hint FROM leasectl.queue_limit_shards WHERE queue = %s "
        "ORDER BY shard",
        (Q,),
    ).fetchall()


@pytest.mark.parametrize(
    ("shard", "tokens"),
    [(8, 0.0), (-1, 0.0), (0, -0.5), (0, 1_000_000.5), (0, float("nan")), (0, float("inf"))],
)
def test_a_shard_row_out_of_its_bounds_is_refused_when_made(
    store: Stores, sql_conn: psycopg.Connection[Any], shard: int, tokens: float
) -> None:
    """By the table's owner (no other role may write it), as a plain INSERT and as the
    reshard's INSERT ... ON CONFLICT DO UPDATE over an existing row: check_violation naming
    queue_limit_shards_bounded, and nothing changed."""
    store.ops.set_limit(Q, LimitSpec(concurrency=10), actor="t", reason="test")
    before = shard_rows(sql_conn)
    for conflict in ("", " ON CONFLICT (queue, shard) DO UPDATE SET tokens = excluded.tokens"):
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            sql_conn.execute(
                "INSERT INTO leasectl.queue_limit_shards (queue, shard, tokens) "
                "VALUES (%s, %s, %s)" + conflict,
                (Q, shard, tokens),
            )
        assert refused.value.diag.constraint_name == "queue_limit_shards_bounded"
        assert shard_rows(sql_conn) == before


def test_a_shard_row_within_its_bounds_is_made(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    store.ops.set_limit(Q, LimitSpec(concurrency=10), actor="t", reason="test")
    sql_conn.execute("DELETE FROM leasectl.queue_limit_shards WHERE queue = %s AND shard = 7", (Q,))
    sql_conn.execute(
        "INSERT INTO leasectl.queue_limit_shards (queue, shard, tokens) VALUES (%s, 7, 1000000)",
        (Q,),
    )
    assert shard_rows(sql_conn)[-1][:2] == (7, 1_000_000.0)


def test_no_claim_reads_a_check_or_a_row_trigger_of_the_shards(
    store: Stores, sql_conn: psycopg.Connection[Any]
) -> None:
    """The shards have no CHECK constraint and no trigger on UPDATE (a BEFORE UPDATE row trigger
    has PostgreSQL lock each updated row again), and a limited queue's claims still take and
    spend under them."""
    (checks,) = sql_conn.execute(
        "SELECT count(*) FROM pg_constraint "
        "WHERE conrelid = 'leasectl.queue_limit_shards'::regclass AND contype = 'c'"
    ).fetchone()
    assert checks == 0
    triggers = sql_conn.execute(
        "SELECT tgname, tgtype FROM pg_trigger "
        "WHERE tgrelid = 'leasectl.queue_limit_shards'::regclass AND NOT tgisinternal"
    ).fetchall()
    # tgtype: ROW (1) | BEFORE (2) | INSERT (4); no UPDATE (16) or DELETE (8).
    assert triggers == [("queue_limit_shards_bounded", 1 | 2 | 4)]
    store.ops.set_limit(Q, LimitSpec(concurrency=10, rate=100.0), actor="t", reason="test")
    store.ops.enqueue([{}, {}, {}], queue=Q)
    tokens_before = sum(r[1] for r in shard_rows(sql_conn))
    leases = store.work.claim(Q, "w", TTL, limit=3)
    assert len(leases) == 3
    assert sum(r[1] for r in shard_rows(sql_conn)) < tokens_before
