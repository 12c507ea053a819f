"""Flow control's one-statement claims (migration 33): while a limit has room, a claim of a
limited queue decides from its shard's row alone (the limit's terms and ``live_hint``, an upper
bound of the shard's live leases), counting the shard only when the hint is what stands in its
way; whatever that path declines, migration 24's counted path decides.

The hint is asserted as stored: it must never fall below the leases claimed under its shard
(a lease too many), and it is reset by a count and given back what a claim did not take.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from leasectl.core.limits import LimitSpec
from tests.integration.test_limits import claim_while_held, lapse
from tests.stores import Stores

Q = "pay"
TTL = timedelta(seconds=60)


def enqueue(store: Stores, n: int) -> list[int]:
    return store.ops.enqueue([{"n": i} for i in range(n)], queue=Q)


def limit(store: Stores, **spec: Any) -> None:
    store.ops.set_limit(Q, LimitSpec(**spec), actor="t", reason="test")


def shard_of_owner(conn: psycopg.Connection, owner: str, shards: int) -> int:
    """The shard a claim of ``owner`` tries first (claim_budget's pick)."""
    (i,) = conn.execute(
        "SELECT ((hashtext(%s) %% %s) + %s) %% %s", (owner, shards, shards, shards)
    ).fetchone()
    return int(i)


def hint(conn: psycopg.Connection, shard: int) -> int | None:
    (h,) = conn.execute(
        "SELECT live_hint FROM leasectl.queue_limit_shards WHERE queue = %s AND shard = %s",
        (Q, shard),
    ).fetchone()
    return h


def leases_by_shard(conn: psycopg.Connection) -> dict[int, int]:
    rows = conn.execute(
        "SELECT limit_shard, count(*) FROM leasectl.jobs WHERE queue = %s "
        "AND status = 'Processing' GROUP BY limit_shard",
        (Q,),
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def test_a_first_claim_counts_its_shard_and_later_ones_add_to_the_hint(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Cap 800 in 8 shards of 100. A claim that finds its shard's hint unknown counts the
    shard's live leases (not a lapsed one, not another shard's); the next adds its budget;
    completions do not lower the hint (it overstates until the next count)."""
    enqueue(store, 30)
    limit(store, concurrency=800)
    i, other = shard_of_owner(sql_conn, "w1", 8), shard_of_owner(sql_conn, "w2", 8)
    assert i != other
    [lapsed] = store.work.trip([], Q, "w1", TTL, 1).leases
    lapse(sql_conn, lapsed.job_id)
    assert len(store.work.trip([], Q, "w2", TTL, 3).leases) == 3
    # (Unknown again, as a limit laid out anew leaves it.)
    sql_conn.execute(
        "UPDATE leasectl.queue_limit_shards SET live_hint = NULL WHERE queue = %s AND shard = %s",
        (Q, i),
    )
    first = store.work.trip([], Q, "w1", TTL, 5, take_expired=False).leases
    assert len(first) == 5 and hint(sql_conn, i) == 5
    second = store.work.trip([], Q, "w1", TTL, 3, take_expired=False).leases
    assert len(second) == 3 and hint(sql_conn, i) == 8
    assert leases_by_shard(sql_conn) == {i: 9, other: 3}  # (the lapsed lease still Processing)
    third = store.work.trip(first + second, Q, "w1", TTL, 1, take_expired=False)
    assert not third.refused and len(third.leases) == 1
    assert hint(sql_conn, i) == 9 and leases_by_shard(sql_conn) == {i: 2, other: 3}


def test_a_hint_that_fills_the_share_is_counted_again(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Cap 16 in 8 shards of 2: two claims fill the hint; once their leases completed, the next
    claim counts the shard (its own completions free) and takes both slots under it again."""
    enqueue(store, 10)
    limit(store, concurrency=16)
    i = shard_of_owner(sql_conn, "w1", 8)
    held = store.work.trip([], Q, "w1", TTL, 1).leases + store.work.trip([], Q, "w1", TTL, 1).leases
    assert hint(sql_conn, i) == 2 and leases_by_shard(sql_conn) == {i: 2}
    again = store.work.trip(held, Q, "w1", TTL, 2)
    assert not again.refused and len(again.leases) == 2
    assert hint(sql_conn, i) == 2 and leases_by_shard(sql_conn) == {i: 2}


def test_no_shard_holds_more_leases_than_its_share(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Cap 16 in 8 shards of 2, claims of one owner one at a time: its shard takes two, then
    the counted path places the rest in the next shards, never a third under a full one."""
    enqueue(store, 10)
    limit(store, concurrency=16)
    i = shard_of_owner(sql_conn, "w1", 8)
    for _ in range(4):
        assert len(store.work.trip([], Q, "w1", TTL, 1).leases) == 1
    placed = leases_by_shard(sql_conn)
    assert placed[i] == 2 and sum(placed.values()) == 4
    assert max(placed.values()) == 2, placed


def test_what_the_counted_path_takes_counts_in_the_hint(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Cap 16 in 8 shards of 2: after one lease under the owner's shard (hint 1), a claim of 3
    is too big for the shard and goes the counted way (1 there, 2 in the next); the shard's hint
    then holds 2, so the next claim places its lease elsewhere."""
    enqueue(store, 10)
    limit(store, concurrency=16)
    i = shard_of_owner(sql_conn, "w1", 8)
    assert len(store.work.trip([], Q, "w1", TTL, 1).leases) == 1
    assert hint(sql_conn, i) == 1
    assert len(store.work.trip([], Q, "w1", TTL, 3).leases) == 3
    assert hint(sql_conn, i) == 2
    assert len(store.work.trip([], Q, "w1", TTL, 1).leases) == 1
    placed = leases_by_shard(sql_conn)
    assert placed[i] == 2 and max(placed.values()) == 2, placed


def test_leases_a_claim_did_not_take_leave_the_hint(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A claim of 5 on a queue with 2 due jobs: its budget of 5 went into the hint, the 3 it did
    not take went back (claim_settle)."""
    enqueue(store, 2)
    limit(store, concurrency=800)
    i = shard_of_owner(sql_conn, "w1", 8)
    assert len(store.work.trip([], Q, "w1", TTL, 5).leases) == 2
    assert hint(sql_conn, i) == 2
    assert store.work.trip([], Q, "w1", TTL, 5).leases == []
    assert hint(sql_conn, i) == 2


def test_a_claim_by_the_hint_spends_its_shards_bucket(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A rate of 1000/s, burst 1000: 8 full buckets of 125. A claim of 10 spends 10 of its
    shard's and no other (the full bucket refills nothing)."""
    enqueue(store, 20)
    limit(store, rate=1000.0, burst=1000)
    i = shard_of_owner(sql_conn, "w1", 8)
    assert len(store.work.trip([], Q, "w1", TTL, 10).leases) == 10
    rows = sql_conn.execute(
        "SELECT shard, tokens FROM leasectl.queue_limit_shards WHERE queue = %s ORDER BY shard",
        (Q,),
    ).fetchall()
    assert {shard: tokens for shard, tokens in rows} == {
        s: (115.0 if s == i else 125.0) for s in range(8)
    }


def test_a_limit_laid_out_anew_writes_each_shards_terms_and_forgets_the_hints(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Each shard's part of the limit is its share of the cap and the bucket (summing to the
    limit); a shard the limit does not use never decides alone; a new limit makes every hint
    unknown (the next claim counts)."""
    enqueue(store, 5)
    limit(store, concurrency=10, rate=1000.0, burst=20)  # 8 shards
    assert len(store.work.trip([], Q, "w1", TTL, 1).leases) == 1
    assert hint(sql_conn, shard_of_owner(sql_conn, "w1", 8)) == 1
    rows = sql_conn.execute(
        "SELECT share, fill, room, fast_from = '-infinity', live_hint "
        "FROM leasectl.queue_limit_shards WHERE queue = %s ORDER BY shard",
        (Q,),
    ).fetchall()
    assert sum(r[0] for r in rows) == 10 and sorted(r[0] for r in rows) == [1] * 6 + [2] * 2
    assert abs(sum(r[1] for r in rows) - 1000.0) < 1e-6
    assert abs(sum(r[2] for r in rows) - 20.0) < 1e-9
    assert all(r[3] for r in rows)
    limit(store, concurrency=10, rate=200.0)  # 2 shards
    rows = sql_conn.execute(
        "SELECT shard, share, fast_from = 'infinity', live_hint "
        "FROM leasectl.queue_limit_shards WHERE queue = %s ORDER BY shard",
        (Q,),
    ).fetchall()
    assert [(r[1], r[2]) for r in rows] == [(5, False), (5, False)] + [(None, True)] * 6
    assert all(r[3] is None for r in rows)


def test_a_shard_the_limit_does_not_use_decides_nothing_alone(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A claim that read 8 shards where the limit now has 2 (the limit changed after its
    statement began) and picked shard 5: that shard's row, even with a hint and a share that
    fit, takes nothing; the counted path places the lease under an active shard."""
    enqueue(store, 5)
    limit(store, concurrency=2)  # 2 shards of 1
    owner = next(f"w{n}" for n in range(100) if shard_of_owner(sql_conn, f"w{n}", 8) == 5)
    sql_conn.execute(
        "UPDATE leasectl.queue_limit_shards SET live_hint = 0, share = 5 "
        "WHERE queue = %s AND shard = 5",
        (Q,),
    )
    budget, shards = sql_conn.execute(
        "SELECT budget, shards FROM leasectl.claim_budget(%s, 1, '{}', %s, 8)", (Q, owner)
    ).fetchone()
    assert budget == 1 and shards[0] in (0, 1)


def test_during_a_ramp_claims_take_the_ramps_limit(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A ramp of a cap of 800 starts at a cap of 1: until it ends a claim is decided by the
    counted path, which applies the ramp (the shards' terms are the limit once it is over), and
    no shard is counted for the one-statement path."""
    enqueue(store, 10)
    limit(store, concurrency=800)
    ramped = store.ops.ramp(Q, timedelta(minutes=5), actor="t", reason="back")
    assert ramped is not None and ramped.limit.cap_now == 1
    assert len(store.work.trip([], Q, "w1", TTL, 5).leases) == 1
    (future,) = sql_conn.execute(
        "SELECT bool_and(fast_from > now()) FROM leasectl.queue_limit_shards WHERE queue = %s",
        (Q,),
    ).fetchone()
    assert future
    assert hint(sql_conn, shard_of_owner(sql_conn, "w1", 8)) is None


def test_during_a_ramp_a_rate_takes_the_ramps_bucket(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A ramp of a rate of 1000/s (burst 1000) starts at a bucket of one token: even with every
    shard's bucket refilled for an hour, a claim takes one job, not the 125 a shard holds once
    the ramp is over."""
    enqueue(store, 10)
    limit(store, rate=1000.0, burst=1000)
    assert store.ops.ramp(Q, timedelta(minutes=5), actor="t", reason="back") is not None
    sql_conn.execute(
        "UPDATE leasectl.queue_limit_shards SET tokens_at = now() - interval '1 hour' "
        "WHERE queue = %s",
        (Q,),
    )
    assert len(store.work.trip([], Q, "w1", TTL, 5).leases) == 1


def test_the_counted_path_skips_the_shards_other_claims_hold(
    store: Stores, sql_conn: psycopg.Connection, db_dsn: str
) -> None:
    """Cap 16 in 8 shards of 2, six of them held by other claims: a claim of 3 is more than one
    shard holds, so the counted path decides; it takes the two free shards' slots at once,
    without waiting for a held one."""
    enqueue(store, 5)
    limit(store, concurrency=16)
    done_while_held, got = claim_while_held(store, db_dsn, "shard NOT IN (5, 6)", 3)
    assert done_while_held
    assert len(got.leases) == 3
    assert leases_by_shard(sql_conn) == {5: 1, 6: 2} or leases_by_shard(sql_conn) == {5: 2, 6: 1}


def test_a_claim_whose_shards_other_claims_hold_takes_the_next_by_its_hint(
    store: Stores, sql_conn: psycopg.Connection, db_dsn: str
) -> None:
    """The first shard from the owner's that no other claim holds, round to shard 0 when every
    shard from the owner's to the last is held, decided by that shard's hint alone. Cap 16 in 8
    shards of 2: two leases fill shard 0; its hint, written low here by hand to tell the paths
    apart, lets a third in (a count would have placed it in shard 1)."""
    enqueue(store, 5)
    limit(store, concurrency=16)
    i = shard_of_owner(sql_conn, "w1", 8)
    assert i > 0  # (shard 0 comes round after the owner's)
    done_while_held, got = claim_while_held(store, db_dsn, "shard <> 0", 2)
    assert done_while_held and len(got.leases) == 2
    assert leases_by_shard(sql_conn) == {0: 2} and hint(sql_conn, 0) == 2
    sql_conn.execute(
        "UPDATE leasectl.queue_limit_shards SET live_hint = 0 WHERE queue = %s AND shard = 0",
        (Q,),
    )
    done_while_held, got = claim_while_held(store, db_dsn, f"shard >= {i}", 1)
    assert done_while_held and len(got.leases) == 1
    assert leases_by_shard(sql_conn) == {0: 3} and hint(sql_conn, 0) == 1


def test_a_claim_by_the_hint_refills_the_bucket_to_at_most_its_burst(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A rate of 0.5/s, burst 3, an hour without a claim (1,800 tokens' worth): a claim of one
    job decided by the hint refills its shard's bucket to 3 and spends 1 from there."""
    enqueue(store, 5)
    limit(store, rate=0.5, burst=3)
    sql_conn.execute(
        "UPDATE leasectl.queue_limit_shards SET tokens = 0, tokens_at = now() - interval '1 hour'"
        " WHERE queue = %s",
        (Q,),
    )
    (shards,) = sql_conn.execute(
        "SELECT shards FROM leasectl.queue_limits WHERE queue = %s", (Q,)
    ).fetchone()
    i = shard_of_owner(sql_conn, "w1", shards)
    assert len(store.work.trip([], Q, "w1", TTL, 1).leases) == 1
    (tokens,) = sql_conn.execute(
        "SELECT tokens FROM leasectl.queue_limit_shards WHERE queue = %s AND shard = %s", (Q, i)
    ).fetchone()
    assert tokens == 2.0
