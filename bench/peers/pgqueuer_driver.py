"""PgQueuer: asyncpg driver, an async no-op entrypoint, batched dequeue.

Best throughput as PgQueuer documents it: an async handler (no thread hop), dequeue batches of
half the per-process concurrency (``batch_size``; ``max_concurrent_tasks`` = concurrency, which
PgQueuer requires to be at least twice the batch), its buffered completion log and heartbeats,
LISTEN/NOTIFY wake-ups (always on), and its own ``optimize_autovacuum`` table settings. Tables stay
durable (logged), like leasectl's. At concurrency 1 the entrypoint is serialised with
``concurrency_limit=1`` (batch 1), PgQueuer's way to run one job at a time.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from typing import Any

import asyncpg
from _common import chunks, cli, url
from pgqueuer import AsyncpgDriver, QueueManager
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = "noop"


def prepare(dsn: str, jobs: int) -> dict[str, Any]:
    async def go() -> None:
        conn = await asyncpg.connect(url(dsn))
        try:
            q = Queries(AsyncpgDriver(conn))
            await q.install()
            await q.optimize_autovacuum()
            for n in chunks(jobs, 10_000):
                await q.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
        finally:
            await conn.close()

    asyncio.run(go())
    return {
        "remaining_sql": "SELECT count(*) FROM pgqueuer WHERE status IN ('queued', 'picked')",
        # Completions are logged by PgQueuer's buffer, stamped when it flushes (default now()).
        "finished_sql": "SELECT created AS t FROM pgqueuer_log "
        "WHERE status = 'successful' AND created <= %(cut)s",
        "config": "asyncpg; async no-op; batch_size=K/2, max_concurrent_tasks=K per process "
        "(K=1: batch 1, concurrency_limit=1); optimize_autovacuum; durable tables",
    }


def work(dsn: str, concurrency: int) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(url(dsn))
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(ENTRYPOINT, concurrency_limit=1 if concurrency == 1 else 0)
        async def noop(job: Job) -> None:
            return None

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, qm.shutdown.set)
        if concurrency == 1:
            await qm.run(batch_size=1, dequeue_timeout=timedelta(seconds=1))
        else:
            await qm.run(
                batch_size=max(1, concurrency // 2),
                max_concurrent_tasks=2 * max(1, concurrency // 2),
                dequeue_timeout=timedelta(seconds=1),
            )

    asyncio.run(go())


if __name__ == "__main__":
    cli("pgqueuer", prepare, work)
