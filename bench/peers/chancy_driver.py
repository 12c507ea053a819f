"""Chancy: an async no-op job on a queue with the AsyncExecutor, eager polling, no plugins.

Best throughput as Chancy documents it: the ``AsyncExecutor`` (the default ProcessExecutor forks
a process pool meant for CPU-bound jobs), ``concurrency=K`` per worker process,
``eager_polling=True`` (fetch again as soon as a job ends instead of waiting for the interval),
``polling_interval=1`` s (its minimum) with NOTIFY on, no default plugins (no leader election,
pruner or recovery loops competing for the database), a pool of K+2 connections. Chancy writes
job results in batches every second (``send_outgoing_interval``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from _common import chunks, cli
from chancy import Chancy, Queue, Worker, job

QUEUE = "default"


@job(queue=QUEUE)
async def noop() -> None:
    return None


def app(dsn: str, pool: int) -> Chancy:
    return Chancy(dsn, no_default_plugins=True, max_connection_pool_size=pool)


def prepare(dsn: str, jobs: int) -> dict[str, Any]:
    async def go() -> None:
        async with app(dsn, 2) as chancy:
            await chancy.migrate()
            for n in chunks(jobs, 5_000):
                async for _ in chancy.push_many([noop.job] * n, batch_size=5_000):
                    pass

    asyncio.run(go())
    return {
        "remaining_sql": "SELECT count(*) FROM chancy_jobs WHERE state NOT IN "
        "('succeeded', 'failed')",
        "finished_sql": "SELECT completed_at AS t FROM chancy_jobs "
        "WHERE state = 'succeeded' AND completed_at <= %(cut)s",
        "config": "AsyncExecutor; concurrency=K per process; eager_polling; polling_interval=1 s; "
        "notifications on; no_default_plugins; pool K+2",
    }


def work(dsn: str, concurrency: int) -> None:
    async def go() -> None:
        async with app(dsn, concurrency + 2) as chancy:
            await chancy.declare(
                Queue(
                    QUEUE,
                    concurrency=concurrency,
                    executor="chancy.executors.asyncex.AsyncExecutor",
                    polling_interval=1,
                    eager_polling=True,
                ),
                upsert=True,
            )
            async with Worker(chancy, register_signal_handlers=True) as worker:
                await worker.wait_for_shutdown()

    asyncio.run(go())


if __name__ == "__main__":
    cli("chancy", prepare, work)
