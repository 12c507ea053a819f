"""Flow control (migrations 17, 24): a queue's concurrency cap, rate and ramp, enforced by the claim
statements themselves; set, cleared and ramped through audited functions.

The fast tests here claim by hand (WorkerStore) on a real PostgreSQL; the long and concurrent
ones are in test_limits_load.py (full tier).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from leasectl.core.errors import UsageError
from leasectl.core.limits import LimitSpec
from leasectl.db.work import WorkerStore
from tests.stores import Stores
from tests.util import wait_for_lock_wait, wait_until

Q = "pay"
TTL = timedelta(seconds=60)


def enqueue(store: Stores, n: int, queue: str = Q) -> list[int]:
    return store.ops.enqueue([{"n": i} for i in range(n)], queue=queue)


def limit(store: Stores, **spec: Any) -> None:
    store.ops.set_limit(Q, LimitSpec(**spec), actor="t", reason="test")


def lapse(conn: psycopg.Connection, *job_ids: int) -> None:
    """The leases of ``job_ids`` lapsed a second ago (as a SIGSTOPped worker's do)."""
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = ANY(%s)",
        (list(job_ids),),
    )


def test_cap_cuts_a_claim_and_frees_with_completions(store: Stores) -> None:
    enqueue(store, 10)
    limit(store, concurrency=3)
    first = store.work.trip([], Q, "w1", TTL, 5)
    assert len(first.leases) == 3
    assert first.throttle_wait == 0  # the cap cut it: no time known
    assert store.work.trip([], Q, "w2", TTL, 5).leases == []
    # Completing two in the same statement frees their slots for that statement's claim.
    again = store.work.trip(first.leases[:2], Q, "w1", TTL, 5)
    assert not again.refused
    assert len(again.leases) == 2
    (row,) = store.ops.limits([Q])
    assert row.live == 3 and row.cap_now == 3 and row.at_cap
    assert row.throttled == 3  # the three claims cut short


def test_completions_in_the_claim_statement_free_their_slots(store: Stores) -> None:
    """A worker that has not seen the queue's limits yet (or an older one) completes and claims
    in one statement: the leases that statement completes count as free."""
    enqueue(store, 10)
    limit(store, concurrency=3)
    first = store.work.trip([], Q, "w1", TTL, 5)
    assert len(first.leases) == 3
    unaware = WorkerStore(store.db)
    again = unaware.trip(first.leases[:2], Q, "w1", TTL, 5)
    assert not again.refused and len(again.leases) == 2


def shards_of(sql_conn: psycopg.Connection, ids: list[int]) -> list[int]:
    rows = sql_conn.execute(
        "SELECT limit_shard FROM leasectl.jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    return [r[0] for r in rows]


def claim_while_held(store: Stores, db_dsn: str, held: str, wanted: int) -> tuple[bool, Any]:
    """w1's trip for ``wanted`` jobs of Q while another transaction holds the shards of Q that
    ``held`` (a condition on queue_limit_shards) selects: whether the trip was done before the
    holder let go (a claim that queued for a held shard would still be waiting), and the trip."""
    claimed: list[Any] = []
    with psycopg.connect(db_dsn) as holder:
        holder.execute(
            f"SELECT * FROM leasectl.queue_limit_shards WHERE queue = %s AND {held} FOR UPDATE",
            (Q,),
        )
        claimer = threading.Thread(
            target=lambda: claimed.append(store.work.trip([], Q, "w1", TTL, wanted))
        )
        claimer.start()
        claimer.join(10)
        done_while_held = not claimer.is_alive()
        holder.rollback()
        claimer.join(10)
    [got] = claimed
    return done_while_held, got


def test_a_claim_skips_the_shards_other_claims_hold(
    store: Stores, sql_conn: psycopg.Connection, db_dsn: str
) -> None:
    """Migration 24: a limited queue's claims do not take turns on one row. With seven of its
    eight shards held by other claims, a claim takes the free one at once, without waiting."""
    enqueue(store, 4)
    limit(store, concurrency=800)  # 8 shards of 100
    done_while_held, got = claim_while_held(store, db_dsn, "shard <> 5", 3)
    assert done_while_held
    assert len(got.leases) == 3 and got.throttle_wait is None
    assert shards_of(sql_conn, [lease.job_id for lease in got.leases]) == [5, 5, 5]


def test_a_claim_waits_for_a_shard_only_when_every_shard_is_held(
    store: Stores, sql_conn: psycopg.Connection, db_dsn: str
) -> None:
    enqueue(store, 4)
    limit(store, concurrency=800)
    with psycopg.connect(db_dsn) as holder:
        holder.execute("SELECT * FROM leasectl.queue_limit_shards FOR UPDATE")
        claimed: list[Any] = []
        claimer = threading.Thread(
            target=lambda: claimed.append(store.work.trip([], Q, "w1", TTL, 2))
        )
        claimer.start()
        wait_for_lock_wait(sql_conn, what="the claim waiting for a shard")
        holder.rollback()
        claimer.join(10)
    [got] = claimed
    assert len(got.leases) == 2


def test_a_claim_takes_its_budget_from_several_shards(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A cap of 10 over 8 shards (2, 2, 1, 1, 1, 1, 1, 1): one claim uses all of it."""
    enqueue(store, 12)
    limit(store, concurrency=10)
    got = store.work.trip([], Q, "w1", TTL, 12)
    assert len(got.leases) == 10 and got.throttle_wait == 0
    shards = shards_of(sql_conn, [lease.job_id for lease in got.leases])
    assert sorted(shards.count(i) for i in range(8)) == [1, 1, 1, 1, 1, 1, 2, 2]


def test_each_shard_counts_only_its_own_leases(store: Stores) -> None:
    """A cap of 4 over 4 shards of 1: two claims of 2 from one owner take all four slots."""
    enqueue(store, 6)
    limit(store, concurrency=4)
    assert len(store.work.trip([], Q, "w1", TTL, 2).leases) == 2
    assert len(store.work.trip([], Q, "w1", TTL, 2).leases) == 2
    assert store.work.trip([], Q, "w1", TTL, 2).leases == []


def test_leases_claimed_before_the_limit_count(store: Stores, sql_conn: psycopg.Connection) -> None:
    """Leases claimed while the queue had no limit (no shard) count in the shard their id
    names, every one of them in one shard."""
    enqueue(store, 10)
    held = store.work.trip([], Q, "w1", TTL, 6).leases
    assert shards_of(sql_conn, [lease.job_id for lease in held]) == [None] * 6
    limit(store, concurrency=6)
    assert store.work.trip([], Q, "w2", TTL, 4).leases == []
    (row,) = store.ops.limits([Q])
    assert row.live == 6


def test_a_limit_changed_to_fewer_shards_counts_every_lease(store: Stores) -> None:
    """Leases claimed under shards a new limit no longer has are counted by the ones it has: 16
    leases, 2 in each of 8 shards; then a rate of 200/s makes it 2 shards of 8 (each counts the
    leases of 4 old ones)."""
    enqueue(store, 20)
    limit(store, concurrency=16)
    assert len(store.work.trip([], Q, "w1", TTL, 16).leases) == 16
    limit(store, concurrency=16, rate=200.0)
    assert store.work.trip([], Q, "w2", TTL, 4).leases == []
    limit(store, concurrency=17, rate=200.0)
    assert len(store.work.trip([], Q, "w2", TTL, 4).leases) == 1


def test_the_bucket_is_shared_in_whole_tokens(store: Stores) -> None:
    """A rate of 1000/s, burst 20: 8 shards of 3, 3, 3, 3, 2, 2, 2, 2 tokens, each refilling in
    proportion (150/s, 100/s); one claim spends the whole bucket, then waits for one shard's
    next token (at most 10 ms)."""
    enqueue(store, 30)
    limit(store, rate=1000.0, burst=20)
    got = store.work.trip([], Q, "w1", TTL, 30)
    assert 20 <= len(got.leases) < 24  # (what refilled while the claim went round: a few)
    assert got.throttle_wait is not None and 0 < got.throttle_wait <= 0.01


def test_tokens_a_claim_did_not_use_go_back(store: Stores, sql_conn: psycopg.Connection) -> None:
    """A claim spends its budget's tokens before it walks; those of the jobs it did not find
    go back to their shards (stored: full shards stay full, the one spent from lost 3)."""
    enqueue(store, 3)
    limit(store, rate=1000.0, burst=1000)  # 8 shards of 125
    got = store.work.trip([], Q, "w1", TTL, 10)
    assert len(got.leases) == 3 and got.throttle_wait is None
    (tokens,) = sql_conn.execute(
        "SELECT sum(tokens) FROM leasectl.queue_limit_shards WHERE queue = %s", (Q,)
    ).fetchone()
    assert tokens == 997


def test_an_unlimited_queue_is_not_cut(store: Stores) -> None:
    enqueue(store, 10)
    result = store.work.trip([], Q, "w1", TTL, 10)
    assert len(result.leases) == 10 and result.throttle_wait is None


def test_lapsed_lease_frees_its_slot_and_a_live_one_does_not(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    enqueue(store, 4)
    limit(store, concurrency=2)
    held = store.work.trip([], Q, "w1", TTL, 2).leases
    assert len(held) == 2
    assert store.work.trip([], Q, "w2", TTL, 2).leases == []
    # One lease lapses (as a SIGKILLed worker's does): its slot is free, the other's is not.
    lapse(sql_conn, held[0].job_id)
    got = store.work.trip([], Q, "w2", TTL, 2, take_expired=False).leases
    assert len(got) == 1


def test_a_lapsed_lease_of_a_capped_queue_is_not_renewed(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Cap 1: w1's lease lapses, so a claim counts its slot free and w2 takes it; w1 then comes
    back (a worker stopped past its lease) and heartbeats: renewing would make two live leases
    under a cap of one, so nothing is renewed. A lapsed lease nobody took over is still
    renewed where no cap is in force: a queue without limits, a queue with a rate only, while
    another queue is capped."""
    enqueue(store, 3)
    for queue in ("free", "paced"):
        enqueue(store, 1, queue=queue)
    limit(store, concurrency=1)
    store.ops.set_limit("paced", LimitSpec(rate=1000.0), actor="t", reason="test")
    [a] = store.work.trip([], Q, "w1", TTL, 1).leases
    [free] = store.work.trip([], "free", "w1", TTL, 1).leases
    [paced] = store.work.trip([], "paced", "w1", TTL, 1).leases
    lapse(sql_conn, a.job_id, free.job_id, paced.job_id)
    [b] = store.work.trip([], Q, "w2", TTL, 1, take_expired=False).leases
    assert store.work.heartbeat([a], TTL) == {}
    assert set(store.work.heartbeat([free, paced], TTL)) == {free.job_id, paced.job_id}
    # (A live lease of the capped queue is renewed as ever.)
    assert set(store.work.heartbeat([b], TTL)) == {b.job_id}
    (row,) = store.ops.limits([Q])
    assert row.live == 1


def test_a_lease_marked_stuck_frees_its_slot(store: Stores) -> None:
    """Only Processing jobs hold a slot: one an operator quarantined (its lease_until kept)
    does not."""
    enqueue(store, 3)
    limit(store, concurrency=1)
    [held] = store.work.trip([], Q, "w1", TTL, 3).leases
    result = store.ops.operator_mark_stuck(
        store.ops.seen_now([held.job_id]), actor="t", reason="quarantine", force=True
    )
    assert result.changed == (held.job_id,)
    assert len(store.work.trip([], Q, "w2", TTL, 3).leases) == 1


def test_claim_expired_is_capped_too(store: Stores, sql_conn: psycopg.Connection) -> None:
    enqueue(store, 3)
    held = store.work.trip([], Q, "w1", TTL, 3).leases
    limit(store, concurrency=2)
    lapse(sql_conn, *(h.job_id for h in held))
    # Three lapsed leases, none live: the takeover may take two, each under its shard.
    got = store.work.trip([], Q, "w2", TTL, 3)
    assert len(got.leases) == 2
    assert got.throttle_wait == 0
    assert sorted(shards_of(sql_conn, [lease.job_id for lease in got.leases])) == [0, 1]


def test_rate_spends_tokens_and_says_when_the_next_is_due(store: Stores) -> None:
    enqueue(store, 20)
    limit(store, rate=0.5, burst=3)  # a full bucket of 3, then one every 2 s
    first = store.work.trip([], Q, "w1", TTL, 10)
    assert len(first.leases) == 3
    assert first.throttle_wait is not None and 1.5 < first.throttle_wait <= 2.0
    second = store.work.trip([], Q, "w1", TTL, 10)
    assert second.leases == []
    assert second.throttle_wait is not None and 0 < second.throttle_wait <= 2.0


def test_pause_wins_over_limits(store: Stores) -> None:
    enqueue(store, 5)
    limit(store, concurrency=1)
    assert len(store.work.trip([], Q, "w1", TTL, 5).leases) == 1  # cut short: throttled once
    store.ops.pause(Q, actor="t", reason="incident")
    result = store.work.trip([], Q, "w1", TTL, 5)
    assert result.leases == [] and result.throttle_wait is None
    assert store.ops.limits([Q])[0].throttled == 1  # a paused queue's claims are not throttled


def test_the_cap_counts_only_its_queue(store: Stores) -> None:
    enqueue(store, 3, queue="other")
    assert len(store.work.trip([], "other", "w1", TTL, 3).leases) == 3
    enqueue(store, 3)
    limit(store, concurrency=2)
    assert len(store.work.trip([], Q, "w1", TTL, 3).leases) == 2


def test_a_lost_lease_being_completed_still_counts_for_its_new_owner(
    store: Stores, sql_conn: psycopg.Connection
) -> None:
    """Only the completions this statement makes free their slots: a lease w1 lost (taken over
    by w2) and still tries to complete is w2's live lease."""
    [lost] = enqueue(store, 1)
    limit(store, concurrency=1)
    [old] = store.work.trip([], Q, "w1", TTL, 1).leases
    lapse(sql_conn, lost)
    assert [lease.job_id for lease in store.work.trip([], Q, "w2", TTL, 1).leases] == [lost]
    enqueue(store, 1)
    result = store.work.trip([old], Q, "w1", TTL, 1, take_expired=False)
    assert result.refused == {lost}
    assert result.leases == []


def test_a_claim_short_of_jobs_is_not_throttled(store: Stores) -> None:
    """The cap leaves 3 of the 5 asked for, and only 2 jobs are due: the queue ran short, no
    limit cut the claim."""
    enqueue(store, 2)
    limit(store, concurrency=3, rate=100.0)
    result = store.work.trip([], Q, "w1", TTL, 5)
    assert len(result.leases) == 2 and result.throttle_wait is None
    assert store.ops.limits([Q])[0].throttled == 0


def test_the_bucket_refills_at_the_rate(store: Stores) -> None:
    enqueue(store, 10)
    limit(store, rate=5.0, burst=1)
    first = store.work.trip([], Q, "w1", TTL, 5)
    assert len(first.leases) == 1
    assert first.throttle_wait is not None and 0 < first.throttle_wait <= 0.2
    got = wait_until(lambda: store.work.trip([], Q, "w1", TTL, 5).leases, timeout=5)
    assert len(got) == 1


def test_the_bucket_holds_at_most_its_burst(store: Stores, sql_conn: psycopg.Connection) -> None:
    enqueue(store, 20)
    limit(store, rate=0.5, burst=3)
    # An hour without a claim refills 1,800 tokens' worth: the bucket keeps 3.
    sql_conn.execute(
        "UPDATE leasectl.queue_limit_shards SET tokens = 0, tokens_at = now() - interval '1 hour'"
    )
    assert len(store.work.trip([], Q, "w1", TTL, 10).leases) == 3


def test_claim_by_id_honours_the_cap(store: Stores) -> None:
    ids = enqueue(store, 3)
    limit(store, concurrency=1)
    assert store.work.claim_by_id(ids[0], "w1", TTL) is not None
    assert store.work.claim_by_id(ids[1], "w1", TTL) is None


def test_clear_lifts_the_limits_and_is_audited(store: Stores, sql_conn: psycopg.Connection) -> None:
    enqueue(store, 6)
    limit(store, concurrency=1)
    assert len(store.work.trip([], Q, "w1", TTL, 5).leases) == 1
    ended = store.ops.clear_limit(Q, actor="t", reason="over")
    assert ended is not None and ended.concurrency == 1
    assert store.ops.clear_limit(Q, actor="t", reason="again") is None
    assert len(store.work.trip([], Q, "w1", TTL, 5).leases) == 5
    rows = sql_conn.execute(
        "SELECT action, actor, reason, before, after FROM leasectl.queue_events ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == ["limit", "unlimit"]
    assert rows[0][3] is None and rows[0][4]["concurrency"] == 1
    assert rows[1][2] == "over" and rows[1][3]["concurrency"] == 1 and rows[1][4] is None


def test_a_new_limit_replaces_the_old_whole(store: Stores, sql_conn: psycopg.Connection) -> None:
    limit(store, concurrency=4, rate=10.0)
    now = store.ops.set_limit(Q, LimitSpec(rate=2.0), actor="t2", reason="slower")
    assert now.concurrency is None and now.rate == 2.0 and now.burst is None
    assert now.effective_burst == 2.0 and now.set_by == "t2"
    before, after = sql_conn.execute(
        "SELECT before, after FROM leasectl.queue_events ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert before["concurrency"] == 4 and after["concurrency"] is None


def test_ramp_starts_at_the_floor_and_resumes(store: Stores) -> None:
    enqueue(store, 10)
    limit(store, concurrency=8)
    store.ops.pause(Q, actor="t", reason="incident")
    ramped = store.ops.ramp(Q, timedelta(minutes=5), actor="t", reason="back")
    assert ramped is not None and ramped.resumed
    assert ramped.limit.ramping and ramped.limit.cap_now == 1
    assert store.ops.paused([Q]) == []
    assert len(store.work.trip([], Q, "w1", TTL, 10).leases) == 1


def test_ramp_without_limits_changes_nothing(store: Stores) -> None:
    store.ops.pause(Q, actor="t", reason="incident")
    assert store.ops.ramp(Q, timedelta(minutes=5), actor="t") is None
    assert len(store.ops.paused([Q])) == 1


@pytest.mark.parametrize(
    "spec",
    [
        LimitSpec(),
        LimitSpec(concurrency=0),
        LimitSpec(concurrency=100_001),
        LimitSpec(burst=5),
        LimitSpec(rate=0.0),
        LimitSpec(rate=1e9),
        LimitSpec(rate=1.0, burst=0),
    ],
)
def test_bad_limits_change_nothing(store: Stores, spec: LimitSpec) -> None:
    with pytest.raises(UsageError):
        store.ops.set_limit(Q, spec, actor="t", reason="x")
    assert store.ops.limits() == []
