"""A small, known state for the console's database tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import psycopg

from leasectl.models import Lease
from tests.stores import Stores

HB = timedelta(seconds=10)
TTL = timedelta(seconds=30)
ALIVE = "alive-host:100:aaaaaa"
SILENT = "silent-host:200:bbbbbb"


@dataclass
class Seeded:
    pending: list[int]
    delayed: int
    live: list[Lease]  # held by ALIVE, leases valid
    at_risk: Lease  # held by ALIVE, lease ends in 4 s
    expired: list[Lease]  # held by SILENT, lease lapsed a minute ago
    stuck: int  # status Stuck


def seed(store: Stores, conn: psycopg.Connection) -> Seeded:
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
    return Seeded(
        pending=[i for i in ids if i not in taken],
        delayed=retry.job_id,
        live=live,
        at_risk=at_risk,
        expired=expired,
        stuck=quarantined.job_id,
    )
