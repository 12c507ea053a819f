"""``drain``: run a queue's due jobs in the calling process, through the worker's own parts.

The claim, the fenced completion (both ``WorkerStore.trip``, the statement ``leasectl worker``
sends), a failure's fenced record and its retry (``Outcomes``), ``ctx.transaction()`` and the
handler's run (the worker's executors), heartbeats and the lease deadline (``Keepers``) and the
shutdown (``shut_down``) are the worker's, built by ``worker_store`` as the worker's are. Only
the loop around them is the drain's: one job per round trip, in claim order, until a claim
finds nothing due (the worker's dispatcher would wait for more).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from leasectl.core.config import DEFAULT_SCHEMA
from leasectl.core.errors import UsageError
from leasectl.core.models import JobStatus
from leasectl.db.operations import Operations
from leasectl.db.testing import dsn_of
from leasectl.db.work import WorkerStore
from leasectl.runtime.worker.asyncio_executor import AsyncioExecutor
from leasectl.runtime.worker.config import WorkerConfig, new_event_loop, worker_store
from leasectl.runtime.worker.context import LeaseContext, is_async_handler
from leasectl.runtime.worker.executors import Executor, InlineExecutor
from leasectl.runtime.worker.keepers import Keepers, Signals
from leasectl.runtime.worker.ledger import Ledger
from leasectl.runtime.worker.outcomes import Outcomes, recorded_error
from leasectl.runtime.worker.shutdown import shut_down

_SERIAL = itertools.count(1)


class Outcome(enum.StrEnum):
    """What became of one attempt a drain ran."""

    COMPLETED = "completed"  # the handler returned (or its transaction committed): Completed
    RETRYING = "retrying"  # it failed with attempts left: Pending again, after a backoff
    FAILED = "failed"  # it failed for good (PermanentError, attempts used up): Failed
    LOST = "lost"  # its lease was lost: nothing it did was written
    RELEASED = "released"  # the drain stopped (a KeyboardInterrupt, the timeout): handed back


@dataclass(frozen=True)
class JobRun:
    """One attempt a drain ran."""

    id: int
    queue: str
    attempts: int  # this attempt's number (the job's attempts once it was claimed)
    outcome: Outcome
    error: str | None  # the error as the job records it (``Class: message``), or None
    payload: Any
    exception: BaseException | None = dataclasses.field(default=None, repr=False)


class Drained(list[JobRun]):
    """The attempts a drain ran, in the order they ran."""

    def outcomes(self) -> dict[int, Outcome]:
        """Each job's last outcome, by job id."""
        return {run.id: run.outcome for run in self}

    def of(self, outcome: Outcome | str) -> list[JobRun]:
        return [run for run in self if run.outcome == outcome]

    @property
    def completed(self) -> list[JobRun]:
        return self.of(Outcome.COMPLETED)

    @property
    def failed(self) -> list[JobRun]:
        """The attempts that failed, for good or not (retrying)."""
        return [r for r in self if r.outcome in (Outcome.FAILED, Outcome.RETRYING)]


class _RecordingLedger(Ledger):
    """The worker's ledger, which also keeps every context it was given to hold."""

    def __init__(self, worker_id: str) -> None:
        super().__init__(worker_id)
        self.seen: list[LeaseContext] = []

    def hold(self, contexts: Sequence[LeaseContext]) -> None:
        self.seen.extend(contexts)
        super().hold(contexts)


def drain(
    conn_or_dsn: Any,
    queue: str = "default",
    handler: Callable[..., Any] | None = None,
    *,
    schema: str = DEFAULT_SCHEMA,
    max_jobs: int = 1000,
    config: WorkerConfig | None = None,
    timeout: timedelta = timedelta(minutes=1),
) -> Drained:
    """Run ``queue``'s due jobs with ``handler`` (a plain or an ``async def`` function, as
    ``leasectl worker --handler`` takes) until a claim finds none, or ``max_jobs`` attempts ran;
    return what became of each attempt.

    ``conn_or_dsn``: a DSN, or a psycopg connection not inside a transaction (its DSN is used:
    the drain works on connections of its own, as a worker does, and sees committed jobs only).
    ``config``: the worker's options (lease, heartbeats, retries); its queues and concurrency
    are the drain's (``queue``, one job at a time). A job a failure made ``Pending`` again is
    due after its backoff (``retry_base``, 1 s by default): the drain stops before it, unless
    ``WorkerConfig(retry_base=timedelta(0))`` makes it due at once. ``timeout``: the longest
    the drain waits for an async handler's job (a sync handler runs in the calling thread).
    """
    if handler is None or not callable(handler):
        raise UsageError("drain: give the handler to run (a function of one argument)")
    if max_jobs < 1:
        raise UsageError("drain: max_jobs must be at least 1")
    dsn = conn_or_dsn if isinstance(conn_or_dsn, str) else dsn_of(conn_or_dsn, "drain")
    base = config if config is not None else WorkerConfig()
    config = dataclasses.replace(
        base,
        queues=(queue,),
        concurrency=1,
        worker_id=base.worker_id
        if config is not None
        else f"leasectl-testing-{os.getpid()}-{next(_SERIAL)}",
    )
    store = worker_store(dsn, schema, config)
    try:
        return _Drain(store, config, handler, max_jobs, timeout.total_seconds()).run()
    finally:
        store.close()


class _Drain:
    def __init__(
        self,
        store: WorkerStore,
        config: WorkerConfig,
        handler: Callable[..., Any],
        max_jobs: int,
        timeout_s: float,
    ) -> None:
        self.store = store
        self.config = config
        self.max_jobs = max_jobs
        self.timeout_s = timeout_s
        self.ledger = _RecordingLedger(config.worker_id)
        self.signals = Signals(
            stopping=threading.Event(),
            closed=threading.Event(),
            listening=threading.Event(),
            announced=threading.Event(),
        )
        self.errors: dict[int, BaseException] = {}  # id(ctx) -> what its handler raised
        self.outcomes = Outcomes(
            config, self.ledger, self._store, self.signals.stopping.set, self.signals.closed
        )
        self.handler = self._recording(handler)
        self.timed_out = False
        self.released: set[int] = set()  # id(ctx) of the jobs handed back
        self.loop = new_event_loop(config.event_loop)[0] if is_async_handler(handler) else None

    def _store(self) -> WorkerStore:
        return self.store

    def _recording(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """The handler, with what it raised kept (the worker's executors only record text)."""
        errors = self.errors
        if is_async_handler(handler):

            async def run_async(ctx: Any) -> Any:
                try:
                    return await handler(ctx)
                except BaseException as exc:
                    errors[id(ctx)] = exc
                    raise

            return run_async

        def run(ctx: Any) -> Any:
            try:
                return handler(ctx)
            except BaseException as exc:
                errors[id(ctx)] = exc
                raise

        return run

    def _executor(self) -> Executor:
        if self.loop is not None:
            return AsyncioExecutor(
                self.handler, self.loop, self.config, self.ledger, self.outcomes, self._store
            )
        return InlineExecutor(self.handler, self.ledger, self.outcomes, self._store)

    def run(self) -> Drained:
        config, ledger, signals, store = self.config, self.ledger, self.signals, self.store
        executor = self._executor()
        try:
            store.worker_register(
                config.worker_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                queues=config.queues,
                lease_ttl=config.lease_ttl,
                heartbeat_every=config.heartbeat,
            )
        except BaseException:
            executor.close()  # (an async handler's loop, never started, is closed)
            raise
        heartbeat, _listen, deadline = Keepers(config, ledger, self._store, signals).threads()
        threads = [heartbeat, deadline, *executor.threads()]
        for thread in threads:
            thread.start()
        unwritten: list[LeaseContext] = []
        try:
            unwritten = self._loop(executor)
        finally:
            signals.stopping.set()
            # What shut_down hands back: held, not lost, its handler not ended.
            self.released = {id(c) for c in ledger.held_now() if not c.lost and not c.finishing}
            # Past the timeout, what still runs is handed back at once, not after --grace.
            ending = dataclasses.replace(config, grace=timedelta(0)) if self.timed_out else config
            shut_down(ending, ledger, store, signals.closed, unwritten)
            executor.close()
            signals.closed.set()
            for thread in threads:
                thread.join(timeout=5)
        return self._report()

    def _loop(self, executor: Executor) -> list[LeaseContext]:
        """The dispatcher's round trips, one job each, until a claim finds nothing due.
        Returns the finished jobs whose results are not written yet (when stopping)."""
        ledger, stopping, config = self.ledger, self.signals.stopping, self.config
        queue, ttl = config.queues[0], config.lease_ttl
        finished: list[LeaseContext] = []
        while True:
            with ledger.lock:
                finished += ledger.finished
                ledger.finished.clear()
            if stopping.is_set():  # a handler raised KeyboardInterrupt
                return finished
            finished = ledger.drop_lost(finished)
            limit = 0 if len(ledger.seen) >= self.max_jobs else 1
            sent = time.monotonic()
            trip = self.store.trip([c.lease for c in finished], queue, config.worker_id, ttl, limit)
            ledger.written(finished, trip.refused)
            finished = []
            if not trip.leases:
                return finished
            executor.hand(trip.leases, sent + ttl.total_seconds())
            self._wait_for_handlers()

    def _wait_for_handlers(self) -> None:
        """Until the job handed over has ended (at once for a sync handler, which the
        executor ran in this thread), at most the drain's timeout."""
        ledger = self.ledger
        give_up = time.monotonic() + self.timeout_s
        while True:
            ledger.wake.clear()
            with ledger.lock:
                if ledger.running <= 0:
                    return
            left = give_up - time.monotonic()
            if left <= 0:
                self.signals.stopping.set()
                self.timed_out = True
                return
            ledger.wake.wait(min(left, 0.5))

    def _report(self) -> Drained:
        """Each attempt's outcome: from what the worker's parts left on its context, and for a
        failure, from the job's status now (Pending again, or Failed)."""
        contexts = self.ledger.seen
        failed_ids = {
            c.job.id
            for c in contexts
            if not c.lost and (id(c) in self.errors or c.lease.unusable is not None)
        }
        now = Operations(self.store.db).get_jobs(sorted(failed_ids)) if failed_ids else {}
        last_attempt = {c.job.id: c.lease.attempt for c in contexts}
        runs = Drained()
        for ctx in contexts:
            exc = self.errors.get(id(ctx))
            error: str | None = None
            if exc is not None:
                error = recorded_error(exc)
            elif ctx.lease.unusable is not None:
                error = ctx.lease.unusable
            if id(ctx) in self.released:
                outcome = Outcome.RELEASED
            elif ctx.lost:
                outcome = Outcome.LOST
            elif error is None:
                outcome = Outcome.COMPLETED
            else:
                job = now.get(ctx.job.id)
                final = ctx.lease.attempt == last_attempt[ctx.job.id]
                if final and job is not None and job.status == JobStatus.FAILED:
                    outcome = Outcome.FAILED
                else:
                    outcome = Outcome.RETRYING
            runs.append(
                JobRun(
                    id=ctx.job.id,
                    queue=ctx.job.queue,
                    attempts=ctx.lease.attempt,
                    outcome=outcome,
                    error=error,
                    payload=ctx.payload,
                    exception=exc,
                )
            )
        for exc in self.errors.values():
            if isinstance(exc, KeyboardInterrupt):  # Ctrl+C in a handler: the job handed back
                raise exc
        if self.timed_out:
            raise DrainTimeout(
                f"drain: a handler still ran {self.timeout_s:g}s after its job was handed over",
                runs,
            )
        return runs


class DrainTimeout(AssertionError):
    """A handler ran past the drain's timeout: its job was handed back (``runs``: what ran)."""

    def __init__(self, message: str, runs: Drained) -> None:
        super().__init__(message)
        self.runs = runs
