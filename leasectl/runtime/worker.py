"""The worker runtime: claim loop, background heartbeats, fenced completion, graceful shutdown.

Threads: the dispatcher (the caller's), which completes the jobs that finished and claims new
ones in one statement per round trip; one heartbeat thread that renews every held lease in one
statement; a LISTEN thread that wakes the dispatcher on enqueues; a deadline thread; and
``concurrency`` handler threads (none at concurrency 1: the dispatcher runs the handler). A
handler learns that its lease is gone through ``JobContext.cancelled``; its result is then never
written (and the database would refuse it anyway: completion is fenced by owner and attempt).
A handler may instead complete its job inside its own transaction (``JobContext.transaction``):
its writes and the fenced completion commit together, on a connection of its own thread.
An ``async def`` handler replaces the handler threads with one event loop thread that runs
each job as a task (``AsyncJobContext``); everything else is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any, cast

from leasectl.core.backoff import reconnect_delay, retry_delay
from leasectl.core.config import check_queue_length, default_worker_id
from leasectl.core.errors import ConnectionFailed, LeasectlError, LeaseLost, UsageError
from leasectl.core.literal import echo, shorten
from leasectl.core.models import ClaimKey, Job, Lease
from leasectl.core.readlag import DEFAULT_LEASE_TTL
from leasectl.core.tracebacks import bounded_traceback, no_nul
from leasectl.db.connection import Database
from leasectl.db.handler_tx import AsyncHandlerTransactions, HandlerTransactions
from leasectl.db.work import NOTIFY_QUEUE_CHARS, WorkerStore
from leasectl.runtime.handler_errors import (
    error_text,
    fails_attempt,
    failure_line,
    lost_line,
    shown,
)
from leasectl.runtime.loading import import_failure

log = logging.getLogger("leasectl.worker")


class PermanentError(Exception):
    """Raise from a handler to fail the job at once, without further retries."""


# Recorded errors name the class as handlers import it (leasectl.PermanentError).
PermanentError.__module__ = "leasectl"


class UnusableJob(PermanentError):
    """A job whose stored values the worker cannot load (``Lease.unusable``): failed at once,
    without calling the handler; its message is the job's last error, as is."""


# Guards the first use of a context's event (made on demand: most jobs never need one).
_EVENT_LOCK = threading.Lock()


@dataclass
class LeaseContext:
    """What the worker keeps per held job, whichever kind of handler runs it."""

    lease: Lease
    lost: bool = False
    deadline: float = 0.0  # local monotonic time after which the lease must be presumed lost
    finishing: bool = False  # the handler returned; its result is being written
    committed: bool = False  # the handler's transaction() committed the job's completion

    @property
    def job(self) -> Job:
        return self.lease.job

    @property
    def payload(self) -> Any:
        return self.lease.job.payload

    def is_cancelled(self) -> bool:
        raise NotImplementedError

    def _set_cancelled(self) -> None:
        raise NotImplementedError


@dataclass
class JobContext(LeaseContext):
    """What a handler gets: the job, its lease, and a flag raised when the lease is lost."""

    _cancelled: threading.Event | None = field(default=None, repr=False, compare=False)
    # The worker's way to open a handler transaction (None: outside a worker), and whether
    # this attempt has opened one.
    _open_transaction: Callable[[JobContext], AbstractContextManager[Any]] | None = field(
        default=None, repr=False, compare=False
    )
    _transaction_used: bool = field(default=False, repr=False, compare=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the lease is lost or the worker shuts down: stop, the result will not be
        written. (Made on first use, under a lock, so every thread gets the same event.)"""
        event = self._cancelled
        if event is None:
            with _EVENT_LOCK:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    def is_cancelled(self) -> bool:
        """``cancelled.is_set()``, without making the event when nobody has asked for it."""
        event = self._cancelled
        return event is not None and event.is_set()

    def _set_cancelled(self) -> None:
        self.cancelled.set()

    def transaction(self) -> AbstractContextManager[Any]:
        """``with ctx.transaction() as conn:`` a psycopg connection in an open transaction;
        leaving the block normally completes the job (fenced) in that transaction and commits:
        the handler's writes on ``conn`` and the completion commit together or not at all.

        When the fence refuses (the lease was lost), the transaction rolls back, ``cancelled``
        is set and the block raises ``LeaseLost``. An exception inside the block rolls back and
        propagates (the job fails or is retried, as any handler exception). Once per attempt.
        """
        if self._open_transaction is None:
            raise RuntimeError("ctx.transaction() works only in a handler run by a worker")
        if self._transaction_used:
            raise RuntimeError("ctx.transaction() may be entered only once per attempt")
        self._transaction_used = True
        return self._open_transaction(self)


class CancelledEvent:
    """An async handler's ``ctx.cancelled``: ``await ctx.cancelled`` (or ``.wait()``) returns
    once the lease is lost or the worker shuts down. Set from any of the worker's threads; an
    ``asyncio.Event`` of the worker's loop underneath, set on that loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._flag = False
        self._event = asyncio.Event()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self) -> bool:
        if not self._flag:
            await self._event.wait()
        return True

    def __await__(self) -> Generator[Any, None, bool]:
        return self.wait().__await__()


@dataclass
class AsyncJobContext(LeaseContext):
    """What an ``async def`` handler gets: as ``JobContext``, with an awaitable ``cancelled``
    and ``async with ctx.transaction() as conn:`` (a ``psycopg.AsyncConnection``)."""

    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)
    _cancelled: CancelledEvent | None = field(default=None, repr=False, compare=False)
    _open_transaction: Callable[[AsyncJobContext], AbstractAsyncContextManager[Any]] | None = field(
        default=None, repr=False, compare=False
    )
    _transaction_used: bool = field(default=False, repr=False, compare=False)
    _task: asyncio.Task[None] | None = field(default=None, repr=False, compare=False)
    _returned: bool = field(default=False, repr=False, compare=False)  # the handler ended

    @property
    def cancelled(self) -> CancelledEvent:
        """Set when the lease is lost or the worker shuts down: ``await ctx.cancelled``. The
        task is cancelled (``CancelledError``) if it is still running a grace period later."""
        event = self._cancelled
        if event is None:
            with _EVENT_LOCK:
                if self._cancelled is None:
                    self._cancelled = CancelledEvent(self._loop or asyncio.get_running_loop())
                event = self._cancelled
        return event

    def is_cancelled(self) -> bool:
        event = self._cancelled
        return event is not None and event.is_set()

    def _set_cancelled(self) -> None:
        self.cancelled.set()

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """``async with ctx.transaction() as conn:`` ``JobContext.transaction`` on an
        ``AsyncConnection``: the handler's writes and the job's fenced completion commit
        together; ``LeaseLost`` (rolled back) when the lease was lost. Once per attempt."""
        if self._open_transaction is None:
            raise RuntimeError("ctx.transaction() works only in a handler run by a worker")
        if self._transaction_used:
            raise RuntimeError("ctx.transaction() may be entered only once per attempt")
        self._transaction_used = True
        return self._open_transaction(self)


Handler = Callable[[JobContext], object]
AsyncHandler = Callable[[AsyncJobContext], Awaitable[object]]


def is_async_handler(handler: object) -> bool:
    """An ``async def`` function (or a callable object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 (the method, not callability)
    )


def load_handler(spec: str) -> Handler | AsyncHandler:
    """``package.module:function`` -> the callable; any failure is a one-line usage error."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"invalid handler {echo(spec)}: use module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: handlers next to the caller import
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        why = import_failure(module_name, exc)
        raise UsageError(f"cannot import handler module {echo(module_name)}: {why}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UsageError(
                f"handler {echo(spec)}: module {echo(module_name)} has no {echo(attr)}"
            )
    if not callable(target):
        raise UsageError(f"handler {echo(spec)} is not callable")
    handler: Handler | AsyncHandler = target
    return handler


EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def new_event_loop(choice: str) -> tuple[asyncio.AbstractEventLoop, str]:
    """The loop an async def handler's tasks run on, and its name. uvloop's call_soon and
    Handle are C, not Python: a task costs a few microseconds less. ``auto`` takes it when it is
    installed (by default, but on Windows); ``uvloop`` requires it; ``asyncio``: the default."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise UsageError(
                    "--event-loop uvloop: uvloop is not installed (pip install uvloop)"
                ) from None
        else:
            return uvloop.new_event_loop(), "uvloop"
    return asyncio.new_event_loop(), "asyncio"


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 1
    lease_ttl: timedelta = DEFAULT_LEASE_TTL
    heartbeat_every: timedelta | None = None  # default: a third of the lease TTL
    poll_interval: timedelta = timedelta(seconds=1)
    grace: timedelta = timedelta(seconds=30)
    worker_id: str = field(default_factory=default_worker_id)
    retry_base: timedelta = timedelta(seconds=1)
    retry_cap: timedelta = timedelta(hours=1)
    # An async def handler's event loop: "uvloop" when it is installed ("auto"), or asyncio's.
    event_loop: str = "auto"

    def __post_init__(self) -> None:
        if self.event_loop not in EVENT_LOOPS:
            raise UsageError(f"--event-loop must be one of {', '.join(EVENT_LOOPS)}")
        if not self.queues:
            raise UsageError("give at least one --queue")
        for name in self.queues:
            check_queue_length(name, "--queue")
        if not 1 <= self.concurrency <= 1000:
            raise UsageError("--concurrency must be between 1 and 1000")
        if self.lease_ttl < timedelta(milliseconds=100):
            raise UsageError("--lease-ttl must be at least 100ms")
        if self.heartbeat >= self.lease_ttl:
            raise UsageError(
                f"--heartbeat-every ({self.heartbeat.total_seconds():g}s) must be shorter than "
                f"--lease-ttl ({self.lease_ttl.total_seconds():g}s), or the lease lapses "
                "between heartbeats"
            )
        if self.heartbeat <= timedelta(0):
            raise UsageError("--heartbeat-every must be greater than zero")

    @property
    def heartbeat(self) -> timedelta:
        return self.heartbeat_every if self.heartbeat_every is not None else self.lease_ttl / 3


# The longest a worker's call waits for the server before it reconnects.
CALL_BOUND_S = 20.0


def worker_store(dsn: str, schema: str, config: WorkerConfig) -> WorkerStore:
    """The one way a worker's store is built (`leasectl worker`, tests and benchmarks alike)."""
    db = Database.connect(
        dsn,
        schema,
        max_size=min(config.concurrency, 8) + 3,
        application_name=f"leasectl worker {config.worker_id}"[:63],
        # A call waiting for a connection gives up within a heartbeat interval, so an outage
        # is noticed (and retried) at the pace of heartbeats.
        pool_timeout=max(0.5, config.heartbeat.total_seconds()),
        generic_plans=True,
        # A call unanswered for a lease's length is of no use (its leases lapsed meanwhile).
        call_bound=min(config.lease_ttl.total_seconds(), CALL_BOUND_S),
    )
    return WorkerStore(db)


@dataclass
class WorkerStats:
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    trips: int = 0  # statements that completed and/or claimed (the dispatcher's round trips)


BATCH_WAIT = 0.01  # seconds a busy worker may wait to claim a fuller batch
LOOP_STOP_S = 5.0  # at shutdown, how long cancelled async tasks get to end


class Worker:
    """One worker process's runtime (see the module docstring for its threads).

    The caller's thread is the dispatcher: each round trip completes the jobs that finished
    since the last one and claims as many as there are free slots, in one statement. With
    ``concurrency`` 1 it also runs the handler itself, so a job costs one round trip and no
    thread hand-off; otherwise ``concurrency`` handler threads take jobs from a queue.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        config: WorkerConfig,
        handler: Handler | AsyncHandler,
        *,
        store: WorkerStore | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.config = config
        self.handler = handler
        # An async def handler: its jobs run as tasks on one event loop thread (made in run()).
        self.is_async = is_async_handler(handler)
        self._sync_handler = cast(Handler, handler)
        self._async_handler = cast(AsyncHandler, handler)
        self._loop: asyncio.AbstractEventLoop | None = None
        # Async jobs that succeeded in this round of the loop, handed to the dispatcher at its
        # end, together (a batch's jobs often end together): one lock and one wake-up.
        self._round: list[AsyncJobContext] = []
        self._async_tx: AsyncHandlerTransactions | None = None  # (on the loop only)
        self._store = store
        self._owns_store = store is None
        self.stats = WorkerStats()
        self.stopping = threading.Event()  # no more claims
        self.closed = threading.Event()  # shut down: nothing held any more
        self.started = threading.Event()
        self.listening = threading.Event()  # LISTEN took effect once: enqueues wake us
        self._held: dict[int, LeaseContext] = {}
        self._lock = threading.Lock()
        self._running = 0  # jobs handed to a handler whose handler has not returned
        self._finished: list[LeaseContext] = []  # handlers returned: results to write
        self._wake = threading.Event()  # a handler returned, or a NOTIFY said there is work
        self._announced = threading.Event()  # a NOTIFY said a job was enqueued on our queues
        # (or one was paused or resumed)
        self.paused: set[str] = set()  # our queues last seen paused (logged once each)
        self._jobs: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        self._handler_tx: HandlerTransactions | None = None  # made when a handler first asks
        self._open_transaction = self._transaction  # (bound once, not per job)
        self._open_async_transaction = self._async_transaction

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def store(self) -> WorkerStore:
        if self._store is None:
            self._store = worker_store(self.dsn, self.schema, self.config)
        return self._store

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    def held(self) -> list[LeaseContext]:
        with self._lock:
            return list(self._held.values())

    # -- main loop --------------------------------------------------------------------------

    def run(
        self, *, install_signals: bool = True, start_retry: timedelta = timedelta(0)
    ) -> WorkerStats:
        """Run until stop() or SIGTERM/SIGINT; raises only for start-up errors.

        ``start_retry``: how long to keep trying while the database cannot be reached at
        start-up (a worker started with, or during a restart of, its server).
        """
        loop_name = ""
        if self.is_async:  # (a usage error, before anything is started)
            self._loop, loop_name = new_event_loop(self.config.event_loop)
        try:
            store = self._start(start_retry)
        except BaseException:
            if self._loop is not None:
                self._loop.close()
            raise
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        threads = [
            threading.Thread(target=self._heartbeat_loop, name="leasectl-heartbeat", daemon=True),
            threading.Thread(target=self._listen_loop, name="leasectl-listen", daemon=True),
            threading.Thread(target=self._deadline_loop, name="leasectl-deadline", daemon=True),
        ]
        loop_thread = None
        if self._loop is not None:
            loop_thread = threading.Thread(
                target=self._loop_main, name="leasectl-loop", daemon=True
            )
            threads.append(loop_thread)
        elif self.config.concurrency > 1:
            threads += [
                threading.Thread(target=self._handler_loop, name=f"leasectl-job-{n}", daemon=True)
                for n in range(self.config.concurrency)
            ]
        for thread in threads:
            thread.start()
        log.info(
            "worker %s started on %s%s",
            self.worker_id,
            ",".join(self.config.queues),
            f" (async handler, {loop_name} event loop)" if loop_name else "",
        )
        self._look_for_pauses()
        self.started.set()
        unwritten: list[LeaseContext] = []
        try:
            unwritten = self._dispatch_loop()
        finally:
            self._shutdown(unwritten)  # heartbeats go on while running handlers finish
            if loop_thread is not None:
                self._stop_loop(loop_thread)
            self.closed.set()
            for _ in range(self.config.concurrency):
                self._jobs.put(None)
            threads[0].join(timeout=5)
            if self._owns_store:
                store.close()
        return self.stats

    def _start(self, start_retry: timedelta) -> WorkerStore:
        """Connect, check the schema and register (in that order, before anything else)."""
        give_up = time.monotonic() + start_retry.total_seconds()
        failures = 0
        while True:
            try:
                store = self.store
                store.worker_register(
                    self.worker_id,
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    queues=self.config.queues,
                    lease_ttl=self.config.lease_ttl,
                    heartbeat_every=self.config.heartbeat,
                )
                return store
            except ConnectionFailed as exc:
                left = give_up - time.monotonic()
                if left <= 0 or self.stopping.is_set():
                    raise
                failures += 1
                log.warning("worker %s: cannot start yet: %s", self.worker_id, exc)
                self.stopping.wait(min(left, reconnect_delay(failures, base=0.1, cap=2.0)))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("worker %s: signal %d, stopping", self.worker_id, signum)
        self.stop()

    def _dispatch_loop(self) -> list[LeaseContext]:
        """Complete what finished and claim for the free slots, one statement per trip.

        Returns the finished jobs whose results are not written yet (when stopping).
        """
        failures = 0
        queue_index = 0
        # Under load, claim in batches: with most slots busy, wait a moment (at most
        # BATCH_WAIT) for a quarter of them to free up rather than making one trip per job.
        min_batch = max(1, self.config.concurrency // 4)
        short_since: float | None = None
        finished: list[LeaseContext] = []
        poll_s = self.config.poll_interval.total_seconds()
        expired_checked: dict[str, float] = {}  # queue -> when lapsed leases were looked for
        # queue -> (claim key to resume from, when the queue was last read from its head).
        # While claims come back full (a backlog), each starts at the first job of the one
        # before instead of at the queue's head, over the index entries every claim since the
        # last vacuum left behind (WorkerStore.complete_and_claim). A job that lands ahead of that
        # point (a higher priority, a released lease) is reached when the queue is read from
        # its head again: after a short claim (at once), an announced enqueue, or at the
        # latest one poll interval after the last head read.
        resume: dict[str, tuple[ClaimKey, float]] = {}
        # A claim of a paused queue takes nothing (the statement looks); whether our queues are
        # paused is read only to say so in the log: after an announcement (a pause or resume
        # sends one) when a claim from the head comes back empty, at most once a second (not
        # once per enqueue into a paused queue).
        pauses_every = min(poll_s, 1.0)
        pauses_read_at = time.monotonic()
        look_for_pauses = False
        while True:
            self._wake.clear()  # cleared before looking, so no wake-up between is lost
            if self._announced.is_set():
                self._announced.clear()
                resume.clear()
                look_for_pauses = True
            with self._lock:
                finished += self._finished
                self._finished.clear()
                free = self.config.concurrency - self._running
            if self.stopping.is_set():
                return finished
            if free <= 0:  # every slot busy (finished jobs free theirs): a handler wakes us
                self._wake.wait(1.0)
                continue
            if free < min_batch:
                now = time.monotonic()
                short_since = now if short_since is None else short_since
                if now - short_since < BATCH_WAIT:
                    self._wake.wait(BATCH_WAIT - (now - short_since))
                    continue
            short_since = None
            name = self.config.queues[queue_index % len(self.config.queues)]
            queue_index += 1
            finished = self._drop_lost(finished)
            sent = time.monotonic()  # the lease runs from the server's now(): after this
            from_key, head_read_at = resume.pop(name, (None, sent))
            if sent - head_read_at >= poll_s:
                from_key, head_read_at = None, sent
            # Lapsed leases are the watcher's to requeue; a worker that found too little Pending
            # work (read from the queue's head) looks for them too, at most once per poll
            # interval and queue.
            take_expired = from_key is None and sent - expired_checked.get(name, 0.0) >= poll_s
            try:
                leases, refused = self.store.complete_and_claim(
                    [c.lease for c in finished],
                    name,
                    self.worker_id,
                    self.config.lease_ttl,
                    free,
                    take_expired=take_expired,
                    from_key=from_key,
                )
                failures = 0
                self.stats.trips += 1
            except ConnectionFailed as exc:
                # Safe to retry the completions: they are fenced, a second try cannot apply
                # twice. Those whose lease ran out meanwhile are given up.
                failures += 1
                self._lost_past_deadline(finished, exc)
                delay = reconnect_delay(failures, base=0.2)
                log.warning("worker %s: %s; retrying in %.1fs", self.worker_id, exc, delay)
                self.stopping.wait(delay)
                continue
            if take_expired and len(leases) < free:
                expired_checked[name] = sent
            if leases and name in self.paused:
                self.paused.discard(name)
                log.info("worker %s: queue %s was resumed", self.worker_id, echo(name))
            if (
                look_for_pauses
                and not leases
                and from_key is None
                and sent - pauses_read_at >= pauses_every
            ):
                look_for_pauses = not self._look_for_pauses()
                pauses_read_at = sent
            if len(leases) == free:
                resume[name] = (leases[0].job.claim_order, head_read_at)
            self._written(finished, refused)
            finished = []
            deadline = sent + self.config.lease_ttl.total_seconds()
            if self._loop is not None and leases:
                self._hand_to_loop(self._loop, leases, deadline)
            for lease in leases if self._loop is None else ():
                ctx = JobContext(lease, deadline=deadline, _open_transaction=self._open_transaction)
                self._hold([ctx])
                self.stats.claimed += 1
                if self.config.concurrency == 1:
                    self._run_job(ctx)  # inline: its result rides on the next trip
                else:
                    self._jobs.put(ctx)
            # (A short claim from a resume point is no sign of an idle queue: the next trip
            # reads it from its head, without waiting.)
            if not leases and from_key is None and queue_index % len(self.config.queues) == 0:
                with self._lock:
                    idle = not self._finished
                if idle:
                    self._wake.wait(poll_s)

    def _look_for_pauses(self) -> bool:
        """Read which of our queues are paused and log each change once; False when the
        database could not be read (look again later)."""
        try:
            now_paused = self.store.paused(self.config.queues)
        except LeasectlError as exc:  # (only the log needs it: the claims enforce a pause)
            log.debug("worker %s: reading paused queues: %s", self.worker_id, exc)
            return False
        for pause in now_paused:
            if pause.queue not in self.paused:
                log.warning(
                    "worker %s: queue %s is paused (since %s, by %s: %s); its jobs wait until "
                    "`leasectl resume`",
                    self.worker_id,
                    echo(pause.queue),
                    pause.paused_at.isoformat(timespec="seconds"),
                    echo(pause.paused_by),
                    echo(pause.reason),
                )
        names = {pause.queue for pause in now_paused}
        for name in sorted(self.paused - names):
            log.info("worker %s: queue %s was resumed", self.worker_id, echo(name))
        self.paused = names
        return True

    def _drop_lost(self, finished: list[LeaseContext]) -> list[LeaseContext]:
        """Finished jobs whose lease is known lost are not written; the rest are."""
        live = []
        for ctx in finished:
            if ctx.lost or ctx.is_cancelled():
                self._mark_lost(ctx, "lease lost before the result could be written")
                self._forget(ctx)
            else:
                live.append(ctx)
        return live

    def _hold(self, contexts: Sequence[LeaseContext]) -> None:
        """Hold newly claimed jobs (heartbeated, released at shutdown) and count them running.

        A job held under an earlier attempt was taken over by this very worker: that lease
        lapsed while its handler still ran (no heartbeat got through), and a claim of lapsed
        leases took the job again. The earlier attempt is lost (its handler is told); only the
        new one is held, and the earlier one's end must not let go of it (``_let_go``)."""
        replaced = []
        with self._lock:
            for ctx in contexts:
                earlier = self._held.get(ctx.job.id)
                if earlier is not None:
                    replaced.append((earlier, ctx.lease.attempt))
                self._held[ctx.job.id] = ctx
            self._running += len(contexts)
        for earlier, attempt in replaced:
            self._mark_lost(
                earlier, f"lease lapsed; this worker took the job over (attempt {attempt})"
            )

    def _let_go(self, ctx: LeaseContext) -> None:
        """(Under the lock.) Stop holding ``ctx``'s job, unless it is held under a later
        attempt (``_hold``)."""
        if self._held.get(ctx.job.id) is ctx:
            del self._held[ctx.job.id]

    def _written(self, finished: list[LeaseContext], refused: set[int]) -> None:
        completed = len(finished)
        if refused:
            for ctx in finished:
                if ctx.lease.job.id in refused:
                    self._mark_lost(ctx, "the database refused the result: lease taken over")
                    completed -= 1
        self.stats.completed += completed
        with self._lock:  # (one lock for the trip's jobs, not one per job)
            for ctx in finished:
                self._let_go(ctx)

    def _forget(self, ctx: LeaseContext) -> None:
        with self._lock:
            self._let_go(ctx)

    # -- one job ----------------------------------------------------------------------------

    def _handler_loop(self) -> None:
        while (ctx := self._jobs.get()) is not None:
            self._run_job(ctx)

    def _run_job(self, ctx: JobContext) -> None:
        error: BaseException | None = self._unusable(ctx)
        if error is None:
            try:
                result = self._sync_handler(ctx)
                if inspect.iscoroutine(result):  # e.g. a lambda around an async def
                    result.close()
                    raise TypeError(
                        "the handler returned a coroutine, which the worker does not await: "
                        "make the handler itself async def"
                    )
            except BaseException as exc:
                if not fails_attempt(exc):
                    self._interrupted(ctx, exc)
                    return
                error = exc
        if self._handler_ended(ctx, error):
            self._record_failure(ctx, error)

    def _interrupted(self, ctx: LeaseContext, error: BaseException) -> None:
        """A handler raised KeyboardInterrupt: stop, as Ctrl+C does; its job is handed back."""
        log.warning("%s; stopping", lost_line(self.worker_id, ctx.lease, f"raised {shown(error)}"))
        with self._lock:
            self._running -= 1
        self.stop()

    def _unusable(self, ctx: LeaseContext) -> UnusableJob | None:
        if ctx.lease.unusable is None:
            return None
        log.warning(
            "worker %s: job %d failed without running: %s",
            self.worker_id,
            ctx.job.id,
            ctx.lease.unusable,
        )
        return UnusableJob(ctx.lease.unusable)

    def _handler_ended(self, ctx: LeaseContext, error: BaseException | None) -> bool:
        """Hand a success to the dispatcher's next trip; True when a failure (or a lost lease)
        is left to record (``_record_failure``, which blocks on the database)."""
        ctx.finishing = True
        if ctx.committed:
            self._committed(ctx, error)
            return False
        if error is None and not (ctx.lost or ctx.is_cancelled()):
            with self._lock:
                self._running -= 1
                self._finished.append(ctx)  # written by the dispatcher's next trip
            self._wake.set()
            return False
        return True

    def _record_failure(self, ctx: LeaseContext, error: BaseException | None) -> None:
        try:
            self._finish_failed(ctx, error)
        except Exception:
            log.exception("worker %s: job %d: unexpected error", self.worker_id, ctx.job.id)
        finally:
            with self._lock:
                self._let_go(ctx)
                self._running -= 1
            self._wake.set()

    # -- async handlers: one event loop thread ------------------------------------------------

    def _loop_main(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _hand_to_loop(
        self, loop: asyncio.AbstractEventLoop, leases: list[Lease], deadline: float
    ) -> None:
        """The dispatcher's side: hold the jobs, then start their tasks on the loop (one
        wake-up of the loop per claim trip)."""
        contexts = [
            AsyncJobContext(
                lease,
                deadline=deadline,
                _loop=loop,
                _open_transaction=self._open_async_transaction,
            )
            for lease in leases
        ]
        self._hold(contexts)
        self.stats.claimed += len(contexts)
        loop.call_soon_threadsafe(self._start_tasks, contexts)

    def _start_tasks(self, contexts: list[AsyncJobContext]) -> None:
        # (The held context keeps its task referenced until the job is written.)
        create = asyncio.get_running_loop().create_task
        for ctx in contexts:
            ctx._task = create(self._run_job_async(ctx))

    def _end_round(self) -> None:
        """Scheduled by the first success of a round of the loop, run after its last."""
        done, self._round = self._round, []
        with self._lock:
            self._running -= len(done)
            self._finished += done  # written by the dispatcher's next trip
        self._wake.set()

    async def _run_job_async(self, ctx: AsyncJobContext) -> None:
        error: BaseException | None = None
        if ctx.lease.unusable is not None:
            error = self._unusable(ctx)
        else:
            try:
                await self._async_handler(ctx)
            except BaseException as exc:
                # (Cancelled by the worker: the lease is lost, nothing will be written. By
                # anything else: a failure like any other.)
                if not fails_attempt(exc):
                    ctx._returned = True
                    self._interrupted(ctx, exc)
                    return
                error = exc
        ctx._returned = True
        if error is None and not (ctx.committed or ctx.lost or ctx.is_cancelled()):
            ctx.finishing = True
            if not self._round:
                asyncio.get_running_loop().call_soon(self._end_round)
            self._round.append(ctx)
        elif self._handler_ended(ctx, error):
            # Writing a failure blocks (and retries while the database is away): off the loop.
            await asyncio.to_thread(self._record_failure, ctx, error)

    def _cancel_after_grace(self, ctx: LeaseContext) -> None:
        """A lost lease's task is told at once (``cancelled``) and cancelled after ``--grace``
        if it is still running (a sync handler keeps its thread until it returns)."""
        loop = self._loop
        if loop is None or not isinstance(ctx, AsyncJobContext):
            return

        def cancel() -> None:
            task = ctx._task
            if task is not None and not ctx._returned and not task.done():
                log.info(
                    "worker %s: job %d: cancelling its task (lease lost %gs ago)",
                    self.worker_id,
                    ctx.job.id,
                    self.config.grace.total_seconds(),
                )
                task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop is closed: no task is left
            loop.call_soon_threadsafe(loop.call_later, self.config.grace.total_seconds(), cancel)

    def _stop_loop(self, thread: threading.Thread) -> None:
        """After shutdown: cancel the tasks still running (their leases were handed back), let
        them roll back and end, close the async transactions' connections, stop the loop."""
        loop = self._loop
        assert loop is not None
        done = asyncio.run_coroutine_threadsafe(self._end_tasks(), loop)
        try:
            done.result(timeout=LOOP_STOP_S + 1)
        except Exception as exc:
            log.warning("worker %s: stopping the event loop: %r", self.worker_id, exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=LOOP_STOP_S)

    async def _end_tasks(self) -> None:
        tasks = [
            ctx._task
            for ctx in self.held()
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
    async def _async_transaction(self, ctx: AsyncJobContext) -> AsyncIterator[Any]:
        """AsyncJobContext.transaction: ``_transaction`` on the loop's AsyncConnections."""
        if self._async_tx is None:
            name = f"leasectl handler {self.worker_id}"
            self._async_tx = AsyncHandlerTransactions(self.store.db, name)
        transactions = self._async_tx

        def completing() -> None:
            ctx.finishing = True  # (as in _transaction)

        try:
            async with transactions.completing(ctx.lease, completing) as conn:
                yield conn
        except LeaseLost:
            self._mark_lost(ctx, "the database refused the completion: the lease was lost")
            raise
        except BaseException:
            ctx.finishing = False
            raise
        ctx.committed = True

    # -- a handler's own transaction -----------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self, ctx: JobContext) -> Iterator[Any]:
        """JobContext.transaction: the job's completion commits with the handler's writes."""
        with self._lock:
            if self._handler_tx is None:
                name = f"leasectl handler {self.worker_id}"
                self._handler_tx = HandlerTransactions(self.store.db, name)
            transactions = self._handler_tx

        def completing() -> None:
            # From here a refused heartbeat means the job was completed, not lost (the
            # completion's row lock makes a concurrent heartbeat wait for the commit).
            ctx.finishing = True

        try:
            with transactions.completing(ctx.lease, completing) as conn:
                yield conn
        except LeaseLost:
            self._mark_lost(ctx, "the database refused the completion: the lease was lost")
            raise
        except BaseException:
            ctx.finishing = False  # rolled back, or its commit is unknown: the handler goes on
            raise
        ctx.committed = True

    def _committed(self, ctx: LeaseContext, error: BaseException | None) -> None:
        """The handler's transaction completed the job: nothing left to write."""
        if error is not None:
            log.warning(
                "worker %s: job %d attempt %d completed in its transaction; the handler then "
                "raised %s (not recorded)",
                self.worker_id,
                ctx.job.id,
                ctx.lease.attempt,
                echo(shorten(_error_text(error), 200)),
            )
        with self._lock:
            self.stats.completed += 1
            self._let_go(ctx)
            self._running -= 1
        self._wake.set()

    def _write_finished(self, finished: list[LeaseContext], deadline: float) -> None:
        """Write results outside the dispatch loop (shutdown): retry until written or lost."""
        while finished:
            finished = self._drop_lost(finished)
            if not finished:
                return
            try:
                accepted = self.store.complete([c.lease for c in finished])
            except ConnectionFailed as exc:
                self._lost_past_deadline(finished, exc, grace_end=deadline)
                self.closed.wait(0.5)
                continue
            self._written(finished, {c.job.id for c in finished} - accepted)
            return

    def _lost_past_deadline(
        self, finished: list[LeaseContext], exc: ConnectionFailed, *, grace_end: float = math.inf
    ) -> None:
        """The database is unreachable: give up the results whose lease (or grace) ran out."""
        now = time.monotonic()
        for ctx in finished:
            if now >= min(ctx.deadline, grace_end):
                self._mark_lost(ctx, f"database unreachable past the lease ({exc})")

    def _finish_failed(self, ctx: LeaseContext, error: BaseException | None) -> None:
        """Record a handler failure, fenced; retry a lost connection while the lease may hold."""
        while True:
            if ctx.lost or ctx.is_cancelled() or error is None:
                self._mark_lost(ctx, "lease lost before the result could be written")
                return
            delay = retry_delay(
                ctx.lease.attempt, base=self.config.retry_base, cap=self.config.retry_cap
            )
            try:
                status = self.store.fail(
                    ctx.lease,
                    _error_text(error),
                    detail=traceback_text(error),
                    retry_delay=delay,
                    retry=not isinstance(error, PermanentError),
                )
            except ConnectionFailed as exc:
                if time.monotonic() >= ctx.deadline:
                    self._mark_lost(ctx, f"database unreachable past the lease ({exc})")
                    return
                self.closed.wait(0.5)
                continue
            if status is None:
                self._mark_lost(ctx, "the database refused the result: lease taken over")
            else:
                self.stats.failed += 1
                text = _error_text(error)
                log.warning(failure_line(self.worker_id, ctx.lease, text, status, delay))
            return

    def _mark_lost(self, ctx: LeaseContext, why: str) -> None:
        if not ctx.lost:
            ctx.lost = True
            self.stats.lost += 1
            log.warning(lost_line(self.worker_id, ctx.lease, why))
            self._cancel_after_grace(ctx)
        ctx._set_cancelled()

    # -- wake-ups ---------------------------------------------------------------------------

    def _listen_loop(self) -> None:
        """LISTEN for enqueues of our queues so idle workers start at once, not at the next poll.

        Polling stays as the fallback: a lost notification only delays work by poll_interval.
        """
        wanted = {q[:NOTIFY_QUEUE_CHARS] for q in self.config.queues}
        failures = 0
        while not self.stopping.is_set():
            try:
                with self.store.listen() as notifications:
                    failures = 0
                    # Anything enqueued before LISTEN took effect was not announced: look once,
                    # from the queues' heads.
                    self._announced.set()
                    self._wake.set()
                    self.listening.set()
                    for payload in notifications(lambda: self.stopping.is_set()):
                        if payload in wanted:
                            self._announced.set()
                            self._wake.set()
            except ConnectionFailed as exc:
                failures += 1
                log.debug("worker %s: listen: %s", self.worker_id, exc)
                self.stopping.wait(reconnect_delay(failures, base=0.5))

    # -- heartbeats -------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        every = self.config.heartbeat.total_seconds()
        while not self.closed.wait(every):
            self.beat()

    def beat(self) -> None:
        """Renew every held lease in one statement; leases not renewed are lost."""
        held = [c for c in self.held() if not c.lost]
        sent = time.monotonic()
        try:
            self.store.worker_seen(self.worker_id)
            renewed = self.store.heartbeat([c.lease for c in held], self.config.lease_ttl)
        except ConnectionFailed as exc:
            log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
            now = time.monotonic()
            for ctx in held:
                if now >= ctx.deadline:
                    self._mark_lost(ctx, "could not heartbeat before the lease lapsed")
            return
        refused = []
        for ctx in held:
            if ctx.job.id in renewed:
                ctx.deadline = sent + self.config.lease_ttl.total_seconds()
            elif not ctx.finishing:
                # (A job whose result was written meanwhile is not renewed either: not lost.)
                refused.append(ctx)
        if not refused:
            return
        # Cancelled by an operator, or taken over: one read, only when a heartbeat was refused.
        try:
            cancelled = self.store.cancelled([ctx.job.id for ctx in refused])
        except ConnectionFailed:
            cancelled = set()
        for ctx in refused:
            if ctx.job.id in cancelled:
                self._mark_lost(ctx, "heartbeat rejected: the job was cancelled by an operator")
            else:
                self._mark_lost(ctx, "heartbeat rejected: the lease was taken over")

    def _deadline_loop(self) -> None:
        """Cancel handlers whose lease lapsed without a successful heartbeat.

        Independent of any database call in flight: when the server is unreachable, a blocked
        heartbeat must not delay the moment a handler learns it may no longer hold its job.
        """
        tick = min(0.1, self.config.lease_ttl.total_seconds() / 10)
        while not self.closed.wait(tick):
            now = time.monotonic()
            for ctx in self.held():
                if not ctx.lost and not ctx.finishing and now >= ctx.deadline:
                    self._mark_lost(ctx, "no heartbeat got through before the lease lapsed")

    # -- shutdown ---------------------------------------------------------------------------

    def _shutdown(self, unwritten: list[LeaseContext]) -> None:
        """Let running handlers finish within the grace period, writing their results, then
        release what is left."""
        deadline = time.monotonic() + self.config.grace.total_seconds()
        finished = unwritten
        while True:
            self._wake.clear()
            with self._lock:
                finished += self._finished
                self._finished.clear()
                running = self._running
            if finished:
                self._write_finished(finished, deadline)
                finished = []
            if running == 0 or time.monotonic() >= deadline:
                break
            self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        leftover = [c for c in self.held() if not c.lost]
        for ctx in leftover:
            ctx.lost = True  # never write a result for a job we hand back
            ctx._set_cancelled()
        if leftover:
            try:
                released = self.store.release([c.lease for c in leftover])
                self.stats.released += len(released)
                log.info("worker %s: released %d unfinished jobs", self.worker_id, len(released))
            except LeasectlError as exc:
                log.warning("worker %s: could not release: %s", self.worker_id, exc)
        try:
            self.store.worker_stopped(self.worker_id)
        except LeasectlError as exc:
            log.warning("worker %s: could not record the stop: %s", self.worker_id, exc)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)


def _error_text(error: BaseException) -> str:
    if isinstance(error, UnusableJob):
        return no_nul(str(error))[:4000]
    return error_text(error)


def traceback_text(error: BaseException) -> str | None:
    """The handler's traceback as ``job_fail`` stores it; None when no handler ran."""
    if isinstance(error, UnusableJob):
        return None
    return bounded_traceback(error)
