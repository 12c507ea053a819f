"""Job handlers for the benchmarks, run by real `leasectl worker --handler` processes."""

from __future__ import annotations

from leasectl.runtime.worker import AsyncJobContext, JobContext


def noop(ctx: JobContext) -> None:
    """The job does nothing: the benchmark measures the queue, not the work."""


def in_transaction(ctx: JobContext) -> None:
    """The job completes inside its handler's transaction (``ctx.transaction()``), which holds
    no other write: the cost of the transaction itself (BEGIN, the completion, COMMIT)."""
    with ctx.transaction():
        pass


async def noop_async(ctx: AsyncJobContext) -> None:
    """``noop`` as an ``async def`` handler: the worker runs its jobs as tasks of one event
    loop instead of on ``--concurrency`` handler threads."""
