"""procrastinate: psycopg connector, an async no-op task, one worker with K concurrent jobs.

Best throughput as procrastinate documents it: an async task (no thread hop), ``concurrency=K``
per worker process with a connection pool of K+2, LISTEN/NOTIFY on (its default) and a short
fetch polling interval as fallback. procrastinate fetches and finishes one job per statement.
"""

from __future__ import annotations

import asyncio
from typing import Any

import procrastinate
from _common import chunks, cli

PG_POOL_EXTRA = 2


def make_app(dsn: str, pool: int) -> procrastinate.App:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool)
    )

    @app.task(name="noop", queue="default")
    async def noop() -> None:
        return None

    return app


def prepare(dsn: str, jobs: int) -> dict[str, Any]:
    app = make_app(dsn, 2)

    async def go() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            task = app.tasks["noop"]
            for n in chunks(jobs, 5_000):
                await task.batch_defer_async(*({} for _ in range(n)))

    asyncio.run(go())
    return {
        "remaining_sql": "SELECT count(*) FROM procrastinate_jobs "
        "WHERE status IN ('todo', 'doing')",
        "finished_sql": "SELECT at AS t FROM procrastinate_events "
        "WHERE type = 'succeeded' AND at <= %(cut)s",
        "config": "psycopg pool K+2; async no-op; concurrency=K per process; listen_notify on; "
        "fetch_job_polling_interval=0.1 s",
    }


def work(dsn: str, concurrency: int) -> None:
    app = make_app(dsn, concurrency + PG_POOL_EXTRA)
    app.run_worker(
        queues=["default"],
        concurrency=concurrency,
        wait=True,
        listen_notify=True,
        fetch_job_polling_interval=0.1,
        install_signal_handlers=True,
        delete_jobs="never",
    )


if __name__ == "__main__":
    cli("procrastinate", prepare, work)
