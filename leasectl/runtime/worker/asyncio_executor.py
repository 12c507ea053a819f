"""An ``async def`` handler's executor: one event loop thread runs each job as a task. The
dispatcher hands a claim's jobs over with one ``call_soon_threadsafe``; a round of the loop's
successes reaches the dispatcher together (one lock, one wake-up); a failure is written from a
thread of the loop's executor; a lost lease's task is cancelled ``--grace`` after it was told."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from leasectl.core.errors import LeaseLost
from leasectl.core.models import Lease
from leasectl.core.tracing import Off, ProcessSpan, processing
from leasectl.db.handler_tx import AsyncHandlerTransactions
from leasectl.db.work import WorkerStore
from leasectl.runtime.handler_errors import fails_attempt, job_fields
from leasectl.runtime.worker.config import WorkerConfig
from leasectl.runtime.worker.context import AsyncHandler, AsyncJobContext, LeaseContext
from leasectl.runtime.worker.executors import timeout_at
from leasectl.runtime.worker.ledger import Ledger
from leasectl.runtime.worker.outcomes import Outcomes, outcome_name

log = logging.getLogger("leasectl.worker")

LOOP_STOP_S = 5.0  # at shutdown, how long cancelled async tasks get to end


class AsyncioExecutor:
    def __init__(
        self,
        handler: object,
        loop: asyncio.AbstractEventLoop,
        config: WorkerConfig,
        ledger: Ledger,
        outcomes: Outcomes,
        store: Callable[[], WorkerStore],
    ) -> None:
        self.handler = cast(AsyncHandler, handler)
        self.loop = loop
        self.config = config
        self.worker_id = config.worker_id
        self.ledger = ledger
        self.outcomes = outcomes
        self.store = store
        # Async jobs that succeeded in this round of the loop, handed to the dispatcher at its
        # end, together (a batch's jobs often end together): one lock and one wake-up.
        self._round: list[AsyncJobContext] = []
        self._async_tx: AsyncHandlerTransactions | None = None  # (on the loop only)
        self._open_transaction = self._transaction  # (bound once, not per job)
        self._thread: threading.Thread | None = None
        ledger.on_lost = self._cancel_after_grace
        ledger.on_timeout = self._cancel_now

    def threads(self) -> list[threading.Thread]:
        self._thread = threading.Thread(target=self._loop_main, name="leasectl-loop", daemon=True)
        return [self._thread]

    def _loop_main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def hand(self, leases: list[Lease], deadline: float) -> None:
        """The dispatcher's side: hold the jobs, then start their tasks on the loop (one
        wake-up of the loop per claim trip)."""
        if not leases:
            return
        loop = self.loop
        contexts = [
            AsyncJobContext(
                lease,
                deadline=deadline,
                _loop=loop,
                _open_transaction=self._open_transaction,
            )
            for lease in leases
        ]
        for ctx in contexts:
            if ctx.lease.job.timeout is not None:
                ctx.timeout_at = timeout_at(ctx.lease)
        self.ledger.hold(contexts)
        self.ledger.stats.claimed += len(contexts)
        loop.call_soon_threadsafe(self._start_tasks, contexts)

    def _start_tasks(self, contexts: list[AsyncJobContext]) -> None:
        # (The held context keeps its task referenced until the job is written.)
        create = asyncio.get_running_loop().create_task
        for ctx in contexts:
            ctx._task = create(self._run_job(ctx))

    def _end_round(self) -> None:
        """Scheduled by the first success of a round of the loop, run after its last."""
        done, self._round = self._round, []
        ledger = self.ledger
        with ledger.lock:
            ledger.running -= len(done)
            ledger.finished += done  # written by the dispatcher's next trip
        ledger.wake.set()

    async def _run_job(self, ctx: AsyncJobContext) -> None:
        # (The handler's span, current in this task while it runs, when the process traces.)
        with processing(ctx.lease) as span:
            await self._attempt(ctx, span)

    async def _attempt(self, ctx: AsyncJobContext, span: ProcessSpan | Off) -> None:
        outcomes = self.outcomes
        error: BaseException | None = None
        if ctx.lease.unusable is not None:
            error = outcomes.unusable(ctx)
        else:
            try:
                await self.handler(ctx)
            except BaseException as exc:
                # (Cancelled by the worker: the lease is lost, nothing will be written. By
                # anything else: a failure like any other.)
                if not fails_attempt(exc):
                    ctx._returned = True
                    span.ended("lost" if ctx.is_cancelled() else "interrupted", None)
                    outcomes.interrupted(ctx, exc)
                    return
                error = exc
        ctx._returned = True
        if ctx.timed_out:
            error = outcomes.ended_with(ctx, error)
        if span.on:
            span.ended(outcome_name(ctx, error), error)
        if error is None and not (ctx.committed or ctx.lost or ctx.is_cancelled()):
            ctx.finishing = True
            if not self._round:
                asyncio.get_running_loop().call_soon(self._end_round)
            self._round.append(ctx)
        elif outcomes.handler_ended(ctx, error):
            # Writing a failure blocks (and retries while the database is away): off the loop.
            await asyncio.to_thread(outcomes.record_failure, ctx, error)

    def _cancel_after_grace(self, ctx: LeaseContext) -> None:
        """A lost lease's task is told at once (``cancelled``) and cancelled after ``--grace``
        if it is still running (a sync handler keeps its thread until it returns)."""
        if not isinstance(ctx, AsyncJobContext):
            return
        loop = self.loop

        def cancel() -> None:
            task = ctx._task
            if task is not None and not ctx._returned and not task.done():
                log.info(
                    "worker %s: job %d: cancelling its task (lease lost %gs ago)",
                    self.worker_id,
                    ctx.job.id,
                    self.config.grace.total_seconds(),
                    extra=job_fields(ctx.lease, "cancelled"),
                )
                task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop is closed: no task is left
            loop.call_soon_threadsafe(loop.call_later, self.config.grace.total_seconds(), cancel)

    def _cancel_now(self, ctx: LeaseContext) -> None:
        """A handler past its job's timeout: its task is cancelled at once (``CancelledError``
        inside the handler); the attempt then fails with ``JobTimedOut``."""
        if not isinstance(ctx, AsyncJobContext):
            return

        def cancel() -> None:
            task = ctx._task
            if task is not None and not ctx._returned and not task.done():
                task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop is closed: no task is left
            self.loop.call_soon_threadsafe(cancel)

    def close(self) -> None:
        """After shutdown: cancel the tasks still running (their leases were handed back), let
        them roll back and end, close the async transactions' connections, stop the loop."""
        loop = self.loop
        if self._thread is None:  # (never started)
            loop.close()
            return
        done = asyncio.run_coroutine_threadsafe(self._end_tasks(), loop)
        try:
            done.result(timeout=LOOP_STOP_S + 1)
        except Exception as exc:
            log.warning("worker %s: stopping the event loop: %r", self.worker_id, exc)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=LOOP_STOP_S)

    async def _end_tasks(self) -> None:
        tasks = [
            ctx._task
            for ctx in self.ledger.held_now()
            if isinstance(ctx, AsyncJobContext) and ctx._task is not None and not ctx._task.done()
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=LOOP_STOP_S)
            if pending:
                log.warning(
                    "worker %s: %d tasks did not end when cancelled", self.worker_id, len(pending)
                )
        if self._async_tx is not None:
            await self._async_tx.aclose()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.get_running_loop().shutdown_default_executor(), LOOP_STOP_S
            )

    @contextlib.asynccontextmanager
    async def _transaction(self, ctx: AsyncJobContext) -> AsyncIterator[Any]:
        """AsyncJobContext.transaction: the sync executor's transaction on the loop's
        AsyncConnections."""
        if self._async_tx is None:
            name = f"leasectl handler {self.worker_id}"
            self._async_tx = AsyncHandlerTransactions(self.store().db, name)
        transactions = self._async_tx

        def completing() -> None:
            ctx.finishing = True  # (as in the sync executor's transaction)

        try:
            async with transactions.completing(ctx.lease, completing) as conn:
                yield conn
        except LeaseLost:
            self.ledger.mark_lost(ctx, "the database refused the completion: the lease was lost")
            raise
        except BaseException:
            ctx.finishing = False
            raise
        ctx.committed = True
