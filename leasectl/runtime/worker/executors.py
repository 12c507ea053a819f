"""Where handlers run, behind one interface (``Executor``): inline on the dispatcher (concurrency
1: a job costs one round trip and no thread hand-off), on ``concurrency`` handler threads, or as
tasks of one event loop thread (``asyncio_executor.py``, for an ``async def`` handler). The
dispatcher hands each claim trip's leases over in one call."""

from __future__ import annotations

import contextlib
import inspect
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

from leasectl.core.errors import LeaseLost
from leasectl.core.models import Lease
from leasectl.core.tracing import processing
from leasectl.db.handler_tx import HandlerTransactions
from leasectl.db.work import WorkerStore
from leasectl.runtime.handler_errors import fails_attempt
from leasectl.runtime.worker.context import Handler, JobContext
from leasectl.runtime.worker.ledger import Ledger
from leasectl.runtime.worker.outcomes import Outcomes, outcome_name


class Executor(Protocol):
    def threads(self) -> list[threading.Thread]:
        """The threads it runs handlers on, started with the worker's other threads."""
        ...

    def hand(self, leases: list[Lease], deadline: float) -> None:
        """(The dispatcher's.) Hold a claim trip's jobs and run them."""
        ...

    def close(self) -> None:
        """After shutdown: end its threads (or its loop and the tasks still on it)."""
        ...


class SyncExecutor:
    """A plain ``def`` handler, run by ``run_job`` on whichever thread ``hand`` chooses."""

    def __init__(
        self, handler: object, ledger: Ledger, outcomes: Outcomes, store: Callable[[], WorkerStore]
    ) -> None:
        self.handler = cast(Handler, handler)
        self.ledger = ledger
        self.stats = ledger.stats
        self.outcomes = outcomes
        self.store = store
        self._handler_tx: HandlerTransactions | None = None  # made when a handler first asks
        self._open_transaction = self._transaction  # (bound once, not per job)

    def threads(self) -> list[threading.Thread]:
        return []

    def close(self) -> None:
        pass

    def run_job(self, ctx: JobContext) -> None:
        # (The handler's span, current while it runs, when the process traces: OFF otherwise.)
        with processing(ctx.lease) as span:
            outcomes = self.outcomes
            error: BaseException | None = outcomes.unusable(ctx)
            if error is None:
                try:
                    result = self.handler(ctx)
                    if inspect.iscoroutine(result):  # e.g. a lambda around an async def
                        result.close()
                        raise TypeError(
                            "the handler returned a coroutine, which the worker does not await: "
                            "make the handler itself async def"
                        )
                except BaseException as exc:
                    if not fails_attempt(exc):
                        span.ended("lost" if ctx.is_cancelled() else "interrupted", None)
                        outcomes.interrupted(ctx, exc)
                        return
                    error = exc
            if ctx.timed_out:
                error = outcomes.ended_with(ctx, error)
            if span.on:
                span.ended(outcome_name(ctx, error), error)
            if outcomes.handler_ended(ctx, error):
                outcomes.record_failure(ctx, error)

    @contextlib.contextmanager
    def _transaction(self, ctx: JobContext) -> Iterator[Any]:
        """JobContext.transaction: the job's completion commits with the handler's writes."""
        with self.ledger.lock:
            if self._handler_tx is None:
                name = f"leasectl handler {self.outcomes.worker_id}"
                self._handler_tx = HandlerTransactions(self.store().db, name)
            transactions = self._handler_tx

        def completing() -> None:
            # From here a refused heartbeat means the job was completed, not lost (the
            # completion's row lock makes a concurrent heartbeat wait for the commit).
            ctx.finishing = True

        try:
            with transactions.completing(ctx.lease, completing) as conn:
                yield conn
        except LeaseLost:
            self.ledger.mark_lost(ctx, "the database refused the completion: the lease was lost")
            raise
        except BaseException:
            ctx.finishing = False  # rolled back, or its commit is unknown: the handler goes on
            raise
        ctx.committed = True


def timeout_at(lease: Lease) -> float:
    """The local monotonic time past which the job's handler has run too long (its timeout,
    from now: the moment it is handed over), or inf."""
    timeout = lease.job.timeout
    return math.inf if timeout is None else time.monotonic() + timeout.total_seconds()


class InlineExecutor(SyncExecutor):
    """Concurrency 1: the dispatcher runs the handler itself; its result rides the next trip."""

    def hand(self, leases: list[Lease], deadline: float) -> None:
        hold, stats, open_transaction = self.ledger.hold, self.stats, self._open_transaction
        for lease in leases:
            ctx = JobContext(lease, deadline=deadline, _open_transaction=open_transaction)
            if lease.job.timeout is not None:
                ctx.timeout_at = timeout_at(lease)
            hold([ctx])
            stats.claimed += 1
            self.run_job(ctx)  # its result rides on the next trip


class ThreadExecutor(SyncExecutor):
    """``concurrency`` handler threads take jobs from a queue."""

    def __init__(
        self,
        handler: object,
        ledger: Ledger,
        outcomes: Outcomes,
        store: Callable[[], WorkerStore],
        concurrency: int,
    ) -> None:
        super().__init__(handler, ledger, outcomes, store)
        self.concurrency = concurrency
        self._jobs: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()

    def threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(target=self._handler_loop, name=f"leasectl-job-{n}", daemon=True)
            for n in range(self.concurrency)
        ]

    def hand(self, leases: list[Lease], deadline: float) -> None:
        hold, stats, open_transaction = self.ledger.hold, self.stats, self._open_transaction
        for lease in leases:
            ctx = JobContext(lease, deadline=deadline, _open_transaction=open_transaction)
            if lease.job.timeout is not None:
                ctx.timeout_at = timeout_at(lease)
            hold([ctx])
            stats.claimed += 1
            self._jobs.put(ctx)

    def close(self) -> None:
        for _ in range(self.concurrency):
            self._jobs.put(None)

    def _handler_loop(self) -> None:
        while (ctx := self._jobs.get()) is not None:
            self.run_job(ctx)
