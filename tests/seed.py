"""Known database states that tests start from, built through the data layer like real traffic.

``seed_states``: one job in each state an operator acts on (Completed, an expired lease,
Stuck, Pending), for the CLI, privilege and bad-input tests. ``seed_console``: the richer
state the console's database tests read (live, at-risk and lapsed leases of a live and a
silent worker, a delayed retry, a Stuck job).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import psycopg

from leasectl.core.models import Lease
from tests.stores import Stores

SCHEMA = "leasectl"
OWNER = "test-host:4242:abcdef"

# -- one job in each state ----------------------------------------------------------------------


@dataclass
class Seeded:
    pending: int
    expired: int
    stuck: int
    completed: int


def seed_states(store: Stores, conn: psycopg.Connection) -> Seeded:
    """A database in which most commands would change something if they ran."""
    completed, expired, stuck, pending = store.ops.enqueue([{"n": i} for i in range(4)], queue="q")
    lease = store.work.claim("q", OWNER, timedelta(seconds=30), 3)
    assert [x.job_id for x in lease] == [completed, expired, stuck]
    assert store.work.complete(lease[:1]) == {completed}
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = ANY(%s)",
        [[expired, stuck]],
    )
    moved = store.ops.operator_mark_stuck(
        store.ops.seen_now([stuck]), actor="operator:test", reason="seed"
    )
    assert moved.changed == (stuck,)
    return Seeded(pending=pending, expired=expired, stuck=stuck, completed=completed)


def seed_states_at(dsn: str) -> Seeded:
    """``seed_states`` in the database at ``dsn``, through connections of its own."""
    with Stores.connect(dsn, SCHEMA) as store, psycopg.connect(dsn, autocommit=True) as conn:
        return seed_states(store, conn)


# -- the console's state ------------------------------------------------------------------------

HB = timedelta(seconds=10)
TTL = timedelta(seconds=30)
ALIVE = "alive-host:100:aaaaaa"
SILENT = "silent-host:200:bbbbbb"


@dataclass
class ConsoleSeeded:
    pending: list[int]
    delayed: int
    live: list[Lease]  # held by ALIVE, leases valid
    at_risk: Lease  # held by ALIVE, lease ends in 4 s
    expired: list[Lease]  # held by SILENT, lease lapsed a minute ago
    stuck: int  # status Stuck


def seed_console(store: Stores, conn: psycopg.Connection) -> ConsoleSeeded:
    for worker in (ALIVE, SILENT):
        host, pid, _ = worker.split(":")
        store.work.worker_register(
            worker, hostname=host, pid=int(pid), queues=["payments"], lease_ttl=TTL,
            heartbeat_every=HB,
        )  # fmt: skip
    ids = store.ops.enqueue([{"n": i} for i in range(10)], queue="payments")
    store.ops.enqueue([{"mail": 1}], queue="emails")
    live = store.work.claim("payments", ALIVE, TTL, limit=2)
    (at_risk,) = store.work.claim("payments", ALIVE, TTL)
    expired = store.work.claim("payments", SILENT, TTL, limit=2)
    (retry,) = store.work.claim("payments", ALIVE, TTL)
    store.work.fail(retry, "gateway 503", retry_delay=timedelta(minutes=5))
    (quarantined,) = store.work.claim("payments", SILENT, TTL)
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute', "
        "heartbeat_at = now() - interval '90 seconds' WHERE id = ANY(%s)",
        ([le.job_id for le in [*expired, quarantined]],),
    )
    conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() + interval '4 seconds' WHERE id = %s",
        (at_risk.job_id,),
    )
    conn.execute(
        "UPDATE leasectl.workers SET last_seen_at = now() - interval '5 minutes' "
        "WHERE worker_id = %s",
        (SILENT,),
    )
    result = store.ops.operator_mark_stuck(
        [store.ops.get_job(quarantined.job_id).seen()], actor="test", reason="seed"
    )
    assert result.changed == (quarantined.job_id,)
    taken = {le.job_id for le in [*live, at_risk, *expired, retry, quarantined]}
    return ConsoleSeeded(
        pending=[i for i in ids if i not in taken],
        delayed=retry.job_id,
        live=live,
        at_risk=at_risk,
        expired=expired,
        stuck=quarantined.job_id,
    )
